"""Cosmos (``preset="cosmos"``): ``compat="diffusers"`` against ``CosmosRotaryPosEmbed`` bit for
bit, images and videos at any fps, its per-axis NTK bases following the blocks given; the exact
tables within float32 rounding of a float64 reference written here from the formula;
posenc.torch.patch on a small random-weight Cosmos transformer (config, no download):
compat="original" leaves the outputs identical at any fps, the exact patch holds the float64
tables rounded once."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.families.models import _cosmos, _cosmos_inputs, assert_exact

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize(("dims", "fps"), [((16, 44, 80), 30), ((16, 44, 80), None),
                                           ((5, 3, 7), 25), ((1, 9, 4), None)])  # fmt: skip
def test_cosmos(dims, fps):
    """Cosmos-1: per-axis NTK bases 1e4 * s ** (d / (d - 2)), halves over the whole head,
    frames at i * 24 / fps (704 x 1280, 121 frames: 16 x 44 x 80 patches)."""
    from diffusers.models.transformers.transformer_cosmos import CosmosRotaryPosEmbed

    module = CosmosRotaryPosEmbed(128)
    want = module(torch.zeros(1, 1, dims[0], 2 * dims[1], 2 * dims[2]), fps=fps)
    step = None if fps is None else (24 / fps, 1.0, 1.0)
    got = posenc.rope_grid(dims, 128, preset="cosmos", step=step, compat="diffusers",
                           dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    d_t, d_s = 44, 42
    bases = (1e4 * 2.0 ** (d_t / (d_t - 2)), 1e4, 1e4)
    t = np.arange(dims[0]) * (1.0 if fps is None else 24 / fps)
    positions = [t, np.arange(dims[1]), np.arange(dims[2])]
    grids = np.meshgrid(*positions, indexing="ij")
    parts = [g.reshape(-1)[:, None] * b ** (-np.arange(0, d, 2) / d)
             for g, b, d in zip(grids, bases, (d_t, d_s, d_s), strict=True)]  # fmt: skip
    theta = np.concatenate(parts * 2, axis=1)
    exact = posenc.rope_grid(dims, 128, preset="cosmos", step=step)
    for g, w in zip(exact, (np.cos(theta), np.sin(theta)), strict=True):
        assert_exact(g, w)


def test_cosmos_bases_follow_the_blocks_given():
    """Cosmos's per-axis bases come from the blocks' widths, the preset's or the call's."""
    dims, axes = (3, 4, 5), (64, 32, 32)
    cos, sin = posenc.rope_grid(dims, 128, preset="cosmos", axes_dim=axes, dtype=np.float64)
    bases = [1e4 * s ** (d / (d - 2)) for d, s in zip(axes, (2.0, 1.0, 1.0), strict=True)]
    grids = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in dims], indexing="ij")
    blocks = zip(grids, axes, bases, strict=True)
    half = np.concatenate([g.reshape(-1, 1) * b ** (-np.arange(0, d, 2) / d)
                           for g, d, b in blocks], axis=1)  # fmt: skip
    np.testing.assert_allclose(cos, np.cos(np.concatenate([half, half], 1)), rtol=0, atol=1e-15)
    np.testing.assert_allclose(sin, np.sin(np.concatenate([half, half], 1)), rtol=0, atol=1e-15)
    own = posenc.rope_grid(dims, 128, preset="cosmos", axes_dim=(44, 42, 42), dtype=np.float64)
    assert np.array_equal(own[1], posenc.rope_grid(dims, 128, preset="cosmos", dtype=np.float64)[1])
    with pytest.raises(PosencError, match="three blocks wider than 2"):
        posenc.rope_grid((3, 4), 64, preset="cosmos", axes_dim=(32, 32))


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
def test_cosmos_images_and_videos_at_any_fps():
    model = _cosmos()
    every = [_cosmos_inputs((5, 6, 8), fps) for fps in (None, 24, 30, 12)]  # an image, videos

    def outputs(m, dtype):
        for inputs in every:
            yield from forward(m, inputs, dtype)

    def exact(original, patched):
        for inputs in every:
            want = forward(original, inputs, torch.float32)
            got = forward(patched, inputs, torch.float32)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
        latents = torch.zeros(1, 4, 32, 128, 128)  # the largest grid: 32 x 64 x 64 patches
        d_t, d_h = 24 - 2 * (24 // 6 * 2), 24 // 6 * 2
        bases = (1e4 * 2.0 ** (d_t / (d_t - 2)), 1e4 * 3.0 ** (d_h / (d_h - 2)),
                 1e4 * 3.0 ** (d_h / (d_h - 2)))  # fmt: skip
        for fps in (None, 30):
            got = patched.rope(latents, fps=fps)
            step = 1.0 if fps is None else 24 / fps
            grids = np.meshgrid(step * np.arange(32), np.arange(64), np.arange(64), indexing="ij")
            parts = [g.reshape(-1)[:, None] * b ** (-np.arange(0, d, 2) / d)
                     for g, b, d in zip(grids, bases, (d_t, d_h, d_h), strict=True)]  # fmt: skip
            theta = np.concatenate(parts * 2, axis=1)
            for g, w in zip(got, (np.cos(theta), np.sin(theta)), strict=True):
                err = np.abs(g.double().numpy() - w)
                np.testing.assert_array_less(err, 6e-8 * np.abs(w) + 1e-38)

    paths = {"rope": "CosmosRotaryPosEmbed", "time_embed.time_proj": "Timesteps"}
    check_patch_contract(model, paths, outputs, exact)
