"""``posenc.rope_grid`` for timm's rotary families (EVA-02, RoPE-ViT, Perception Encoder,
DINOv3), against timm itself: ``compat="timm"`` equal bit for bit to the tables timm's models
and modules build, at the models' sizes and odd ones; the exact tables within float32
rounding of a float64 reference written here from the formulas, and closer to it than timm's
float32 tables; the float32-only evaluator within 1e-6; the positions timm cannot produce
refused by name."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, RotaryEmbeddingDinoV3  # noqa: E402

# family: (timm model, patch, dynamic size, real grid, base, layout, column block first)
MODELS = {
    "eva02": ("eva02_large_patch14_448", 14, False, (32, 32), 1e4, "interleaved", False),
    "vit-rope": ("vit_base_patch16_rope_224", 16, False, (14, 14), 100.0, "interleaved", True),
    "perception-encoder": ("vit_pe_core_large_patch14_336", 14, False, (24, 24), 1e4,
                           "interleaved", True),
    "dinov3": ("vit_large_patch16_dinov3", 16, True, (64, 64), 100.0, "halves", False),
}  # fmt: skip
HEAD = 64  # the four models' head width


def coordinates(family: str, n: int) -> np.ndarray:
    """The float64 positions of one grid axis of ``n`` patches, from each model's recipe."""
    i = np.arange(n, dtype=np.float64)
    if family == "eva02":  # ref_feat_shape (16, 16): i / n * 16
        return i * 16.0 / n
    if family == "perception-encoder":  # grid_offset 1, ref_feat_shape (24, 24)
        return (i + 1.0) * 24.0 / n
    if family == "dinov3":  # 'centered', normalize_coords 'separate'
        return (i + 0.5) / n * 2.0 - 1.0
    return i


def reference(family, dims, dim=HEAD, positions=None, layout=None, columns_first=None):
    """float64 ``(cos, sin)`` ``[prod(dims), dim]``: per axis ``dim / 4`` frequencies (EVA-02
    style ``base ** (-k / (dim / 4))``, or DINOv3's ``2 pi / base ** (2k / (dim / 2))``), the
    row block first unless ``columns_first``, interleaved or halves."""
    _, _, _, _, base, own_layout, own_order = MODELS[family]
    layout = layout or own_layout
    columns_first = own_order if columns_first is None else columns_first
    positions = positions or [coordinates(family, n) for n in dims]
    rows, cols = (g.reshape(-1) for g in np.meshgrid(*positions, indexing="ij"))
    k = np.arange(dim // 4, dtype=np.float64)
    if family == "dinov3":
        omega = 2.0 * math.pi / base ** (2.0 * k / (dim // 2))
    else:
        omega = 1.0 / base ** (k / (dim // 4))
    first, second = (cols, rows) if columns_first else (rows, cols)
    theta = np.concatenate([first[:, None] * omega, second[:, None] * omega], axis=1)
    if layout == "interleaved":
        theta = np.repeat(theta, 2, axis=1)
    else:
        theta = np.concatenate([theta, theta], axis=1)
    return np.cos(theta), np.sin(theta)


def grid_kwargs(family: str, dims) -> dict:
    """The ``start`` / ``step`` a caller passes for the model at this grid (the presets'
    defaults are the integers, or DINOv3's centred coordinates)."""
    if family == "eva02":
        return {"step": tuple(16 / n for n in dims)}
    if family == "perception-encoder":
        return {"start": tuple(24 / n for n in dims), "step": tuple(24 / n for n in dims)}
    return {}


@functools.cache
def rope_module(family: str, dims: tuple[int, int]):
    """The rotary module of the timm model (one block, untrained), built for this grid."""
    name, patch, dynamic, *_ = MODELS[family]
    size = {} if dynamic else {"img_size": (dims[0] * patch, dims[1] * patch)}
    return timm.create_model(name, pretrained=False, depth=1, **size).rope


def timm_tables(family: str, dims) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own ``(cos, sin)`` (its ``get_embed`` is ``cat(sin, cos)``)."""
    _, _, dynamic, *_ = MODELS[family]
    module = rope_module(family, tuple(dims))
    embed = module.get_embed(shape=list(dims)) if dynamic else module.get_embed()
    sin, cos = embed.chunk(2, dim=-1)
    return cos, sin


def max_error(got, want) -> float:
    return float(np.abs(np.asarray(got, dtype=np.float64) - want).max())


def assert_exact(got, want):
    """Within one float32 rounding of the float64 value."""
    got = np.asarray(got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-38)


SIZES = [(family, dims) for family, model in MODELS.items()
         for dims in (model[3], (17, 23), (1, 5))]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the models: compat bit for bit, exact within one rounding


@pytest.mark.parametrize(("family", "dims"), SIZES)
def test_compat_equals_the_timm_model(family, dims):
    want_cos, want_sin = timm_tables(family, dims)
    cos, sin = posenc.rope_grid(dims, HEAD, preset=family, compat="timm", dtype=torch.float32,
                                **grid_kwargs(family, dims))  # fmt: skip
    assert cos.dtype == sin.dtype == torch.float32
    assert torch.equal(cos, want_cos)
    assert torch.equal(sin, want_sin)


@pytest.mark.parametrize(("family", "dims"), SIZES)
def test_exact_is_closer_than_timm(family, dims):
    ref = reference(family, dims)
    timm_cos, timm_sin = timm_tables(family, dims)
    exact = posenc.rope_grid(dims, HEAD, preset=family, **grid_kwargs(family, dims))
    for got, from_timm, want in zip(exact, (timm_cos, timm_sin), ref, strict=True):
        assert got.dtype == np.float32
        assert_exact(got, want)
        theirs = max_error(from_timm.double().numpy(), want)
        if theirs > 2**-24:  # timm's float32 error is measurable: posenc's must be smaller
            assert max_error(got, want) < theirs


def test_the_references_follow_the_models_positions():
    """The reference's coordinates are the models' own: timm's tables agree with it to float32
    noise, so a wrong ref, offset or axis order here could not pass."""
    for family, model in MODELS.items():
        dims = (model[3][0], model[3][1] - 3)
        timm_cos, timm_sin = timm_tables(family, dims)
        ref = reference(family, dims)
        assert max_error(timm_cos.double().numpy(), ref[0]) < 1e-5
        assert max_error(timm_sin.double().numpy(), ref[1]) < 1e-5
        swapped = reference(family, dims, columns_first=not model[6])
        assert max_error(timm_cos.double().numpy(), swapped[0]) > 1e-2


# ---------------------------------------------------------------------------------------------
# timm's modules at the settings the models do not use


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
        ref = reference("eva02", dims, dim, positions, layout, columns_first=indexing == "xy")
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
    ref = reference("eva02", dims, positions=integers)
    exact = posenc.rope_grid(dims, HEAD, **no_ref)
    for got, as_eva02, want in zip(exact, posenc.rope_grid(dims, HEAD, preset="eva02"), ref,
                                   strict=True):  # fmt: skip
        np.testing.assert_array_equal(got, as_eva02)
        assert_exact(got, want)


@pytest.mark.parametrize("dims", [(17, 23), (64, 64), (1, 5)])
@pytest.mark.parametrize("normalize", ["separate", "max", "min"])
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_dinov3_module_settings(dims, normalize, indexing):
    """RotaryEmbeddingDinoV3's 'max' and 'min' denominators, grid_offset, 'xy': posenc's start
    and step map back to each. (The offset 0.3 keeps every coordinate off the multiples of
    1/4, where the float64 reference's sin(pi) = 1.2e-16 would stand for an exact 0.)"""
    module = RotaryEmbeddingDinoV3(HEAD, temperature=100.0, normalize_coords=normalize,
                                   grid_offset=0.3, grid_indexing=indexing)  # fmt: skip
    sin_want, cos_want = module.get_embed(list(dims)).chunk(2, dim=-1)
    d = {"separate": dims, "max": (max(dims),) * 2, "min": (min(dims),) * 2}[normalize]
    start = tuple((0.5 + 0.3) / a * 2 - 1 for a in d)
    step = tuple(2 / a for a in d)
    blocks = (0, 1) if indexing == "ij" else (1, 0)
    kw = {"start": start, "step": step, "block_axes": blocks}
    cos, sin = posenc.rope_grid(dims, HEAD, preset="dinov3", compat="timm",
                                dtype=torch.float32, **kw)  # fmt: skip
    assert torch.equal(cos, cos_want)
    assert torch.equal(sin, sin_want)
    positions = [(np.arange(n) + 0.8) / a * 2 - 1 for n, a in zip(dims, d, strict=True)]
    ref = reference("dinov3", dims, HEAD, positions, columns_first=indexing == "xy")
    for got, want in zip(posenc.rope_grid(dims, HEAD, preset="dinov3", **kw), ref,
                         strict=True):  # fmt: skip
        assert_exact(got, want)


def test_dinov3_defaults_are_the_centred_grid():
    """Without start and step the preset's positions are DINOv3's: the same numbers as the
    explicit coordinates."""
    dims = (5, 8)
    default = posenc.rope_grid(dims, HEAD, preset="dinov3")
    explicit = posenc.rope_grid(dims, HEAD, preset="dinov3",
                                start=(1 / 5 - 1, 1 / 8 - 1), step=(2 / 5, 2 / 8))  # fmt: skip
    for a, b in zip(default, explicit, strict=True):
        np.testing.assert_array_equal(a, b)


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


# ---------------------------------------------------------------------------------------------
# the float32-only evaluator (MPS, exported graphs), forced here on the CPU


@pytest.mark.parametrize("family", list(MODELS))
def test_float32_only_path(float32_only, family):
    dims = MODELS[family][3]
    cos, sin = posenc.rope_grid(dims, HEAD, preset=family, dtype=torch.float32,
                                **grid_kwargs(family, dims))  # fmt: skip
    assert cos.dtype == torch.float32
    for got, want in zip((cos, sin), reference(family, dims), strict=True):
        assert max_error(got.double().numpy(), want) < 1e-6


# ---------------------------------------------------------------------------------------------
# what timm cannot produce


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        (lambda: posenc.rope_grid((4, 4), 66, preset="eva02"), ["`dim` = 66", "multiple of 4"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="vit-rope", step=0.5, compat="timm"),
         ["`step`", "step must be 1", "0.5"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="vit-rope", start=(0, 1), compat="timm"),
         ["`start`", "one grid_offset", "(0.0, 1.0)"]),
        (lambda: posenc.rope_grid((4, 5), 64, preset="eva02", step=0.3, compat="timm"),
         ["`step`", "positive integer", "step[0] = 0.3"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="eva02", start=(1, 2), step=1,
                                  compat="timm"), ["`start`", "one grid_offset", "(1.0, 2.0)"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="eva02", step=-2, compat="timm"),
         ["`step`", "positive integer", "-2"]),
        (lambda: posenc.rope_grid((4, 6), 64, preset="dinov3", step=0.1, compat="timm"),
         ["`step`", "2 / d", "(0.1, 0.1)"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="dinov3", start=(-0.75, 0), step=0.5,
                                  compat="timm"), ["`start`", "one grid_offset"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="dinov3", axes_scale=(1.0, 2.0),
                                  compat="timm"), ["`axes_scale`", "(2 pi, 2 pi)", "(1.0, 2.0)"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="eva02", axes_scale=(2.0, 2.0),
                                  compat="timm"), ["`axes_scale`", "none", "(2.0, 2.0)"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="eva02", layout="compact", compat="timm"),
         ["`layout`", "'compact'"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="eva02", axes_dim=(16, 48), compat="timm"),
         ["`axes_dim`", "dim / 2 channels per axis", "(16, 48)"]),
        (lambda: posenc.rope_grid((2, 4, 4), 64, preset="eva02", axes_dim=(16, 16, 32),
                                  compat="timm"), ["`axes_dim`", "two grid axes", "(16, 16, 32)"]),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(call, fragments):
    with pytest.raises(PosencError) as err:
        call()
    for fragment in fragments:
        assert fragment in str(err.value)
