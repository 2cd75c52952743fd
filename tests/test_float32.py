"""The float32-only evaluator (posenc.evaluate.float32): float32 arithmetic alone, within
1e-6 of the exact encoding (mpmath) at positions below 2^24, where plain float32 errs by up
to 0.3."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import posenc
from posenc.evaluate import direct as _direct
from posenc.evaluate import float32 as _float32
from posenc.evaluate.libs.numpy import NumpyBackend
from posenc.spec.layout import channel_plan
from tests import reference as ref

mpmath.mp.prec = 120
RNG = np.random.default_rng(7)
POSITIONS = {
    "integers to 2^24": RNG.integers(-(2**24) + 1, 2**24, 120).astype(np.float32),
    "near 2^24": (2**24 - 1 - np.arange(40)).astype(np.float32),
    "near -2^24": (-(2**24) + 1 + np.arange(40)).astype(np.float32),
    "reals to 2^20": RNG.uniform(-(2**20), 2**20, 120).astype(np.float32),
    "small reals": RNG.uniform(-3, 3, 120).astype(np.float32),
}


def _exact(x: np.ndarray, omega: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    s = np.empty((len(x), len(omega)))
    c = np.empty_like(s)
    for n, p in enumerate(x):
        for u, w in enumerate(omega):
            a = mpmath.mpf(float(p)) * mpmath.mpf(w)
            s[n, u], c[n, u] = float(mpmath.sin(a)), float(mpmath.cos(a))
    return s, c


@pytest.mark.parametrize("where", sorted(POSITIONS))
@pytest.mark.parametrize(
    ("preset", "dim", "options"),
    [
        ("vaswani", 32, {}),
        ("whisper", 24, {}),
        ("timestep", 16, {"scale": 1000.0}),  # frequencies up to 1000
        ("tensor2tensor", 16, {"min_timescale": 0.01}),  # up to 100
    ],
)
def test_within_1e_6_of_mpmath(where, preset, dim, options):
    x = POSITIONS[where]
    enc = posenc.preset(preset).resolve(options, grid=False)
    omega = channel_plan(enc, dim, 1, preset, None).constants.omega
    if preset in ("timestep", "tensor2tensor") and where != "small reals":
        x = (x / 64).astype(np.float32)  # angles within the 2^27 rad rule
    s, c = _float32.sincos(NumpyBackend(), x[:, None], omega)
    assert s.dtype == np.float32
    want_s, want_c = _exact(x, omega)
    err = max(np.abs(s - want_s).max(), np.abs(c - want_c).max())
    assert err < 1e-6, err
    plain = np.sin(x[:, None] * np.asarray(omega, np.float32))
    if where == "integers to 2^24" and preset in ("vaswani", "whisper"):  # plain is far off
        assert np.abs(plain - want_s).max() > 1e-2


def test_phases_and_real_steps_of_grids():
    """A progression start + i * step at frequencies w: the integer i at step * w, phase
    start * w; a real step (diffusers' interpolation) costs no accuracy."""
    omega = tuple(10000.0 ** (-k / 16) for k in range(16))
    start, step = 12.345678, 1 / 0.7
    i = np.arange(0, 5000, 7, dtype=np.float32)
    s, _ = _float32.sincos(
        NumpyBackend(), i[:, None], tuple(step * w for w in omega), tuple(start * w for w in omega)
    )
    positions = [mpmath.mpf(start) + int(k) * mpmath.mpf(step) for k in i]
    want = np.array([[float(mpmath.sin(p * mpmath.mpf(w))) for w in omega] for p in positions])
    assert np.abs(s - want).max() < 1e-6


def test_tables_through_the_direct_formula_in_float32():
    plan = channel_plan(posenc.preset("vaswani").encoding, 64, 1, "vaswani", None)
    x = np.arange(16_000_000, 16_000_256, dtype=np.int64)[:, None]
    got = _direct.points(NumpyBackend(), x, plan, np.float32, float32_only=True)
    want = posenc.encode(x[:, 0], 64, dtype=np.float64)
    assert got.dtype == np.float32
    assert np.abs(got - want).max() < 1e-6


LAYOUTS = [  # (preset, dim, options, reference of positions p, the arrangement it takes)
    ("vaswani", 64, {}, lambda p: ref.vaswani(len(p), 64, offset=p[0]), "interleaved"),
    ("whisper", 64, {}, lambda p: ref.whisper(len(p), 64, offset=p[0]), "halves"),
    (
        "timestep",
        64,
        {"flip_sin_to_cos": True, "downscale_freq_shift": 0},
        lambda p: ref.timestep(p, 64, flip_sin_to_cos=True, downscale_freq_shift=0),
        "flipped",
    ),
    ("fairseq", 65, {}, lambda p: ref.fairseq(len(p), 65, offset=p[0]), "gather"),  # a zero pad
]


@pytest.mark.parametrize(("preset", "dim", "options", "want", "kind"), LAYOUTS)
def test_every_channel_arrangement_in_float32(preset, dim, options, want, kind):
    """The direct formula puts the sines and cosines in channel order by a stack, a
    concatenation or (any other layout) a gather; each within 1e-6 of the reference."""
    enc = posenc.preset(preset).resolve(options, grid=False)
    plan = channel_plan(enc, dim, 1, preset, None)
    assert plan.constants.arrangement == kind
    p = np.arange(70_000, 70_300)
    got = _direct.points(NumpyBackend(), p[:, None], plan, np.float32, float32_only=True)
    assert got.dtype == np.float32
    assert np.abs(got - want(p.astype(np.float64))).max() < 1e-6


def test_the_constants_are_exact_pieces():
    """Per frequency, checked with exact rationals: the turns of 4096 w / 2 pi and of
    w / 2 pi, whole turns dropped, as a multiple of 2^-12, one of 2^-23 (at most 2^-13) and a
    float32 rest; w / 2 pi itself as two pieces of 12 significant bits and a rest."""
    from fractions import Fraction

    two_pi = Fraction(mpmath.nstr(2 * mpmath.pi, 60))
    for w in (10000.0 ** (-3 / 32), 1.0, 1000.0, 3e-9):
        a1, a2, a3, w1, w2, w3, t1, t2, t3 = (c[0] for c in _float32.constants((w,)))
        turns = Fraction(w) / two_pi
        for scale, (x1, x2, x3) in ((4096, (a1, a2, a3)), (1, (w1, w2, w3))):
            assert (Fraction(x1) * 2**12).denominator == 1
            assert abs(x1) <= 0.5
            assert (Fraction(x2) * 2**23).denominator == 1
            assert abs(x2) <= 2**-13
            exact = scale * turns - round(scale * turns)
            total = Fraction(x1) + Fraction(x2) + Fraction(x3)
            assert abs(total - exact) <= Fraction(1, 2**48)
        for piece in (t1, t2):
            mantissa = Fraction(piece)
            while mantissa.denominator != 1:
                mantissa *= 2
            assert mantissa.numerator.bit_length() <= 12 or piece == 0
        total = Fraction(t1) + Fraction(t2) + Fraction(t3)
        assert abs(total - turns) <= turns * Fraction(1, 2**47)


@pytest.mark.parametrize(("start", "step"), [(16_000_000.0, 1.0), (0.0, 1 / 0.7), (-5000.5, 3.0)])
def test_progressions_by_angle_sums_stay_within_1e_6(start, step):
    """Concrete progressions join a table of 64-row block starts and one of 64 offsets by the
    angle-sum identities; the result stays within 1e-6 of float64."""
    from posenc.evaluate.positions import Progression

    plan = channel_plan(posenc.preset("vaswani").encoding, 64, 1, "vaswani", None)
    prog = Progression(start, step, 1000)
    got = _direct.grid(NumpyBackend(), [prog], [0], plan, np.float32, None, float32_only=True)
    want = posenc.encode(start + np.arange(1000) * step, 64, dtype=np.float64)
    assert got.dtype == np.float32
    assert np.abs(got - want).max() < 1e-6
