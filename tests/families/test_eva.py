"""timm's RoPE record (EVA-02, RoPE-ViT, Perception Encoder, the pixel bands:
``RotaryEmbeddingCat`` and ``RotaryEmbedding``): posenc.rope_grid against timm's modules at
settings the models do not use, and at the pixel bands' resolutions and widths, bit for bit
under ``compat="timm"`` and within float32 rounding of float64 references from timm's formulas; the
float32-only evaluator within 1e-6; posenc.torch.patch on small random-weight timm models and
modules (no download): EVA-02's ``set_input_size``, a cast there and back, an EVA without
ref_feat_shape, SAM's global and window tables, the pair form and halves, the pixel-band
modules, and what is left alone, saying why."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.families.models import (
    HEAD,
    _Holder,
    _module,
    _rows,
    _timm_form_features,
    _timm_form_images,
    _timm_form_model,
    assert_exact,
    assert_rounded_once,
    max_error,
)
from tests.families.models import ROPE_VIT_FAMILIES as FAMILIES
from tests.families.models import _rope_vit_embed as _embed
from tests.families.models import _rope_vit_features as _features
from tests.families.models import _rope_vit_images as _images
from tests.families.models import _rope_vit_model as _model
from tests.families.models import _rope_vit_row as _row
from tests.families.models import timm_grid_reference as grid_reference
from tests.reference import timm_axial_embed as axial_reference
from tests.reference import timm_axial_rope as reference

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
from timm.layers.pos_embed_sincos import (  # noqa: E402
    RotaryEmbedding,
    RotaryEmbeddingCat,
)

from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402

# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize("dims", [(17, 23), (23, 17), (1, 5), (6, 1)])
@pytest.mark.parametrize("dim", [40, 128])
@pytest.mark.parametrize("rotate_half", [False, True])
def test_cat_module_settings(dims, dim, rotate_half):
    """RotaryEmbeddingCat with ref_feat_shape (12, 20), grid_offset 2, 'ij' and 'xy', both
    layouts, widths other than 64."""
    layout = "halves" if rotate_half else "interleaved"
    for indexing, blocks in (("ij", (0, 1)), ("xy", (1, 0))):
        module = RotaryEmbeddingCat(dim, in_pixels=False, temperature=10000.0,
                                    feat_shape=list(dims), ref_feat_shape=[12, 20],
                                    grid_offset=2.0, grid_indexing=indexing,
                                    rotate_half=rotate_half)  # fmt: skip
        sin_want, cos_want = module.get_embed().chunk(2, dim=-1)
        refs = (12, 20)
        step = tuple(r / n for r, n in zip(refs, dims, strict=True))
        start = tuple(2 * s for s in step)
        kw = {"start": start, "step": step, "layout": layout, "block_axes": blocks}
        cos, sin = posenc.rope_grid(dims, dim, preset="eva02", compat="timm",
                                    dtype=torch.float32, **kw)  # fmt: skip
        assert torch.equal(cos, cos_want)
        assert torch.equal(sin, sin_want)
        positions = [(np.arange(n) + 2.0) * r / n for n, r in zip(dims, refs, strict=True)]
        ref = grid_reference("eva02", dims, dim, positions, layout, columns_first=indexing == "xy")
        for got, want in zip(posenc.rope_grid(dims, dim, preset="eva02", **kw), ref,
                             strict=True):  # fmt: skip
            assert_exact(got, want)


@pytest.mark.parametrize("dims", [(13, 21), (17, 23)])
@pytest.mark.parametrize("dynamic", [False, True])
def test_eva_without_ref_feat_shape(dims, dynamic):
    """An EVA built without ref_feat_shape (timm Eva's default; the eva02_* models set one)
    takes the plain integers: its table is compat='timm' of vit-rope (RotaryEmbeddingCat
    without ref_feat_shape) at base 10000 and 'ij', bit for bit. eva02's replay of ref = feat,
    (i / n) * n in float32, is not the integers at these sizes (4% of cos entries at 13 x 21);
    the exact tables of the two are one."""
    from timm.models.eva import Eva

    size = {} if dynamic else {"img_size": (dims[0] * 14, dims[1] * 14)}
    model = Eva(patch_size=14, embed_dim=192, depth=1, num_heads=3, use_rot_pos_emb=True,
                dynamic_img_size=dynamic, **size)  # fmt: skip
    assert model.rope.ref_feat_shape is None
    embed = model.rope.get_embed(shape=list(dims)) if dynamic else model.rope.get_embed()
    sin_want, cos_want = embed.chunk(2, dim=-1)
    no_ref = {"preset": "vit-rope", "base": 1e4, "block_axes": (0, 1)}
    cos, sin = posenc.rope_grid(dims, HEAD, compat="timm", dtype=torch.float32, **no_ref)
    assert torch.equal(cos, cos_want)
    assert torch.equal(sin, sin_want)
    eva02_cos, _ = posenc.rope_grid(dims, HEAD, preset="eva02", compat="timm",
                                    dtype=torch.float32)  # fmt: skip
    assert not torch.equal(eva02_cos, cos_want)
    integers = [np.arange(n, dtype=np.float64) for n in dims]
    ref = grid_reference("eva02", dims, positions=integers)
    exact = posenc.rope_grid(dims, HEAD, **no_ref)
    for got, as_eva02, want in zip(exact, posenc.rope_grid(dims, HEAD, preset="eva02"), ref,
                                   strict=True):  # fmt: skip
        np.testing.assert_array_equal(got, as_eva02)
        assert_exact(got, want)


def test_compat_output_follows_numpy_and_like():
    cos, sin = posenc.rope_grid((3, 4), HEAD, preset="vit-rope", compat="timm")
    assert isinstance(cos, np.ndarray)
    assert cos.dtype == sin.dtype == np.float32
    assert cos.shape == sin.shape == (12, HEAD)
    like = torch.zeros(1, dtype=torch.float64)
    cos64, _ = posenc.rope_grid((3, 4), HEAD, preset="vit-rope", compat="timm", like=like,
                                dtype=torch.float64)  # fmt: skip
    assert cos64.dtype == torch.float64
    assert torch.equal(cos64, torch.from_numpy(cos).double())  # timm's float32, widened


SIZES = [(14, 14), (17, 23), (1, 5), (6, 1)]


def pixel_reference(dims, dim=HEAD, *, max_res=224.0, linear=False, columns_first=False,
                    halves=False):  # fmt: skip
    """float64 ``(cos, sin)`` ``[H * W, dim]`` of timm's pixel bands: per axis ``n = dim / 4``
    frequencies ``pi * 2 ** (k (log2 R - 1) / (n - 1))`` (or ``pi * (1 + k (R / 2 - 1) / (n -
    1))``) at positions ``-1 + 2 i / (s - 1)`` (``linspace(-1, 1, s)``)."""
    n = dim // 4
    k = np.arange(n, dtype=np.float64)
    u = k / (n - 1) if n > 1 else k
    omega = (
        math.pi * (1.0 + u * (max_res / 2 - 1.0))
        if linear
        else math.pi * 2.0 ** (u * (math.log2(max_res) - 1.0))
    )
    axes = [-1.0 + 2.0 * np.arange(s) / (s - 1) if s > 1 else np.array([-1.0]) for s in dims]
    rows, cols = (g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij"))
    first, second = (cols, rows) if columns_first else (rows, cols)
    theta = np.concatenate([first[:, None] * omega, second[:, None] * omega], axis=1)
    theta = np.concatenate([theta, theta], 1) if halves else np.repeat(theta, 2, axis=1)
    return np.cos(theta), np.sin(theta)


@pytest.mark.parametrize("dims", SIZES)
@pytest.mark.parametrize("linear", [False, True])
@pytest.mark.parametrize("indexing", ["ij", "xy"])
@pytest.mark.parametrize("rotate_half", [False, True])
def test_pixel_compat_equals_timm(dims, linear, indexing, rotate_half):
    module = RotaryEmbeddingCat(HEAD, in_pixels=True, linear_bands=linear, feat_shape=list(dims),
                                grid_indexing=indexing, rotate_half=rotate_half)  # fmt: skip
    sin_want, cos_want = module.get_embed().chunk(2, dim=-1)
    preset = "timm-pixel-linear" if linear else "timm-pixel"
    kw = {"block_axes": (0, 1) if indexing == "ij" else (1, 0),
          "layout": "halves" if rotate_half else "interleaved"}  # fmt: skip
    cos, sin = posenc.rope_grid(dims, HEAD, preset=preset, compat="timm", dtype=torch.float32,
                                **kw)  # fmt: skip
    assert torch.equal(cos, cos_want)
    assert torch.equal(sin, sin_want)
    ref = pixel_reference(dims, linear=linear, columns_first=indexing == "xy",
                          halves=rotate_half)  # fmt: skip
    for got, theirs, want in zip(posenc.rope_grid(dims, HEAD, preset=preset, **kw),
                                 (cos_want, sin_want), ref, strict=True):  # fmt: skip
        assert got.dtype == np.float32
        assert_rounded_once(got, want)
        assert max_error(theirs.double().numpy(), want) < 1e-4  # the same convention
        if max_error(theirs.double().numpy(), want) > 1e-6:
            assert max_error(got, want) < max_error(theirs.double().numpy(), want)


@pytest.mark.parametrize("max_res", [96, 512, 1000])
@pytest.mark.parametrize("dim", [16, 40, 128])
def test_pixel_other_resolutions_and_widths(max_res, dim):
    """``RotaryEmbedding`` (the ``(sin, cos)`` pair, in_pixels by default) at other max_res and
    widths: the max resolution is posenc's ``base``."""
    dims = (9, 12)
    for linear in (False, True):
        module = RotaryEmbedding(dim, max_res=max_res, linear_bands=linear, feat_shape=list(dims))
        sin_want, cos_want = module.get_embed()
        preset = "timm-pixel-linear" if linear else "timm-pixel"
        cos, sin = posenc.rope_grid(dims, dim, preset=preset, base=max_res, compat="timm",
                                    dtype=torch.float32)  # fmt: skip
        assert torch.equal(cos, cos_want)
        assert torch.equal(sin, sin_want)
        ref = pixel_reference(dims, dim, max_res=float(max_res), linear=linear)
        for got, want in zip(posenc.rope_grid(dims, dim, preset=preset, base=max_res), ref,
                             strict=True):  # fmt: skip
            assert_rounded_once(got, want)


def test_the_pixel_reference_is_timms_convention():
    """timm's float32 tables are near the reference, and far from it with the axes swapped or
    the other band spacing: the reference could not pass with a wrong formula."""
    dims = (14, 10)
    sin, cos = RotaryEmbedding(HEAD, feat_shape=list(dims)).get_embed()
    ref = pixel_reference(dims)
    assert max_error(cos.double().numpy(), ref[0]) < 1e-4
    assert max_error(cos.double().numpy(), pixel_reference(dims, columns_first=True)[0]) > 1e-2
    assert max_error(sin.double().numpy(), pixel_reference(dims, linear=True)[1]) > 1e-2


@pytest.mark.parametrize("linear", [False, True])
def test_pixel_float32_only_path(float32_only, linear):
    dims = (64, 64)  # 1024 px at patch 16; bands up to pi * 112
    preset = "timm-pixel-linear" if linear else "timm-pixel"
    cos, sin = posenc.rope_grid(dims, 128, preset=preset, dtype=torch.float32)
    for got, want in zip((cos, sin), pixel_reference(dims, 128, linear=linear), strict=True):
        assert max_error(got.double().numpy(), want) < 1e-6


def test_pixel_spacing_needs_blocks():
    from posenc.spec.rotary import _rotary

    with pytest.raises(PosencError, match=r"`spacing='pixel'`.*needs `axes_dim`"):
        _rotary(64, base=224.0, layout="halves", interleave_sections=False, spacing="pixel")


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def _flat(tables):
    """A module's tables, a tensor or a ``(sin, cos)`` pair or a list, as a list of tensors."""
    return list(tables) if isinstance(tables, (tuple, list)) else [tables]


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


def test_other_settings_pair_form_and_halves():
    """``RotaryEmbedding`` ((sin, cos), kept, 'xy', ref_feat_shape, grid_offset 2) and a
    halves-layout ``RotaryEmbeddingCat`` without a kept table (Qwen3's and DeepSeek's towers)."""
    options = {"in_pixels": False, "ref_feat_shape": [12, 20], "grid_offset": 2.0,
               "grid_indexing": "xy"}  # fmt: skip
    holder = _Holder(pair=RotaryEmbedding(64, feat_shape=[7, 9], **options),
                     halves=RotaryEmbeddingCat(64, in_pixels=False, rotate_half=True))  # fmt: skip

    def outputs(m, dtype):
        yield from _flat(m.pair.get_embed())
        yield from _flat(m.halves.get_embed((6, 10)))

    def exact(original, patched):
        sin, cos = patched.pair.get_embed()
        want = reference((7, 9), base=1e4, ref=(12, 20), offset=2.0, columns_first=True)
        theirs = original.pair.get_embed()[0].double().numpy()
        assert np.abs(theirs - want[0]).max() < 1e-5  # timm's
        assert_exact(sin, want[0])
        assert_exact(cos, want[1])
        table = patched.halves.get_embed((6, 10))
        sin, cos = reference((6, 10), base=1e4, halves=True)
        assert_exact(table[:, :64], sin)
        assert_exact(table[:, 64:], cos)

    paths = {"pair": "RotaryEmbedding", "halves": "RotaryEmbeddingCat"}
    check_patch_contract(holder, paths, outputs, exact)


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

    def outputs(m, dtype):
        return forward(m, x, dtype, method="forward_features")

    def exact(original, patched):
        sin, cos = reference((13, 21), base=1e4)  # plain integers, rows first
        table = _embed(patched.rope, [13, 21])
        assert_exact(table[:, :64], sin)
        assert_exact(table[:, 64:], cos)

    paths, learned = {"rope": "RotaryEmbeddingCat"}, ["pos_embed"]
    contract = check_patch_contract(model, paths, outputs, exact, left_alone=learned)
    assert "vit-rope" in _row(contract.compat).replacement


def pixel_embed_reference(grid, dim=64, max_res=224.0, linear=False):
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


@pytest.mark.parametrize("name", ["sam", "sam-ref"])
def test_sam_exact_global_and_window_tables(name):
    """SAM keeps a table per attention kind: the 14 x 14 image grid and the 7 x 7 window, each
    rescaled to its own reference when ref_feat_shape is set."""
    model = _timm_form_model(name)
    exact = copy.deepcopy(model)
    patch(exact)
    refs = {"rope_global": (16, 16), "rope_window": (8, 8)} if name == "sam-ref" else {}
    for path, grid in (("rope_global", (14, 14)), ("rope_window", (7, 7))):
        want = axial_reference(grid, ref=refs.get(path))
        assert_rounded_once(_module(exact, path).get_embed(), want)
        assert np.abs(_module(model, path).get_embed().double().numpy() - want).max() < 1e-5
    x = _timm_form_images(name)[0]
    before, after = _timm_form_features(model, x), _timm_form_features(exact, x)
    assert float((after - before).abs().max()) <= 1e-4 * float(before.abs().max())


def test_pixel_band_modules():
    """A kept ``RotaryEmbeddingCat(in_pixels=True)`` (log bands) and a per-call
    ``RotaryEmbedding`` with linear bands at max_res 384: compat repeats get_embed, forward
    and get_batch_embeds; exact holds the float64 tables rounded once."""
    # per_call: timm's per-call pixel tables are not cut from one grid: each shape is its own
    # linspace
    holder = _Holder(cat=RotaryEmbeddingCat(64, in_pixels=True, feat_shape=[14, 14]),
                     pair=RotaryEmbedding(64, max_res=384, linear_bands=True),
                     per_call=RotaryEmbeddingCat(64, in_pixels=True))  # fmt: skip
    torch.manual_seed(3)
    x9, x14 = torch.randn(2, 64, 9, 13), torch.randn(2, 64, 14, 14)

    def outputs(m, dtype):
        yield m.cat.get_embed()
        for shape in [(14, 14), (9, 13), (1, 6)]:
            yield from _flat(m.pair.get_embed(shape))
        yield from _flat(m.pair(x9.to(dtype)))
        yield from _flat(m.cat(x14.to(dtype)))
        yield from _flat(m.per_call.get_batch_embeds([(9, 13), (4, 4)]))

    def exact(original, patched):
        sin, cos = pixel_embed_reference((14, 14))
        assert_rounded_once(patched.cat.get_embed(), np.concatenate([sin, cos], 1))
        want = pixel_embed_reference((9, 13), max_res=384.0, linear=True)
        for got, w in zip(patched.pair.get_embed((9, 13)), want, strict=True):
            assert_rounded_once(got, w)

    paths = {"cat": "RotaryEmbeddingCat", "pair": "RotaryEmbedding",
             "per_call": "RotaryEmbeddingCat"}  # fmt: skip
    rows = _rows(check_patch_contract(holder, paths, outputs, exact).compat)
    assert "preset='timm-pixel'" in rows["cat"].replacement
    assert "preset='timm-pixel-linear'" in rows["pair"].replacement


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
