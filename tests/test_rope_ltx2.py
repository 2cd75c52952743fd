"""Halves inside each block (``layout="block-halves"``): the layout's columns, blocks of halves
that are not the axes' blocks, ``apply_rope``'s rotation against a float64 one (NumPy and
torch), and the refusals (the default blocks of LTX-2's split preset among them). Allegro's and
LTX-2's tables against diffusers: tests/families/test_allegro.py and test_ltx2.py."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from posenc.spec.rotary import layout_columns
from tests.families.models import assert_rounded_once as assert_exact

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the layout


def test_block_halves_columns():
    assert layout_columns("block-halves", 6, 2) == [0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5]
    assert layout_columns("block-halves", 4, 1) == layout_columns("halves", 4) == [0, 1, 2, 3] * 2


@pytest.mark.parametrize("blocks", [1, 2, 4])
def test_block_halves_grid(blocks):
    """Blocks of halves need not be the axes' blocks: 4 blocks of 8 channels over two axes of
    16 hold 4 frequencies each, twice."""
    rows, cols = np.meshgrid(np.arange(3) * 0.5, np.arange(4) + 2.0, indexing="ij")
    omega = 1e4 ** (-np.arange(0, 16, 2) / 16)
    angles = np.concatenate([rows.reshape(-1, 1) * omega, cols.reshape(-1, 1) * omega], axis=1)
    per_block = angles.reshape(12, blocks, -1)
    angles = np.concatenate([per_block, per_block], axis=-1).reshape(12, 32)
    got = posenc.rope_grid((3, 4), 32, axes_dim=(16, 16), layout="block-halves", blocks=blocks,
                           start=(0, 2), step=(0.5, 1))  # fmt: skip
    for g, want in zip(got, (np.cos(angles), np.sin(angles)), strict=True):
        assert_exact(g, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_apply_rope_rotates_halves_inside_each_block(dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 26)).astype(dtype)  # 24 rotate in 3 blocks, 2 pass through
    cos, sin = rng.standard_normal((2, 5, 24)), rng.standard_normal((2, 5, 24))
    got = posenc.apply_rope(x, cos.astype(dtype), sin.astype(dtype), "block-halves", blocks=3)
    xb = x[..., :24].reshape(2, 5, 3, 8).astype(np.float64)  # halves inside each block
    c, s = cos.reshape(2, 5, 3, 8), sin.reshape(2, 5, 3, 8)
    x1, x2 = xb[..., :4], xb[..., 4:]
    first, second = x1 * c[..., :4] - x2 * s[..., :4], x2 * c[..., 4:] + x1 * s[..., 4:]
    want = np.concatenate([first, second], -1)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got[..., :24], want.reshape(2, 5, 24), rtol=tol, atol=tol)
    np.testing.assert_array_equal(got[..., 24:], x[..., 24:])
    tables = [torch.from_numpy(t.astype(dtype)) for t in (cos, sin)]
    torch_got = posenc.apply_rope(torch.from_numpy(x), *tables, "block-halves", blocks=3)
    np.testing.assert_allclose(torch_got.numpy(), got, rtol=tol, atol=tol)


def test_block_errors():
    with pytest.raises(PosencError, match="even width"):
        posenc.rope_grid((2, 2), 32, axes_dim=(16, 16), layout="block-halves", blocks=3)
    with pytest.raises(PosencError, match="block-halves"):
        posenc.rope_grid((2, 2), 32, axes_dim=(16, 16), layout="halves", blocks=2)
    x = torch.zeros(2, 24)
    with pytest.raises(PosencError, match="blocks"):
        posenc.apply_rope(x, x, x, "block-halves", blocks=5)
    with pytest.raises(PosencError, match="blocks"):
        posenc.apply_rope(x, x, x, "halves", blocks=2)
    with pytest.raises(PosencError, match=r"`blocks` = 32 .*'ltx2-video-split'.*pass `blocks`"):
        posenc.rope(np.zeros((2, 3)), 4000, preset="ltx2-video-split")
    # the preset's 32 heads are a default: the call's blocks or layout decide (4000 = 8 * 500)
    for kw in ({"blocks": 4}, {"layout": "halves"}, {"layout": "interleaved"}):
        cos, _ = posenc.rope(np.zeros((2, 3)), 4000, preset="ltx2-video-split", **kw)
        assert cos.shape == (2, 4000)
    with pytest.raises(PosencError, match="dim"):
        posenc.rope(np.zeros(3), 1, preset="ltx2-audio")
