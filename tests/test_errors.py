"""Bad arguments fail early with one exception type that names the argument, rule and value."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from posenc import PosencError
from tests.helpers import raises


def test_error_type_is_a_value_error():
    assert issubclass(PosencError, ValueError)


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        (lambda: posenc.table(-1, 8), ["`length`", ">= 0", "-1"]),
        (lambda: posenc.table(2.5, 8), ["`length`", "integer", "2.5"]),
        (lambda: posenc.table(True, 8), ["`length`", "integer", "True"]),
        (lambda: posenc.table(10, 0), ["`dim`", ">= 1", "0"]),
        (lambda: posenc.table(10, 7), ["`dim`", "multiple of 2", "'vaswani'", "got 7"]),
        (lambda: posenc.table(10, 7, preset="whisper"), ["`dim`", "multiple of 2", "got 7"]),
        (lambda: posenc.table(10, 8, preset="vasvani"), ["`preset`", "unknown", "'vaswani'"]),
        (lambda: posenc.table(10, 8, bse=3), ["unknown option `bse`", "'base'"]),
        (lambda: posenc.table(10, 8, preset="whisper", max_timescal=3), ["'max_timescale'"]),
        (lambda: posenc.table(10, 8, preset="mae"), ["encodes 2 axes", "posenc.grid"]),
        (
            lambda: posenc.table(10, 2, preset="whisper"),
            ["too small", "smallest width it takes is 4"],
        ),
        (lambda: posenc.table(10, 3, preset="fairseq"), ["too small", "dim=3", "is 4"]),
        (lambda: posenc.table(10, 8, offset=math.nan), ["`offset`", "finite"]),
        (lambda: posenc.table(10, 8, base=-1.0), ["`base`", "> 0", "-1"]),
        (lambda: posenc.table(10, 8, dtype=np.int32), ["`dtype`", "float16", "int32"]),
        (
            lambda: posenc.table(10, 8, preset="timestep", flip_sin_to_cos=1),
            ["`flip_sin_to_cos`", "True or False"],
        ),
        (lambda: posenc.grid((14, 14), 30), ["`dim`", "multiple of 4", "'mae'", "got 30"]),
        (lambda: posenc.grid((2, 4, 4), 24, preset="diffusers-3d"), ["multiple of 16", "got 24"]),
        (lambda: posenc.grid((3, 3), 4, preset="t2t-nd"), ["too small", "n=1"]),
        (
            lambda: posenc.grid((3, 3), 3, preset="tatp22", cls_token=True),
            ["unknown option `cls_token`"],
        ),
        (lambda: posenc.grid((3, 3, 3), 8, preset="mae"), ["`shape`", "2 axes"]),
        (lambda: posenc.grid((3, -3), 8), ["`shape[1]`", ">= 0"]),
        (lambda: posenc.grid("3x3", 8), ["`shape`", "'3x3'"]),
        (
            lambda: posenc.grid((4, 4), 8, preset="nerf"),
            ["multiple of 4", "included inputs", "got 8"],
        ),
        (lambda: posenc.encode([1.0, math.nan], 8), ["`positions`", "finite", "nan"]),
        (lambda: posenc.encode([1.0, math.inf], 8), ["`positions`", "finite", "inf"]),
        (lambda: posenc.encode(["a"], 8), ["`positions`", "numbers"]),
        (lambda: posenc.encode([True, False], 8), ["`positions`", "bool"]),
        (lambda: posenc.encode([1 + 2j], 8), ["`positions`", "complex"]),
        (
            lambda: posenc.encode([[0, 1]], 8, preset="mae", cls_token=True),
            ["`cls_token`", "grid() only"],
        ),
        (lambda: posenc.encode([0, 1, 2], 8, preset="mae"), ["last axis of 2", "(3,)"]),
        (lambda: posenc.encode([0, 1], 8, preset="mae", ndim=3), ["`ndim`", "must be 2", "3"]),
        (
            lambda: posenc.detr(np.zeros((1, 4, 4), bool), 64, scale=3.0),
            ["`scale`", "normalize=True"],
        ),
        (lambda: posenc.detr(np.zeros((4, 4), bool), 64), ["`mask`", "[batch, H, W]", "(4, 4)"]),
        (lambda: posenc.detr(np.zeros((1, 4, 4)), 64), ["`mask`", "boolean", "float64"]),
        (lambda: posenc.detr(np.zeros((1, 4, 4), bool), 30), ["`dim`", "multiple of 4", "30"]),
        (lambda: posenc.preset("nope"), ["`preset` 'nope' is unknown", "presets are"]),
    ],
)
def test_bad_arguments(call, fragments):
    with raises(*fragments):
        call()
