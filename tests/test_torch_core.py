"""The core's PyTorch path: same numbers as the NumPy reference path, in torch's dtypes."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests import reference as ref
from tests.helpers import within_ulps

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    "preset", ["vaswani", "tensor2tensor", "fairseq", "whisper", "marian", "timestep", "tatp22"]
)
def test_table_torch_matches_numpy(preset):
    got = posenc.table(3000, 64, preset=preset, dtype=torch.float32, offset=5)
    assert isinstance(got, torch.Tensor)
    assert got.dtype == torch.float32
    within_ulps(got, posenc.table(3000, 64, preset=preset, offset=5), min_equal=0.999)


@pytest.mark.parametrize(
    ("preset", "shape", "dim"),
    [
        ("mae", (14, 14), 64),
        ("diffusers-3d", (3, 4, 5), 64),
        ("timm-2d", (6, 9), 32),
        ("t2t-nd", (4, 5, 6), 24),
    ],
)
def test_grid_torch_matches_numpy(preset, shape, dim):
    got = posenc.grid(shape, dim, preset=preset, device="cpu")
    assert isinstance(got, torch.Tensor)
    assert got.dtype == torch.get_default_dtype()
    within_ulps(got, posenc.grid(shape, dim, preset=preset), min_equal=0.999)


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


def test_detr_torch_mask_gives_nchw_tensor():
    mask = torch.zeros(2, 5, 7, dtype=torch.bool)
    mask[1, 3:, :] = True
    mask[1, :, 4:] = True
    got = posenc.detr(mask, 64, normalize=True, dtype=torch.float64)
    assert isinstance(got, torch.Tensor)
    assert got.shape == (2, 64, 5, 7)
    want = ref.detr(mask.numpy(), 32, normalize=True)
    assert np.abs(got.numpy() - want).max() < 1e-9


def test_fairseq_positions_torch():
    tokens = torch.tensor([[5, 6, 1, 1], [1, 1, 8, 9]])
    pos = posenc.fairseq_positions(tokens, padding_idx=1)
    assert pos.tolist() == [[2, 3, 1, 1], [1, 1, 2, 3]]
    emb = posenc.encode(pos, 8, preset="fairseq", padding_idx=1)
    assert not emb[0, 2:].any()
    assert emb[0, 0].any()


def test_bfloat16_table_is_float64_correctly_rounded_not_double_rounded():
    got = posenc.table(4096, 64, dtype=torch.bfloat16)
    exact = torch.from_numpy(posenc.table(4096, 64, dtype=np.float64))
    naive = exact.float().to(torch.bfloat16)  # double rounding
    # every value is one of the two bf16 neighbours of the exact value, the nearer one
    err_ours = (got.double() - exact).abs()
    err_naive = (naive.double() - exact).abs()
    assert (err_ours <= err_naive).all()
    assert (err_ours < err_naive).sum() > 0  # the double-rounding cases exist and are fixed
