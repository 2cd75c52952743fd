"""Pixtral and Mistral Small 3.1's vision tower (transformers ``PixtralVisionRotaryEmbedding``).

2D axial RoPE over a patch grid ``(rows, columns)``: :func:`posenc.rope_grid` gives the tables
of every patch, row-major; ``compat="transformers"`` repeats transformers' float32 arithmetic
(:mod:`posenc.compat.transformers_vision`).
"""

from __future__ import annotations

from typing import Any

from posenc.spec.families.base import TOWER, Classes, Family, Row, two_blocks
from posenc.spec.presets.base import RotaryPreset


def _pixtral(dim: int, base: float) -> dict[str, Any]:
    """Pixtral's one ladder ``base ** (-2j / dim)`` split by parity: the row takes the even
    ``j`` (``base ** (-2j' / (dim / 2))``), the column the odd ones, the same ladder times
    ``base ** (-2 / dim)``."""
    return {**two_blocks("pixtral")(dim, base), "axes_scale": (1.0, base ** (-2.0 / dim))}


PIXTRAL = RotaryPreset(
    "pixtral",
    "transformers PixtralVisionRotaryEmbedding (Pixtral, Mistral Small 3.1 vision)",
    "2D axial, one ladder base^(-2j/d) split by parity: the row takes the even j, "
    "the column the odd j; [row | column] halves, base 10000",
    64,
    {"base": 10000.0, "layout": "halves"},
    "the column block's frequencies are the row block's times base^(-2/d) (axes_scale); "
    "each image's grid is its own (row, column) ids from 0, images concatenated; the "
    "float32 tables are cast to the activations' dtype and applied in it; "
    "model.to(bfloat16) rounds the inv_freq buffer to bfloat16 as well (compat repeats "
    "the float32 buffer)",
    axial=_pixtral,
    replays={"transformers": "posenc.compat.transformers_vision:pixtral"},
)


MODULE = Classes("transformers", "PixtralVisionRotaryEmbedding")

FAMILY = Family(
    "Pixtral",
    (PIXTRAL,),
    classes=(MODULE,),
    unaudited=TOWER,
    docs=(
        Row(
            PIXTRAL,
            "transformers",
            "Pixtral, Mistral Small 3.1 vision",
            "`d/2`, `d/2`, one ladder split by parity",
            "integers",
        ),
    ),
)
