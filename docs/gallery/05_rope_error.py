"""Rotary tables: error against position

The figure of docs/rope.md: max |error| of cos/sin against position, up to 2^24.
``python docs/gallery/05_rope_error.py`` writes ``rope-error.png`` and prints its values at
five positions (needs transformers, the test extra).

Head dim 128 (all 64 frequencies, cos and sin), bases 1e4 and 5e5, 49 positions spaced
evenly in log2 from 1 to 2^24 - 1. The truth is float64 NumPy from the formula (its own error
is below 2e-9 there). Curves: transformers' Llama rotary module in float32; the same module
called on bf16 activations under bf16 autocast (its tables come out in bf16); the same module
after ``.to(torch.bfloat16)`` (its ``inv_freq`` buffer becomes bf16); posenc.rope in bf16 and
in float32 (exact: the truth rounded once).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import transformers
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

import posenc
from posenc.app import plots

POSITIONS = np.unique(np.round(2.0 ** np.linspace(0, 24, 49)).astype(np.int64).clip(1, 2**24 - 1))


def errors(base: float) -> dict[str, np.ndarray]:
    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        hidden_size=4096,
        num_attention_heads=32,
        rope_parameters={"rope_type": "default", "rope_theta": base},
    )
    ids = torch.from_numpy(POSITIONS)[None]
    w = base ** (-np.arange(0, 128, 2) / 128)
    theta = POSITIONS[:, None].astype(np.float64) * w
    truth = np.concatenate([np.cos(theta)] * 2, -1), np.concatenate([np.sin(theta)] * 2, -1)

    def worst(pair: tuple) -> np.ndarray:
        cos, sin = (
            np.abs(t[0].double().numpy() - r).max(-1) for t, r in zip(pair, truth, strict=True)
        )
        return np.maximum(cos, sin)

    module = LlamaRotaryEmbedding(config)
    out = {"transformers float32": worst(module(torch.zeros(1), ids))}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out["transformers, bf16 autocast"] = worst(
            module(torch.zeros(1, dtype=torch.bfloat16), ids)
        )
    out["transformers after .to(bfloat16)"] = worst(
        module.to(torch.bfloat16)(torch.zeros(1, dtype=torch.bfloat16), ids)
    )
    out["posenc.rope, bfloat16"] = worst(posenc.rope(ids, 128, base=base, dtype=torch.bfloat16))
    out["posenc.rope, float32"] = worst(posenc.rope(ids, 128, base=base))
    return out


MARKS = (1000, 10_000, 100_000, 1_000_000, 2**24 - 1)


def figures() -> Iterator[tuple[str, str, str, Any]]:
    with plots.style():
        title = "RoPE cos/sin error against position, head_dim 128"
        fig, grid = plots.panels(title, 1, 2, 11, 4.2, sharey=True)
        axes = grid[0]
        for ax, base in zip(axes, (1e4, 5e5), strict=True):
            for name, err in errors(base).items():
                ax.loglog(POSITIONS, np.maximum(err, 1e-10), label=name, marker=".", markersize=3)
            ax.set(title=f"base {base:g}", xlabel="position")
        axes[0].set_ylabel("max |error| over 64 frequencies")
        axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    caption = (
        "transformers 5.23.0's Llama rotary module in float32, under bf16 autocast, and after "
        "`.to(torch.bfloat16)`, against posenc.rope in bfloat16 and float32; truth: float64 "
        "NumPy from the formula."
    )
    yield "", "rope-error", caption, fig


def main() -> None:
    for base in (1e4, 5e5):
        print(f"\nbase {base:g}: max |error| of cos/sin (head_dim 128)")
        print("| curve | " + " | ".join(f"p ~ {m:g}" for m in MARKS) + " |")
        print("|---|" + "---|" * len(MARKS))
        for name, err in errors(base).items():
            at = [err[np.abs(np.log(POSITIONS / m)).argmin()] for m in MARKS]
            print(f"| {name} | " + " | ".join(f"{e:.2g}" for e in at) + " |")
    for _, stem, _, fig in figures():
        plots.save(fig, f"{stem}.png")


if __name__ == "__main__":
    main()
