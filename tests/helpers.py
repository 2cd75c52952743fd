"""Shared test helpers: one error check, one tolerance rule, one set of backends.

- `raises`: a `PosencError` whose message names the argument, the rule and the value.
- `assert_close`: float64 output against a float64 reference of another formula.
- `assert_correctly_rounded`: an output equals the float64 reference rounded once to its
  dtype (within half a unit in the last place, plus the reference's own error).
- `within_ulps`: two paths that each round once agree within ``n`` units in the last place.
- `BACKENDS` / `to_numpy`: NumPy, torch, JAX and array-api-strict inputs, and the way back.
- `hf_rotary_module`: transformers' own rotary module for a config.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from posenc import PosencError

FLOAT32_HALF_ULP = 2.0**-25  # at values of magnitude <= 1
TOL64 = 1e-10  # float64 output vs a float64 reference written another way

# significand bits and smallest normal exponent of each output dtype
_FORMATS = {
    "float64": (52, -1022),
    "float32": (23, -126),
    "float16": (10, -14),
    "bfloat16": (7, -126),
}


@contextlib.contextmanager
def raises(*fragments: str) -> Iterator[pytest.ExceptionInfo[PosencError]]:
    """``pytest.raises(PosencError)`` whose message holds every fragment (the argument, the
    rule, the value)."""
    with pytest.raises(PosencError) as info:
        yield info
    for f in fragments:
        assert f in str(info.value), (f, str(info.value))


def dtype_name(x: Any) -> str:
    """``float32``, ``bfloat16``… of a NumPy, torch or JAX array (or a dtype)."""
    dt = getattr(x, "dtype", x)
    return str(dt).replace("torch.", "")


def to_numpy(x: Any) -> np.ndarray:
    """Any backend's array as NumPy, bit for bit (bfloat16 widened to float32, exactly)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if dtype_name(x) == "bfloat16":
            x = x.float()
        return x.numpy()
    if type(x).__module__.startswith("array_api_strict"):
        return np.from_dlpack(x)
    out = np.asarray(x)
    if out.dtype.name == "bfloat16":  # JAX's ml_dtypes bfloat16
        out = out.astype(np.float32)
    return out


def as_float64(x: Any) -> np.ndarray:
    """NumPy or torch values (any float dtype, any device) as a float64 NumPy array."""
    return to_numpy(x).astype(np.float64)


def ulp(values: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of ``dtype`` at each of ``values`` (normal or subnormal)."""
    bits, emin = _FORMATS[dtype]
    mag = np.abs(np.asarray(values, dtype=np.float64))
    with np.errstate(divide="ignore"):
        exp = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    return np.exp2(np.maximum(exp, emin) - bits)


def assert_close(got: Any, want: np.ndarray, tol: float = TOL64) -> None:
    """Same shape, max |got - want| <= tol."""
    got = as_float64(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(got - want).max(initial=0.0)
    assert err <= tol, f"max error {err:.3g} > {tol:g}"


def assert_correctly_rounded(got: Any, want64: np.ndarray, *, slack: float = 0.0) -> None:
    """``got`` is ``want64`` rounded once to ``got``'s dtype: within half a unit in the last
    place of that dtype, plus ``slack`` (the reference's own float64 error)."""
    dtype = dtype_name(got)
    g = as_float64(got)
    assert g.shape == want64.shape, (g.shape, want64.shape)
    assert np.isfinite(g).all(), "non-finite output"
    err = np.abs(g - want64)
    bound = ulp(want64, dtype) / 2 + slack + 1e-300
    bad = err > bound
    assert not bad.any(), (
        f"{bad.sum()} {dtype} values not rounded once from the reference; worst error "
        f"{err.max():.3g} at {np.argwhere(bad)[0]}"
    )


def within_float32(got: Any, want: np.ndarray, *, scale: float = 1.0) -> None:
    """``got`` is the float64 ``want`` rounded once to float32 (within a half ulp of 1)."""
    err = np.abs(as_float64(got) - want).max(initial=0.0)
    assert err <= FLOAT32_HALF_ULP * scale + 1e-12, f"max error {err:.3g}"


def within_ulps(a: Any, b: Any, n: int = 1, *, min_equal: float = 0.0) -> None:
    """Two paths that each round the same float64 values once (with float64 sines that may
    differ in the last bit) agree within ``n`` units in the last place of their dtype, and at
    least a fraction ``min_equal`` of the values are the same bits."""
    dtype = dtype_name(a)
    assert dtype == dtype_name(b), (dtype, dtype_name(b))
    x, y = as_float64(a), as_float64(b)
    assert x.shape == y.shape
    bad = np.abs(x - y) > n * ulp(np.maximum(np.abs(x), np.abs(y)), dtype)
    assert not bad.any(), f"{bad.sum()} values differ by more than {n} ulp"
    assert (x == y).mean() >= min_equal, f"only {(x == y).mean():.4f} of the values are equal"


def _backends() -> dict[str, Callable[[np.ndarray], Any]]:
    """How each installed array library makes an input from a NumPy array."""
    out: dict[str, Callable[[np.ndarray], Any]] = {"numpy": lambda a: a}
    with contextlib.suppress(ImportError):
        import torch

        out["torch"] = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    with contextlib.suppress(ImportError):
        import jax.numpy as jnp

        out["jax"] = jnp.asarray
    with contextlib.suppress(ImportError):
        import array_api_strict as xps

        out["array-api-strict"] = xps.asarray
    return out


BACKENDS = _backends()


def hf_rotary_module(config: Any) -> Any:
    """transformers' own rotary module for ``config`` (its text model's for multimodal
    families): the ``<Model>RotaryEmbedding`` class of ``config.model_type``'s module."""
    base = config.model_type.removesuffix("_text")
    mod = importlib.import_module(f"transformers.models.{base}.modeling_{base}")
    names = sorted(
        (n for n in dir(mod) if n.endswith("RotaryEmbedding") and "Vision" not in n),
        key=lambda n: ("Text" not in n, n),
    )
    return getattr(mod, names[0])(config)
