"""Make a transformers model's positional modules exact with one call: `posenc.torch.patch`.

Builds a small random-weight Llama 3 from a config (no download), patches a copy in
compat="original" mode (bit for bit the same logits) and another in exact mode, prints the
report, and compares both with the same model in float64 near its last position.

    python examples/patch_transformers.py
"""

from __future__ import annotations

import copy

import torch
import transformers

from posenc.torch import patch


def main() -> None:
    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000, max_position_embeddings=131072,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 1000, (1, 64))
    far = torch.arange(131072 - 64, 131072)[None]

    compat = copy.deepcopy(model)
    patch(compat, compat="original")
    exact = copy.deepcopy(model)
    report = patch(exact)
    print(report)
    reference = copy.deepcopy(model).double()
    patch(reference)  # float64 activations get exact float64 tables

    with torch.no_grad():
        want = reference(ids, position_ids=far).logits
        before = model(ids, position_ids=far).logits
        same = torch.equal(compat(ids, position_ids=far).logits, before)
        after = exact(ids, position_ids=far).logits
    print(f"\ncompat='original': logits identical: {same}")
    print("max |logit error| at positions 131008 … 131071, against float64:")
    print(f"  transformers float32: {(before.double() - want).abs().max():.3g}")
    print(f"  patched, exact:       {(after.double() - want).abs().max():.3g}")
    exact.load_state_dict(model.state_dict(), strict=True)
    print("the original checkpoint loads into the patched model with strict=True")


if __name__ == "__main__":
    main()
