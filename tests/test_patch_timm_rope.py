"""posenc.torch.patch on small random-weight timm models with rotary embeddings (no download):
EVA-02, naver's RoPE-ViT, Perception Encoder, DINOv3 (its size set per call), RoPE-ViT and
EVA-02 with ``dynamic_img_size``. Per model: ``compat="original"`` leaves the outputs and the
tables identical (float32, bf16 autocast, a bf16 model, two image sizes where the size is
dynamic, ``set_input_size``, a cast there and back); the report names the rotary module; the
exact patch holds the float64 tables written here from the formulas, rounded once (float32
and bf16), and moves the outputs by float32 noise; the original checkpoint loads with
strict=True; patching twice changes nothing. RoPE-Mixed (learned), coordinate augmentation and
DINOv3's min/max periods are left alone, saying why (pixel bands, MRoPE, NaFlexViT, SAM and the
Qwen3 / DeepSeek towers: tests/test_patch_timm_more.py)."""

from __future__ import annotations

import copy
import functools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
from timm.layers.pos_embed_sincos import (  # noqa: E402
    RotaryEmbedding,
    RotaryEmbeddingCat,
    RotaryEmbeddingDinoV3,
)

from posenc.torch import patch  # noqa: E402
from posenc.torch._patching import LEARNED  # noqa: E402
from posenc.torch._timm_rope import TimmRotaryEmbedding  # noqa: E402

# each family's tables, from the timm model definitions (timm/models/eva.py): base, the
# reference grid positions are rescaled to, grid offset, the column block first
# (grid_indexing 'xy'), the halves layout (rotate_half), DINOv3's centred coordinates
FAMILIES = {
    "eva02": {"base": 1e4, "ref": (16, 16)},
    "vit-rope": {"base": 100.0, "columns_first": True},
    "perception-encoder": {"base": 1e4, "ref": (24, 24), "offset": 1.0, "columns_first": True},
    "dinov3": {"base": 100.0, "halves": True, "centred": True},
}

# name: (timm model, options, image sizes, patch size, rope class, family)
MODELS = {
    "eva02": ("eva02_tiny_patch14_224", {}, [(224, 224)], 14, "RotaryEmbeddingCat", "eva02"),
    "eva02-154": ("eva02_tiny_patch14_224", {"img_size": 154}, [(154, 154)], 14,
                  "RotaryEmbeddingCat", "eva02"),  # 11 x 11 patches on the 16 x 16 reference
    "eva02-dynamic": ("eva02_tiny_patch14_224", {"dynamic_img_size": True},
                      [(224, 224), (154, 182)], 14, "RotaryEmbeddingCat", "eva02"),
    "vit-rope": ("vit_small_patch16_rope_224", {}, [(224, 224)], 16, "RotaryEmbeddingCat",
                 "vit-rope"),
    "vit-rope-dynamic": ("vit_small_patch16_rope_224", {"dynamic_img_size": True},
                         [(224, 224), (144, 176)], 16, "RotaryEmbeddingCat", "vit-rope"),
    "perception-encoder": ("vit_pe_core_tiny_patch16_384", {}, [(384, 384)], 16,
                           "RotaryEmbeddingCat", "perception-encoder"),
    "dinov3": ("vit_small_patch16_dinov3", {}, [(256, 256), (144, 176)], 16,
               "RotaryEmbeddingDinoV3", "dinov3"),
}  # fmt: skip
# DINOv3's grids are 16 x 16 and 9 x 11: no centred coordinate is a multiple of 1/4, where the
# float64 reference's sin(pi) = 1.2e-16 would stand for an exact 0 (14 x 14 has c = +-1/2)


def reference(grid, dim=64, *, base, ref=None, offset=0.0, columns_first=False, halves=False,
              centred=False):  # fmt: skip
    """float64 ``(sin, cos)`` ``[H * W, dim]`` of timm's two-axis RoPE: per axis ``dim / 4``
    frequencies, ``base ** (-k / (dim / 4))`` at positions ``(i + offset) * ref / n`` (or ``i +
    offset``), or DINOv3's ``2 pi / base ** (2k / (dim / 2))`` at ``((i + 0.5 + offset) / n) *
    2 - 1``; the row block first unless ``columns_first``, each frequency twice in a row
    (interleaved) or in both halves."""
    axes = []
    for g, n in enumerate(grid):
        i = np.arange(n, dtype=np.float64)
        if centred:
            axes.append((i + 0.5 + offset) / n * 2.0 - 1.0)
        elif ref is not None:
            axes.append((i + offset) * ref[g] / n)
        else:
            axes.append(i + offset)
    rows, cols = (a.reshape(-1) for a in np.meshgrid(*axes, indexing="ij"))
    k = np.arange(dim // 4, dtype=np.float64)
    omega = 2.0 * math.pi / base ** (2.0 * k / (dim // 2)) if centred else base ** (-k / (dim // 4))
    first, second = (cols, rows) if columns_first else (rows, cols)
    theta = np.concatenate([first[:, None] * omega, second[:, None] * omega], axis=1)
    theta = np.concatenate([theta, theta], 1) if halves else np.repeat(theta, 2, axis=1)
    return np.sin(theta), np.cos(theta)


def assert_exact(got, want):
    """Within one float32 rounding of the float64 value."""
    got = np.asarray(got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-38)


@functools.cache
def _built(name):
    model_name, options, *_ = MODELS[name]
    torch.manual_seed(0)
    return timm.create_model(model_name, pretrained=False, depth=1, **options).eval()


def _model(name):
    return copy.deepcopy(_built(name))


def _grids(name):
    _, _, sizes, p, *_ = MODELS[name]
    return [(h // p, w // p) for h, w in sizes]


def _images(name, dtype=torch.float32):
    torch.manual_seed(1)
    return [torch.randn(2, 3, h, w).to(dtype) for h, w in MODELS[name][2]]


def _features(model, x):
    with torch.no_grad():
        return model.forward_features(x)


def _embed(rope, grid):
    """The table the model asks its rotary module for at this grid."""
    return rope.get_embed() if rope.feat_shape is not None else rope.get_embed(shape=grid)


def _row(report, path="rope"):
    rows = [r for r in report if r.path == path]
    assert len(rows) == 1, str(report)
    return rows[0]


# ---------------------------------------------------------------------------------------------
# compat="original": identical


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.parametrize("name", sorted(MODELS))
def test_compat_leaves_outputs_and_tables_identical(name):
    model = _model(name)
    compat = copy.deepcopy(model)
    report = patch(compat, compat="original")
    row = _row(report)
    assert (row.original, row.mode) == (MODELS[name][4], "compat")
    assert row.replacement.startswith("TimmRotaryEmbedding(")
    assert f"preset={MODELS[name][5]!r}" in row.replacement
    assert type(compat.rope) is TimmRotaryEmbedding
    for x, grid in zip(_images(name), _grids(name), strict=True):
        mine, theirs = _embed(compat.rope, grid), _embed(model.rope, grid)
        assert mine.dtype == theirs.dtype == torch.float32
        assert torch.equal(mine, theirs)
        assert torch.equal(_features(compat, x), _features(model, x))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(_features(compat, x), _features(model, x))
    low, low_compat = copy.deepcopy(model).bfloat16(), copy.deepcopy(compat).to(torch.bfloat16)
    for x, grid in zip(_images(name, torch.bfloat16), _grids(name), strict=True):
        mine, theirs = _embed(low_compat.rope, grid), _embed(low.rope, grid)
        assert mine.dtype == theirs.dtype  # a kept table follows .to(); computed ones: float32
        assert torch.equal(mine, theirs)
        assert torch.equal(_features(low_compat, x), _features(low, x))


# ---------------------------------------------------------------------------------------------
# exact: the float64 tables rounded once


@pytest.mark.parametrize("name", sorted(MODELS))
def test_exact_tables_are_the_float64_ones_rounded_once(name):
    family = FAMILIES[MODELS[name][5]]
    model = _model(name)
    exact = copy.deepcopy(model)
    row = _row(patch(exact))
    assert row.mode == "exact"
    low = copy.deepcopy(exact).to(torch.bfloat16)
    largest = 0.0
    for grid in _grids(name):
        sin, cos = reference(grid, **family)
        table = _embed(exact.rope, grid)
        assert table.dtype == torch.float32
        assert table.shape == (grid[0] * grid[1], 128)
        assert_exact(table[:, :64], sin)
        assert_exact(table[:, 64:], cos)
        # the reference is the model's own convention: timm's float32 table is near it, and a
        # table with the two axes' blocks swapped is not
        theirs = _embed(model.rope, grid).double().numpy()
        assert np.abs(theirs - np.concatenate([sin, cos], 1)).max() < 1e-5
        swapped = reference(grid, **{**family, "columns_first": not family.get("columns_first")})
        assert np.abs(theirs - np.concatenate(swapped, 1)).max() > 1e-2
        largest = max(largest, float((table.double() - _embed(model.rope, grid)).abs().max()))
        # a bf16 model: a kept table is rounded once from float64 to bf16
        bf16 = _embed(low.rope, grid)
        want = torch.from_numpy(np.concatenate([sin, cos], 1))
        assert torch.equal(bf16, want.to(bf16.dtype))
    if MODELS[name][1].get("dynamic_img_size") or MODELS[name][5] == "dinov3":
        assert _embed(low.rope, _grids(name)[0]).dtype == torch.float32  # as timm's
    # the report's figure is the largest |timm - exact| over the grid it names; timm's float32
    # angles (positions up to 25, frequencies up to 2 pi) err by at most ~25 * 2 pi * 2^-24
    assert row.max_diff is not None
    assert row.max_diff < 1e-5
    assert f"{_grids(name)[0][0]} x {_grids(name)[0][1]}" in row.note
    if len(_grids(name)) == 1:
        assert row.max_diff == pytest.approx(largest, rel=0, abs=0)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_exact_outputs_are_finite_and_close(name):
    model = _model(name)
    exact = copy.deepcopy(model)
    patch(exact)
    for x in _images(name):
        before, after = _features(model, x), _features(exact, x)
        assert torch.isfinite(after).all()
        # the tables move by under 1e-5 (the test above); one block turns that into a relative
        # change of the features of the same order times its logit scale (O(1) at random init):
        # 1e-4 of the largest feature leaves that margin, while a wrong table (blocks swapped,
        # another offset) moves them by O(1)
        assert float((after - before).abs().max()) <= 1e-4 * float(before.abs().max())


# ---------------------------------------------------------------------------------------------
# checkpoints, patching twice, resizing, casts


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("compat", [None, "original"])
def test_checkpoint_loads_strictly_and_twice_is_a_no_op(name, compat):
    model = _model(name)
    saved = model.state_dict()
    assert not [k for k in saved if k.startswith("rope.")]  # timm's buffers are non-persistent
    patched = copy.deepcopy(model)
    patch(patched, compat=compat)
    assert patched.state_dict().keys() == saved.keys()
    assert not patched.load_state_dict(saved, strict=True).missing_keys
    rope = patched.rope
    again = patch(patched, compat=compat)
    assert not again.replaced
    assert "rope" not in [r.path for r in again]
    assert patched.rope is rope
    x = _images(name)[0]
    if compat is not None:
        assert torch.equal(_features(patched, x), _features(model, x))


@pytest.mark.parametrize("compat", [None, "original"])
def test_set_input_size_recomputes_the_kept_table(compat):
    model = _model("eva02")
    patched = copy.deepcopy(model)
    patch(patched, compat=compat)
    for m in (model, patched):
        m.set_input_size(img_size=(168, 196))  # 12 x 14 patches, positions i * 16 / n
    assert tuple(patched.rope.feat_shape) == (12, 14)
    table = patched.rope.get_embed()
    if compat is None:
        sin, cos = reference((12, 14), **FAMILIES["eva02"])
        assert_exact(table[:, :64], sin)
        assert_exact(table[:, 64:], cos)
    else:
        assert torch.equal(table, model.rope.get_embed())
        torch.manual_seed(2)
        x = torch.randn(1, 3, 168, 196)
        assert torch.equal(_features(patched, x), _features(model, x))


def test_compat_follows_a_cast_there_and_back():
    """timm casts its kept table with the module: to bf16 and back to float32 it keeps bf16
    values; compat does the same, exact computes the float32 table again."""
    model = _model("vit-rope")
    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    patch(compat, compat="original")
    patch(exact)
    for m in (model, compat, exact):
        m.to(torch.bfloat16).float()
    assert torch.equal(compat.rope.get_embed(), model.rope.get_embed())
    sin, _ = reference((14, 14), **FAMILIES["vit-rope"])
    assert_exact(exact.rope.get_embed()[:, :64], sin)
    x = _images("vit-rope")[0]
    assert torch.equal(_features(compat, x), _features(model, x))
    # a model cast so before patching: compat cannot repeat its table, exact replaces it
    row = _row(patch(copy.deepcopy(model), compat="original"))
    assert row.mode is None
    assert "does not repeat" in row.note
    assert _row(patch(copy.deepcopy(model))).mode == "exact"


# ---------------------------------------------------------------------------------------------
# the module's other calls, and the forms the models do not use


def _pairs(a, b):
    a, b = (list(t) if isinstance(t, (tuple, list)) else [t] for t in (a, b))
    assert len(a) == len(b)
    return zip(a, b, strict=True)


@pytest.mark.parametrize("name", ["dinov3", "vit-rope-dynamic", "eva02-dynamic"])
def test_module_calls_repeat_timm(name):
    model = _model(name)
    compat = copy.deepcopy(model)
    patch(compat, compat="original")
    mine, theirs = compat.rope, model.rope
    shapes = [(9, 11), (16, 16), (5, 3)]
    for got, want in _pairs(mine.get_batch_embeds(shapes), theirs.get_batch_embeds(shapes)):
        assert torch.equal(got, want)
    got, want = mine.get_batch_embeds(shapes, seq_len=300), theirs.get_batch_embeds(shapes, 300)
    assert got.shape == (3, 300, 128)
    assert torch.equal(got, want)
    got, want = mine.get_embed((9, 11), torch.bfloat16), theirs.get_embed((9, 11), torch.bfloat16)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, want)
    torch.manual_seed(3)
    x = torch.randn(2, 64, 9, 11)
    assert torch.equal(mine(x), theirs(x))
    exact = copy.deepcopy(model)
    patch(exact)
    sin, cos = reference((9, 11), **FAMILIES[MODELS[name][5]])
    want = torch.from_numpy(np.concatenate([sin, cos], 1)).to(torch.bfloat16)
    assert torch.equal(exact.rope.get_embed((9, 11), dtype=torch.bfloat16), want)  # once


class _Holder(torch.nn.Module):
    def __init__(self, **modules):
        super().__init__()
        for k, v in modules.items():
            setattr(self, k, v)


def test_other_settings_pair_form_and_halves():
    """``RotaryEmbedding`` ((sin, cos), kept, 'xy', ref_feat_shape, grid_offset 2) and a
    halves-layout ``RotaryEmbeddingCat`` without a kept table (Qwen3's and DeepSeek's towers)."""
    options = {"in_pixels": False, "ref_feat_shape": [12, 20], "grid_offset": 2.0,
               "grid_indexing": "xy"}  # fmt: skip
    holder = _Holder(pair=RotaryEmbedding(64, feat_shape=[7, 9], **options),
                     halves=RotaryEmbeddingCat(64, in_pixels=False, rotate_half=True))  # fmt: skip
    compat, exact = copy.deepcopy(holder), copy.deepcopy(holder)
    rows = {r.path: r for r in patch(compat, compat="original")}
    assert rows["pair"].mode == rows["halves"].mode == "compat"
    assert rows["pair"].original == "RotaryEmbedding"
    patch(exact)
    for got, want in _pairs(compat.pair.get_embed(), holder.pair.get_embed()):
        assert torch.equal(got, want)
    for got, want in _pairs(compat.halves.get_embed((6, 10)), holder.halves.get_embed((6, 10))):
        assert torch.equal(got, want)
    sin, cos = exact.pair.get_embed()
    want = reference((7, 9), base=1e4, ref=(12, 20), offset=2.0, columns_first=True)
    assert np.abs(holder.pair.get_embed()[0].double().numpy() - want[0]).max() < 1e-5  # timm's
    assert_exact(sin, want[0])
    assert_exact(cos, want[1])
    table = exact.halves.get_embed((6, 10))
    sin, cos = reference((6, 10), base=1e4, halves=True)
    assert_exact(table[:, :64], sin)
    assert_exact(table[:, 64:], cos)


def test_what_is_left_alone():
    holder = _Holder(
        shifted=RotaryEmbeddingDinoV3(64, shift_coords=0.1),
        periods=RotaryEmbeddingDinoV3(64, min_period=0.5, max_period=50.0),
    )
    before = dict(holder.named_children())
    rows = {r.path: r for r in patch(holder, compat="original")}
    assert set(rows) == set(before)
    assert all(r.mode is None for r in rows.values())
    assert "augmentation" in rows["shifted"].note
    assert "min_period" in rows["periods"].note
    assert dict(holder.named_children()) == before


@pytest.mark.parametrize("compat", [None, "original"])
def test_rope_mixed_is_learned_and_left_alone(compat):
    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_rope_mixed_224", pretrained=False,
                              depth=1).eval()  # fmt: skip
    rope = model.rope
    row = _row(patch(model, compat=compat))
    assert (row.original, row.mode, row.note) == ("RotaryEmbeddingMixed", None, LEARNED)
    assert model.rope is rope
    assert "rope.freqs" in model.state_dict()


@pytest.mark.parametrize("dynamic", [False, True])
def test_an_eva_without_ref_feat_shape(dynamic):
    """timm's Eva built without ref_feat_shape (plain integer positions, not eva02's
    (i / n) * n): compat repeats it bit for bit, at 13 x 21 patches where the two differ."""
    from timm.models.eva import Eva

    torch.manual_seed(0)
    size = {"img_size": (13 * 14, 21 * 14)}
    model = Eva(patch_size=14, embed_dim=192, depth=1, num_heads=3, use_rot_pos_emb=True,
                dynamic_img_size=dynamic, **size).eval()  # fmt: skip
    assert model.rope.ref_feat_shape is None
    x = torch.randn(2, 3, 13 * 14, 21 * 14)
    compat = copy.deepcopy(model)
    row = _row(patch(compat, compat="original"))
    assert row.mode == "compat"
    assert "vit-rope" in row.replacement
    assert torch.equal(_features(compat, x), _features(model, x))
    exact = copy.deepcopy(model)
    assert _row(patch(exact)).mode == "exact"
    sin, cos = reference((13, 21), base=1e4)  # plain integers, rows first
    table = _embed(exact.rope, [13, 21])
    assert_exact(table[:, :64], sin)
    assert_exact(table[:, 64:], cos)
