"""Llama 4's vision encoder (transformers ``Llama4VisionRotaryEmbedding``): 1-based patch
coordinates, complex pairs.
"""

from __future__ import annotations

from posenc.spec.families.base import TOWER, Classes, Family, Row, two_blocks
from posenc.spec.presets.base import RotaryPreset


def _ones(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Llama 4's 1-based patch coordinates (0 is its class token's)."""
    return [1.0] * len(dims), [1.0] * len(dims)


LLAMA4_VISION = RotaryPreset(
    "llama4-vision",
    "transformers Llama4VisionRotaryEmbedding (Llama 4 Scout and Maverick vision encoder)",
    "2D axial on 1-based patch coordinates, [x | y] blocks of d/2 interleaved (complex "
    "pairs), base 10000, d 88",
    88,
    {"base": 10000.0, "layout": "interleaved"},
    "positions are (column + 1, row + 1): rope_grid's defaults; the class token comes "
    "last with angle 0 (append a row cos 1, sin 0, or take posenc.rope of the ids with "
    "(0, 0) for it); the table is fixed to the square image_size / patch_size grid; "
    "applied as a complex64 product in float32",
    axial=two_blocks("llama4-vision"),
    block_axes=(1, 0),
    positions=_ones,
    replays={"transformers": "posenc.compat.transformers_vision:llama4_vision"},
)


MODULE = Classes("transformers", "Llama4VisionRotaryEmbedding")

FAMILY = Family(
    "Llama 4 vision",
    (LLAMA4_VISION,),
    classes=(MODULE,),
    unaudited=TOWER,
    docs=(
        Row(
            LLAMA4_VISION,
            "transformers",
            "Llama 4 Scout, Maverick vision",
            "`d/2`, `d/2`, column first",
            "1-based",
        ),
    ),
)
