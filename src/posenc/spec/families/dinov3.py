"""DINOv3 (transformers ``DINOv3ViTRopePositionEmbedding``, timm ``RotaryEmbeddingDinoV3``):
periods over the patch centres in ``[-1, 1]``.
"""

from __future__ import annotations

import math

from posenc.spec.families.base import Classes, Family, Row, TimmAudit, centred, two_blocks
from posenc.spec.presets.base import RotaryPreset

DINOV3 = RotaryPreset(
    "dinov3",
    "transformers DINOv3ViTRopePositionEmbedding and timm RotaryEmbeddingDinoV3 "
    "(DINOv3 ViT, facebookresearch/dinov3 RopePositionEmbedding; ConvNeXt has none)",
    "2D axial on patch centres ((i + 0.5) / n) * 2 - 1, [y | x] blocks of d/2, halves, "
    "base 100, angle 2 pi * coordinate * frequency",
    64,
    {"base": 100.0, "layout": "halves", "axes_scale": (2 * math.pi, 2 * math.pi)},
    "rope_grid's default positions are the patch centres of the grid asked for (any "
    "size: the model normalises every grid to [-1, 1]); only the patch tokens are "
    "rotated (the class and register tokens before them are not); training adds "
    "random shift, jitter and rescale, which these eval tables leave out; transformers "
    "multiplies 2 pi * c * frequency in float32 (up to ~5e-7 off), timm and the "
    "original divide 2 pi * c by the period (compat='timm'; timm's get_embed returns "
    "cat(sin, cos), sin first); the released checkpoints store the periods in bfloat16, "
    "which both recompute in float32",
    axial=two_blocks("dinov3"),
    positions=centred,
    replays={
        "transformers": "posenc.compat.transformers_vision:dinov3",
        "timm": "posenc.compat.timm:dinov3",
    },
)


TRANSFORMERS = Classes("transformers", "DINOv3ViTRopePositionEmbedding")
TIMM = Classes("timm", "RotaryEmbeddingDinoV3")

FAMILY = Family(
    "DINOv3",
    (DINOV3,),
    classes=(TRANSFORMERS, TIMM),
    audits=(TimmAudit("dinov3", DINOV3),),
    docs=(
        Row(
            DINOV3,
            "transformers",
            "DINOv3 ViT (transformers, timm)",
            "`d/2`, `d/2`, frequencies x 2 pi",
            "patch centres in [-1, 1]",
        ),
    ),
)
