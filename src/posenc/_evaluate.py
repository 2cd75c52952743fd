"""The one place that chooses how a request is evaluated.

:func:`evaluator` looks at the request's library, device, dtype and whether it is traced, and
returns one of three evaluators with the same two methods (``grid`` for tables and grids,
``points`` for position arrays):

- :class:`Engine`: NumPy, and eager PyTorch on a real device (for modules, the CPU): the fast
  exact engine (:mod:`posenc._engine`);
- :class:`Direct`: the formula in plain array operations (:mod:`posenc._direct`): in float64
  for ``torch.compile``, meta tensors (meta in, meta out), module forwards on an accelerator
  (nothing read on or copied from the host), JAX with x64 and other Array API libraries;
  in float32 alone (:mod:`posenc._float32`) for ``torch.export``, ONNX and MPS;
- :class:`JaxX32`: JAX with x64 off, whose devices have no float64: concrete arrays and grids
  on the NumPy engine (bit for bit the NumPy path), traced positions in float32 alone on the
  device.

Every evaluator checks the output size against the memory that must hold it before
allocating (:func:`posenc._validate.check_size`).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from . import _direct
from ._backends import (
    ArrayApiOps,
    Backend,
    NumpyBackend,
    TorchBackend,
    TorchOps,
    _itemsize,
    array_namespace,
    backend_for,
    dtype_name,
    is_torch,
)
from ._engine import fill_grid, fill_points
from ._layout import Plan
from ._positions import Progression
from ._validate import PosencError, _concrete, check_size, tracing


class _Output:
    """What every evaluator knows of its output: the dtype, and its largest finite value."""

    dtype: Any
    float32_only = False  # every operation in float32 (Direct in exports and on MPS)

    @property
    def largest(self) -> float:
        return _largest(self.dtype)


class Engine(_Output):
    """The exact engine on a NumPy or torch backend."""

    def __init__(self, bk: Backend) -> None:
        self.bk = bk
        self.dtype = bk.dtype

    def grid(
        self,
        plan: Plan,
        axes: list[Progression],
        order: list[int],
        extra: int = 0,
        padding_idx: int | None = None,
    ) -> Any:
        """``[extra + prod(lengths), dim]``: ``extra`` zero rows, then the grid's cells with
        axis ``order[0]`` outermost."""
        dims = [p.length for p in axes]
        cells = math.prod(dims)
        check_size("the output", (extra + cells, plan.dim), _itemsize(self.dtype), _dev(self.bk))
        out = self.bk.empty((extra + cells, plan.dim))
        out[:extra] = 0
        view = out[extra:].reshape(*[dims[a] for a in order], plan.dim)
        fill_grid(self.bk, view, plan, axes, [order.index(a) for a in range(len(axes))])
        if padding_idx is not None and len(axes) == 1:
            row = (padding_idx - axes[0].start) / axes[0].step
            if row == int(row) and 0 <= row < cells:
                out[extra + int(row)] = 0
        return out

    def points(self, plan: Plan, x: Any, integral: bool, padding_idx: int | None = None) -> Any:
        """``[N, k]`` positions -> ``[N, dim]``."""
        check_size("the output", (x.shape[0], plan.dim), _itemsize(self.dtype), _dev(self.bk))
        out = self.bk.empty((x.shape[0], plan.dim))
        fill_points(self.bk, out, plan, x, integral)
        if padding_idx is not None:
            out[x[:, 0] == padding_idx] = 0
        return out


class Direct(_Output):
    """The direct formula in the caller's library (``like`` gives the device)."""

    def __init__(self, ops: Any, dtype: Any, like: Any, float32_only: bool = False) -> None:
        self.ops = ops
        self.dtype = dtype
        self.like = like
        self.float32_only = float32_only

    def grid(
        self,
        plan: Plan,
        axes: list[Any],
        order: list[int],
        extra: int = 0,
        padding_idx: int | None = None,
    ) -> Any:
        """As :meth:`Engine.grid`; ``axes`` are Progressions or float64 arrays of positions."""
        ops = self.ops
        body = _direct.grid(ops, axes, order, plan, self.dtype, self.like, self.float32_only)
        body = ops.reshape(body, (-1, plan.dim))
        if padding_idx is not None and len(axes) == 1:
            a = axes[0]
            work = ops.float32 if self.float32_only else ops.float64
            values = (
                ops.arange(a.length, self.like, work) * a.step + a.start
                if isinstance(a, Progression)
                else a
            )
            pad = ops.reshape(values == float(padding_idx), (-1, 1))
            body = ops.where(pad, body * 0, body)
        if not extra:
            return body
        return ops.concat([ops.zeros((extra, plan.dim), self.dtype, self.like), body], axis=0)

    def points(self, plan: Plan, x: Any, integral: bool, padding_idx: int | None = None) -> Any:
        return _direct.points(
            self.ops, x, plan, self.dtype, padding_idx, self.float32_only, integral
        )


class JaxX32(_Output):
    """JAX without x64. Concrete positions and grids (whose positions are static): the NumPy
    engine on the host, the same bits as NumPy, returned as JAX arrays. Positions traced by
    ``jax.jit`` or ``jax.vmap``: the float32-only formula on the device, within 1e-6 (no host
    callback, no float64)."""

    def __init__(self, dtype: Any) -> None:
        import jax.numpy as jnp

        self.jnp = jnp
        self.jdtype = _namespace_dtype(jnp, dtype)
        self.dtype = np.dtype(self.jdtype)
        self.engine = Engine(NumpyBackend(self.dtype))

    def grid(self, *args: Any, **kwargs: Any) -> Any:
        return self.jnp.asarray(self.engine.grid(*args, **kwargs))

    def points(self, plan: Plan, x: Any, integral: bool, padding_idx: int | None = None) -> Any:
        if not _concrete(x):
            ops = ArrayApiOps(array_namespace(x))
            return _direct.points(ops, x, plan, self.jdtype, padding_idx, True, integral)
        q = np.asarray(x)
        out = self.engine.points(plan, q.astype(np.int64) if integral else q, integral, padding_idx)
        return self.jnp.asarray(out)


Evaluator = Engine | Direct | JaxX32


def evaluator(
    *, like: Any = None, dtype: Any = None, device: Any = None, on_device: bool = False
) -> Evaluator:
    """How to evaluate a request whose result follows ``like`` (the positions, or the
    ``like=`` argument), in ``dtype`` on ``device``.

    NumPy (or nothing): the engine. torch: the engine when eager on the CPU, or on another
    device for the public functions; the direct formula when traced, exported, on meta and
    MPS, and for ``on_device`` requests (module forwards) on an accelerator, where every
    operation then stays on the device: no host read, no copy from the host (constants are
    kept there), so the call does not wait for the device and a CUDA graph can capture it.
    JAX without x64: :class:`JaxX32`; with x64: direct. Any other Array API library: direct.
    """
    xp = array_namespace(like)
    if xp is not None:
        if device is not None:
            raise PosencError("`device` applies to torch output only; the result follows `like`")
        if _is_jax(like) and not _x64():
            return JaxX32(dtype)
        ops = ArrayApiOps(xp)
        return Direct(ops, _namespace_dtype(xp, dtype), like)
    bk = backend_for(dtype, device, like=like)
    if isinstance(bk, TorchBackend):
        kind = bk.device.type
        if tracing() or kind in ("meta", "mps") or (on_device and kind != "cpu"):
            probe = like if is_torch(like) else bk.torch.empty(0, device=bk.device)
            # exported graphs and MPS: no float64 anywhere
            f32 = kind == "mps" or bool(bk.torch.compiler.is_exporting())
            return Direct(TorchOps(), bk.dtype, probe, float32_only=f32)
    return Engine(bk)


def _is_jax(x: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def _x64() -> bool:
    jax = sys.modules.get("jax")
    return bool(jax is not None and jax.config.jax_enable_x64)


_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _namespace_dtype(xp: Any, dtype: Any) -> Any:
    """The namespace's float dtype for ``dtype`` (default float32)."""
    name = dtype_name(dtype)
    if name not in _FLOATS or not hasattr(xp, name):
        raise PosencError(
            f"`dtype` must be a float dtype of {xp.__name__} (float32, float64"
            f"{', float16, bfloat16' if hasattr(xp, 'bfloat16') else ''}), got {dtype!r}"
        )
    return getattr(xp, name)


_LARGEST = {2: 65504.0, 4: float(np.finfo(np.float32).max), 8: float(np.finfo(np.float64).max)}


def _largest(dtype: Any) -> float:
    """The largest finite value of a float dtype of any library."""
    if "bfloat16" in str(dtype):
        return _LARGEST[4] * (1 - 2.0**-8)
    return _LARGEST[_itemsize(dtype)]


def _dev(bk: Backend) -> Any:
    return getattr(bk, "device", None)
