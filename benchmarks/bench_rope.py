"""Rotary embeddings: posenc's exact tables and rotation against transformers' own.

    python -m benchmarks.bench_rope

Side by side in one process, medians of 7 runs, torch's default threads:

- tables: cos and sin for 131072 positions at head_dim 128, float32: posenc exact, the
  transformers Llama rotary module (float32 angles: inexact), and torch computing the same
  in float64 and rounding (exact, the obvious way);
- apply: q and k of ``[1, 32, 4096, 128]`` rotated by posenc.apply_rope, by transformers'
  eager ``apply_rotary_pos_emb``, and one ``clone`` of each (the floor), float32 and bf16;
- decoding: one token at position 100000: the module's step (tables and rotation of q and k)
  against a gather from a precomputed table plus transformers' rotation.
- compiled: the module against transformers' rotary module and apply, both compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import posenc
from benchmarks.bench_modules import median_ms
from posenc.torch import RotaryEmbedding


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
    _decode_rows(hf_apply)
    print("\n### Compiled: rotary tables and apply for q and k of [1, 32, 4096, 128]\n")
    _compiled_rows(module, hf_apply, repeats)


def _decode_rows(hf_apply: Callable[..., Any]) -> None:
    """One decoding step: q [1, 32, 1, 128] and k [1, 8, 1, 128] at position 100000."""
    print("| implementation | ms | x gather + apply |")
    print("|---|---|---|")
    table_cos, table_sin = posenc.rope(torch.arange(131072), 128)
    one = torch.tensor([[100_000]])
    q, k = torch.randn(1, 32, 1, 128), torch.randn(1, 8, 1, 128)
    module = RotaryEmbedding(128)
    steps = iter(range(100_000, 10**9))
    rows = {
        "gather from a precomputed table": lambda: (table_cos[one], table_sin[one]),
        "gather + transformers apply_rotary_pos_emb": lambda: hf_apply(
            q, k, table_cos[one], table_sin[one]
        ),
        "posenc.rope on the id": lambda: posenc.rope(one, 128),
        "RotaryEmbedding(q, k, offset=100000)": lambda: module(q, k, offset=100_000),
        "RotaryEmbedding, a decoding loop (offsets 100000, 100001, …)": lambda: module(
            q, k, offset=next(steps)
        ),
    }
    times = {name: median_ms(fn, 301) for name, fn in rows.items()}
    base = times["gather + transformers apply_rotary_pos_emb"]
    for name, ms in times.items():
        print(f"| {name} | {ms:.3f} | {ms / base:.2f} |")


def _compiled_rows(module: Any, hf_apply: Callable[..., Any], repeats: int) -> None:
    print("| dtype | posenc RotaryEmbedding ms | transformers rotary + apply ms | x transformers |")
    print("|---|---|---|---|")
    ours_module = RotaryEmbedding(128)
    ids = torch.arange(4096)[None]

    def theirs(q: torch.Tensor, k: torch.Tensor) -> Any:
        cos, sin = module(q, ids)
        return hf_apply(q, k, cos, sin)

    for dtype in (torch.float32, torch.bfloat16):
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(1, 32, 4096, 128, generator=gen).to(dtype)
        k = torch.randn(1, 32, 4096, 128, generator=gen).to(dtype)
        torch._dynamo.reset()
        ours = torch.compile(ours_module, fullgraph=True)
        hf = torch.compile(theirs, fullgraph=True)
        a = median_ms(lambda q=q, k=k, f=ours: f(q, k), repeats)
        b = median_ms(lambda q=q, k=k, f=hf: f(q, k), repeats)
        name = str(dtype).replace("torch.", "")
        print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
