"""diffusers' own arithmetic for Kandinsky 5 and 6: ``compat="diffusers"`` of their presets
(:func:`rotary_grid`, named by their records' ``replays``), and the angles the stand-ins of
``posenc.torch.patch`` replay.

diffusers (``transformer_kandinsky.py``, ``transformer_kandinsky6.py``) keeps per axis a
float32 buffer ``outer(arange(max_pos), exp(-ln(base) * arange(n) / n))``, reads its rows at
the positions, multiplies them by a frequency factor (Kandinsky 6's audio) or divides them by
the pipeline's ``scale_factor``, and takes cos and sin in float32.

Also the angles of the ``rotate_half`` modules whose ``inv_freq`` buffer ``.to()`` may cast
(Ideogram 4's, Cosmos 3's, Anima's), which their patch stand-ins replay.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from posenc.compat.grid import PAIRS, GridCall, check_form, compat_grid
from posenc.errors import PosencError
from posenc.spec.rotary import Rotary


def kandinsky_angles(
    d: int,
    pos: torch.Tensor,
    base: float,
    *,
    divisor: float = 1.0,
    freqs_scaling: float | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """diffusers' float32 angles of one block of width ``d`` at the integer positions ``pos``
    ``[*s]``: ``get_freqs(d // 2, base)`` (times ``freqs_scaling``, Kandinsky 6's 1-D
    module), the rows ``pos`` of their outer product with ``arange`` (cast to ``dtype``, as
    ``.to()`` casts the buffer), divided by ``divisor``; ``[*s, d / 2]``. (A row of ``outer``
    is its position times the frequencies, one float32 product each: the rows of any table
    long enough.)"""
    n = d // 2
    freqs = torch.exp(
        -math.log(base) * torch.arange(start=0, end=n, dtype=torch.float32, device=pos.device) / n
    )
    if freqs_scaling is not None:
        freqs = freqs * freqs_scaling
    rows = torch.outer(pos.reshape(-1).to(torch.float32), freqs).reshape(*pos.shape, n)
    return rows.to(dtype) / divisor


def inv_freq(d: int, base: float, device: Any = None) -> torch.Tensor:
    """The float32 ``inv_freq`` buffer of diffusers' ``rotate_half`` modules (Ideogram 4's,
    Cosmos 3's, Anima's): ``1 / base ** (arange(0, d, 2) / d)``, ``[d / 2]``."""
    return 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))


def halves_angles(
    inv: torch.Tensor, pos: torch.Tensor, sections: tuple[int, ...] | None = None
) -> torch.Tensor:
    """Those modules' angles: their buffer ``inv`` ``[n]`` (as ``.to()`` left it) read as
    float32, times the float32 positions ``pos`` ``[*s]`` by a matmul of inner size 1 (one
    product each; an ambient autocast lowers it, where the caller lets it), ``[*s, n]``. With
    ``sections`` (Qwen3-VL's interleaved mrope) ``pos`` is ``[3, *s]``: frequency ``j < 3 *
    sections[a]`` with ``j % 3 == a`` reads axis ``a`` (1, 2), every other one axis 0."""
    freqs = (inv.float()[:, None] @ pos.float()[..., None, :]).transpose(-1, -2)
    if sections is None:
        return freqs
    out = freqs[0].clone()
    for axis in (1, 2):
        idx = torch.arange(axis, 3 * sections[axis], 3, device=out.device)
        out[..., idx] = freqs[axis][..., idx]
    return out


def _divisors(rotary: Rotary) -> list[float]:
    """The ``scale_factor`` of each block: the inverse of its ``axes_scale``."""
    return [1.0 / s for s in (rotary.axes_scale or (1.0,) * len(rotary.axes_dim or ()))]


def rotary_grid(call: GridCall) -> tuple[Any, Any]:
    """``posenc.rope_grid(..., preset=family, compat="diffusers")`` for Kandinsky 5 and 6:
    ``Kandinsky5RoPE3D`` / ``Kandinsky6RoPE3D`` at integer positions ``start + i * step``
    (the rows of their tables), each block's angles divided by its ``scale_factor`` (``1 /
    axes_scale``), broadcast, concatenated, cos and sin in float32, pairs as ``layout`` says
    (interleaved: the 2 x 2 matrices' own pairs; halves and compact hold the same numbers)."""
    r = call.rotary
    check_form(call, {"layout": PAIRS, "axes_scale": None, "axes_dim": None})
    if list(call.blocks) != list(range(len(call.dims))):
        raise PosencError(
            f"`block_axes`: compat='diffusers' repeats {call.family}'s block order "
            f"{tuple(range(len(call.dims)))}, not {tuple(call.blocks)}: drop `block_axes`"
        )
    if r.axes_base is not None:
        raise PosencError(
            f"`axes_base`: compat='diffusers' repeats {call.family}'s one base, not {r.axes_base}"
        )
    for a, (s0, st, n) in enumerate(zip(call.starts, call.steps, call.dims, strict=True)):
        if call.cropped or s0 != int(s0) or st != int(st) or s0 < 0 or s0 + st * (n - 1) < 0:
            raise PosencError(
                f"`compat='diffusers'`: {call.family}'s positions are rows of its tables (integers "
                f">= 0); axis {a} asks for {s0:g} + i * {st:g}, i < {n}"
            )

    def tables(work: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        parts = []
        for a, (d, div) in enumerate(zip(r.axes_dim, _divisors(r), strict=True)):
            pos = int(call.starts[a]) + int(call.steps[a]) * torch.arange(call.dims[a], device=work)
            shape = [1] * len(call.dims) + [d // 2]
            shape[a] = call.dims[a]
            angles = kandinsky_angles(d, pos, float(r.base), divisor=div)
            parts.append(angles.reshape(shape).expand(*call.dims, d // 2))
        angles = torch.cat(parts, dim=-1).reshape(math.prod(call.dims), -1)
        return laid_out(torch.cos(angles), r.layout), laid_out(torch.sin(angles), r.layout)

    return compat_grid(tables, call)


def laid_out(t: torch.Tensor, layout: str) -> torch.Tensor:
    """One column per frequency ``[..., n]`` placed by ``layout``: each twice in a row
    (interleaved), both halves (halves), or once (compact)."""
    if layout == "interleaved":
        return t.repeat_interleave(2, dim=-1)
    if layout == "halves":
        return torch.cat([t, t], dim=-1)
    return t.contiguous()
