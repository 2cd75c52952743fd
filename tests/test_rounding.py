"""16-bit rounding: every float16 and bfloat16 output is the exact value rounded once.

The hard cases are the values a cast through float32 rounds twice: those just off a float16 or
bfloat16 midpoint. Against mpmath's tables (`vaswani_exact`, and ``helpers.exact_table``): a
16-bit result is the exact value correctly rounded wherever posenc's float64 angles
(within ANGLE_BOUND of the exact ones for ``|p| < 2^24``) decide the rounding; elsewhere it is
undecided, and those values must be rare. Against values planted at, just above and just below
midpoints: the backend's roundings (round to odd, float32 ties stepped off the midpoint) are
ties-to-even's, and NumPy's one float64 -> float16 cast bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.helpers import ANGLE_BOUND, assert_correctly_rounded, exact_table

# posenc's error before rounding, against mpmath: its float64 angles' (none at angle 0, where
# the value is exactly 0); at most 1 value in 200 may lie nearer a midpoint than that
UNDECIDED = 1 / 200


def _slack(want: np.ndarray) -> np.ndarray:
    return np.where(want == 0, 0.0, ANGLE_BOUND)


# against mpmath


@pytest.mark.parametrize("kind", ["int", "real"])
@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_sixteen_bit_correctly_rounded_torch(vaswani_exact, kind, fmt):
    torch = pytest.importorskip("torch")
    pos, want = vaswani_exact[kind]
    got = posenc.encode(torch.as_tensor(pos), 64, dtype=getattr(torch, fmt))
    assert got.dtype == getattr(torch, fmt)
    assert_correctly_rounded(got, want, slack=_slack(want), max_undecided=UNDECIDED)


@pytest.mark.parametrize("kind", ["int", "real"])
def test_float16_correctly_rounded_numpy(vaswani_exact, kind):
    pos, want = vaswani_exact[kind]
    got = posenc.encode(pos, 64, dtype=np.float16)
    assert got.dtype == np.float16
    assert_correctly_rounded(got, want, slack=_slack(want), max_undecided=UNDECIDED)


def test_bfloat16_low_position_not_collapsed():
    # the trap in the originals: a bf16 position 1023 becomes 1024
    torch = pytest.importorskip("torch")
    got = posenc.table(1025, 8, dtype=torch.bfloat16)
    want = exact_table([1023, 1024], 8)
    assert_correctly_rounded(got[1023:], want, slack=_slack(want), max_undecided=UNDECIDED)
    assert not torch.equal(got[1023], got[1024])


# double rounding, and the values planted at midpoints


def test_round_to_odd_beats_double_rounding():
    """A value just above a bfloat16 midpoint that a float64->float32->bf16 cast rounds down."""
    torch = pytest.importorskip("torch")
    from posenc.evaluate.libs.torch import TorchBackend
    from posenc.evaluate.rounding import round_to_odd

    mid = 1.0 + 2.0**-8  # midpoint between bf16 1.0 and 1.0078125
    x = torch.tensor([mid + 2.0**-40, mid - 2.0**-40, mid], dtype=torch.float64)
    naive = x.to(torch.float32).to(torch.bfloat16).double().tolist()
    assert naive[0] == 1.0  # the trap: double rounding lands on the tie, then on even
    ours = round_to_odd(x, TorchBackend()).to(torch.bfloat16).double().tolist()
    assert ours == [1.0078125, 1.0, 1.0]


def test_bfloat16_table_is_float64_correctly_rounded_not_double_rounded():
    torch = pytest.importorskip("torch")
    got = posenc.table(4096, 64, dtype=torch.bfloat16)
    exact = torch.from_numpy(posenc.table(4096, 64, dtype=np.float64))
    naive = exact.float().to(torch.bfloat16)  # double rounding
    # every value is one of the two bf16 neighbours of the exact value, the nearer one
    err_ours = (got.double() - exact).abs()
    err_naive = (naive.double() - exact).abs()
    assert (err_ours <= err_naive).all()
    assert (err_ours < err_naive).sum() > 0  # the double-rounding cases exist and are fixed


@pytest.mark.parametrize("length", [80_000, 80_017])  # whole blocks of 64, and a tail
def test_bfloat16_rounding_is_correct_at_midpoints(length):
    """torch casts float64 to bfloat16 through float32, which is wrong only on bfloat16
    midpoints. The backend's rounding (float32 ties stepped off the midpoint, found block by
    block) against the float64 value rounded once (the nearer bfloat16 neighbour, ties to
    even), on values planted exactly at, just above and just below midpoints, and on exact
    midpoints of float64; in any order and length (the last block may be partial)."""
    torch = pytest.importorskip("torch")
    from posenc.evaluate.libs.torch import TorchBackend

    rng = np.random.default_rng(3)
    grid = torch.from_numpy(rng.uniform(-1, 1, 20_000)).to(torch.bfloat16).double()
    half = torch.from_numpy(np.spacing(grid.float().numpy()).astype(np.float64)) * 2**15
    x = torch.cat([grid + half, grid + half + 2**-40, grid + half - 2**-40, grid - half])
    x = torch.cat([x, torch.from_numpy(rng.uniform(-1, 1, length - x.numel()))])
    x = x[torch.from_numpy(rng.permutation(length))]
    x = x.view(-1, 7) if length % 7 == 0 else x
    got = TorchBackend(torch.bfloat16, torch.device("cpu")).rounded(x)
    got = got.to(torch.bfloat16).double()
    # the reference: the two bfloat16 neighbours of x, and the nearer one (ties to even)
    lo = x.to(torch.float32).to(torch.bfloat16).double()  # some neighbour; find both
    below = torch.where(
        lo <= x,
        lo,
        torch.nextafter(
            lo.to(torch.bfloat16), torch.tensor(-np.inf, dtype=torch.bfloat16)
        ).double(),
    )
    above = torch.nextafter(
        below.to(torch.bfloat16), torch.tensor(np.inf, dtype=torch.bfloat16)
    ).double()
    pick_above = (above - x < x - below) | (
        (above - x == x - below) & ((above.to(torch.bfloat16).view(torch.int16) & 1) == 0)
    )
    want = torch.where(pick_above, above, below)
    assert torch.equal(got, want)
    naive = x.to(torch.float32).to(torch.bfloat16).double()
    assert not torch.equal(naive, want)  # the planted values do catch double rounding


@pytest.mark.parametrize("factor", [1.0, 1.7, 2.0**-50, 2.0**-130, 2.0**120, 2.0**1000])
def test_bfloat16_tables_correctly_rounded_at_any_amplitude(factor):
    """A RoPE table in bfloat16, scaled by an attention factor inside and outside the range
    where the engine rounds by Veltkamp's split: every value is the float64 truth rounded
    once (checked by its bfloat16 neighbours), never NaN."""
    torch = pytest.importorskip("torch")
    scaling = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "attention_factor": factor,
    }
    ids = torch.arange(0, 40_000, 7)
    cos, sin = posenc.rope(ids, 64, scaling=scaling, dtype=torch.bfloat16)
    cos64, sin64 = posenc.rope(ids, 64, scaling=scaling, dtype=torch.float64)
    for got, truth in ((cos, cos64), (sin, sin64)):
        near = got.double()
        assert not near.isnan().any()
        if factor > 2.0**128:  # beyond bfloat16's range: rounding overflows to infinity
            assert torch.equal(got, truth.to(torch.bfloat16))
            continue
        err = (near - truth).abs()
        toward = torch.where(truth > near, np.inf, -np.inf).to(torch.bfloat16)
        step = (torch.nextafter(got, toward).double() - near).abs()  # on the truth's side
        assert bool((err <= step / 2 * (1 + 2**-20)).all()), float((err / step).max())


def test_float16_rounding_is_numpys_one_rounding():
    """torch's float16 tables: the float64 basis cast through float32, with the float32 values
    that land on a float16 midpoint stepped toward the exact value. Against NumPy's float64 ->
    float16 cast (one rounding, computed from the double's bits), bit for bit, signed zeros
    included: random values of every scale, values planted at, just above and below float16
    midpoints (normal and subnormal), the edges of the subnormal and overflow ranges, in two
    shapes (whole blocks of 64 values, and a partial last block)."""
    torch = pytest.importorskip("torch")
    from posenc.evaluate.libs.torch import TorchBackend

    rng = np.random.default_rng(5)
    normal = rng.uniform(-1, 1, 20_000).astype(np.float16).astype(np.float64)
    sub = rng.integers(-1023, 1024, 20_000) * 2.0**-24
    x = [rng.uniform(-1, 1, 50_000), rng.uniform(-2e-4, 2e-4, 50_000), rng.normal(0, 1e-7, 5000)]
    x += [rng.uniform(-6e4, 6e4, 5000), rng.uniform(-3e-8, 3e-8, 5000)]
    for grid in (normal, sub):
        half = np.spacing(grid.astype(np.float16)).astype(np.float64) / 2
        x += [grid + half, grid - half, grid + half * (1 + 2**-30), grid + half * (1 - 2**-30)]
    edges = [0.0, -0.0, 2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 65504.0, 65519.9, 65520.0]
    x = np.concatenate([*x, edges, np.negative(edges)])
    with np.errstate(over="ignore"):  # 65520 and past: inf, as it should
        want = x.astype(np.float16)
    for size in (x.size // 64 * 64, x.size):
        xt = torch.from_numpy(x[:size].copy())
        got = TorchBackend(torch.float16, torch.device("cpu")).rounded(xt)
        got16 = got.to(torch.float16).numpy()
        assert np.array_equal(got16.view(np.int16), want[:size].view(np.int16))
    naive = torch.from_numpy(x).to(torch.float16).numpy()
    assert not np.array_equal(naive.view(np.int16), want.view(np.int16))  # double rounding


TABLES16 = [(4096, 256, "vaswani"), (300, 64, "whisper"), (60000, 21, "nerf")]
TABLES16 += [(1000, 96, "tensor2tensor")]


def test_torch_float16_tables_are_numpys_bit_for_bit():
    """Two independent roundings agree bit for bit: torch's (through float32, midpoints
    stepped) and NumPy's cast."""
    torch = pytest.importorskip("torch")
    for rows, dim, preset in TABLES16:
        got = posenc.table(rows, dim, preset=preset, dtype=torch.float16)
        want = posenc.table(rows, dim, preset=preset, dtype=np.float16)
        assert np.array_equal(got.numpy().view(np.int16), want.view(np.int16))
