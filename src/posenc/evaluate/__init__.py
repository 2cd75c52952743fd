"""Evaluation: the one place that chooses how a request is computed, and its front doors.

:func:`evaluator` asks the request's backend (:mod:`posenc.evaluate.libs`) about its library,
device, dtype and whether it is traced, and returns one of three evaluators with the same two
methods (``grid`` for tables and grids, ``points`` for position arrays):

- :class:`Engine`: NumPy, and eager PyTorch on a real device (for modules, the CPU): the fast
  exact engine (:mod:`posenc.evaluate.engine`);
- :class:`Direct`: the formula in plain array operations (:mod:`posenc.evaluate.direct`): in
  float64 for ``torch.compile``, meta tensors (meta in, meta out), module forwards on an
  accelerator (nothing read on or copied from the host), JAX with x64 and other Array API
  libraries; in float32 alone (:mod:`posenc.evaluate.float32`) for ``torch.export``, ONNX and
  MPS;
- :class:`HostEngine`: a library without float64 (JAX with x64 off): concrete arrays and grids
  on the NumPy engine (bit for bit the NumPy path), traced positions in float32 alone on the
  device.

Inside :func:`float32_only` (a context variable, so per thread and per task) every request is
the direct formula in float32 alone, whatever its library and device: on the CPU, what MPS and
exported graphs compute.

The front doors :func:`span`, :func:`points`, :func:`grid` and :func:`detr` take a resolved
plan (:mod:`posenc.spec.layout`), check the accuracy rule (:mod:`posenc.evaluate.accuracy`)
and evaluate; the public functions and the torch modules call them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from posenc.errors import PosencError, check_bool, check_int, check_size
from posenc.evaluate import direct
from posenc.evaluate.accuracy import check_on_device, check_plan
from posenc.evaluate.engine import fill_grid, fill_points
from posenc.evaluate.libs import array_namespace, backend_for, backend_of, is_torch, tracing
from posenc.evaluate.libs.base import Backend, itemsize
from posenc.evaluate.libs.numpy import NumpyBackend
from posenc.evaluate.positions import Positions, Progression, grid_axes
from posenc.spec.encoding import Encoding
from posenc.spec.layout import Plan
from posenc.spec.rotary import Rotary


class Engine:
    """The exact engine on a NumPy or torch backend."""

    float32_only = False

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.dtype = backend.dtype

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
        backend = self.backend
        dims = [p.length for p in axes]
        cells = math.prod(dims)
        check_size("the output", (extra + cells, plan.dim), itemsize(self.dtype), backend.memory())
        out = backend.empty((extra + cells, plan.dim))
        out[:extra] = 0
        view = out[extra:].reshape(*[dims[a] for a in order], plan.dim)
        fill_grid(backend, view, plan, axes, [order.index(a) for a in range(len(axes))])
        if padding_idx is not None and len(axes) == 1:
            row = (padding_idx - axes[0].start) / axes[0].step
            if row == int(row) and 0 <= row < cells:
                out[extra + int(row)] = 0
        return out

    def points(self, plan: Plan, x: Any, integral: bool, padding_idx: int | None = None) -> Any:
        """``[N, k]`` positions -> ``[N, dim]``."""
        backend = self.backend
        check_size("the output", (x.shape[0], plan.dim), itemsize(self.dtype), backend.memory())
        out = backend.empty((x.shape[0], plan.dim))
        fill_points(backend, out, plan, x, integral)
        if padding_idx is not None:
            out[x[:, 0] == padding_idx] = 0
        return out


class Direct:
    """The direct formula in the backend's library (``like`` gives the device)."""

    def __init__(self, backend: Backend, like: Any, float32_only: bool = False) -> None:
        self.backend = backend
        self.dtype = backend.dtype
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
        backend = self.backend
        body = direct.grid(backend, axes, order, plan, self.dtype, self.like, self.float32_only)
        body = backend.reshape(body, (-1, plan.dim))
        if padding_idx is not None and len(axes) == 1:
            a = axes[0]
            work = backend.float32 if self.float32_only else backend.float64
            values = (
                backend.arange(a.length, self.like, work) * a.step + a.start
                if isinstance(a, Progression)
                else a
            )
            pad = backend.reshape(values == float(padding_idx), (-1, 1))
            body = backend.where(pad, body * 0, body)
        if not extra:
            return body
        zeros = backend.zeros((extra, plan.dim), self.dtype, self.like)
        return backend.concat([zeros, body], axis=0)

    def points(self, plan: Plan, x: Any, integral: bool, padding_idx: int | None = None) -> Any:
        return direct.points(
            self.backend, x, plan, self.dtype, padding_idx, self.float32_only, integral
        )


class HostEngine:
    """A library without float64 (JAX with x64 off). Concrete positions and grids (whose
    positions are static): the NumPy engine on the host, the same bits as NumPy, returned in
    the library. Traced positions (``jax.jit``, ``jax.vmap``): the float32-only formula on the
    device, within 1e-6 (no host callback, no float64)."""

    float32_only = False

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.dtype = np.dtype(backend.dtype)
        self.engine = Engine(NumpyBackend(self.dtype))

    def grid(self, *args: Any, **kwargs: Any) -> Any:
        return self.backend.from_numpy(self.engine.grid(*args, **kwargs))

    def points(self, plan: Plan, x: Any, integral: bool, padding_idx: int | None = None) -> Any:
        backend = self.backend
        if not backend.concrete(x):
            return direct.points(backend, x, plan, backend.dtype, padding_idx, True, integral)
        q = np.asarray(x)
        out = self.engine.points(plan, q.astype(np.int64) if integral else q, integral, padding_idx)
        return backend.from_numpy(out)


Evaluator = Engine | Direct | HostEngine


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
    A library without float64 (JAX without x64): :class:`HostEngine`; any other Array API
    library: direct. Inside :func:`float32_only`: direct, in float32 alone, for every one.
    """
    backend = backend_for(dtype, device, like)
    if not backend.traced() and FLOAT32_ONLY.get():  # a compiled graph decides for itself
        return Direct(backend, backend.anchor(like), float32_only=True)
    if not backend.has_float64:
        return HostEngine(backend)
    if backend.direct(on_device):
        return Direct(backend, backend.anchor(like), float32_only=backend.float32_only())
    return Engine(backend)


FLOAT32_ONLY: ContextVar[bool] = ContextVar("FLOAT32_ONLY", default=False)
"""Whether :func:`float32_only` is on in this thread (or asyncio task)."""


@contextmanager
def float32_only(*, enabled: bool = True) -> Iterator[None]:
    """Every posenc evaluation in the ``with`` block uses the float32-only evaluator, on the
    CPU too: the numbers Apple's MPS, an exported graph (``torch.export``, ONNX, TensorRT) or
    JAX without x64 on a device compute, without that runtime. A block in the block nests
    (``enabled=False`` turns it off inside); the setting is restored when the block ends,
    also on an exception, and belongs to the thread (or asyncio task) that entered it.

    The float32-only evaluator forms angles without float64 (:mod:`posenc.evaluate.float32`):
    within 1e-6 of the truth (the default path: half a float32 ulp), for positions below 2^24
    and frequencies below 2^15 (others are refused, as an export refuses them). Outside
    posenc nothing changes; ``compat`` modes, which replay an original's own arithmetic, are
    not evaluations and are unaffected. Modules read none of their kept rows (their first
    ``cached_length`` positions) in the block: they compute every row, as their exported
    graphs do, and the rows they keep are the default path's, for the calls outside it. A
    ``torch.compile``'d function is its graph's: the block does not reach inside it.

    Args:
        enabled: turn the float32-only evaluator on (True) or off (False) in the block.

    Examples:
        >>> with posenc.float32_only():               # what MPS or an exported graph computes
        ...     f32 = posenc.table(4096, 512, dtype=torch.float32)
        >>> exact = posenc.table(4096, 512, dtype=torch.float32)
        >>> f32.shape, bool((f32 - exact).abs().max() < 1e-6), torch.equal(f32, exact)
        (torch.Size([4096, 512]), True, False)
        >>> with posenc.float32_only():
        ...     with posenc.float32_only(enabled=False):  # nested: the default path again
        ...         again = posenc.table(4096, 512, dtype=torch.float32)
        >>> torch.equal(again, exact)
        True
    """
    token = FLOAT32_ONLY.set(check_bool("enabled", enabled))
    try:
        yield
    finally:
        FLOAT32_ONLY.reset(token)


def _check(plan: Plan, bound: float | None, what: str, evaluation: Evaluator) -> None:
    check_plan(plan, bound, what, float32_only=evaluation.float32_only, dtype=evaluation.dtype)


# ---------------------------------------------------------------------------------------------
# the front doors


def span(
    plan: Plan,
    start: float,
    length: Any,
    *,
    dtype: Any,
    device: Any,
    like: Any = None,
    padding_idx: int | None = None,
    on_device: bool = False,
    step: float = 1.0,
) -> Any:
    """Rows ``start … start + length - 1`` under a resolved 1D plan (positions ``start + i *
    step``): the evaluation half of ``posenc.table``, which modules call for a run of
    positions (a table is every evaluator's fastest form). Under tracing ``length`` may be
    symbolic; the checks then wait for eager calls. ``on_device``: see :func:`evaluator`."""
    evaluation = evaluator(like=like, dtype=dtype, device=device, on_device=on_device)
    prog = Progression(start, step, length)
    if not tracing():
        _check(plan, prog.bound, "`offset` and `length`", evaluation)
    return evaluation.grid(plan, [prog], [0], padding_idx=padding_idx)


def points(plan: Plan, pos: Positions, *, coords: bool, dtype: Any, padding_idx: int | None) -> Any:
    """Checked positions ``[*s]`` (``[*s, k]`` with ``coords``) under a resolved plan ->
    ``[*s, width]``: the evaluation half of ``posenc.encode``, which modules call directly."""
    x = pos.values
    lead = tuple(x.shape[:-1]) if coords else tuple(x.shape)
    # positions not read on the host (traced, or a module's on an accelerator) are evaluated
    # where they are, and the accuracy rule is checked there
    evaluation = evaluator(like=x, dtype=dtype, on_device=pos.bound is None)
    _check(plan, pos.bound, "`positions`", evaluation)
    if pos.bound is None:
        check_on_device(plan, evaluation.backend, x, float32_only=evaluation.float32_only)
    backend = evaluation.backend
    flat = backend.reshape(x, (-1, plan.ndim))
    out = evaluation.points(plan, flat, pos.integral, padding_idx)
    return backend.reshape(out, (*lead, plan.dim))


def grid(
    plan: Plan,
    enc: Encoding,
    dims: tuple[int, ...],
    *,
    dtype: Any,
    device: Any,
    like: Any,
    crop_from: tuple[int, ...] | None = None,
    on_device: bool = False,
) -> Any:
    """The evaluation half of ``posenc.grid``: a resolved plan over a checked grid size (the
    centred crop of a ``crop_from`` grid, if given)."""
    nd = len(dims)
    axes = grid_axes(enc, dims, crop_from)
    order = list(range(nd)) if enc.tokens == "row-major" else list(range(nd))[::-1]
    evaluation = evaluator(like=like, dtype=dtype, device=device, on_device=on_device)
    _check(plan, max([a.bound for a in axes] + [0.0]), GRID_POSITIONS, evaluation)
    return evaluation.grid(plan, axes, order, extra=enc.extra_tokens)


GRID_POSITIONS = "the grid positions (`shape` and the preset's scaling options)"
"""How errors name a grid's positions."""


def rotary_grid(
    plan: Plan, axes: list[Progression], order: list[int], *, dtype: Any, device: Any, like: Any
) -> Any:
    """The evaluation half of ``posenc.rope_grid``: ``[prod(lengths), 2 * width]``, block
    ``k`` of the plan reading ``axes[k]``, tokens nested by ``order`` (outermost first)."""
    evaluation = evaluator(like=like, dtype=dtype, device=device)
    _check(plan, max([a.bound for a in axes] + [0.0]), ROTARY_GRID_POSITIONS, evaluation)
    return evaluation.grid(plan, axes, order)


ROTARY_GRID_POSITIONS = "the grid positions (`shape`, `start`, `step`, `crop`)"
"""How errors name a rotary grid's positions."""


def detr(plan: Plan, enc: Encoding, mask: Any, *, dtype: Any, on_device: bool = False) -> Any:
    """The evaluation half of ``posenc.detr``: ``mask`` ``[B, H, W]`` -> ``[B, dim, H, W]``.
    A library without float64 (JAX without x64) gets NumPy's coordinates and bits, returned
    in the library, as :class:`HostEngine` does for positions."""
    if array_namespace(mask) is not None:
        library = backend_for(dtype, like=mask)
        if not library.has_float64 and library.concrete(mask):
            host = detr(plan, enc, np.asarray(mask), dtype=np.dtype(library.dtype))
            return library.from_numpy(host)
    coords = detr_coordinates(mask, enc.normalize)
    b, h, w = coords.shape[:3]
    evaluation = evaluator(like=coords, dtype=dtype, on_device=on_device)
    _check(plan, 1.0 if enc.normalize else float(max(h, w)), "`mask`", evaluation)
    backend = backend_of(coords)
    out = evaluation.points(plan, backend.reshape(coords, (-1, 2)), not enc.normalize)
    backend = backend_of(out)
    return backend.permute(backend.reshape(out, (b, h, w, plan.dim)), (0, 3, 1, 2))


def detr_coordinates(mask: Any, normalize: bool) -> Any:
    """DETR's coordinates ``[B, H, W, 2]`` (y, x) from a padding mask of any library (True =
    padding): the cumulative count of non-padded cells, 1-based, as integers; with
    ``normalize``, divided by the last one (+1e-6), in float64 (``scale`` is in the plan's
    frequencies)."""
    if not (is_torch(mask) or array_namespace(mask) is not None):
        try:
            mask = np.asarray(mask)
        except (TypeError, ValueError):
            raise PosencError(
                f"`mask` must be a [batch, H, W] boolean array, got {mask!r:.60}"
            ) from None
    if str(mask.dtype).rsplit(".", 1)[-1] != "bool" or mask.ndim != 3:
        raise PosencError(
            f"`mask` must be a [batch, H, W] boolean array, got {mask.dtype} of shape "
            f"{tuple(mask.shape)}"
        )
    backend = backend_of(mask)
    filled = backend.astype(~mask, backend.int64)
    y = backend.cumsum(filled, axis=1)
    x = backend.cumsum(filled, axis=2)
    if not normalize:
        return backend.stack([y, x], axis=-1)
    y64, x64 = backend.astype(y, backend.float64), backend.astype(x, backend.float64)
    y64 = y64 / (y64[:, -1:, :] + 1e-6)
    x64 = x64 / (x64[:, :, -1:] + 1e-6)
    return backend.stack([y64, x64], axis=-1)


# ---------------------------------------------------------------------------------------------
# rotary positions


def rotary_axes_last(rotary: Rotary, pos: Positions) -> Positions:
    """Positions with the coordinate axis last: sections' leading axis moved there, a
    trailing axis of ``axes_dim`` checked."""
    x = pos.values
    k = rotary.ndim
    if rotary.sections is not None:
        if x.ndim < 1 or x.shape[0] != k:
            raise PosencError(
                f"`positions` must have a leading axis of {k} rows (one per section of "
                f"{rotary.sections}), got shape {tuple(x.shape)}"
            )
        perm = (*range(1, x.ndim), 0)
        return Positions(backend_of(x).permute(x, perm), pos.integral, pos.low, pos.high)
    if k > 1 and (x.ndim < 1 or x.shape[-1] != k):
        what = (
            f"`axes_dim` {rotary.axes_dim}"
            if rotary.axes_dim is not None
            else f"spacing {rotary.spacing!r}"
        )
        raise PosencError(
            f"`positions` must have a last axis of {k} coordinates (one per axis of {what}), "
            f"got shape {tuple(x.shape)}"
        )
    return pos


def rotary_seq_len(rotary: Rotary, pos: Positions, seq_len: Any) -> int | None:
    """The length the rule reads: ``seq_len``, or the largest position + 1."""
    if not rotary.scaling.rule.uses_seq_len:
        return None if seq_len is None else check_int("seq_len", seq_len, minimum=1)
    if seq_len is not None:
        return check_int("seq_len", seq_len, minimum=1)
    if pos.high is None:
        raise PosencError(
            f"`seq_len` is required for rope_type {rotary.scaling.rope_type!r} when the positions "
            "cannot be read (traced or meta)"
        )
    return int(np.floor(pos.high)) + 1
