"""Output dtypes: what a 16-bit (or float64) table costs against the float32 one.

    python -m benchmarks.bench_dtypes

Every dtype is the exact value rounded once (16-bit: correctly rounded, which a cast of the
float32 table is not). 65536 x 1024, one thread, medians of 7 runs per dtype; ratios are to
the float32 table of the same library, measured in the same loop.
"""

from __future__ import annotations

import numpy as np
import torch

import posenc
from benchmarks.bench_modules import median_ms

SHAPE = (65536, 1024)
CASES = {
    "NumPy": [np.float32, np.float64, np.float16],
    "torch": [torch.float32, torch.float64, torch.bfloat16, torch.float16],
}


def main() -> None:
    posenc.set_num_threads(1)
    torch.set_num_threads(1)
    rows, dim = SHAPE
    print(f"### Output dtypes, {rows} x {dim}, 1 thread\n")
    print("| library | dtype | ms | x float32 |")
    print("|---|---|---|---|")
    for lib, dtypes in CASES.items():
        times = {
            str(dt).replace("torch.", "").replace("<class 'numpy.", "").rstrip("'>"): median_ms(
                lambda dt=dt: posenc.table(rows, dim, dtype=dt), 7
            )
            for dt in dtypes
        }
        base = times["float32"]
        for name, ms in times.items():
            print(f"| {lib} | {name} | {ms:.1f} | {ms / base:.2f} |")


if __name__ == "__main__":
    main()
