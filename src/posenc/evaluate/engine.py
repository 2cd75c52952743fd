"""The engine: evaluates a :class:`~posenc.spec.layout.Plan` at positions, into an output array.

Accuracy. Every angle ``x * omega`` is formed in float64 (relative error 2^-53, so below
2e-9 rad for ``|x| < 2^24``), its sine and cosine are evaluated in float64, and the result is
rounded once to the output dtype.

Speed. Sines are expensive and the output is large, so an integer position is split as
``p = a * 2^16 + b * 2^8 + c`` (``-128 <= b, c < 128``) and its phasor is the complex product
``(T[a] * L1[b]) * L0[c]`` of three small tables: ``T`` evaluated directly for the few ``a``
needed, ``L1`` and ``L0`` (256 rows each, themselves ``16 x 16`` products) cached per set of
frequencies. Each output pair is then one complex product per row, ``(sin c + i cos c) *
(cos f - i sin f) = sin(c+f) + i cos(c+f)`` in float64, whose rounding error (a few 1e-16) is
far below float32's half ulp. Real positions on a progression (scaled grid axes) are split the
same way around ``sqrt(length)``; power-of-two frequencies (NeRF) square phasors from one
direct evaluation per 10 levels; other real positions are evaluated directly. A grid axis
computes its own few rows once and broadcasts them; dense integer ids are gathered from the
table of their range, which is kept for the next call (``set_table_cache``).

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
from posenc.errors import check_int
from posenc.evaluate.libs.base import Backend
from posenc.evaluate.positions import Progression
from posenc.spec.layout import AxisPlan, Plan, Run

PROGRESS: ContextVar[Callable[[int, int], None] | None] = ContextVar("PROGRESS", default=None)
"""Set by the command line to draw a progress bar: called with (rows done, rows)."""

DIRECT = 64  # real progressions shorter than this are evaluated directly
LEVEL = 256  # integer positions: p = a * LEVEL**2 + b * LEVEL + c, balanced digits
HALF = LEVEL // 2
MIN_RUN = 256  # integer positions in runs at least this long are written run by run

Source = tuple[list[tuple[int, int]], Callable[[int, int, Any], None]]
"""Row ranges, and a function writing the ``[hi-lo, 2n]`` basis of one range into an array
(columns ``2i`` sin and ``2i+1`` cos of frequency ``i``), rounded once to its dtype."""


def _phasor_range(
    bk: Backend, start: float, step: float, count: int, w: Any, *, coarse: bool
) -> Any:
    """Phasors of angles ``(start + j * step) * w`` for ``j < count``, as ``[count, n]``.

    Long ranges are themselves split (``j = j1 * m + j0``), so only ``O(sqrt(count))``
    sines are evaluated; each product adds a rounding of 2^-53, far below what matters.
    """
    if count <= DIRECT:
        angles = start + np.arange(count, dtype=np.float64) * step
        return bk.phasors(bk.f64(angles)[:, None] * w[None, :], coarse=coarse)
    m = math.isqrt(count - 1) + 1
    outer = start + np.arange(-(-count // m), dtype=np.float64) * (m * step)
    inner = np.arange(m, dtype=np.float64) * step
    hi = bk.phasors(bk.f64(outer)[:, None] * w[None, :], coarse=coarse)
    lo = bk.phasors(bk.f64(inner)[:, None] * w[None, :], coarse=False)
    return (hi[:, None, :] * lo[None, :, :]).reshape(-1, hi.shape[-1])[:count]


LEVELS = BoundedCache(64 << 20)  # 8 KiB per frequency: 4 MiB for dim 1024
MAX_FREQS = 4096  # wider plans are evaluated in channel slices of this many (bit for bit)


def _levels(omega_bytes: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The level tables of these frequencies, kept in :data:`LEVELS`."""
    return LEVELS.get_or_make(omega_bytes, lambda: _make_levels(omega_bytes), lambda v: nbytes(*v))


def _make_levels(omega_bytes: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``L0[j] = exp(-i d w)`` and ``L1[j] = exp(-i d 256 w)`` for digits ``d = j - 128``.

    ``[256, n]`` complex128 each, built as ``16 x 16`` products of directly evaluated phasors
    in a fixed order, so they (and everything built on them) depend on ``w`` alone. Balanced
    digits keep every intermediate angle within ``128 * unit * w``.
    """
    w = np.frombuffer(omega_bytes, dtype=np.float64)
    side = math.isqrt(LEVEL)
    j = np.arange(side, dtype=np.float64)[:, None]
    tables = []
    for unit in (1.0, float(LEVEL)):
        low = np.exp(-1j * ((j * unit) * w))
        high = np.exp(-1j * (((j * side - HALF) * unit) * w))
        tables.append((high[:, None, :] * low[None, :, :]).reshape(LEVEL, -1))
    return tables[0], tables[1]


def _host_ints(x: Any) -> np.ndarray:
    """Integer positions (NumPy or torch, any device) as an int64 NumPy array."""
    return np.asarray(x.cpu() if hasattr(x, "cpu") else x, dtype=np.int64)


def _digits(p: Any) -> tuple[Any, Any]:
    """``p = LEVEL * high + (low - HALF)`` with ``0 <= low < LEVEL``: balanced digits."""
    high, low = divmod(p + HALF, LEVEL)
    return high, low


def _canonical_coarse(bk: Backend, blocks: np.ndarray, w: np.ndarray) -> Any:
    """``i * exp(-i * 256 * beta * w)`` for block numbers ``beta`` (int64 array).

    ``= T[a] * L1[b]`` with ``beta = 256 a + (b - 128)``, ``T[a] = i * exp(-i a 2^16 w)``
    evaluated directly for the few ``a`` needed.
    """
    _, l1 = _levels(w.tobytes())
    a, b = _digits(blocks)
    tops, where = np.unique(a, return_inverse=True)
    top = bk.phasors(
        bk.f64(tops.astype(np.float64) * float(LEVEL * LEVEL))[:, None] * bk.f64(w)[None, :],
        coarse=True,
    )
    return bk.rows(top, where) * bk.rows(bk.complex(l1), b)


def integer_progression_source(bk: Backend, start: int, length: int, omega: np.ndarray) -> Source:
    """Row chunks of the basis of positions ``start … start+length-1`` (canonical split).

    A chunk is part of one 256-position block, or a run of whole blocks computed in one
    broadcast product (narrow tables would otherwise pay per-call overhead 256 rows at a time).
    """
    n = len(omega)
    rows = bk.rows_per_chunk(n)
    first, _ = _digits(start)
    last, _ = _digits(start + length - 1)
    coarse = _canonical_coarse(bk, np.arange(first, last + 1, dtype=np.int64), omega)
    fine = bk.complex(_levels(omega.tobytes())[0])

    def product(lo: int, hi: int, into: Any) -> None:
        blk, c = _digits(start + lo)
        q = blk - first
        if c == 0 and (hi - lo) % LEVEL == 0 and hi - lo > LEVEL:
            blocks = (hi - lo) // LEVEL
            bk.product(
                coarse[q : q + blocks, None, :],
                fine[None, :, :],
                into.reshape(blocks, LEVEL, into.shape[-1]),
            )
        else:
            bk.product(coarse[q : q + 1], fine[c : c + hi - lo], into)

    ranges = []
    lo = 0
    whole = max(1, rows // LEVEL) * LEVEL
    while lo < length:
        offset = _digits(start + lo)[1]
        if offset == 0 and length - lo >= 2 * LEVEL and whole > LEVEL:
            hi = lo + min(whole, (length - lo) // LEVEL * LEVEL)
        else:
            hi = min(length, lo + LEVEL - offset, lo + rows)
        ranges.append((lo, hi))
        lo = hi
    return ranges, product


def progression_source(bk: Backend, prog: Progression, omega: np.ndarray) -> Source:
    """Row chunks of the sin/cos basis of positions on a progression."""
    n = len(omega)
    length = prog.length
    if prog.step == 1.0 and float(prog.start).is_integer() and abs(prog.start) < 2.0**52 and n:
        return integer_progression_source(bk, int(prog.start), length, omega)
    rows = bk.rows_per_chunk(n)
    w = bk.f64(omega)
    if length < DIRECT or n == 0:
        x = bk.f64(prog.values())

        def direct(lo: int, hi: int, into: Any) -> None:
            bk.sincos(x[lo:hi, None] * w[None, :], into)

        return [(lo, min(length, lo + rows)) for lo in range(0, length, rows)], direct
    period = 1 << max(0, round(math.log2(math.sqrt(length))))
    fine = _phasor_range(bk, 0.0, prog.step, period, w, coarse=False)
    coarse = _phasor_range(bk, prog.start, period * prog.step, -(-length // period), w, coarse=True)

    def product(lo: int, hi: int, into: Any) -> None:
        qi, a = divmod(lo, period)
        bk.product(coarse[qi : qi + 1], fine[a : a + hi - lo], into)

    ranges = [
        (base + a, min(length, base + a + rows, base + period))
        for base in range(0, length, period)
        for a in range(0, min(period, length - base), rows)
    ]
    return ranges, product


def points_source(bk: Backend, x: Any, integral: bool, omega: np.ndarray) -> Source:
    """Row chunks of the sin/cos basis of a flat array of positions (NumPy or torch)."""
    n = len(omega)
    count = x.shape[0]
    rows = bk.rows_per_chunk(n)
    w = bk.f64(omega)
    ranges = [(lo, min(count, lo + rows)) for lo in range(0, count, rows)]
    if not integral and n > 1 and bool(np.all(omega[1:] == 2 * omega[:-1])):

        def doubling(lo: int, hi: int, into: Any) -> None:
            bk.sincos_doubling(bk.f64(x[lo:hi])[:, None] * w[None, :1], n, into)

        return ranges, doubling
    if not integral or n == 0:

        def direct(lo: int, hi: int, into: Any) -> None:
            bk.sincos(bk.f64(x[lo:hi])[:, None] * w[None, :], into)

        return ranges, direct
    xs = _host_ints(x)
    blocks, c = _digits(xs)
    unique, where = np.unique(blocks, return_inverse=True)
    coarse = _canonical_coarse(bk, unique, omega)
    fine = bk.complex(_levels(omega.tobytes())[0])

    def product(lo: int, hi: int, into: Any) -> None:
        bk.product(bk.rows(coarse, where[lo:hi]), bk.rows(fine, c[lo:hi]), into)

    return ranges, product


def _write(
    bk: Backend,
    out: Any,
    index: tuple[Any, ...],
    ap: AxisPlan,
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
    width = 2 * len(ap.omega)
    runs = ap.runs
    scaled = ap.amplitude != 1.0

    def basis(exact: bool = False) -> Any:
        """The float64 basis of rows ``lo:hi`` (or in the basis dtype, rounded once, when
        neither ``exact`` nor scaled), times the amplitude."""
        b = bk.temp(hi - lo, width, exact=exact or scaled)
        compute(lo, hi, b)
        if scaled:
            b *= ap.amplitude
        return b

    if (
        len(shape) == 1
        and not bk.sixteen
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
        ordered = bk.contiguous(bk.rounded(basis(exact=True))[:, order], out.dtype)
        for first, dst in spans:
            count = len(range(dst.stop)[dst])
            out[(*index, dst)] = ordered[:, first : first + count].reshape(*shape, count)
    elif (pairs := _pairs(runs, width // 2)) is not None:
        rounded = bk.rounded(basis(exact=True)).reshape(*shape, width // 2, 2)
        bk.scatter_pairs(out[index], rounded, *pairs)
    else:
        ready = bk.rounded(basis())
        for run in runs:
            out[(*index, run.dst)] = ready[:, run.src].reshape(*shape, -1)
    for j in ap.identity:
        out[(*index, j)] = bk.rounded(x).reshape(shape)


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
    bk: Backend,
    out: Any,
    plan: Plan,
    axes: list[Progression],
    dims: list[int],
) -> None:
    """Fill ``out`` ``[L_0, …, L_{k-1}, dim]``; position axis ``a`` varies along ``dims[a]``."""
    if _sliced(plan, lambda sl, part: fill_grid(bk, out[..., sl], part, axes, dims)):
        return
    nd = out.ndim - 1
    report = PROGRESS.get() if nd == 1 else None
    for ap in plan.axes:
        if not ap.runs and not ap.identity:
            continue  # a channel shard may use no frequency of this axis
        prog, g = axes[ap.axis], dims[ap.axis]
        ranges, compute = progression_source(bk, prog, ap.omega)
        values = prog.values() if ap.identity else None

        def work(
            lo: int,
            hi: int,
            ap: AxisPlan = ap,
            g: int = g,
            values: Any = values,
            compute: Callable[[int, int, Any], None] = compute,
            length: int = prog.length,
        ) -> None:
            index = tuple(slice(lo, hi) if d == g else slice(None) for d in range(nd))
            shape = tuple(hi - lo if d == g else 1 for d in range(nd))
            x = bk.f64(values[lo:hi]) if values is not None else None
            _write(bk, out, index, ap, shape, compute, lo, hi, x)
            if report is not None:
                report(hi, length)

        bk.run(work, ranges)
    for j in plan.zeros:
        out[..., j] = 0


def fill_points(bk: Backend, out: Any, plan: Plan, x: Any, integral: bool) -> None:
    """Fill ``out`` ``[N, dim]`` from positions ``x`` ``[N, ndim]``.

    Integer positions of one axis are served the cheapest exact way: positions whose span
    (widened to whole 256-position blocks) is no longer than their count plus two blocks are
    gathered from the table of that span, kept for the next call (``set_table_cache``); where
    no such table is kept yet and the positions come in runs of consecutive values (per-row
    offsets, packed sequences), they are written as tables, run by run. Every way gives the
    same bits.
    """
    if _sliced(plan, lambda sl, part: fill_points(bk, out[:, sl], part, x, integral)):
        return
    if integral and plan.ndim == 1 and x.shape[0]:
        xs = _host_ints(x).reshape(-1)
        lowest = int(xs.min()) // LEVEL * LEVEL
        rows = -(-(int(xs.max()) + 1 - lowest) // LEVEL) * LEVEL
        spanned = rows <= xs.shape[0] + 2 * LEVEL
        key = _span_key(bk, plan, lowest, rows) if spanned else ()
        table = TABLES.get(key) if spanned else None
        if table is None:
            breaks = np.flatnonzero(np.diff(xs) != 1) + 1
            starts = np.concatenate(([0], breaks))
            ends = np.concatenate((breaks, [xs.shape[0]]))
            if (ends - starts).min() >= MIN_RUN:
                for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
                    fill_grid(bk, out[a:b], plan, [Progression(float(xs[a]), 1.0, b - a)], [0])
                return
        if spanned:
            if table is None:
                table = bk.empty((rows, plan.dim))
                fill_grid(bk, table, plan, [Progression(float(lowest), 1.0, rows)], [0])
                TABLES.put(key, table, rows * plan.dim * bk.dtype.itemsize)
            bk.gather_rows(table, xs - lowest, out)
            return
    for ap in plan.axes:
        if not ap.runs and not ap.identity:
            continue
        xa = x[:, ap.axis]
        ranges, compute = points_source(bk, xa, integral, ap.omega)

        def work(
            lo: int,
            hi: int,
            ap: AxisPlan = ap,
            xa: Any = xa,
            compute: Callable[[int, int, Any], None] = compute,
        ) -> None:
            xi = bk.f64(xa[lo:hi]) if ap.identity else None
            _write(bk, out, (slice(lo, hi),), ap, (hi - lo,), compute, lo, hi, xi)

        bk.run(work, ranges)
    for j in plan.zeros:
        out[..., j] = 0


def _sliced(plan: Plan, fill: Callable[[slice, Plan], None]) -> bool:
    """Evaluate a plan of more than ``MAX_FREQS`` frequencies in channel slices, so the level
    tables stay small (a slice's plan gives the same bits as the full one); True if done."""
    if len(plan.omega) <= MAX_FREQS:
        return False
    for lo in range(0, plan.dim, MAX_FREQS):
        sl = slice(lo, min(plan.dim, lo + MAX_FREQS))
        fill(sl, plan.select(sl))
    return True


TABLES = BoundedCache(64 << 20)
"""The most recently used span tables of ``encode``'s gather path: a repeated call with ids
from the same range is then a gather. Tables are never handed out (the gather copies)."""


def set_table_cache(max_bytes: int) -> None:
    """Bytes that :func:`posenc.encode` may keep in tables of recent id spans (default 64 MiB;
    0 keeps none). With ids drawn from one range call after call, every call after the first
    gathers rows of the kept table instead of computing them; the bits are the same.

    Examples:
        >>> posenc.set_table_cache(256 << 20)    # keep up to 256 MiB (long contexts)
        >>> pe = posenc.encode(np.random.randint(0, 32768, (8, 2048)), 1024)
        >>> posenc.set_table_cache(64 << 20)     # back to the default"""
    TABLES.resize(check_int("max_bytes", max_bytes, minimum=0))


def _span_key(bk: Backend, plan: Plan, lowest: int, rows: int) -> tuple[Any, ...]:
    """What a kept table of positions ``lowest … lowest+rows-1`` depends on."""
    device = getattr(bk, "device", None)
    key = (plan.omega.tobytes(), plan.axis.tobytes(), plan.src.tobytes(), plan.amplitude)
    return (*key, lowest, rows, bk.name, str(bk.dtype), str(device))
