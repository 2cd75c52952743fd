"""``posenc.torch.patch`` on transformers' vision towers (:mod:`posenc.torch._patch_hf_vision`).

Each family is a small random-weight model built from a config (no download), run as its
users run it: ``compat="original"`` leaves its outputs ``torch.equal`` (float32, under bf16
autocast, after ``model.to(torch.bfloat16)``); the exact patch keeps them finite and close, and
the tables the stand-in hands the model are within float32's half ulp of a float64 restatement
of the formula written here; the original state dict loads strictly; patching twice does
nothing more.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


# ---------------------------------------------------------------------------------------------
# the models: (model, its rotary module's path, its class, [inputs per size])


def _qwen2_vl():
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VisionTransformerPretrainedModel,
    )

    config = Qwen2VLVisionConfig(depth=2, embed_dim=80, num_heads=1, hidden_size=16)
    model = Qwen2VisionTransformerPretrainedModel(config)
    sizes = [[(1, 8, 12)], [(1, 4, 6), (2, 10, 2)]]  # one image; an image and a 2-frame video

    def inputs(grids):
        n = sum(t * h * w for t, h, w in grids)
        gen = torch.Generator().manual_seed(n)
        x = torch.randn(n, 3 * 2 * 14 * 14, generator=gen)
        return (x,), {"grid_thw": torch.tensor(grids)}

    return model, "rotary_pos_emb", "Qwen2VLVisionRotaryEmbedding", [inputs(g) for g in sizes]


def _pixtral():
    config = T.PixtralVisionConfig(hidden_size=64, num_attention_heads=1, head_dim=64,
                                   intermediate_size=32, num_hidden_layers=2,
                                   image_size=256, patch_size=16)  # fmt: skip
    model = T.PixtralVisionModel(config)

    def inputs(h, w):
        gen = torch.Generator().manual_seed(h * w)
        return (torch.randn(1, 3, h, w, generator=gen),), {"image_sizes": [(h, w)]}

    return model, "patch_positional_embedding", "PixtralVisionRotaryEmbedding", [
        inputs(128, 192), inputs(48, 16)]  # fmt: skip


def _dinov3():
    config = T.DINOv3ViTConfig(hidden_size=64, num_attention_heads=1, intermediate_size=32,
                               num_hidden_layers=2, patch_size=16, image_size=128)  # fmt: skip
    model = T.DINOv3ViTModel(config)

    def inputs(h, w):
        gen = torch.Generator().manual_seed(h * w)
        return (torch.randn(1, 3, h, w, generator=gen),), {}

    return model, "rope_embeddings", "DINOv3ViTRopePositionEmbedding", [
        inputs(128, 128), inputs(48, 112)]  # fmt: skip


class _Memory(torch.nn.Module):
    """Holds SAM 2 video's memory attention (the model's own class) and feeds it as the video
    model does: the current frame's features, two memory frames and object pointers."""

    def __init__(self):
        super().__init__()
        from transformers.models.sam2_video.modeling_sam2_video import Sam2VideoMemoryAttention

        config = T.Sam2VideoConfig(memory_attention_rope_feat_sizes=[8, 6],
                                   memory_attention_num_layers=2)  # fmt: skip
        self.attention = Sam2VideoMemoryAttention(config)

    def forward(self, current, memory, memory_pos):
        return self.attention(current, memory, memory_posision_embeddings=memory_pos,
                              num_object_pointer_tokens=4)  # fmt: skip


def _sam2():
    model = _Memory()
    gen = torch.Generator().manual_seed(2)
    n = 8 * 6
    args = (torch.randn(n, 1, 256, generator=gen), torch.randn(2 * n + 4, 1, 64, generator=gen),
            torch.randn(2 * n + 4, 1, 64, generator=gen))  # fmt: skip
    return model, "attention.rotary_emb", "Sam2VideoVisionRotaryEmbedding", [(args, {})]


def _sam3():
    from transformers.models.sam3.configuration_sam3 import Sam3ViTConfig
    from transformers.models.sam3.modeling_sam3 import Sam3ViTModel

    config = Sam3ViTConfig(hidden_size=64, num_attention_heads=1, intermediate_size=32,
                           num_hidden_layers=2, global_attn_indexes=[1], image_size=14 * 36,
                           patch_size=14, window_size=12, pretrain_image_size=14 * 12)  # fmt: skip
    model = Sam3ViTModel(config)
    gen = torch.Generator().manual_seed(3)
    return model, "layers.1.rotary_emb", "Sam3ViTRotaryEmbedding", [
        ((torch.randn(1, 3, 14 * 36, 14 * 36, generator=gen),), {})]  # fmt: skip


def _llama4():
    config = T.Llama4VisionConfig(hidden_size=176, num_attention_heads=2, intermediate_size=704,
                                  num_hidden_layers=2, image_size=112, patch_size=14,
                                  vision_output_dim=16, projector_input_dim=16,
                                  projector_output_dim=16, pixel_shuffle_ratio=0.5)  # fmt: skip
    model = T.Llama4VisionModel(config)
    gen = torch.Generator().manual_seed(4)
    return model, "rotary_embedding", "Llama4VisionRotaryEmbedding", [
        ((torch.randn(1, 3, 112, 112, generator=gen),), {})]  # fmt: skip


BUILD = {"qwen2-vl-vision": _qwen2_vl, "pixtral": _pixtral, "dinov3": _dinov3, "sam2": _sam2,
         "sam3-vit": _sam3, "llama4-vision": _llama4}  # fmt: skip
FAMILIES = list(BUILD)
RANGE_NOTE = {"qwen2-vl-vision": "128 x 128", "pixtral": "16 x 16", "dinov3": "8 x 8",
              "sam2": "position_ids", "sam3-vit": "36 x 36", "llama4-vision": "8 x 8"}  # fmt: skip


def build(family):
    torch.manual_seed(0)
    model, path, cls, runs = BUILD[family]()
    return model.eval(), path, cls, runs


def output(model, args, kwargs):
    with torch.no_grad():
        out = model(*args, **kwargs)
    if isinstance(out, torch.Tensor):
        return out
    return out.last_hidden_state


def outputs(model, runs, dtype=None):
    out = []
    for args, kwargs in runs:
        if dtype is not None:
            args = tuple(a.to(dtype) for a in args)
        out.append(output(model, args, kwargs))
    return out


def get(model, path):
    return model.get_submodule(path)


# ---------------------------------------------------------------------------------------------
# (1) compat="original": nothing changes, float32 and bf16


def _check_report(report, path, cls, mode, family):
    assert [r.path for r in report.replaced] == [path] or family == "sam3-vit"
    row = next(r for r in report if r.path == path)
    assert (row.original, row.mode) == (cls, mode)
    assert row.replacement.startswith("VisionRope(")
    assert row.max_diff is not None
    assert 0 < row.max_diff < 1e-4  # float32's error, no more
    assert RANGE_NOTE[family] in row.note
    for r in report.left_alone:  # only learned tables besides
        assert r.note == "learned, left alone", r
    for r in report.replaced:
        assert r.original == cls


@pytest.mark.parametrize("family", FAMILIES)
def test_compat_leaves_outputs_unchanged(family):
    model, path, cls, runs = build(family)
    before = outputs(model, runs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        before_autocast = outputs(model, runs)
    report = patch(model, compat="original")
    _check_report(report, path, cls, "compat", family)
    assert type(get(model, path)).__name__ == "VisionRope"
    assert type(get(model, path)).__module__.startswith("posenc.")
    for a, b in zip(outputs(model, runs), before, strict=True):
        assert torch.equal(a, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for a, b in zip(outputs(model, runs), before_autocast, strict=True):
            assert torch.equal(a, b)
    # model.to(bfloat16): the original's inv_freq buffer is rounded; the stand-in repeats it
    reference, _, _, _ = build(family)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Llama 4: casting its complex buffer to real
        reference.to(torch.bfloat16)
        model.to(torch.bfloat16)
        want = outputs(reference, runs, torch.bfloat16)
        got = outputs(model, runs, torch.bfloat16)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        assert torch.equal(a, b)


@pytest.mark.parametrize("family", ["qwen2-vl-vision", "pixtral", "dinov3", "sam2"])
def test_compat_after_bf16_cast(family):
    """A model already in bfloat16 when patched: its rounded inv_freq is repeated too."""
    model, path, _, runs = build(family)
    model.to(torch.bfloat16)
    before = outputs(model, runs, torch.bfloat16)
    report = patch(model, compat="original")
    assert [r.path for r in report.replaced] == [path]
    assert report.replaced[0].mode == "compat"
    for a, b in zip(outputs(model, runs, torch.bfloat16), before, strict=True):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------
# (2) exact: close to the original, the tables within float32's half ulp of float64


def _omega(base, n, denom):
    return base ** (-2.0 * np.arange(n, dtype=np.float64) / denom)


def reference(family, stand_in, args, out):
    """The float64 angles of the tokens the stand-in was asked for (its inputs ``args``)."""
    d, base = stand_in.dim, stand_in.base
    if family in ("qwen2-vl-vision", "pixtral", "sam2", "sam3-vit"):
        ids = args[1].double().numpy()
        if family == "sam3-vit":  # the layer's ids: integers times window / columns, exactly
            (_, w), scale = stand_in.grid
            ids = np.round(ids / (12 / w)) * (12 / w)
            assert scale == 12 / w
        a, b = ids[:, 0], ids[:, 1]
        if family == "pixtral":
            ladder = _omega(base, d // 2, d)
            half = np.concatenate([np.outer(a, ladder[0::2]), np.outer(b, ladder[1::2])], 1)
        else:
            omega = _omega(base, d // 4, d // 2)
            half = np.concatenate([np.outer(a, omega), np.outer(b, omega)], 1)
        if family in ("sam2", "sam3-vit"):
            return np.repeat(half, 2, axis=1)[None]
        return np.concatenate([half, half], 1)
    if family == "dinov3":
        h, w = args[0].shape[-2] // 16, args[0].shape[-1] // 16
        y = np.repeat((np.arange(h) + 0.5) / h * 2 - 1, w)
        x = np.tile((np.arange(w) + 0.5) / w * 2 - 1, h)
        omega = base ** (-4.0 * np.arange(d // 4) / d)
        half = 2 * np.pi * np.concatenate([np.outer(y, omega), np.outer(x, omega)], 1)
        return np.concatenate([half, half], 1)
    n = stand_in.grid  # llama4-vision: 1-based (x, y), the class token last at angle 0
    y, x = np.divmod(np.arange(n * n), n)
    omega = _omega(base, d // 4, d // 2)
    angles = np.concatenate([np.outer(x + 1, omega), np.outer(y + 1, omega)], 1)
    return np.concatenate([angles, np.zeros((1, d // 2))])[:, None]


def _within_half_ulp(got, ref):
    got = got.double().numpy()
    worst = float(np.max(np.abs(got - ref) - (6e-8 * np.abs(ref) + 1e-38)))
    assert worst <= 0, worst


@pytest.mark.parametrize("family", FAMILIES)
def test_exact_tables_and_outputs(family):
    model, path, cls, runs = build(family)
    before = outputs(model, runs)
    report = patch(model)
    _check_report(report, path, cls, "exact", family)
    stand_in = get(model, path)
    seen = []
    stand_in.register_forward_hook(lambda mod, args, out: seen.append((args, out)))
    after = outputs(model, runs)
    assert seen
    for args, out in seen:
        angles = reference(family, stand_in, args, out)
        if family == "llama4-vision":
            assert out.dtype == torch.complex64
            cos, sin = out.real, out.imag
        else:
            cos, sin = out
            assert cos.dtype == torch.float32
        assert cos.shape == angles.shape
        _within_half_ulp(cos, np.cos(angles))
        _within_half_ulp(sin, np.sin(angles))
    # the model's outputs move by float32's table error (< 1e-5 at these positions) carried
    # through a few random layers: far below 1e-4, and nowhere near a wrong table's O(1)
    for a, b in zip(after, before, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))  # replaced


@pytest.mark.parametrize("family", ["qwen2-vl-vision", "pixtral", "dinov3"])
def test_exact_bf16(family):
    """bf16: after model.to(bfloat16) and under autocast the exact tables stay finite and the
    outputs close (bf16's own rounding, 2^-8, is the bound)."""
    model, _, _, runs = build(family)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        before = outputs(model, runs)
    patch(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for a, b in zip(outputs(model, runs), before, strict=True):
            torch.testing.assert_close(a.float(), b.float(), rtol=0.05, atol=0.05)
    reference_model, _, _, _ = build(family)
    reference_model.to(torch.bfloat16)
    model.to(torch.bfloat16)
    for a, b in zip(outputs(model, runs, torch.bfloat16),
                    outputs(reference_model, runs, torch.bfloat16), strict=True):  # fmt: skip
        assert a.dtype == torch.bfloat16
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a.float(), b.float(), rtol=0.05, atol=0.05)


def test_dinov3_training_draws_as_the_original():
    """In training mode DINOv3 draws a random rescale: the stand-in draws the same (compat:
    the same bits; exact: close), and leaves the generator where the original does."""
    model, path, _, runs = build("dinov3")
    model.train()
    torch.manual_seed(5)
    before = outputs(model, runs)
    after_rng = torch.rand(1)
    patch(model, compat="original")
    assert get(model, path).training
    torch.manual_seed(5)
    assert all(torch.equal(a, b) for a, b in zip(outputs(model, runs), before, strict=True))
    assert torch.equal(torch.rand(1), after_rng)
    model2, _, _, _ = build("dinov3")
    model2.train()
    patch(model2)
    torch.manual_seed(5)
    for a, b in zip(outputs(model2, runs), before, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# (3) the state dict, patching twice


@pytest.mark.parametrize("family", FAMILIES)
def test_state_dict_and_patching_twice(family):
    model, path, _, _ = build(family)
    state = model.state_dict()
    patch(model)
    assert not any(k.startswith(path + ".") for k in model.state_dict())
    model.load_state_dict(state, strict=True)
    for again in (patch(model),):  # the same mode: nothing to do (the other one switches)
        assert not again.replaced
        assert all(r.note == "learned, left alone" for r in again)  # SAM 3's learned table
        assert len(again) == (1 if family == "sam3-vit" else 0)


def test_llama4_bf16_cast_before_patching_is_left_alone():
    """model.to(bfloat16) keeps only the real part of Llama 4's complex table: not repeated."""
    model, path, cls, _ = build("llama4-vision")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.to(torch.bfloat16)
    report = patch(model)
    row = next(r for r in report if r.path == path)
    assert not row.replaced
    assert "real dtype" in row.note
    assert type(get(model, path)).__name__ == cls


def test_sam3_window_and_global_layers():
    """Each SAM 3 layer's stand-in is measured at its own grid (12 x 12 window, 36 x 36 global
    at a third per patch)."""
    model, _, _, _ = build("sam3-vit")
    report = patch(model, dry_run=True)
    notes = {r.path: r.note for r in report.replaced}
    assert set(notes) == {"layers.0.rotary_emb", "layers.1.rotary_emb"}
    assert "12 x 12" in notes["layers.0.rotary_emb"]
    assert "36 x 36" in notes["layers.1.rotary_emb"]


def test_a_wrong_form_is_left_alone():
    """A Qwen2-VL-form module whose inv_freq is not the ladder posenc knows is left alone."""
    model, path, cls, _ = build("qwen2-vl-vision")
    get(model, path).inv_freq.mul_(1.5)
    report = patch(model)
    row = next(r for r in report if r.path == path)
    assert not row.replaced
    assert "inv_freq" in row.note
    assert type(get(model, path)).__name__ == cls
