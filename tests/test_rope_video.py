"""posenc.rope_grid for the video and image families that share HunyuanVideo's formula:
``hunyuan-image`` (HunyuanImage-2.1). compat="diffusers" against diffusers' own
``HunyuanImageRotaryPosEmbed`` (torch.equal, two axes and three, real and odd sizes); the exact
default against a float64 NumPy reference written from the formula; the float32-only evaluator
within 1e-6; the replay refuses what the original cannot give."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.reference import axial_rope

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
from diffusers.models.transformers.transformer_hunyuanimage import (  # noqa: E402
    HunyuanImageRotaryPosEmbed,
)


def _exact(got, want):
    got = np.asarray(got.double() if isinstance(got, torch.Tensor) else got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-12)


SIZES = [  # (patch grid, rope_dim): 2048 x 2048 and 1280 x 768 (32x VAE, patch 1), odd ones
    ((64, 64), (64, 64)),
    ((24, 40), (64, 64)),
    ((7, 1), (64, 64)),
    ((33, 45, 80), (16, 56, 56)),  # the three-axis form, HunyuanVideo's grid
    ((3, 5, 2), (16, 56, 56)),
]


@pytest.mark.parametrize(("dims", "axes"), SIZES)
def test_compat_is_diffusers(dims, axes):
    patch = (1,) * len(dims)
    original = HunyuanImageRotaryPosEmbed(patch, axes)(torch.zeros(1, 1, *dims))
    got = posenc.rope_grid(dims, 128, preset="hunyuan-image", axes_dim=axes,
                           compat="diffusers", dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, o) for g, o in zip(got, original, strict=True))
    numpy_out = posenc.rope_grid(dims, 128, preset="hunyuan-image", axes_dim=axes,
                                 compat="diffusers")  # fmt: skip
    assert np.array_equal(numpy_out[0], original[0].numpy())


@pytest.mark.parametrize(("dims", "axes"), SIZES)
def test_exact_is_the_float64_table_rounded_once(dims, axes):
    want = axial_rope(dims, axes, 256.0, tuple(range(len(dims))), [np.arange(n) for n in dims])
    got = posenc.rope_grid(dims, 128, preset="hunyuan-image", axes_dim=axes)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float32
        _exact(g, w)


def test_the_preset_splits_the_head_in_two():
    cos, _ = posenc.rope_grid((4, 6), 128, preset="hunyuan-image", dtype=np.float64)
    want, _ = axial_rope((4, 6), (64, 64), 256.0, (0, 1), [np.arange(4), np.arange(6)])
    np.testing.assert_allclose(cos, want, rtol=0, atol=1e-15)
    assert "diffusers" in posenc.preset("hunyuan-image").originals
    assert "hunyuan-image" in posenc.presets("rotary")


def test_original_float32_is_worse_than_exact():
    dims = (64, 64)
    want = axial_rope(dims, (64, 64), 256.0, (0, 1), [np.arange(64)] * 2)
    original = HunyuanImageRotaryPosEmbed((1, 1), (64, 64))(torch.zeros(1, 1, *dims))
    exact = posenc.rope_grid(dims, 128, preset="hunyuan-image")
    for o, e, w in zip(original, exact, want, strict=True):
        assert np.abs(o.double().numpy() - w).max() > 10 * np.abs(e - w).max()


@pytest.mark.parametrize(("dims", "axes"), [((64, 64), (64, 64)), ((33, 45, 80), (16, 56, 56))])
def test_float32_only_path(float32_only, dims, axes):
    cos, sin = posenc.rope_grid(dims, 128, preset="hunyuan-image", axes_dim=axes,
                                dtype=torch.float32)  # fmt: skip
    want = axial_rope(dims, axes, 256.0, tuple(range(len(dims))), [np.arange(n) for n in dims])
    for got, w in zip((cos, sin), want, strict=True):
        assert np.abs(got.double().numpy() - w).max() < 1e-6


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"start": 1}, ["start", "0, 1, 2"]),
        ({"step": (1, 0.5)}, ["step", "0.5"]),
        ({"layout": "halves"}, ["`layout`", "drop"]),
        ({"axes_scale": (1.0, 2.0)}, ["`axes_scale`"]),
        ({"block_axes": (1, 0)}, ["`block_axes`"]),
    ],
)
def test_compat_refuses_what_diffusers_has_not(kw, words):
    with pytest.raises(PosencError) as err:
        posenc.rope_grid((4, 6), 128, preset="hunyuan-image", compat="diffusers", **kw)
    assert all(w in str(err.value) for w in words)


def test_dim_must_split_in_two():
    with pytest.raises(PosencError, match=r"`dim` = 70.*hunyuan-image.*multiple of 4"):
        posenc.rope_grid((4, 4), 70, preset="hunyuan-image")


def _minimax(ids, n=16, base=1e4):
    """MiniMax-H3 in float64: the ladder base ** (-2j / 2n) times each axis, [t | h | w] twice."""
    theta = np.asarray(ids, dtype=np.float64)[:, :, None] * base ** (
        -np.arange(0, 2 * n, 2) / (2 * n)
    )
    theta = np.tile(theta.reshape(len(theta), -1), 2)
    return np.cos(theta), np.sin(theta)


@pytest.mark.parametrize("dims", [(16, 45, 80), (3, 1, 7)])
def test_minimax_h3_grid(dims):
    from diffusers.models.transformers.transformer_minimax_h3 import MiniMaxH3RotaryPosEmbed

    grid = np.stack(np.meshgrid(*[np.arange(n) for n in dims], indexing="ij"), -1).reshape(-1, 3)
    original = MiniMaxH3RotaryPosEmbed(16, 10000.0)(torch.from_numpy(grid))
    got = posenc.rope_grid(dims, 96, preset="minimax-h3", compat="diffusers", dtype=torch.float32)
    assert all(torch.equal(g, o) for g, o in zip(got, original, strict=True))
    want = _minimax(grid)
    for g, w in zip(posenc.rope_grid(dims, 96, preset="minimax-h3"), want, strict=True):
        _exact(g, w)
    for g, w in zip(posenc.rope(grid, 96, preset="minimax-h3"), want, strict=True):
        _exact(g, w)  # the model's position_ids: posenc.rope of them


def test_minimax_h3_float32_only(float32_only):
    dims = (16, 45, 80)
    grid = np.stack(np.meshgrid(*[np.arange(n) for n in dims], indexing="ij"), -1).reshape(-1, 3)
    cos, sin = posenc.rope_grid(dims, 96, preset="minimax-h3", dtype=torch.float32)
    for got, w in zip((cos, sin), _minimax(grid), strict=True):
        assert np.abs(got.double().numpy() - w).max() < 1e-6


def test_minimax_h3_refusals():
    with pytest.raises(PosencError, match=r"`dim` = 100.*minimax-h3.*multiple of 6"):
        posenc.rope_grid((2, 2, 2), 100, preset="minimax-h3")
    with pytest.raises(PosencError, match="`axes_dim`"):
        posenc.rope_grid((2, 2, 2), 96, preset="minimax-h3", axes_dim=(32, 16, 48),
                         compat="diffusers")  # fmt: skip


def _easyanimate_crop(h, w, th=30, tw=45):
    """EasyAnimate's crop of an h x w patch grid in its 30 x 45 canvas: the grid resized to
    fit (rounded), centred."""
    rh, rw = (th, round(th / h * w)) if h / w > th / tw else (round(tw / w * h), tw)
    top, left = round((th - rh) / 2), round((tw - rw) / 2)
    return (top, left), (top + rh, left + rw)


@pytest.mark.parametrize("hw", [(30, 45), (32, 32), (45, 80), (17, 29), (40, 23), (1, 7)])
def test_easyanimate_is_cogvideox_on_its_crop(hw):
    """EasyAnimate: get_3d_rotary_pos_embed on the crop of its 45 x 30 canvas: rope_grid's
    cogvideox replay with crop= gives its bits; the exact tables of diffusers' own positions
    linspace(top, bottom * (n - 1) / n, n) are rope_grid with that start and step."""
    from diffusers.models.embeddings import get_3d_rotary_pos_embed

    h, w = hw
    crop = _easyanimate_crop(h, w)
    original = get_3d_rotary_pos_embed(64, crop, grid_size=hw, temporal_size=13, use_real=True)
    got = posenc.rope_grid((13, h, w), 64, preset="cogvideox", crop=crop, compat="diffusers",
                           dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, o) for g, o in zip(got, original, strict=True))
    (top, left), (bottom, right) = crop
    rows, cols = (a + np.arange(n) * ((b * (n - 1) / n - a) / (n - 1) if n > 1 else 0)
                  for a, b, n in ((top, bottom, h), (left, right, w)))  # fmt: skip
    want = axial_rope((13, h, w), (16, 24, 24), 1e4, (0, 1, 2), [np.arange(13), rows, cols])
    steps = [1.0] + [(b * (n - 1) / n - a) / (n - 1) if n > 1 else 1.0
                     for a, b, n in ((top, bottom, h), (left, right, w))]  # fmt: skip
    exact = posenc.rope_grid((13, h, w), 64, preset="cogvideox", start=(0, top, left), step=steps)
    for g, o, ref in zip(exact, original, want, strict=True):
        _exact(g, ref)
        assert np.abs(o.double().numpy() - ref).max() < 1e-5
