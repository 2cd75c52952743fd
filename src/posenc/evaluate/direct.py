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
    backend: Backend, x: Any, omega: tuple[float, ...], float32_only: bool, integral: bool = False
) -> tuple[Any, Any]:
    if float32_only:
        return _float32.sincos(backend, x, omega, integral=integral)
    theta = x * backend.asarray(omega, backend.float64, x)
    return backend.sin(theta), backend.cos(theta)


def _arranged(
    backend: Backend, sin: Any, cos: Any, values: Any, columns: tuple[int, ...], kind: str
) -> Any:
    """``[N, U]`` sines and cosines of positions ``values`` (``[N, k]``) as the channels
    ``columns`` of the basis ``[sin w0, cos w0, …, 0, x…]``: the common layouts by a stack
    or a concatenation, any other by a gather (which costs several times as much in ONNX
    Runtime). ``kind``: :func:`~posenc.spec.layout.arrangement` of ``columns``."""
    if kind == "halves":
        return backend.concat([sin, cos], axis=1)
    if kind == "flipped":
        return backend.concat([cos, sin], axis=1)
    basis = backend.reshape(backend.stack([sin, cos], axis=-1), (values.shape[0], 2 * sin.shape[1]))
    if kind == "interleaved":
        return basis
    basis = backend.concat([basis, values[:, :1] * 0.0, values], axis=1)
    return backend.take(basis, backend.asarray(columns, backend.int64, values), axis=1)


BLOCK = 64  # float32 progressions: rows 64 a + b from a table of blocks and one of offsets


def _progression32(
    backend: Backend, steps: Any, pos: Progression, omega: tuple[float, ...], like: Any
) -> Any:
    """``sin, cos`` of ``(start + i step) w`` for the float32 ``steps`` ``i`` (``[n, 1]``),
    float32 alone: the exact float32 formula for the block starts ``64 a`` (with the phase
    ``start w``) and for the offsets ``b < 64``, joined by the angle-sum identities (six
    float32 operations a value instead of about twenty-five): within 5e-7 of the truth."""
    n = pos.length
    step = tuple(pos.step * w for w in omega)
    phase = tuple(pos.start * w for w in omega)
    if not isinstance(n, int):  # a symbolic length (dynamic export): the block table's size
        return _float32.sincos(backend, steps, step, phase, integral=True)  # would guard on it
    blocks = (n + BLOCK - 1) // BLOCK
    starts = backend.reshape(backend.arange(blocks, like, backend.float32), (blocks, 1))
    offsets = backend.reshape(backend.arange(BLOCK, like, backend.float32), (BLOCK, 1))
    sa, ca = _float32.sincos(backend, starts * BLOCK, step, phase, integral=True)
    sb, cb = _float32.sincos(backend, offsets, step, integral=True)
    i = backend.reshape(steps, (n,))
    block = backend.floor(i * (1.0 / BLOCK))
    a = backend.astype(block, backend.int64)  # row i = 64 a + b, gathered (no symbolic reshape)
    b = backend.astype(i - block * BLOCK, backend.int64)
    sa, ca = backend.take(sa, a, axis=0), backend.take(ca, a, axis=0)
    sb, cb = backend.take(sb, b, axis=0), backend.take(cb, b, axis=0)
    return sa * cb + ca * sb, ca * cb - sa * sb


def _rounded(backend: Backend, values: Any, dtype: Any, float32_only: bool) -> Any:
    return backend.astype(values, dtype) if float32_only else round_once(values, dtype, backend)


def points(
    backend: Backend,
    x: Any,
    plan: Plan,
    dtype: Any,
    padding_idx: int | None = None,
    float32_only: bool = False,
    integral: bool = False,
) -> Any:
    """``[N, k]`` positions (``integral``: all integers) -> ``[N, dim]`` in ``dtype``."""
    constants = plan.constants
    xw = backend.astype(x, backend.float32 if float32_only else backend.float64)
    per = xw
    if plan.ndim != 1:
        per = backend.take(xw, backend.asarray(constants.axis, backend.int64, xw), axis=1)
    sin, cos = _sincos(backend, per, constants.omega, float32_only, integral)
    if constants.frequency_amplitude is not None:  # one per axis, in float64 before rounding
        work = backend.float32 if float32_only else backend.float64
        scale = backend.asarray(constants.frequency_amplitude, work, xw)
        sin, cos = sin * scale, cos * scale
    out = _arranged(backend, sin, cos, xw, constants.columns, constants.arrangement)
    amplitude = constants.amplitude
    out = _rounded(backend, out * amplitude if amplitude != 1 else out, dtype, float32_only)
    if padding_idx is not None:
        out = backend.where(xw[:, :1] == float(padding_idx), out * 0, out)
    return out


def grid(
    backend: Backend,
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
    work = backend.float32 if float32_only else backend.float64
    out: Any = None
    for a, pos in enumerate(axes):
        omega, cols, kind = plan.constants.axes[a]
        if isinstance(pos, Progression):
            steps = backend.reshape(backend.arange(pos.length, like, work), (-1, 1))
            values = steps * pos.step + pos.start
            if float32_only:
                sin, cos = _progression32(backend, steps, pos, omega, like)
            else:
                sin, cos = _sincos(backend, values, omega, False)
        else:
            values = backend.reshape(backend.astype(pos, work), (-1, 1))
            sin, cos = _sincos(backend, values, omega, float32_only)
        n = values.shape[0]
        if plan.axis_amplitude is not None:  # this axis' own, in float64 before rounding
            sin, cos = sin * plan.axis_amplitude[a], cos * plan.axis_amplitude[a]
        part = _arranged(backend, sin, cos, values, cols, kind)
        view = [1] * k
        view[order.index(a)] = n
        part = backend.reshape(part, (*view, plan.dim))
        out = part if out is None else out + part
    amplitude = plan.constants.amplitude
    return _rounded(backend, out * amplitude if amplitude != 1 else out, dtype, float32_only)
