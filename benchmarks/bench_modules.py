"""The add-to-activations module against the bare additions it replaces, in one process.

    python -m benchmarks.bench_modules

x is [8, 2048, 1024] float32 on the CPU. Eval: posenc's PositionalEncoding against a bare
``x + y`` of the same shape. Train (dropout 0.1): against ``dropout(x + pe)`` written by hand.
Grid: GridEncoding on ViT tokens [8, 64*64, 1024], its grid computed per call, against a bare
``x + y``. Medians of repeated runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F

import posenc
from posenc.torch import GridEncoding, PositionalEncoding


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    x = torch.randn(8, 2048, 1024)
    y = torch.randn(8, 2048, 1024)
    pe = torch.from_numpy(posenc.table(2048, 1024))
    module = PositionalEncoding(1024, dropout=0.1)
    # a ViT's patch tokens: [8, 64*64, 1024] with the MAE grid, computed per call
    grid = GridEncoding(1024, preset="mae")
    tokens = x.reshape(8, 4096, 512).repeat(1, 1, 2)
    other = y.reshape(8, 4096, 512).repeat(1, 1, 2)
    xb, yb = x.bfloat16(), y.bfloat16()
    moved = PositionalEncoding(1024).eval().to(torch.bfloat16)
    # compiled with dynamic=True: inside the 2048 kept rows, and past them (2560 rows)
    compiled = torch.compile(PositionalEncoding(1024).eval(), dynamic=True, fullgraph=True)
    add = torch.compile(lambda a, b: a + b, dynamic=True, fullgraph=True)
    long_x, long_pe = torch.randn(8, 2560, 1024), torch.from_numpy(posenc.table(2560, 1024))
    print(f"torch {torch.__version__}, x {tuple(x.shape)} float32\n")
    print("| threads | job | median ms | ratio |")
    print("|---:|---|---:|---:|")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        with torch.no_grad():
            module.eval()
            bare = median_ms(lambda: x + y, args.repeats)
            ours = median_ms(lambda: module(x), args.repeats)
            print(f"| {threads} | eval: bare x + y (same shape) | {bare:.1f} | 1.00 |")
            print(f"| {threads} | eval: PositionalEncoding(x) | {ours:.1f} | {ours / bare:.2f} |")
            module.train()
            hand = median_ms(lambda: F.dropout(x + pe, 0.1, training=True), args.repeats)
            ours = median_ms(lambda: module(x), args.repeats)
            print(f"| {threads} | train: dropout(x + pe) by hand | {hand:.1f} | 1.00 |")
            print(
                f"| {threads} | train: PositionalEncoding(x), dropout 0.1 | {ours:.1f} | "
                f"{ours / hand:.2f} |"
            )
            module.eval()
            bare = median_ms(lambda: xb + yb, args.repeats)
            ours = median_ms(lambda: moved(xb), args.repeats)
            mixed = median_ms(lambda: module(xb), args.repeats)
            print(f"| {threads} | bf16: bare x + y | {bare:.1f} | 1.00 |")
            print(f"| {threads} | bf16: .to(bfloat16) module | {ours:.1f} | {ours / bare:.2f} |")
            print(
                f"| {threads} | bf16: float32 module, bf16 x (autocast) | {mixed:.1f} | "
                f"{mixed / bare:.2f} |"
            )
            for label, xs, table in (("", x, pe), (", 2560 rows", long_x, long_pe)):
                add(xs, table), compiled(xs)  # compile outside the timing
                bare = median_ms(lambda: add(xs, table), args.repeats)  # noqa: B023
                ours = median_ms(lambda: compiled(xs), args.repeats)  # noqa: B023
                print(f"| {threads} | compiled: bare x + pe{label} | {bare:.1f} | 1.00 |")
                print(
                    f"| {threads} | compiled: PositionalEncoding(x){label} | {ours:.1f} | "
                    f"{ours / bare:.2f} |"
                )
            bare = median_ms(lambda: tokens + other, args.repeats)
            ours = median_ms(lambda: grid(tokens, (64, 64)), args.repeats)
            print(f"| {threads} | grid: bare x + y, [8, 4096, 1024] | {bare:.1f} | 1.00 |")
            print(
                f"| {threads} | grid: GridEncoding(x, (64, 64)), mae | {ours:.1f} | "
                f"{ours / bare:.2f} |"
            )


if __name__ == "__main__":
    main()
