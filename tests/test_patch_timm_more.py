"""posenc.torch.patch on timm's remaining rotary forms, small random-weight models and modules
(no download): NaFlexViT with rope_type 'axial', 'dinov3' and 'mrope' (image batches at two
sizes and a NaFlex batch of two grids), SAM's ViT with RoPE (global and window tables, with and
without ref_feat_shape), Qwen3's and DeepSeek's towers; ``RotaryEmbeddingCat`` /
``RotaryEmbedding`` with pixel bands and ``RotaryEmbeddingMRope`` as modules. Per model:
``compat="original"`` gives identical outputs, the report names the rotary module; the exact
patch holds float64 tables written here from timm's formulas rounded once and moves the
outputs by float32 noise; the checkpoint loads strictly; patching twice is a no-op.
NaFlexViT's 'mixed' (learned) is left alone, saying why (Gemma 4: tests/test_patch_gemma4.py)."""

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
    RotaryEmbeddingMRope,
)

from posenc.torch import patch  # noqa: E402
from posenc.torch._patching import LEARNED  # noqa: E402

SMALL = {"depth": 1, "embed_dim": 192, "num_heads": 3}  # head 64
# name: (timm model, options, rotary module paths, their class, the preset the report names)
MODELS = {
    "naflex-axial": ("naflexvit_base_patch16_gap", {**SMALL, "rope_type": "axial",
                     "pos_embed": "none"}, ["rope"], "RotaryEmbeddingCat", "vit-rope"),
    "naflex-axial-ref": ("naflexvit_base_patch16_gap", {**SMALL, "rope_type": "axial",
                         "rope_ref_feat_shape": (16, 16), "rope_grid_indexing": "xy",
                         "rope_rotate_half": True}, ["rope"], "RotaryEmbeddingCat",
                         "perception-encoder"),
    "naflex-dinov3": ("naflexvit_base_patch16_gap", {**SMALL, "rope_type": "dinov3",
                      "rope_rotate_half": True, "rope_temperature": 100.0}, ["rope"],
                      "RotaryEmbeddingDinoV3", "dinov3"),
    "naflex-mrope": ("naflexvit_base_patch16_gap", {**SMALL, "rope_type": "mrope",
                     "rope_mrope_section": (8, 12, 12)}, ["rope"], "RotaryEmbeddingMRope",
                     "timm-mrope"),
    "sam": ("samvit_base_patch16", {**SMALL, "depth": 2, "img_size": 224, "window_size": 7,
            "global_attn_indexes": (1,), "use_rope": True, "use_rel_pos": False},
            ["rope_global", "rope_window"], "RotaryEmbeddingCat", "vit-rope"),
    "sam-ref": ("samvit_base_patch16", {**SMALL, "depth": 2, "img_size": 224, "window_size": 7,
                "global_attn_indexes": (1,), "use_rope": True, "use_rel_pos": False,
                "ref_feat_shape": (16, 8)}, ["rope_global", "rope_window"],
                "RotaryEmbeddingCat", "eva02"),
    "qwen3": ("qwen3_vit_88m", {"depth": 1}, ["encoder.rope"], "RotaryEmbeddingCat",
              "vit-rope"),
    "deepseek": ("deepseek_vit_412m", {"depth": 1}, ["encoder.rope"], "RotaryEmbeddingCat",
                 "vit-rope"),
}  # fmt: skip
SIZES = [(224, 224), (160, 240)]  # SAM's size is fixed: the first only


@functools.cache
def _built(name):
    model_name, options, *_ = MODELS[name]
    torch.manual_seed(0)
    return timm.create_model(model_name, pretrained=False, **options).eval()


def _model(name):
    return copy.deepcopy(_built(name))


def _sizes(name):
    """224 x 224 at patch 16 and a 10 x 15 patch grid (the towers' patch is 14 or 16)."""
    if name.startswith("sam"):
        return SIZES[:1]
    p = 14 if name == "deepseek" else 16
    return [(14 * p, 14 * p), (10 * p, 15 * p)]


def _features(model, x):
    with torch.no_grad():
        if isinstance(x, dict):
            return model.forward_features(**x)["patches"]
        return model.forward_features(x)


def _images(name):
    torch.manual_seed(1)
    return [torch.randn(2, 3, h, w) for h, w in _sizes(name)]


def _naflex_batch(grids, p=16):
    """A NaFlex batch: each image's patches (row-major, (ph, pw, C) flattened), their (y, x)
    coordinates and the valid mask, zero-padded to the longest."""
    torch.manual_seed(2)
    n = max(h * w for h, w in grids)
    patches = torch.zeros(len(grids), n, p * p * 3)
    coord = torch.zeros(len(grids), n, 2, dtype=torch.long)
    valid = torch.zeros(len(grids), n, dtype=torch.bool)
    for b, (h, w) in enumerate(grids):
        patches[b, : h * w] = torch.randn(h * w, p * p * 3)
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        coord[b, : h * w] = torch.stack([ys.reshape(-1), xs.reshape(-1)], -1)
        valid[b, : h * w] = True
    return {"patches": patches, "patch_coord": coord, "patch_valid": valid}


def _module(model, path):
    return model.get_submodule(path)


def _rows(report):
    return {r.path: r for r in report}


def assert_exact(got, want):
    got = np.asarray(got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-12)


# ---------------------------------------------------------------------------------------------
# float64 references from timm's formulas


def axial_reference(grid, *, base=1e4, ref=None, halves=False, columns_first=False,
                    centred=False, dim=64):  # fmt: skip
    """float64 ``cat(sin, cos)`` of timm's two-axis RoPE (``dim / 4`` bands per axis)."""
    axes = []
    for g, n in enumerate(grid):
        i = np.arange(n, dtype=np.float64)
        axes.append((i + 0.5) / n * 2 - 1 if centred else i * ref[g] / n if ref else i)
    rows, cols = (a.reshape(-1) for a in np.meshgrid(*axes, indexing="ij"))
    k = np.arange(dim // 4, dtype=np.float64)
    omega = 2 * math.pi / base ** (2 * k / (dim // 2)) if centred else base ** (-k / (dim // 4))
    first, second = (cols, rows) if columns_first else (rows, cols)
    theta = np.concatenate([first[:, None] * omega, second[:, None] * omega], 1)
    theta = np.concatenate([theta, theta], 1) if halves else np.repeat(theta, 2, 1)
    return np.concatenate([np.sin(theta), np.cos(theta)], 1)


def mrope_reference(grid, dim=64, base=1e4, section=(8, 12, 12)):
    """float64 ``cat(sin, cos)`` of timm's MRoPE: one ladder ``base ** (-2j / dim)``, ``j % 3 ==
    1`` on the row and ``2`` on the column (below ``3 * section``), the rest at 0; halves."""
    j = np.arange(dim // 2)
    omega = base ** (-2.0 * j / dim)
    mesh = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
    ys, xs = (a.reshape(-1).astype(np.float64) for a in mesh)
    pos = np.zeros((ys.size, j.size))
    pos[:, (j % 3 == 1) & (j < 3 * section[1])] = ys[:, None]
    pos[:, (j % 3 == 2) & (j < 3 * section[2])] = xs[:, None]
    theta = np.concatenate([pos * omega] * 2, 1)
    return np.concatenate([np.sin(theta), np.cos(theta)], 1)


def pixel_reference(grid, dim=64, max_res=224.0, linear=False):
    """float64 ``(sin, cos)`` of timm's pixel bands over ``linspace(-1, 1, n)``, interleaved."""
    n = dim // 4
    u = np.arange(n) / (n - 1)
    omega = (
        math.pi * (1 + u * (max_res / 2 - 1))
        if linear
        else math.pi * 2 ** (u * (math.log2(max_res) - 1))
    )
    axes = [np.linspace(-1.0, 1.0, s) for s in grid]
    rows, cols = (a.reshape(-1) for a in np.meshgrid(*axes, indexing="ij"))
    theta = np.repeat(np.concatenate([rows[:, None] * omega, cols[:, None] * omega], 1), 2, 1)
    return np.sin(theta), np.cos(theta)


REFERENCES = {  # the tables of each model's rope at a grid
    "naflex-axial": lambda g: axial_reference(g),
    "naflex-axial-ref": lambda g: axial_reference(g, ref=(16, 16), halves=True,
                                                  columns_first=True),
    "naflex-dinov3": lambda g: axial_reference(g, base=100.0, halves=True, centred=True),
    "naflex-mrope": lambda g: mrope_reference(g),
    "qwen3": lambda g: axial_reference(g, halves=True),
    "deepseek": lambda g: axial_reference(g, halves=True),
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the models


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compat_outputs_are_identical(name):
    model = _model(name)
    compat = copy.deepcopy(model)
    rows = _rows(patch(compat, compat="original"))
    for path in MODELS[name][2]:
        row = rows[path]
        assert (row.original, row.mode) == (MODELS[name][3], "compat")
        assert f"preset={MODELS[name][4]!r}" in row.replacement
        assert type(_module(compat, path)).__name__ in ("TimmRotaryEmbedding",
                                                         "TimmMRopeEmbedding")  # fmt: skip
    for x in _images(name):
        assert torch.equal(_features(compat, x), _features(model, x))
    if name.startswith("naflex"):  # two grids in one batch: per-size tables, padded
        batch = _naflex_batch([(9, 13), (12, 5)])
        assert torch.equal(_features(compat, batch), _features(model, batch))


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_exact_tables_and_outputs(name):
    model = _model(name)
    exact = copy.deepcopy(model)
    rows = _rows(patch(exact))
    path = MODELS[name][2][0]
    assert rows[path].mode == "exact"
    rope, theirs = _module(exact, path), _module(model, path)
    for grid in [(14, 14), (9, 13)]:
        want = REFERENCES[name](grid)
        table = rope.get_embed(shape=grid)
        assert table.dtype == torch.float32
        assert_exact(table, want)
        assert np.abs(theirs.get_embed(shape=grid).double().numpy() - want).max() < 1e-5
    inputs = _images(name)
    if name.startswith("naflex"):
        inputs.append(_naflex_batch([(9, 13), (12, 5)]))
    for x in inputs:
        before, after = _features(model, x), _features(exact, x)
        assert torch.isfinite(after).all()
        assert float((after - before).abs().max()) <= 1e-4 * float(before.abs().max())


@pytest.mark.parametrize("name", ["sam", "sam-ref"])
def test_sam_exact_global_and_window_tables(name):
    """SAM keeps a table per attention kind: the 14 x 14 image grid and the 7 x 7 window, each
    rescaled to its own reference when ref_feat_shape is set."""
    model = _model(name)
    exact = copy.deepcopy(model)
    patch(exact)
    refs = {"rope_global": (16, 16), "rope_window": (8, 8)} if name == "sam-ref" else {}
    for path, grid in (("rope_global", (14, 14)), ("rope_window", (7, 7))):
        want = axial_reference(grid, ref=refs.get(path))
        assert_exact(_module(exact, path).get_embed(), want)
        assert np.abs(_module(model, path).get_embed().double().numpy() - want).max() < 1e-5
    x = _images(name)[0]
    before, after = _features(model, x), _features(exact, x)
    assert float((after - before).abs().max()) <= 1e-4 * float(before.abs().max())


@pytest.mark.parametrize("name", ["naflex-mrope", "sam"])
@pytest.mark.parametrize("compat", [None, "original"])
def test_checkpoint_loads_strictly_and_twice_is_a_no_op(name, compat):
    model = _model(name)
    saved = model.state_dict()
    patched = copy.deepcopy(model)
    patch(patched, compat=compat)
    assert patched.state_dict().keys() == saved.keys()
    assert not patched.load_state_dict(saved, strict=True).missing_keys
    modules = [_module(patched, p) for p in MODELS[name][2]]
    again = patch(patched, compat=compat)
    assert not again.replaced
    assert [_module(patched, p) for p in MODELS[name][2]] == modules
    if compat is not None:
        x = _images(name)[0]
        assert torch.equal(_features(patched, x), _features(model, x))


def test_naflex_mixed_is_left_alone():
    """(Gemma 4's ``Gemma4RotaryEmbedding2D`` is covered: tests/test_patch_gemma4.py.)"""
    torch.manual_seed(0)
    mixed = timm.create_model("naflexvit_base_patch16_gap", pretrained=False, rope_type="mixed",
                              **SMALL).eval()  # fmt: skip
    row = _rows(patch(mixed, compat="original"))["rope"]
    assert (row.original, row.mode, row.note) == ("RotaryEmbeddingMixed", None, LEARNED)


# ---------------------------------------------------------------------------------------------
# the modules: pixel bands, MRoPE


class _Holder(torch.nn.Module):
    def __init__(self, **modules):
        super().__init__()
        for k, v in modules.items():
            setattr(self, k, v)


def test_pixel_band_modules():
    """A kept ``RotaryEmbeddingCat(in_pixels=True)`` (log bands) and a per-call
    ``RotaryEmbedding`` with linear bands at max_res 384: compat repeats get_embed, forward
    and get_batch_embeds; exact holds the float64 tables rounded once."""
    holder = _Holder(cat=RotaryEmbeddingCat(64, in_pixels=True, feat_shape=[14, 14]),
                     pair=RotaryEmbedding(64, max_res=384, linear_bands=True))  # fmt: skip
    compat, exact = copy.deepcopy(holder), copy.deepcopy(holder)
    rows = _rows(patch(compat, compat="original"))
    assert (rows["cat"].mode, rows["pair"].mode) == ("compat", "compat")
    assert "preset='timm-pixel'" in rows["cat"].replacement
    assert "preset='timm-pixel-linear'" in rows["pair"].replacement
    assert torch.equal(compat.cat.get_embed(), holder.cat.get_embed())
    for shape in [(14, 14), (9, 13), (1, 6)]:
        for got, want in zip(compat.pair.get_embed(shape), holder.pair.get_embed(shape),
                             strict=True):  # fmt: skip
            assert torch.equal(got, want)
    torch.manual_seed(3)
    x = torch.randn(2, 64, 9, 13)
    assert torch.equal(compat.pair(x), holder.pair(x))
    x = torch.randn(2, 64, 14, 14)
    assert torch.equal(compat.cat(x), holder.cat(x))
    patch(exact)
    sin, cos = pixel_reference((14, 14))
    assert_exact(exact.cat.get_embed(), np.concatenate([sin, cos], 1))
    want = pixel_reference((9, 13), max_res=384.0, linear=True)
    for got, w in zip(exact.pair.get_embed((9, 13)), want, strict=True):
        assert_exact(got, w)
    # timm's per-call pixel tables are not cut from one grid: each shape is its own linspace
    batch = _Holder(cat=RotaryEmbeddingCat(64, in_pixels=True))
    mine = copy.deepcopy(batch)
    patch(mine, compat="original")
    shapes = [(9, 13), (4, 4)]
    for got, want in zip(mine.cat.get_batch_embeds(shapes), batch.cat.get_batch_embeds(shapes),
                         strict=True):  # fmt: skip
        assert torch.equal(got, want)


def test_pixel_modules_left_alone_where_timm_differs():
    holder = _Holder(ref=RotaryEmbeddingCat(64, in_pixels=True, ref_feat_shape=[8, 8]),
                     index=RotaryEmbeddingCat(64, in_pixels=True, grid_type="index"))  # fmt: skip
    rows = _rows(patch(holder, compat="original"))
    assert rows["ref"].mode is None
    assert "ref_feat_shape" in rows["ref"].note
    assert rows["index"].mode is None
    assert "grid_type 'index'" in rows["index"].note


@pytest.mark.parametrize("in_pixels", [True, False])
@pytest.mark.parametrize("compat", [None, "original"])
def test_a_width_posenc_cannot_serve_is_left_alone(in_pixels, compat):
    """``RotaryEmbeddingCat(66)`` (dim not a multiple of 4: timm takes it, posenc's presets
    do not): the recogniser leaves it alone, saying why, instead of aborting the patch; the
    other modules are patched."""
    holder = _Holder(odd=RotaryEmbeddingCat(66, in_pixels=in_pixels),
                     even=RotaryEmbeddingCat(64, in_pixels=in_pixels))  # fmt: skip
    before = holder.odd
    rows = _rows(patch(holder, compat=compat))
    assert rows["odd"].mode is None
    assert "`dim` = 66" in rows["odd"].note
    assert "multiple of 4" in rows["odd"].note
    assert holder.odd is before
    assert rows["even"].mode == ("exact" if compat is None else "compat")


@pytest.mark.parametrize(("dim", "section"), [(64, (8, 12, 12)), (72, (8, 12, 12)),
                                              (48, (2, 3, 5))])  # fmt: skip
def test_mrope_module(dim, section):
    holder = _Holder(rope=RotaryEmbeddingMRope(dim, mrope_section=section))
    compat, exact = copy.deepcopy(holder), copy.deepcopy(holder)
    row = _rows(patch(compat, compat="original"))["rope"]
    assert (row.original, row.mode) == ("RotaryEmbeddingMRope", "compat")
    patch(exact)
    for shape in [(14, 14), (7, 9)]:
        want = holder.rope.get_embed(list(shape))
        assert torch.equal(compat.rope.get_embed(shape), want)
        low = compat.rope.get_embed(shape, dtype=torch.bfloat16)
        assert torch.equal(low, holder.rope.get_embed(list(shape), dtype=torch.bfloat16))
        ref = mrope_reference(shape, dim, section=section)
        assert_exact(exact.rope.get_embed(shape), ref)
        once = exact.rope.get_embed(shape, dtype=torch.bfloat16)
        assert torch.equal(once, torch.from_numpy(ref).to(torch.bfloat16))
    # a float64 module: timm widens its float32 ladder, the angles are float64
    wide, wide_compat = copy.deepcopy(holder).double(), copy.deepcopy(compat).double()
    assert torch.equal(wide_compat.rope.get_embed((5, 6)), wide.rope.get_embed([5, 6]))
    assert wide_compat.rope.get_embed((5, 6)).dtype == torch.float64


def test_mrope_left_alone_when_augmented_or_sectionless():
    holder = _Holder(shift=RotaryEmbeddingMRope(64, shift_coords=0.5),
                     empty=RotaryEmbeddingMRope(64, mrope_section=(8, 0, 12)))  # fmt: skip
    rows = _rows(patch(holder, compat="original"))
    assert rows["shift"].mode is None
    assert "augmentation" in rows["shift"].note
    assert rows["empty"].mode is None
    assert "(8, 0, 12)" in rows["empty"].note
