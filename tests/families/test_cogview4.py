"""CogView4 and GLM-Image (``preset="cogview4"``): ``compat="diffusers"`` against
``GlmImageRotaryPosEmbed`` bit for bit, the exact tables within float32 rounding of a float64
reference, CogView4's canvas sampled at floor(i * 256 / n) through posenc.rope;
posenc.torch.patch on a small random-weight CogView4 transformer (config, no download):
compat="original" leaves the outputs identical, the exact patch holds the float64 tables rounded
once, the checkpoint loads with strict=True, patching twice is a no-op."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.families.models import assert_exact
from tests.reference import axial_rope

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from tests.contract import assert_outputs_close, check_patch_contract, forwards  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize(("h", "w"), [(128, 128), (96, 160), (300, 200), (7, 5)])
def test_cogview4_and_glm_image(h, w):
    """GLM-Image: patch indices (rope_grid); CogView4: its 256 x 256 canvas sampled at
    floor(i * 256 / n) (posenc.rope of those ids); [row | column] in halves, float32 in
    diffusers."""
    from diffusers.models.transformers.transformer_cogview4 import CogView4RotaryPosEmbed
    from diffusers.models.transformers.transformer_glm_image import GlmImageRotaryPosEmbed

    latents = torch.zeros(1, 1, 2 * h, 2 * w)
    glm = GlmImageRotaryPosEmbed(128, 2)(latents)
    got = posenc.rope_grid((h, w), 128, preset="cogview4", compat="diffusers",
                           dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, x) for g, x in zip(got, glm, strict=True))
    ref = axial_rope((h, w), (64, 64), 1e4, (0, 1), [np.arange(h), np.arange(w)], "halves")
    for g, r in zip(posenc.rope_grid((h, w), 128, preset="cogview4"), ref, strict=True):
        assert_exact(g, r)
    rows, cols = np.arange(h) * 256 // h, np.arange(w) * 256 // w
    canvas = CogView4RotaryPosEmbed(128, 2, (256, 256))(latents)
    ref = axial_rope((h, w), (64, 64), 1e4, (0, 1), [rows, cols], "halves")
    ids = np.stack(np.meshgrid(rows, cols, indexing="ij"), -1).reshape(-1, 2)
    for g, r, c in zip(posenc.rope(ids, 128, preset="cogview4"), ref, canvas, strict=True):
        assert_exact(g, r)
        assert np.abs(c.double().numpy() - r).max() < 2e-5  # diffusers: float32, the same ids


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def test_cogview4():
    torch.manual_seed(0)
    model = diffusers.CogView4Transformer2DModel(
        patch_size=2, in_channels=4, out_channels=4, num_layers=1, attention_head_dim=32,
        num_attention_heads=2, text_embed_dim=16, time_embed_dim=16, condition_dim=8,
        sample_size=16).eval()  # fmt: skip

    def inputs(h, w):
        torch.manual_seed(1)
        return {"hidden_states": torch.randn(1, 4, 2 * h, 2 * w),
                "encoder_hidden_states": torch.randn(1, 6, 16), "timestep": torch.tensor([500]),
                "original_size": torch.tensor([[64.0, 64.0]]),
                "target_size": torch.tensor([[64.0, 64.0]]),
                "crop_coords": torch.tensor([[0.0, 0.0]])}  # fmt: skip

    calls = [inputs(h, w) for h, w in [(4, 6), (5, 3)]]

    def exact(original, patched):
        assert_outputs_close(original, patched, calls, atol=1e-4)
        cos, _ = patched.rope(torch.zeros(1, 4, 2 * 96, 2 * 160))
        rows_, cols_ = np.arange(96) * 256 // 96, np.arange(160) * 256 // 160
        grids = np.meshgrid(rows_, cols_, indexing="ij")
        parts = [g.reshape(-1)[:, None] * 1e4 ** (-np.arange(0, 16, 2) / 16) for g in grids]
        want = np.cos(np.concatenate(parts * 2, axis=1))
        np.testing.assert_array_less(np.abs(cos.double().numpy() - want),
                                     6e-8 * np.abs(want) + 1e-38)  # fmt: skip

    paths = {"rope": "CogView4RotaryPosEmbed", "time_condition_embed.time_proj": "Timesteps",
             "time_condition_embed.condition_proj": "Timesteps"}  # fmt: skip
    check_patch_contract(model, paths, forwards(calls), exact)
