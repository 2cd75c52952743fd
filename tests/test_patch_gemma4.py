"""posenc.torch.patch on Gemma 4's text model, a small random-weight model from a config (no
download), whose ``Gemma4TextRotaryEmbedding`` holds a table per layer type (the full-attention
layers' ``proportional`` rule on their own head dim): ``compat="original"`` leaves every output
identical (float32, a bf16 model), the report names the rotary module, the exact patch holds
float64 tables (written here from the formulas) rounded once and moves the outputs by float32
noise, the original checkpoint loads with strict=True, and patching twice is a no-op;
``RotaryEmbedding.from_hf`` reads the multimodal ``Gemma4Config`` too. (The vision encoder:
tests/families/test_gemma4_vision.py.)"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.families.models import assert_rounded_once

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")
from posenc.torch import RotaryEmbedding  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


# ---------------------------------------------------------------------------------------------
# the text model: one table per layer type


def _text():
    torch.manual_seed(0)
    config = transformers.Gemma4TextConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, global_head_dim=64, vocab_size=128,
        vocab_size_per_layer_input=128, hidden_size_per_layer_input=16,
        max_position_embeddings=2048,
        layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    return transformers.Gemma4TextModel(config).eval()


def _text_out(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).last_hidden_state


def test_text_compat_is_identical_and_exact_is_close():
    model = _text()
    ids = torch.randint(0, 128, (2, 37), generator=torch.Generator().manual_seed(1))

    def exact(original, patched):
        got = _text_out(patched, ids)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, _text_out(original, ids), rtol=0, atol=1e-4)

    contract = check_patch_contract(
        model, {"rotary_emb": "Gemma4TextRotaryEmbedding"},
        lambda m, dtype: forward(m, {"input_ids": ids}, dtype), exact)  # fmt: skip
    assert "proportional" in contract.compat.replaced[0].replacement


def test_text_tables_per_layer_type():
    """Sliding layers: the default rule on head_dim 32, base 1e4; full-attention layers:
    ``proportional`` on global_head_dim 64, base 1e6, the first int(0.25 * 64 // 2) = 8
    frequencies ``base ** (-2i / 64)`` and 24 zeros. Exact: float64 rounded once; compat:
    the module's, bit for bit, also read through the multimodal ``Gemma4Config``."""
    model = _text()
    original = copy.deepcopy(model.rotary_emb)
    exact = RotaryEmbedding.from_hf(model.config)
    wrapper = transformers.Gemma4Config(text_config=model.config.to_dict())
    compat = RotaryEmbedding.from_hf(wrapper, "transformers")
    pos = torch.arange(2048)[None]
    x = torch.zeros(1)
    for lt, d, base, rotated in (("sliding_attention", 32, 1e4, 16),
                                 ("full_attention", 64, 1e6, 8)):  # fmt: skip
        omega = np.zeros(d // 2)
        omega[:rotated] = base ** (-2.0 * np.arange(rotated) / d)
        angles = np.arange(2048.0)[:, None] * np.concatenate([omega, omega])
        got = exact(x, pos, lt)
        assert got[0].shape == (1, 2048, d)
        assert_rounded_once(got[0][0], np.cos(angles))
        assert_rounded_once(got[1][0], np.sin(angles))
        want = original(x, pos, lt)
        assert all(torch.equal(a, b) for a, b in zip(compat(x, pos, lt), want, strict=True))
