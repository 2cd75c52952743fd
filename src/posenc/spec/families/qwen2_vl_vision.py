"""The vision towers of Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5, the Qwen Omni models, GLM-4V,
GLM-OCR and PaddleOCR-VL (transformers ``Qwen2VLVisionRotaryEmbedding`` and its copies).

2D axial RoPE over a patch grid ``(rows, columns)``: :func:`posenc.rope_grid` gives the tables
of every patch, row-major; ``compat="transformers"`` repeats transformers' float32 arithmetic
(:mod:`posenc.compat.transformers_vision`).
"""

from __future__ import annotations

from posenc.spec.families.base import TOWER, Classes, Family, Row, two_blocks
from posenc.spec.presets.base import RotaryPreset

QWEN2_VL_VISION = RotaryPreset(
    "qwen2-vl-vision",
    "transformers Qwen2VLVisionRotaryEmbedding (Qwen2-VL, Qwen2.5-VL; Qwen3-VL's vision "
    "tower has the same form with head_dim 72)",
    "2D axial over the patch grid, [row | column] blocks of d/2, halves, base 10000",
    80,
    {"base": 10000.0, "layout": "halves"},
    "transformers orders the patches by 2 x 2 merge blocks (get_vision_position_ids) and "
    "repeats them per temporal patch; Qwen2.5-VL then permutes them by window_index: "
    "rope_grid's rows are row-major, so take posenc.rope(position_ids, dim, "
    "preset='qwen2-vl-vision') with transformers' [N, 2] (row, column) ids, or index "
    "rope_grid's rows with row * W + column. float32 tables, q and k rotated in float32",
    axial=two_blocks("qwen2-vl-vision"),
    replays={"transformers": "posenc.compat.transformers_vision:qwen2_vl_vision"},
)


MODULES = Classes(
    "transformers",
    "Qwen2VLVisionRotaryEmbedding",
    "Qwen2_5_VLVisionRotaryEmbedding",
    "Qwen3VLVisionRotaryEmbedding",
    "Qwen3VLMoeVisionRotaryEmbedding",
    "Qwen2_5OmniVisionRotaryEmbedding",
    "Qwen3OmniMoeVisionRotaryEmbedding",
    "Qwen3_5VisionRotaryEmbedding",
    "Qwen3_5MoeVisionRotaryEmbedding",
    "Glm4vVisionRotaryEmbedding",
    "Glm4vMoeVisionRotaryEmbedding",
    "GlmOcrVisionRotaryEmbedding",
    "PaddleOCRVisionRotaryEmbedding",
)

FAMILY = Family(
    "Qwen2-VL vision",
    (QWEN2_VL_VISION,),
    classes=(MODULES,),
    unaudited=TOWER,
    docs=(
        Row(
            QWEN2_VL_VISION,
            "transformers",
            "Qwen2-VL, Qwen2.5-VL vision towers",
            "`d/2`, `d/2`",
            "integers (merge-block order: see its quirks)",
        ),
    ),
)
