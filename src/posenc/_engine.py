"""The engine: evaluates a :class:`~posenc._layout.Plan` at positions, into an output array.

Accuracy. Every angle ``x * omega`` is formed in float64 (relative error 2^-53, so below
2e-9 rad for ``|x| < 2^24``), its sine and cosine are evaluated in float64, and the result is
rounded once to the output dtype.

Speed. Sines are expensive and the output is large, so positions on a progression (tables,
grid axes) and integer positions are split as ``x = coarse + fine`` with
``coarse = start + q * P * step`` and ``fine = r * step`` (``P ~ sqrt(length)``). Only
``O(sqrt(length))`` phasors are evaluated; each output pair is one complex product
``(sin c + i cos c) * (cos f - i sin f) = sin(c+f) + i cos(c+f)``, in float64, whose
rounding error (a few 1e-16) is far below float32's half ulp. Work is done in row chunks of
about ``CHUNK`` float64 values, so no temporary is larger than a few hundred KiB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import numpy as np

from ._backends import Backend
from ._layout import AxisPlan, Plan
from ._positions import Progression

PROGRESS: ContextVar[Callable[[int, int], None] | None] = ContextVar("PROGRESS", default=None)
"""Set by the command line to draw a progress bar: called with (rows done, rows)."""

CHUNK = 1 << 15  # float64 values of basis per chunk
DIRECT = 64  # progressions shorter than this are evaluated directly


def _rows_per_chunk(n: int) -> int:
    return max(1, CHUNK // max(1, 2 * n))


def progression_basis(
    bk: Backend, prog: Progression, omega: np.ndarray
) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(lo, hi, basis)``: float64 ``[hi-lo, 2n]`` sin/cos of rows ``lo:hi``."""
    n = len(omega)
    length = prog.length
    rows = _rows_per_chunk(n)
    w = bk.f64(omega)
    if length < DIRECT or n == 0:
        x = bk.f64(prog.values())
        for lo in range(0, length, rows):
            hi = min(length, lo + rows)
            yield lo, hi, bk.sincos(x[lo:hi, None] * w[None, :])
        return
    period = 1 << max(0, round(math.log2(math.sqrt(length))))
    r = np.arange(period, dtype=np.float64) * prog.step
    fine = bk.phasors(bk.f64(r)[:, None] * w[None, :], coarse=False)
    q = np.arange(-(-length // period), dtype=np.float64) * (period * prog.step) + prog.start
    coarse = bk.phasors(bk.f64(q)[:, None] * w[None, :], coarse=True)
    for qi in range(coarse.shape[0]):
        base = qi * period
        for a in range(0, period, rows):
            lo, hi = base + a, min(length, base + min(period, a + rows))
            if lo >= hi:
                break
            yield lo, hi, bk.product(coarse[qi : qi + 1], fine[a : a + hi - lo])


def points_basis(
    bk: Backend, x: Any, integral: bool, omega: np.ndarray
) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(lo, hi, basis)`` for a flat array of positions ``x`` (NumPy or torch)."""
    n = len(omega)
    count = x.shape[0]
    rows = _rows_per_chunk(n)
    w = bk.f64(omega)
    if not integral or count < DIRECT or n == 0:
        for lo in range(0, count, rows):
            hi = min(count, lo + rows)
            yield lo, hi, bk.sincos(bk.f64(x[lo:hi])[:, None] * w[None, :])
        return
    xs = np.asarray(x.cpu() if hasattr(x, "cpu") else x, dtype=np.int64)
    lowest = int(xs.min())
    span = int(xs.max()) - lowest + 1
    period = 1 << max(0, math.ceil(math.log2(math.sqrt(span))))
    rel = xs - lowest
    fine = bk.phasors(
        bk.f64(np.arange(period, dtype=np.float64))[:, None] * w[None, :], coarse=False
    )
    q = np.arange(-(-span // period), dtype=np.float64) * period + lowest
    coarse = bk.phasors(bk.f64(q)[:, None] * w[None, :], coarse=True)
    for lo in range(0, count, rows):
        hi = min(count, lo + rows)
        part = rel[lo:hi]
        yield lo, hi, bk.product(bk.take(coarse, part // period), bk.take(fine, part % period))


def _store(
    bk: Backend,
    out: Any,
    index: tuple[Any, ...],
    ap: AxisPlan,
    basis: Any,
    shape: tuple[int, ...],
    x: Any,
) -> None:
    """Write one chunk of an axis's basis into its output channels."""
    basis = bk.rounded(basis)
    for run in ap.runs:
        out[(*index, run.dst)] = basis[:, run.src].reshape(*shape, -1)
    for j in ap.identity:
        out[(*index, j)] = bk.rounded(x).reshape(shape)


def fill_grid(
    bk: Backend,
    out: Any,
    plan: Plan,
    axes: list[Progression],
    dims: list[int],
) -> None:
    """Fill ``out`` ``[L_0, …, L_{k-1}, dim]``; position axis ``a`` varies along ``dims[a]``."""
    nd = out.ndim - 1
    report = PROGRESS.get() if nd == 1 else None
    for ap in plan.axes:
        prog, g = axes[ap.axis], dims[ap.axis]
        for lo, hi, basis in progression_basis(bk, prog, ap.omega):
            index = tuple(slice(lo, hi) if d == g else slice(None) for d in range(nd))
            shape = tuple(hi - lo if d == g else 1 for d in range(nd))
            x = bk.f64(prog.values()[lo:hi]) if ap.identity else None
            _store(bk, out, index, ap, basis, shape, x)
            if report is not None:
                report(hi, prog.length)
    for j in plan.zeros:
        out[..., j] = 0


def fill_points(bk: Backend, out: Any, plan: Plan, x: Any, integral: bool) -> None:
    """Fill ``out`` ``[N, dim]`` from positions ``x`` ``[N, ndim]``."""
    for ap in plan.axes:
        xa = x[:, ap.axis]
        for lo, hi, basis in points_basis(bk, xa, integral, ap.omega):
            xi = bk.f64(xa[lo:hi]) if ap.identity else None
            _store(bk, out, (slice(lo, hi),), ap, basis, (hi - lo,), xi)
    for j in plan.zeros:
        out[..., j] = 0
