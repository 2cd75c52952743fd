"""JAX's own behaviour: jit with traced positions, vmap, no host callback, bfloat16, x64 on
(the device evaluates), errors at trace time, all under strict dtype promotion. (That JAX
gives NumPy's numbers for tables, grids (under jit), DETR, NeRF and RoPE: test_backends.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.helpers import to_numpy

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@pytest.fixture
def strict():
    with jax.numpy_dtype_promotion("strict"):
        yield


def _within_1e_6(got, want64: np.ndarray) -> None:
    """Traced positions run the float32-only formula on the device: within 1e-6."""
    got = to_numpy(got)
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


def test_nerf_coordinates_under_jit(strict):
    x = np.random.default_rng(0).uniform(-1, 1, (40, 3)).astype(np.float32)
    got = jax.jit(lambda c: posenc.encode(c, 3 * (1 + 2 * 6), preset="nerf", ndim=3))(
        jnp.asarray(x)
    )
    _within_1e_6(got, posenc.encode(x, 3 * (1 + 2 * 6), preset="nerf", ndim=3, dtype=np.float64))


def test_jax_bfloat16_is_correctly_rounded(strict):
    got = posenc.encode(jnp.arange(2000), 64, dtype=jnp.bfloat16)
    assert got.dtype == jnp.bfloat16
    torch = pytest.importorskip("torch")
    want = posenc.table(2000, 64, dtype=torch.bfloat16).float().numpy()
    assert np.array_equal(to_numpy(got).astype(np.float32), want)


def test_x64_mode_evaluates_on_the_device(strict):
    with jax.enable_x64(True):
        fn = jax.jit(lambda p: posenc.encode(p, 64, preset="fairseq", padding_idx=1))
        got = fn(jnp.arange(3000))
        assert got.dtype == jnp.float32
        want = posenc.table(3000, 64, preset="fairseq", padding_idx=1)
        assert (np.abs(to_numpy(got) - want) <= np.spacing(np.abs(want))).all()
        assert not to_numpy(got)[1].any()
        half = posenc.encode(jnp.arange(3000), 64, dtype=jnp.bfloat16)
        torch = pytest.importorskip("torch")
        exact = posenc.table(3000, 64, dtype=np.float64)
        ref16 = torch.from_numpy(exact).to(torch.bfloat16)  # a plain cast: may double-round
        ours = np.asarray(to_numpy(half).astype(np.float64))
        assert (np.abs(ours - exact) <= np.abs(ref16.double().numpy() - exact)).all()


def test_jax_errors_at_trace_time():
    with pytest.raises(posenc.PosencError, match="multiple of 2"):
        jax.jit(lambda p: posenc.encode(p, 7))(jnp.arange(3))
    with pytest.raises(posenc.PosencError, match="finite"):
        posenc.encode(jnp.asarray([0.0, jnp.nan]), 8)
    with pytest.raises(posenc.PosencError, match="last axis of 2"):
        posenc.encode(jnp.arange(3), 8, preset="mae")
