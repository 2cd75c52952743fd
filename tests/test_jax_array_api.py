"""JAX (jit, vmap, x64 off and on, strict promotion) and any Array API namespace."""

from __future__ import annotations

import numpy as np
import pytest

import posenc

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
xps = pytest.importorskip("array_api_strict")

ONE_D = [
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
    ("diffusers-2d", (8, 4), 32, {}),
    ("diffusers-3d", (2, 3, 4), 64, {}),
    ("timm-2d", (5, 6), 32, {"reverse_coord": True}),
    ("hf-2d", (4, 4), 32, {}),
    ("detr", (5, 3), 32, {"normalize": True}),
    ("t2t-nd", (3, 4, 5), 24, {}),
    ("tatp22", (3, 5), 10, {}),
]


def _np(x) -> np.ndarray:
    return np.from_dlpack(x) if type(x).__module__.startswith("array_api_strict") else np.asarray(x)


@pytest.fixture
def strict():
    with jax.numpy_dtype_promotion("strict"):
        yield


@pytest.mark.parametrize(("preset", "dim", "kw"), ONE_D)
def test_jax_equals_numpy_bit_for_bit(strict, preset, dim, kw):
    positions = np.arange(-3, 400) if preset != "timestep" else np.linspace(0, 999, 50)
    positions = positions.astype(np.float32) if preset == "timestep" else positions  # JAX: x32
    want = posenc.encode(positions, dim, preset=preset, **kw)
    got = posenc.encode(jnp.asarray(positions), dim, preset=preset, **kw)
    assert isinstance(got, jax.Array)
    assert got.dtype == jnp.float32
    assert np.array_equal(_np(got), want)
    if preset != "timestep":
        table = posenc.table(403, dim, preset=preset, offset=-3, like=jnp.zeros(0), **kw)
        assert np.array_equal(_np(table), want)


@pytest.mark.parametrize(("preset", "shape", "dim", "kw"), GRIDS)
def test_jax_grids_equal_numpy(strict, preset, shape, dim, kw):
    want = posenc.grid(shape, dim, preset=preset, **kw)
    got = jax.jit(lambda: posenc.grid(shape, dim, preset=preset, like=jnp.zeros(0), **kw))()
    assert np.array_equal(_np(got), want)


def _within_1e_6(got, want64: np.ndarray) -> None:
    """Traced positions run the float32-only formula on the device: within 1e-6."""
    got = _np(got)
    assert got.dtype == np.float32
    assert np.abs(got.astype(np.float64) - want64).max() < 1e-6


def test_jit_with_traced_positions_and_two_lengths(strict):
    fn = jax.jit(lambda p: posenc.encode(p, 64, preset="whisper"))
    for length in (16, 3000):
        got = fn(jnp.arange(length) + 7)
        _within_1e_6(got, posenc.table(length, 64, preset="whisper", offset=7, dtype=np.float64))
    big = fn(jnp.arange(16) + 16_000_000)  # plain float32 would err by 1e-1 here
    _within_1e_6(big, posenc.table(16, 64, preset="whisper", offset=16_000_000, dtype=np.float64))
    coords = jax.jit(lambda c: posenc.encode(c, 32, preset="mae"))
    cells = np.stack(np.meshgrid(np.arange(5), np.arange(6), indexing="ij"), -1).reshape(-1, 2)
    _within_1e_6(coords(jnp.asarray(cells)), posenc.grid((5, 6), 32, dtype=np.float64))


def test_traced_positions_need_no_host_callback(strict):
    jaxpr = jax.make_jaxpr(lambda p: posenc.encode(p, 64))(jnp.arange(8))
    text = str(jaxpr)
    assert "callback" not in text
    assert "f64" not in text


def test_vmap_and_timesteps(strict):
    batch = jnp.asarray(np.arange(24).reshape(4, 6))
    got = jax.vmap(lambda p: posenc.encode(p, 16))(batch)
    _within_1e_6(got, posenc.encode(np.arange(24).reshape(4, 6), 16, dtype=np.float64))
    t = jnp.asarray([0.0, 1.5, 999.0], dtype=jnp.float32)
    got = jax.jit(jax.vmap(lambda s: posenc.encode(s, 320, preset="timestep")))(t)
    assert got.shape == (3, 320)
    _within_1e_6(got, posenc.encode(np.asarray(t), 320, preset="timestep", dtype=np.float64))


def test_jax_bfloat16_is_correctly_rounded(strict):
    got = posenc.encode(jnp.arange(2000), 64, dtype=jnp.bfloat16)
    assert got.dtype == jnp.bfloat16
    torch = pytest.importorskip("torch")
    want = posenc.table(2000, 64, dtype=torch.bfloat16).float().numpy()
    assert np.array_equal(_np(got).astype(np.float32), want)


def test_x64_mode_evaluates_on_the_device(strict):
    with jax.enable_x64(True):
        fn = jax.jit(lambda p: posenc.encode(p, 64, preset="fairseq", padding_idx=1))
        got = fn(jnp.arange(3000))
        assert got.dtype == jnp.float32
        want = posenc.table(3000, 64, preset="fairseq", padding_idx=1)
        assert (np.abs(_np(got) - want) <= np.spacing(np.abs(want))).all()
        assert not _np(got)[1].any()
        half = posenc.encode(jnp.arange(3000), 64, dtype=jnp.bfloat16)
        torch = pytest.importorskip("torch")
        exact = posenc.table(3000, 64, dtype=np.float64)
        ref16 = torch.from_numpy(exact).to(torch.bfloat16)  # a plain cast: may double-round
        ours = np.asarray(_np(half).astype(np.float64))
        assert (np.abs(ours - exact) <= np.abs(ref16.double().numpy() - exact)).all()


def test_jax_errors_at_trace_time():
    with pytest.raises(posenc.PosencError, match="multiple of 2"):
        jax.jit(lambda p: posenc.encode(p, 7))(jnp.arange(3))
    with pytest.raises(posenc.PosencError, match="finite"):
        posenc.encode(jnp.asarray([0.0, jnp.nan]), 8)
    with pytest.raises(posenc.PosencError, match="last axis of 2"):
        posenc.encode(jnp.arange(3), 8, preset="mae")


# -- any Array API namespace ---------------------------------------------------------------


@pytest.mark.parametrize(("preset", "dim", "kw"), ONE_D)
def test_array_api_strict_1d(preset, dim, kw):
    positions = np.arange(-3, 300)
    want = posenc.encode(positions, dim, preset=preset, **kw)
    got = posenc.encode(xps.asarray(positions), dim, preset=preset, **kw)
    assert type(got).__module__.startswith("array_api_strict")
    assert got.dtype == xps.float32
    assert (np.abs(_np(got) - want) <= np.spacing(np.abs(want))).all()
    table = posenc.table(
        303, dim, preset=preset, offset=-3, like=xps.asarray([0]), dtype=xps.float64, **kw
    )
    exact = posenc.table(303, dim, preset=preset, offset=-3, dtype=np.float64, **kw)
    assert np.abs(_np(table) - exact).max() < 1e-12


@pytest.mark.parametrize(("preset", "shape", "dim", "kw"), GRIDS)
def test_array_api_strict_grids(preset, shape, dim, kw):
    got = posenc.grid(shape, dim, preset=preset, like=xps.asarray([0.0]), dtype=xps.float64, **kw)
    want = posenc.grid(shape, dim, preset=preset, dtype=np.float64, **kw)
    assert np.abs(_np(got) - want).max() < 1e-12


def test_array_api_strict_errors():
    with pytest.raises(posenc.PosencError, match="finite"):
        posenc.encode(xps.asarray([0.0, float("inf")]), 8)
    with pytest.raises(posenc.PosencError, match="integers or real numbers"):
        posenc.encode(xps.asarray([True, False]), 8)
    with pytest.raises(posenc.PosencError, match="`dtype` must be a float dtype"):
        posenc.encode(xps.asarray([1, 2]), 8, dtype=xps.int32)


def test_nerf_coordinates_on_jax_and_array_api(strict):
    x = np.random.default_rng(0).uniform(-1, 1, (40, 3)).astype(np.float32)
    want = posenc.encode(x, 3 * (1 + 2 * 6), preset="nerf", ndim=3)
    got = jax.jit(lambda c: posenc.encode(c, 3 * (1 + 2 * 6), preset="nerf", ndim=3))(
        jnp.asarray(x)
    )
    _within_1e_6(got, posenc.encode(x, 3 * (1 + 2 * 6), preset="nerf", ndim=3, dtype=np.float64))
    assert np.array_equal(_np(posenc.encode(jnp.asarray(x), 39, preset="nerf", ndim=3)), want)
    strict_got = posenc.encode(xps.asarray(x), 3 * (1 + 2 * 6), preset="nerf", ndim=3)
    assert (np.abs(_np(strict_got) - want) <= np.spacing(np.abs(want))).all()
