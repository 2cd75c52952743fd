"""diffusers' own arithmetic for the tables its modules compute, kept apart from the exact
engine (``compat="original"`` of the stand-ins :func:`posenc.torch.patch` puts in diffusers
models).

Each function repeats diffusers' torch operations in their order and dtypes (0.3x and later,
``diffusers/models/embeddings.py``): float64 where diffusers computes in float64, except on the
devices without float64 (MPS, NPU, Neuron), where diffusers falls back to float32 and so does
this replay. Bit for bit with diffusers on CPU torch, checked against diffusers itself in the
tests. The timestep embedding (float32 throughout) is :mod:`posenc.compat.sinusoid`'s
``timestep``. These numbers are not exact (the 2D table's positions are rounded to float32
first): the stand-ins without ``compat`` are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

NO_FLOAT64 = frozenset({"mps", "npu", "neuron"})
"""The device types diffusers' ``maybe_adjust_dtype_for_device`` computes in float32 on."""


def wide_dtype(device: torch.device) -> torch.dtype:
    """float64, or float32 on a device without float64 (diffusers' rule)."""
    return torch.float32 if device.type in NO_FLOAT64 else torch.float64


def sincos_1d(dim: int, pos: torch.Tensor) -> torch.Tensor:
    """``get_1d_sincos_pos_embed_from_grid(dim, pos)``: ``[M, dim]`` ``[sin | cos]``."""
    omega = torch.arange(dim // 2, device=pos.device, dtype=wide_dtype(pos.device))
    omega /= dim / 2.0
    omega = 1.0 / 10000**omega
    out = torch.outer(pos.reshape(-1), omega)
    return torch.concat([torch.sin(out), torch.cos(out)], dim=1)


def sincos_2d(
    dim: int,
    grid_size: int | Sequence[int],
    *,
    base_size: float = 16,
    interpolation_scale: float = 1.0,
    device: Any = None,
) -> torch.Tensor:
    """``get_2d_sincos_pos_embed(dim, grid_size, base_size=…, interpolation_scale=…)
    .float()``: the ``[H * W, dim]`` float32 table ``PatchEmbed`` keeps (and recomputes for
    other sizes); ``grid_size`` is ``(H, W)`` or a side."""
    size = (grid_size, grid_size) if isinstance(grid_size, int) else tuple(grid_size)
    grid_h = (
        torch.arange(size[0], device=device, dtype=torch.float32)
        / (size[0] / base_size)
        / interpolation_scale
    )
    grid_w = (
        torch.arange(size[1], device=device, dtype=torch.float32)
        / (size[1] / base_size)
        / interpolation_scale
    )
    grid = torch.stack(torch.meshgrid(grid_w, grid_h, indexing="xy"), dim=0)
    grid = grid.reshape([2, 1, size[1], size[0]])
    emb_h = sincos_1d(dim // 2, grid[0])
    emb_w = sincos_1d(dim // 2, grid[1])
    return torch.concat([emb_h, emb_w], dim=1).float()


def axial_rope(
    ids: torch.Tensor, theta: float, axes_dim: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``FluxPosEmbed(theta, axes_dim)(ids)``: ``ids`` ``[N, n]`` (``n`` the axes used,
    ``len(axes_dim)`` at most), per axis ``get_1d_rotary_pos_embed(d, ids[:, i], theta,
    use_real=True, repeat_interleave_real=True, freqs_dtype=float64)``, concatenated:
    ``(cos, sin)``, ``[N, sum(axes_dim[:n])]`` float32."""
    pos = ids.float()
    theta = theta * 1.0  # times ntk_factor
    wide = wide_dtype(ids.device)
    cos_out, sin_out = [], []
    for i in range(ids.shape[-1]):
        d = axes_dim[i]
        freqs = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=wide, device=pos.device) / d)) / 1.0
        freqs = torch.outer(pos[..., i], freqs)
        if freqs.device.type == "npu":
            freqs = freqs.float()
        n = freqs.shape[1] * 2
        cos_out.append(freqs.cos().repeat_interleave(2, dim=1, output_size=n).float())
        sin_out.append(freqs.sin().repeat_interleave(2, dim=1, output_size=n).float())
    return torch.cat(cos_out, dim=-1).to(ids.device), torch.cat(sin_out, dim=-1).to(ids.device)
