"""Frequencies: the one place that knows how the angular frequencies of a block are spaced.

Every geometric family in use is

    omega_k = min_timescale * (base / min_timescale) ** (-k / den),   k = 0 … n-1
    den     = width / 2 - shift

where ``width`` is the block's channel width (``2n`` for an even block). ``shift = 0`` is the
paper's spacing (``base ** (-2k / D)``), ``shift = 1`` is tensor2tensor's (the last frequency is
exactly ``1 / base``). Writing the denominator through the width, not through ``n``, is what
lets Marian's odd widths (``b ** (-2j / D)`` with ``D`` odd) and tatp22's padded widths fall out
of the same rule.

The multiplication by ``min_timescale`` (rather than division) is tensor2tensor's own
behaviour; it was reported upstream as a bug and never changed, so it is reproduced.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from posenc.errors import PosencError

Spacing = Literal["geometric", "pow2"]


def denominator(width: int, shift: float, *, guard: bool) -> float:
    """The exponent denominator ``width / 2 - shift``; tensor2tensor's 1D guard floors it at 1."""
    den = width / 2 - shift
    if guard:
        den = max(den, 1.0)
    return den


def frequencies(
    spacing: Spacing,
    n: int,
    *,
    den: float = 1.0,
    base: float = 10000.0,
    min_timescale: float = 1.0,
) -> np.ndarray:
    """``n`` angular frequencies in float64 (radians per unit position)."""
    k = np.arange(n, dtype=np.float64)
    if spacing == "pow2":
        with np.errstate(over="ignore"):
            return np.ldexp(1.0, np.arange(n)).astype(np.float64)
    if spacing != "geometric":
        raise PosencError(f"unknown frequency spacing {spacing!r}")
    if n == 0:
        return k
    if not den > 0:
        raise PosencError(f"the frequency denominator width/2 - shift must be > 0, got {den:g}")
    with np.errstate(all="ignore"):  # an overflow is refused by the plan, naming the options
        ratio = base / min_timescale
        out: np.ndarray = min_timescale * np.exp(k * (-np.log(ratio) / den))
        return out


def pixel_bands(n: int, max_res: float, *, linear: bool) -> np.ndarray:
    """timm's ``pixel_freq_bands``: ``n`` frequencies from ``pi`` up to ``pi * max_res / 2``
    (the Nyquist frequency of ``max_res`` pixels over ``[-1, 1]``), in float64: evenly spaced
    (``linear``) or log-spaced, ``pi * 2 ** (k * (log2(max_res) - 1) / (n - 1))``."""
    u = np.arange(n, dtype=np.float64) / max(n - 1, 1)
    if linear:
        out: np.ndarray = np.pi * (1.0 + u * (max_res / 2 - 1.0))
    else:
        out = np.pi * np.exp2(u * (np.log2(max_res) - 1.0))
    return out


def paper(d: int, base: float) -> np.ndarray:
    """``w_i = base ** (-2i / d)`` for ``i < d / 2``, in float64."""
    return frequencies("geometric", d // 2, den=d / 2, base=base)
