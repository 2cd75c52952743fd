"""A time-dependent rule's table, once per denoising step: posenc against ComfyUI-DyPE.

    python -m benchmarks.bench_extrapolation             # FLUX at 4096 x 4096, 4 steps

DyPE recomputes the rotary tables at every step of the sampler (its bands follow the
diffusion time). Side by side in one process, medians of 11 rounds, each round timing every
implementation once, in turn (the order rotating), torch's default threads, FLUX.1 at 4096 x
4096 pixels (256 x 256 image ids and 512 text ids, axes 16/56/56, base 10000, trained at 64
tokens a side), at the times t = 1, 0.5, 0.2, 0.05 of a schedule:

- ComfyUI-DyPE's ``vision_yarn`` on the CPU (wildminder/ComfyUI-DyPE v2.3.0, ``src/rope.py``,
  replayed here from ROPE-EXTRAPOLATION.md's step-by-step arithmetic: float32 ladders, ramps
  and blends; the thresholds raised to ``k_t = 2 t^2``; the magnitude ``1 + 0.1 ln(s) t^2``;
  the einsum with the float32 positions; its 2 x 2 rotation matrices). Its error is measured
  against the same arithmetic in float64;
- ``posenc.rope(ids, 128, preset="flux", scaling=(None, dype, dype))``: the official DyPE rule
  (thresholds times ``t^2``, magnitude ``0.1 ln s + 1``), exact (float64 angles rounded once),
  float32 ``(cos, sin)`` out; its error against the same call in float64;
- ``posenc.rope_grid((1, 256, 256), …)`` for the image and its first row (position (0, 0, 0))
  for the 512 text tokens: the same table, from the grid.

Both compute their table from the ids at every step: nothing is kept between steps.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np
import torch

import posenc
from benchmarks.bench_rope import interleaved_ms

TIMES = (1.0, 0.5, 0.2, 0.05)
TRAINED = 64  # FLUX.1's tokens a side at 1024 x 1024
BASE = 10000.0
AXES = (16, 56, 56)


def _flux_ids(side: int = 256) -> torch.Tensor:
    """FLUX's ids of 512 text tokens (0, 0, 0) and a side x side image (0, row, col)."""
    rows, cols = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    image = torch.stack([torch.zeros_like(rows), rows, cols], dim=-1).reshape(-1, 3)
    return torch.cat([torch.zeros(512, 3, dtype=torch.int64), image])


def _pair(d: int, rotations: float) -> float:
    """The (real) pair index at which ``rotations`` turns fit in the trained extent."""
    return d * math.log(TRAINED / (2 * math.pi * rotations)) / (2 * math.log(BASE))


def _ramp(d: int, fast: float, slow: float, dtype: torch.dtype) -> torch.Tensor:
    """YaRN's ramp over the pairs, computed in float32 as the node does, then cast."""
    lo = max(math.floor(_pair(d, fast)), 0)
    hi = min(math.ceil(_pair(d, slow)), d - 1)
    if lo == hi:
        hi += 0.001
    ramp = (torch.arange(d // 2, dtype=torch.float32) - lo) / (hi - lo)
    return torch.clamp(ramp, 0, 1).to(dtype)


def comfyui_dype(ids: torch.Tensor, t: float, dtype: torch.dtype = torch.float32) -> Any:
    """ComfyUI-DyPE's ``vision_yarn`` FLUX tables at time ``t`` (1: noise), its ladders in
    ``dtype`` (float32 on the CPU): ``[N, 64, 2, 2]`` rotation matrices."""
    pos = ids.to(torch.float32)
    spans = [float(pos[:, a].max() - pos[:, a].min()) + 1 for a in (1, 2)]
    s_glob = max(s / TRAINED for s in spans)
    k_t = 2.0 * t**2
    m = 1 + 0.1 * math.log(s_glob) * t**2
    blocks = []
    for a, d in enumerate(AXES):
        exponent = torch.arange(0, d, 2, dtype=dtype) / d
        omega = 1.0 / (BASE**exponent)
        if a > 0 and s_glob > 1:
            s = spans[a - 1] / TRAINED
            pi = omega / s
            ntk = 1.0 / ((BASE * s_glob ** (d / (d - 2))) ** exponent)
            beta = _ramp(d, 1.25**k_t, 0.75**k_t, dtype)
            gamma = _ramp(d, 16.0**k_t, 2.0**k_t, dtype)
            first = pi * beta + ntk * (1 - beta)
            omega = first * gamma + omega * (1 - gamma)
        angles = torch.einsum("n,f->nf", pos[:, a], omega)
        cos, sin = angles.cos(), angles.sin()
        scale = torch.tensor(m if a > 0 else 1.0, dtype=dtype)
        cos, sin = cos * scale, sin * scale
        blocks.append(torch.stack([cos, -sin, sin, cos], dim=-1).reshape(*cos.shape, 2, 2))
    return torch.cat(blocks, dim=1)


def _posenc(ids: torch.Tensor, t: float, dtype: Any) -> Any:
    dype = {
        "rope_type": "dype",
        "factor": 256 / TRAINED,
        "original_max_position_embeddings": TRAINED,
        "time": t,
    }
    return posenc.rope(ids, 128, preset="flux", scaling=(None, dype, dype), dtype=dtype)


def _posenc_grid(t: float) -> Any:
    dype = {"rope_type": "dype"}  # the factor and the trained extent: FLUX's record's
    cos, sin = posenc.rope_grid(
        (1, 256, 256), 128, preset="flux", scaling=(None, dype, dype), time=t, dtype=torch.float32
    )
    return tuple(torch.cat([x[:1].expand(512, -1), x]) for x in (cos, sin))


def run(repeats: int) -> None:
    ids = _flux_ids()
    print("| t | implementation | ms per step | x ComfyUI-DyPE | max error |")
    print("|---|---|---|---|---|")
    for t in TIMES:
        fns = {
            "ComfyUI-DyPE (float32 CPU)": lambda t=t: comfyui_dype(ids, t),
            "posenc.rope (exact)": lambda t=t: _posenc(ids, t, torch.float32),
            "posenc.rope_grid (exact)": lambda t=t: _posenc_grid(t),
        }
        times = interleaved_ms(fns, repeats)
        theirs = comfyui_dype(ids, t)
        their_truth = comfyui_dype(ids, t, torch.float64)
        truth = _posenc(ids.numpy(), t, np.float64)

        def error(ours: Any, truth: Any = truth) -> float:
            pairs = zip(ours, truth, strict=True)
            return max(float(np.abs(o.double().numpy() - w).max()) for o, w in pairs)

        errors = {
            "ComfyUI-DyPE (float32 CPU)": float((theirs.double() - their_truth).abs().max()),
            "posenc.rope (exact)": error(_posenc(ids, t, torch.float32)),
            "posenc.rope_grid (exact)": error(_posenc_grid(t)),
        }
        first = times["ComfyUI-DyPE (float32 CPU)"]
        for label in fns:
            print(f"| {t:g} | {label} | {times[label]:.1f} | {times[label] / first:.2f} | "
                  f"{errors[label]:.2g} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=11)
    run(parser.parse_args().repeats)


if __name__ == "__main__":
    main()
