"""posenc.torch.patch on a small random-weight LTX-2 transformer (config, no download): its
four ``LTX2AudioVideoRotaryPosEmbed`` modules (video, audio and both cross-attention tables),
interleaved and ``split``, in both precisions: compat="original" leaves the video and audio
outputs identical (float32, a bf16 model, another grid, given coordinates), the exact patch
holds posenc's tables and moves the outputs by LTX's float32 error only, the original
checkpoint loads with strict=True, the report names the modules, patching twice is a no-op;
and Sana-WM's copy of the module inside a tiny root."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers import transformer_ltx2, transformer_sana_wm_refiner  # noqa: E402

import posenc  # noqa: E402
from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")

ROPES = ("rope", "audio_rope", "cross_attn_rope", "cross_attn_audio_rope")


def _model(rope_type, double_precision=True):
    torch.manual_seed(0)
    return diffusers.LTX2VideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=12,
        cross_attention_dim=24, audio_in_channels=4, audio_out_channels=4,
        audio_num_attention_heads=2, audio_attention_head_dim=8, audio_cross_attention_dim=16,
        num_layers=1, caption_channels=16, rope_type=rope_type,
        rope_double_precision=double_precision).eval()  # fmt: skip


def _inputs(size=(3, 4, 5), audio=7, dtype=torch.float32, **kw):
    torch.manual_seed(1)
    f, h, w = size
    return {"hidden_states": torch.randn(1, f * h * w, 4, dtype=dtype),
            "audio_hidden_states": torch.randn(1, audio, 4, dtype=dtype),
            "encoder_hidden_states": torch.randn(1, 6, 16, dtype=dtype),
            "audio_encoder_hidden_states": torch.randn(1, 6, 16, dtype=dtype),
            "timestep": torch.tensor([500.0]), "num_frames": f, "height": h, "width": w,
            "audio_num_frames": audio, "fps": 24.0, **kw}  # fmt: skip


def _out(model, x):
    with torch.no_grad():
        out = model(**x)
    return torch.cat([out.sample.flatten(), out.audio_sample.flatten()])


@pytest.mark.parametrize(("rope_type", "double_precision"),
                         [("interleaved", True), ("split", True), ("split", False)])  # fmt: skip
def test_ltx2(rope_type, double_precision):
    model = _model(rope_type, double_precision)
    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    for name in ROPES:
        assert rows[name].original == "LTX2AudioVideoRotaryPosEmbed"
        assert rows[name].mode == "compat"
        assert 1e-4 < rows[name].max_diff < 1e-2  # float32 angles up to pi / 2 * 1e4
    patch(exact)
    f, h, w = 2, 3, 2
    coords = model.rope.prepare_video_coords(1, f, h, w, "cpu", fps=25.0)
    for x in (_inputs(), _inputs((2, 3, 2), 5, video_coords=coords)):
        assert torch.equal(_out(compat, x), _out(model, x))
        got = _out(exact, x)
        assert torch.isfinite(got).all()
        # the original's tables are about 1e-3 off: the outputs move by that much, far from a
        # wrong table's O(1)
        torch.testing.assert_close(got, _out(model, x), rtol=0, atol=5e-2)
    for name in ROPES:
        assert type(getattr(exact, name)).__name__ == "LTX2Rope"
    exact.load_state_dict(model.state_dict(), strict=True)
    assert len(patch(exact)) == 0
    assert len(patch(compat, compat="original")) == 0


def test_ltx2_exact_tables():
    model = _model("split")
    exact = copy.deepcopy(model)
    patch(exact)
    cos, sin = exact.rope(exact.rope.prepare_video_coords(1, 3, 4, 5, "cpu"))  # [1, 2, N, 6]
    f, h, w = (np.arange(n, dtype=np.float64) for n in (3, 4, 5))
    t = (np.maximum(8 * f - 7, 0) + 8 * f + 1) / 2 / 24
    mesh = np.meshgrid(t / 20, (32 * h + 16) / 2048, (32 * w + 16) / 2048, indexing="ij")
    p = np.stack([2 * m.reshape(-1) - 1 for m in mesh], axis=-1)  # [60, 3]
    ladder = (np.pi / 2) * 1e4 ** (np.arange(4) / 3)  # 24 // 6 frequencies
    angles = (p[:, None, :] * ladder[None, :, None]).reshape(60, 12)  # (t, h, w) per frequency
    per_head = angles.reshape(60, 2, 6).transpose(1, 0, 2)  # [heads, N, r]
    for got, want in zip((cos[0], sin[0]), (np.cos(per_head), np.sin(per_head)), strict=True):
        np.testing.assert_array_less(np.abs(got.double().numpy() - want),
                                     6e-8 * np.abs(want) + 1e-11)  # fmt: skip


def test_ltx2_bf16_model():
    model = _model("interleaved").to(torch.bfloat16)
    compat = copy.deepcopy(model)
    patch(compat, compat="original")
    x = _inputs(dtype=torch.bfloat16)
    assert torch.equal(_out(compat, x), _out(model, x))


def test_sana_wm_copy_in_a_tiny_root():
    class Root(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rope = transformer_sana_wm_refiner.SanaWMLTX2AudioVideoRotaryPosEmbed(
                96, rope_type="split", num_attention_heads=4)  # fmt: skip

        def forward(self, n):
            return self.rope(self.rope.prepare_video_coords(1, n, 3, 2, "cpu"))

    root = Root()
    compat = copy.deepcopy(root)
    report = patch(compat, compat="original")
    assert [r.original for r in report.replaced] == ["SanaWMLTX2AudioVideoRotaryPosEmbed"]
    for n in (1, 4):
        assert all(torch.equal(a, b) for a, b in zip(compat(n), root(n), strict=True))
    exact = copy.deepcopy(root)
    patch(exact)
    got = exact(4)
    assert all(torch.isfinite(g).all() for g in got)
    assert max(float((a - b).abs().max()) for a, b in zip(got, root(4), strict=True)) < 1e-2


def test_ltx2_module_is_named_in_a_dry_run():
    model = _model("interleaved")
    report = patch(model, dry_run=True)
    names = {r.path: r.replacement for r in report.replaced}
    assert "ltx2-video" in names["rope"]
    assert "ltx2-audio" in names["audio_rope"]
    assert isinstance(model.rope, transformer_ltx2.LTX2AudioVideoRotaryPosEmbed)
    assert posenc.preset("ltx2-video").originals == ()
