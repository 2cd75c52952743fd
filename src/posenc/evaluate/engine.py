"""The engine: evaluates a :class:`~posenc.spec.layout.Plan` at positions, into an output array.

Accuracy. Every angle ``x * omega`` is formed in float64 (relative error 2^-53, so below
2e-9 rad for ``|x| < 2^24``), its sine and cosine are evaluated in float64, and the result is
rounded once to the output dtype.

Speed. Sines are expensive and the output is large, so an integer position is split into
balanced base-256 digits and its phasor is a product of rows of small tables
(:mod:`posenc.evaluate.integers`). Each output pair is then one complex product per row,
``(sin c + i cos c) * (cos f - i sin f) = sin(c+f) + i cos(c+f)`` in float64, whose rounding
error (a few 1e-16) is far below float32's half ulp. Real positions on a progression (scaled
grid axes) are split the same way around ``sqrt(length)``; power-of-two frequencies (NeRF)
square phasors from one direct evaluation per 10 levels; other real positions are evaluated
directly. A grid axis computes its own few rows once and broadcasts them; dense integer ids
are gathered from the table of their range, which is kept for the next call
(``set_table_cache``).

Bit-for-bit consistency. The split of an integer position depends on that position alone,
so a table, ``encode`` of any subset of its positions, and any slice of its channels give
identical numbers: a rank's shard of a context- or tensor-parallel job is exactly the slice
of the full table.

Work is done in row chunks of about ``Backend.chunk`` float64 values (a few hundred KiB for
NumPy, a few MiB for torch, whose per-call overhead is larger).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import numpy as np

from posenc.cache import BoundedCache, nbytes
from posenc.evaluate.integers import (
    LEVEL,
    TABLES,
    canonical_coarse,
    digits,
    host_ints,
    levels,
    span_key,
)
from posenc.evaluate.libs.base import Backend
from posenc.evaluate.positions import Progression
from posenc.spec.layout import AxisPlan, Plan, Run

PROGRESS: ContextVar[Callable[[int, int], None] | None] = ContextVar("PROGRESS", default=None)
"""Set by the command line to draw a progress bar: called with (rows done, rows)."""

DIRECT = 64  # real progressions shorter than this are evaluated directly
MIN_RUN = 256  # integer positions in runs at least this long are written run by run
MAX_FREQS = 4096  # wider plans are evaluated in channel slices of this many (bit for bit)

Source = tuple[list[tuple[int, int]], Callable[[int, int, Any], None]]
"""Row ranges, and a function writing the ``[hi-lo, 2n]`` basis of one range into an array
(columns ``2i`` sin and ``2i+1`` cos of frequency ``i``), rounded once to its dtype."""


def _phasor_range(
    backend: Backend, start: float, step: float, count: int, w: Any, *, coarse: bool
) -> Any:
    """Phasors of angles ``(start + j * step) * w`` for ``j < count``, as ``[count, n]``.

    Long ranges are themselves split (``j = j1 * m + j0``), so only ``O(sqrt(count))``
    sines are evaluated; each product adds a rounding of 2^-53, far below what matters.
    """
    if count <= DIRECT:
        angles = start + np.arange(count, dtype=np.float64) * step
        return backend.phasors(backend.f64(angles)[:, None] * w[None, :], coarse=coarse)
    m = math.isqrt(count - 1) + 1
    outer = start + np.arange(-(-count // m), dtype=np.float64) * (m * step)
    inner = np.arange(m, dtype=np.float64) * step
    hi = backend.phasors(backend.f64(outer)[:, None] * w[None, :], coarse=coarse)
    lo = backend.phasors(backend.f64(inner)[:, None] * w[None, :], coarse=False)
    return (hi[:, None, :] * lo[None, :, :]).reshape(-1, hi.shape[-1])[:count]


def integer_progression_source(
    backend: Backend, start: int, length: int, omega: np.ndarray
) -> Source:
    """Row chunks of the basis of positions ``start … start+length-1`` (canonical split).

    A chunk is part of one 256-position block, or a run of whole blocks computed in one
    broadcast product (narrow tables would otherwise pay per-call overhead 256 rows at a time).
    """
    n = len(omega)
    rows = backend.rows_per_chunk(n)
    first, _ = digits(start)
    last, _ = digits(start + length - 1)
    coarse = canonical_coarse(backend, np.arange(first, last + 1, dtype=np.int64), omega)
    fine = backend.complex(levels(omega.tobytes())[0])

    def product(lo: int, hi: int, into: Any) -> None:
        block, c = digits(start + lo)
        q = block - first
        if c == 0 and (hi - lo) % LEVEL == 0 and hi - lo > LEVEL:
            blocks = (hi - lo) // LEVEL
            backend.product(
                coarse[q : q + blocks, None, :],
                fine[None, :, :],
                into.reshape(blocks, LEVEL, into.shape[-1]),
            )
        else:
            backend.product(coarse[q : q + 1], fine[c : c + hi - lo], into)

    ranges = []
    lo = 0
    whole = max(1, rows // LEVEL) * LEVEL
    while lo < length:
        offset = digits(start + lo)[1]
        if offset == 0 and length - lo >= 2 * LEVEL and whole > LEVEL:
            hi = lo + min(whole, (length - lo) // LEVEL * LEVEL)
        else:
            hi = min(length, lo + LEVEL - offset, lo + rows)
        ranges.append((lo, hi))
        lo = hi
    return ranges, product


def progression_source(backend: Backend, prog: Progression, omega: np.ndarray) -> Source:
    """Row chunks of the sin/cos basis of positions on a progression."""
    n = len(omega)
    length = prog.length
    if prog.step == 1.0 and float(prog.start).is_integer() and abs(prog.start) < 2.0**52 and n:
        return integer_progression_source(backend, int(prog.start), length, omega)
    rows = backend.rows_per_chunk(n)
    w = backend.f64(omega)
    if length < DIRECT or n == 0:
        x = backend.f64(prog.values())

        def direct(lo: int, hi: int, into: Any) -> None:
            backend.sincos(x[lo:hi, None] * w[None, :], into)

        return [(lo, min(length, lo + rows)) for lo in range(0, length, rows)], direct
    period = 1 << max(0, round(math.log2(math.sqrt(length))))
    fine = _phasor_range(backend, 0.0, prog.step, period, w, coarse=False)
    coarse = _phasor_range(
        backend, prog.start, period * prog.step, -(-length // period), w, coarse=True
    )

    def product(lo: int, hi: int, into: Any) -> None:
        qi, a = divmod(lo, period)
        backend.product(coarse[qi : qi + 1], fine[a : a + hi - lo], into)

    ranges = [
        (base + a, min(length, base + a + rows, base + period))
        for base in range(0, length, period)
        for a in range(0, min(period, length - base), rows)
    ]
    return ranges, product


def points_source(backend: Backend, x: Any, integral: bool, omega: np.ndarray) -> Source:
    """Row chunks of the sin/cos basis of a flat array of positions (NumPy or torch)."""
    n = len(omega)
    count = x.shape[0]
    rows = backend.rows_per_chunk(n)
    w = backend.f64(omega)
    ranges = [(lo, min(count, lo + rows)) for lo in range(0, count, rows)]
    if not integral and n > 1 and bool(np.all(omega[1:] == 2 * omega[:-1])):

        def doubling(lo: int, hi: int, into: Any) -> None:
            backend.sincos_doubling(backend.f64(x[lo:hi])[:, None] * w[None, :1], n, into)

        return ranges, doubling
    if not integral or n == 0:

        def direct(lo: int, hi: int, into: Any) -> None:
            backend.sincos(backend.f64(x[lo:hi])[:, None] * w[None, :], into)

        return ranges, direct
    xs = host_ints(x)
    blocks, c = digits(xs)
    unique, where = np.unique(blocks, return_inverse=True)
    coarse = canonical_coarse(backend, unique, omega)
    fine = backend.complex(levels(omega.tobytes())[0])

    def product(lo: int, hi: int, into: Any) -> None:
        backend.product(backend.rows(coarse, where[lo:hi]), backend.rows(fine, c[lo:hi]), into)

    return ranges, product


def _write(
    backend: Backend,
    out: Any,
    index: tuple[Any, ...],
    axis_plan: AxisPlan,
    shape: tuple[int, ...],
    compute: Callable[[int, int, Any], None],
    lo: int,
    hi: int,
    x: Any,
) -> None:
    """Write rows ``lo:hi`` of one axis's channels into ``out[index]``.

    Where the axis's channels are one contiguous interleaved run of a 2-D output (the paper's
    layout), the basis is written straight into ``out``. Where they are a sin run and a cos
    run of equal stride (``[sin | cos]`` halves, NeRF's frequency-major channels), the float64
    basis is rounded and copied in once through a strided view of ``out``. Otherwise it is
    copied run by run.
    """
    width = 2 * len(axis_plan.omega)
    runs = axis_plan.runs
    scaled = axis_plan.amplitude != 1.0

    def basis(exact: bool = False) -> Any:
        """The float64 basis of rows ``lo:hi`` (or in the basis dtype, rounded once, when
        neither ``exact`` nor scaled), times the amplitude."""
        b = backend.temp(hi - lo, width, exact=exact or scaled)
        compute(lo, hi, b)
        if scaled:
            b *= axis_plan.amplitude
        return b

    if (
        len(shape) == 1
        and not backend.sixteen
        and not scaled
        and len(runs) == 1
        and runs[0].src == slice(0, width, 1)
        and runs[0].dst.step == 1
        and width
    ):
        compute(lo, hi, out[(*index, runs[0].dst)])
    elif len(shape) > 1:
        # a grid axis: its few rows are put in channel order once, then broadcast over the
        # other axes in contiguous runs of channels
        order, spans = _channel_order(runs, width)
        ordered = backend.contiguous(backend.rounded(basis(exact=True))[:, order], out.dtype)
        for first, dst in spans:
            count = len(range(dst.stop)[dst])
            out[(*index, dst)] = ordered[:, first : first + count].reshape(*shape, count)
    elif (pairs := _pairs(runs, width // 2)) is not None:
        rounded = backend.rounded(basis(exact=True)).reshape(*shape, width // 2, 2)
        backend.scatter_pairs(out[index], rounded, *pairs)
    else:
        ready = backend.rounded(basis())
        for run in runs:
            out[(*index, run.dst)] = ready[:, run.src].reshape(*shape, -1)
    for j in axis_plan.identity:
        out[(*index, j)] = backend.rounded(x).reshape(shape)


ORDERS = BoundedCache(8 << 20)


def _channel_order(runs: tuple[Run, ...], width: int) -> tuple[np.ndarray, list[tuple[int, slice]]]:
    """Basis columns in the order of the channels they go to, and the output slices they
    fill (``(first column, channels)``; adjacent contiguous runs merged)."""
    return ORDERS.get_or_make(
        (runs, width), lambda: _make_channel_order(runs, width), lambda v: nbytes(v[0])
    )


def _make_channel_order(
    runs: tuple[Run, ...], width: int
) -> tuple[np.ndarray, list[tuple[int, slice]]]:
    cols = np.arange(width)
    ranked = sorted(runs, key=lambda r: r.dst.start)
    order = np.concatenate([cols[r.src] for r in ranked]) if ranked else cols[:0]
    spans: list[tuple[int, slice]] = []
    first = 0
    for r in ranked:
        count = len(range(r.dst.stop)[r.dst])
        last = spans[-1] if spans else None
        if (
            last is not None
            and r.dst.step == 1
            and last[1].step == 1
            and last[1].stop == r.dst.start
        ):
            spans[-1] = (last[0], slice(last[1].start, r.dst.stop, 1))
        else:
            spans.append((first, r.dst))
        first += count
    return order, spans


def _pairs(runs: tuple[Run, ...], n: int) -> tuple[int, int, int] | None:
    """``(sin, cos, step)`` where channel ``sin + k*step`` holds the sine of frequency ``k``
    and ``cos + k*step`` its cosine, for all ``n`` of an axis's frequencies; else None."""
    if len(runs) != 2 or n < 2:
        return None
    s, c = sorted(runs, key=lambda r: r.src.start)
    if (s.src.start, s.src.step, c.src.start, c.src.step) != (0, 2, 1, 2):
        return None
    if not s.dst.step == c.dst.step > 0 or not len(range(n * 2)[s.src]) == n == len(
        range(n * 2)[c.src]
    ):
        return None
    return s.dst.start, c.dst.start, s.dst.step


def fill_grid(
    backend: Backend,
    out: Any,
    plan: Plan,
    axes: list[Progression],
    dims: list[int],
) -> None:
    """Fill ``out`` ``[L_0, …, L_{k-1}, dim]``; position axis ``a`` varies along ``dims[a]``."""
    if _sliced(
        plan, lambda channels, part: fill_grid(backend, out[..., channels], part, axes, dims)
    ):
        return
    ndim = out.ndim - 1
    report = PROGRESS.get() if ndim == 1 else None
    for axis_plan in plan.axes:
        if not axis_plan.runs and not axis_plan.identity:
            continue  # a channel shard may use no frequency of this axis
        prog, g = axes[axis_plan.axis], dims[axis_plan.axis]
        ranges, compute = progression_source(backend, prog, axis_plan.omega)
        values = prog.values() if axis_plan.identity else None

        def work(
            lo: int,
            hi: int,
            axis_plan: AxisPlan = axis_plan,
            g: int = g,
            values: Any = values,
            compute: Callable[[int, int, Any], None] = compute,
            length: int = prog.length,
        ) -> None:
            index = tuple(slice(lo, hi) if d == g else slice(None) for d in range(ndim))
            shape = tuple(hi - lo if d == g else 1 for d in range(ndim))
            x = backend.f64(values[lo:hi]) if values is not None else None
            _write(backend, out, index, axis_plan, shape, compute, lo, hi, x)
            if report is not None:
                report(hi, length)

        backend.run(work, ranges)
    for j in plan.zeros:
        out[..., j] = 0


def fill_points(backend: Backend, out: Any, plan: Plan, x: Any, integral: bool) -> None:
    """Fill ``out`` ``[N, dim]`` from positions ``x`` ``[N, ndim]``.

    Integer positions of one axis are served the cheapest exact way: positions whose span
    (widened to whole 256-position blocks) is no longer than their count plus two blocks are
    gathered from the table of that span, kept for the next call (``set_table_cache``); where
    no such table is kept yet and the positions come in runs of consecutive values (per-row
    offsets, packed sequences), they are written as tables, run by run. Every way gives the
    same bits.
    """
    if _sliced(
        plan, lambda channels, part: fill_points(backend, out[:, channels], part, x, integral)
    ):
        return
    if integral and plan.ndim == 1 and x.shape[0]:
        xs = host_ints(x).reshape(-1)
        lowest = int(xs.min()) // LEVEL * LEVEL
        rows = -(-(int(xs.max()) + 1 - lowest) // LEVEL) * LEVEL
        spanned = rows <= xs.shape[0] + 2 * LEVEL
        key = span_key(backend, plan, lowest, rows) if spanned else ()
        table = TABLES.get(key) if spanned else None
        if table is None:
            breaks = np.flatnonzero(np.diff(xs) != 1) + 1
            starts = np.concatenate(([0], breaks))
            ends = np.concatenate((breaks, [xs.shape[0]]))
            if (ends - starts).min() >= MIN_RUN:
                for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
                    fill_grid(backend, out[a:b], plan, [Progression(float(xs[a]), 1.0, b - a)], [0])
                return
        if spanned:
            if table is None:
                table = backend.empty((rows, plan.dim))
                fill_grid(backend, table, plan, [Progression(float(lowest), 1.0, rows)], [0])
                TABLES.put(key, table, rows * plan.dim * backend.dtype.itemsize)
            backend.gather_rows(table, xs - lowest, out)
            return
    for axis_plan in plan.axes:
        if not axis_plan.runs and not axis_plan.identity:
            continue
        xa = x[:, axis_plan.axis]
        ranges, compute = points_source(backend, xa, integral, axis_plan.omega)

        def work(
            lo: int,
            hi: int,
            axis_plan: AxisPlan = axis_plan,
            xa: Any = xa,
            compute: Callable[[int, int, Any], None] = compute,
        ) -> None:
            xi = backend.f64(xa[lo:hi]) if axis_plan.identity else None
            _write(backend, out, (slice(lo, hi),), axis_plan, (hi - lo,), compute, lo, hi, xi)

        backend.run(work, ranges)
    for j in plan.zeros:
        out[..., j] = 0


def _sliced(plan: Plan, fill: Callable[[slice, Plan], None]) -> bool:
    """Evaluate a plan of more than ``MAX_FREQS`` frequencies in channel slices, so the level
    tables stay small (a slice's plan gives the same bits as the full one); True if done."""
    if len(plan.omega) <= MAX_FREQS:
        return False
    for lo in range(0, plan.dim, MAX_FREQS):
        channels = slice(lo, min(plan.dim, lo + MAX_FREQS))
        fill(channels, plan.select(channels))
    return True
