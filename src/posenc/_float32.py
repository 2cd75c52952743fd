"""Sines and cosines of ``x * w`` in float32 arithmetic alone, within 1e-6 of the truth.

For runtimes without float64: exported ONNX and TensorRT graphs, Apple's MPS, accelerators.
Plain float32 forms ``x * w`` with an error of ``|x w| 2^-24`` (6e-2 rad at x = 1e6), so the
angle is never formed whole. Instead (Cody-Waite reduction, with the frequencies as exact
pieces computed on the host):

- a position ``x`` (``|x| < 2^24``) is split on the device, exactly, into an integer
  ``i = 4096 h + l`` (``|h| <= 4096``, ``0 <= l < 4096``) and a fraction ``f = f1 + f2``
  (``f1`` a multiple of 2^-12, ``|f2| <= 2^-13``);
- the host gives each frequency as 12-bit pieces: ``A = (4096 w mod 2 pi)``,
  ``W = (w mod 2 pi)`` and ``w`` itself, each ``X1 + X2 + X3`` (``X1``, ``X2`` of 12
  significant bits, computed with exact rationals);
- ``h A1, h A2, l W1, l W2, f1 w1, f1 w2`` are then exact float32 products; each is reduced
  by 2 pi (held as three pieces, the first two short enough that ``k * C`` is exact, and
  ``t - k C1 - k C2`` exact too), the reduced terms are added with error-free sums (TwoSum),
  and the small rest (``k C3``, ``h A3``, ``l W3``, ``f2 w``, ...) joins the error term;
- the sum is reduced once more and rounded once: the angle errs by a few 1e-7 rad, and its
  float32 sine and cosine by less than 1e-6 (tested against mpmath).

Integers need ``|x| < 2^24`` (every such integer is a float32); frequencies need
``w < 2^15``, so that every ``k`` stays below 2^13.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np

from ._backends import Ops

# 2 pi to 100 digits, and the pieces of 2 pi used to reduce: C1 and C2 of 11 significant bits
# (k * C exact for |k| < 2^13), C3 the float32 rest
TWO_PI = Fraction(
    "6.283185307179586476925286766559005768394338798750211641949889184615632812572417997256"
    "069650684234136"
)
SPLIT = 4096  # positions are split as 4096 h + l
LIMIT = float(1 << 24)  # integers beyond are not all float32
MAX_FREQUENCY = float(1 << 15)


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


def _pieces(x: Fraction, bits: int = 12) -> tuple[float, float, float]:
    """``x = X1 + X2 + X3``: two pieces of ``bits`` significant bits and a float32 rest."""
    first = _bits(x, bits)
    second = _bits(x - first, bits)
    rest = float(np.float32(float(x - first - second)))
    return float(first), float(second), rest


def _reduced(x: Fraction) -> Fraction:
    """``x`` mod 2 pi, in [-pi, pi]."""
    return x - round(x / TWO_PI) * TWO_PI


C1, C2, C3 = _pieces(TWO_PI, 11)
INV_TWO_PI = float(np.float32(1 / (2 * math.pi)))


@functools.lru_cache(maxsize=64)
def constants(omega: tuple[float, ...]) -> tuple[tuple[float, ...], ...]:
    """Per frequency: ``A1, A2, A3, W1, W2, W3, w1, w2, w3`` (see the module docstring), as
    nine tuples of Python floats (constants of a traced graph)."""
    rows = []
    for w in omega:
        wf = Fraction(w)
        rows.append(_pieces(_reduced(SPLIT * wf)) + _pieces(_reduced(wf)) + _pieces(wf))
    return tuple(zip(*rows, strict=True)) if rows else ((),) * 9


def _reduce(ops: Ops, t: Any) -> tuple[Any, Any]:
    """``t`` (an exact float32 term, ``|t| < 2^13 * 2 pi``) as ``(r, e)``: ``t - k C1 - k C2``
    (both steps exact: the products are, and the result fits the finer of the two grids) and
    the small correction ``-k C3``."""
    k = ops.floor(t * INV_TWO_PI + 0.5)
    return (t - k * C1) - k * C2, -(k * C3)


def _two_sum(a: Any, b: Any) -> tuple[Any, Any]:
    """``a + b`` and its exact rounding error (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@functools.lru_cache(maxsize=64)
def _phases(phase: tuple[float, ...]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Each phase mod 2 pi as a float32 and its float32 rest."""
    first, rest = [], []
    for p in phase:
        r = _reduced(Fraction(p))
        f = float(np.float32(float(r)))
        first.append(f)
        rest.append(float(np.float32(float(r - Fraction(f)))))
    return tuple(first), tuple(rest)


def sincos(
    ops: Ops,
    x: Any,
    omega: tuple[float, ...],
    phase: tuple[float, ...] | None = None,
    integral: bool = False,
) -> tuple[Any, Any]:
    """``sin(x * w + phase), cos(x * w + phase)`` for float32 positions ``x`` ``[N, 1]`` (or
    ``[N, U]``) and frequencies ``w`` ``[U]``: ``[N, U]`` each, float32 throughout.
    ``integral``: every position is an integer (the fraction's terms are left out)."""
    f32 = ops.float32
    a1, a2, a3, w1, w2, w3, o1, o2, o3 = (ops.asarray(c, f32, x) for c in constants(omega))
    i = x if integral else ops.floor(x + 0.5)  # the nearest integer, exact
    h = ops.floor(i * (1.0 / SPLIT))
    lo = i - h * SPLIT
    terms = [h * a1, lo * w1, h * a2, lo * w2]  # exact products
    rest = h * a3 + lo * w3
    if not integral:
        f = x - i  # exact, |f| <= 1/2
        f1 = ops.floor(f * SPLIT + 0.5) * (1.0 / SPLIT)
        f2 = f - f1
        terms += [f1 * o1, f1 * o2]
        rest = rest + (f1 * o3 + f2 * (o1 + o2 + o3))
    total: Any = None
    error: Any = None
    for term in terms:
        r, e = _reduce(ops, term)
        if total is None:
            total, error = r, e
        else:
            total, rounding = _two_sum(total, r)
            error = error + rounding + e
    error = error + rest
    if phase is not None:
        p1, p2 = (ops.asarray(c, f32, x) for c in _phases(phase))
        total, rounding = _two_sum(total, p1 + x * 0.0)
        error = error + rounding + p2
    r, e = _reduce(ops, total)
    theta = r + (error + e)
    return ops.sin(theta), ops.cos(theta)
