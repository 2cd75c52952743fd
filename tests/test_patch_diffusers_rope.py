"""posenc.torch.patch on small random-weight diffusers transformers with grid rotary modules
(Wan, HunyuanVideo, Cosmos, Qwen-Image; configs, no download): compat="original" leaves every
output identical (float32, bf16 autocast, a bf16 model, Wan's float32 tables on an MPS host,
other grid sizes, Cosmos at any fps, Qwen-Image edits), the exact patch holds the
float64 tables rounded once and moves the outputs by float32 noise, the original checkpoint
loads with strict=True, the report names the rotary module, and patching twice is a no-op."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import posenc
from tests import reference

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


def _wan():
    torch.manual_seed(0)
    return diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=24, in_channels=4,
        out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=1,
        rope_max_seq_len=64).eval()  # fmt: skip


def _hunyuan():
    torch.manual_seed(0)
    return diffusers.HunyuanVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=32,
        num_layers=1, num_single_layers=1, num_refiner_layers=1, text_embed_dim=16,
        pooled_projection_dim=8, rope_axes_dim=(8, 12, 12),
        guidance_embeds=False).eval()  # fmt: skip


def _wan_inputs(size=(5, 8, 12)):
    torch.manual_seed(1)
    f, h, w = size
    return {"hidden_states": torch.randn(1, 4, f, h, w), "timestep": torch.tensor([500]),
            "encoder_hidden_states": torch.randn(1, 7, 16)}  # fmt: skip


def _hunyuan_inputs(size=(3, 10, 6)):
    torch.manual_seed(1)
    f, h, w = size
    return {"hidden_states": torch.randn(1, 4, f, h, w), "timestep": torch.tensor([500]),
            "encoder_hidden_states": torch.randn(1, 5, 16),
            "encoder_attention_mask": torch.ones(1, 5),
            "pooled_projections": torch.randn(1, 8)}  # fmt: skip


def _cosmos():
    torch.manual_seed(0)
    return diffusers.CosmosTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=24,
        num_layers=1, text_embed_dim=16, adaln_lora_dim=8, max_size=(32, 64, 64),
        rope_scale=(2.0, 3.0, 3.0), concat_padding_mask=False,
        extra_pos_embed_type=None).eval()  # fmt: skip


def _cosmos_inputs(size=(3, 10, 6), fps=30):
    torch.manual_seed(1)
    f, h, w = size
    return {"hidden_states": torch.randn(1, 4, f, h, w), "timestep": torch.tensor([500.0]),
            "encoder_hidden_states": torch.randn(1, 5, 16), "fps": fps}  # fmt: skip


MODELS = {
    "wan": (_wan, _wan_inputs, "rope", "WanRotaryPosEmbed"),
    "hunyuan-video": (_hunyuan, _hunyuan_inputs, "rope", "HunyuanVideoRotaryPosEmbed"),
    "cosmos": (_cosmos, _cosmos_inputs, "rope", "CosmosRotaryPosEmbed"),
}


def _out(model, inputs, dtype=None):
    with torch.no_grad():
        if dtype is not None:
            inputs = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
                      else v for k, v in inputs.items()}  # fmt: skip
        return model(**inputs).sample


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.parametrize("family", sorted(MODELS))
def test_compat_is_identical_and_exact_is_close(family):
    build, inputs_of, path, name = MODELS[family]
    model, inputs = build(), inputs_of()
    before = _out(model, inputs)
    compat = copy.deepcopy(model)
    report = patch(compat, compat="original")
    rows = {r.path: r for r in report.replaced}
    assert rows[path].original == name
    assert rows[path].mode == "compat"
    assert torch.equal(_out(compat, inputs), before)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(_out(compat, inputs), _out(model, inputs))
    bf16, compat16 = copy.deepcopy(model).to(torch.bfloat16), copy.deepcopy(compat)
    compat16.to(torch.bfloat16)
    assert torch.equal(_out(compat16, inputs, torch.bfloat16), _out(bf16, inputs, torch.bfloat16))
    for other in [(3, 6, 4), (1, 2, 14)]:  # other latent sizes, odd ones
        assert torch.equal(_out(compat, inputs_of(other)), _out(model, inputs_of(other)))

    exact = copy.deepcopy(model)
    report = patch(exact)
    assert {r.path: r.mode for r in report.replaced}[path] == "exact"
    torch.testing.assert_close(_out(exact, inputs), before, rtol=0, atol=1e-4)
    exact.load_state_dict(model.state_dict(), strict=True)
    assert not exact.state_dict().keys() - model.state_dict().keys()
    assert len(patch(exact)) == 0
    assert len(patch(compat, compat="original")) == 0


def test_exact_tables_are_the_float64_ones_rounded_once():
    hunyuan = _hunyuan()
    patch(hunyuan)
    latents = torch.zeros(1, 4, 33, 90, 160)  # 720p, 129 frames: 33 x 45 x 80 patches
    got = hunyuan.rope(latents)
    want = reference.axial_rope(
        (33, 45, 80), (8, 12, 12), 256.0, (0, 1, 2), [np.arange(n) for n in (33, 45, 80)]
    )
    original = _hunyuan().rope(latents)
    for g, o, w in zip(got, original, want, strict=True):
        ours = np.abs(g.double().numpy() - w)
        np.testing.assert_array_less(ours, 6e-8 * np.abs(w) + 1e-38)
        assert np.abs(o.double().numpy() - w).max() > 10 * ours.max()  # float32 angles


def test_wan_on_a_host_with_mps(monkeypatch):
    """On an Apple machine diffusers builds Wan's tables in float32 even on the CPU: compat
    repeats that; the exact patch replaces them by the float64 ones."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    model = diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=48, in_channels=4,
        out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=1).eval()  # fmt: skip
    inputs = _wan_inputs((3, 8, 8))
    compat = copy.deepcopy(model)
    (row,) = [r for r in patch(compat, compat="original") if r.path == "rope"]
    assert row.mode == "compat"
    assert row.max_diff > 1e-6  # float32 angles over rows 0 … 1023
    assert torch.equal(_out(compat, inputs), _out(model, inputs))
    exact = copy.deepcopy(model)
    patch(exact)
    cos = exact.rope(torch.zeros(1, 4, 21, 90, 160))[0][0, :, 0]
    want, _ = posenc.rope_grid((21, 45, 80), 48, preset="wan", dtype=np.float64)
    np.testing.assert_array_less(np.abs(cos.double().numpy() - want), 6e-8 * np.abs(want) + 1e-38)


def test_cosmos_images_and_videos_at_any_fps():
    model = _cosmos()
    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    patch(compat, compat="original")
    patch(exact)
    for fps in (None, 24, 30, 12):  # an image (no fps), and videos
        inputs = _cosmos_inputs((5, 6, 8), fps)
        assert torch.equal(_out(compat, inputs), _out(model, inputs))
        torch.testing.assert_close(_out(exact, inputs), _out(model, inputs), rtol=0, atol=1e-4)
    latents = torch.zeros(1, 4, 32, 128, 128)  # the largest grid: 32 x 64 x 64 patches
    d_t, d_h = 24 - 2 * (24 // 6 * 2), 24 // 6 * 2
    bases = (1e4 * 2.0 ** (d_t / (d_t - 2)), 1e4 * 3.0 ** (d_h / (d_h - 2)),
             1e4 * 3.0 ** (d_h / (d_h - 2)))  # fmt: skip
    for fps in (None, 30):
        got = exact.rope(latents, fps=fps)
        step = 1.0 if fps is None else 24 / fps
        grids = np.meshgrid(step * np.arange(32), np.arange(64), np.arange(64), indexing="ij")
        parts = [g.reshape(-1)[:, None] * b ** (-np.arange(0, d, 2) / d)
                 for g, b, d in zip(grids, bases, (d_t, d_h, d_h), strict=True)]  # fmt: skip
        theta = np.concatenate(parts * 2, axis=1)
        for g, w in zip(got, (np.cos(theta), np.sin(theta)), strict=True):
            np.testing.assert_array_less(np.abs(g.double().numpy() - w), 6e-8 * np.abs(w) + 1e-38)


def test_qwen_image():
    torch.manual_seed(0)
    model = diffusers.QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=1, attention_head_dim=128,
        num_attention_heads=1, joint_attention_dim=16,
        axes_dims_rope=(16, 56, 56)).eval()  # fmt: skip

    def inputs(shapes, text=7):
        torch.manual_seed(1)
        tokens = sum(f * h * w for f, h, w in shapes)
        return {"hidden_states": torch.randn(1, tokens, 16),
                "encoder_hidden_states": torch.randn(1, text, 16),
                "encoder_hidden_states_mask": torch.ones(1, text),
                "timestep": torch.tensor([0.5]), "img_shapes": [list(shapes)]}  # fmt: skip

    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert rows["pos_embed"].original == "QwenEmbedRope"
    assert rows["pos_embed"].max_diff > 1e-5  # float32 angles at text rows near 1065
    patch(exact)
    for shapes in ([(1, 6, 10)], [(1, 5, 7), (1, 4, 4)]):  # an edit: a second image at t = 1
        x = inputs(shapes)
        assert torch.equal(_out(compat, x), _out(model, x))
        torch.testing.assert_close(_out(exact, x), _out(model, x), rtol=0, atol=1e-4)
    video, text = exact.pos_embed([(1, 83, 83)], device=torch.device("cpu"), max_txt_seq_len=9)
    m = 83 // 2
    side = np.arange(83) - 42  # centred: -42 … 40
    image = np.stack(np.meshgrid([0], side, side, indexing="ij"), -1).reshape(-1, 3)
    ids = np.concatenate([image, np.repeat(np.arange(m, m + 9)[:, None], 3, 1)])
    theta = np.concatenate([ids[:, [a]] * 1e4 ** (-np.arange(0, d, 2) / d)
                            for a, d in enumerate((16, 56, 56))], axis=1)  # fmt: skip
    got = torch.cat([video, text]).numpy()
    for part, want in ((got.real, np.cos(theta)), (got.imag, np.sin(theta))):
        np.testing.assert_array_less(np.abs(part - want), 6e-8 * np.abs(want) + 1e-38)
    exact.load_state_dict(model.state_dict(), strict=True)
    assert len(patch(exact)) == 0


def test_ltx_video():
    torch.manual_seed(0)
    model = diffusers.LTXVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=48,
        cross_attention_dim=96, num_layers=1, caption_channels=16).eval()  # fmt: skip
    f, h, w = 3, 4, 5

    def inputs(**kw):
        torch.manual_seed(1)
        return {"hidden_states": torch.randn(1, f * h * w, 4),
                "encoder_hidden_states": torch.randn(1, 6, 16), "timestep": torch.tensor([500]),
                "encoder_attention_mask": torch.ones(1, 6), "num_frames": f, "height": h,
                "width": w, **kw}  # fmt: skip

    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert rows["rope"].original == "LTXVideoRotaryPosEmbed"
    assert rows["rope"].max_diff > 1e-4  # float32 angles near pi / 2 * 1e4 at c = 0
    patch(exact)
    axes = (torch.arange(f) * 8.0, torch.arange(h) * 32.0, torch.arange(w) * 32.0)
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij")).flatten(1)[None]  # [1, 3, N]
    calls = (
        {"rope_interpolation_scale": (8 / 25, 32, 32)},
        {"rope_interpolation_scale": (8 / 24, 32, 32)},
        {"video_coords": coords},
    )
    for kw in calls:
        x = inputs(**kw)
        assert torch.equal(_out(compat, x), _out(model, x))
        assert torch.isfinite(_out(exact, x)).all()
        # the original's tables are 1e-3 off (its float32 angles reach 15708 rad): the outputs
        # move by about that much, far from a wrong table's O(1)
        torch.testing.assert_close(_out(exact, x), _out(model, x), rtol=0, atol=5e-2)
    cos, sin = exact.rope(torch.zeros(1), 16, 22, 40, rope_interpolation_scale=(8 / 25, 32, 32))
    want = reference.ltx_rope((16, 22, 40), 96, (0.032, 0.03125, 0.03125))
    for g, w64 in zip((cos[0], sin[0]), want, strict=True):
        np.testing.assert_array_less(np.abs(g.double().numpy() - w64), 6e-8 * np.abs(w64) + 1e-38)
    # no rope_interpolation_scale: diffusers leaves the grid unscaled (c = i)
    original = model.rope(torch.zeros(1), 3, 4, 5, rope_interpolation_scale=None)
    replayed = compat.rope(torch.zeros(1), 3, 4, 5, rope_interpolation_scale=None)
    assert all(torch.equal(a, b) for a, b in zip(original, replayed, strict=True))
    cos, sin = exact.rope(torch.zeros(1), 3, 4, 5, rope_interpolation_scale=None)
    want = reference.ltx_rope((3, 4, 5), 96, (2.0, 2.0, 2.0))  # 2c - 1 = -1 + 2i
    for g, w64 in zip((cos[0], sin[0]), want, strict=True):
        np.testing.assert_array_less(np.abs(g.double().numpy() - w64), 6e-8 * np.abs(w64) + 1e-38)
    exact.load_state_dict(model.state_dict(), strict=True)
    assert len(patch(exact)) == 0


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

    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert rows["rope"].original == "CogView4RotaryPosEmbed"
    patch(exact)
    for h, w in [(4, 6), (5, 3)]:
        x = inputs(h, w)
        assert torch.equal(_out(compat, x), _out(model, x))
        torch.testing.assert_close(_out(exact, x), _out(model, x), rtol=0, atol=1e-4)
    cos, _ = exact.rope(torch.zeros(1, 4, 2 * 96, 2 * 160))
    rows_, cols_ = np.arange(96) * 256 // 96, np.arange(160) * 256 // 160
    grids = np.meshgrid(rows_, cols_, indexing="ij")
    parts = [g.reshape(-1)[:, None] * 1e4 ** (-np.arange(0, 16, 2) / 16) for g in grids]
    want = np.cos(np.concatenate(parts * 2, axis=1))
    np.testing.assert_array_less(np.abs(cos.double().numpy() - want), 6e-8 * np.abs(want) + 1e-38)
    exact.load_state_dict(model.state_dict(), strict=True)
    assert len(patch(exact)) == 0
