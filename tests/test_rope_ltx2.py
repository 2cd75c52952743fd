"""Halves inside each block (``layout="block-halves"``): Allegro's per-axis halves and LTX-2's
tables (interleaved, or ``split`` per head), against diffusers itself: ``compat="diffusers"``
and the LTX-2 stand-in's ``compat`` equal bit for bit at the models' sizes and odd ones, in
both of LTX-2's precisions; ``apply_rope``'s block-halves rotation bit for bit with
``apply_rotary_emb_allegro`` and ``apply_split_rotary_emb``; the exact tables within float32
rounding of a float64 reference written here from the formulas; the float32-only evaluator
within 1e-6 at the largest sizes."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from posenc.spec.rotary import layout_columns

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models import embeddings  # noqa: E402
from diffusers.models.transformers import transformer_ltx2  # noqa: E402

from posenc.torch._ltx2_rope import LTX2Rope  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


def assert_exact(got, want, floor=1e-12):
    """Within one float32 rounding of the float64 value (``floor`` near zero: LTX's angles
    reach 1.6e4 rad, where float64 itself is 2e-12 apart)."""
    got = np.asarray(got.double() if hasattr(got, "double") else got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + floor)


def max_error(got, want) -> float:
    got = got.double().numpy() if hasattr(got, "double") else np.asarray(got, np.float64)
    return float(np.abs(got - want).max())


# ---------------------------------------------------------------------------------------------
# float64 references, from the formulas


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


def ltx2_reference(p, dim, heads=None, base=1e4):
    """``p`` ``[N, k]`` (``2c - 1``): ``f_m = (pi / 2) base ** (m / (n - 1))``, ``n = dim //
    2k``; angles ``f_m p_a``, the ``k`` axes per frequency, after ``dim / 2 - n k`` zero
    angles; interleaved pairs (``heads`` None) or halves inside each head."""
    k = p.shape[1]
    n = dim // (2 * k)
    f = (np.pi / 2) * base ** (np.arange(n) / (n - 1))
    angles = (p[:, None, :] * f[None, :, None]).reshape(len(p), n * k)
    angles = np.concatenate([np.zeros((len(p), dim // 2 - n * k)), angles], axis=1)
    if heads is None:
        angles = np.repeat(angles, 2, axis=1)
    else:
        per_head = angles.reshape(len(p), heads, -1)
        angles = np.concatenate([per_head, per_head], axis=-1).reshape(len(p), dim)
    return np.cos(angles), np.sin(angles)


def video_positions(dims, fps=24.0, bases=(20.0, 2048.0, 2048.0)):
    """LTX-2's ``2c - 1`` of a latent grid: ``c`` = the midpoint of each patch's pixel bounds
    over the base, frames ``[max(8f - 7, 0), 8f + 1] / fps``, rows ``[32i, 32i + 32]``."""
    f, h, w = (np.arange(n, dtype=np.float64) for n in dims)
    t = (np.maximum(8 * f - 7, 0) + np.maximum(8 * (f + 1) - 7, 0)) / 2 / fps
    rows, cols = 32 * h + 16, 32 * w + 16
    mesh = np.meshgrid(t, rows, cols, indexing="ij")
    c = np.stack([m.reshape(-1) / b for m, b in zip(mesh, bases, strict=True)], axis=-1)
    return 2 * c - 1


def audio_positions(frames, base=20.0):
    """Audio: latent frame ``f`` spans mel frames ``[max(4f - 3, 0), 4f + 1]``, ``hop / sr``
    = 0.01 s each."""
    f = np.arange(frames, dtype=np.float64)
    mid = (np.maximum(4 * f - 3, 0) + np.maximum(4 * (f + 1) - 3, 0)) / 2 * 160 / 16000
    return (2 * mid / base - 1)[:, None]


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


# ---------------------------------------------------------------------------------------------
# Allegro


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


# ---------------------------------------------------------------------------------------------
# LTX-2

KEYS = ("dim", "patch_size", "patch_size_t", "base_num_frames", "base_height", "base_width",
        "sampling_rate", "hop_length", "scale_factors", "theta", "causal_offset", "modality",
        "double_precision", "rope_type", "num_attention_heads")  # fmt: skip


def ltx2_pair(modality, dim, rope_type, double_precision, heads=32):
    scales = (8, 32, 32) if modality == "video" else (4,)
    module = transformer_ltx2.LTX2AudioVideoRotaryPosEmbed(
        dim, modality=modality, rope_type=rope_type, double_precision=double_precision,
        scale_factors=scales, num_attention_heads=heads)  # fmt: skip
    settings = {k: getattr(module, k) for k in KEYS}
    return module, LTX2Rope(settings, "diffusers"), LTX2Rope(settings)


VIDEO_GRIDS = [(16, 1, 1), (1, 22, 1), (1, 1, 40), (3, 5, 7)]  # 704 x 1280, 121 f, per axis


@pytest.mark.parametrize("rope_type", ["interleaved", "split"])
@pytest.mark.parametrize("double_precision", [True, False])
@pytest.mark.parametrize(("dim", "heads"), [(4096, 32), (2052, 6)])  # 2052: 2 still channels
def test_ltx2_video(rope_type, double_precision, dim, heads):
    module, compat, exact = ltx2_pair("video", dim, rope_type, double_precision, heads)
    for dims in VIDEO_GRIDS:
        coords = module.prepare_video_coords(2, *dims, "cpu", fps=24.0)
        assert torch.equal(compat.prepare_video_coords(2, *dims, "cpu", fps=24.0), coords)
        for axes in (coords, coords[:, 0:1]):  # self-attention; the cross-attention's frames
            want = module(axes)
            got = compat(axes)
            assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
        p = video_positions(dims)
        own = exact.prepare_video_coords(1, *dims, "cpu", fps=24.0)
        for axes, pos in ((own, p), (own[:, 0:1], p[:, :1])):
            ref = ltx2_reference(pos, dim, heads if rope_type == "split" else None)
            for got, want in zip(exact(axes), ref, strict=True):
                if rope_type == "split":  # [B, heads, N, r] -> [N, dim]
                    got = torch.cat([got[0], got[0]], dim=-1).transpose(0, 1).reshape(len(pos), -1)
                assert_exact(got[0] if rope_type != "split" else got, want, 1e-11)


@pytest.mark.parametrize("rope_type", ["interleaved", "split"])
@pytest.mark.parametrize("double_precision", [True, False])
def test_ltx2_audio(rope_type, double_precision):
    module, compat, exact = ltx2_pair("audio", 2048, rope_type, double_precision)
    for frames, shift in ((126, 0), (7, 3)):
        coords = module.prepare_audio_coords(2, frames, "cpu", shift=shift)
        assert torch.equal(compat.prepare_audio_coords(2, frames, "cpu", shift=shift), coords)
        assert all(torch.equal(g, w) for g, w in zip(compat(coords), module(coords), strict=True))
    ref = ltx2_reference(audio_positions(126), 2048, 32 if rope_type == "split" else None)
    for got, want in zip(exact(exact.prepare_audio_coords(1, 126, "cpu")), ref, strict=True):
        if rope_type == "split":
            got = torch.cat([got[0], got[0]], dim=-1).transpose(0, 1).reshape(126, -1)[None]
        assert_exact(got[0], want, 1e-11)


def test_ltx2_presets_and_the_original_error():
    p = video_positions((16, 22, 40))[::97]
    cos, sin = posenc.rope(p, 4096, preset="ltx2-video-split")
    for got, want in zip((cos, sin), ltx2_reference(p, 4096, 32), strict=True):
        assert_exact(got, want, 1e-11)
    module, _, _ = ltx2_pair("video", 4096, "interleaved", True)
    original = module(module.prepare_video_coords(1, 16, 1, 1, "cpu"))[0][0]
    want = ltx2_reference(video_positions((16, 1, 1)), 4096)[0]
    assert 1e-4 < max_error(original, want) < 1e-2  # float32 angles up to pi / 2 * 1e4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ltx2_rotations(dtype):
    module, _, _ = ltx2_pair("video", 96, "split", True, heads=4)
    cos, sin = module(module.prepare_video_coords(2, 3, 2, 4, "cpu"))  # [B, H, N, r]
    torch.manual_seed(0)
    q = torch.randn(2, 24, 96).to(dtype)  # [B, N, inner]
    want = transformer_ltx2.apply_split_rotary_emb(q, (cos, sin))
    full = [torch.cat([t, t], dim=-1).transpose(1, 2).reshape(2, 24, 96) for t in (cos, sin)]
    got = posenc.apply_rope(q, *full, "block-halves", blocks=4, compat="ltx2")
    assert torch.equal(got, want)
    module, _, _ = ltx2_pair("video", 96, "interleaved", True, heads=4)
    cos, sin = module(module.prepare_video_coords(2, 3, 2, 4, "cpu"))
    want = transformer_ltx2.apply_interleaved_rotary_emb(q, (cos, sin))
    assert torch.equal(posenc.apply_rope(q, cos, sin, "interleaved", compat="diffusers"), want)


def test_ltx2_float32_only(float32_only):
    """Per axis at 704 x 1280, 121 frames (frames from the second: the first is not on the
    progression), and 126 audio frames."""
    starts = (5 / 240 - 1, 16 / 1024 - 1, 16 / 1024 - 1)
    steps = (8 / 240, 32 / 1024, 32 / 1024)
    every = video_positions((16, 22, 40)).reshape(16, 22, 40, 3)[1:]
    for dims in ((15, 1, 1), (1, 22, 1), (1, 1, 40)):
        cos, sin = posenc.rope_grid(dims, 4096, preset="ltx2-video", start=starts, step=steps,
                                    dtype=torch.float32)  # fmt: skip
        p = every[: dims[0], : dims[1], : dims[2]].reshape(-1, 3)
        for got, want in zip((cos, sin), ltx2_reference(p, 4096), strict=True):
            assert max_error(got, want) < 1e-6
    a = audio_positions(126)[1:, 0]
    cos, sin = posenc.rope_grid(125, 2048, preset="ltx2-audio", start=a[0], step=a[1] - a[0],
                                dtype=torch.float32)  # fmt: skip
    for got, want in zip((cos, sin), ltx2_reference(a[:, None], 2048), strict=True):
        assert max_error(got, want) < 1e-6


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
