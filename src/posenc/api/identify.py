"""Identify a stored table: which preset and options reproduce it, and how closely.

The candidates come from the presets themselves: each entry of ``PRESETS`` lists the option
sets to try (``Preset.identify``), and its Encoding says whether it is a table or a grid.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc.api.sinusoidal import grid, table
from posenc.errors import PosencError
from posenc.spec.presets import PRESETS, ZERO_ROW, Preset

# Originals computed in float32 err by ~6e-8 * position; a bf16 copy by up to 2^-8. A table
# within this of a preset is that preset; a learned table is off by O(1).
MATCH = 1e-2
NEAR = 0.35
"""Root-mean-square difference below which a table that is not a preset is still a modified
copy of it (fine-tuned, noisy), and the preset is named as the closest. A sinusoid's own RMS
is about 0.71, and an unrelated table differs from one by about 1: no such preset is named."""


@dataclass(frozen=True)
class Candidate:
    preset: str
    call: str  # the posenc call that reproduces it
    error: float  # max |stored - candidate|
    also: tuple[str, ...] = field(default=())
    rms: float = 0.0  # root-mean-square of stored - candidate
    options: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """The call's keywords: ``length`` (a table) or ``shape`` (a grid), then the preset's
    options, as ``posenc.table`` / ``posenc.grid`` take them."""


def _shapes(cells: int) -> Iterator[tuple[int, int]]:
    """The (H, W) grids worth trying for ``cells`` tokens: both sides >= 2, aspect <= 4."""
    for h in range(2, math.isqrt(max(cells, 0)) + 1):
        if cells % h or cells // h > 4 * h:
            continue
        # a set, as ever: its order (fixed, for ints) picks which of two equal grids is named
        yield from {(h, cells // h), (cells // h, h)}


def _option_sets(p: Preset, zero_rows: list[int]) -> Iterator[dict[str, Any]]:
    """The preset's identify option sets, ZERO_ROW replaced by each of the first two zero rows."""
    for opts in p.identify:
        keys = [k for k, v in opts.items() if v is ZERO_ROW]
        for rows in itertools.product(zero_rows[:2], repeat=len(keys)):
            yield {**opts, **dict(zip(keys, rows, strict=True))}


def _calls(
    rows: int, zero_rows: list[int], shape: tuple[int, ...] | None = None
) -> Iterator[tuple[Preset, str, dict[str, Any]]]:
    """(preset, kind, kwargs) worth trying for a table of ``rows`` rows: the tables, then the
    grids by the number of zero rows their options put first (a class token), by shape; only
    grids of ``shape`` where it is given."""
    grids: list[tuple[Preset, dict[str, Any], int]] = []
    for p in PRESETS.values():
        ndim = p.encoding.ndim
        for opts in _option_sets(p, zero_rows):
            if ndim in (1, None) and shape is None:
                yield p, "table", {"length": rows, **opts}
            if ndim in (2, None):
                try:
                    grids.append((p, opts, p.resolve(opts, grid=True).extra_tokens))
                except PosencError:
                    continue
    for extra in sorted({e for _, _, e in grids}):
        shapes = _shapes(rows - extra) if shape is None else [shape]
        for tried in shapes:
            for p, opts, e in grids:
                if e == extra:
                    yield p, "grid", {"shape": tried, **opts}


def _render(preset: str, kind: str, dim: int, kw: Mapping[str, Any]) -> str:
    kw = dict(kw)
    lead = repr(kw.pop("length" if kind == "table" else "shape"))
    opts = "".join(f", {k}={v!r}" for k, v in kw.items())
    return f"posenc.{kind}({lead}, {dim}, preset={preset!r}{opts})"


def _fold(found: list[tuple[Candidate, int]]) -> list[Candidate]:
    """Candidates (sorted by error) with the matching ones that give the same numbers folded
    into one: named by the lowest ``identify_rank``, the others in ``also``, each once."""
    groups: list[list[tuple[Candidate, int]]] = []
    for c, rank in found:
        if c.error < MATCH:
            same = next(
                (
                    g
                    for g in groups
                    if g[0][0].error < MATCH
                    and abs(g[0][0].error - c.error) <= 1e-12 * max(1, c.error)
                ),
                None,
            )
            if same is not None:
                same.append((c, rank))
                continue
        if all(g[0][0].call != c.call for g in groups):
            groups.append([(c, rank)])
    folded = []
    for g in groups:
        head = min(g, key=lambda m: m[1])[0]  # min keeps the first of equal ranks
        also = tuple(dict.fromkeys(m.preset for m, _ in g if m.preset != head.preset))
        folded.append(Candidate(head.preset, head.call, head.error, also, head.rms, head.options))
    return folded


def identify(values: np.ndarray, shape: tuple[int, ...] | None = None) -> list[Candidate]:
    """Candidates sorted by error; equal tables (same numbers) are folded into ``also``.
    With ``shape`` (a model's patch grid), only grids of that shape are tried."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr.reshape([s for s in arr.shape if s != 1] or [1])
    if arr.ndim != 2:
        raise PosencError(
            f"the table must be 2-D ([positions, channels]), got shape {values.shape}"
        )
    rows, dim = arr.shape
    if arr.size == 0:
        raise PosencError(f"the table is empty (shape {values.shape})")
    if not np.isfinite(arr).all():
        raise PosencError("the table holds NaN or infinite values")
    zero_rows = [int(i) for i in np.flatnonzero(~arr.any(axis=1))]
    found: list[tuple[Candidate, int]] = []
    for p, kind, kw in _calls(rows, zero_rows, shape):
        args = dict(kw)
        try:
            if kind == "table":
                ours = table(args.pop("length"), dim, preset=p, dtype=np.float64, **args)
            else:
                ours = grid(args.pop("shape"), dim, preset=p, dtype=np.float64, **args)
        except PosencError:
            continue  # this preset cannot take this width
        if ours.shape != arr.shape:
            continue
        diff = ours - arr
        err = float(np.abs(diff).max(initial=0.0))
        rms = float(np.sqrt(np.mean(np.square(diff)))) if diff.size else 0.0
        call = _render(p.name, kind, dim, kw)
        found.append((Candidate(p.name, call, err, rms=rms, options=kw), p.identify_rank))
    found.sort(key=lambda f: f[0].error)
    return _fold(found)
