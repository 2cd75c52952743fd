"""Sines and cosines of ``x * w`` in float32 arithmetic alone, within 1e-6 of the truth.

For runtimes without float64: exported ONNX and TensorRT graphs, Apple's MPS, accelerators.
Plain float32 forms ``x * w`` with an error of ``|x w| 2^-24`` (6e-2 rad at x = 1e6), so the
angle is never formed whole. It is counted in turns (``x w / 2 pi``), where dropping whole
turns (``t - round(t)``) is exact, and built from exact pieces computed on the host:

- a position ``x`` (``|x| < 2^24``) is split on the device, exactly, into an integer
  ``i = 4096 h + l`` (``|h| <= 4096``, ``0 <= l < 4096``) and a fraction ``f = f1 + f2``
  (``f1`` a multiple of 2^-12, ``|f2| <= 2^-13``);
- the host gives, per frequency, the turns of ``4096 w`` and of ``w`` (whole turns dropped,
  so at most 1/2) as ``X1 + X2 + X3``: ``X1`` a multiple of 2^-12, ``X2`` of 2^-23 and at
  most 2^-13, ``X3`` a float32 rest below 2^-24; and the turns of ``w`` itself in pieces of
  12 significant bits, for the fraction;
- ``h A1 + l W1`` is then exact (a multiple of 2^-12 below 4096), and so is its whole turns
  dropped; adding ``h A2`` and ``l W2`` (multiples of 2^-23, at most 1/2 each) stays exact
  too: the sum is a multiple of 2^-23 below 2. The fraction's exact products join by
  error-free sums (TwoSum), and the small rest (``h A3``, ``l W3``, ``f2 w``...) by a plain
  sum;
- the turns, whole ones dropped, are turned into an angle in [-pi, pi]: their multiple of
  2^-12 times 2 pi to 12 bits (an exact product) plus a small rest (below 5e-3 rad for
  integer positions), so the angle is rounded about once, by at most 1.2e-7 rad near pi, and
  its float32 sine and cosine err by less than 1e-6 (tested against mpmath; 1.5e-7
  measured). For integer positions that is about 25 elementwise operations on ``[N, U]``.

Integers need ``|x| < 2^24`` (every such integer is a float32); frequencies need
``w < 2^15``, so that the one rounded product of the fraction, ``f2 w``, errs by less than
2e-7 rad.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np

from posenc.evaluate.libs.base import Backend

TWO_PI = Fraction(
    "6.283185307179586476925286766559005768394338798750211641949889184615632812572417997256"
    "069650684234136"
)
SPLIT = 4096  # positions are split as 4096 h + l
LIMIT = float(1 << 24)  # integers beyond are not all float32
MAX_FREQUENCY = float(1 << 15)
COARSE, FINE = Fraction(1, 1 << 12), Fraction(1, 1 << 23)  # the grids of X1 and X2
TWO_PI_32 = float(np.float32(float(TWO_PI)))


def _bits(x: Fraction, bits: int) -> Fraction:
    """``x`` rounded to ``bits`` significant bits (a dyadic rational)."""
    if x == 0:
        return Fraction(0)
    e = math.floor(math.log2(abs(float(x)))) if abs(float(x)) > 0 else -1100
    while abs(x) >= Fraction(2) ** (e + 1):
        e += 1
    while abs(x) < Fraction(2) ** e:
        e -= 1
    q = Fraction(2) ** (e - bits + 1)
    return round(x / q) * q


def _rest(x: Fraction) -> float:
    return float(np.float32(float(x)))


def _pieces(x: Fraction, bits: int = 12) -> tuple[float, float, float]:
    """``x = X1 + X2 + X3``: two pieces of ``bits`` significant bits and a float32 rest."""
    first = _bits(x, bits)
    second = _bits(x - first, bits)
    return float(first), float(second), _rest(x - first - second)


def _turns(x: Fraction) -> tuple[float, float, float]:
    """``x`` with whole turns dropped (at most 1/2) as ``X1 + X2 + X3``: ``X1`` a multiple of
    2^-12, ``X2`` one of 2^-23 (at most 2^-13), ``X3`` the float32 rest."""
    x -= round(x)
    first = round(x / COARSE) * COARSE
    second = round((x - first) / FINE) * FINE
    return float(first), float(second), _rest(x - first - second)


# 2 pi as a piece of 12 significant bits (its products with multiples of 2^-12 are exact) and
# the float32 rest
TWO_PI_HI = float(_bits(TWO_PI, 12))
TWO_PI_LO = _rest(TWO_PI - Fraction(TWO_PI_HI))


@functools.lru_cache(maxsize=64)
def constants(omega: tuple[float, ...]) -> tuple[tuple[float, ...], ...]:
    """Per frequency ``w`` (``T = w / 2 pi`` turns per unit): ``A1, A2, A3`` (the turns of
    ``4096 T``), ``W1, W2, W3`` (of ``T``) and ``T1, T2, T3`` (``T`` in 12-bit pieces), as nine
    tuples of Python floats (constants of a traced graph)."""
    rows = []
    for w in omega:
        t = Fraction(w) / TWO_PI
        rows.append(_turns(SPLIT * t) + _turns(t) + _pieces(t))
    return tuple(zip(*rows, strict=True)) if rows else ((),) * 9


def _wrapped(backend: Backend, t: Any) -> Any:
    """``t`` turns with whole turns dropped: at most 1/2, exact for any float."""
    return t - backend.round(t)


def _split(backend: Backend, v: Any) -> tuple[Any, Any]:
    """``v = v1 + v2``, ``v1`` the nearest multiple of 2^-12, ``|v2| <= 2^-13``: both exact."""
    v1 = backend.round(v * SPLIT) * (1.0 / SPLIT)
    return v1, v - v1


def _two_sum(a: Any, b: Any) -> tuple[Any, Any]:
    """``a + b`` and its exact rounding error (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@functools.lru_cache(maxsize=64)
def _phases(phase: tuple[float, ...]) -> tuple[tuple[float, ...], ...]:
    """Each phase in turns as ``Q1, Q2, Q3`` (:func:`_turns`): three tuples."""
    return tuple(zip(*(_turns(Fraction(p) / TWO_PI) for p in phase), strict=True))


def sincos(
    backend: Backend,
    x: Any,
    omega: tuple[float, ...],
    phase: tuple[float, ...] | None = None,
    integral: bool = False,
) -> tuple[Any, Any]:
    """``sin(x * w + phase), cos(x * w + phase)`` for float32 positions ``x`` ``[N, 1]`` (or
    ``[N, U]``) and frequencies ``w`` ``[U]``: ``[N, U]`` each, float32 throughout.
    ``integral``: every position is an integer (the fraction's terms are left out)."""
    f32 = backend.float32
    a1, a2, a3, w1, w2, w3, t1, t2, t3 = (backend.asarray(c, f32, x) for c in constants(omega))
    i = x if integral else backend.floor(x + 0.5)  # the nearest integer, exact
    h = backend.floor(i * (1.0 / SPLIT))
    lo = i - h * SPLIT
    coarse = h * a1 + lo * w1  # exact: multiples of 2^-12 below 4096
    fine = [h * a2, lo * w2]  # exact: multiples of 2^-23, at most 1/2
    rest = h * a3 + lo * w3
    if phase is not None:
        q1, q2, q3 = (backend.asarray(c, f32, x) for c in _phases(phase))
        coarse, rest = coarse + q1, rest + q3  # still below 4096 (at most 4095.5 + 1/2)
        fine.append(q2)
    turns = _wrapped(backend, coarse)
    for term in fine:  # below 2 all along
        turns = turns + term
    if not integral:
        f1, f2 = _split(backend, x - i)  # x - i exact, at most 1/2
        turns, e1 = _two_sum(turns, _wrapped(backend, f1 * t1))  # f1 t1 exact (11 and 12 bits)
        turns, e2 = _two_sum(turns, f1 * t2)  # exact too
        rest = rest + (e1 + e2) + (f1 * t3 + f2 * (t1 + t2 + t3))
    turns = _wrapped(backend, turns)
    head, tail = _split(backend, turns)
    small = (tail * TWO_PI_HI + turns * TWO_PI_LO) + rest * TWO_PI_32  # < 5e-3 for integers
    theta = head * TWO_PI_HI + small  # an exact product: one rounding, in the sum
    return backend.sin(theta), backend.cos(theta)
