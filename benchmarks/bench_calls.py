"""Per-call cost of small calls, where the layers a call crosses show: posenc against the
bare array operation of the same size, side by side in one process.

    python -m benchmarks.bench_calls

Tables of 16 x 64 cost microseconds, so what is measured is the path through the library
(preset lookup, plan, evaluator choice, checks), not the arithmetic. To compare two checkouts,
run it in each (``PYTHONPATH=<checkout>/src python -m benchmarks.bench_calls``) a few times,
alternating, and compare the medians.
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import posenc
from posenc.torch import PositionalEncoding, RotaryEmbedding


def per_call_us(fn: Callable[[], Any], number: int = 200, rounds: int = 9) -> float:
    fn()
    return statistics.median(timeit.repeat(fn, number=number, repeat=rounds)) / number * 1e6


def main() -> None:
    torch.set_num_threads(1)
    ids = np.arange(16)
    x = torch.zeros(1, 16, 64)
    q = torch.zeros(1, 4, 16, 64)
    angles = np.zeros((16, 32))
    module = PositionalEncoding(64).eval()
    rope = RotaryEmbedding(64)

    def grid(shape: tuple[int, ...], dim: int) -> Any:
        return posenc.rope_grid(shape, dim, axes_dim=(32, 32))

    rows = [
        ("floor: np.sin + np.cos of [16, 32] float64", lambda: (np.sin(angles), np.cos(angles))),
        ("floor: x + x, [1, 16, 64] torch", lambda: x + x),
        ("posenc.table(16, 64)", lambda: posenc.table(16, 64)),
        ("posenc.table(16, 64, torch)", lambda: posenc.table(16, 64, dtype=torch.float32)),
        ("posenc.encode(ids [16], 64)", lambda: posenc.encode(ids, 64)),
        ("posenc.rope(ids [16], 64)", lambda: posenc.rope(ids, 64)),
        ("posenc.rope_grid((4, 4), 64, axes_dim=(32, 32))", lambda: grid((4, 4), 64)),
        ("PositionalEncoding(64)(x [1, 16, 64])", lambda: module(x)),
        ("RotaryEmbedding(64)(q, k [1, 4, 16, 64])", lambda: rope(q, q)),
    ]
    floor = per_call_us(rows[0][1])
    print(f"torch {torch.__version__}, NumPy {np.__version__}, posenc {posenc.__version__}\n")
    print("| call | median us | x NumPy floor |")
    print("|---|---:|---:|")
    for name, fn in rows:
        us = per_call_us(fn)
        print(f"| {name} | {us:.1f} | {us / floor:.1f} |")


if __name__ == "__main__":
    main()
