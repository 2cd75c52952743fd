"""Hypothesis runs derandomized in CI (the same 150 examples per property every run, no
database), so the property tests are deterministic and bounded; HYPOTHESIS_PROFILE=explore
draws 2000 fresh random examples per property."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import BACKENDS

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


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    """``(name, make)``: each installed array library, and how it makes an input from NumPy."""
    return request.param, BACKENDS[request.param]
