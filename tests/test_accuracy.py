"""Accuracy against mpmath: float32 within 1e-7, and the rounding the only error.

The exact value is ``sin(p * omega_k)`` with ``omega_k = base ** (-k / den)`` evaluated in
60-digit arithmetic (`helpers.exact_table`). posenc forms angles in float64, so its
pre-rounding values are within ANGLE_BOUND of the exact ones for ``|p| < 2^24``. (16-bit
outputs against the same tables: test_rounding.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.helpers import ANGLE_BOUND, as_float64, exact_table


@pytest.mark.parametrize("kind", ["int", "real"])
@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_float32_within_1e7(vaswani_exact, kind, lib):
    pos, want = vaswani_exact[kind]
    if lib == "torch":
        torch = pytest.importorskip("torch")
        pos = torch.as_tensor(pos)
    got = as_float64(posenc.encode(pos, 64))
    err = np.abs(got - want).max()
    assert err <= 1e-7, err
    # and the rounding is the only error, to within the float64 angle bound
    half_ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64) / 2
    assert (np.abs(got - want) <= half_ulp + ANGLE_BOUND).all()


def test_table_large_offsets_float32():
    # a table starting deep into the sequence, through the coarse/fine product path
    offset = 2**24 - 300
    got = posenc.table(300, 16, offset=offset).astype(np.float64)
    want = exact_table(range(offset, offset + 300), 16)
    assert np.abs(got - want).max() <= 1e-7
