"""Any Python Array API library (JAX, array-api-strict, CuPy): its backend (the direct
formula's array operations; there is no exact engine here), its input handling, its dtypes,
and what JAX needs of its own (tracers, ``jax_enable_x64``)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from posenc.errors import PosencError
from posenc.evaluate.libs.base import FLOATS, Backend, dtype_name
from posenc.evaluate.libs.numpy import host_positions
from posenc.evaluate.positions import Positions


def _jax() -> Any:
    return sys.modules.get("jax")


def namespace_dtype(xp: Any, dtype: Any) -> Any:
    """The namespace's float dtype for ``dtype`` (default float32)."""
    name = dtype_name(dtype)
    if name not in FLOATS or not hasattr(xp, name):
        raise PosencError(
            f"`dtype` must be a float dtype of {xp.__name__} (float32, float64"
            f"{', float16, bfloat16' if hasattr(xp, 'bfloat16') else ''}), got {dtype!r}"
        )
    return getattr(xp, name)


def _device(like: Any) -> Any:
    return getattr(like, "device", None) if like is not None else None


def _to_host(xp: Any, x: Any) -> Any:
    try:
        return np.asarray(x)
    except (TypeError, ValueError, RuntimeError):  # array-api-strict refuses __array__
        return np.asarray(xp.asarray(x, copy=True).tolist() if x.ndim else x.tolist())


class ArrayApiBackend(Backend):
    """An Array API namespace ``xp``. JAX without x64 has no float64 (and no int64):
    :attr:`has_float64` says so, and the evaluator computes on the host or in float32."""

    name = "array-api"

    def __init__(self, xp: Any, dtype: Any = None, device: Any = None) -> None:
        self.xp = xp
        self.float32, self.float64, self.int32, self.int64 = (
            xp.float32,
            xp.float64,
            xp.int32,
            xp.int64,
        )
        self._jax = xp.__name__.startswith("jax") and _jax() is not None
        if self._jax and not _jax().config.jax_enable_x64:
            self.int64 = xp.int32  # JAX without x64 has no int64; indices fit in int32
        self.dtype = namespace_dtype(xp, dtype)

    # -- the library

    @property
    def has_float64(self) -> bool:
        return not self._jax or bool(_jax().config.jax_enable_x64)

    def positions(self, x: Any, name: str, on_device: bool) -> Positions:
        xp = self.xp
        if xp.isdtype(x.dtype, "bool") or not xp.isdtype(x.dtype, ("integral", "real floating")):
            raise PosencError(f"`{name}` must hold integers or real numbers, got {x.dtype}")
        if not self.concrete(x):
            return Positions(x, xp.isdtype(x.dtype, "integral"), None, None)
        host = host_positions(np.asarray(_to_host(xp, x)), name)
        return Positions(x, host.integral, host.low, host.high)

    def concrete(self, x: Any) -> bool:
        jax = _jax()
        return jax is None or not isinstance(x, jax.core.Tracer)

    def from_numpy(self, array: np.ndarray) -> Any:
        return self.xp.asarray(array)

    # -- array operations

    def asarray(self, values: Any, dtype: Any, like: Any) -> Any:
        return self.xp.asarray(values, dtype=dtype, device=_device(like))

    def astype(self, x: Any, dtype: Any) -> Any:
        return self.xp.astype(x, dtype)

    def take(self, x: Any, index: Any, axis: int) -> Any:
        return self.xp.take(x, index, axis=axis)

    def stack(self, xs: list[Any], axis: int) -> Any:
        return self.xp.stack(xs, axis=axis)

    def concat(self, xs: list[Any], axis: int) -> Any:
        return self.xp.concat(xs, axis=axis)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return self.xp.reshape(x, shape)

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any) -> Any:
        return self.xp.zeros(shape, dtype=dtype, device=_device(like))

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return self.xp.where(cond, a, b)

    def sin(self, x: Any) -> Any:
        return self.xp.sin(x)

    def cos(self, x: Any) -> Any:
        return self.xp.cos(x)

    def abs(self, x: Any) -> Any:
        return self.xp.abs(x)

    def floor(self, x: Any) -> Any:
        return self.xp.floor(x)

    def round(self, x: Any) -> Any:
        return self.xp.round(x)

    def bitcast(self, x: Any, dtype: Any) -> Any:
        # the Array API has no bitcast; 16-bit float dtypes reach here only from JAX
        return _jax().lax.bitcast_convert_type(x, dtype)

    def cumsum(self, x: Any, axis: int) -> Any:
        return self.xp.cumulative_sum(x, axis=axis)

    def permute(self, x: Any, axes: tuple[int, ...]) -> Any:
        return self.xp.permute_dims(x, axes)

    def arange(self, n: Any, like: Any, dtype: Any = None) -> Any:
        return self.xp.arange(n, dtype=dtype or self.xp.float64, device=_device(like))
