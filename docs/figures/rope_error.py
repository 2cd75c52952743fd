"""The figure of docs/rope.md: max |error| of cos/sin against position, up to 2^24.

    python docs/figures/rope_error.py        # writes docs/figures/rope_error.png, prints the table

Head dim 128 (all 64 frequencies, cos and sin), bases 1e4 and 5e5, 49 positions spaced
evenly in log2 from 1 to 2^24 - 1. The truth is float64 NumPy from the formula (its own error
is below 2e-9 there). Curves: transformers' Llama rotary module in float32; the same module
called on bf16 activations under bf16 autocast (its tables come out in bf16); the same module
after ``.to(torch.bfloat16)`` (its ``inv_freq`` buffer becomes bf16); posenc.rope in bf16 and
in float32 (exact: the truth rounded once).
"""

from __future__ import annotations

import pathlib

import numpy as np
import torch
import transformers
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

import posenc

HERE = pathlib.Path(__file__).parent
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


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, base in zip(axes, (1e4, 5e5), strict=True):
        found = errors(base)
        print(f"\nbase {base:g}: max |error| of cos/sin (head_dim 128)")
        marks = [1000, 10_000, 100_000, 1_000_000, 2**24 - 1]
        print("| curve | " + " | ".join(f"p ~ {m:g}" for m in marks) + " |")
        print("|---|" + "---|" * len(marks))
        for name, err in found.items():
            ax.loglog(POSITIONS, np.maximum(err, 1e-10), label=name, marker=".")
            at = [err[np.abs(np.log(POSITIONS / m)).argmin()] for m in marks]
            print(f"| {name} | " + " | ".join(f"{e:.2g}" for e in at) + " |")
        ax.set_title(f"base {base:g}")
        ax.set_xlabel("position")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("max |error| over 64 frequencies")
    fig.suptitle("RoPE cos/sin error against position, head_dim 128")
    axes[1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    fig.tight_layout()
    fig.savefig(HERE / "rope_error.png", dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    main()
