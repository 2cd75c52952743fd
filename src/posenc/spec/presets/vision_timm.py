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

from typing import Any

from posenc.errors import PosencError
from posenc.spec.presets.base import RotaryPreset
from posenc.spec.presets.vision import two_blocks


def _pixel_grid(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """timm's ``'pixel'`` grid ``linspace(-1, 1, n)`` per axis: start -1, step ``2 / (n - 1)``
    (one patch: -1)."""
    return [-1.0] * len(dims), [2.0 / (n - 1) if n > 1 else 2.0 for n in dims]


def mrope_sections(dim: int, section: tuple[int, ...] = (8, 12, 12)) -> tuple[int, int, int]:
    """timm's ``RotaryEmbeddingMRope`` ``mrope_section`` at the width ``dim``, as posenc's
    interleaved ``sections`` of its ``dim / 2`` frequencies: frequency ``j`` reads the row if
    ``j % 3 == 1`` and ``j < 3 * section[1]``, the column if ``j % 3 == 2`` and ``j < 3 *
    section[2]``, else the (zero) time axis. The row and column counts are clamped to the
    frequencies there are, the time axis takes the rest (posenc's sections add up to ``dim /
    2``; timm's need not, and ignore ``section[0]``)."""
    if dim % 2 or dim < 6 or len(section) != 3:
        raise PosencError(
            f"`dim`: timm's RotaryEmbeddingMRope takes an even dim >= 6 (a t, h and w "
            f"frequency) and three sections, got dim {dim}, mrope_section {section}"
        )
    n = dim // 2
    h = min(int(section[1]), len(range(1, n, 3)))
    w = min(int(section[2]), len(range(2, n, 3)))
    if h < 1 or w < 1:
        raise PosencError(
            f"`sections`: timm's mrope_section {tuple(section)} gives the row or the column no "
            "frequency (posenc's sections are positive)"
        )
    return n - h - w, h, w


def _mrope_axial(dim: int, base: float) -> dict[str, Any]:
    """The ``sections`` of timm's default ``(8, 12, 12)`` at the width ``dim``."""
    return {"sections": mrope_sections(dim)}


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

_PIXEL = (
    "timm's in_pixels=True (no timm model uses it; a module built with the defaults of "
    "RotaryEmbedding does): the grid is 'pixel', linspace(-1, 1, n) per axis whatever "
    "grid_offset, and the bands are in radians per half image; "
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
            "448); compat='timm' replays (i / feat) * ref, which at ref = feat is not the "
            "integers in float32 (4% of cos entries differ at 13 x 21, by up to 9.5e-7): a "
            "model built without ref_feat_shape (timm Eva's default; eva02_* and the SBB "
            "models set one) takes the integers, compat='timm' of preset 'vit-rope' with "
            "base=10000, block_axes=(0, 1); " + _CACHED,
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
        RotaryPreset(
            "timm-pixel",
            "timm RotaryEmbeddingCat / RotaryEmbedding(in_pixels=True, max_res, "
            "linear_bands=False) (timm.layers.pos_embed_sincos; the modules' default bands)",
            "2D axial, [row | col] blocks of dim/2 interleaved, dim/4 log-spaced pixel bands "
            "pi ... pi * base / 2 per axis (base = max_res), positions linspace(-1, 1, n)",
            64,
            {"base": 224.0, "layout": "interleaved", "spacing": "pixel"},
            _PIXEL + "log bands pi * 2 ** linspace(0, log2(max_res) - 1, dim / 4); " + _CACHED,
            axial=two_blocks("timm-pixel"),
            positions=_pixel_grid,
            originals=("timm",),
        ),
        RotaryPreset(
            "timm-pixel-linear",
            "timm RotaryEmbeddingCat / RotaryEmbedding(in_pixels=True, max_res, "
            "linear_bands=True) (timm.layers.pos_embed_sincos)",
            "2D axial, [row | col] blocks of dim/2 interleaved, dim/4 evenly spaced pixel "
            "bands pi ... pi * base / 2 per axis (base = max_res), positions linspace(-1, 1, n)",
            64,
            {"base": 224.0, "layout": "interleaved", "spacing": "pixel-linear"},
            _PIXEL + "linear bands pi * linspace(1, max_res / 2, dim / 4); " + _CACHED,
            axial=two_blocks("timm-pixel-linear"),
            positions=_pixel_grid,
            originals=("timm",),
        ),
        RotaryPreset(
            "timm-mrope",
            "timm RotaryEmbeddingMRope(mrope_section=(8, 12, 12), temperature=10000) "
            "(timm.layers.pos_embed_sincos; NaFlexViT rope_type='mrope', GenLIP)",
            "Qwen3-VL-style interleaved sections over one dim/2 ladder base 10000: frequency j "
            "reads the row if j % 3 == 1, the column if j % 3 == 2 (below 3 * 12), else t = 0; "
            "halves",
            64,
            {"base": 10000.0, "layout": "halves", "interleave_sections": True},
            "posenc.rope(ids, dim, preset='timm-mrope') with ids [N, 3] = (0, row, col) (timm "
            "builds images only: t = 0, those frequencies do not rotate); get_embed is "
            "cat(sin, cos) [N, 2 * dim] for apply_rot_embed_cat(half=True); the sections are "
            "timm's (8, 12, 12) clamped to dim / 2 (dim 64: t 11, h 11, w 10 frequencies), pass "
            "sections for another mrope_section; computed per call in float32 (no cache)",
            axial=_mrope_axial,
        ),
    ]
}
"""timm's two-axis RoPE families, by the name to pass as ``preset=``."""
