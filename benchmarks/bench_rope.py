"""Rotary embeddings: posenc's exact tables and rotation against transformers' own.

    python -m benchmarks.bench_rope

Side by side in one process, medians of 7 runs, torch's default threads:

- tables: cos and sin for 131072 positions at head_dim 128, float32: posenc exact, the
  transformers Llama rotary module (float32 angles: inexact), and torch computing the same
  in float64 and rounding (exact, the obvious way);
- apply: q and k of ``[1, 32, 4096, 128]`` rotated by posenc.apply_rope, by transformers'
  eager ``apply_rotary_pos_emb``, and one ``clone`` of each (the floor), float32 and bf16;
- decoding: one token at position 100000 (``[1, 1]`` ids): posenc.rope on the id, against a
  gather from a precomputed table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import posenc
from benchmarks.bench_modules import median_ms


def _hf() -> tuple:
    import transformers
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(hidden_size=4096, num_attention_heads=32)
    return LlamaRotaryEmbedding(config), apply_rotary_pos_emb


def _float64(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w = 10000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    angles = ids[..., None].double() * w
    both = torch.cat([angles, angles], dim=-1)
    return both.cos().float(), both.sin().float()


def _apply_row(dtype: torch.dtype, hf_apply: Callable[..., Any], repeats: int) -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 32, 4096, 128, generator=gen).to(dtype)
    k = torch.randn(1, 32, 4096, 128, generator=gen).to(dtype)
    cos, sin = posenc.rope(torch.arange(4096)[None], 128, dtype=dtype)
    c, s = cos[:, None], sin[:, None]
    ours = median_ms(lambda: (posenc.apply_rope(q, c, s), posenc.apply_rope(k, c, s)), repeats)
    theirs = median_ms(lambda: hf_apply(q, k, cos, sin), repeats)
    floor = median_ms(lambda: (q.clone(), k.clone()), repeats)
    name = str(dtype).replace("torch.", "")
    print(
        f"| {name} | {ours:.1f} | {theirs:.1f} | {floor:.1f} | {ours / theirs:.2f} | "
        f"{ours / floor:.2f} |"
    )


def main() -> None:
    module, hf_apply = _hf()
    repeats = 7
    print("### Tables: 131072 positions, head_dim 128, float32\n")
    print("| implementation | exact | ms | x posenc |")
    print("|---|---|---|---|")
    ids = torch.arange(131072)[None]
    x = torch.zeros(1)
    posenc.set_table_cache(0)  # every call computes its table
    times = {
        "posenc.rope (torch ids)": (True, median_ms(lambda: posenc.rope(ids, 128), repeats)),
        "posenc.rope (NumPy ids)": (
            True,
            median_ms(lambda: posenc.rope(np.arange(131072), 128), repeats),
        ),
        "transformers LlamaRotaryEmbedding": (False, median_ms(lambda: module(x, ids), repeats)),
        "torch float64 angles, rounded": (True, median_ms(lambda: _float64(ids), repeats)),
    }
    base = times["posenc.rope (torch ids)"][1]
    for name, (exact, ms) in times.items():
        print(f"| {name} | {'yes' if exact else 'no'} | {ms:.1f} | {ms / base:.2f} |")
    posenc.set_table_cache(64 << 20)

    print("\n### Apply: q and k of [1, 32, 4096, 128]\n")
    print(
        "| dtype | posenc.apply_rope ms | transformers ms | clone ms | x transformers | x clone |"
    )
    print("|---|---|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        _apply_row(dtype, hf_apply, repeats)

    print("\n### Decoding one token at position 100000, head_dim 128\n")
    print("| implementation | ms | x gather |")
    print("|---|---|---|")
    table_cos, table_sin = posenc.rope(torch.arange(131072), 128)
    one = torch.tensor([[100_000]])
    gather = median_ms(lambda: (table_cos[one], table_sin[one]), 101)
    rope = median_ms(lambda: posenc.rope(one, 128), 101)
    print(f"| gather from a precomputed table | {gather:.3f} | 1.00 |")
    print(f"| posenc.rope on the id | {rope:.3f} | {rope / gather:.2f} |")


if __name__ == "__main__":
    main()
