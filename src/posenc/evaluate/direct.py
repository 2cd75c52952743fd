"""The direct formula: a plan evaluated with plain array operations, in any library.

Angles ``x * w``, their sine and cosine, the basis columns put in channel order, one rounding.
It serves what the engine (:mod:`posenc.evaluate.engine`) cannot: traced torch code
(``torch.compile``, ``torch.export``, ONNX), meta tensors (shapes and dtypes only), JAX with
x64 on, and any Python Array API library. The library is reached through
:class:`~posenc.evaluate.libs.base.Backend`.

Two precisions. By default the angles are float64 and the value is rounded once, as the
engine's (within one ulp of them: both are exact to the output's rounding). With
``float32_only`` (exported graphs, Apple MPS: runtimes without float64) every operation is
float32 and the angles are reduced in exact pieces (:mod:`posenc.evaluate.float32`): within 1e-6 of
the truth, then cast to the output dtype.
"""

from __future__ import annotations

from typing import Any

from posenc.evaluate import float32 as _float32
from posenc.evaluate.libs.base import Backend
from posenc.evaluate.positions import Progression
from posenc.evaluate.rounding import round_once
from posenc.spec.layout import Plan


def _sincos(
    ops: Backend, x: Any, omega: tuple[float, ...], float32_only: bool, integral: bool = False
) -> tuple[Any, Any]:
    if float32_only:
        return _float32.sincos(ops, x, omega, integral=integral)
    theta = x * ops.asarray(omega, ops.float64, x)
    return ops.sin(theta), ops.cos(theta)


def _arranged(
    ops: Backend, sin: Any, cos: Any, values: Any, columns: tuple[int, ...], kind: str
) -> Any:
    """``[N, U]`` sines and cosines of positions ``values`` (``[N, k]``) as the channels
    ``columns`` of the basis ``[sin w0, cos w0, …, 0, x…]``: the common layouts by a stack
    or a concatenation, any other by a gather (which costs several times as much in ONNX
    Runtime). ``kind``: :func:`~posenc.spec.layout.arrangement` of ``columns``."""
    if kind == "halves":
        return ops.concat([sin, cos], axis=1)
    if kind == "flipped":
        return ops.concat([cos, sin], axis=1)
    basis = ops.reshape(ops.stack([sin, cos], axis=-1), (values.shape[0], 2 * sin.shape[1]))
    if kind == "interleaved":
        return basis
    basis = ops.concat([basis, values[:, :1] * 0.0, values], axis=1)
    return ops.take(basis, ops.asarray(columns, ops.int64, values), axis=1)


BLOCK = 64  # float32 progressions: rows 64 a + b from a table of blocks and one of offsets


def _progression32(
    ops: Backend, steps: Any, pos: Progression, omega: tuple[float, ...], like: Any
) -> Any:
    """``sin, cos`` of ``(start + i step) w`` for the float32 ``steps`` ``i`` (``[n, 1]``),
    float32 alone: the exact float32 formula for the block starts ``64 a`` (with the phase
    ``start w``) and for the offsets ``b < 64``, joined by the angle-sum identities (six
    float32 operations a value instead of about twenty-five): within 5e-7 of the truth."""
    n = pos.length
    step = tuple(pos.step * w for w in omega)
    phase = tuple(pos.start * w for w in omega)
    if not isinstance(n, int):  # a symbolic length (dynamic export): the block table's size
        return _float32.sincos(ops, steps, step, phase, integral=True)  # would guard on it
    blocks = (n + BLOCK - 1) // BLOCK
    starts = ops.reshape(ops.arange(blocks, like, ops.float32), (blocks, 1))
    offsets = ops.reshape(ops.arange(BLOCK, like, ops.float32), (BLOCK, 1))
    sa, ca = _float32.sincos(ops, starts * BLOCK, step, phase, integral=True)
    sb, cb = _float32.sincos(ops, offsets, step, integral=True)
    i = ops.reshape(steps, (n,))
    block = ops.floor(i * (1.0 / BLOCK))
    a = ops.astype(block, ops.int64)  # row i = 64 a + b, gathered (no symbolic reshape)
    b = ops.astype(i - block * BLOCK, ops.int64)
    sa, ca = ops.take(sa, a, axis=0), ops.take(ca, a, axis=0)
    sb, cb = ops.take(sb, b, axis=0), ops.take(cb, b, axis=0)
    return sa * cb + ca * sb, ca * cb - sa * sb


def _rounded(ops: Backend, values: Any, dtype: Any, float32_only: bool) -> Any:
    return ops.astype(values, dtype) if float32_only else round_once(values, dtype, ops)


def points(
    ops: Backend,
    x: Any,
    plan: Plan,
    dtype: Any,
    padding_idx: int | None = None,
    float32_only: bool = False,
    integral: bool = False,
) -> Any:
    """``[N, k]`` positions (``integral``: all integers) -> ``[N, dim]`` in ``dtype``."""
    c = plan.constants
    xw = ops.astype(x, ops.float32 if float32_only else ops.float64)
    per = xw if plan.ndim == 1 else ops.take(xw, ops.asarray(c.axis, ops.int64, xw), axis=1)
    sin, cos = _sincos(ops, per, c.omega, float32_only, integral)
    out = _arranged(ops, sin, cos, xw, c.columns, c.arrangement)
    out = _rounded(ops, out * c.amplitude if c.amplitude != 1 else out, dtype, float32_only)
    if padding_idx is not None:
        out = ops.where(xw[:, :1] == float(padding_idx), out * 0, out)
    return out


def grid(
    ops: Backend,
    axes: list[Any],
    order: list[int],
    plan: Plan,
    dtype: Any,
    like: Any,
    float32_only: bool = False,
) -> Any:
    """Per-axis positions (Progressions or float arrays ``[L_a]``) ->
    ``[L_order[0], …, L_order[k-1], dim]``.

    Separable: each axis evaluates its own frequencies into its own channels (zero in the
    others'), and the parts add up exactly. In float32, a progression ``start + i * step``
    is evaluated as the integer ``i`` at frequencies ``step * w`` with phase ``start * w``
    (both formed on the host), so a real step costs no accuracy.
    """
    k = len(axes)
    work = ops.float32 if float32_only else ops.float64
    out: Any = None
    for a, pos in enumerate(axes):
        omega, cols, kind = plan.constants.axes[a]
        if isinstance(pos, Progression):
            steps = ops.reshape(ops.arange(pos.length, like, work), (-1, 1))
            values = steps * pos.step + pos.start
            if float32_only:
                sin, cos = _progression32(ops, steps, pos, omega, like)
            else:
                sin, cos = _sincos(ops, values, omega, False)
        else:
            values = ops.reshape(ops.astype(pos, work), (-1, 1))
            sin, cos = _sincos(ops, values, omega, float32_only)
        n = values.shape[0]
        part = _arranged(ops, sin, cos, values, cols, kind)
        view = [1] * k
        view[order.index(a)] = n
        part = ops.reshape(part, (*view, plan.dim))
        out = part if out is None else out + part
    amplitude = plan.constants.amplitude
    return _rounded(ops, out * amplitude if amplitude != 1 else out, dtype, float32_only)
