"""OmniGen v1 (diffusers ``OmniGenSuScaledRotaryEmbedding``): Phi-3's longrope over the whole
head.
"""

from __future__ import annotations

from posenc.spec.families.base import Classes, Family, Row
from posenc.spec.presets.base import RotaryPreset

OMNIGEN = RotaryPreset(
    "omnigen",
    "diffusers OmniGenSuScaledRotaryEmbedding (OmniGen v1: Phi-3's longrope)",
    "1D over the whole head (96), halves, base 10000, Phi-3 longrope: pass the "
    "checkpoint's short and long factors",
    96,
    {"base": 10000.0, "layout": "halves"},
    "pass scaling={'rope_type': 'longrope', 'short_factor': …, 'long_factor': …, "
    "'original_max_position_embeddings': 4096, 'max_position_embeddings': 131072} "
    "(the transformer's rope_scaling and sizes): the long factors apply when the "
    "batch's largest position passes 4095 (seq_len=), and cos and sin carry the "
    "attention factor sqrt(1 + ln 32 / ln 4096) = 1.1902; diffusers takes the table "
    "of the batch's first item for every item; compat='transformers' is its float32 "
    "arithmetic bit for bit",
)


MODULE = Classes("diffusers", "OmniGenSuScaledRotaryEmbedding")

FAMILY = Family(
    "OmniGen",
    (OMNIGEN,),
    classes=(MODULE,),
    unaudited="its longrope factors are the checkpoint's: patch measures the model itself",
    docs=(
        Row(
            OMNIGEN,
            "diffusers ids",
            "OmniGen v1",
            "one block over the head (96), Phi-3 `longrope` (`scaling=`)",
            "1-D ids of the batch's first item",
            compat="`transformers` (`posenc.rope`)",
        ),
    ),
)
