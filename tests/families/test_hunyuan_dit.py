"""HunyuanDiT (``preset="hunyuan-dit"``), its 2-D crop grid with the column block first:
``compat="diffusers"`` against ``get_2d_rotary_pos_embed`` bit for bit, the exact tables within
float32 rounding of a float64 reference, and diffusers' catalogued error off the origin."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.families.models import assert_exact
from tests.reference import axial_rope
from tests.reference import numpy_crop as _numpy_crop

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models import embeddings  # noqa: E402

# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize(
    ("size", "crop"),
    [((64, 64), ((0, 0), (32, 32))), ((64, 48), ((0, 4), (32, 28))), ((48, 64), ((4, 0), (28, 32))),
     ((37, 29), ((3, 1), (29, 31)))],
)  # fmt: skip
def test_hunyuan_dit(size, crop):
    h, w = size
    want = embeddings.get_2d_rotary_pos_embed(88, crop, (h, w), use_real=True)
    got = posenc.rope_grid((h, w), 88, preset="hunyuan-dit", crop=crop, compat="diffusers",
                           dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, x) for g, x in zip(got, want, strict=True))
    positions = [_numpy_crop(crop[0][0], crop[1][0], h), _numpy_crop(crop[0][1], crop[1][1], w)]
    ref = axial_rope((h, w), (44, 44), 1e4, (1, 0), positions)
    exact = posenc.rope_grid((h, w), 88, preset="hunyuan-dit", crop=crop)
    for g, r in zip(exact, ref, strict=True):
        assert_exact(g, r)
    torch_port = max(np.abs(x.double().numpy() - r).max() for x, r in zip(want, ref, strict=True))
    if crop[0] == (0, 0):  # diffusers' linspace is numpy's endpoint=False from 0 only
        assert torch_port < 1e-5
    else:  # the catalogued regression: 0.079 at 1024 x 768
        assert torch_port > 1e-2
