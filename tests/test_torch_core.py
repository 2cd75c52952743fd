"""The core's PyTorch path: results follow the positions' library, device and dtype; real
timesteps in float64; fairseq's positions from tokens. (That torch gives NumPy's numbers:
test_backends.py; its 16-bit rounding: test_rounding.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests import reference as ref
from tests.helpers import within_ulps

torch = pytest.importorskip("torch")


def test_encode_follows_positions_library_and_dtype():
    pos = torch.tensor([[0, 5, 17], [3, 2, 1]])
    got = posenc.encode(pos, 16)
    assert isinstance(got, torch.Tensor)
    assert got.shape == (2, 3, 16)
    assert got.dtype == torch.float32
    assert got.device == pos.device
    within_ulps(got, posenc.encode(pos.numpy(), 16), min_equal=0.999)
    half = posenc.encode(pos, 16, dtype=torch.float16)
    assert half.dtype == torch.float16


def test_timestep_torch_reals():
    t = torch.tensor([0.0, 1.5, 999.0, 250.25], dtype=torch.float64)
    got = posenc.encode(
        t, 320, preset="timestep", flip_sin_to_cos=True, downscale_freq_shift=0, dtype=torch.float64
    )
    want = ref.timestep(t.numpy(), 320, flip_sin_to_cos=True, downscale_freq_shift=0)
    assert np.abs(got.numpy() - want).max() < 1e-9


def test_fairseq_positions_torch():
    tokens = torch.tensor([[5, 6, 1, 1], [1, 1, 8, 9]])
    pos = posenc.fairseq_positions(tokens, padding_idx=1)
    assert pos.tolist() == [[2, 3, 1, 1], [1, 1, 2, 3]]
    emb = posenc.encode(pos, 8, preset="fairseq", padding_idx=1)
    assert not emb[0, 2:].any()
    assert emb[0, 0].any()
