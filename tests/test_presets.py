"""Every preset against an independent float64 reference of its original."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests import reference as ref
from tests.helpers import assert_close, assert_correctly_rounded

F64 = {"dtype": np.float64}
TOL32 = 1e-7  # float32 output: the bound


@pytest.mark.parametrize("d", [2, 6, 64, 512])
@pytest.mark.parametrize("offset", [0, 7])
def test_vaswani(d, offset):
    assert_close(posenc.table(300, d, offset=offset, **F64), ref.vaswani(300, d, offset=offset))
    assert_close(posenc.table(300, d, offset=offset), ref.vaswani(300, d, offset=offset), TOL32)


def test_vaswani_base():
    assert_close(posenc.table(50, 16, base=100.0, **F64), ref.vaswani(50, 16, base=100.0))


@pytest.mark.parametrize("d", [2, 3, 4, 5, 17, 64, 65])
def test_tensor2tensor(d):
    want = ref.t2t_1d(100, d, 1.0, 1e4, 3)
    assert_close(posenc.table(100, d, preset="tensor2tensor", offset=3, **F64), want)


def test_tensor2tensor_min_timescale_multiplies():
    # the quirk: frequencies are *multiplied* by min_timescale
    want = ref.t2t_1d(100, 64, 2.0, 500.0, 0)
    got = posenc.table(
        100, 64, preset="tensor2tensor", min_timescale=2.0, max_timescale=500.0, **F64
    )
    assert_close(got, want)
    assert got[1, 0] == pytest.approx(np.sin(2.0), abs=1e-15)


@pytest.mark.parametrize("d", [4, 17, 64, 1024])
@pytest.mark.parametrize("padding_idx", [None, 0, 1, 5])
def test_fairseq(d, padding_idx):
    kw = {} if padding_idx is None else {"padding_idx": padding_idx}
    got = posenc.table(64, d, preset="fairseq", **kw, **F64)
    assert_close(got, ref.fairseq(64, d, padding_idx))
    if padding_idx is not None:
        assert not got[padding_idx].any()


def test_fairseq_positions_and_encode():
    tokens = np.array([[5, 6, 7, 1, 1], [1, 9, 9, 9, 9]])
    pos = posenc.fairseq_positions(tokens, padding_idx=1)
    assert pos.tolist() == [[2, 3, 4, 1, 1], [1, 2, 3, 4, 5]]
    got = posenc.encode(pos, 16, preset="fairseq", padding_idx=1, **F64)
    table = ref.fairseq(10, 16, 1)
    assert_close(got, table[pos])


@pytest.mark.parametrize("d", [4, 384, 1280])
def test_whisper(d):
    assert_close(posenc.table(1500, d, preset="whisper", **F64), ref.whisper(1500, d), 1e-9)


def test_whisper_equals_fairseq_bit_for_bit():
    a = posenc.table(1500, 384, preset="whisper")
    b = posenc.table(1500, 384, preset="fairseq")
    assert np.array_equal(a, b)


@pytest.mark.parametrize("d", [1, 2, 7, 16, 33])
def test_marian(d):
    assert_close(posenc.table(40, d, preset="marian", **F64), ref.marian(40, d))


@pytest.mark.parametrize("d", [5, 8, 320, 321])
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"flip_sin_to_cos": True, "downscale_freq_shift": 0},
        {"flip_sin_to_cos": True, "downscale_freq_shift": 1, "scale": 1000.0, "max_period": 500},
    ],
)
def test_timestep(d, kw):
    t = np.array([0.0, 1.0, 17.5, 999.0, 0.25])
    got = posenc.encode(t, d, preset="timestep", **kw, **F64)
    assert_close(got, ref.timestep(t, d, **kw), 1e-9)


def test_timestep_encodes_the_t_it_is_given():
    """The original casts t to float32; posenc encodes float32 t (the original's numbers) and
    float64 t (not rounded first) each exactly."""
    t64 = np.array([12345.678, 999.1])
    t32 = t64.astype(np.float32)
    assert_close(posenc.encode(t32, 320, preset="timestep", **F64), ref.timestep(t32, 320), 1e-9)
    got = posenc.encode(t64, 320, preset="timestep", **F64)
    assert_close(got, ref.timestep(t64, 320), 1e-9)
    assert np.abs(got - ref.timestep(t32, 320)).max() > 1e-4  # so the two are told apart


def test_timestep_narrowest_width_with_paper_spacing():
    t = np.array([0.0, 3.0, 41.5])
    got = posenc.encode(t, 3, preset="timestep", downscale_freq_shift=0, **F64)
    assert_close(got, ref.timestep(t, 3, downscale_freq_shift=0))


@pytest.mark.parametrize("shape", [(14, 14), (3, 5), (1, 1)])
@pytest.mark.parametrize("cls", [False, True])
def test_mae(shape, cls):
    got = posenc.grid(shape, 64, preset="mae", cls_token=cls, **F64)
    assert_close(got, ref.mae(64, shape, cls))


def test_mae_square_int_and_default_preset():
    assert_close(posenc.grid(14, 768, **F64), ref.mae(768, 14))


@pytest.mark.parametrize("shape", [(16, 16), (8, 12), (32, 32)])
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"interpolation_scale": 2.0, "base_size": 8},
        {"cls_token": True, "extra_tokens": 2},
        {"cls_token": True},
    ],
)
def test_diffusers_2d(shape, kw):
    got = posenc.grid(shape, 32, preset="diffusers-2d", **kw, **F64)
    assert_close(got, ref.diffusers_2d(32, shape, **kw))


def test_diffusers_2d_equals_mae_at_base_size():
    a = posenc.grid((16, 16), 64, preset="diffusers-2d", base_size=16)
    assert np.array_equal(a, posenc.grid((16, 16), 64, preset="mae"))


@pytest.mark.parametrize("thw", [(4, 6, 5), (1, 3, 3)])
@pytest.mark.parametrize(
    "kw", [{}, {"spatial_interpolation_scale": 1.875, "temporal_interpolation_scale": 2.0}]
)
def test_diffusers_3d(thw, kw):
    t, h, w = thw
    got = posenc.grid((t, h, w), 64, preset="diffusers-3d", **kw, **F64)
    want = ref.diffusers_3d(64, (w, h), t, **kw)
    assert_close(got.reshape(t, h * w, 64), want)


@pytest.mark.parametrize("shape", [(7, 7), (4, 9)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("interleave", [False, True])
def test_timm_2d(shape, reverse, interleave):
    got = posenc.grid(
        shape,
        32,
        preset="timm-2d",
        reverse_coord=reverse,
        interleave_sin_cos=interleave,
        temperature=1000.0,
        **F64,
    )
    assert_close(got, ref.timm_2d(shape, 32, 1000.0, reverse, interleave))


@pytest.mark.parametrize("shape", [(5, 8), (20, 20)])
def test_hf_2d(shape):
    got = posenc.grid(shape, 64, preset="hf-2d", **F64)
    assert_close(got, ref.hf_2d(*shape, embed_dim=64))
    got = posenc.grid(shape, 64, preset="hf-2d", cls_token=True, temperature=100.0, **F64)
    assert_close(got, ref.hf_2d(*shape, embed_dim=64, temperature=100.0, cls_token=True))


def _mask(rng, b, h, w):
    mask = np.zeros((b, h, w), dtype=bool)
    for i in range(b):  # DETR pads bottom and right
        mask[i, rng.integers(1, h + 1) :, :] = True
        mask[i, :, rng.integers(1, w + 1) :] = True
    return mask


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("dim", [8, 256])
def test_detr(normalize, dim):
    mask = _mask(np.random.default_rng(0), 3, 9, 13)
    got = posenc.detr(mask, dim, normalize=normalize, dtype=np.float64)
    assert_close(got, ref.detr(mask, dim // 2, normalize=normalize), 1e-9)


def test_detr_grid_equals_unpadded_mask():
    mask = np.zeros((1, 6, 7), dtype=bool)
    for normalize in (False, True):
        full = posenc.detr(mask, 64, normalize=normalize, scale=None, dtype=np.float64)
        got = posenc.grid((6, 7), 64, preset="detr", normalize=normalize, **F64)
        assert_close(got, full[0].reshape(64, -1).T, 1e-12)


@pytest.mark.parametrize("shape", [(9,), (5, 6), (3, 4, 5)])
@pytest.mark.parametrize("d", [12, 13, 30, 64])
def test_t2t_nd(shape, d):
    assert_close(posenc.grid(shape, d, preset="t2t-nd", **F64), ref.t2t_nd(shape, d))


@pytest.mark.parametrize("shape", [(9,), (5, 6), (3, 4, 5)])
@pytest.mark.parametrize("d", [1, 7, 10, 30, 64])
def test_tatp22(shape, d):
    assert_close(posenc.grid(shape, d, preset="tatp22", **F64), ref.tatp22(shape, d))


def test_tatp22_table_is_its_1d():
    assert_close(posenc.table(20, 9, preset="tatp22", **F64), ref.tatp22((20,), 9))


@pytest.mark.parametrize("nd", [1, 3])
@pytest.mark.parametrize("levels", [1, 4, 10, 30])
def test_nerf(nd, levels):
    x = np.random.default_rng(1).uniform(-1, 1, size=(50, nd))
    got = posenc.encode(x, nd * (1 + 2 * levels), preset="nerf", ndim=nd, **F64)
    assert_close(got, ref.nerf(x, levels))
    got = posenc.encode(x, nd * 2 * levels, preset="nerf", ndim=nd, include_input=False, **F64)
    assert_close(got, ref.nerf(x, levels, include_input=False))


def test_every_preset_is_tested_and_documented():
    tested = {
        "vaswani",
        "tensor2tensor",
        "fairseq",
        "whisper",
        "marian",
        "timestep",
        "mae",
        "diffusers-2d",
        "diffusers-3d",
        "timm-2d",
        "hf-2d",
        "detr",
        "t2t-nd",
        "tatp22",
        "nerf",
    }
    assert set(posenc.presets("sinusoidal")) == tested
    for name in posenc.presets():
        p = posenc.preset(name)
        assert p.origin
        assert p.summary
        assert p.quirks


@pytest.mark.parametrize("offset", [0.5, -3.75, 100_000.25])
def test_real_offsets_and_scaled_grids(offset):
    # real progressions take the coarse/fine split around sqrt(length), not the integer one
    got = posenc.table(3000, 64, offset=offset, **F64)
    assert_close(got, ref.vaswani(3000, 64, offset=offset), 1e-10)
    got = posenc.grid(
        (300, 7), 64, preset="diffusers-2d", interpolation_scale=0.7, base_size=13, **F64
    )
    assert_close(got, ref.diffusers_2d(64, (300, 7), interpolation_scale=0.7, base_size=13))


def test_a_convention_of_your_own_is_data():
    mine = posenc.Preset(
        "mine",
        "my lab",
        "halves, base 500",
        posenc.Encoding(layout="halves", base=500.0, shift=1.0, widths="floor"),
    )
    assert_close(posenc.table(40, 9, preset=mine, **F64), ref.t2t_1d(40, 9, 1.0, 500.0))
    grid = posenc.Preset("g", "me", "hf-2d again", posenc.Encoding(ndim=2, layout="halves"))
    assert np.array_equal(
        posenc.grid((3, 4), 16, preset=grid), posenc.grid((3, 4), 16, preset="hf-2d")
    )


HALVES = [  # [sin | cos] blocks (cos first for flip_sin_to_cos), 1-, 2- and 3-D
    ("whisper", lambda **kw: posenc.table(700, 96, preset="whisper", **kw), ref.whisper(700, 96)),
    (
        "timestep-flip",
        lambda **kw: posenc.table(600, 64, preset="timestep", offset=3, flip_sin_to_cos=True, **kw),
        ref.timestep(np.arange(3, 603), 64, flip_sin_to_cos=True),
    ),
    ("mae", lambda **kw: posenc.grid((40, 24), 64, preset="mae", **kw), ref.mae(64, (40, 24))),
    (
        "t2t-nd",
        lambda **kw: posenc.grid((20, 6, 5), 36, preset="t2t-nd", **kw),
        ref.t2t_nd((20, 6, 5), 36),
    ),
]


@pytest.mark.parametrize("case", HALVES, ids=[c[0] for c in HALVES])
@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_halves_layouts_every_backend_and_dtype(case, lib, dtype):
    _, make, want = case
    if lib == "torch":
        torch = pytest.importorskip("torch")
        got = make(dtype=getattr(torch, dtype))
        assert got.dtype == getattr(torch, dtype)
    else:
        got = make(dtype=dtype)
        assert got.dtype == np.dtype(dtype)
    got = got.reshape(want.shape)
    if dtype == "float64":
        assert_close(np.asarray(got), want, 1e-9)
    else:
        assert_correctly_rounded(got, want, slack=1e-12)


@pytest.mark.parametrize("levels", [10, 24])
@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_nerf_float32_correctly_rounded(levels, lib):
    # levels between direct evaluations come from squaring phasors: the error this adds
    # (below 1e-12) must not change a single float32 rounding outside the undecided band
    x = np.random.default_rng(2).uniform(-4, 4, size=(3000, 3))
    dim = 3 * (1 + 2 * levels)
    if lib == "torch":
        torch = pytest.importorskip("torch")
        got = posenc.encode(torch.from_numpy(x), dim, preset="nerf", ndim=3, dtype=torch.float32)
    else:
        got = posenc.encode(x, dim, preset="nerf", ndim=3)
    assert_correctly_rounded(got, ref.nerf(x, levels), slack=1e-12)


def test_encode_keeps_span_tables_without_going_stale():
    rng = np.random.default_rng(3)
    want = ref.vaswani(3000, 64)
    posenc.set_table_cache(64 << 20)
    try:
        for _ in range(2):  # the second call gathers from the kept table
            ids = rng.integers(5, 3000, size=(4, 2000))
            got = posenc.encode(ids, 64)
            assert_close(got, want[ids], TOL32)
            got[...] = 7.0  # the caller's array, not the kept table
        # another dtype, width or preset with the same ids is not served the kept table
        assert_correctly_rounded(posenc.encode(ids, 64, dtype=np.float16), want[ids], slack=1e-12)
        assert_close(posenc.encode(ids, 32), ref.vaswani(3000, 32)[ids], TOL32)
        t2t = ref.t2t_1d(3000, 64)
        assert_close(posenc.encode(ids, 64, preset="tensor2tensor"), t2t[ids], TOL32)
        posenc.set_table_cache(0)
        assert_close(posenc.encode(ids, 64), want[ids], TOL32)
    finally:
        posenc.set_table_cache(64 << 20)
    with pytest.raises(posenc.PosencError, match="`max_bytes` must be >= 0"):
        posenc.set_table_cache(-1)
