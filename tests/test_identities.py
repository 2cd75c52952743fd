"""Identities that must hold, checked as properties over sizes, offsets and dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import posenc
from tests import reference as ref

sizes = st.integers(1, 300)
even_dims = st.integers(1, 96).map(lambda n: 2 * n)
offsets = st.integers(-(2**24) + 1, 2**24 - 400)


@settings(max_examples=60, deadline=None)
@given(length=sizes, d=even_dims, offset=offsets)
def test_pairs_have_unit_norm(length, d, offset):
    pe = posenc.table(length, d, offset=offset, dtype=np.float64)
    norms = pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2
    assert np.abs(norms - 1).max() < 1e-14


@settings(max_examples=60, deadline=None)
@given(length=st.integers(2, 200), d=even_dims, offset=offsets, k=st.integers(0, 1000))
def test_shift_is_a_fixed_rotation(length, d, offset, k):
    """PE(p + k) = R(k) PE(p), with R(k) block-diagonal rotations by k * omega."""
    pe = posenc.table(length, d, offset=offset, dtype=np.float64)
    moved = posenc.table(length, d, offset=offset + k, dtype=np.float64)
    omega = 10000.0 ** (-np.arange(d // 2) / (d // 2))
    c, s = np.cos(k * omega), np.sin(k * omega)
    sin_p, cos_p = pe[:, 0::2], pe[:, 1::2]
    assert np.abs(moved[:, 0::2] - (sin_p * c + cos_p * s)).max() < 1e-8
    assert np.abs(moved[:, 1::2] - (cos_p * c - sin_p * s)).max() < 1e-8


@settings(max_examples=40, deadline=None)
@given(length=sizes, d=even_dims, offset=offsets)
def test_interleaved_and_halves_are_a_permutation(length, d, offset):
    inter = posenc.table(length, d, offset=offset)
    halves = posenc.table(length, d, offset=offset, preset="marian")  # halves, paper spacing
    perm = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    assert np.array_equal(inter[:, perm], halves)


@settings(max_examples=40, deadline=None)
@given(
    length=sizes,
    d=st.integers(4, 200),
    offset=offsets,
    preset=st.sampled_from(
        ["vaswani", "tensor2tensor", "fairseq", "marian", "timestep", "tatp22", "whisper"]
    ),
)
def test_table_equals_encode_of_its_positions(length, d, offset, preset):
    if preset in ("vaswani", "whisper"):
        d += d % 2
    exact = posenc.table(length, d, offset=offset, preset=preset, dtype=np.float64)
    table = posenc.table(length, d, offset=offset, preset=preset)
    points = posenc.encode(np.arange(length) + offset, d, preset=preset)
    reals = posenc.encode((np.arange(length) + offset).astype(np.float64), d, preset=preset)
    # three evaluation paths (progression, integer points, real points), one rounding each:
    # each within half a float32 ulp of the float64 table, plus the float64 angle error
    angle_error = (abs(offset) + length) * 2.0**-51
    for got in (table, points, reals):
        half_ulp = np.spacing(np.abs(got)) / 2
        assert (np.abs(got - exact) <= half_ulp + angle_error).all()


@settings(max_examples=40, deadline=None)
@given(length=st.integers(1, 3000), d=st.integers(2, 64).map(lambda n: 2 * n))
def test_float32_is_float64_rounded_once(length, d):
    t64 = posenc.table(length, d, preset="whisper", dtype=np.float64)
    t32 = posenc.table(length, d, preset="whisper", dtype=np.float32)
    assert np.array_equal(t32, t64.astype(np.float32))


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 500),
    d=st.integers(2, 64).map(lambda n: 2 * n),
    t=st.lists(st.floats(0, 1000, allow_subnormal=False), min_size=1, max_size=20),
)
def test_timestep_reals(n, d, t):
    got = posenc.encode(np.array(t), d, preset="timestep", dtype=np.float64)
    want = ref.timestep(np.array(t), d)
    assert np.abs(got - want).max() < 1e-9


@settings(max_examples=30, deadline=None)
@given(h=st.integers(1, 20), w=st.integers(1, 20), d=st.integers(1, 32).map(lambda n: 4 * n))
def test_mae_and_hf_2d_swap_halves(h, w, d):
    mae = posenc.grid((h, w), d, preset="mae")
    hf = posenc.grid((h, w), d, preset="hf-2d")
    assert np.array_equal(mae, np.concatenate([hf[:, d // 2 :], hf[:, : d // 2]], axis=1))


@settings(max_examples=30, deadline=None)
@given(h=st.integers(1, 12), w=st.integers(1, 12), d=st.integers(1, 16).map(lambda n: 4 * n))
def test_grid_equals_encode_of_coordinates(h, w, d):
    for preset in ["mae", "hf-2d", "timm-2d"]:
        cells = np.stack(np.meshgrid(np.arange(h), np.arange(w), indexing="ij"), -1)
        got = posenc.encode(cells.reshape(-1, 2), d, preset=preset)
        assert np.array_equal(got, posenc.grid((h, w), d, preset=preset))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_numpy_dtypes(dtype):
    pe = posenc.table(100, 32, dtype=dtype)
    assert pe.dtype == np.dtype(dtype)
    # NumPy casts float64 to float16 directly (one rounding), so the two must agree
    assert np.array_equal(pe, posenc.table(100, 32, dtype=np.float64).astype(dtype))


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_every_integer_path_gives_the_same_bits(lib):
    """Runs of consecutive positions, a dense span, and sparse ids take three different
    paths through the engine; each must give exactly the table's rows."""
    rng = np.random.default_rng(0)
    start = 1_000_000
    table = posenc.table(300_000, 48, preset="whisper", offset=start)
    runs = np.concatenate([np.arange(a, a + n) for a, n in [(5, 700), (290_000, 256), (9, 300)]])
    dense = rng.integers(0, 500, 2000)
    sparse = rng.integers(0, 300_000, 500)
    for ids in (runs, dense, sparse, runs.reshape(2, -1) if runs.size % 2 == 0 else runs):
        positions = ids + start
        if lib == "torch":
            torch = pytest.importorskip("torch")
            got = posenc.encode(torch.from_numpy(positions), 48, preset="whisper").numpy()
            want = posenc.table(
                300_000, 48, preset="whisper", offset=start, dtype=torch.float32
            ).numpy()[ids]
        else:
            got = posenc.encode(positions, 48, preset="whisper")
            want = table[ids]
        assert np.array_equal(got, want)
