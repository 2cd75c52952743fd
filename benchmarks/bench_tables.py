"""Table generation: posenc against the implementations in use, side by side in one process.

    python -m benchmarks.bench_tables            # every size, 1 and 2 threads, + memory
    python -m benchmarks.bench_tables --quick    # one small size

Competitors are re-implemented from their published formulas (float32, as they run), except
PyPI ``positional-encodings``, which is imported. Every implementation's max error is measured
against a float64 evaluation of its own convention's formula. Medians of repeated runs;
ratios are to the medians of the floors measured in the same run.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import posenc

SIZES = [(2048, 512), (8192, 1024), (65536, 1024), (1_000_000, 64)]


# -- competitors, as they are written in their projects (float32) ------------------------


def labml(length: int, d: int) -> torch.Tensor:
    """labml / PyTorch tutorial ``PositionalEncoding``."""
    pe = torch.zeros(length, d)
    position = torch.arange(0, length, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * -(math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def fairseq(length: int, d: int) -> torch.Tensor:
    """tensor2tensor / fairseq ``get_embedding`` (no padding)."""
    half = d // 2
    emb = math.log(10000) / (half - 1)
    emb = torch.exp(torch.arange(half, dtype=torch.float32) * -emb)
    emb = torch.arange(length, dtype=torch.float32).unsqueeze(1) * emb.unsqueeze(0)
    return torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)


def positional_encodings(length: int, d: int) -> torch.Tensor:
    """PyPI ``positional-encodings`` 1D (a fresh module: its cache would skip the work)."""
    from positional_encodings.torch_encodings import PositionalEncoding1D

    return PositionalEncoding1D(d)(torch.empty(1, length, d))[0]


def mae(length: int, d: int) -> np.ndarray:
    """MAE ``get_1d_sincos_pos_embed_from_grid``: float64 NumPy, cast to float32."""
    omega = np.arange(d // 2, dtype=np.float64) / (d / 2.0)
    omega = 1.0 / 10000**omega
    out = np.einsum("m,d->md", np.arange(length, dtype=np.float64), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1).astype(np.float32)


# -- exact references (float64, the formula of each convention) -------------------------


def _exact_rows(kind: str, lo: int, hi: int, d: int) -> np.ndarray:
    p = np.arange(lo, hi, dtype=np.float64)[:, None]
    if kind == "vaswani":
        w = 10000.0 ** (-np.arange(d // 2) / (d // 2))
        a = p * w
        return np.stack([np.sin(a), np.cos(a)], -1).reshape(hi - lo, d)
    if kind == "t2t":
        w = np.exp(np.arange(d // 2) * -(math.log(10000) / (d // 2 - 1)))
        a = p * w
        return np.concatenate([np.sin(a), np.cos(a)], 1)
    if kind == "halves":
        w = 10000.0 ** (-np.arange(d // 2) / (d // 2))
        a = p * w
        return np.concatenate([np.sin(a), np.cos(a)], 1)
    raise ValueError(kind)


def max_error(table: Any, kind: str) -> float:
    arr = table.numpy() if isinstance(table, torch.Tensor) else table
    length, d = arr.shape
    step = max(1, (1 << 22) // d)
    return max(
        float(
            np.abs(
                arr[lo : lo + step].astype(np.float64)
                - _exact_rows(kind, lo, min(length, lo + step), d)
            ).max()
        )
        for lo in range(0, length, step)
    )


# -- timing --------------------------------------------------------------------------------


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
        del out
    return 1e3 * statistics.median(times)


def implementations(
    length: int, d: int, *, with_sin: bool = True
) -> dict[str, tuple[Callable[[], Any], str | None]]:
    sin: dict[str, tuple[Callable[[], Any], str | None]] = {}
    if with_sin:  # its input is allocated up front, outside the timing
        x = torch.rand(length, d)
        sin["one torch.sin over T*d float32"] = (lambda: torch.sin(x), None)
    return {
        "floor: torch.empty + fill_": (lambda: torch.empty(length, d).fill_(1.0), None),
        "floor: np.empty + fill": (lambda: np.empty((length, d), np.float32).fill(1.0), None),
        **sin,
        "labml / PyTorch tutorial (float32)": (lambda: labml(length, d), "vaswani"),
        "tensor2tensor / fairseq (float32)": (lambda: fairseq(length, d), "t2t"),
        "PyPI positional-encodings 1D": (lambda: positional_encodings(length, d), "vaswani"),
        "MAE (float64 NumPy, cast)": (lambda: mae(length, d), "halves"),
        "posenc NumPy (vaswani)": (lambda: posenc.table(length, d), "vaswani"),
        "posenc NumPy (whisper)": (lambda: posenc.table(length, d, preset="whisper"), "t2t"),
        "posenc torch (vaswani)": (lambda: posenc.table(length, d, dtype=torch.float32), "vaswani"),
        "posenc torch (whisper)": (
            lambda: posenc.table(length, d, preset="whisper", dtype=torch.float32),
            "t2t",
        ),
    }


def bench_size(length: int, d: int, threads: int, repeats: int) -> list[dict[str, Any]]:
    torch.set_num_threads(threads)
    posenc.set_num_threads(threads)
    rows = []
    for name, (fn, kind) in implementations(length, d).items():
        if name == "PyPI positional-encodings 1D" and length * d > 1 << 27:
            repeats_here = max(3, repeats // 2)
        else:
            repeats_here = repeats
        ms = median_ms(fn, repeats_here)
        err = max_error(fn(), kind) if kind else None
        rows.append({"name": name, "ms": ms, "error": err})
    floor = next(r["ms"] for r in rows if r["name"] == "floor: torch.empty + fill_")
    np_floor = next(r["ms"] for r in rows if r["name"] == "floor: np.empty + fill")
    for r in rows:
        r["vs_torch_floor"] = r["ms"] / floor
        r["vs_numpy_floor"] = r["ms"] / np_floor
    return rows


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n### {title}\n")
    print("| implementation | median ms | / torch floor | / NumPy floor | max error |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        err = "—" if r["error"] is None else f"{r['error']:.1e}"
        print(
            f"| {r['name']} | {r['ms']:.1f} | {r['vs_torch_floor']:.2f} | "
            f"{r['vs_numpy_floor']:.2f} | {err} |"
        )


def bench_ids_and_grid(threads: int, repeats: int) -> None:
    torch.set_num_threads(threads)
    posenc.set_num_threads(threads)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 8192, (8, 2048))
    table = posenc.table(8192, 1024)
    tids, ttable = torch.from_numpy(ids), torch.from_numpy(table)
    runs = rng.integers(0, 6144, (8, 1)) + np.arange(2048)  # per-row offsets (KV caches)
    # a training loop: new ids every call, from the same range
    batches = [rng.integers(0, 8192, (8, 2048)) for _ in range(8)]
    numpy_ids, torch_ids = itertools.cycle(batches), itertools.cycle(map(torch.from_numpy, batches))
    posenc.set_table_cache(0)
    cold = median_ms(lambda: posenc.encode(next(numpy_ids), 1024), repeats)
    cold_torch = median_ms(lambda: posenc.encode(next(torch_ids), 1024), repeats)
    posenc.set_table_cache(64 << 20)
    results = {
        "gather rows of a precomputed table (NumPy)": median_ms(lambda: table[ids], repeats),
        "posenc.encode(ids), nothing kept (NumPy)": cold,
        "posenc.encode(ids), new ids each call, span table kept (NumPy)": median_ms(
            lambda: posenc.encode(next(numpy_ids), 1024), repeats
        ),
        "gather, ids = per-row offset + arange(2048) (NumPy)": median_ms(
            lambda: table[runs], repeats
        ),
        "posenc.encode(per-row offset + arange(2048)) (NumPy)": median_ms(
            lambda: posenc.encode(runs, 1024), repeats
        ),
        "gather rows of a precomputed table (torch)": median_ms(lambda: ttable[tids], repeats),
        "posenc.encode(ids), nothing kept (torch)": cold_torch,
        "posenc.encode(ids), new ids each call, span table kept (torch)": median_ms(
            lambda: posenc.encode(next(torch_ids), 1024), repeats
        ),
        "1D table 4096 x 1024 (NumPy)": median_ms(lambda: posenc.table(4096, 1024), repeats),
        "grid 64 x 64, d=1024, mae (NumPy)": median_ms(
            lambda: posenc.grid((64, 64), 1024, preset="mae"), repeats
        ),
        "grid 64 x 64, d=1024, timm-2d (NumPy)": median_ms(
            lambda: posenc.grid((64, 64), 1024, preset="timm-2d"), repeats
        ),
        "grid 64 x 64, d=1024, mae (torch)": median_ms(
            lambda: posenc.grid((64, 64), 1024, preset="mae", device="cpu"), repeats
        ),
    }
    print(f"\n### Position ids [8, 2048] in [0, 8192) and grids, d = 1024, {threads} thread(s)\n")
    print("| job | median ms |")
    print("|---|---:|")
    for name, ms in results.items():
        print(f"| {name} | {ms:.1f} |")


def bench_presets(threads: int, repeats: int) -> None:
    """Every preset at the issue's size: 65536 rows (or grid cells) x 1024 channels (NeRF:
    the same number of values, as 1065220 points x 63 channels)."""
    torch.set_num_threads(threads)
    posenc.set_num_threads(threads)
    floor = median_ms(lambda: torch.empty(65536, 1024).fill_(1.0), repeats)
    print(f"\n### Every preset, 65536 x 1024 float32, {threads} thread(s)\n")
    print(f"`torch.empty + fill_` floor: {floor:.1f} ms\n")
    print("| preset | NumPy ms | torch ms | torch / floor |")
    print("|---|---:|---:|---:|")
    shapes = {"diffusers-3d": (16, 64, 64), "t2t-nd": (256, 256), "tatp22": (65536,)}
    for name in posenc.presets("sinusoidal"):
        spec = posenc.preset(name)
        if name == "nerf":  # real coordinates [N, 3], L = 10: 63 channels, as NeRF uses it
            x = np.random.default_rng(0).uniform(-1, 1, (65536 * 1024 // 63, 3))
            np_ms = median_ms(lambda x=x: posenc.encode(x, 63, preset="nerf", ndim=3), repeats)
            tx = torch.from_numpy(x)
            t_ms = median_ms(lambda tx=tx: posenc.encode(tx, 63, preset="nerf", ndim=3), repeats)
        elif spec.encoding.ndim == 1:
            np_ms = median_ms(lambda name=name: posenc.table(65536, 1024, preset=name), repeats)
            t_ms = median_ms(
                lambda name=name: posenc.table(65536, 1024, preset=name, device="cpu"), repeats
            )
        else:
            shape = shapes.get(name, (256, 256))
            np_ms = median_ms(
                lambda name=name, shape=shape: posenc.grid(shape, 1024, preset=name), repeats
            )
            t_ms = median_ms(
                lambda name=name, shape=shape: posenc.grid(shape, 1024, preset=name, device="cpu"),
                repeats,
            )
        print(f"| {name} | {np_ms:.1f} | {t_ms:.1f} | {t_ms / floor:.2f} |")


_MEMORY_CODE = """
import resource, sys, numpy as np, torch, posenc
from benchmarks.bench_tables import implementations
name = sys.argv[1]
fn = implementations(16, 16, with_sin=False)[name][0]; fn()  # imports, first-call work
length, d = int(sys.argv[2]), int(sys.argv[3])
fn = implementations(length, d, with_sin=False)[name][0]
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
try:  # reset the peak (VmHWM) to the current size, so earlier peaks cannot hide this one
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS")
    out = fn()
    print(status("VmHWM") - before)
except OSError:  # not Linux: the lifetime peak
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = fn()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def bench_memory(length: int, d: int) -> None:
    """Peak resident memory added by one call, in units of the float32 output's size."""
    out_bytes = length * d * 4
    print(f"\n### Peak memory of one call, {length} x {d} (output {out_bytes / 2**20:.0f} MiB)\n")
    print("| implementation | peak added memory / output size |")
    print("|---|---:|")
    names = list(implementations(16, 16, with_sin=False))
    for name in names:
        proc = subprocess.run(
            [sys.executable, "-c", _MEMORY_CODE, name, str(length), str(d)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        added = int(proc.stdout.strip().splitlines()[-1])
        print(f"| {name} | {added / out_bytes:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small size, 1 thread")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"torch {torch.__version__}, NumPy {np.__version__}, posenc {posenc.__version__}"
    )
    sizes = [(2048, 512)] if args.quick else SIZES
    for threads in (1,) if args.quick else (1, 2):
        for length, d in sizes:
            rows = bench_size(length, d, threads, args.repeats)
            print_table(f"{length} x {d}, float32, {threads} thread(s)", rows)
        bench_ids_and_grid(threads, args.repeats)
        if not args.quick:
            bench_presets(threads, args.repeats)
    if not args.quick:
        bench_memory(65536, 1024)


if __name__ == "__main__":
    main()
