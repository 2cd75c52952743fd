"""SAM 2's video memory attention (and EdgeTAM's, SAM 3 tracker's) and SAM 3's ViT backbone:
``[column | row]`` blocks interleaved.
"""

from __future__ import annotations

from posenc.spec.families.base import TOWER, Classes, Family, Row, two_blocks
from posenc.spec.presets.base import RotaryPreset


def _sam3_positions(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """SAM 3's ViT: every grid at the scale of its 24 x 24 attention window, ids times ``24 /
    columns`` (1 in the window layers, 1/3 on the global layers' 72 x 72 grid)."""
    step = 24 / dims[-1] if dims[-1] else 1.0
    return [0.0] * len(dims), [step] * len(dims)


SAM2 = RotaryPreset(
    "sam2",
    "transformers Sam2VideoVisionRotaryEmbedding (SAM 2 video memory attention; "
    "EdgeTAM video and SAM 3 tracker video alike)",
    "2D axial on the memory feature grid, [column | row] blocks of d/2 interleaved, "
    "base 10000, d 256",
    256,
    {"base": 10000.0, "layout": "interleaved"},
    "ids are (column, row), so the first block encodes the column (block_axes (1, 0)); "
    "rotate_pairwise pairs (2i, 2i+1); keys repeat the table once per memory frame and "
    "the last num_k_exclude_rope keys (object pointers) are not rotated; q and k in "
    "float32",
    axial=two_blocks("sam2"),
    block_axes=(1, 0),
    replays={"transformers": "posenc.compat.transformers_vision:sam2"},
)


SAM3_VIT = RotaryPreset(
    "sam3-vit",
    "transformers Sam3ViTRotaryEmbedding with Sam3ViTLayer.precompute_positions (the "
    "SAM 3 ViT backbone)",
    "2D axial, [column | row] blocks of d/2 interleaved, base 10000, d 64; positions at "
    "the 24 x 24 window's scale",
    64,
    {"base": 10000.0, "layout": "interleaved"},
    "the window layers rotate the 24 x 24 window grid at 0, 1, …, 23; the global layers "
    "(7, 15, 23, 31) the 72 x 72 grid at i * 24 / 72, which transformers rounds to "
    "float32 (int ids times a Python float): rope_grid's default step is 24 / columns, "
    "so (24, 24) and (72, 72) give each layer's table; ids are (column, row) as in SAM 2; "
    "transformers reads the global grid as (image_size[1], image_size[0]) // patch_size",
    axial=two_blocks("sam3-vit"),
    block_axes=(1, 0),
    positions=_sam3_positions,
    replays={"transformers": "posenc.compat.transformers_vision:sam3_vit"},
)


MEMORY = Classes(
    "transformers",
    "Sam2VideoVisionRotaryEmbedding",
    "EdgeTamVideoVisionRotaryEmbedding",
    "Sam3TrackerVideoVisionRotaryEmbedding",
)
VIT = Classes("transformers", "Sam3ViTRotaryEmbedding")

FAMILY = Family(
    "SAM",
    (SAM2, SAM3_VIT),
    classes=(MEMORY, VIT),
    unaudited=TOWER,
    docs=(
        Row(
            SAM2,
            "transformers",
            "SAM 2 video memory attention, EdgeTAM",
            "`d/2`, `d/2`, column first",
            "integers",
        ),
        Row(
            SAM3_VIT,
            "transformers",
            "SAM 3 ViT (window and global layers)",
            "`d/2`, `d/2`, column first",
            "integers x 24 / side",
        ),
    ),
)
