"""Identify a stored table: which preset and options reproduce it, and how closely."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._api import grid, table
from ._validate import PosencError

# Originals computed in float32 err by ~6e-8 * position; a bf16 copy by up to 2^-8. A table
# within this of a preset is that preset; a learned table is off by O(1).
MATCH = 1e-2


@dataclass(frozen=True)
class Candidate:
    preset: str
    call: str  # the posenc call that reproduces it
    error: float  # max |stored - candidate|
    also: tuple[str, ...] = field(default=())


def _calls(rows: int, dim: int, zero_rows: list[int]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(preset, kind, kwargs) worth trying for a [rows, dim] table."""
    one_d: list[tuple[str, dict[str, Any]]] = [
        ("whisper", {}),
        ("fairseq", {}),
        ("tensor2tensor", {}),
        ("timestep", {}),
        ("timestep", {"flip_sin_to_cos": True}),
        ("timestep", {"flip_sin_to_cos": True, "downscale_freq_shift": 0}),
        ("timestep", {"downscale_freq_shift": 0}),
        ("vaswani", {}),
        ("marian", {}),
        ("tatp22", {}),
    ]
    for z in zero_rows[:2]:
        one_d.append(("fairseq", {"padding_idx": z}))
    for preset, kw in one_d:
        yield preset, "table", {"length": rows, **kw}
    for extra in (0, 1):
        cells = rows - extra
        for h in range(1, math.isqrt(max(cells, 0)) + 1):
            if cells % h or h < 2 or cells // h > 4 * h:
                continue
            for shape in {(h, cells // h), (cells // h, h)}:
                yield from _grid_calls(shape, extra)


def _grid_calls(shape: tuple[int, int], extra: int) -> Iterator[tuple[str, str, dict[str, Any]]]:
    cls: dict[str, Any] = {"cls_token": True} if extra else {}
    yield "mae", "grid", {"shape": shape, **cls}
    yield (
        "diffusers-2d",
        "grid",
        {"shape": shape, **({"cls_token": True, "extra_tokens": 1} if extra else {})},
    )
    if extra:
        return
    yield "hf-2d", "grid", {"shape": shape}
    for rev in (False, True):
        for inter in (False, True):
            yield (
                "timm-2d",
                "grid",
                {"shape": shape, "reverse_coord": rev, "interleave_sin_cos": inter},
            )
    yield "detr", "grid", {"shape": shape}
    yield "detr", "grid", {"shape": shape, "normalize": True}
    yield "t2t-nd", "grid", {"shape": shape}
    yield "tatp22", "grid", {"shape": shape}


def _render(preset: str, kind: str, dim: int, kw: dict[str, Any]) -> str:
    kw = dict(kw)
    lead = repr(kw.pop("length" if kind == "table" else "shape"))
    opts = "".join(f", {k}={v!r}" for k, v in kw.items())
    return f"posenc.{kind}({lead}, {dim}, preset={preset!r}{opts})"


def identify(values: np.ndarray) -> list[Candidate]:
    """Candidates sorted by error; equal tables (same numbers) are folded into ``also``."""
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
    found: list[Candidate] = []
    for preset, kind, kw in _calls(rows, dim, zero_rows):
        args = dict(kw)
        try:
            if kind == "table":
                ours = table(args.pop("length"), dim, preset=preset, dtype=np.float64, **args)
            else:
                ours = grid(args.pop("shape"), dim, preset=preset, dtype=np.float64, **args)
        except PosencError:
            continue  # this preset cannot take this width
        if ours.shape != arr.shape:
            continue
        err = float(np.abs(ours - arr).max(initial=0.0))
        found.append(Candidate(preset, _render(preset, kind, dim, kw), err))
    found.sort(key=lambda c: c.error)
    folded: list[Candidate] = []
    for c in found:
        twin = next(
            (
                f
                for f in folded
                if abs(f.error - c.error) <= 1e-12 * max(1, c.error) and f.preset != c.preset
            ),
            None,
        )
        if twin is not None and c.error < MATCH:
            i = folded.index(twin)
            folded[i] = Candidate(twin.preset, twin.call, twin.error, (*twin.also, c.preset))
        elif all(f.call != c.call for f in folded):
            folded.append(c)
    return folded
