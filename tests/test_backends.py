"""Every array library gives NumPy's numbers: tables, encodings, grids, DETR's masks, NeRF
coordinates and RoPE tables, each test run once per library by the `backend` fixture
(conftest.py: NumPy, torch, JAX without x64, array-api-strict; each skipped where it is not
installed).

The libraries posenc's engine serves (NumPy, torch, and JAX without x64, whose values the host
engine computes) give NumPy's bits. Any other Array API namespace (array-api-strict here) runs
the formula directly in float64 and rounds its own value once: within a float32 spacing of
NumPy's, and within 1e-12 in float64. What one library does alone (jax.jit and vmap, x64,
torch devices, meta tensors, torch.compile) is tested in that library's files.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import posenc
from tests import reference as ref
from tests.helpers import dtype_for, raises, to_numpy

TABLES = [
    ("vaswani", 64, {}),
    ("tensor2tensor", 17, {"max_timescale": 500.0}),
    ("fairseq", 33, {"padding_idx": 1}),
    ("whisper", 48, {}),
    ("marian", 15, {}),
    ("timestep", 320, {"flip_sin_to_cos": True, "downscale_freq_shift": 0}),
    ("tatp22", 9, {}),
]
GRIDS = [
    ("mae", (6, 7), 64, {"cls_token": True}),
    ("mae", (14, 14), 64, {}),
    ("diffusers-2d", (8, 4), 32, {}),
    ("diffusers-3d", (2, 3, 4), 64, {}),
    ("diffusers-3d", (3, 4, 5), 64, {}),
    ("timm-2d", (5, 6), 32, {"reverse_coord": True}),
    ("timm-2d", (6, 9), 32, {}),
    ("hf-2d", (4, 4), 32, {}),
    ("detr", (5, 3), 32, {"normalize": True}),
    ("t2t-nd", (3, 4, 5), 24, {}),
    ("t2t-nd", (4, 5, 6), 24, {}),
    ("tatp22", (3, 5), 10, {}),
]
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}  # fmt: skip


def _same(backend, got, want: np.ndarray, *, bound: float | None = None) -> None:
    """``got`` is NumPy's ``want``: the same shape and dtype; the engine's libraries give the
    same bits, the direct formula is within one float32 spacing of them (or ``bound``)."""
    got = backend.to_numpy(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if backend.engine:
        assert np.array_equal(got, want)
    elif bound is not None:
        assert np.abs(got.astype(np.float64) - want).max() <= bound
    else:
        assert (np.abs(got - want) <= np.spacing(np.abs(want))).all()


def _float64_within_1e_12(backend, make, exact: np.ndarray) -> None:
    """Where the library has float64: ``make(like, dtype)`` within 1e-12 of NumPy's float64."""
    if backend.float64 is None:
        return
    got = make(backend.like, backend.float64)
    assert backend.owns(got)
    got = backend.to_numpy(got)
    assert got.dtype == np.float64
    assert np.abs(got - exact).max() < 1e-12


@pytest.mark.parametrize(("preset", "dim", "kw"), TABLES)
def test_encodings_and_tables_match_numpy(backend, preset, dim, kw):
    """Integer positions (and real timesteps), a table from an offset, and its float64."""
    positions = [np.arange(-3, 400)]
    if preset == "timestep":  # real timesteps, float32: what JAX without x64 holds
        positions.append(np.linspace(0, 999, 50).astype(np.float32))
    with backend.strict():
        for pos in positions:
            got = posenc.encode(backend.asarray(pos), dim, preset=preset, **kw)
            assert backend.owns(got)
            _same(backend, got, posenc.encode(pos, dim, preset=preset, **kw))
        table = posenc.table(403, dim, preset=preset, offset=-3, like=backend.like, **kw)
        assert backend.owns(table)
        _same(backend, table, posenc.encode(positions[0], dim, preset=preset, **kw))
        _float64_within_1e_12(
            backend,
            lambda like, f64: posenc.table(
                403, dim, preset=preset, offset=-3, like=like, dtype=f64, **kw
            ),
            posenc.table(403, dim, preset=preset, offset=-3, dtype=np.float64, **kw),
        )


@pytest.mark.parametrize("preset", [p for p, _, _ in TABLES])
def test_long_tables_match_numpy(backend, preset):
    """3000 rows from offset 5, float32, with the preset's defaults."""
    with backend.strict():
        got = posenc.table(3000, 64, preset=preset, offset=5, like=backend.like)
    assert backend.owns(got)
    _same(backend, got, posenc.table(3000, 64, preset=preset, offset=5))


@pytest.mark.parametrize(("preset", "shape", "dim", "kw"), GRIDS)
def test_grids_match_numpy(backend, preset, shape, dim, kw):
    """float32 grids (JAX: made under jax.jit) and their float64."""
    with backend.strict():
        got = backend.jit(lambda: posenc.grid(shape, dim, preset=preset, like=backend.like, **kw))()
        assert backend.owns(got)
        _same(backend, got, posenc.grid(shape, dim, preset=preset, **kw))
        _float64_within_1e_12(
            backend,
            lambda like, f64: posenc.grid(shape, dim, preset=preset, like=like, dtype=f64, **kw),
            posenc.grid(shape, dim, preset=preset, dtype=np.float64, **kw),
        )


def test_detr_matches_the_reference(backend):
    """A padding mask in the library gives an NCHW encoding in it: NumPy's float32 values
    (JAX without x64 too: no float64 asked of it), and its float64 within 1e-9 of DETR's
    formula."""
    mask = np.zeros((2, 5, 7), dtype=bool)
    mask[1, 3:, :] = True
    mask[1, :, 4:] = True
    with backend.strict():
        got = posenc.detr(backend.asarray(mask), 64, normalize=True)
        assert backend.owns(got)
        _same(backend, got, posenc.detr(mask, 64, normalize=True))
        if backend.float64 is not None:
            exact = posenc.detr(backend.asarray(mask), 64, normalize=True, dtype=backend.float64)
            assert backend.owns(exact)
            exact = backend.to_numpy(exact)
            assert exact.shape == (2, 64, 5, 7)
            assert np.abs(exact - ref.detr(mask, 32, normalize=True)).max() < 1e-9


def test_nerf_coordinates_match_numpy(backend):
    x = np.random.default_rng(0).uniform(-1, 1, (40, 3)).astype(np.float32)
    with backend.strict():
        got = posenc.encode(backend.asarray(x), 3 * (1 + 2 * 6), preset="nerf", ndim=3)
    assert backend.owns(got)
    _same(backend, got, posenc.encode(x, 3 * (1 + 2 * 6), preset="nerf", ndim=3))


def test_rope_matches_numpy(backend):
    """RoPE tables in the library, any shape; the direct formula within 2^-24."""
    ids = np.random.default_rng(0).integers(0, 2**24, size=(3, 50))
    want = posenc.rope(ids, 64, base=5e5, scaling=LLAMA3)
    with backend.strict():
        got = posenc.rope(backend.asarray(ids), 64, base=5e5, scaling=LLAMA3)
    assert len(got) == len(want) == 2
    for g, w in zip(got, want, strict=True):
        assert backend.owns(g)
        assert g.shape == (3, 50, 64)
        _same(backend, g, w, bound=2.0**-24)


@given(
    preset=st.sampled_from(sorted(ref.ONE_D)),
    positions=st.lists(st.integers(-(2**27) + 1, 2**27 - 1), min_size=1, max_size=20),
    d=st.integers(4, 48),
    dtype=st.sampled_from(["float32", "float16", "bfloat16"]),
)
def test_every_backend_gives_the_same_bits(backend, preset, positions, d, dtype):
    """Random positions up to 2^27 in 16- and 32-bit output. The Array API path evaluates
    the formula directly in float64, whose angles err by up to |p| 2^-53 (2^-26 near the 2^27
    limit): as accurate as the engine, but not always the same bits."""
    d -= d % 2 if ref.ONE_D[preset][1] == "even" else 0
    pos = np.asarray(positions, dtype=np.int32)  # int32: exact in JAX without x64
    if preset == "timestep":
        pos = np.abs(pos.astype(np.int64)).astype(np.int32)
    opts = ref.ONE_D_OPTIONS.get(preset, {})
    want = to_numpy(posenc.encode(pos, d, preset=preset, dtype=dtype_for("numpy", dtype), **opts))
    assert np.isfinite(want).all()
    if backend.name not in ("numpy", "torch") and dtype != "float32":
        return  # JAX and the Array API follow their inputs' float32 default
    kw = {"dtype": dtype_for(backend.name, dtype)} if backend.name in ("numpy", "torch") else {}
    with backend.strict():
        got = posenc.encode(backend.asarray(pos), d, preset=preset, **opts, **kw)
    # both within 2^-25 + |p| 2^-52 of the exact value
    _same(backend, got, want, bound=2 * (2.0**-25 + float(np.abs(pos).max()) * 2.0**-52))


@pytest.mark.parametrize(
    ("values", "rule"),
    [
        (np.array([1.0, np.nan]), "finite"),
        (np.array([1.0, np.inf]), "finite"),
        (np.array([True, False]), "bool"),
        (np.array([1 + 2j]), "complex"),
    ],
)
def test_bad_positions_are_refused_by_every_backend(backend, values, rule):
    if backend.name == "jax" and values.dtype.kind == "c":
        values = values.astype(np.complex64)  # JAX without x64
    if backend.name == "jax" and values.dtype == np.float64:
        values = values.astype(np.float32)
    with raises("`positions`", rule):
        posenc.encode(backend.asarray(values), 8)
