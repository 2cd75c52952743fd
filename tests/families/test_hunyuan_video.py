"""HunyuanVideo's formula (``preset="hunyuan-video"``, ``"hunyuan-image"``: HunyuanVideo,
HunyuanImage-2.1, Framepack, Motif-Video): ``compat="diffusers"`` against diffusers' own modules
bit for bit (two axes and three, real and odd sizes), the exact tables within float32 rounding
of a float64 reference, the float32-only evaluator within 1e-6, the refusals; posenc.torch.patch
on the transformer and the rotary modules: the exact tables are the float64 ones rounded once
(720p, 2048 x 2048, Framepack's frame indices, Motif-Video's float64 frequencies)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests import reference
from tests.families.models import _hunyuan, _m, _root, assert_exact
from tests.families.models import assert_rounded_once as _exact
from tests.reference import axial_rope

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers import transformer_hunyuan_video  # noqa: E402
from diffusers.models.transformers.transformer_hunyuanimage import (  # noqa: E402
    HunyuanImageRotaryPosEmbed,
)

from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize(("frames", "height", "width"), [(33, 45, 80), (1, 3, 9), (5, 17, 8)])
def test_hunyuan_video(frames, height, width):
    module = transformer_hunyuan_video.HunyuanVideoRotaryPosEmbed(2, 1, [16, 56, 56], 256.0)
    want = module(torch.zeros(1, 1, frames, 2 * height, 2 * width))
    got = posenc.rope_grid((frames, height, width), 128, preset="hunyuan-video",
                           compat="diffusers", dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    ref = axial_rope((frames, height, width), (16, 56, 56), 256.0, (0, 1, 2),
                    [np.arange(n) for n in (frames, height, width)])  # fmt: skip
    exact = posenc.rope_grid((frames, height, width), 128, preset="hunyuan-video")
    for g, r in zip(exact, ref, strict=True):
        assert_exact(g, r)
    if frames * height * width > 10_000:  # the original's float32 angles are off by more
        original = max(np.abs(w.double().numpy() - r).max() for w, r in zip(want, ref, strict=True))
        ours = max(np.abs(g - r).max() for g, r in zip(exact, ref, strict=True))
        assert original > 1e-6 > ours


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


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def test_exact_tables_are_the_float64_ones_rounded_once():
    hunyuan = _hunyuan()
    patch(hunyuan)
    latents = torch.zeros(1, 4, 33, 90, 160)  # 720p, 129 frames: 33 x 45 x 80 patches
    got = hunyuan.rope(latents)
    want = reference.axial_rope(
        (33, 45, 80), (8, 12, 12), 256.0, (0, 1, 2), [np.arange(n) for n in (33, 45, 80)]
    )
    original = _hunyuan().rope(latents)
    for g, o, w in zip(got, original, want, strict=True):
        ours = np.abs(g.double().numpy() - w)
        np.testing.assert_array_less(ours, 6e-8 * np.abs(w) + 1e-38)
        assert np.abs(o.double().numpy() - w).max() > 10 * ours.max()  # float32 angles


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


def test_framepack_frames_at_their_indices():
    framepack = _m("transformer_hunyuan_video_framepack")
    original = framepack.HunyuanVideoFramepackRotaryPosEmbed(2, 1, (16, 56, 56))
    calls = [(torch.tensor([0, 1, 2, 3, 20, 21]), 18, 30), (torch.arange(5) * 4, 12, 7),
             (torch.tensor([36]), 90, 160)]  # fmt: skip

    def outputs(m, dtype):  # frame indices and sizes: no activations to cast
        for frames, h, w in calls:
            yield from m.rope(frames, h, w, torch.device("cpu"))

    def exact(theirs, patched):
        for frames, h, w in calls:
            want = reference.axial_rope((len(frames), h // 2, w // 2), (16, 56, 56), 256.0,
                                        (0, 1, 2), [frames.numpy(), np.arange(h // 2),
                                                    np.arange(w // 2)])  # fmt: skip
            got = patched.rope(frames, h, w, torch.device("cpu"))
            for g, w64 in zip(got, want, strict=True):
                _exact(g, w64)

    paths = {"rope": "HunyuanVideoFramepackRotaryPosEmbed"}
    check_patch_contract(_root(original), paths, outputs, exact)


def test_motif_video_float64_frequencies():
    module = _m("transformer_motif_video").MotifVideoRotaryPosEmbed(2, 1, (16, 56, 56))
    sizes = [(5, 18, 22), (33, 90, 160)]  # odd, and 720p at 129 frames

    def outputs(m, dtype):
        for size in sizes:
            yield from m.rope(torch.zeros(1, 1, *size, dtype=dtype))

    def exact(original, patched):
        for size in sizes:
            dims = (size[0], size[1] // 2, size[2] // 2)
            want = reference.axial_rope(dims, (16, 56, 56), 256.0, (0, 1, 2),
                                        [np.arange(n) for n in dims])  # fmt: skip
            for got, w in zip(patched.rope(torch.zeros(1, 1, *size)), want, strict=True):
                _exact(got, w)

    check_patch_contract(_root(module), {"rope": "MotifVideoRotaryPosEmbed"}, outputs, exact)
