"""Allegro (``preset="allegro"``, halves inside each axis block): ``compat="diffusers"`` against
diffusers' ``get_3d_rotary_pos_embed_allegro`` tables bit for bit at the model's size and odd
ones; ``apply_rope``'s block-halves rotation bit for bit with ``apply_rotary_emb_allegro``; the
exact tables within float32 rounding of a float64 reference written here from the formula; the
float32-only evaluator within 1e-6; the module, other layouts and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.families.models import assert_rounded_once as assert_exact
from tests.families.models import max_error

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models import embeddings  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


def allegro_reference(dims, dim, scales=(2.2, 2.0, 2.0), base=1e4):
    """Per axis ``p = i / s_a``, ``w_j = base ** (-2j / d)``, ``d = dim / 3``; each block
    ``[cos(p w) | cos(p w)]``; tokens frame-major."""
    d = dim // 3
    omega = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    grids = np.meshgrid(*[np.arange(n) / s for n, s in zip(dims, scales, strict=True)],
                        indexing="ij")  # fmt: skip
    angles = [g.reshape(-1, 1) * omega for g in grids]
    cos = np.concatenate([np.cos(a) for a in angles for _ in (0, 1)], axis=1)
    sin = np.concatenate([np.sin(a) for a in angles for _ in (0, 1)], axis=1)
    return cos, sin


def allegro_original(dims, dim):
    """The pipeline's tables, each token's rows gathered as ``apply_rotary_emb_allegro``
    does (by the integer ids of ``_prepare_rotary_positional_embeddings``)."""
    t, h, w = dims
    *freqs, gt, gh, gw = embeddings.get_3d_rotary_pos_embed_allegro(
        dim, ((0, 0), (h, w)), (h, w), t, interpolation_scale=(2.2, 2.0, 2.0)
    )
    ids = torch.cartesian_prod(gt.long(), gh.long(), gw.long()).reshape(-1, 3).T
    cos = torch.cat([f[0][i] for f, i in zip(freqs, ids, strict=True)], dim=-1)
    sin = torch.cat([f[1][i] for f, i in zip(freqs, ids, strict=True)], dim=-1)
    return freqs, ids, cos, sin


@pytest.mark.parametrize("dims", [(22, 45, 80), (5, 7, 3), (1, 9, 16)])  # 720 x 1280, 88 f
@pytest.mark.parametrize("dim", [96, 48])
def test_allegro(dims, dim):
    _, _, want_cos, want_sin = allegro_original(dims, dim)
    cos, sin = posenc.rope_grid(dims, dim, preset="allegro", compat="diffusers",
                                dtype=torch.float32)  # fmt: skip
    assert torch.equal(cos, want_cos)
    assert torch.equal(sin, want_sin)
    ref = allegro_reference(dims, dim)
    for got, want in zip(posenc.rope_grid(dims, dim, preset="allegro"), ref, strict=True):
        assert_exact(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_allegro_rotation(dtype):
    dims = (3, 4, 6)
    freqs, ids, _, _ = allegro_original(dims, 96)
    torch.manual_seed(0)
    q = torch.randn(2, 3, 72, 96).to(dtype)  # [B, heads, S, D]
    want = embeddings.apply_rotary_emb_allegro(q, freqs, ids[:, None])
    cos, sin = posenc.rope_grid(dims, 96, preset="allegro", compat="diffusers",
                                dtype=torch.float32)  # fmt: skip
    got = posenc.apply_rope(q, cos, sin, "block-halves", blocks=3, compat="diffusers")
    assert got.dtype == dtype
    assert torch.equal(got, want)
    exact = posenc.apply_rope(q, cos, sin, "block-halves", blocks=3)
    assert (exact.float() - want.float()).abs().max() <= 2 * torch.finfo(dtype).eps * 8


def test_allegro_float32_only(float32_only):
    cos, sin = posenc.rope_grid((22, 45, 80), 96, preset="allegro", dtype=torch.float32)
    for got, want in zip((cos, sin), allegro_reference((22, 45, 80), 96), strict=True):
        assert max_error(got, want) < 1e-6


def test_allegro_module_and_other_layouts():
    from posenc.torch import AxialRotaryEmbedding

    for kw in ({}, {"start": 0.0, "step": (0.5, 1.0, 2.0)}):  # the preset's positions; kept rows
        cos, sin = AxialRotaryEmbedding(96, preset="allegro", **kw)((5, 7, 3))
        want = posenc.rope_grid((5, 7, 3), 96, preset="allegro", **kw)
        assert np.array_equal(cos.numpy(), want[0])
        assert np.array_equal(sin.numpy(), want[1])
    cos, _ = posenc.rope_grid((2, 3, 4), 96, preset="allegro", layout="halves")  # blocks go
    assert np.array_equal(cos[:, :48], cos[:, 48:])


def test_allegro_errors():
    with pytest.raises(PosencError, match="multiple of 6"):
        posenc.rope_grid((2, 2, 2), 100, preset="allegro")
    with pytest.raises(PosencError, match="start"):
        posenc.rope_grid((2, 2, 2), 96, preset="allegro", start=1, compat="diffusers")
    with pytest.raises(PosencError, match="allegro's own tables"):
        posenc.rope_grid((2, 2, 2), 96, preset="allegro", axes_dim=(16, 40, 40),
                         compat="diffusers")  # fmt: skip
