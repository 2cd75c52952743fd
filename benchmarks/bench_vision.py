"""Vision and video rotary embeddings: posenc's exact tables and rotation against diffusers'.

    python -m benchmarks.bench_vision                  # every section
    python -m benchmarks.bench_vision --only apply     # tables or apply (repeatable)

Side by side in one process, medians of 11 rounds, each round timing every implementation
once, in turn (the order rotating), torch's default threads:

- tables: the ``(cos, sin)`` tables of three grids, head_dim 128, float32 out:
  - Wan 2.1 at 720p, 81 frames (21 x 45 x 80 = 75600 tokens): diffusers' ``WanRotaryPosEmbed``
    as built on Linux (float64 tables at init, gathered per call) and as built on a host with
    MPS (float32 angles, even on the CPU);
  - HunyuanVideo at 720p, 129 frames (33 x 45 x 80 = 118800 tokens): diffusers'
    ``HunyuanVideoRotaryPosEmbed`` (float32 angles per call);
  - FLUX.1 at 4096 x 4096 pixels (256 x 256 image ids and 512 text ids, axes 16/56/56):
    diffusers' ``FluxPosEmbed`` on the CPU (float64 angles) and on a device without float64
    (MPS, NPU: float32 angles; its dtype helper forced here);
  against ``posenc.torch.AxialRotaryEmbedding`` (rows kept per axis, copied out; Wan and
  HunyuanVideo), ``posenc.rope_grid`` and ``posenc.rope`` of the FLUX ids (computed per call),
  each with its max |error| against float64;
- apply: q of ``[1, 4608, 24, 128]`` (FLUX at 1024 x 1024: 4096 image and 512 text tokens, 24 heads,
  ``sequence_dim=1``) rotated by diffusers' ``apply_rotary_emb`` (interleaved pairs) and by
  ``posenc.apply_rope`` (its default, and ``compat="diffusers"``), float32 and bfloat16,
  eager and compiled (``torch.compile``, default backend), with a ``clone`` as the floor.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import posenc
from benchmarks.bench_rope import interleaved_ms

SECTIONS = ("tables", "apply")


def _flux_ids(side: int = 256) -> torch.Tensor:
    """FLUX's ids of 512 text tokens (0, 0, 0) and a side x side image (0, row, col)."""
    rows, cols = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    image = torch.stack([torch.zeros_like(rows), rows, cols], dim=-1).reshape(-1, 3)
    return torch.cat([torch.zeros(512, 3, dtype=torch.int64), image]).float()


def _table_rows(repeats: int) -> None:
    from diffusers.models.transformers import (
        transformer_flux,
        transformer_hunyuan_video,
        transformer_wan,
    )

    mps = torch.backends.mps.is_available
    torch.backends.mps.is_available = lambda: True  # type: ignore[assignment]
    try:  # Wan as built on a host with MPS: float32 angles
        wan_mps = transformer_wan.WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    finally:
        torch.backends.mps.is_available = mps  # type: ignore[assignment]
    wan_linux = transformer_wan.WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    hunyuan_original = transformer_hunyuan_video.HunyuanVideoRotaryPosEmbed(
        2, 1, [16, 56, 56], 256.0
    )
    helper = transformer_flux.maybe_adjust_dtype_for_device
    flux = transformer_flux.FluxPosEmbed(10000, [16, 56, 56])

    def flux_float32(ids: torch.Tensor) -> Any:
        transformer_flux.maybe_adjust_dtype_for_device = lambda dtype, device: torch.float32
        try:
            return flux(ids)
        finally:
            transformer_flux.maybe_adjust_dtype_for_device = helper

    ids = _flux_ids()
    wan_latents = torch.zeros(1, 1, 21, 90, 160)
    hunyuan_latents = torch.zeros(1, 1, 33, 90, 160)
    wan = posenc.torch.AxialRotaryEmbedding(128, preset="wan")
    hunyuan = posenc.torch.AxialRotaryEmbedding(128, preset="hunyuan-video")
    cases: dict[str, tuple[Any, dict[str, Callable[[], Any]]]] = {
        "wan": (
            posenc.rope_grid((21, 45, 80), 128, preset="wan", dtype=np.float64),
            {
                "diffusers (float64 angles)": lambda: wan_linux(wan_latents),
                "diffusers, MPS host (float32)": lambda: wan_mps(wan_latents),
                "AxialRotaryEmbedding": lambda: wan((21, 45, 80)),
                "posenc.rope_grid": lambda: posenc.rope_grid(
                    (21, 45, 80), 128, preset="wan", dtype=torch.float32
                ),
            },
        ),
        "hunyuan-video": (
            posenc.rope_grid((33, 45, 80), 128, preset="hunyuan-video", dtype=np.float64),
            {
                "diffusers (float32 angles)": lambda: hunyuan_original(hunyuan_latents),
                "AxialRotaryEmbedding": lambda: hunyuan((33, 45, 80)),
                "posenc.rope_grid": lambda: posenc.rope_grid(
                    (33, 45, 80), 128, preset="hunyuan-video", dtype=torch.float32
                ),
            },
        ),
        "flux": (
            posenc.rope(ids.numpy(), 128, preset="flux", dtype=np.float64),
            {
                "diffusers (float64 angles)": lambda: flux(ids),
                "diffusers, MPS/NPU (float32)": lambda: flux_float32(ids),
                "posenc.rope": lambda: posenc.rope(ids, 128, preset="flux", dtype=torch.float32),
            },
        ),
    }
    print("| grid | implementation | ms | x diffusers' first | max error |")
    print("|---|---|---|---|---|")
    for name, (truth, fns) in cases.items():
        times = interleaved_ms(fns, repeats)
        first = times[next(iter(fns))]
        for label, fn in fns.items():
            cos, sin = (t.reshape(-1, 128).double().numpy() for t in fn())
            err = max(np.abs(cos - truth[0]).max(), np.abs(sin - truth[1]).max())
            print(f"| {name} | {label} | {times[label]:.1f} | {times[label] / first:.2f} | "
                  f"{err:.2g} |")  # fmt: skip


def _apply_rows(repeats: int) -> None:
    from diffusers.models.embeddings import apply_rotary_emb

    gen = torch.Generator().manual_seed(0)
    cos, sin = posenc.rope(_flux_ids(64), 128, preset="flux", dtype=torch.float32)

    def theirs(x: torch.Tensor) -> torch.Tensor:
        return apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-1,
                                sequence_dim=1)  # fmt: skip

    def ours(x: torch.Tensor) -> torch.Tensor:
        return posenc.apply_rope(x, cos[:, None], sin[:, None], "interleaved")

    def compat(x: torch.Tensor) -> torch.Tensor:
        return posenc.apply_rope(x, cos[:, None], sin[:, None], "interleaved",
                                 compat="diffusers")  # fmt: skip

    print("| dtype | mode | implementation | ms | x diffusers | x clone |")
    print("|---|---|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        q = torch.randn(1, 4608, 24, 128, generator=gen).to(dtype)
        for mode in ("eager", "compiled"):
            fns = {"diffusers apply_rotary_emb": theirs, "posenc.apply_rope": ours,
                   "posenc.apply_rope compat": compat, "clone": torch.clone}  # fmt: skip
            if mode == "compiled":
                torch._dynamo.reset()
                fns = {k: torch.compile(f) for k, f in fns.items()}
            calls = {k: (lambda f=f, x=q: f(x)) for k, f in fns.items()}
            times = interleaved_ms(calls, repeats)
            for label in calls:
                if label == "clone":
                    continue
                base = times["diffusers apply_rotary_emb"]
                print(f"| {str(dtype).replace('torch.', '')} | {mode} | {label} | "
                      f"{times[label]:.1f} | {times[label] / base:.2f} | "
                      f"{times[label] / times['clone']:.2f} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run these sections")
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    only = set(args.only or SECTIONS)
    if "tables" in only:
        print("### Tables: Wan 720p/81 frames, HunyuanVideo 720p/129 frames, FLUX 4096²\n")
        _table_rows(args.repeats)
    if "apply" in only:
        print("\n### Apply: q [1, 4608, 24, 128], FLUX's sequence_dim=1\n")
        _apply_rows(args.repeats)


if __name__ == "__main__":
    main()
