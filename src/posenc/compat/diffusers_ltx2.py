"""diffusers' own arithmetic for halves inside each block: Allegro's per-axis halves and
LTX-2's tables (interleaved or per-head ``split``): ``compat="diffusers"`` of Allegro's preset
(:func:`allegro`, named by its record's ``replays``), and the replays
``LTX2AudioVideoRotaryPosEmbed``'s stand-in (:mod:`posenc.torch._ltx2_rope`) uses with
``compat="original"``.

Bit for bit with diffusers 0.42 on CPU torch, checked against it in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from posenc.compat.diffusers import ltx_tables, rotary_1d
from posenc.compat.grid import GridCall, check_form, compat_grid
from posenc.errors import PosencError


def allegro(call: GridCall) -> tuple[Any, Any]:
    """``posenc.rope_grid(..., preset="allegro", compat="diffusers")``: the pipeline's
    ``get_3d_rotary_pos_embed_allegro`` tables, their rows gathered as the transformer does
    (token ``(t, h, w)`` takes row ``t``, ``h``, ``w`` of each axis's table): ``[F * H * W,
    dim]``, halves inside each of the three blocks."""
    r = call.rotary
    check_form(call)  # three blocks of dim / 3, halves inside each, in the order t, h, w
    if call.cropped or any(s0 != 0.0 for s0 in call.starts):
        raise PosencError(
            f"`compat='diffusers'`: allegro's positions are i / scale from 0 on every axis, "
            f"got start={list(call.starts)}"
        )
    scales = [1.0 / st for st in call.steps]

    def tables(work: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        return allegro_tables(call.dims, r.dim, float(r.base), scales, work)

    return compat_grid(tables, call)


def allegro_tables(
    dims: Sequence[int], dim: int, theta: float, scales: Sequence[float], device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``get_3d_rotary_pos_embed_allegro(dim, ((0, 0), (H, W)), (H, W), F, scales, theta)``:
    per axis the float32 grid ``linspace(0, n (n - 1) / n, n)`` over its scale, a table of
    ``dim // 3`` in halves (``repeat_interleave_real=False``); then each token's rows
    (``apply_rotary_emb_allegro``'s ``F.embedding`` by the integer ids), ``[t | h | w]``."""
    k, d = len(dims), dim // 3
    parts: list[list[torch.Tensor]] = [[], []]
    for a, (n, s) in enumerate(zip(dims, scales, strict=True)):
        grid = torch.linspace(0, n * (n - 1) / n, n, device=device, dtype=torch.float32)
        pair = rotary_1d(d, grid / s, theta, interleave=False)
        shape = [1] * k + [d]
        shape[a] = n
        for j in (0, 1):
            parts[j].append(pair[j].reshape(shape).expand(*dims, d))
    n = math.prod(dims)
    return torch.cat(parts[0], dim=-1).reshape(n, -1), torch.cat(parts[1], dim=-1).reshape(n, -1)


def ltx2_tables(
    coords: torch.Tensor,
    dim: int,
    theta: float,
    bases: Sequence[float],
    *,
    double_precision: bool,
    heads: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``LTX2AudioVideoRotaryPosEmbed.forward(coords)``: ``coords`` ``[B, k, N, 2]`` patch
    bounds (their float32 midpoints) or ``[B, k, N]`` positions, over the first ``k`` bases,
    then LTX's float32 tables (the ladder's powers in float64 with ``double_precision``).
    ``heads`` None: interleaved ``[B, N, dim]``; else ``split``: ``[B, heads, N, dim / (2
    heads)]``, one column per angle, the still ones first."""
    if coords.ndim == 4:
        start, end = coords.chunk(2, dim=-1)
        coords = ((start + end) / 2.0).squeeze(-1)
    k = coords.shape[1]
    grid = torch.stack([coords[:, a] / bases[a] for a in range(k)], dim=-1)
    wide = torch.float64 if double_precision else torch.float32
    cos, sin = ltx_tables(grid, dim, theta, wide=wide, pairs=heads is None)
    if heads is None:
        return cos, sin
    b, n = cos.shape[:2]
    return tuple(t.reshape(b, n, heads, -1).swapaxes(1, 2) for t in (cos, sin))  # type: ignore[return-value]


def ltx2_coords(
    dims: Sequence[int],
    scales: Sequence[int],
    patch: Sequence[int],
    causal_offset: int,
    *,
    fps: float = 24.0,
    hop: float = 160.0,
    rate: float = 16000.0,
    shift: int = 0,
    dtype: torch.dtype = torch.float32,
    device: Any = None,
) -> torch.Tensor:
    """``prepare_video_coords`` (``dims`` = latent frames, rows, columns) or
    ``prepare_audio_coords`` (``dims`` = latent frames): ``[1, k, N, 2]`` patch bounds in
    pixels (frames in seconds: ``max(f * s + offset - s, 0) / fps``; audio ``… * hop /
    rate``), tokens frame-major. In ``dtype``: float32 is diffusers' arithmetic, float64
    rounds each bound once."""
    k = len(dims)
    audio = k == 1
    lo = [
        torch.arange(
            shift if audio else 0, n + (shift if audio else 0), p, dtype=dtype, device=device
        )
        for n, p in zip(dims, patch, strict=True)
    ]
    bounds = []
    for a, (g, p, s) in enumerate(zip(lo, patch, scales, strict=True)):
        pair = torch.stack([g, g + p], dim=-1) * s  # [n, 2] in pixels (mel frames)
        if a == 0:  # the causal first frame: shifted, clamped, in seconds
            pair = (pair + causal_offset - s).clamp(min=0)
            pair = pair * hop / rate if audio else pair / fps
        bounds.append(pair)
    mesh = torch.meshgrid(*[torch.arange(len(g), device=device) for g in lo], indexing="ij")
    rows = [bounds[a][m.reshape(-1)] for a, m in enumerate(mesh)]
    return torch.stack(rows, dim=0)[None]
