"""timm's ``RotaryEmbeddingCat`` and ``RotaryEmbedding`` (``timm.layers.pos_embed_sincos``):
EVA-02, the RoPE-ViT variants, Perception Encoder, and the modules' pixel bands.

Each is timm's two-axis RoPE: ``dim / 4`` frequencies per grid axis, i.e. one block of ``dim /
2`` channels per axis with the ladder ``base ** (-2j / (dim / 2))``. ``compat="timm"`` repeats
timm's float32 arithmetic (:mod:`posenc.compat.timm`); the default is exact.
"""

from __future__ import annotations

from typing import Any

from posenc.spec.families.base import Classes, Family, Row, TimmAudit, two_blocks
from posenc.spec.presets.base import RotaryPreset


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


def _pixel_grid(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """timm's ``'pixel'`` grid ``linspace(-1, 1, n)`` per axis: start -1, step ``2 / (n - 1)``
    (one patch: -1)."""
    return [-1.0] * len(dims), [2.0 / (n - 1) if n > 1 else 2.0 for n in dims]


_PIXEL = (
    "timm's in_pixels=True (no timm model uses it; a module built with the defaults of "
    "RotaryEmbedding does): the grid is 'pixel', linspace(-1, 1, n) per axis whatever "
    "grid_offset, and the bands are in radians per half image; "
)


EVA02 = RotaryPreset(
    "eva02",
    "timm RotaryEmbeddingCat(in_pixels=False, temperature=10000, ref_feat_shape) in "
    "timm.models.eva: EVA-02 (eva02_*), SBB vit_*_rope_reg*_gap_256",
    "2D axial, [row | col] blocks of dim/2 interleaved, base 10000, positions i * ref / feat",
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
    replays={"timm": "posenc.compat.timm:cat_ref"},
)


VIT_ROPE = RotaryPreset(
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
    replays={"timm": "posenc.compat.timm:cat"},
)


PERCEPTION_ENCODER = RotaryPreset(
    "perception-encoder",
    "timm RotaryEmbeddingCat(in_pixels=False, temperature=10000, grid_offset=1, "
    "grid_indexing='xy', ref_feat_shape) in timm.models.eva: Meta Perception Encoder "
    "vit_pe_{core,lang,spatial}_*",
    "2D axial, [col | row] blocks of dim/2 interleaved, base 10000, positions (i + 1) * ref / feat",
    64,
    {"base": 10000.0, "layout": "interleaved"},
    _CAT + "grid_indexing 'xy' puts the column block first; positions (i + offset) * "
    "ref / feat with offset 1 (0 for the *_gigantic_* models) and ref (24, 24), "
    "(14, 14) or (32, 32): the default is 1, 2, 3, … (offset 1 at the reference "
    "size), pass start=offset*ref/feat, step=ref/feat otherwise; " + _CACHED,
    axial=two_blocks("perception-encoder"),
    block_axes=(1, 0),
    positions=_from_one,
    replays={"timm": "posenc.compat.timm:cat_ref"},
)


TIMM_PIXEL = RotaryPreset(
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
    replays={"timm": "posenc.compat.timm:pixel"},
)


TIMM_PIXEL_LINEAR = RotaryPreset(
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
    replays={"timm": "posenc.compat.timm:pixel"},
)


CAT_CLASS, PAIR_CLASS = "RotaryEmbeddingCat", "RotaryEmbedding"
"""timm's modules whose ``get_embed`` returns ``cat(sin, cos)`` and the ``(sin, cos)`` pair."""
MODULES = Classes("timm", CAT_CLASS, PAIR_CLASS)


def _eva(arch: str, grid: tuple[int, int]) -> tuple[dict[str, Any], float | None]:
    """EVA-02's positions ``i * ref / feat``, ref 16 x 16 (a fixed size keeps its table)."""
    step = (16 / grid[0], 16 / grid[1])
    return {"step": step}, max((n - 1) * 16 / n for n in grid)


def _pe(arch: str, grid: tuple[int, int]) -> tuple[dict[str, Any], float | None]:
    """Perception Encoder's ``i + 1`` at the native size (``i``: the gigantic models)."""
    if "gigantic" in arch:
        return {"start": (0.0, 0.0)}, max(grid) - 1
    return {}, max(grid)


FAMILY = Family(
    "timm RoPE",
    (EVA02, VIT_ROPE, PERCEPTION_ENCODER, TIMM_PIXEL, TIMM_PIXEL_LINEAR),
    classes=(MODULES,),
    audits=(
        TimmAudit("eva02", EVA02, _eva, buffers=True),
        TimmAudit("_rope_reg", EVA02, _eva, buffers=True),
        TimmAudit("_rope_", VIT_ROPE),
        TimmAudit("vit_pe_", PERCEPTION_ENCODER, _pe),
    ),
    unaudited=f"{TIMM_PIXEL.name} and {TIMM_PIXEL_LINEAR.name}: timm's pixel bands "
    "(in_pixels=True, the layers' default) are built by no architecture timm registers (every "
    "model of timm 1.0.31 passes in_pixels=False), so no config names one: patch measures "
    "such a module in a model of one's own",
    docs=(
        Row(
            EVA02,
            "timm",
            "timm EVA-02, SBB `vit_*_rope_reg*`",
            "`d/2`, `d/2`",
            "integers x ref / feat (`step=`)",
            compat=(
                "`timm` (built without `ref_feat_shape`: `vit-rope`'s, `base=1e4, "
                "block_axes=(0, 1)`)"
            ),
        ),
        Row(
            VIT_ROPE,
            "timm",
            "timm / naver RoPE-ViT (`vit_*_patch16_rope_224`); any `RotaryEmbeddingCat` without "
            "`ref_feat_shape` (`base=`, `block_axes=`)",
            "`d/2`, `d/2`, column first",
            "integers",
        ),
        Row(
            PERCEPTION_ENCODER,
            "timm",
            "timm Perception Encoder (`vit_pe_*`)",
            "`d/2`, `d/2`, column first",
            "1-based x ref / feat",
        ),
        Row(
            TIMM_PIXEL,
            "timm",
            "timm `RotaryEmbeddingCat` / `RotaryEmbedding` with `in_pixels=True` (log bands, the "
            "modules' default)",
            "`d/2`, `d/2`, pixel bands pi … pi R/2",
            "`linspace(-1, 1, n)`",
            base="max_res R (224)",
            layout="interleaved (`layout=` for rotate_half)",
        ),
        Row(
            TIMM_PIXEL_LINEAR,
            "timm",
            "the same with `linear_bands=True`",
            "`d/2`, `d/2`, evenly spaced pi … pi R/2",
            "`linspace(-1, 1, n)`",
            base="max_res R (224)",
        ),
    ),
)
