"""Make a diffusers model's positional modules exact with one call: `posenc.torch.patch`.

Builds two small random-weight diffusers transformers from configs (no download): a FLUX
(its axial rotary `FluxPosEmbed` and timestep embedding) and an SD3 with SD3's own table
geometry (a 192 x 192 sin-cos grid, base size 64, cropped per image). Patches a copy of each in
compat="original" mode (bit for bit the same outputs) and another in exact mode, prints the
reports, and checks that the original checkpoints load into the patched models.

    python examples/patch_diffusers.py
"""

from __future__ import annotations

import copy

import diffusers
import torch

from posenc.torch import patch


def flux() -> None:
    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=32,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
        axes_dims_rope=(8, 12, 12),
    ).eval()  # fmt: skip
    h = w = 32  # a 512 x 512 image: 32 x 32 latent tokens
    img_ids = torch.zeros(h, w, 3)
    img_ids[..., 1], img_ids[..., 2] = torch.arange(h)[:, None], torch.arange(w)[None]
    inputs = {
        "hidden_states": torch.randn(1, h * w, 4),
        "encoder_hidden_states": torch.randn(1, 8, 32),
        "pooled_projections": torch.randn(1, 32),
        "timestep": torch.tensor([0.75]),
        "img_ids": img_ids.reshape(-1, 3),
        "txt_ids": torch.zeros(8, 3),
    }
    compat = copy.deepcopy(model)
    patch(compat, compat="original")
    exact = copy.deepcopy(model)
    print("FLUX\n" + str(patch(exact)))
    with torch.no_grad():
        before = model(**inputs).sample
        same = torch.equal(compat(**inputs).sample, before)
        diff = (exact(**inputs).sample - before).abs().max()
    print(f"\ncompat='original': outputs identical: {same}; exact: max change {diff:.3g}")
    exact.load_state_dict(model.state_dict(), strict=True)


def sd3() -> None:
    torch.manual_seed(0)
    model = diffusers.SD3Transformer2DModel(
        sample_size=128, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=32,
        num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=64,
        pooled_projection_dim=32, out_channels=4, pos_embed_max_size=192,
    ).eval()  # fmt: skip
    inputs = {
        "hidden_states": torch.randn(1, 4, 64, 96),
        "encoder_hidden_states": torch.randn(1, 8, 32),
        "pooled_projections": torch.randn(1, 32),
        "timestep": torch.tensor([750.0]),
    }
    compat = copy.deepcopy(model)
    patch(compat, compat="original")
    exact = copy.deepcopy(model)
    print("\nSD3\n" + str(patch(exact)))
    with torch.no_grad():
        before = model(**inputs).sample
        same = torch.equal(compat(**inputs).sample, before)
        diff = (exact(**inputs).sample - before).abs().max()
    print(f"\ncompat='original': outputs identical: {same}; exact: max change {diff:.3g}")
    exact.load_state_dict(model.state_dict(), strict=True)  # pos_embed.pos_embed: checked
    print("the original checkpoints load into the patched models with strict=True")


if __name__ == "__main__":
    diffusers.utils.logging.set_verbosity_error()
    flux()
    sd3()
