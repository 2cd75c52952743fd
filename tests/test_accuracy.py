"""Accuracy against mpmath: float32 within 1e-7 and 16-bit outputs correctly rounded.

The exact value is ``sin(p * omega_k)`` with ``omega_k = base ** (-k / den)`` evaluated in
60-digit arithmetic. posenc forms angles in float64, so its pre-rounding values are within
ANGLE_BOUND of the exact ones for ``|p| < 2^24``; a 16-bit result must equal the correctly
rounded exact value wherever the exact value is farther than that bound from a rounding
midpoint (elsewhere the rounding is not decided at float64 precision; those elements are
counted and must be rare).
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import posenc

mpmath.mp.dps = 60
ANGLE_BOUND = 8e-9  # |x| < 2^24: angle error of the float64 path (2^24 * 2^-53 * a few)

FORMATS = {  # name: (significand bits, smallest normal exponent)
    "float32": (24, -126),
    "float16": (11, -14),
    "bfloat16": (8, -126),
}


def exact_table(positions, d: int, base: float = 10000.0) -> list[list[mpmath.mpf]]:
    """The vaswani encoding of each position, to 60 digits."""
    omegas = [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * k) / d) for k in range(d // 2)]
    rows = []
    for p in positions:
        mp_p = mpmath.mpf(float(p))  # the position value exactly as given
        row = []
        for w in omegas:
            a = mp_p * w
            row += [mpmath.sin(a), mpmath.cos(a)]
        rows.append(row)
    return rows


def round_to(x: mpmath.mpf, fmt: str) -> tuple[float, float]:
    """``x`` correctly rounded (nearest, ties to even), and its distance to a midpoint."""
    bits, emin = FORMATS[fmt]
    if x == 0:
        return 0.0, float("inf")
    e = int(mpmath.floor(mpmath.log(abs(x), 2)))
    while mpmath.ldexp(1, e) > abs(x):
        e -= 1
    while mpmath.ldexp(1, e + 1) <= abs(x):
        e += 1
    ulp = mpmath.ldexp(1, max(e, emin) - bits + 1)
    y = x / ulp
    f = mpmath.floor(y)
    frac = y - f
    if frac > 0.5 or (frac == 0.5 and int(f) % 2):
        f += 1
    return float(f * ulp), float(abs(frac - 0.5) * ulp)


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


@pytest.fixture(scope="module")
def exact():
    d = 64
    return {
        "int": (np.array(POSITIONS_INT), exact_table(POSITIONS_INT, d)),
        "real": (np.array(POSITIONS_REAL), exact_table(POSITIONS_REAL, d)),
    }


def _as_float64(t) -> np.ndarray:
    if hasattr(t, "detach"):
        return t.detach().float().double().numpy()
    return np.asarray(t, dtype=np.float64)


@pytest.mark.parametrize("kind", ["int", "real"])
@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_float32_within_1e7(exact, kind, lib):
    pos, rows = exact[kind]
    if lib == "torch":
        torch = pytest.importorskip("torch")
        pos = torch.as_tensor(pos)
    got = _as_float64(posenc.encode(pos, 64))
    want = np.array([[float(v) for v in row] for row in rows])
    err = np.abs(got - want).max()
    assert err <= 1e-7, err
    # and the rounding is the only error, to within the float64 angle bound
    half_ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64) / 2
    assert (np.abs(got - want) <= half_ulp + ANGLE_BOUND).all()


def test_table_large_offsets_float32():
    # a table starting deep into the sequence, through the coarse/fine product path
    offset = 2**24 - 300
    got = posenc.table(300, 16, offset=offset).astype(np.float64)
    rows = exact_table(range(offset, offset + 300), 16)
    want = np.array([[float(v) for v in row] for row in rows])
    assert np.abs(got - want).max() <= 1e-7


def _check_rounded(got: np.ndarray, rows, fmt: str) -> None:
    undecided = 0
    total = 0
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            total += 1
            want, margin = round_to(v, fmt)
            if margin < ANGLE_BOUND:
                undecided += 1
                continue
            assert got[i, j] == want, (i, j, float(v), got[i, j], want)
    assert undecided <= total // 200, f"{undecided} of {total} undecided"


@pytest.mark.parametrize("kind", ["int", "real"])
@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_sixteen_bit_correctly_rounded_torch(exact, kind, fmt):
    torch = pytest.importorskip("torch")
    pos, rows = exact[kind]
    got = posenc.encode(torch.as_tensor(pos), 64, dtype=getattr(torch, fmt))
    assert got.dtype == getattr(torch, fmt)
    _check_rounded(got.float().double().numpy(), rows, fmt)


@pytest.mark.parametrize("kind", ["int", "real"])
def test_float16_correctly_rounded_numpy(exact, kind):
    pos, rows = exact[kind]
    got = posenc.encode(pos, 64, dtype=np.float16)
    assert got.dtype == np.float16
    _check_rounded(got.astype(np.float64), rows, "float16")


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


def test_bfloat16_low_position_not_collapsed():
    # the trap in the originals: a bf16 position 1023 becomes 1024
    torch = pytest.importorskip("torch")
    got = posenc.table(1025, 8, dtype=torch.bfloat16)
    _check_rounded(got[1023:].double().numpy(), exact_table([1023, 1024], 8), "bfloat16")
    assert not torch.equal(got[1023], got[1024])
