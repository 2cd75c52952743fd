"""Rotary embeddings: posenc's exact tables and rotation against transformers' own.

    python -m benchmarks.bench_rope                 # every section
    python -m benchmarks.bench_rope --only patch    # one section: tables, apply, decode,
                                                    # compiled or patch (repeatable)

Side by side in one process, medians of 7 runs (patch: 21 rounds), torch's default threads:

- tables: cos and sin for 131072 positions at head_dim 128, float32: posenc exact, the
  transformers Llama rotary module (float32 angles: inexact), and torch computing the same
  in float64 and rounding (exact, the obvious way);
- apply: q and k of ``[1, 32, 4096, 128]`` rotated by posenc.apply_rope, by transformers'
  eager ``apply_rotary_pos_emb``, and one ``clone`` of each (the floor), float32 and bf16;
- decoding: one token at position 100000: the module's step (tables and rotation of q and k)
  against a gather from a precomputed table plus transformers' rotation.
- compiled: the module against transformers' rotary module and apply, both compiled.
- patch: a small random-weight ``LlamaForCausalLM`` (llama3 scaling, 4 layers, ids
  ``[1, 2048]``) as built, after ``posenc.torch.patch(model)`` (exact) and after
  ``patch(model, compat="original")``, eager and compiled, the three timed in turn in each
  round; and the logits' max |difference| at positions 32704 … 32767 to the same model in
  float64 with exact float64 tables.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
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


SECTIONS = ("tables", "apply", "decode", "compiled", "patch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run these sections")
    args = parser.parse_args()
    only = set(args.only or SECTIONS)
    module, hf_apply = _hf()
    repeats = 7
    if "tables" in only:
        _table_rows(module, repeats)
    if "apply" in only:
        print("\n### Apply: q and k of [1, 32, 4096, 128]\n")
        print(
            "| dtype | posenc.apply_rope ms | transformers ms | clone ms | x transformers "
            "| x clone |"
        )
        print("|---|---|---|---|---|---|")
        for dtype in (torch.float32, torch.bfloat16):
            _apply_row(dtype, hf_apply, repeats)
    if "decode" in only:
        print("\n### Decoding one token at position 100000, head_dim 128\n")
        _decode_rows(hf_apply)
    if "compiled" in only:
        print("\n### Compiled: rotary tables and apply for q and k of [1, 32, 4096, 128]\n")
        _compiled_rows(module, hf_apply, repeats)
    if "patch" in only:
        print("\n### A patched Llama forward: ids [1, 2048]\n")
        _patch_rows()


def _table_rows(module: Any, repeats: int) -> None:
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


def _llama() -> Any:
    """A small random-weight Llama 3 (llama3 scaling x8 from 8192, 32768 positions)."""
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        vocab_size=1024,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
        head_dim=64,
        max_position_embeddings=32768,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def interleaved_ms(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Medians of ``repeats`` rounds; each round times every function once, in turn (the
    order rotating), so that the machine's load drifts over all of them alike."""
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        fns[name]()  # warm up
    for i in range(repeats):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


@torch.no_grad()
def _patch_rows(repeats: int = 21) -> None:
    """The original model, ``patch(model)`` and ``patch(model, compat="original")``: forward
    time, eager and compiled (each compiled alike, ``torch.compile(model)``, and warmed up), the
    rotary module's own call (eager, 51 rounds), and the logits' error near position 32768."""
    from posenc.torch import patch

    original = _llama()
    exact = copy.deepcopy(original)
    compat = copy.deepcopy(original)
    assert [r.mode for r in patch(exact).replaced] == ["exact"]
    assert [r.mode for r in patch(compat, compat="original").replaced] == ["compat"]
    truth = copy.deepcopy(original).double()
    patch(truth)  # float64 weights, exact float64 tables (the original's angles are float32)
    models = {
        "original (transformers LlamaRotaryEmbedding)": original,
        "patch(model): exact": exact,
        'patch(model, compat="original")': compat,
    }
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1024, (1, 2048), generator=gen)
    tail = torch.randint(0, 1024, (1, 64), generator=gen)
    positions = torch.arange(32768 - 64, 32768)[None]

    def logits(model: Any) -> torch.Tensor:
        return model(input_ids=tail, position_ids=positions, use_cache=False).logits.double()

    want = logits(truth)
    error = {name: float((logits(m) - want).abs().max()) for name, m in models.items()}
    same = {name: torch.equal(logits(m), logits(original)) for name, m in models.items()}
    x, ids_2048 = torch.zeros(1, 2048, 512), torch.arange(2048)[None]
    rotary = interleaved_ms(
        {name: lambda m=m: m.model.rotary_emb(x, ids_2048) for name, m in models.items()}, 51
    )
    eager = interleaved_ms(
        {name: lambda m=m: m(input_ids=ids, use_cache=False) for name, m in models.items()},
        repeats,
    )
    torch._dynamo.reset()
    compiled = {name: torch.compile(m) for name, m in models.items()}
    for m in compiled.values():  # compile and warm up each
        m(input_ids=ids, use_cache=False)
    traced = interleaved_ms(
        {name: lambda m=m: m(input_ids=ids, use_cache=False) for name, m in compiled.items()},
        repeats,
    )
    first = next(iter(models))
    print(
        "| model | eager ms | x original | compiled ms | x original | rotary_emb alone ms "
        "| logits max error at 32704 … 32767 | logits = original's |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in models:
        print(
            f"| {name} | {eager[name]:.0f} | {eager[name] / eager[first]:.3f} | "
            f"{traced[name]:.0f} | {traced[name] / traced[first]:.3f} | {rotary[name]:.2f} | "
            f"{error[name]:.2e} | {'yes' if same[name] else 'no'} |"
        )


if __name__ == "__main__":
    main()
