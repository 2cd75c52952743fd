"""CogView4 and GLM-Image: ``CogView4RotaryPosEmbed`` and ``GlmImageRotaryPosEmbed``."""

from __future__ import annotations

from posenc.spec.families.base import Audit, Classes, Family, Row, two_blocks
from posenc.spec.presets.base import RotaryPreset

COGVIEW4 = RotaryPreset(
    "cogview4",
    "diffusers CogView4RotaryPosEmbed and GlmImageRotaryPosEmbed (CogView4, GLM-Image)",
    "2D axial, [row | column] blocks of d/2 in halves over the whole head, base 10000",
    128,
    {"base": 10000.0, "layout": "halves"},
    "GLM-Image's positions are the patch indices (rope_grid's default); CogView4 samples "
    "a fixed 256 x 256 canvas: patch i of n sits at floor(i * 256 / n) (repeated rows "
    "past 256): posenc.rope(ids, d, preset='cogview4') of those ids; diffusers computes "
    "in float32 (8.8e-6 off) and on the CPU",
    axial=two_blocks("cogview4"),
    replays={"diffusers": "posenc.compat.diffusers:cogview4"},
)


MODULES = Classes("diffusers", "CogView4RotaryPosEmbed", "GlmImageRotaryPosEmbed")

FAMILY = Family(
    "CogView4",
    (COGVIEW4,),
    classes=(MODULES,),
    audits=(
        Audit(
            ("CogView4Transformer2DModel", "GlmImageTransformer2DModel"),
            COGVIEW4,
            "rope (CogView4RotaryPosEmbed)",
            (64, 64),
            "1024 x 1024 pixels",
            "diffusers CogView4RotaryPosEmbed: float32 angles, on the CPU",
        ),
    ),
    docs=(
        Row(
            COGVIEW4,
            "diffusers grids",
            "CogView4, GLM-Image",
            "`d/2`, `d/2`",
            "integers (GLM-Image); CogView4: `floor(i x 256 / n)` (exact: `posenc.rope(ids)`)",
            compat="`diffusers` (GLM-Image; CogView4's rows: `patch`)",
        ),
    ),
)
