"""Output dtypes: what a 16-bit (or float64) table costs against the float32 one.

    python -m benchmarks.bench_dtypes

Every dtype is the exact value rounded once (16-bit: correctly rounded, which a cast of the
float32 table is not). 65536 x 1024, one thread. The dtypes of a library take turns, one
call each per round, for 9 rounds, so a change in the shared machine's load hits them alike;
each figure is the median of its 9 calls, and each ratio the median of the 9 per-round
ratios to the float32 table of the same round.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

import posenc

SHAPE = (65536, 1024)
ROUNDS = 9
CASES = {
    "NumPy": [np.float32, np.float64, np.float16],
    "torch": [torch.float32, torch.float64, torch.bfloat16, torch.float16],
}


def _name(dtype: object) -> str:
    return str(dtype).replace("torch.", "").replace("<class 'numpy.", "").rstrip("'>")


def main() -> None:
    posenc.set_num_threads(1)
    torch.set_num_threads(1)
    rows, dim = SHAPE
    print(f"### Output dtypes, {rows} x {dim}, 1 thread, {ROUNDS} rounds\n")
    print("| library | dtype | ms | x float32 |")
    print("|---|---|---|---|")
    for lib, dtypes in CASES.items():
        times: dict[str, list[float]] = {_name(dt): [] for dt in dtypes}
        for dt in dtypes:  # warm-up
            posenc.table(rows, dim, dtype=dt)
        for _ in range(ROUNDS):
            for dt in dtypes:
                start = time.perf_counter()
                posenc.table(rows, dim, dtype=dt)
                times[_name(dt)].append(1e3 * (time.perf_counter() - start))
        base = times["float32"]
        for name, ms in times.items():
            ratio = statistics.median(a / b for a, b in zip(ms, base, strict=True))
            print(f"| {lib} | {name} | {statistics.median(ms):.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
