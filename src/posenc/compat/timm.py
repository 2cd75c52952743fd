"""timm's own arithmetic for the sin-cos tables it builds (``compat="original"`` of the
stand-ins :func:`posenc.torch.patch` puts in timm models), kept apart from the exact engine.

timm 1.0's ``build_sincos2d_pos_embed`` computes in float32 throughout: its band exponents
``arange(n) / n``, the bands ``1 / temperature ** e``, the grid, their products and sin/cos.
The replay repeats those operations in their order and dtypes, bit for bit with timm on CPU
torch (checked against timm itself in the tests). MoCo v3's ``build_2d_sincos_position_embedding``
(a timm ViT with a frozen table) does the same operations, and is the same replay with
``reverse_coord=True, interleave_sin_cos=True``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def sincos_2d(
    shape: Sequence[int],
    dim: int,
    *,
    temperature: float = 10000.0,
    reverse_coord: bool = False,
    interleave_sin_cos: bool = False,
    device: Any = None,
) -> torch.Tensor:
    """``build_sincos2d_pos_embed(shape, dim, temperature, reverse_coord,
    interleave_sin_cos)``: the ``[H * W, dim]`` float32 table (``dim % 4 == 0``)."""
    n = dim // 4
    exponent = torch.arange(n, device=device, dtype=torch.int64).to(torch.float32) / n
    bands = 1.0 / (temperature**exponent)
    sides = list(shape)[::-1] if reverse_coord else list(shape)
    axes = [torch.arange(s, device=device, dtype=torch.int64).to(torch.float32) for s in sides]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij")).flatten(1).transpose(0, 1)
    angles = grid.unsqueeze(-1) * bands.unsqueeze(0)  # [H * W, 2, n]
    stacked = torch.stack(
        [torch.sin(angles), torch.cos(angles)], dim=2 if interleave_sin_cos else 1
    )
    return stacked.flatten(1)
