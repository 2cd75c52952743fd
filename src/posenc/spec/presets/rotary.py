"""The rotary presets: the ``ROTARY_PRESETS`` data, one entry per model family.

Each entry is the keywords of :func:`posenc.rope` the family uses (see
:class:`~posenc.spec.presets.base.RotaryPreset`): the language models' here, the image and
video models' in their family records (:mod:`posenc.spec.families`), both in
``ROTARY_PRESETS``.
"""

from __future__ import annotations

from posenc.spec.families import PRESETS as FAMILY_PRESETS
from posenc.spec.presets.base import RotaryPreset

_YARN_V3 = {
    "rope_type": "yarn",
    "factor": 40.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}

ROTARY_PRESETS: dict[str, RotaryPreset] = {
    p.name: p
    for p in [
        RotaryPreset(
            "llama",
            "transformers LlamaRotaryEmbedding (Llama 2, Mistral 7B, most 5.x decoders)",
            "halves (rotate_half), base 10000, no scaling",
            128,
            {"base": 10000.0, "layout": "halves"},
            "Meta's own llama code pairs channels (2i, 2i+1) (layout='interleaved'); HF "
            "checkpoints permute the q/k rows so halves gives the same attention",
        ),
        RotaryPreset(
            "llama3",
            "transformers rope_type 'llama3'; meta-llama/llama-models apply_scaling (3.1-3.3)",
            "halves, base 500000, llama3 frequency scaling x8 from 8192 positions",
            128,
            {
                "base": 500000.0,
                "layout": "halves",
                "scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                },
            },
            "Llama 3.2 1B/3B use factor 32: pass scaling= with the model's own dict",
        ),
        RotaryPreset(
            "qwen2",
            "transformers Qwen2RotaryEmbedding (Qwen2, Qwen2.5, Qwen3)",
            "halves, base 1000000",
            128,
            {"base": 1000000.0, "layout": "halves"},
            "Qwen ignores partial_rotary_factor in its default rule (every channel rotates)",
        ),
        RotaryPreset(
            "neox",
            "transformers GPTNeoXRotaryEmbedding; EleutherAI gpt-neox (Pythia)",
            "halves over the first rotary_pct (0.25) of each head, base 10000",
            32,
            {"base": 10000.0, "layout": "halves"},
            "pass dim = int(head_dim * rotary_pct) (Pythia: 128 * 0.25 = 32); apply_rope and "
            "RotaryEmbedding pass the other channels through",
        ),
        RotaryPreset(
            "gptj",
            "transformers GPTJ (rotate_every_two); EleutherAI mesh-transformer-jax",
            "interleaved pairs (2i, 2i+1) over rotary_dim 64 of 256, base 10000",
            64,
            {"base": 10000.0, "layout": "interleaved"},
            "GPT-J stores its table as [sin | cos] rows; the numbers are these",
        ),
        RotaryPreset(
            "cohere",
            "transformers CohereRotaryEmbedding (Command R)",
            "interleaved pairs (repeat_interleave), base 500000 (CohereConfig's default)",
            128,
            {"base": 500000.0, "layout": "interleaved"},
            "checkpoints set their own rope_theta: pass the config's as base=",
        ),
        RotaryPreset(
            "qwen2-vl",
            "transformers Qwen2VLTextModel rotary (mrope), Qwen2.5-VL",
            "halves, base 1000000, sections (16, 24, 24) of the 64 frequencies for t, h, w",
            128,
            {"base": 1000000.0, "layout": "halves", "sections": (16, 24, 24)},
            "positions are [3, batch, seq] (temporal, height, width); text tokens repeat one id",
        ),
        RotaryPreset(
            "qwen3-vl",
            "transformers Qwen3VLTextModel rotary (interleaved mrope)",
            "halves, base 500000, sections (24, 20, 20) assigned round robin",
            128,
            {
                "base": 500000.0,
                "layout": "halves",
                "sections": (24, 20, 20),
                "interleave_sections": True,
            },
            "frequency j reads h if j % 3 == 1 and j < 60, w if j % 3 == 2 and j < 60, else t; "
            "base is Qwen3VLTextConfig's default: checkpoints set their own rope_theta",
        ),
        RotaryPreset(
            "deepseek-v3",
            "transformers DeepseekV3RotaryEmbedding; deepseek-ai DeepSeek-V3 config",
            "YaRN x40 from 4096 (beta 32/1, mscale 1/1), qk_rope_head_dim 64, pairs (2i, 2i+1)",
            64,
            {"base": 10000.0, "layout": "interleaved", "scaling": _YARN_V3},
            "HF writes the rotated pairs in halves order (the same for q and k, so the same "
            "attention); the softmax scale also takes mscale**2: posenc.softmax_scale",
        ),
        RotaryPreset(
            "gpt-oss",
            "transformers GptOssRotaryEmbedding (gpt-oss-20b/120b)",
            "compact tables (d/2 columns), halves pairs, YaRN x32 from 4096, base 150000",
            64,
            {
                "base": 150000.0,
                "layout": "compact",
                "scaling": {
                    "rope_type": "yarn",
                    "factor": 32.0,
                    "original_max_position_embeddings": 4096,
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "truncate": False,
                },
            },
            "YaRN's correction range is not rounded to integers (truncate: False)",
        ),
    ]
}
ROTARY_PRESETS.update(FAMILY_PRESETS)
