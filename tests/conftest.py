"""Hypothesis runs derandomized in CI (the same 150 examples per property every run, no
database), so the property tests are deterministic and bounded; HYPOTHESIS_PROFILE=explore
draws 2000 fresh random examples per property.

The shared fixtures: `backend` (each array library, for the parity tests), `vaswani_exact`
(mpmath's tables for the accuracy and rounding tests), `quiet_transformers` and
`quiet_diffusers`."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from tests.environment import prepare
from tests.helpers import Backend, exact_table

prepare()

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    max_examples=150,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", deadline=None, max_examples=2000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", params=["numpy", "torch", "jax", "array-api-strict"])
def backend(request) -> Backend:
    """Each array library posenc takes (skipped where it is not installed): how a NumPy array
    becomes its array, its ``like=`` and float64 dtype, and which evaluator serves it. JAX
    runs without x64 (its default), so through the host engine: x64 on is JAX's own
    behaviour, tested in test_jax.py."""
    name = request.param
    if name == "numpy":
        return Backend(name, np.asarray, np.zeros(0), np.float64, engine=True)
    if name == "torch":
        torch = pytest.importorskip("torch")
        return Backend(
            name,
            lambda a: torch.from_numpy(np.ascontiguousarray(a)),
            torch.zeros(0),
            torch.float64,
            engine=True,
        )
    if name == "jax":
        jax = pytest.importorskip("jax")
        jnp = pytest.importorskip("jax.numpy")
        return Backend(
            name,
            jnp.asarray,
            jnp.zeros(0),
            None,
            engine=True,
            strict=lambda: jax.numpy_dtype_promotion("strict"),
            jit=jax.jit,
        )
    xps = pytest.importorskip("array_api_strict")
    return Backend(name, xps.asarray, xps.asarray([0.0]), xps.float64, engine=False)


POSITIONS_INT = [
    0,
    1,
    1023,
    99_999,
    1_000_003,
    2**24 - 1,
    *np.random.default_rng(0).integers(-(2**24) + 1, 2**24, 40).tolist(),
]
POSITIONS_REAL = [
    0.5,
    1023.25,
    1e5 + 1 / 3,
    16_777_215.5,
    *np.random.default_rng(1).uniform(-(2**24), 2**24, 40).tolist(),
]


@pytest.fixture(scope="session")
def vaswani_exact() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"int" | "real": (positions, their width-64 table from mpmath)}``: positions spread
    over ``(-2^24, 2^24)``, integer and real."""
    return {
        "int": (np.array(POSITIONS_INT), exact_table(POSITIONS_INT, 64)),
        "real": (np.array(POSITIONS_REAL), exact_table(POSITIONS_REAL, 64)),
    }


@pytest.fixture
def float32_only():
    """The float32-only evaluator (MPS, exported graphs: no float64), forced on the CPU by
    ``posenc.float32_only()`` for the test: the direct formula, in float32 alone."""
    import posenc

    with posenc.float32_only():
        yield


@pytest.fixture
def quiet_transformers():
    """transformers, its logging at errors only (its notices about configs would print)."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers


@pytest.fixture
def quiet_diffusers():
    """diffusers, its logging at errors only (its notices about configs would print)."""
    diffusers = pytest.importorskip("diffusers")
    diffusers.utils.logging.set_verbosity_error()
    return diffusers
