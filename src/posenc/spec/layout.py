"""Layouts: the one place that maps an `Encoding` and a width to output channels.

A :class:`Plan` says, for every output channel ``j``, what it holds::

    src[j] = 2u      sin(x[axis[u]] * omega[u])
    src[j] = 2u + 1  cos(x[axis[u]] * omega[u])
    src[j] = ZERO    0
    src[j] = -2 - a  the position x[a] itself (NeRF's included input)

Every convention (interleaved or halves, odd widths, axis order, truncation) is only a
different ``src``; the engine never branches on a convention. Channel sharding is slicing
``src``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from posenc.cache import BoundedCache, derived, nbytes
from posenc.errors import MAX_DIM, PosencError, check_int
from posenc.spec.encoding import Encoding
from posenc.spec.frequencies import denominator, frequencies

ZERO = -1


def ident(axis: int) -> int:
    return -2 - axis


@dataclass(frozen=True, eq=False)
class Run:
    """Channels ``dst`` of the output take columns ``src`` of an axis's basis."""

    dst: slice
    src: slice


@dataclass(frozen=True, eq=False)
class AxisPlan:
    """What one position axis contributes: its frequencies and where they go."""

    axis: int
    omega: np.ndarray  # float64 [n]: basis column 2i is sin(x*omega[i]), 2i+1 is cos
    runs: tuple[Run, ...]
    identity: tuple[int, ...]  # output channels holding x itself
    amplitude: float = 1.0  # multiplies every sine and cosine before the one rounding


def arrangement(columns: np.ndarray, u: int) -> str:
    """How channels taking ``columns`` of the basis ``[sin w0, cos w0, …, 0, x…]`` of ``u``
    frequencies are laid out: ``"interleaved"`` (the basis itself), ``"halves"``
    (``[sin | cos]``), ``"flipped"`` (``[cos | sin]``), or ``"gather"`` (anything else)."""
    columns = np.asarray(columns)
    sines, cosines = np.arange(0, 2 * u, 2), np.arange(1, 2 * u, 2)
    for kind, order in (
        ("interleaved", np.arange(2 * u)),
        ("halves", np.concatenate([sines, cosines])),
        ("flipped", np.concatenate([cosines, sines])),
    ):
        if np.array_equal(columns, order):
            return kind
    return "gather"


@dataclass(frozen=True)
class PlanConstants:
    omega: tuple[float, ...]
    axis: tuple[int, ...]
    columns: tuple[int, ...]
    arrangement: str  # of columns (see arrangement)
    # per axis: (omega, columns, arrangement)
    axes: tuple[tuple[tuple[float, ...], tuple[int, ...], str], ...]
    largest: float  # the largest frequency (0 when none)
    exact: bool  # every frequency a power of two: exact products
    identities: bool  # some channel holds a position itself
    amplitude: float  # multiplies every sine and cosine before the rounding
    frequency_amplitude: tuple[float, ...] | None  # per frequency, in its place (per axis)


@dataclass(frozen=True, eq=False)
class Plan:
    """For every output channel, what it holds (see the module's docstring).

    Plans are kept by their numbers alone (:data:`PLANS`); ``label`` names the preset and
    the caller's options in messages, and each caller gets the kept plan under its own label
    (:meth:`labelled`), sharing the arrays and everything computed from them."""

    dim: int
    ndim: int
    omega: np.ndarray  # float64 [U]
    axis: np.ndarray  # int64 [U]
    src: np.ndarray  # int64 [dim]
    label: str = ""  # the preset and the caller's options, for messages
    amplitude: float = 1.0  # RoPE's attention factor: every sine and cosine is multiplied
    # by it in float64, before the one rounding
    axis_amplitude: tuple[float, ...] | None = None  # one per position axis, in its place
    # (vision YaRN's magnitude on the rows and columns, none on the frames)
    memo: dict[str, Any] = field(default_factory=dict, repr=False)  # the @derived values

    def labelled(self, label: str) -> Plan:
        """This plan, named ``label`` in messages."""
        if label == self.label:
            return self
        return dataclasses.replace(self, label=label, memo=self.memo)

    def select(self, channels: slice) -> Plan:
        """The plan of channels ``start:stop`` only, with the frequencies they use.

        Each output value depends on its own frequency and position alone, so the shard is
        bit for bit the same slice of the full table, at a cost proportional to its width.
        """
        src = self.src[channels]
        used = np.unique(src[src >= 0] // 2)
        remap = np.full(len(self.omega), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        sincos = src >= 0
        src = src.copy()
        src[sincos] = 2 * remap[src[sincos] // 2] + src[sincos] % 2
        return Plan(
            len(src),
            self.ndim,
            self.omega[used],
            self.axis[used],
            src,
            self.label,
            self.amplitude,
            self.axis_amplitude,
        )

    def amplitude_of(self, axis: int) -> float:
        """What multiplies the sines and cosines of position axis ``axis``."""
        return self.amplitude if self.axis_amplitude is None else self.axis_amplitude[axis]

    @derived
    def exact(self) -> bool:
        """Every frequency is a power of two (NeRF): ``x * w`` is exact in float64."""
        return bool(len(self.omega)) and bool((np.frexp(self.omega)[0] == 0.5).all())

    @derived
    def identities(self) -> bool:
        """Some channel holds a position itself (NeRF's included input)."""
        return bool((self.src <= -2).any())

    @derived
    def columns(self) -> np.ndarray:
        """For each channel, its column in the direct basis ``[sin u0, cos u0, …, 0, x_0, …]``
        (:mod:`posenc.evaluate.direct`)."""
        u = len(self.omega)
        s = self.src
        return np.where(s >= 0, s, np.where(s == ZERO, 2 * u, 2 * u + 1 + (-2 - s)))

    @derived
    def axis_columns(self) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        """Per axis: its frequencies ``us``, and for each channel its column in that axis's
        basis ``[sin, cos, …, 0, x_a]`` (other axes' channels take the zero column)."""
        out = []
        for a in range(self.ndim):
            us = np.flatnonzero(self.axis == a)
            local = np.full(len(self.omega) + 1, -1, dtype=np.int64)
            local[us] = np.arange(len(us))
            s = self.src
            freq = np.where(s >= 0, local[np.where(s >= 0, s // 2, -1)], -1)
            n = len(us)
            cols = np.where(freq >= 0, 2 * freq + s % 2, np.where(s == ident(a), 2 * n + 1, 2 * n))
            out.append((us, cols))
        return tuple(out)

    @derived
    def constants(self) -> PlanConstants:
        """The arrays the direct formula needs, as Python tuples: constants of a traced graph
        (touch this before tracing, so a tracer only reads an attribute)."""
        largest = float(np.abs(self.omega).max()) if len(self.omega) else 0.0
        return PlanConstants(
            tuple(float(w) for w in self.omega),
            tuple(int(a) for a in self.axis),
            tuple(int(c) for c in self.columns),
            arrangement(self.columns, len(self.omega)),
            tuple(
                (
                    tuple(float(self.omega[u]) for u in us),
                    tuple(int(c) for c in cols),
                    arrangement(cols, len(us)),
                )
                for us, cols in self.axis_columns
            ),
            largest,
            self.exact,
            self.identities,
            self.amplitude,
            None
            if self.axis_amplitude is None
            else tuple(self.axis_amplitude[int(a)] for a in self.axis),
        )

    @functools.cached_property
    def angle_rule(self) -> str:
        """The accuracy rule's message for positions checked on the device (no formatting
        there), naming this plan's own label (kept per labelled copy, not shared)."""
        return (
            "`positions` must keep |position| x frequency within angles below 2^27 rad (the "
            f"largest frequency of preset {self.label} is {self.constants.largest:.6g})"
        )

    @derived
    def zeros(self) -> tuple[int, ...]:
        return tuple(int(j) for j in np.flatnonzero(self.src == ZERO))

    @derived
    def axes(self) -> tuple[AxisPlan, ...]:
        out = []
        for a in range(self.ndim):
            us = np.flatnonzero(self.axis == a)
            local = {int(u): i for i, u in enumerate(us)}
            pairs = [
                (j, 2 * local[int(s) // 2] + int(s) % 2)
                for j, s in enumerate(self.src)
                if s >= 0 and int(s) // 2 in local
            ]
            identity = tuple(j for j, s in enumerate(self.src) if s == ident(a))
            out.append(AxisPlan(a, self.omega[us], _runs(pairs), identity, self.amplitude_of(a)))
        return tuple(out)


def _runs(pairs: list[tuple[int, int]]) -> tuple[Run, ...]:
    """Group (dst, src) pairs (in channel order) into strided slices of both: interleaved is
    one run, halves two, NeRF's frequency-major channels one per axis; a column that feeds
    several channels (RoPE's duplicated cosines) starts a run per copy.

    A run starts at the first pair not yet taken; its step is that to the nearest untaken pair
    among the next ``LOOKAHEAD`` further along in both channel and column, and it extends while
    the progression's next pair is present and untaken. Linear in the number of pairs.
    """
    where = dict(pairs)
    taken: set[int] = set()
    runs: list[Run] = []
    for i, (d0, s0) in enumerate(pairs):
        if d0 in taken:
            continue
        step_d = step_s = 1
        for d1, s1 in pairs[i + 1 : i + 1 + LOOKAHEAD]:
            if d1 not in taken and s1 > s0:
                step_d, step_s = d1 - d0, s1 - s0
                break
        length = 1
        while (
            (d := d0 + length * step_d) in where
            and d not in taken
            and (where[d] == s0 + length * step_s)
        ):
            length += 1
        if length == 1:
            step_d = step_s = 1
        taken.update(range(d0, d0 + (length - 1) * step_d + 1, step_d))
        runs.append(
            Run(
                slice(d0, d0 + (length - 1) * step_d + 1, step_d),
                slice(s0, s0 + (length - 1) * step_s + 1, step_s),
            )
        )
    return tuple(runs)


LOOKAHEAD = 8  # pairs a run's start looks through for its second pair


def _block_widths(enc: Encoding, width: int, ndim: int, label: str, dim: int) -> list[int]:
    """Channel width of each block (in channel order) out of ``width`` sin/cos channels."""
    if enc.widths == "exact":
        fractions = enc.fractions or (1.0 / ndim,) * ndim
        if len(fractions) != ndim:
            raise PosencError(f"preset {label} has {len(fractions)} blocks but ndim={ndim}")
        shares = [Fraction(f).limit_denominator(1000) for f in fractions]
        multiple = math.lcm(*[(Fraction(2) / s).numerator for s in shares])
        blocks = [width * s for s in shares]
        if any(b.denominator != 1 or b % 2 or b == 0 for b in blocks):
            extra = f" plus {ndim} (the included inputs)" if enc.include_input else ""
            raise PosencError(
                f"`dim` must be a positive multiple of {multiple}{extra} for preset {label} "
                f"({_describe_blocks(shares)}), got {dim}"
            )
        return [int(b) for b in blocks]
    if enc.widths == "floor":
        n = width // (2 * ndim)
        if n == 0:
            raise PosencError(
                f"`dim` must be at least {2 * ndim} for preset {label} "
                f"(each of {ndim} axes needs one sin/cos pair), got {dim}"
            )
        return [2 * n] * ndim
    if enc.widths == "ceil":
        if width < 1:
            raise PosencError(f"`dim` must be at least 1 for preset {label}, got {dim}")
        return [2 * math.ceil(width / (2 * ndim))] * ndim
    if ndim != 1:
        raise PosencError(f"preset {label} splits one block and needs ndim=1, got {ndim}")
    if width < 1:
        raise PosencError(f"`dim` must be at least 1 for preset {label}, got {dim}")
    return [width]


def _describe_blocks(shares: list[Fraction]) -> str:
    if len(shares) == 1:
        return "sines and cosines in equal numbers"
    parts = ", ".join(str(s) for s in shares)
    return f"blocks of {parts} of the width, each an even number of channels"


def check_channels(channels: object, dim: int) -> slice | None:
    """``channels`` as a ``slice(start, stop)`` within ``[0, dim]``, or None for all."""
    if channels is None:
        return None
    if not isinstance(channels, slice) or channels.step not in (None, 1):
        raise PosencError(f"`channels` must be a slice(start, stop) with step 1, got {channels!r}")
    start = 0 if channels.start is None else channels.start
    stop = dim if channels.stop is None else channels.stop
    for name, value in (("start", start), ("stop", stop)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise PosencError(
                f"`channels.{name}` must be an integer (a slice(start, stop) of channels), "
                f"got {value!r}"
            )
    start, stop = int(start), int(stop)  # NumPy and torch integers alike
    if not 0 <= start <= stop <= dim:
        raise PosencError(
            f"`channels` must satisfy 0 <= start <= stop <= dim = {dim}, got {channels!r}"
        )
    return slice(start, stop)


def channel_plan(enc: Encoding, dim: int, ndim: int, label: str, channels: object) -> Plan:
    """``plan(...)``, restricted to ``channels`` when given."""
    full = plan(enc, dim, ndim, label)
    picked = check_channels(channels, dim)
    return full if picked is None or picked == slice(0, dim) else full.select(picked)


PLANS = BoundedCache(16 << 20)


def plan(enc: Encoding, dim: int, ndim: int, label: str) -> Plan:
    """The channel plan of ``enc`` at width ``dim`` over ``ndim`` position axes, named
    ``label`` in messages (kept by its numbers, up to 16 MiB of plans)."""
    dim = check_int("dim", dim, minimum=1, maximum=MAX_DIM)
    kept = PLANS.get_or_make(
        (enc, dim, ndim),
        lambda: _build(enc, dim, ndim, label, hint=True),
        lambda p: nbytes(p.omega, p.axis, p.src),
    )
    return kept.labelled(label)


def _build(enc: Encoding, dim: int, ndim: int, label: str, *, hint: bool) -> Plan:
    width = dim - (ndim if enc.include_input else 0)
    if width < 0:
        raise PosencError(
            f"`dim` must be at least {ndim} for preset {label} (one included input per axis), "
            f"got {dim}"
        )
    widths = _block_widths(enc, width, ndim, label, dim)
    order = enc.axis_order or tuple(range(ndim))
    omegas: list[np.ndarray] = []
    counts: list[tuple[int, int]] = []  # (n_sin, n_cos) per block
    first: list[int] = []  # index u of each block's first frequency
    total = 0
    for w in widths:
        n_sin, n_cos = (w + 1) // 2, w // 2
        den = denominator(w, enc.shift, guard=enc.guard)
        if enc.spacing == "geometric" and not den > 0 and n_sin > 0:
            raise PosencError(
                f"`dim` is too small for preset {label}: its spacing divides by "
                f"n - {enc.shift:g} for n frequencies per block, which must be > 0; "
                f"dim={dim} gives n={n_sin}{_smallest(enc, dim, ndim, label) if hint else ''}"
            )
        omegas.append(
            frequencies(enc.spacing, n_sin, den=den, base=enc.base, min_timescale=enc.min_timescale)
        )
        counts.append((n_sin, n_cos))
        first.append(total)
        total += n_sin

    def sin(b: int, k: int) -> int:
        return 2 * (first[b] + k)

    def cos(b: int, k: int) -> int:
        return 2 * (first[b] + k) + 1

    nb = len(widths)
    src: list[int] = [ident(order[b]) for b in range(nb)] if enc.include_input else []
    if enc.layout == "interleaved":
        for b, (ns, nc) in enumerate(counts):
            for k in range(ns):
                src.append(sin(b, k))
                if k < nc:
                    src.append(cos(b, k))
    elif enc.layout in ("halves", "halves-cos-first"):
        for b, (ns, nc) in enumerate(counts):
            sins = [sin(b, k) for k in range(ns)]
            coss = [cos(b, k) for k in range(nc)]
            src += sins + coss if enc.layout == "halves" else coss + sins
    elif enc.layout == "sin-major":
        src += [sin(b, k) for b in range(nb) for k in range(counts[b][0])]
        src += [cos(b, k) for b in range(nb) for k in range(counts[b][1])]
    elif enc.layout == "frequency-major":
        for k in range(max(ns for ns, _ in counts)):
            src += [sin(b, k) for b in range(nb) if k < counts[b][0]]
            src += [cos(b, k) for b in range(nb) if k < counts[b][1]]
    else:
        raise PosencError(f"unknown layout {enc.layout!r}")
    src = src[:dim] + [ZERO] * (dim - len(src))
    axis = np.concatenate([np.full(counts[b][0], order[b], dtype=np.int64) for b in range(nb)])
    with np.errstate(over="ignore", invalid="ignore"):
        omega = np.concatenate(omegas) * enc.scale
    check_finite_frequencies(
        omega,
        label,
        f"dim={dim}, base={enc.base:g}, min_timescale={enc.min_timescale:g}, "
        f"shift={enc.shift:g}, scale={enc.scale:g}",
    )
    return Plan(dim, ndim, omega, axis, np.asarray(src, dtype=np.int64), label)


def _smallest(enc: Encoding, dim: int, ndim: int, label: str) -> str:
    """``; the smallest width it takes is D`` when one is found close above ``dim``.

    The search starts where a block is wide enough for the spacing's shift (a block of ``w``
    channels needs ``w / 2 > shift``) and tries a bounded number of widths, none of which
    searches again.
    """
    share = min(enc.fractions) if enc.widths == "exact" and enc.fractions else 1 / ndim
    inputs = ndim if enc.include_input else 0
    first = max(dim + 1, math.floor(2 * max(enc.shift, 0.0) / share) + inputs - 2)
    for d in range(first, min(first + 16 * ndim + 16, MAX_DIM + 1)):
        try:
            _build(enc, d, ndim, label, hint=False)
        except PosencError:
            continue
        return f"; the smallest width it takes is {d}"
    return ""


def check_finite_frequencies(omega: np.ndarray, label: str, detail: str) -> None:
    """Frequencies that overflow (or are NaN) come from options out of range."""
    if len(omega) and not np.isfinite(omega).all():
        raise PosencError(
            f"the frequencies of preset {label} overflow for {detail}: choose options whose "
            "frequencies are finite"
        )
