"""Against an original itself: PyPI ``positional-encodings`` (the ``tatp22`` preset).

The package computes in float32, so it differs from the exact value by float32 rounding of
its angles (about position * 6e-8); posenc must be within that of it, and nearer the exact
float64 reference than it is.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests import reference as ref

torch = pytest.importorskip("torch")
encodings = pytest.importorskip("positional_encodings.torch_encodings")


@pytest.mark.parametrize(
    ("cls", "shape"),
    [
        ("PositionalEncoding1D", (50,)),
        ("PositionalEncoding2D", (9, 13)),
        ("PositionalEncoding3D", (4, 5, 6)),
    ],
)
@pytest.mark.parametrize("channels", [7, 16, 30, 64])
def test_tatp22_matches_the_package(cls, shape, channels):
    module = getattr(encodings, cls)(channels)
    theirs = module(torch.zeros(1, *shape, channels))[0].double().numpy().reshape(-1, channels)
    ours = posenc.grid(shape, channels, preset="tatp22", dtype=np.float64)
    exact = ref.tatp22(shape, channels)
    assert np.abs(ours - theirs).max() < 2e-6
    assert np.abs(ours - exact).max() <= np.abs(theirs - exact).max() + 1e-12
