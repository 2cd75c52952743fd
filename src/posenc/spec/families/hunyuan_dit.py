"""HunyuanDiT: ``get_2d_rotary_pos_embed`` over a crop of its 32 x 32 base grid, computed by the
pipeline (no module to patch).
"""

from __future__ import annotations

from posenc.spec.families.base import Audit, Family, Row, crop_region, two_blocks
from posenc.spec.presets.base import RotaryPreset

HUNYUAN_DIT = RotaryPreset(
    "hunyuan-dit",
    "diffusers get_2d_rotary_pos_embed (HunyuanDiT); Tencent HunyuanDiT get_2d_rotary",
    "2D axial, [column | row] blocks of d/2 interleaved, base 10000",
    88,
    {"base": 10000.0, "layout": "interleaved"},
    "the first block encodes the column; positions are a crop of a 32 x 32 base grid "
    "(rope_grid's crop=), which diffusers' torch port computes off by up to 0.083 when "
    "the crop does not start at 0: compat='diffusers' repeats that, the default is the "
    "original's",
    axial=two_blocks("hunyuan-dit"),
    block_axes=(1, 0),
    replays={"diffusers": "posenc.compat.diffusers:hunyuan_dit"},
)


FAMILY = Family(
    "HunyuanDiT",
    (HUNYUAN_DIT,),
    audits=(
        Audit(
            ("HunyuanDiT2DModel",),
            HUNYUAN_DIT,
            "pipeline (get_2d_rotary_pos_embed)",
            (64, 64),
            "1024 x 1024 pixels",
            "diffusers get_2d_rotary_pos_embed: float32, computed by the pipeline (a crop of "
            "its 32 x 32 base grid)",
            keywords=lambda cfg: {"crop": ((0, 0), (32, 32))},
            at_size=lambda cfg, rows, cols: {"crop": crop_region((rows, cols), (32, 32))},
            fix="pipeline",
            largest=31.5,
        ),
    ),
    docs=(
        Row(
            HUNYUAN_DIT,
            "diffusers grids",
            "HunyuanDiT",
            "`d/2`, `d/2`, column block first",
            "a crop of a 32 x 32 grid",
        ),
    ),
)
