"""posenc.torch.patch on small random-weight diffusers transformers of the families that share
Wan's, HunyuanVideo's, CogVideoX's or Qwen-Image's formula (HunyuanImage-2.1, ChronoEdit,
EasyAnimate, Sana-Video, Qwen-Image-Layered, NucleusMoE-Image; configs, no download) and on
the rotary modules of Framepack, Wan-Animate and Qwen-Image 2.1 inside a tiny root:
compat="original" leaves every output identical, the exact patch holds the float64 tables
rounded once (checked against float64 NumPy written from the formulas) and moves the outputs
by float32 noise, the original checkpoint loads with strict=True, the report names the rotary
module, and patching twice is a no-op."""

from __future__ import annotations

import copy
import importlib

import numpy as np
import pytest

from tests import reference

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from posenc.errors import PosencError  # noqa: E402
from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


def _m(name):
    """The module ``diffusers.models.transformers.<name>``."""
    return importlib.import_module(f"diffusers.models.transformers.{name}")


def _exact(got, want):
    """float32 ``got`` is float64 ``want`` rounded once (a relative half ulp, and a bit)."""
    got = got.detach().double().numpy()
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-12)


def _video(f, h, w, *, text=5, **extra):
    def inputs(size=(f, h, w)):
        torch.manual_seed(1)
        return {"hidden_states": torch.randn(1, 4, *size), "timestep": torch.tensor([500.0]),
                "encoder_hidden_states": torch.randn(1, text, 16), **extra}  # fmt: skip

    return inputs


def _hunyuan_image():
    return diffusers.HunyuanImageTransformer2DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=32,
        num_layers=1, num_single_layers=1, num_refiner_layers=1, text_embed_dim=16,
        rope_axes_dim=(16, 16))  # fmt: skip


def _hunyuan_image_inputs(size=(6, 10)):
    torch.manual_seed(1)
    return {"hidden_states": torch.randn(1, 4, *size), "timestep": torch.tensor([500.0]),
            "encoder_hidden_states": torch.randn(1, 5, 16),
            "encoder_attention_mask": torch.ones(1, 5)}  # fmt: skip


def _chronoedit():
    return diffusers.ChronoEditTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=24, in_channels=4,
        out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=1,
        rope_max_seq_len=64)  # fmt: skip


def _easyanimate():
    return diffusers.EasyAnimateTransformer3DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
        time_embed_dim=16, text_embed_dim=16, num_layers=1, mmdit_layers=1, patch_size=2,
        sample_width=16, sample_height=16)  # fmt: skip


def _sana_video():
    return diffusers.SanaVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=24,
        num_layers=1, num_cross_attention_heads=2, cross_attention_head_dim=24,
        cross_attention_dim=48, caption_channels=16, sample_size=16)  # fmt: skip


def _qwen(cls, **kw):
    def build():
        return cls(patch_size=2, in_channels=16, out_channels=4, num_layers=1,
                   attention_head_dim=128, num_attention_heads=1, joint_attention_dim=16,
                   axes_dims_rope=(16, 56, 56), **kw)  # fmt: skip

    return build


def _qwen_inputs(layers):
    """Inputs of ``layers`` images of the same size (Layered: the last is the condition)."""

    def inputs(size=(4, 6)):
        torch.manual_seed(1)
        h, w = size
        extra = {"additional_t_cond": torch.tensor([0])} if layers > 1 else {}
        return {"hidden_states": torch.randn(1, layers * h * w, 16),
                "encoder_hidden_states": torch.randn(1, 7, 16),
                "encoder_hidden_states_mask": torch.ones(1, 7), "timestep": torch.tensor([0.5]),
                "img_shapes": [[(1, h, w)] * layers], **extra}  # fmt: skip

    return inputs


MODELS = {  # build, inputs, other sizes, the rotary module's path and class
    "hunyuan-image": (_hunyuan_image, _hunyuan_image_inputs, [(4, 14), (9, 3)], "rope",
                      "HunyuanImageRotaryPosEmbed"),
    "chronoedit": (_chronoedit, _video(2, 8, 12), [(3, 6, 4), (5, 2, 14)], "rope",
                   "ChronoEditRotaryPosEmbed"),
    "easyanimate": (_easyanimate, _video(3, 8, 12), [(1, 12, 8), (5, 6, 14)],
                    "rope_embedding", "EasyAnimateRotaryPosEmbed"),
    "sana-video": (_sana_video, _video(3, 8, 12), [(1, 6, 4), (5, 2, 14)], "rope",
                   "WanRotaryPosEmbed"),
    "qwen-image-layered": (_qwen(diffusers.QwenImageTransformer2DModel, use_layer3d_rope=True,
                                 use_additional_t_cond=True), _qwen_inputs(3),
                           [(3, 5), (2, 8)], "pos_embed", "QwenEmbedLayer3DRope"),
    "nucleusmoe-image": (_qwen(diffusers.NucleusMoEImageTransformer2DModel), _qwen_inputs(1),
                         [(3, 5), (7, 2)], "pos_embed", "NucleusMoEEmbedRope"),
}  # fmt: skip


def _out(model, inputs):
    with torch.no_grad():
        return model(**inputs)[0]


@pytest.mark.parametrize("family", sorted(MODELS))
def test_compat_is_identical_and_exact_is_close(family):
    build, inputs_of, others, path, name = MODELS[family]
    torch.manual_seed(0)
    model, inputs = build().eval(), inputs_of()
    before = _out(model, inputs)
    compat = copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert rows[path].original == name
    assert rows[path].mode == "compat"
    assert torch.equal(_out(compat, inputs), before)
    for other in others:  # other sizes, odd ones
        assert torch.equal(_out(compat, inputs_of(other)), _out(model, inputs_of(other)))

    exact = copy.deepcopy(model)
    assert {r.path: r.mode for r in patch(exact).replaced}[path] == "exact"
    torch.testing.assert_close(_out(exact, inputs), before, rtol=0, atol=1e-4)
    exact.load_state_dict(model.state_dict(), strict=True)
    assert not exact.state_dict().keys() - model.state_dict().keys()
    assert len(patch(exact)) == 0
    assert len(patch(compat, compat="original")) == 0


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.parametrize("family", ["chronoedit", "sana-video"])
def test_wan_form_in_bfloat16(family):
    """Wan's float32 buffers follow .to(bfloat16): so do the stand-ins' tables."""
    build, inputs_of, _, _, _ = MODELS[family]
    torch.manual_seed(0)
    model = build().eval()
    compat = copy.deepcopy(model)
    patch(compat, compat="original")
    inputs = inputs_of()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(_out(compat, inputs), _out(model, inputs))
    bf16 = {k: v.to(torch.bfloat16) if k == "hidden_states" else v for k, v in inputs.items()}
    bf16["encoder_hidden_states"] = bf16["encoder_hidden_states"].to(torch.bfloat16)
    model.to(torch.bfloat16)
    compat.to(torch.bfloat16)
    assert torch.equal(_out(compat, bf16), _out(model, bf16))


def test_chronoedit_edits_read_frame_rows_0_and_skip():
    """2 latent frames (input and edit) take the frame rows 0 and temporal_skip_len - 1 = 7."""
    torch.manual_seed(0)
    model = _chronoedit().eval()
    patch(model)
    cos, sin = model.rope(torch.zeros(1, 4, 2, 90, 160))  # 2 frames of 720p: 2 x 45 x 80
    want = reference.axial_rope((2, 45, 80), (8, 8, 8), 1e4, (0, 1, 2),
                                [np.array([0, 7]), np.arange(45), np.arange(80)])  # fmt: skip
    _exact(cos[0, :, 0], want[0])
    _exact(sin[0, :, 0], want[1])


def test_chronoedit_whose_split_differs_is_left_alone():
    """d % 6 = 4: ChronoEdit's forward splits its tables at d // 3, not at their blocks."""
    root = torch.nn.Module()
    root.rope = _m("transformer_chronoedit").ChronoEditRotaryPosEmbed(64, (1, 2, 2), 32)
    (row,) = patch(root, compat="original")
    assert not row.replaced
    assert "splits the head 64 at 21" in row.note


def test_hunyuan_image_exact_at_2048():
    torch.manual_seed(0)
    root = torch.nn.Module()
    root.rope = _m("transformer_hunyuanimage").HunyuanImageRotaryPosEmbed((1, 1), (64, 64))
    original = root.rope
    (row,) = patch(root)
    assert row.mode == "exact"
    latents = torch.zeros(1, 4, 64, 64)  # 2048 x 2048 pixels: 64 x 64 latent patches
    want = reference.axial_rope((64, 64), (64, 64), 256.0, (0, 1), [np.arange(64)] * 2)
    for got, old, w in zip(root.rope(latents), original(latents), want, strict=True):
        _exact(got, w)
        assert np.abs(old.double().numpy() - w).max() > 1e-7  # float32 angles


def _root(module):
    root = torch.nn.Module()
    root.rope = module
    return root


def test_framepack_frames_at_their_indices():
    framepack = _m("transformer_hunyuan_video_framepack")
    original = framepack.HunyuanVideoFramepackRotaryPosEmbed(2, 1, (16, 56, 56))
    compat, exact = _root(copy.deepcopy(original)), _root(copy.deepcopy(original))
    (row,) = patch(compat, compat="original")
    assert (row.original, row.mode) == ("HunyuanVideoFramepackRotaryPosEmbed", "compat")
    patch(exact)
    calls = [(torch.tensor([0, 1, 2, 3, 20, 21]), 18, 30), (torch.arange(5) * 4, 12, 7),
             (torch.tensor([36]), 90, 160)]  # fmt: skip
    for frames, h, w in calls:
        args = (frames, h, w, torch.device("cpu"))
        want = reference.axial_rope((len(frames), h // 2, w // 2), (16, 56, 56), 256.0,
                                    (0, 1, 2), [frames.numpy(), np.arange(h // 2),
                                                np.arange(w // 2)])  # fmt: skip
        for a, b, got, w64 in zip(compat.rope(*args), original(*args), exact.rope(*args), want,
                                  strict=True):  # fmt: skip
            assert torch.equal(a, b)
            _exact(got, w64)
    assert len(patch(exact)) == 0


def test_wan_animate_rope_is_wans():
    module = _m("transformer_wan_animate").WanRotaryPosEmbed(48, (1, 2, 2), 1024)
    compat, exact = _root(copy.deepcopy(module)), _root(copy.deepcopy(module))
    (row,) = patch(compat, compat="original")
    assert (row.original, row.mode, row.max_diff) == ("WanRotaryPosEmbed", "compat", 0.0)
    patch(exact)
    for size in [(21, 90, 160), (3, 6, 10)]:  # 720p, 81 frames
        x = torch.zeros(1, 4, *size)
        assert all(torch.equal(a, b) for a, b in zip(compat.rope(x), module(x), strict=True))
        got = exact.rope(x)[0][0, :, 0]
        f, h, w = size[0], size[1] // 2, size[2] // 2
        want = reference.axial_rope((f, h, w), (16, 16, 16), 1e4, (0, 1, 2),
                                    [np.arange(n) for n in (f, h, w)])  # fmt: skip
        _exact(got, want[0])


def _centred(h, w):
    """Qwen-Image's centred rows and columns, row by row: -(n - n // 2) … n // 2 - 1."""
    return [(r, c) for r in range(-(h - h // 2), h // 2) for c in range(-(w - w // 2), w // 2)]


def _qwen21_ids(shapes, mask):
    """Each token's (t, h, w) from QwenImage21Rope's rule, in NumPy: text advances one
    position on all axes, an image block sits at the position reached (rows and columns
    centred) and moves it on by max(H, W)."""
    ids, pos, i = [], 0, 0
    for _, h, w in shapes:
        while not mask[i]:
            ids.append((pos, pos, pos))
            pos, i = pos + 1, i + 1
        ids += [(pos, r, c) for r, c in _centred(h, w)]
        pos, i = pos + max(h, w), i + h * w
    ids += [(pos + j, pos + j, pos + j) for j in range(len(mask) - i)]
    return np.array(ids, dtype=np.float64)


def _complex_reference(ids, axes, base=1e4):
    theta = np.concatenate([ids[:, [a]] * base ** (-np.arange(0, d, 2) / d)
                            for a, d in enumerate(axes)], axis=1)  # fmt: skip
    return np.cos(theta), np.sin(theta)


def test_qwen_image_21_joint_sequence():
    module = _m("transformer_qwenimage21").QwenImage21Rope(10000, [16, 56, 56])
    compat, exact = _root(copy.deepcopy(module)), _root(copy.deepcopy(module))
    (row,) = patch(compat, compat="original")
    assert (row.original, row.mode) == ("QwenImage21Rope", "compat")
    assert row.max_diff > 1e-6  # float32 angles
    patch(exact)
    blocks = [(1, 5, 6), (1, 3, 4)]
    mask = torch.zeros(5 + 30 + 4 + 12 + 3, dtype=torch.bool)
    mask[5:35], mask[39:51] = True, True
    cases = [(blocks, mask), ([(1, 83, 83)], torch.arange(6889 + 40) >= 40)]
    for shapes, m in cases:
        args = (shapes, m, torch.device("cpu"))
        assert torch.equal(compat.rope(*args), module(*args))
        got = exact.rope(*args)
        want = _complex_reference(_qwen21_ids(shapes, m.tolist()), (16, 56, 56))
        _exact(got.real, want[0])
        _exact(got.imag, want[1])
    assert len(patch(exact)) == 0


@pytest.mark.parametrize("variant", ["layered", "nucleus"])
def test_qwen_variants_positions(variant):
    """Layered: layers at frames 0, 1, …, the condition image at -1, the text after
    max(H // 2, W // 2, layers); NucleusMoE: the text after the last image's half-side."""
    if variant == "layered":
        module = _m("transformer_qwenimage").QwenEmbedLayer3DRope(10000, [16, 56, 56], True)
        shapes, frames = [(1, 6, 10), (1, 6, 10), (1, 6, 10)], [0, 1, -1]
        text_start = 5
    else:
        module = _m("transformer_nucleusmoe_image").NucleusMoEEmbedRope(10000, [16, 56, 56], True)
        shapes, frames = [(1, 12, 10), (1, 4, 6)], [0, 1]
        text_start = 3  # the last image's, not the largest
    exact = _root(copy.deepcopy(module))
    patch(exact)
    video, text = exact.rope([shapes], max_txt_seq_len=9, device=torch.device("cpu"))
    ids = []
    for t, (_, h, w) in zip(frames, shapes, strict=True):
        ids += [(t, r, c) for r, c in _centred(h, w)]
    ids += [(p, p, p) for p in range(text_start, text_start + 9)]
    want = _complex_reference(np.array(ids, dtype=np.float64), (16, 56, 56))
    got = torch.cat([video, text])
    _exact(got.real, want[0])
    _exact(got.imag, want[1])
    compat = _root(copy.deepcopy(module))
    patch(compat, compat="original")
    for a, b in zip(compat.rope([shapes], max_txt_seq_len=9, device=torch.device("cpu")),
                    module([shapes], max_txt_seq_len=9, device=torch.device("cpu")),
                    strict=True):  # fmt: skip
        assert torch.equal(a, b)


def test_easyanimate_crop_positions():
    """The grid is cropped into the 45 x 30 canvas at diffusers' own positions
    linspace(top, bottom * (n - 1) / n, n): the exact tables hold those positions."""
    module = _m("transformer_easyanimate").EasyAnimateRotaryPosEmbed(2, 64)
    exact = _root(copy.deepcopy(module))
    patch(exact)
    latents = torch.zeros(1, 4, 13, 64, 64)  # 13 frames of 512 x 512: 32 x 32 patches
    top, bottom, n = 0, 30, 32  # a square fitted into 30 rows, centred in 45 columns
    left, right = 8, 38
    rows = top + np.arange(n) * (bottom * (n - 1) / n - top) / (n - 1)
    cols = left + np.arange(n) * (right * (n - 1) / n - left) / (n - 1)
    want = reference.axial_rope((13, n, n), (16, 24, 24), 1e4, (0, 1, 2),
                                [np.arange(13), rows, cols])  # fmt: skip
    for got, old, w in zip(exact.rope(latents), module(latents), want, strict=True):
        _exact(got, w)
        assert np.abs(old.double().numpy() - w).max() < 1e-5


def _patched(module, compat):
    root = _root(copy.deepcopy(module))
    (row,) = patch(root, compat=compat)
    assert row.original == type(module).__name__
    assert row.mode == ("compat" if compat else "exact")
    return root.rope


def test_motif_video_float64_frequencies():
    module = _m("transformer_motif_video").MotifVideoRotaryPosEmbed(2, 1, (16, 56, 56))
    compat, exact = _patched(module, "original"), _patched(module, None)
    for size in [(5, 18, 22), (33, 90, 160)]:  # odd, and 720p at 129 frames
        x = torch.zeros(1, 1, *size)
        dims = (size[0], size[1] // 2, size[2] // 2)
        want = reference.axial_rope(dims, (16, 56, 56), 256.0, (0, 1, 2),
                                    [np.arange(n) for n in dims])  # fmt: skip
        for a, b, got, w in zip(compat(x), module(x), exact(x), want, strict=True):
            assert torch.equal(a, b)
            _exact(got, w)


def test_helios_frames_at_their_indices_per_batch_item():
    module = _m("transformer_helios").HeliosRotaryPosEmbed((16, 56, 56), 10000.0)
    compat, exact = _patched(module, "original"), _patched(module, None)
    frames = torch.tensor([[0, 1, 2, 9], [3, 4, 5, 40]])
    args = (frames, 6, 10, torch.device("cpu"))
    assert torch.equal(compat(*args), module(*args))
    got = exact(*args)
    assert got.shape == (2, 256, 4, 6, 10)
    for b in range(2):
        positions = [frames[b].numpy(), np.arange(6), np.arange(10)]
        cos, sin = reference.axial_rope((4, 6, 10), (16, 56, 56), 1e4, (0, 1, 2), positions)
        want = np.concatenate([cos, sin], axis=1).reshape(4, 6, 10, -1).transpose(3, 0, 1, 2)
        _exact(got[b], want)


@pytest.mark.parametrize("family", ["sana-wm", "anyflow"])
def test_complex_wan_tables(family):
    """SANA-WM: complex64 rows of float32 angles; AnyFlow: complex128 of float64 ones."""
    if family == "sana-wm":
        module = _m("transformer_sana_wm").SanaWMRotaryPosEmbed(48, (1, 2, 2), 1024)

        def call(mod, fhw):
            return mod(fhw, device=torch.device("cpu"))[0, 0]
    else:
        module = _m("transformer_anyflow").AnyFlowRotaryPosEmbed(48, (1, 2, 2), 1024)

        def call(mod, fhw):
            cfg = {"total_frames": fhw[0], "full_frame_shape": fhw[1:]}
            return mod(layout_cfg=cfg, device=torch.device("cpu"))["query"][0, 0]

    compat, exact = _patched(module, "original"), _patched(module, None)
    for fhw in [(21, 30, 52), (3, 5, 1)]:
        assert torch.equal(call(compat, fhw), call(module, fhw))
        got = call(exact, fhw)
        cos, sin = reference.axial_rope(fhw, (16, 16, 16), 1e4, (0, 1, 2),
                                        [np.arange(n) for n in fhw])  # fmt: skip
        if family == "sana-wm":
            assert got.dtype == torch.complex64
            _exact(got.real, cos[:, ::2])
            _exact(got.imag, sin[:, ::2])
        else:  # float64 tables: the reference's own float64 angles (up to 51 rad) err by 1e-14
            assert got.dtype == torch.complex128
            np.testing.assert_allclose(got.real.numpy(), cos[:, ::2], rtol=0, atol=2e-14)
            np.testing.assert_allclose(got.imag.numpy(), sin[:, ::2], rtol=0, atol=2e-14)


def test_sana_wm_with_another_split_is_left_alone():
    module = _m("transformer_sana_wm").SanaWMRotaryPosEmbed(48, (1, 2, 2), 64, fhw_dim=(8, 20, 20))
    (row,) = patch(_root(module), compat="original")
    assert not row.replaced
    assert "fhw_dim (8, 20, 20)" in row.note
    assert "Wan's split (16, 16, 16)" in row.note


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_minimax_h3_one_ladder_for_three_axes(dtype):
    """Its inv_freq buffer follows .to(bfloat16): compat rounds the ladder the same way."""
    module = _m("transformer_minimax_h3").MiniMaxH3RotaryPosEmbed(16, 10000.0).to(dtype)
    compat, exact = _patched(module, "original"), _patched(module, None)
    grid = np.stack(np.meshgrid(np.arange(16), np.arange(45), np.arange(80), indexing="ij"), -1)
    ids = torch.from_numpy(np.concatenate([grid.reshape(-1, 3), [[3, -7, 2000]]]))
    assert all(torch.equal(a, b) for a, b in zip(compat(ids), module(ids), strict=True))
    theta = ids.numpy()[:, :, None] * 1e4 ** (-np.arange(0, 32, 2) / 32)  # [S, 3, 16]
    theta = np.tile(theta.reshape(len(ids), -1), 2)
    for got, want in zip(exact(ids), (np.cos(theta), np.sin(theta)), strict=True):
        _exact(got, want)


@pytest.mark.parametrize("compressed", [(1, 4, 4), (4, 8, 8)])
def test_anyflow_far_pooled_rows_are_rotations_at_their_centres(compressed):
    """FAR's context frames average k rows of complex rotations and scale the mean back to
    modulus 1: the rotation at the rows' centre j k + (k - 1) / 2, checked in float64."""
    far = _m("transformer_anyflow_far")
    module = far.AnyFlowCausalRotaryPosEmbed(48, (1, 2, 2), compressed, 1024)
    compat, exact = _patched(module, "original"), _patched(module, None)
    cfg = {"total_frames": 7, "num_compressed_frames": 3, "full_frame_shape": (6, 10),
           "compressed_frame_shape": (3, 5)}  # fmt: skip
    for clean in (None, torch.zeros(1)):
        args = (cfg, torch.device("cpu"), clean)
        assert torch.equal(compat(*args)["query"], module(*args)["query"])
    got = exact(cfg, torch.device("cpu"))["key"][0, 0]
    k = [c // p for c, p in zip(compressed, (1, 2, 2), strict=True)]
    small = [(kk - 1) / 2 + kk * np.arange(n) for kk, n in zip(k, (3, 3, 5), strict=True)]
    parts = [
        reference.axial_rope((3, 3, 5), (16, 16, 16), 1e4, (0, 1, 2), small),
        reference.axial_rope((4, 6, 10), (16, 16, 16), 1e4, (0, 1, 2),
                             [np.arange(3, 7), np.arange(6), np.arange(10)]),
    ]  # fmt: skip
    for part, want in zip((got.real, got.imag), zip(*parts, strict=True), strict=True):
        want = np.concatenate([w[:, ::2] for w in want])
        np.testing.assert_allclose(part.numpy(), want, rtol=0, atol=2e-14)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_minimax_h3_vae_decoder(dtype):
    """The VAE decoder's coordinates 2 (i + 0.5) / n - 1, angles 2 pi c 100 ** (-k / n)."""
    vae = importlib.import_module("diffusers.models.autoencoders.autoencoder_kl_minimax_h3")
    module = vae.MiniMaxH3VideoRotaryPosEmbed(48, theta=100.0).to(dtype)
    compat, exact = _patched(module, "original"), _patched(module, None)
    axes = [2.0 * (torch.arange(0.5, n, dtype=torch.float32) / n) - 1.0 for n in (31, 44, 80)]
    ids = torch.stack([g.reshape(-1) for g in torch.meshgrid(*axes, indexing="ij")], -1)[None]
    ids = torch.cat([ids, torch.zeros(1, 5, 3)], dim=1)  # the register tokens and cls at 0
    assert all(torch.equal(a, b) for a, b in zip(compat(ids), module(ids), strict=True))
    theta = 2 * np.pi * ids[0].double().numpy()[:, :, None] * 100.0 ** (-np.arange(8) / 8)
    theta = np.tile(theta.reshape(len(theta), -1), 2)
    for got, want in zip(exact(ids), (np.cos(theta), np.sin(theta)), strict=True):
        assert got.shape == (1, len(theta), 1, 48)
        _exact(got[0, :, 0], want)


def test_what_is_not_covered_is_said():
    """A pool of 8 rows is no rotation at their centre; Qwen-Image 2.1's table ends at 8191;
    the Layered and NucleusMoE stand-ins need the text length, as the originals do."""
    far = _m("transformer_anyflow_far").AnyFlowCausalRotaryPosEmbed(48, (1, 2, 2), (1, 16, 16), 64)
    (row,) = patch(_root(far))
    assert not row.replaced
    assert "compressed_patch_size" in row.note
    assert "(1, 8, 8)" in row.note
    q21 = _patched(_m("transformer_qwenimage21").QwenImage21Rope(10000, [16, 56, 56]), "original")
    mask = torch.arange(8300) >= 8299  # 8299 text tokens, then a 1 x 1 image
    with pytest.raises(PosencError, match=r"-1024 … 8191.*8299"):
        q21([(1, 1, 1)], mask, torch.device("cpu"))
    exact = _patched(_m("transformer_qwenimage21").QwenImage21Rope(10000, [16, 56, 56]), None)
    assert torch.isfinite(torch.view_as_real(exact([(1, 1, 1)], mask, "cpu"))).all()
    layered = _m("transformer_qwenimage").QwenEmbedLayer3DRope(10000, [16, 56, 56], True)
    with pytest.raises(PosencError, match="`max_txt_seq_len`"):
        _patched(layered, None)([(1, 4, 4)], device=torch.device("cpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chronoedit_theta_is_read_from_its_buffers(dtype):
    """ChronoEdit keeps no theta: the one its buffers hold (500 here) is read back from them,
    float32 or cast to bfloat16, not replaced by 10000's tables."""
    chrono = _m("transformer_chronoedit")
    module = chrono.ChronoEditRotaryPosEmbed(24, (1, 2, 2), 64, theta=500.0).to(dtype)
    compat, exact = _patched(module, "original"), _patched(module, None)
    (row,) = patch(_root(copy.deepcopy(module)))
    assert "base=500" in row.replacement
    for frames in (2, 5):  # an edit (frame rows 0 and 7), and a video
        x = torch.zeros(1, 4, frames, 6, 10)
        assert all(torch.equal(a, b) for a, b in zip(compat(x), module(x), strict=True))
        rows = np.array([0, 7]) if frames == 2 else np.arange(frames)
        want = reference.axial_rope((frames, 3, 5), (8, 8, 8), 500.0, (0, 1, 2),
                                    [rows, np.arange(3), np.arange(5)])  # fmt: skip
        for got, w in zip(exact(x), want, strict=True):
            assert got.dtype == dtype
            if dtype == torch.float32:
                _exact(got[0, :, 0], w)
            else:  # rounded once to bfloat16: within half its ulp
                err = np.abs(got[0, :, 0].double().numpy() - w)
                np.testing.assert_array_less(err, 2.0**-8 * np.abs(w) + 1e-12)


def test_chronoedit_of_no_readable_theta_is_left_alone():
    chrono = _m("transformer_chronoedit")
    module = chrono.ChronoEditRotaryPosEmbed(24, (1, 2, 2), 64, theta=1234.56)
    (row,) = patch(_root(module), compat="original")
    assert not row.replaced
    assert "keeps no theta" in row.note


def test_sana_wm_theta_is_read_from_its_table():
    module = _m("transformer_sana_wm").SanaWMRotaryPosEmbed(48, (1, 2, 2), 64, theta=500.0)
    compat, exact = _patched(module, "original"), _patched(module, None)
    for fhw in [(3, 5, 7), (1, 6, 2)]:
        assert torch.equal(
            compat(fhw, device=torch.device("cpu")), module(fhw, torch.device("cpu"))
        )
        got = exact(fhw, device=torch.device("cpu"))[0, 0]
        cos, sin = reference.axial_rope(fhw, (16, 16, 16), 500.0, (0, 1, 2),
                                        [np.arange(n) for n in fhw])  # fmt: skip
        _exact(got.real, cos[:, ::2])
        _exact(got.imag, sin[:, ::2])


@pytest.mark.parametrize("cast_first", [False, True])
def test_helios_buffers_follow_bfloat16(cast_first):
    """Helios's frequency buffers follow .to(bfloat16), before or after the patch: so do the
    compat stand-in's."""
    module = _m("transformer_helios").HeliosRotaryPosEmbed((44, 42, 42), 10000.0)
    cast = copy.deepcopy(module).to(torch.bfloat16)
    compat = _patched(cast if cast_first else module, "original").to(torch.bfloat16)
    args = (torch.tensor([[0, 3, 7, 300]]), 5, 7, torch.device("cpu"))
    assert torch.equal(compat(*args), cast(*args))
    assert not torch.equal(cast(*args), module(*args))  # the rounded ladders show


@pytest.mark.parametrize("k", [2, 3])
def test_minimax_h3_vae_reads_its_axes_from_the_coordinates(k):
    """MiniMaxH3VideoRotaryPosEmbed(48, num_axes=k) keeps no axis count: n = 48 / (2 k)
    frequencies, k read from the coordinates [B, S, k] by its forward and by the stand-ins."""
    vae = importlib.import_module("diffusers.models.autoencoders.autoencoder_kl_minimax_h3")
    module = vae.MiniMaxH3VideoRotaryPosEmbed(48, num_axes=k)
    compat, exact = _patched(module, "original"), _patched(module, None)
    (row,) = patch(_root(copy.deepcopy(module)))
    n = 48 // (2 * k)
    assert f"posenc.rope(c, {2 * n} k" in row.replacement
    torch.manual_seed(0)
    ids = torch.rand(2, 30, k) * 2 - 1
    assert all(torch.equal(a, b) for a, b in zip(compat(ids), module(ids), strict=True))
    theta = 2 * np.pi * ids.double().numpy()[..., None] * 100.0 ** (-np.arange(n) / n)
    theta = np.tile(theta.reshape(2, 30, -1), 2)
    for got, want in zip(exact(ids), (np.cos(theta), np.sin(theta)), strict=True):
        assert got.shape == (2, 30, 1, 48)
        _exact(got[:, :, 0], want)
