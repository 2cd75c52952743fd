"""timm's ``RotaryEmbeddingMRope`` (NaFlexViT ``rope_type='mrope'``, GenLIP): Qwen3-VL's
interleaved sections over an image.
"""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError
from posenc.spec.families.base import Classes, Family, Row
from posenc.spec.presets.base import RotaryPreset


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


TIMM_MROPE = RotaryPreset(
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
)


MODULE = Classes("timm", "RotaryEmbeddingMRope")

FAMILY = Family(
    "timm mrope",
    (TIMM_MROPE,),
    classes=(MODULE,),
    unaudited="timm's mrope models size their grid per call: audit builds the model and asks patch",
    docs=(
        Row(
            TIMM_MROPE,
            "timm",
            "timm `RotaryEmbeddingMRope` (GenLIP, NaFlexViT `rope_type='mrope'`)",
            "one `d/2` ladder, frequency j to the row if j % 3 = 1, the column if j % 3 = 2 "
            "(below 3 x 12), else t",
            "`posenc.rope(ids)`, ids `(0, row, col)`",
        ),
    ),
)
