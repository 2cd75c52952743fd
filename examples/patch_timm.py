"""Make a timm ViT's fixed sin-cos position table exact with one call: `posenc.torch.patch`.

timm's ViTs learn their `pos_embed`; self-supervised recipes freeze a sin-cos table there
instead. This builds a small random-weight timm ViT three times, each with a frozen table made
the way people make one: timm's `build_sincos2d_pos_embed` (float32), MoCo v3's
`build_2d_sincos_position_embedding` (float32, restated here) and a float64 build rounded once
(MAE's NumPy, transformers' builder). For each it patches a copy in compat="original" mode (bit
for bit the same outputs) and another in exact mode, prints the report, measures the tables
against float64, and loads the original checkpoint into the patched model (strict=True).

    python examples/patch_timm.py
"""

from __future__ import annotations

import copy

import numpy as np
import timm
import torch
from timm.layers import build_sincos2d_pos_embed

import posenc
from posenc.torch import patch

DIM = 192


def moco_v3(h: int, w: int, dim: int) -> torch.Tensor:
    """MoCo v3's table: [sin w | cos w | sin h | cos h], the column index outermost."""
    cols, rows = torch.arange(w, dtype=torch.float32), torch.arange(h, dtype=torch.float32)
    grid_w, grid_h = torch.meshgrid(cols, rows, indexing="ij")
    omega = 1.0 / 10000.0 ** (torch.arange(dim // 4, dtype=torch.float32) / (dim // 4))
    out_w, out_h = grid_w.flatten()[:, None] * omega, grid_h.flatten()[:, None] * omega
    return torch.cat([out_w.sin(), out_w.cos(), out_h.sin(), out_h.cos()], dim=1)


def float64_built(h: int, w: int, dim: int) -> torch.Tensor:
    return posenc.grid((h, w), dim, preset="hf-2d", dtype=torch.float32)


def one(name: str, build) -> None:
    torch.manual_seed(0)
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=(224, 160), patch_size=16, embed_dim=DIM, depth=2, num_heads=3, num_classes=10
    ).eval()
    h, w = model.patch_embed.grid_size  # 14 x 10: not square
    with torch.no_grad():
        model.pos_embed.copy_(torch.cat([torch.zeros(1, DIM), build(h, w, DIM)])[None])
    model.pos_embed.requires_grad_(False)
    x = torch.randn(2, 3, 224, 160)
    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    patch(compat, compat="original")
    report = patch(exact)
    print(f"\n{name}\n{report}")
    with torch.no_grad():
        same = torch.equal(compat(x), model(x))
        change = float((exact(x) - model(x)).abs().max())
    print(f"compat='original': outputs identical: {same}; exact: outputs moved by {change:.2g}")
    exact.load_state_dict(model.state_dict(), strict=True)  # the original checkpoint
    assert same
    assert len(patch(exact)) == 0


def main() -> None:
    one("timm build_sincos2d_pos_embed", lambda h, w, d: build_sincos2d_pos_embed([h, w], d))
    one("MoCo v3", moco_v3)
    one("built in float64, rounded once", float64_built)
    truth = posenc.grid((14, 10), DIM, preset="timm-2d", dtype=np.float64)
    timm32 = build_sincos2d_pos_embed([14, 10], DIM).double().numpy()
    print(f"\ntimm's float32 table against float64: {np.abs(timm32 - truth).max():.2g}")


if __name__ == "__main__":
    main()
