"""Gemma 4's vision encoder (transformers ``Gemma4VisionRotaryEmbedding``, timm
``Gemma4RotaryEmbedding2D``): halves inside each axis block, base 100.
"""

from __future__ import annotations

from posenc.spec.families.base import TOWER, Classes, Family, Row, two_blocks
from posenc.spec.presets.base import RotaryPreset

GEMMA4_VISION = RotaryPreset(
    "gemma4-vision",
    "transformers Gemma4VisionRotaryEmbedding and timm Gemma4RotaryEmbedding2D (Gemma 4's "
    "vision encoder: E2B/E4B head_dim 64, 26B/31B head_dim 72)",
    "2D axial on (x, y) patch coordinates, [x | y] blocks of d/2, halves inside each "
    "block, base 100",
    64,
    {"base": 100.0, "layout": "block-halves", "blocks": 2},
    "ids are (column, row), so the first block encodes the column (block_axes (1, 0)); "
    "rotate with posenc.apply_rope(q, cos, sin, 'block-halves', blocks=2) "
    "(apply_multidimensional_rope: rotate_half inside each block); the processor "
    "pads with (-1, -1) ids, which the model rotates as well (posenc.rope of the "
    "[B, N, 2] ids gives them); float32 tables cast to the activations' dtype",
    axial=two_blocks("gemma4-vision"),
    block_axes=(1, 0),
    replays={
        "transformers": "posenc.compat.gemma4:rotary_grid",
        "timm": "posenc.compat.gemma4:rotary_grid",
    },
)


TRANSFORMERS = Classes("transformers", "Gemma4VisionRotaryEmbedding")
TIMM = Classes("timm", "Gemma4RotaryEmbedding2D")

FAMILY = Family(
    "Gemma 4 vision",
    (GEMMA4_VISION,),
    classes=(TRANSFORMERS, TIMM),
    unaudited=TOWER,
    docs=(
        Row(
            GEMMA4_VISION,
            "transformers",
            "Gemma 4 vision encoder (E2B/E4B d 64, 26B/31B d 72; transformers, timm `gemma4_vit`)",
            "`d/2`, `d/2`, column first, halves inside each block",
            "integers (x, y); padding ids (-1, -1) through `posenc.rope(ids)`",
            layout="block-halves (`blocks=2`)",
            compat="`transformers`, `timm` (the grid; padding rows: `patch`)",
        ),
    ),
)
