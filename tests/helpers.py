"""Shared test helpers: one error check, one float32 tolerance."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest

from posenc import PosencError

FLOAT32_HALF_ULP = 2.0**-25  # at values of magnitude <= 1


@contextlib.contextmanager
def raises(*fragments: str) -> Iterator[pytest.ExceptionInfo[PosencError]]:
    """``pytest.raises(PosencError)`` whose message holds every fragment (the argument, the
    rule, the value)."""
    with pytest.raises(PosencError) as info:
        yield info
    for f in fragments:
        assert f in str(info.value), (f, str(info.value))


def as_float64(x) -> np.ndarray:
    """NumPy or torch values (any float dtype, any device) as a float64 NumPy array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def within_float32(got, want: np.ndarray, *, scale: float = 1.0) -> None:
    """``got`` is the float64 ``want`` rounded once to float32 (within a half ulp)."""
    err = np.abs(as_float64(got) - want).max(initial=0.0)
    assert err <= FLOAT32_HALF_ULP * scale + 1e-12, f"max error {err:.3g}"
