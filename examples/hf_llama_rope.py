"""Swap a transformers Llama's rotary module for posenc's, and measure what it changes.

    python examples/hf_llama_rope.py

A small LlamaForCausalLM with random weights is built from a config (no download; Llama 3's
base and scaling). Its rotary module is replaced by ``RotaryEmbedding.from_hf(config)``:

- ``compat="transformers"``: the logits are identical, bit for bit: nothing changes when a
  model switches to posenc in this mode;
- exact (the default): the logits move towards the truth. The truth is the same model in
  float64 with exact float64 tables; transformers' own float32 tables drift with the
  position (float32 angles), posenc's do not.
"""

from __future__ import annotations

import copy

import torch

from posenc.torch import RotaryEmbedding

STARTS = (0, 4096, 32768, 131072 - 64)


def build(seed: int = 0) -> torch.nn.Module:
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=131072,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).eval()


def swapped(model: torch.nn.Module, compat: str | None, dtype: torch.dtype) -> torch.nn.Module:
    """A copy of ``model`` in ``dtype`` whose rotary module is posenc's."""
    out = copy.deepcopy(model).to(dtype)
    out.model.rotary_emb = RotaryEmbedding.from_hf(out.config, compat=compat)
    return out


@torch.no_grad()
def logits(model: torch.nn.Module, ids: torch.Tensor, start: int) -> torch.Tensor:
    positions = torch.arange(start, start + ids.shape[1])[None]
    return model(input_ids=ids, position_ids=positions).logits.double()


def compare(starts: tuple[int, ...] = STARTS, tokens: int = 64) -> list[dict[str, float]]:
    """Per start position: whether compat mode changed any logit, and the largest logit
    error of transformers' float32 tables and of posenc's exact ones against float64."""
    model = build()
    compat = swapped(model, "transformers", torch.float32)
    exact = swapped(model, None, torch.float32)
    truth = swapped(model, None, torch.float64)  # float64 weights, exact float64 tables
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator())
    rows = []
    for start in starts:
        hf = logits(model, ids, start)
        want = logits(truth, ids, start)
        rows.append(
            {
                "start": start,
                "compat_identical": float(torch.equal(logits(compat, ids, start), hf)),
                "transformers_error": float((hf - want).abs().max()),
                "posenc_error": float((logits(exact, ids, start) - want).abs().max()),
            }
        )
    return rows


def main() -> None:
    print("| positions | compat logits identical | transformers float32: max error | "
          "posenc exact float32: max error |")  # fmt: skip
    print("|---|---|---|---|")
    for r in compare():
        span = f"{r['start']} … {r['start'] + 63}"
        print(f"| {span} | {'yes' if r['compat_identical'] else 'NO'} | "
              f"{r['transformers_error']:.2e} | {r['posenc_error']:.2e} |")  # fmt: skip


if __name__ == "__main__":
    main()
