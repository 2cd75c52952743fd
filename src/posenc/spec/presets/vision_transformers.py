"""The rotary presets of transformers' vision towers: the ``HF_VISION_PRESETS`` data (Qwen2-VL's
vision tower, Pixtral, DINOv3, SAM 2's memory attention, Llama 4's vision model, Gemma 4's
vision encoder), in the form of :mod:`posenc.spec.presets.vision`.

Each is 2D axial RoPE over a patch grid ``(rows, columns)``: :func:`posenc.rope_grid` gives the
tables of every patch, row-major; where a family orders its tokens otherwise (Qwen2-VL's 2 x 2
merge blocks, Llama 4's class token last), :func:`posenc.rope` of the family's own ``[N, 2]``
ids is the exact path. ``compat="transformers"`` repeats transformers' float32 arithmetic
(:mod:`posenc.compat.transformers_vision`).
"""

from __future__ import annotations

import math
from typing import Any

from posenc.spec.presets.base import RotaryPreset
from posenc.spec.presets.vision import centred, two_blocks


def _pixtral(dim: int, base: float) -> dict[str, Any]:
    """Pixtral's one ladder ``base ** (-2j / dim)`` split by parity: the row takes the even
    ``j`` (``base ** (-2j' / (dim / 2))``), the column the odd ones, the same ladder times
    ``base ** (-2 / dim)``."""
    return {**two_blocks("pixtral")(dim, base), "axes_scale": (1.0, base ** (-2.0 / dim))}


def _sam3_positions(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """SAM 3's ViT: every grid at the scale of its 24 x 24 attention window, ids times ``24 /
    columns`` (1 in the window layers, 1/3 on the global layers' 72 x 72 grid)."""
    step = 24 / dims[-1] if dims[-1] else 1.0
    return [0.0] * len(dims), [step] * len(dims)


def _ones(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Llama 4's 1-based patch coordinates (0 is its class token's)."""
    return [1.0] * len(dims), [1.0] * len(dims)


HF_VISION_PRESETS: dict[str, RotaryPreset] = {
    p.name: p
    for p in [
        RotaryPreset(
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
            originals=("transformers",),
        ),
        RotaryPreset(
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
            originals=("transformers",),
        ),
        RotaryPreset(
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
            originals=("transformers", "timm"),
        ),
        RotaryPreset(
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
            originals=("transformers",),
        ),
        RotaryPreset(
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
            originals=("transformers",),
        ),
        RotaryPreset(
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
            originals=("transformers",),
        ),
        RotaryPreset(
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
            originals=("transformers", "timm"),
        ),
    ]
}
"""transformers' own arithmetic for the rotary tables of its vision towers
(``posenc.rope_grid(..., compat="transformers")``), kept apart from the exact engine."""
