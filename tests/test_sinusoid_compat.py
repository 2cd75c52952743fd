"""``compat="original"``: the sinusoidal presets' originals' own float32 numbers, bit for bit
against the upstream code (transformers' Whisper and fairseq ports, diffusers, the PyTorch
tutorial and labml, whose code has no package and is written out as published: labml here,
the tutorial in helpers.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from tests.helpers import raises, tutorial_table

torch = pytest.importorskip("torch")


def labml(d_model, max_len):
    """labml's get_positional_encoding, as published."""
    encodings = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
    div_term = torch.exp(two_i * -(math.log(10000.0) / d_model))
    encodings[:, 0::2] = torch.sin(position * div_term)
    encodings[:, 1::2] = torch.cos(position * div_term)
    return encodings


def same(got, want):
    got = torch.as_tensor(got)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert torch.equal(got, want), (got.double() - want.double()).abs().max()


@pytest.mark.parametrize(("length", "dim"), [(5000, 512), (1500, 384), (77, 64)])
def test_vaswani_is_the_tutorial_and_labml(length, dim):
    got = posenc.table(length, dim, compat="original")
    same(got, tutorial_table(length, dim)[:, 0])
    same(got, labml(dim, length))


@pytest.mark.parametrize(("length", "dim", "timescale"), [(1500, 384, 10000), (1500, 1280, 10000),
                                                          (448, 512, 500)])  # fmt: skip
def test_whisper_is_its_sinusoids(length, dim, timescale):
    whisper = pytest.importorskip("transformers.models.whisper.modeling_whisper")
    want = whisper.sinusoids(length, dim, max_timescale=timescale)
    same(posenc.table(length, dim, preset="whisper", max_timescale=timescale, compat="original"),
         want)  # fmt: skip
    exact = posenc.table(length, dim, preset="whisper", max_timescale=timescale, dtype=np.float64)
    if (length, dim) == (1500, 384):  # what the switch is for: the 9.6e-5
        assert 9e-5 < np.abs(want.double().numpy() - exact).max() < 1e-4


@pytest.mark.parametrize("dim", [16, 17, 512])
@pytest.mark.parametrize("padding_idx", [None, 1])
def test_fairseq_is_get_embedding(dim, padding_idx):
    m2m = pytest.importorskip("transformers.models.m2m_100.modeling_m2m_100")
    want = m2m.M2M100SinusoidalPositionalEmbedding.get_embedding(3000, dim, padding_idx)
    got = posenc.table(3000, dim, preset="fairseq", padding_idx=padding_idx, compat="original",
                       dtype=torch.float32)  # fmt: skip
    same(got, want)
    rows = torch.tensor([[5, 1, 2999], [1, 1, 7]])  # any positions: the table's rows
    got = posenc.encode(rows, dim, preset="fairseq", padding_idx=padding_idx, compat="original")
    same(got, want[rows])


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"flip_sin_to_cos": True, "downscale_freq_shift": 0},
        {"flip_sin_to_cos": True, "downscale_freq_shift": 1, "scale": 1000.0},
        {"max_period": 500.0, "downscale_freq_shift": 0.5},
    ],
)
@pytest.mark.parametrize("dim", [320, 256, 33])
def test_timestep_is_diffusers(options, dim):
    emb = pytest.importorskip("diffusers.models.embeddings")
    t = torch.cat([torch.arange(1000, dtype=torch.float32), torch.rand(100) * 999])
    want = emb.get_timestep_embedding(t, dim, **options)
    same(posenc.encode(t, dim, preset="timestep", compat="original", **options), want)
    same(posenc.encode(t.long(), dim, preset="timestep", compat="original", **options),
         emb.get_timestep_embedding(t.long(), dim, **options))  # fmt: skip


def test_dtypes_and_libraries_follow_the_call():
    ids = np.arange(10, 20)
    out = posenc.encode(ids, 64, preset="whisper", compat="original")
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.float32
    half = posenc.encode(torch.from_numpy(ids), 64, preset="whisper", compat="original",
                         dtype=torch.bfloat16)  # fmt: skip
    assert half.dtype == torch.bfloat16
    assert torch.equal(half, torch.from_numpy(out).to(torch.bfloat16))  # the original's .to()
    assert np.array_equal(posenc.table(10, 64, preset="whisper", offset=10, compat="original"), out)


def test_compat_errors_name_the_argument():
    with raises("`compat='original'` applies to presets", "'marian'", "whisper"):
        posenc.table(8, 64, preset="marian", compat="original")
    with raises("`compat`", "'original'", "'fairseq'"):
        posenc.table(8, 64, preset="fairseq", compat="fairseq")
    with raises("`channels` does not apply with `compat`"):
        posenc.table(8, 64, preset="whisper", compat="original", channels=slice(0, 32))
    with raises("`positions` must stay below 2^24 with `compat`", "1.67772e+07"):
        posenc.encode([2**24 + 1], 64, preset="whisper", compat="original")
    with raises("`dim` must be even for whisper's sinusoids", "63"):
        posenc.table(8, 63, preset="whisper", compat="original")
