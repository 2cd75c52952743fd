"""Exported PositionalEncoding (dynamic length) against the eager module, in one process.

    python -m benchmarks.bench_export

PositionalEncoding(1024) exported with ``torch.export`` (sequence length dynamic), run as
``ep.module()`` and, saved as ONNX, in onnxruntime; against the eager module and a bare
``x + pe`` of a precomputed table. x is [1, L, 1024] float32 on the CPU, positions
``[offset, offset + L)``. An exported graph cannot keep a table for every length: it computes
the encoding in the graph on each call, in float32 alone (the angle reduced in exact float32
pieces), so its cost is the evaluation itself. Medians of repeated runs.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

import posenc
from benchmarks.bench_modules import median_ms
from posenc.torch import PositionalEncoding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import onnxruntime as ort

    module = PositionalEncoding(1024).eval()
    seq = torch.export.Dim("seq", min=2, max=1 << 20)
    example = (torch.zeros(1, 8, 1024), torch.arange(8))
    shapes = ({1: seq}, {0: seq})
    ep = torch.export.export(module, example, dynamic_shapes=shapes)
    exported = ep.module()
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, example, dynamic_shapes=shapes, dynamo=True)
        path = Path(tmp) / "pe.onnx"
        program.save(str(path))
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(str(path), options)
    names = [i.name for i in session.get_inputs()]
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, {args.threads} thread(s)\n")
    print("| L | offset | job | median ms | x eager module | max error |")
    print("|---:|---:|---|---:|---:|---:|")
    for length, offset in ((2048, 0), (8192, 0), (2048, 1_000_000)):
        x = torch.randn(1, length, 1024)
        positions = torch.arange(offset, offset + length)
        want = posenc.encode(positions.numpy(), 1024, dtype=np.float64)
        pe = torch.from_numpy(want.astype(np.float32))
        jobs = {
            "bare x + pe": lambda x: x + pe,  # noqa: B023
            "eager module": lambda x: module(x, positions),  # noqa: B023
            "torch.export module": lambda x: exported(x, positions),  # noqa: B023
            "onnxruntime": lambda x: session.run(
                None,
                {names[0]: x.numpy(), names[1]: positions.numpy()},  # noqa: B023
            )[0],
        }
        with torch.no_grad():
            times = {job: median_ms(lambda: fn(x), args.repeats) for job, fn in jobs.items()}  # noqa: B023
            for job, fn in jobs.items():
                # the error of the encoding itself: added to zeros
                err = np.abs(np.asarray(fn(torch.zeros_like(x)))[0] - want).max()
                ms, ratio = times[job], times[job] / times["eager module"]
                print(f"| {length} | {offset} | {job} | {ms:.2f} | {ratio:.2f} | {err:.1e} |")


if __name__ == "__main__":
    main()
