"""OmniGen (``preset="omnigen"``, su-scaled long-rope factors): ``compat="transformers"``
against ``OmniGenSuScaledRotaryEmbedding`` bit for bit with short factors and long, the exact
tables within float32 rounding; posenc.torch.patch on a small random-weight OmniGen transformer
(config, no download): compat="original" leaves the outputs identical, the exact patch holds the
float64 tables rounded once, the checkpoint loads with strict=True."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.families.models import assert_rounded_once as assert_exact

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from tests.contract import assert_outputs_close, check_patch_contract, forwards  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize("n", [500, 5000])  # short factors, then long (past 4096)
def test_omnigen_preset(n):
    from diffusers.models.transformers.transformer_omnigen import (
        OmniGenSuScaledRotaryEmbedding,
    )

    rng = np.random.default_rng(0)
    short, long = (1 + rng.random(48) * 0.1).tolist(), (1 + rng.random(48) * 30).tolist()
    module = OmniGenSuScaledRotaryEmbedding(96, rope_scaling={"short_factor": short,
                                                              "long_factor": long})  # fmt: skip
    scaling = {"rope_type": "longrope", "short_factor": short, "long_factor": long,
               "original_max_position_embeddings": 4096,
               "max_position_embeddings": 131072}  # fmt: skip
    pos = torch.arange(n)[None].repeat(2, 1)
    want = module(torch.zeros(1), pos)
    got = posenc.rope(pos[0], 96, preset="omnigen", scaling=scaling, compat="transformers",
                      dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    ext = np.asarray(long if n > 4096 else short)
    theta = np.arange(n)[:, None] * np.tile(1e4 ** (-np.arange(0, 96, 2) / 96) / ext, 2)
    factor = np.sqrt(1 + np.log(32) / np.log(4096))
    assert abs(factor - 1.1902) < 1e-4
    exact = posenc.rope(pos[0].numpy(), 96, preset="omnigen", scaling=scaling)
    for g, w in zip(exact, (factor * np.cos(theta), factor * np.sin(theta)), strict=True):
        assert_exact(g, w)


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def _omnigen():
    torch.manual_seed(0)
    factors = {"short_factor": (1 + torch.rand(16) * 0.1).tolist(),
               "long_factor": (1 + torch.rand(16) * 20).tolist()}  # fmt: skip
    return diffusers.OmniGenTransformer2DModel(
        in_channels=4, patch_size=2, hidden_size=64, num_attention_heads=2,
        num_key_value_heads=2, intermediate_size=32, num_layers=1, vocab_size=100,
        pad_token_id=0, rope_scaling=factors, pos_embed_max_size=16, time_step_dim=32,
        original_max_position_embeddings=16, max_position_embeddings=64).eval()  # fmt: skip


def _omnigen_inputs(h=4, w=6, text=5, shift=0):
    torch.manual_seed(1)
    n = text + 1 + h * w // 4
    return {"hidden_states": torch.randn(1, 4, h, w), "timestep": torch.tensor([0.5]),
            "input_ids": torch.randint(1, 100, (1, text)), "input_img_latents": [],
            "input_image_sizes": {}, "attention_mask": torch.ones(1, n, n),
            "position_ids": torch.arange(n)[None] + shift}  # fmt: skip


def test_omnigen_compat_is_identical_and_exact_is_close():
    model = _omnigen()
    kws = ({}, {"h": 8, "w": 8, "text": 7, "shift": 20})  # short factors, then long
    calls = [_omnigen_inputs(**kw) for kw in kws]

    def exact(original, patched):
        assert_outputs_close(original, patched, calls, atol=1e-4)
        m = original.rope
        for n in (16, 300):  # the float64 table of the first item, the factors by the largest
            cos, sin = patched.rope(torch.zeros(1), torch.arange(n)[None].repeat(2, 1))
            ext = np.asarray(m.long_factor if n > 16 else m.short_factor)
            omega = 1e4 ** (-np.arange(0, 32, 2) / 32) / ext
            theta = np.arange(n)[:, None] * np.concatenate([omega, omega])[None]
            factor = np.sqrt(1 + np.log(64 / 16) / np.log(16))
            for got, want in ((cos, factor * np.cos(theta)), (sin, factor * np.sin(theta))):
                np.testing.assert_array_less(np.abs(got.double().numpy() - want),
                                             6e-8 * np.abs(want) + 1e-38)  # fmt: skip

    paths = {"rope": "OmniGenSuScaledRotaryEmbedding", "time_proj": "Timesteps"}
    # patched twice, nothing is replaced (OmniGenPatchEmbed's fixed table stays reported)
    fixed = ["patch_embedding.pos_embed"]
    done = check_patch_contract(model, paths, forwards(calls), exact, left_alone=fixed)
    rows = {r.path: r for r in done.compat.replaced}
    assert rows["rope"].max_diff > 1e-7  # float32 angles (positions below 64 here)
