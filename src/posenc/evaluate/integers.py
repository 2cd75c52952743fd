"""Integer positions: balanced base-256 digits, the level tables they index, the kept id tables.

An integer position is split as ``p = a * 2^16 + b * 2^8 + c`` (``-128 <= b, c < 128``) and
its phasor is the complex product ``(T[a] * L1[b]) * L0[c]`` of three small tables: ``T``
evaluated directly for the few ``a`` needed, ``L1`` and ``L0`` (256 rows each, themselves
``16 x 16`` products) kept per set of frequencies in :data:`LEVELS`. The split of a position
depends on that position alone, so every way of asking for it gives the same bits.

Dense integer ids (a batch of token ids) are gathered from the table of their span, which is
kept for the next call in :data:`TABLES` (:func:`set_table_cache`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from posenc.cache import BoundedCache, nbytes
from posenc.errors import check_int
from posenc.evaluate.libs.base import Backend
from posenc.spec.layout import Plan

LEVEL = 256  # integer positions: p = a * LEVEL**2 + b * LEVEL + c, balanced digits
HALF = LEVEL // 2

LEVELS = BoundedCache(64 << 20)  # 8 KiB per frequency: 4 MiB for dim 1024


def levels(omega_bytes: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The level tables of these frequencies, kept in :data:`LEVELS`."""
    return LEVELS.get_or_make(omega_bytes, lambda: _make_levels(omega_bytes), lambda v: nbytes(*v))


def _make_levels(omega_bytes: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``L0[j] = exp(-i d w)`` and ``L1[j] = exp(-i d 256 w)`` for digits ``d = j - 128``.

    ``[256, n]`` complex128 each, built as ``16 x 16`` products of directly evaluated phasors
    in a fixed order, so they (and everything built on them) depend on ``w`` alone. Balanced
    digits keep every intermediate angle within ``128 * unit * w``.
    """
    w = np.frombuffer(omega_bytes, dtype=np.float64)
    side = math.isqrt(LEVEL)
    j = np.arange(side, dtype=np.float64)[:, None]
    tables = []
    for unit in (1.0, float(LEVEL)):
        low = np.exp(-1j * ((j * unit) * w))
        high = np.exp(-1j * (((j * side - HALF) * unit) * w))
        tables.append((high[:, None, :] * low[None, :, :]).reshape(LEVEL, -1))
    return tables[0], tables[1]


def host_ints(x: Any) -> np.ndarray:
    """Integer positions (NumPy or torch, any device) as an int64 NumPy array."""
    return np.asarray(x.cpu() if hasattr(x, "cpu") else x, dtype=np.int64)


def digits(p: Any) -> tuple[Any, Any]:
    """``p = LEVEL * high + (low - HALF)`` with ``0 <= low < LEVEL``: balanced digits."""
    high, low = divmod(p + HALF, LEVEL)
    return high, low


def canonical_coarse(backend: Backend, blocks: np.ndarray, w: np.ndarray) -> Any:
    """``i * exp(-i * 256 * beta * w)`` for block numbers ``beta`` (int64 array).

    ``= T[a] * L1[b]`` with ``beta = 256 a + (b - 128)``, ``T[a] = i * exp(-i a 2^16 w)``
    evaluated directly for the few ``a`` needed.
    """
    _, l1 = levels(w.tobytes())
    a, b = digits(blocks)
    tops, where = np.unique(a, return_inverse=True)
    top = backend.phasors(
        backend.f64(tops.astype(np.float64) * float(LEVEL * LEVEL))[:, None]
        * backend.f64(w)[None, :],
        coarse=True,
    )
    return backend.rows(top, where) * backend.rows(backend.complex(l1), b)


TABLES = BoundedCache(64 << 20)
"""The most recently used span tables of ``encode``'s gather path: a repeated call with ids
from the same range is then a gather. Tables are never handed out (the gather copies)."""


def set_table_cache(max_bytes: int) -> None:
    """Bytes that :func:`posenc.encode` may keep in tables of recent id spans (default 64 MiB;
    0 keeps none). With ids drawn from one range call after call, every call after the first
    gathers rows of the kept table instead of computing them; the bits are the same.

    Examples:
        >>> posenc.set_table_cache(256 << 20)    # keep up to 256 MiB (long contexts)
        >>> pe = posenc.encode(np.random.randint(0, 32768, (8, 2048)), 1024)
        >>> posenc.set_table_cache(64 << 20)     # back to the default"""
    TABLES.resize(check_int("max_bytes", max_bytes, minimum=0))


def span_key(backend: Backend, plan: Plan, lowest: int, rows: int) -> tuple[Any, ...]:
    """What a kept table of positions ``lowest … lowest+rows-1`` depends on."""
    device = getattr(backend, "device", None)
    key = (
        plan.omega.tobytes(),
        plan.axis.tobytes(),
        plan.src.tobytes(),
        plan.amplitude,
        plan.axis_amplitude,
    )
    return (*key, lowest, rows, backend.name, str(backend.dtype), str(device))
