"""Is the first parallel ``torch.sin`` of a fresh process ever wrong?

    python -m benchmarks.torch_sin_first_call [processes] [--jobs J] [--load L] [--warm-up]

Each of ``processes`` fresh Python processes (default 100; ``--jobs`` of them at a time,
default 1) imports NumPy and torch and nothing else, builds its angles in NumPy (uniform in
``[0, 2e4)``, seeded by the process's number) and hands them to torch without a torch op, so
that its first torch op is one ``torch.sin`` over the whole tensor, split across torch's
threads (2 unless ``--threads`` says otherwise). Process ``i`` takes one case of the eight,
``i % 8``: float32 or float64, 2^17, 2^18, 2^19 or 2^20 angles. It then repeats the call and
compares the first result with the repeat (bit for bit) and with NumPy's float64 sine of the
same angles (float32: within 1e-6; float64: within 1e-12). A process is counted when its first
call differed from either; the count, per case, is printed with the largest error seen.

Measured (torch 2.13.0+cpu, OpenMP, 2 threads). On an idle AMD EPYC with AVX2 and no AVX-512,
120 processes two at a time: the first call differed in 0. On an AVX-512 machine with three
busy processes beside (``--load 3``), 160 processes two at a time: the first call differed in
1 (a float64 sine of 2^19 angles off by 6.8e-9; 1 of 80 and 1 of 40 in two shorter runs), and
a timm audit beside the census read a float32 error of 1.5e-4 for a table whose own is 4.9e-7;
with ``--warm-up`` (one parallel ``torch.sin`` of zeros first, as posenc and the tests do),
0 of 160. So the guard stays: ``posenc.evaluate.libs.torch._start_threads`` and
``tests/environment.torch_threads_started``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

CASES = [(dtype, 1 << bits) for dtype in ("float32", "float64") for bits in range(17, 21)]
"""``(dtype, angles)`` of each process, by its number modulo 8."""
LARGEST_ANGLE = 2e4
TOLERANCE = {"float32": 1e-6, "float64": 1e-12}

CHILD = f"""
import json, sys
import numpy as np
import torch

index, threads, warm = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
dtype, n = {CASES}[index % {len(CASES)}]
if torch.get_num_threads() != threads:
    torch.set_num_threads(threads)
x = np.random.default_rng(index).uniform(0.0, {LARGEST_ANGLE}, n).astype(dtype)
angles = torch.from_numpy(x)                 # no torch op before the first sin
if warm:                                     # posenc's guard: one parallel op on zeros first
    torch.sin(torch.zeros(1 << 17))
first = torch.sin(angles)                    # the process's first parallel op (or the second)
again = torch.sin(angles)
truth = np.sin(x.astype(np.float64))
error = float(np.abs(first.numpy().astype(np.float64) - truth).max())
print(json.dumps({{
    "dtype": dtype, "n": n, "threads": torch.get_num_threads(),
    "capability": torch.backends.cpu.get_cpu_capability(),
    "same_as_repeat": bool(torch.equal(first, again)),
    "error": error,
    "repeat_error": float(np.abs(again.numpy().astype(np.float64) - truth).max()),
}}))
"""


def one_process(index: int, threads: int, warm: bool) -> dict[str, Any]:
    """Run the check in a fresh process; its report."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(index), str(threads), str(int(warm))],
        capture_output=True,
        text=True,
        check=True,
    )
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("processes", nargs="?", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1, help="processes run at a time")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per process")
    parser.add_argument("--load", type=int, default=0, help="busy processes run alongside")
    parser.add_argument("--warm-up", action="store_true", help="one parallel op on zeros first")
    args = parser.parse_args()
    began = time.perf_counter()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        with ThreadPoolExecutor(args.jobs) as pool:
            reports = list(
                pool.map(
                    lambda i: one_process(i, args.threads, args.warm_up), range(args.processes)
                )
            )
    finally:
        for p in busy:
            p.kill()
    wrong = 0
    by_case: dict[tuple[str, int], list[int]] = {case: [0, 0] for case in CASES}
    largest = dict.fromkeys(CASES, 0.0)
    for r in reports:
        case = (r["dtype"], r["n"])
        error = r["error"]
        bad = not r["same_as_repeat"] or error > TOLERANCE[case[0]]
        wrong += bad
        by_case[case][0] += bad
        by_case[case][1] += 1
        largest[case] = max(largest[case], error)
    first = reports[0] if reports else {}
    print(
        f"torch threads {first.get('threads')}, CPU capability {first.get('capability')}, "
        f"{args.processes} processes, {args.jobs} at a time, {args.load} busy beside, "
        f"{'with' if args.warm_up else 'no'} warm-up, "
        f"{time.perf_counter() - began:.0f} s"
    )
    for (dtype, n), (bad, total) in by_case.items():
        print(
            f"  {dtype} 2^{n.bit_length() - 1}: first call differed in {bad} of {total}; "
            f"largest error of a first call {largest[(dtype, n)]:.2e}"
        )
    print(f"processes where the first call differed: {wrong} of {len(reports)}")


if __name__ == "__main__":
    main()
