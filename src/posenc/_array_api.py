"""Any Array API namespace, and JAX: the same plan, evaluated in the caller's library.

NumPy and PyTorch have their own fast backends (:mod:`posenc._backends`). Every other library
is reached through the Python Array API standard: a plan is evaluated with standard functions
only (``take``, ``sin``, ``cos``, ``stack``, ``concat``, ``astype``), angles in float64, one
rounding at the end. This runs unchanged on array-api-strict, CuPy and JAX with x64 enabled.

JAX's default mode has no float64. There, the encoding is computed by the NumPy core on the
host through ``jax.pure_callback`` (so it stays jit-able with traced positions and vmap-able,
and equals the NumPy path bit for bit); the device never sees a float64.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ._errors import PosencError
from ._layout import ZERO, Plan


def namespace(x: Any) -> Any | None:
    """The Array API namespace of ``x``, for arrays that are neither NumPy nor torch."""
    if isinstance(x, np.ndarray | np.generic) or not hasattr(x, "__array_namespace__"):
        return None
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return None
    return x.__array_namespace__()


def is_jax(x: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def x64_enabled() -> bool:
    jax = sys.modules.get("jax")
    return bool(jax is not None and jax.config.jax_enable_x64)


def out_dtype(xp: Any, dtype: Any) -> Any:
    """The namespace's float dtype for ``dtype`` (default float32)."""
    name = _dtype_name(dtype)
    if name not in ("float16", "bfloat16", "float32", "float64") or not hasattr(xp, name):
        raise PosencError(
            f"`dtype` must be a float dtype of {xp.__name__} (float32, float64"
            f"{', float16, bfloat16' if hasattr(xp, 'bfloat16') else ''}), got {dtype!r}"
        )
    return getattr(xp, name)


def _dtype_name(dtype: Any) -> str:
    if dtype is None:
        return "float32"
    try:
        return np.dtype(dtype).name
    except TypeError:
        name = getattr(dtype, "name", None) or str(dtype)
        return str(name).rsplit(".", 1)[-1]


def _round(xp: Any, values: Any, dtype: Any) -> Any:
    """float64 -> ``dtype`` with one rounding (to odd first for 16-bit dtypes, JAX only)."""
    if dtype in (xp.float32, xp.float64):
        return xp.astype(values, dtype)
    from jax import lax  # 16-bit float dtypes here are JAX's (x64 on)

    f = values.astype(xp.float32)
    inexact = f.astype(xp.float64) != values
    bits = lax.bitcast_convert_type(f, xp.int32)
    step = xp.where(xp.abs(f.astype(xp.float64)) > xp.abs(values), -1, 1).astype(xp.int32)
    bits = bits + xp.where(inexact & ((bits & 1) == 0), step, 0).astype(xp.int32)
    return lax.bitcast_convert_type(bits, xp.float32).astype(dtype)


def points(xp: Any, x: Any, pl: Plan, dtype: Any, padding_idx: int | None = None) -> Any:
    """``[N, k]`` coordinates (any namespace with float64) -> ``[N, dim]`` in ``dtype``."""
    x64 = xp.astype(x, xp.float64)
    count = x64.shape[0]
    u = len(pl.omega)
    w = xp.asarray(pl.omega, dtype=xp.float64)
    theta = xp.take(x64, xp.asarray(pl.axis, dtype=xp.int64), axis=1) * w
    basis = xp.reshape(xp.stack((xp.sin(theta), xp.cos(theta)), axis=-1), (count, 2 * u))
    basis = xp.concat((basis, xp.zeros((count, 1), dtype=xp.float64), x64), axis=1)
    index = [
        int(s) if s >= 0 else (2 * u if s == ZERO else 2 * u + 1 + (-2 - int(s))) for s in pl.src
    ]
    out = _round(xp, xp.take(basis, xp.asarray(index, dtype=xp.int64), axis=1), dtype)
    if padding_idx is not None:
        pad = xp.reshape(x64[:, 0] == padding_idx, (count, 1))
        out = xp.where(pad, xp.zeros((), dtype=dtype), out)
    return out


def grid_coordinates(xp: Any, axes: list[np.ndarray], order: list[int]) -> Any:
    """``[cells, k]`` coordinates of a grid whose dims run along axes ``order``."""
    grids = xp.meshgrid(*[xp.asarray(axes[a], dtype=xp.float64) for a in order], indexing="ij")
    flat = [xp.reshape(g, (-1,)) for g in grids]
    by_axis = [flat[order.index(a)] for a in range(len(axes))]
    return xp.stack(by_axis, axis=1)


def jax_callback(compute: Any, positions: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """Run the NumPy core on the host from (possibly traced) JAX positions."""
    import jax

    def host(p: Any) -> np.ndarray:
        return np.asarray(compute(np.asarray(p)))

    spec = jax.ShapeDtypeStruct(shape, dtype)
    return jax.pure_callback(host, spec, positions, vmap_method="expand_dims")
