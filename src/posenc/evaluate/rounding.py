"""The one rounding: float64 values to the output dtype, rounded once, in any library.

A plain float64 -> float32 -> 16-bit cast rounds twice, and is then wrong where the float32
lands on a 16-bit midpoint. So the direct formula rounds float64 to float32 *to odd* (last
bit set when inexact), after which the cast to 16 bits is correct; NumPy casts float64 to
float16 in one rounding and needs no such step. (The engine's torch tables use a faster
search of their own for the same result: :func:`posenc.evaluate.libs.torch.ready_for_half`.)
"""

from __future__ import annotations

from typing import Any

from posenc.evaluate.libs.base import Backend, itemsize


def round_to_odd(x64: Any, backend: Backend) -> Any:
    """float64 -> float32 rounded to odd: exact values stay, an inexact one becomes the
    neighbour (of the two around it) whose last bit is set.

    Round to nearest, step back toward zero where that went away from zero (the truncation),
    then set the last bit where the value was inexact: int32 work only, a few passes.
    """
    f = backend.astype(x64, backend.float32)
    back = backend.astype(f, backend.float64)
    away = backend.astype(backend.abs(back) > backend.abs(x64), backend.int32)
    inexact = backend.astype(back != x64, backend.int32)
    return backend.bitcast((backend.bitcast(f, backend.int32) - away) | inexact, backend.float32)


def round_once(x64: Any, dtype: Any, backend: Backend) -> Any:
    """float64 values rounded once to ``dtype`` (to odd first for 16-bit dtypes, so the
    second rounding is correct, except where the cast itself rounds once)."""
    if itemsize(dtype) == 2 and not backend.half_cast_rounds_once(dtype):
        return backend.astype(round_to_odd(x64, backend), dtype)
    return backend.astype(x64, dtype)
