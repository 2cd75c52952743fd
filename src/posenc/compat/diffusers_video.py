"""diffusers' own arithmetic for the video and image families that share Wan's, HunyuanVideo's,
CogVideoX's or Qwen-Image's formula (HunyuanImage-2.1, Framepack, Motif-Video, Helios, ChronoEdit,
EasyAnimate, SANA-WM, AnyFlow, Qwen-Image-Layered, NucleusMoE-Image, Qwen-Image 2.1, MiniMax-H3):
``compat="diffusers"`` of their presets (:func:`hunyuan_image`, :func:`minimax_h3`, named by
their records' ``replays``) and the tables their patch stand-ins replay
(``posenc.torch._video_rope``).

Every table here is per axis ``get_1d_rotary_pos_embed`` (or its complex form, or MiniMax-H3's
shared ladder) at the positions the family builds, broadcast over the grid and concatenated:
elementwise the same operations as diffusers' own flattened grids, so the same bits on CPU
torch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from posenc.compat.diffusers import qwen_image_rows, rotary_1d
from posenc.compat.grid import GridCall, check_form, compat_grid
from posenc.errors import PosencError


def grid_tables(
    positions: Sequence[torch.Tensor],
    axes_dim: Sequence[int],
    theta: float,
    *,
    wide: torch.dtype = torch.float32,
    ladders: Sequence[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per grid axis ``a``, ``get_1d_rotary_pos_embed(axes_dim[a], positions[a], theta,
    use_real=True, freqs_dtype=wide)`` (pairs, float32), broadcast over the grid ``[len(p) for p
    in positions]`` (first axis outermost) and concatenated: ``(cos, sin)`` ``[S, sum(axes_dim)]``.
    Positions in float32 are HunyuanVideo's, HunyuanImage's, Framepack's and CogVideoX's; int64
    with ``wide`` float64, Wan's and ChronoEdit's. ``ladders``: each axis's frequencies ``[d /
    2]`` as a module keeps them (Helios's buffers, maybe cast by ``.to()``), read as float32
    in place of :func:`ladder` (the same numbers while they are float32)."""
    dims = [int(p.shape[0]) for p in positions]
    k, parts_cos, parts_sin = len(dims), [], []
    for a, (d, pos) in enumerate(zip(axes_dim, positions, strict=True)):
        if ladders is None:
            cos, sin = rotary_1d(d, pos, theta, freqs_dtype=wide)
        else:  # outer(pos, freqs): one float32 product each, as get_1d_rotary_pos_embed's
            angles = torch.outer(pos, ladders[a].to(device=pos.device, dtype=torch.float32))
            cos, sin = (f(angles).repeat_interleave(2, dim=1) for f in (torch.cos, torch.sin))
        shape = [1] * k + [d]
        shape[a] = dims[a]
        parts_cos.append(cos.reshape(shape).expand(*dims, d))
        parts_sin.append(sin.reshape(shape).expand(*dims, d))
    cos, sin = torch.cat(parts_cos, dim=-1), torch.cat(parts_sin, dim=-1)
    return cos.flatten(0, -2), sin.flatten(0, -2)  # [n, width] (an empty grid too)


def ladder(
    d: int, theta: float, dtype: torch.dtype = torch.float32, device: Any = None
) -> torch.Tensor:
    """diffusers' frequencies of a block of width ``d``: ``1 / theta ** (arange(0, d, 2) / d)``
    in ``dtype`` (``get_1d_rotary_pos_embed``'s, and the buffers of Helios), ``[d / 2]``."""
    return 1.0 / (theta ** (torch.arange(0, d, 2, dtype=dtype, device=device)[: d // 2] / d))


def complex_grid(
    positions: Sequence[torch.Tensor],
    axes_dim: Sequence[int],
    theta: float,
    *,
    wide: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Per grid axis ``get_1d_rotary_pos_embed(d, positions[a], theta, use_real=False,
    freqs_dtype=wide)`` (``polar`` of the angles: complex64, or complex128 from float64),
    broadcast over the grid and concatenated: ``[S, sum(axes_dim) / 2]`` (SANA-WM, AnyFlow)."""
    dims = [int(p.shape[0]) for p in positions]
    parts = []
    for a, (d, pos) in enumerate(zip(axes_dim, positions, strict=True)):
        angles = torch.outer(pos, ladder(d, theta, wide, pos.device))
        shape = [1] * len(dims) + [d // 2]
        shape[a] = dims[a]
        parts.append(torch.polar(torch.ones_like(angles), angles).reshape(shape).expand(*dims, -1))
    return torch.cat(parts, dim=-1).flatten(0, -2)  # [n, width] (an empty grid too)


QWEN21_RANGE = (-1024, 8192)
"""``QwenImage21Rope``'s table: positions ``-1024 … 8191``."""


def qwen_ids_table(ids: torch.Tensor, axes_dim: Sequence[int], theta: float) -> torch.Tensor:
    """``QwenImage21Rope``'s rows of the token positions ``ids`` ``[N, 3]`` (int64, within
    ``-1024 … 8191``): per axis the complex64 rows of ``rope_params``, concatenated, ``[N,
    sum(axes_dim) / 2]``."""
    lo, hi = QWEN21_RANGE
    if ids.numel() and not (lo <= int(ids.min()) and int(ids.max()) < hi):
        raise PosencError(
            f"compat='original': QwenImage21Rope's table holds the positions {lo} … {hi - 1}, "
            f"got {int(ids.min())} … {int(ids.max())}"
        )
    rows = [qwen_image_rows(ids[:, a], d, theta) for a, d in enumerate(axes_dim)]
    return torch.cat(rows, dim=-1)


def minimax_tables(
    ids: torch.Tensor, n: int, theta: float, inv_dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """``MiniMaxH3RotaryPosEmbed(n, theta)(ids)`` (its ``inv_freq`` buffer in ``inv_dtype``):
    float32 positions ``[S, 3]`` times the one float32 ladder ``1 / theta ** (2j / 2n)``,
    ``[t | h | w]`` twice over: ``(cos, sin)`` ``[S, 6n]``."""
    inv = 1.0 / (
        theta ** (torch.arange(0, 2 * n, 2, dtype=torch.float32, device=ids.device) / (2 * n))
    )
    freqs = ids.to(torch.float32).unsqueeze(-1) * inv.to(inv_dtype).view(1, 1, -1)
    freqs = torch.cat(freqs.unbind(dim=1), dim=-1)
    freqs = torch.cat((freqs, freqs), dim=-1)
    return freqs.cos(), freqs.sin()


def minimax_video_tables(
    ids: torch.Tensor, n: int, theta: float, inv_dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """``MiniMaxH3VideoRotaryPosEmbed(2 k n, theta, num_axes=k)(ids)`` (the VAE decoder's, k =
    3; its ``inv_freq`` in ``inv_dtype``): ``2 pi`` times the float32 coordinates ``ids`` ``[B,
    S, k]`` times the ladder ``1 / theta ** arange(0, 1, 1 / n)``, the k axes' blocks twice
    over: ``(cos, sin)`` ``[B, S, 1, 2 k n]``."""
    inv = 1.0 / theta ** torch.arange(0, 1, 1 / n, dtype=torch.float32, device=ids.device)
    angles = 2.0 * math.pi * ids[:, :, :, None] * inv.to(inv_dtype)[None, None, None, :]
    angles = angles.flatten(2, 3).tile(2).unsqueeze(2)
    return angles.cos(), angles.sin()


def pooled_rows(rows: torch.Tensor, k: int) -> torch.Tensor:
    """``AnyFlowCausalRotaryPosEmbed.avg_pool_complex(rows, k, k)``: the mean of each ``k``
    consecutive complex rows ``[n, c]`` (real and imaginary parts by ``avg_pool1d``), scaled
    back to modulus 1: ``[n // k, c]``."""
    parts = [
        torch.nn.functional.avg_pool1d(p.transpose(0, 1)[None], k, k)[0].transpose(0, 1)
        for p in (rows.real, rows.imag)
    ]
    norm = torch.sqrt(parts[0] ** 2 + parts[1] ** 2)
    return torch.complex(parts[0] / norm, parts[1] / norm)


def _check(call: GridCall, layout: str, *, shared: bool) -> None:
    """Refuse what the family's arithmetic does not have: another layout, factors, bases,
    block order, blocks (``shared``: one ladder for three equal blocks, MiniMax-H3's), or
    positions other than ``0, 1, 2, …`` (the others: HunyuanImage)."""
    r, blocks = call.rotary, call.blocks
    widths = r.axes_dim or ()
    extra = {
        "layout": r.layout != layout,
        "axes_scale": r.axes_scale is not None,
        "axes_dim": shared and (len(widths) != 3 or len(set(widths)) != 1),
        "axes_base": r.axes_base is not None,
        "block_axes": list(blocks) != list(range(len(blocks))),
    }
    for key, bad in extra.items():
        if bad:
            raise PosencError(
                f"`{key}`: compat='diffusers' repeats {call.family}'s own tables ({layout}, one "
                f"base, its blocks in grid order): drop `{key}`"
            )
    if not shared and (any(s0 != 0.0 for s0 in call.starts) or any(st != 1.0 for st in call.steps)):
        raise PosencError(
            f"`compat='diffusers'`: {call.family}'s tables hold the positions 0, 1, 2, …; got "
            f"start={list(call.starts)}, step={list(call.steps)}"
        )
    check_form(call, {"axes_dim": None})  # the module's own widths; the rest its own


def hunyuan_image(call: GridCall) -> tuple[Any, Any]:
    """``posenc.rope_grid(..., preset="hunyuan-image", compat="diffusers")``:
    ``HunyuanImageRotaryPosEmbed``'s float32 grid of ``arange`` positions, float32
    frequencies, interleaved pairs (two axes, or three)."""
    _check(call, "interleaved", shared=False)

    def tables(work: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        pos = [torch.arange(n, device=work, dtype=torch.float32) for n in call.dims]
        return grid_tables(pos, call.rotary.axes_dim, float(call.rotary.base))

    return compat_grid(tables, call)


def minimax_h3(call: GridCall) -> tuple[Any, Any]:
    """``posenc.rope_grid(..., preset="minimax-h3", compat="diffusers")``:
    ``MiniMaxH3RotaryPosEmbed`` of the grid's ``position_ids`` (``start + i * step`` per axis,
    as float32)."""
    _check(call, "halves", shared=True)

    def tables(work: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        grid = zip(call.dims, call.starts, call.steps, strict=True)
        axes = [s0 + st * torch.arange(n, device=work, dtype=torch.float64) for n, s0, st in grid]
        ids = torch.stack([g.reshape(-1) for g in torch.meshgrid(*axes, indexing="ij")], -1)
        return minimax_tables(ids, call.rotary.axes_dim[0] // 2, float(call.rotary.base))

    return compat_grid(tables, call)
