"""``posenc.rope(ids, d, preset=...)`` for diffusers' id-table families (FLUX.2, Flux3, Krea2,
HiDream, PRX, Ernie-Image): the exact tables within one float32 rounding of a float64
reference written here from the formula, at the ids the pipelines build; equal to diffusers'
own float64 tables where diffusers computes in float64, and closer than its float32 ones where
it does not (Ernie-Image); the float32-only evaluator within 1e-6 at the largest sizes; the
compat replays of HiDream, PRX and Ernie-Image (:mod:`posenc.compat.diffusers_ids`) equal to
the installed modules bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers import (  # noqa: E402
    transformer_bria,
    transformer_ernie_image,
    transformer_flux2,
    transformer_flux3,
    transformer_hidream_image,
    transformer_krea2,
    transformer_prx,
)

from posenc.compat import diffusers_ids  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


def angles64(ids, theta, axes):
    """float64 angles ``[N, sum(axes) / 2]``: column ``k`` of the ids times ``theta ** (-2j /
    d_k)``, block after block."""
    ids = np.asarray(ids, dtype=np.float64)
    return np.concatenate([np.outer(ids[:, k], theta ** (-np.arange(0, d, 2) / d))
                           for k, d in enumerate(axes)], axis=1)  # fmt: skip


def tables64(ids, theta, axes):
    """The float64 interleaved ``(cos, sin)`` ``[N, sum(axes)]``."""
    a = np.repeat(angles64(ids, theta, axes), 2, axis=1)
    return np.cos(a), np.sin(a)


def assert_exact(got, want):
    """Within one float32 rounding of the float64 value."""
    got = np.asarray(got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-12)


def image_ids(h, w, lead=0.0, columns=3, at=(1, 2)):
    """A pipeline's ``[h * w, columns]`` image ids: rows and columns at ``at``, ``lead`` in the
    first column."""
    ids = np.zeros((h * w, columns))
    ids[:, 0] = lead
    ids[:, at[0]] = np.repeat(np.arange(h), w)
    ids[:, at[1]] = np.tile(np.arange(w), h)
    return ids


def flux2_ids(h, w, text):
    """FLUX.2's ids: text ``(0, 0, 0, l)``, image ``(0, row, col, 0)``, a reference image at
    ``t = 10``."""
    words = np.zeros((text, 4))
    words[:, 3] = np.arange(text)
    return np.concatenate([words, image_ids(h, w, 0.0, 4), image_ids(h, w, 10.0, 4)])


def ernie_ids(h, w, text):
    """Ernie-Image's ids: image ``(text, row, col)``, text ``(i, 0, 0)``."""
    words = np.zeros((text, 3))
    words[:, 0] = np.arange(text)
    return np.concatenate([image_ids(h, w, float(text)), words])


# (preset, the module diffusers builds, ids, head width, theta, axes)
FAMILIES = {
    "flux2": (lambda: transformer_flux2.Flux2PosEmbed(2000, [32, 32, 32, 32]),
              flux2_ids(64, 48, 512), 2000.0, (32, 32, 32, 32)),
    "flux3": (lambda: transformer_flux3.Flux3PosEmbed(10000, [32, 32, 32, 32]),
              flux2_ids(37, 64, 300), 1e4, (32, 32, 32, 32)),
    "krea2": (lambda: transformer_krea2.Krea2RotaryPosEmbed(1000, [32, 48, 48]),
              np.concatenate([np.zeros((77, 3)), image_ids(64, 64)]), 1e3, (32, 48, 48)),
    "hidream": (lambda: transformer_hidream_image.HiDreamImageEmbedND(10000, [64, 32, 32]),
                np.concatenate([image_ids(64, 96), np.zeros((128, 3))]), 1e4, (64, 32, 32)),
    "prx": (lambda: transformer_prx.PRXEmbedND(64, 10000, [32, 32]),
            image_ids(64, 64, columns=2, at=(0, 1)), 1e4, (32, 32)),
    "ernie-image": (lambda: transformer_ernie_image.ErnieImageEmbedND3(128, 256, (32, 48, 48)),
                    ernie_ids(64, 64, 256), 256.0, (32, 48, 48)),
}  # fmt: skip


def original_tables(name, module, ids):
    """The installed module's float32 ``(cos, sin)`` ``[N, d]`` at ``ids`` ``[N, n]``."""
    if name in ("hidream", "prx"):
        m = module(ids[None]).reshape(ids.shape[0], -1, 2, 2)  # [N, d/2, 2, 2]
        return m[..., 0, 0].repeat_interleave(2, -1), m[..., 1, 0].repeat_interleave(2, -1)
    if name == "ernie-image":
        angles = module(ids[None])[0, :, 0]
        return angles.cos(), angles.sin()
    return module(ids)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_exact_tables_against_float64_and_diffusers(name):
    build, ids, theta, axes = FAMILIES[name]
    want = tables64(ids, theta, axes)
    cos, sin = posenc.rope(ids, sum(axes), preset=name)
    for got, w in zip((cos, sin), want, strict=True):
        assert got.dtype == np.float32
        assert got.shape == w.shape
        assert_exact(got, w)
    t = torch.from_numpy(ids).float()
    theirs = original_tables(name, build(), t)
    for o, w, ours in zip(theirs, want, (cos, sin), strict=True):
        err = np.abs(o.double().numpy() - w).max()
        if name == "ernie-image":  # float32 angles: its error grows with the ids
            assert err > 10 * np.abs(ours - w).max()
        else:  # float64 in diffusers: its tables are the exact ones
            assert err <= 2**-24
    assert np.array_equal(cos[:, 0::2], cos[:, 1::2])  # interleaved pairs


def test_preset_keywords():
    for name, (_, _, theta, axes) in FAMILIES.items():
        p = posenc.preset(name)
        assert p.rotary == {"base": theta, "layout": "interleaved", "axes_dim": axes}
        assert p.dim == sum(axes)
        assert p.originals == ()


@pytest.mark.parametrize("cls", [transformer_bria.BriaEmbedND, transformer_bria.BriaPosEmbed])
def test_bria_is_flux(cls):
    ids = torch.from_numpy(np.concatenate([np.zeros((9, 3)), image_ids(32, 40)])).float()
    for got, want in zip(cls(10000, [16, 56, 56])(ids), posenc.rope(ids, 128, preset="flux"),
                         strict=True):  # fmt: skip
        assert (got - want).abs().max() <= 2**-24


# ---------------------------------------------------------------------------------------------
# diffusers' own arithmetic


@pytest.mark.parametrize("name", ["hidream", "prx"])
@pytest.mark.parametrize("batch", [1, 2])
def test_matrix_rope_replays_diffusers(name, batch):
    build, ids, theta, axes = FAMILIES[name]
    t = torch.from_numpy(ids).float()[None].expand(batch, -1, -1)
    want = build()(t)
    got = diffusers_ids.matrix_rope(t, theta, axes).unsqueeze(2 if name == "hidream" else 1)
    assert want.dtype == got.dtype == torch.float32
    assert torch.equal(got, want)
    if name == "hidream":  # ids with two of the three columns read the first two blocks
        want = transformer_hidream_image.HiDreamImageEmbedND(10000, list(axes))(t[..., :2])
        assert torch.equal(diffusers_ids.matrix_rope(t[..., :2], theta, axes).unsqueeze(2), want)


@pytest.mark.filterwarnings("ignore:In CPU autocast")
@pytest.mark.parametrize("autocast", [False, True])
def test_ernie_angles_replay_diffusers(autocast):
    build, ids, theta, axes = FAMILIES["ernie-image"]
    t = torch.from_numpy(ids).float()[None].expand(2, -1, -1)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        want = build()(t)
        got = diffusers_ids.ernie_angles(t, theta, axes)
    assert got.dtype == want.dtype == torch.float32
    assert got.shape == (2, ids.shape[0], 1, 128)
    assert torch.equal(got, want)


def test_grid_compat_is_refused_for_id_families():
    with pytest.raises(PosencError, match="compat"):
        posenc.rope_grid((4, 4), 64, preset="prx", compat="diffusers")


# ---------------------------------------------------------------------------------------------
# the float32-only evaluator (MPS, exported graphs), forced here on the CPU


LARGEST = {  # 4096 x 4096 px FLUX.2 (a reference image too); HiDream at max_resolution 128
    "flux2": flux2_ids(256, 256, 512),
    "flux3": flux2_ids(256, 256, 512),
    "krea2": np.concatenate([np.zeros((512, 3)), image_ids(256, 256)]),
    "hidream": np.concatenate([image_ids(128, 128), np.zeros((512, 3))]),
    "prx": image_ids(256, 256, columns=2, at=(0, 1)),
    "ernie-image": ernie_ids(256, 256, 1024),
}


@pytest.mark.parametrize("name", sorted(LARGEST))
def test_float32_only_path(float32_only, name):
    _, _, theta, axes = FAMILIES[name]
    ids = LARGEST[name]
    cos, sin = posenc.rope(torch.from_numpy(ids).float(), sum(axes), preset=name)
    for got, want in zip((cos, sin), tables64(ids, theta, axes), strict=True):
        assert np.abs(got.double().numpy() - want).max() < 1e-6


# ---------------------------------------------------------------------------------------------
# the arguments


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: posenc.rope(np.zeros((4, 3)), 128, preset="flux2"), "positions"),
        (lambda: posenc.rope(np.zeros((4, 3)), 120, preset="krea2"), "axes_dim"),
        (lambda: diffusers_ids.ernie_angles(torch.zeros(1, 4, 2), 256.0, (32, 48, 48)),
         "3 columns"),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(call, fragment):
    with pytest.raises(PosencError, match=fragment):
        call()
