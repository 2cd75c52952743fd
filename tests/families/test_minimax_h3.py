"""MiniMax-H3 (``preset="minimax-h3"``), one ladder read by three axes: ``compat="diffusers"``
against ``MiniMaxH3RotaryPosEmbed`` bit for bit, exact within float32 rounding of a float64
reference, the float32-only evaluator, the refusals; posenc.torch.patch on the transformer's and
the VAE decoder's rotary modules (bfloat16 buffers, the decoder's axes read from its
coordinates)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.contract import check_patch_contract
from tests.families.models import _m, _root
from tests.families.models import assert_rounded_once as _exact

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")


pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


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


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_minimax_h3_one_ladder_for_three_axes(dtype):
    """Its inv_freq buffer follows .to(bfloat16): compat rounds the ladder the same way."""
    module = _m("transformer_minimax_h3").MiniMaxH3RotaryPosEmbed(16, 10000.0).to(dtype)
    grid = np.stack(np.meshgrid(np.arange(16), np.arange(45), np.arange(80), indexing="ij"), -1)
    ids = torch.from_numpy(np.concatenate([grid.reshape(-1, 3), [[3, -7, 2000]]]))
    theta = ids.numpy()[:, :, None] * 1e4 ** (-np.arange(0, 32, 2) / 32)  # [S, 3, 16]
    theta = np.tile(theta.reshape(len(ids), -1), 2)

    def exact(_, patched):
        for got, want in zip(patched.rope(ids), (np.cos(theta), np.sin(theta)), strict=True):
            _exact(got, want)

    check_patch_contract(_root(module), {"rope": "MiniMaxH3RotaryPosEmbed"},
                         lambda m, _: m.rope(ids), exact)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_minimax_h3_vae_decoder(dtype):
    """The VAE decoder's coordinates 2 (i + 0.5) / n - 1, angles 2 pi c 100 ** (-k / n)."""
    vae = importlib.import_module("diffusers.models.autoencoders.autoencoder_kl_minimax_h3")
    module = vae.MiniMaxH3VideoRotaryPosEmbed(48, theta=100.0).to(dtype)
    axes = [2.0 * (torch.arange(0.5, n, dtype=torch.float32) / n) - 1.0 for n in (31, 44, 80)]
    ids = torch.stack([g.reshape(-1) for g in torch.meshgrid(*axes, indexing="ij")], -1)[None]
    ids = torch.cat([ids, torch.zeros(1, 5, 3)], dim=1)  # the register tokens and cls at 0
    theta = 2 * np.pi * ids[0].double().numpy()[:, :, None] * 100.0 ** (-np.arange(8) / 8)
    theta = np.tile(theta.reshape(len(theta), -1), 2)

    def exact(_, patched):
        for got, want in zip(patched.rope(ids), (np.cos(theta), np.sin(theta)), strict=True):
            assert got.shape == (1, len(theta), 1, 48)
            _exact(got[0, :, 0], want)

    check_patch_contract(_root(module), {"rope": "MiniMaxH3VideoRotaryPosEmbed"},
                         lambda m, _: m.rope(ids), exact)  # fmt: skip


@pytest.mark.parametrize("k", [2, 3])
def test_minimax_h3_vae_reads_its_axes_from_the_coordinates(k):
    """MiniMaxH3VideoRotaryPosEmbed(48, num_axes=k) keeps no axis count: n = 48 / (2 k)
    frequencies, k read from the coordinates [B, S, k] by its forward and by the stand-ins."""
    vae = importlib.import_module("diffusers.models.autoencoders.autoencoder_kl_minimax_h3")
    module = vae.MiniMaxH3VideoRotaryPosEmbed(48, num_axes=k)
    n = 48 // (2 * k)
    torch.manual_seed(0)
    ids = torch.rand(2, 30, k) * 2 - 1
    theta = 2 * np.pi * ids.double().numpy()[..., None] * 100.0 ** (-np.arange(n) / n)
    theta = np.tile(theta.reshape(2, 30, -1), 2)

    def exact(_, patched):
        for got, want in zip(patched.rope(ids), (np.cos(theta), np.sin(theta)), strict=True):
            assert got.shape == (2, 30, 1, 48)
            _exact(got[:, :, 0], want)

    contract = check_patch_contract(_root(module), {"rope": "MiniMaxH3VideoRotaryPosEmbed"},
                                    lambda m, _: m.rope(ids), exact)  # fmt: skip
    (row,) = contract.exact
    assert f"posenc.rope(c, {2 * n} k" in row.replacement
