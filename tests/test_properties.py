"""Properties over presets x sizes x offsets x dtypes x backends (hypothesis, derandomized).

Every result is finite and equals the float64 reference, written from the original's formula
(`tests/reference.py`), rounded once to the output dtype; every rejection is a `PosencError`
that names the argument. (That every array library gives the same bits: test_backends.py.)
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import posenc
from tests import reference as ref
from tests.helpers import assert_correctly_rounded, dtype_for, raises

DTYPES = ["float64", "float32", "float16", "bfloat16"]


def _reference_error(largest_position: float) -> float:
    """What a float64 reference errs by: its frequencies exp(-k ln(base) / m) carry a relative
    error of a few k ulp, so an angle p * omega_k errs by p * omega_k * k * 2^-52 at most, which
    peaks below p * 2^-53 * (a small constant) over k."""
    return (abs(largest_position) + 1) * 2.0**-50


def _slack(largest_position: float, dtype: str) -> float:
    """The reference's error, plus for float64 output posenc's own: its float64 values carry
    the rounding of the phasor products they come from, measured below (|p| + 2^16) 2^-52
    (0.67 of it at most over 320 random rows); 4x that is allowed. Narrower outputs round those
    values once, far below their half ulp."""
    own = (abs(largest_position) + 2**16) * 2.0**-50 if dtype == "float64" else 0.0
    return _reference_error(largest_position) + own


@given(
    preset=st.sampled_from(sorted(ref.ONE_D)),
    n=st.integers(1, 40),
    d=st.integers(4, 96),
    offset=st.one_of(st.integers(-300, 300), st.integers(-(2**24), 2**24)),
    dtype=st.sampled_from(DTYPES),
)
def test_tables_are_the_reference_rounded_once(preset, n, d, offset, dtype):
    reference, widths = ref.ONE_D[preset]
    d -= d % 2 if widths == "even" else 0
    if preset == "timestep":  # diffusers encodes real t >= 0 (fractional in the next test)
        offset = abs(offset)
    got = posenc.table(
        n,
        d,
        preset=preset,
        offset=offset,
        dtype=dtype_for("numpy", dtype),
        **ref.ONE_D_OPTIONS.get(preset, {}),
    )
    want = reference(n, d, offset)
    largest = max(abs(offset), abs(offset + n - 1))
    assert_correctly_rounded(got, want, slack=_slack(largest, dtype))


@given(
    t=st.lists(st.floats(0, 1e5, allow_subnormal=False), min_size=1, max_size=12),
    d=st.integers(4, 64),
    dtype=st.sampled_from(DTYPES),
)
def test_real_timesteps_are_the_reference_rounded_once(t, d, dtype):
    t = np.asarray(t, dtype=np.float64)
    got = posenc.encode(t, d, preset="timestep", dtype=dtype_for("numpy", dtype))
    assert_correctly_rounded(got, ref.timestep(t, d), slack=_slack(float(t.max()), dtype))


GRIDS = {
    "mae": (lambda s, d: ref.mae(d, s), 4),
    "timm-2d": (lambda s, d: ref.timm_2d(s, d), 4),
    "hf-2d": (lambda s, d: ref.hf_2d(s[0], s[1], d), 4),
    "t2t-nd": (lambda s, d: ref.t2t_nd(s, d), 4),
    "tatp22": (lambda s, d: ref.tatp22(s, d), 1),
}


@given(
    preset=st.sampled_from(sorted(GRIDS)),
    shape=st.tuples(st.integers(1, 12), st.integers(1, 12)),
    d=st.integers(8, 96),
    dtype=st.sampled_from(DTYPES),
)
def test_grids_are_the_reference_rounded_once(preset, shape, d, dtype):
    reference, multiple = GRIDS[preset]
    d -= d % multiple
    if preset == "mae" and shape[0] != shape[1]:
        shape = (shape[0], shape[0])  # MAE's reference takes square grids
    got = posenc.grid(shape, d, preset=preset, dtype=dtype_for("numpy", dtype))
    assert_correctly_rounded(got, reference(shape, d), slack=_slack(12, dtype))


# every rejection names the argument ----------------------------------------------------------

BAD_VALUES = st.sampled_from(
    [-1, 0.5, "3", True, None, 10**30, 10**400, math.nan, math.inf, -math.inf, 1j, [1], "bogus"]
)
# argument -> a call with it set to the value; arguments that take a real accept some ints
CALLS = {
    "length": lambda v: posenc.table(v, 8),
    "dim": lambda v: posenc.table(4, v),
    "offset": lambda v: posenc.table(4, 8, offset=v),
    "base": lambda v: posenc.table(4, 8, base=v),
    "max_timescale": lambda v: posenc.table(4, 8, preset="tensor2tensor", max_timescale=v),
    "padding_idx": lambda v: posenc.table(4, 8, preset="fairseq", padding_idx=v),
    "scale": lambda v: posenc.table(4, 8, preset="timestep", scale=v),
    "max_period": lambda v: posenc.table(4, 8, preset="timestep", max_period=v),
    "flip_sin_to_cos": lambda v: posenc.table(4, 8, preset="timestep", flip_sin_to_cos=v),
    "cls_token": lambda v: posenc.grid((2, 2), 16, preset="mae", cls_token=v),
    "shape": lambda v: posenc.grid((2, v), 16, preset="mae"),
    "channels": lambda v: posenc.table(4, 8, channels=v),
    "dtype": lambda v: posenc.table(4, 8, dtype=v),
    "preset": lambda v: posenc.table(4, 8, preset=v),
}
ACCEPTED = {  # values that are valid for an argument, so not a rejection to check
    "length": {0},  # an empty table
    "offset": {-1, 0.5},
    "base": {0.5, 10**30},
    "max_timescale": {0.5, 10**30},
    "padding_idx": {None},
    "scale": {-1, 0.5},
    "max_period": {0.5, 10**30},
    "channels": {None},
    "dtype": {None},
    "flip_sin_to_cos": {True},
    "cls_token": {True},
}


@given(argument=st.sampled_from(sorted(CALLS)), value=BAD_VALUES)
def test_every_rejection_names_the_argument(argument, value):
    accepted = ACCEPTED.get(argument, set())
    if any(value is a or (type(value) is type(a) and value == a) for a in accepted):
        CALLS[argument](value)  # valid: must simply work
        return
    name = "`shape" if argument == "shape" else f"`{argument}`"  # shape names the axis too
    with raises(name) as info:
        CALLS[argument](value)
    assert "Traceback" not in str(info.value)
