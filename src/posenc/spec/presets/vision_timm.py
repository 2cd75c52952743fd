"""The rotary presets of timm's vision transformers: the ``TIMM_PRESETS`` data (EVA-02, the
ViT-RoPE variants, Perception Encoder), in the form of :mod:`posenc.spec.presets.vision`;
DINOv3's, which timm and transformers share, is ``dinov3`` in
:mod:`posenc.spec.presets.vision_transformers` (``compat="timm"`` or ``"transformers"``).

Each is timm's two-axis RoPE (``timm.layers.pos_embed_sincos``): ``dim / 4`` frequencies per
grid axis, i.e. one block of ``dim / 2`` channels per axis with the ladder
``base ** (-2j / (dim / 2))``. ``compat="timm"`` repeats timm's float32 arithmetic
(:mod:`posenc.compat.timm`); the default is exact.
"""

from __future__ import annotations

from posenc.spec.presets.base import RotaryPreset
from posenc.spec.presets.vision import two_blocks


def _from_one(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Perception Encoder's ``grid_offset=1`` at its reference size: ``1, 2, 3, …``."""
    return [1.0] * len(dims), [1.0] * len(dims)


_CAT = (
    "timm's RotaryEmbeddingCat.get_embed returns cat(sin, cos), [N, 2 * dim], sin first "
    "(posenc: (cos, sin)); "
)
_CACHED = (
    "with a fixed img_size the table is computed at init (float32, on the CPU) and kept as a "
    "buffer: model.to(bfloat16) rounds it to bfloat16 (2e-3 off; the bands are rebuilt in "
    "float32, the table is not); dynamic_img_size models rebuild it per call"
)

TIMM_PRESETS: dict[str, RotaryPreset] = {
    p.name: p
    for p in [
        RotaryPreset(
            "eva02",
            "timm RotaryEmbeddingCat(in_pixels=False, temperature=10000, ref_feat_shape) in "
            "timm.models.eva: EVA-02 (eva02_*), SBB vit_*_rope_reg*_gap_256",
            "2D axial, [row | col] blocks of dim/2 interleaved, base 10000, positions "
            "i * ref / feat",
            64,
            {"base": 10000.0, "layout": "interleaved"},
            _CAT + "the positions are i * ref_feat_shape / feat_shape (ref (16, 16): 224/14), "
            "which a preset cannot know: the default is the integers (the model at its "
            "reference size), pass step=ref/feat otherwise (0.5 for eva02_large_patch14_448, "
            "32 x 32 patches); timm computes them and the angles in float32 (4.9e-7 off at "
            "448); " + _CACHED,
            axial=two_blocks("eva02"),
            originals=("timm",),
        ),
        RotaryPreset(
            "vit-rope",
            "timm RotaryEmbeddingCat(in_pixels=False, temperature=100, grid_indexing='xy') in "
            "timm.models.eva: naver RoPE-ViT vit_{small,base,large}_patch16_rope_224 (and "
            "_rope_ape_)",
            "2D axial, [col | row] blocks of dim/2 interleaved, base 100, integer positions",
            64,
            {"base": 100.0, "layout": "interleaved"},
            _CAT + "grid_indexing 'xy' puts the column block first (block_axes (1, 0)); the "
            "positions are the integers (no ref_feat_shape, 14 x 14 at 224); the "
            "_rope_mixed_ variants learn their frequencies and are not this preset; " + _CACHED,
            axial=two_blocks("vit-rope"),
            block_axes=(1, 0),
            originals=("timm",),
        ),
        RotaryPreset(
            "perception-encoder",
            "timm RotaryEmbeddingCat(in_pixels=False, temperature=10000, grid_offset=1, "
            "grid_indexing='xy', ref_feat_shape) in timm.models.eva: Meta Perception Encoder "
            "vit_pe_{core,lang,spatial}_*",
            "2D axial, [col | row] blocks of dim/2 interleaved, base 10000, positions "
            "(i + 1) * ref / feat",
            64,
            {"base": 10000.0, "layout": "interleaved"},
            _CAT + "grid_indexing 'xy' puts the column block first; positions (i + offset) * "
            "ref / feat with offset 1 (0 for the *_gigantic_* models) and ref (24, 24), "
            "(14, 14) or (32, 32): the default is 1, 2, 3, … (offset 1 at the reference "
            "size), pass start=offset*ref/feat, step=ref/feat otherwise; " + _CACHED,
            axial=two_blocks("perception-encoder"),
            block_axes=(1, 0),
            positions=_from_one,
            originals=("timm",),
        ),
    ]
}
"""timm's two-axis RoPE families, by the name to pass as ``preset=``."""
