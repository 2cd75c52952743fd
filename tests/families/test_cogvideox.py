"""CogVideoX (``preset="cogvideox"``) and EasyAnimate, its formula on a crop of the grid:
``compat="diffusers"`` against diffusers' ``get_3d_rotary_pos_embed`` bit for bit (CogVideoX
1.0's crop grids, 1.5's slice grids, EasyAnimate's crop of its 45 x 30 canvas); the exact tables
within float32 rounding of a float64 reference written here from the formula; posenc.torch.patch
on EasyAnimate's rotary module, whose exact tables hold diffusers' own crop positions."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests import reference
from tests.contract import check_patch_contract
from tests.families.models import _m, _root, assert_exact
from tests.families.models import assert_rounded_once as _exact
from tests.reference import axial_rope
from tests.reference import numpy_crop as _numpy_crop

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models import embeddings  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize(
    ("frames", "grid", "base"),
    [(13, (30, 45), (30, 45)), (13, (60, 90), (30, 45)), (7, (40, 52), (30, 45)),
     (4, (23, 17), (30, 45))],
)  # fmt: skip
def test_cogvideox_crop_grids(frames, grid, base):
    """CogVideoX 1.0: the pipeline's crop of the grid into its 45 x 30 base grid."""
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import get_resize_crop_region_for_grid

    h, w = grid
    top_left, bottom_right = get_resize_crop_region_for_grid((h, w), base[1], base[0])
    want = embeddings.get_3d_rotary_pos_embed(64, (top_left, bottom_right), (h, w), frames)
    crop = (tuple(top_left), tuple(bottom_right))
    got = posenc.rope_grid((frames, h, w), 64, preset="cogvideox", crop=crop,
                           compat="diffusers", dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, x) for g, x in zip(got, want, strict=True))
    positions = [np.arange(frames), _numpy_crop(top_left[0], bottom_right[0], h),
                 _numpy_crop(top_left[1], bottom_right[1], w)]  # fmt: skip
    ref = axial_rope((frames, h, w), (16, 24, 24), 1e4, (0, 1, 2), positions)
    for g, r in zip(posenc.rope_grid((frames, h, w), 64, preset="cogvideox", crop=crop), ref,
                    strict=True):  # fmt: skip
        assert_exact(g, r)


@pytest.mark.parametrize(("frames", "grid"), [(11, (48, 85)), (3, (7, 9))])
def test_cogvideox_slice_grids(frames, grid):
    """CogVideoX 1.5: integer positions ("slice"), the tables cut from the base grid's."""
    h, w = grid
    want = embeddings.get_3d_rotary_pos_embed(64, None, (h, w), frames, grid_type="slice",
                                              max_size=(h + 3, w + 2))  # fmt: skip
    got = posenc.rope_grid((frames, h, w), 64, preset="cogvideox", compat="diffusers",
                           dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, x) for g, x in zip(got, want, strict=True))
    ref = axial_rope((frames, h, w), (16, 24, 24), 1e4, (0, 1, 2),
                    [np.arange(n) for n in (frames, h, w)])  # fmt: skip
    for g, r in zip(posenc.rope_grid((frames, h, w), 64, preset="cogvideox"), ref, strict=True):
        assert_exact(g, r)


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


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def test_easyanimate_crop_positions():
    """The grid is cropped into the 45 x 30 canvas at diffusers' own positions
    linspace(top, bottom * (n - 1) / n, n): the exact tables hold those positions."""
    module = _m("transformer_easyanimate").EasyAnimateRotaryPosEmbed(2, 64)
    latents = torch.zeros(1, 4, 13, 64, 64)  # 13 frames of 512 x 512: 32 x 32 patches
    top, bottom, n = 0, 30, 32  # a square fitted into 30 rows, centred in 45 columns
    left, right = 8, 38
    rows = top + np.arange(n) * (bottom * (n - 1) / n - top) / (n - 1)
    cols = left + np.arange(n) * (right * (n - 1) / n - left) / (n - 1)
    want = reference.axial_rope((13, n, n), (16, 24, 24), 1e4, (0, 1, 2),
                                [np.arange(13), rows, cols])  # fmt: skip

    def exact(original, patched):
        for got, old, w in zip(patched.rope(latents), original.rope(latents), want, strict=True):
            _exact(got, w)
            assert np.abs(old.double().numpy() - w).max() < 1e-5

    check_patch_contract(_root(module), {"rope": "EasyAnimateRotaryPosEmbed"},
                         lambda m, dtype: m.rope(latents.to(dtype)), exact)  # fmt: skip
