"""LTX-2 (``preset="ltx2-video"``, ``"ltx2-audio"`` and their ``-split`` forms): diffusers'
``LTX2AudioVideoRotaryPosEmbed`` against posenc's stand-in in both precisions, interleaved and
split per head: compat bit for bit, the exact tables within float32 rounding of a float64
reference, the rotations, the float32-only evaluator; posenc.torch.patch on a small
random-weight LTX-2 transformer (config, no download): compat="original" leaves the video and
audio outputs identical, the exact patch moves them by LTX's float32 error only, the checkpoint
loads with strict=True, the report names the modules; and SANA-WM's copy of the module."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import posenc
from tests.families.models import assert_rounded_once as assert_exact
from tests.families.models import max_error

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers import (  # noqa: E402
    transformer_ltx2,
    transformer_sana_wm_refiner,
)

from posenc.torch import patch  # noqa: E402
from posenc.torch._ltx2_rope import LTX2Rope  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


def ltx2_reference(p, dim, heads=None, base=1e4):
    """``p`` ``[N, k]`` (``2c - 1``): ``f_m = (pi / 2) base ** (m / (n - 1))``, ``n = dim //
    2k``; angles ``f_m p_a``, the ``k`` axes per frequency, after ``dim / 2 - n k`` zero
    angles; interleaved pairs (``heads`` None) or halves inside each head."""
    k = p.shape[1]
    n = dim // (2 * k)
    f = (np.pi / 2) * base ** (np.arange(n) / (n - 1))
    angles = (p[:, None, :] * f[None, :, None]).reshape(len(p), n * k)
    angles = np.concatenate([np.zeros((len(p), dim // 2 - n * k)), angles], axis=1)
    if heads is None:
        angles = np.repeat(angles, 2, axis=1)
    else:
        per_head = angles.reshape(len(p), heads, -1)
        angles = np.concatenate([per_head, per_head], axis=-1).reshape(len(p), dim)
    return np.cos(angles), np.sin(angles)


def video_positions(dims, fps=24.0, bases=(20.0, 2048.0, 2048.0)):
    """LTX-2's ``2c - 1`` of a latent grid: ``c`` = the midpoint of each patch's pixel bounds
    over the base, frames ``[max(8f - 7, 0), 8f + 1] / fps``, rows ``[32i, 32i + 32]``."""
    f, h, w = (np.arange(n, dtype=np.float64) for n in dims)
    t = (np.maximum(8 * f - 7, 0) + np.maximum(8 * (f + 1) - 7, 0)) / 2 / fps
    rows, cols = 32 * h + 16, 32 * w + 16
    mesh = np.meshgrid(t, rows, cols, indexing="ij")
    c = np.stack([m.reshape(-1) / b for m, b in zip(mesh, bases, strict=True)], axis=-1)
    return 2 * c - 1


def audio_positions(frames, base=20.0):
    """Audio: latent frame ``f`` spans mel frames ``[max(4f - 3, 0), 4f + 1]``, ``hop / sr``
    = 0.01 s each."""
    f = np.arange(frames, dtype=np.float64)
    mid = (np.maximum(4 * f - 3, 0) + np.maximum(4 * (f + 1) - 3, 0)) / 2 * 160 / 16000
    return (2 * mid / base - 1)[:, None]


KEYS = ("dim", "patch_size", "patch_size_t", "base_num_frames", "base_height", "base_width",
        "sampling_rate", "hop_length", "scale_factors", "theta", "causal_offset", "modality",
        "double_precision", "rope_type", "num_attention_heads")  # fmt: skip


def ltx2_pair(modality, dim, rope_type, double_precision, heads=32):
    scales = (8, 32, 32) if modality == "video" else (4,)
    module = transformer_ltx2.LTX2AudioVideoRotaryPosEmbed(
        dim, modality=modality, rope_type=rope_type, double_precision=double_precision,
        scale_factors=scales, num_attention_heads=heads)  # fmt: skip
    settings = {k: getattr(module, k) for k in KEYS}
    return module, LTX2Rope(settings, "diffusers"), LTX2Rope(settings)


VIDEO_GRIDS = [(16, 1, 1), (1, 22, 1), (1, 1, 40), (3, 5, 7)]  # 704 x 1280, 121 f, per axis


@pytest.mark.parametrize("rope_type", ["interleaved", "split"])
@pytest.mark.parametrize("double_precision", [True, False])
@pytest.mark.parametrize(("dim", "heads"), [(4096, 32), (2052, 6)])  # 2052: 2 still channels
def test_ltx2_video(rope_type, double_precision, dim, heads):
    module, compat, exact = ltx2_pair("video", dim, rope_type, double_precision, heads)
    for dims in VIDEO_GRIDS:
        coords = module.prepare_video_coords(2, *dims, "cpu", fps=24.0)
        assert torch.equal(compat.prepare_video_coords(2, *dims, "cpu", fps=24.0), coords)
        for axes in (coords, coords[:, 0:1]):  # self-attention; the cross-attention's frames
            want = module(axes)
            got = compat(axes)
            assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
        p = video_positions(dims)
        own = exact.prepare_video_coords(1, *dims, "cpu", fps=24.0)
        for axes, pos in ((own, p), (own[:, 0:1], p[:, :1])):
            ref = ltx2_reference(pos, dim, heads if rope_type == "split" else None)
            for got, want in zip(exact(axes), ref, strict=True):
                if rope_type == "split":  # [B, heads, N, r] -> [N, dim]
                    got = torch.cat([got[0], got[0]], dim=-1).transpose(0, 1).reshape(len(pos), -1)
                assert_exact(got[0] if rope_type != "split" else got, want, 1e-11)


@pytest.mark.parametrize("rope_type", ["interleaved", "split"])
@pytest.mark.parametrize("double_precision", [True, False])
def test_ltx2_audio(rope_type, double_precision):
    module, compat, exact = ltx2_pair("audio", 2048, rope_type, double_precision)
    for frames, shift in ((126, 0), (7, 3)):
        coords = module.prepare_audio_coords(2, frames, "cpu", shift=shift)
        assert torch.equal(compat.prepare_audio_coords(2, frames, "cpu", shift=shift), coords)
        assert all(torch.equal(g, w) for g, w in zip(compat(coords), module(coords), strict=True))
    ref = ltx2_reference(audio_positions(126), 2048, 32 if rope_type == "split" else None)
    for got, want in zip(exact(exact.prepare_audio_coords(1, 126, "cpu")), ref, strict=True):
        if rope_type == "split":
            got = torch.cat([got[0], got[0]], dim=-1).transpose(0, 1).reshape(126, -1)[None]
        assert_exact(got[0], want, 1e-11)


def test_ltx2_presets_and_the_original_error():
    p = video_positions((16, 22, 40))[::97]
    cos, sin = posenc.rope(p, 4096, preset="ltx2-video-split")
    for got, want in zip((cos, sin), ltx2_reference(p, 4096, 32), strict=True):
        assert_exact(got, want, 1e-11)
    module, _, _ = ltx2_pair("video", 4096, "interleaved", True)
    original = module(module.prepare_video_coords(1, 16, 1, 1, "cpu"))[0][0]
    want = ltx2_reference(video_positions((16, 1, 1)), 4096)[0]
    assert 1e-4 < max_error(original, want) < 1e-2  # float32 angles up to pi / 2 * 1e4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ltx2_rotations(dtype):
    module, _, _ = ltx2_pair("video", 96, "split", True, heads=4)
    cos, sin = module(module.prepare_video_coords(2, 3, 2, 4, "cpu"))  # [B, H, N, r]
    torch.manual_seed(0)
    q = torch.randn(2, 24, 96).to(dtype)  # [B, N, inner]
    want = transformer_ltx2.apply_split_rotary_emb(q, (cos, sin))
    full = [torch.cat([t, t], dim=-1).transpose(1, 2).reshape(2, 24, 96) for t in (cos, sin)]
    got = posenc.apply_rope(q, *full, "block-halves", blocks=4, compat="ltx2")
    assert torch.equal(got, want)
    module, _, _ = ltx2_pair("video", 96, "interleaved", True, heads=4)
    cos, sin = module(module.prepare_video_coords(2, 3, 2, 4, "cpu"))
    want = transformer_ltx2.apply_interleaved_rotary_emb(q, (cos, sin))
    assert torch.equal(posenc.apply_rope(q, cos, sin, "interleaved", compat="diffusers"), want)


def test_ltx2_float32_only(float32_only):
    """Per axis at 704 x 1280, 121 frames (frames from the second: the first is not on the
    progression), and 126 audio frames."""
    starts = (5 / 240 - 1, 16 / 1024 - 1, 16 / 1024 - 1)
    steps = (8 / 240, 32 / 1024, 32 / 1024)
    every = video_positions((16, 22, 40)).reshape(16, 22, 40, 3)[1:]
    for dims in ((15, 1, 1), (1, 22, 1), (1, 1, 40)):
        cos, sin = posenc.rope_grid(dims, 4096, preset="ltx2-video", start=starts, step=steps,
                                    dtype=torch.float32)  # fmt: skip
        p = every[: dims[0], : dims[1], : dims[2]].reshape(-1, 3)
        for got, want in zip((cos, sin), ltx2_reference(p, 4096), strict=True):
            assert max_error(got, want) < 1e-6
    a = audio_positions(126)[1:, 0]
    cos, sin = posenc.rope_grid(125, 2048, preset="ltx2-audio", start=a[0], step=a[1] - a[0],
                                dtype=torch.float32)  # fmt: skip
    for got, want in zip((cos, sin), ltx2_reference(a[:, None], 2048), strict=True):
        assert max_error(got, want) < 1e-6


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


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


TIME_PROJS = ("time_embed", "audio_time_embed", "av_cross_attn_video_scale_shift",
              "av_cross_attn_audio_scale_shift", "av_cross_attn_video_a2v_gate",
              "av_cross_attn_audio_v2a_gate")  # fmt: skip
PATHS = {**dict.fromkeys(ROPES, "LTX2AudioVideoRotaryPosEmbed"),
         **{f"{name}.emb.time_proj": "Timesteps" for name in TIME_PROJS}}  # fmt: skip


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # under autocast
@pytest.mark.parametrize(("rope_type", "double_precision"),
                         [("interleaved", True), ("split", True), ("split", False)])  # fmt: skip
def test_ltx2(rope_type, double_precision):
    model = _model(rope_type, double_precision)
    coords = model.rope.prepare_video_coords(1, 2, 3, 2, "cpu", fps=25.0)
    inputs = (_inputs(), _inputs((2, 3, 2), 5, video_coords=coords))

    def outputs(m, dtype):
        return [t for x in inputs for t in forward(m, x, dtype)]

    def exact(original, patched):
        for x in inputs:
            got = _out(patched, x)
            assert torch.isfinite(got).all()
            # the original's tables are about 1e-3 off: the outputs move by that much, far from
            # a wrong table's O(1)
            torch.testing.assert_close(got, _out(original, x), rtol=0, atol=5e-2)
        for name in ROPES:
            assert type(getattr(patched, name)).__name__ == "LTX2Rope"

    contract = check_patch_contract(model, PATHS, outputs, exact)
    rows = {r.path: r for r in contract.compat.replaced}
    for name in ROPES:
        assert 1e-4 < rows[name].max_diff < 1e-2  # float32 angles up to pi / 2 * 1e4


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

    def outputs(m, dtype):  # no tensors of its own: bfloat16 is autocast
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            return [t for n in (1, 4) for t in m(n)]

    def exact(original, patched):
        got = patched(4)
        assert all(torch.isfinite(g).all() for g in got)
        assert max(float((a - b).abs().max()) for a, b in zip(got, original(4), strict=True)) < 1e-2

    check_patch_contract(Root(), {"rope": "SanaWMLTX2AudioVideoRotaryPosEmbed"}, outputs, exact)


def test_ltx2_module_is_named_in_a_dry_run():
    model = _model("interleaved")
    report = patch(model, dry_run=True)
    names = {r.path: r.replacement for r in report.replaced}
    assert "ltx2-video" in names["rope"]
    assert "ltx2-audio" in names["audio_rope"]
    assert isinstance(model.rope, transformer_ltx2.LTX2AudioVideoRotaryPosEmbed)
    assert posenc.preset("ltx2-video").originals == ()
