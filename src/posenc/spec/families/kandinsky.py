"""Kandinsky 5 and 6: 3D axial RoPE, ``[t | h | w]`` blocks of ``d/4, 3d/8, 3d/8``, each pair
rotated by a 2 x 2 matrix (the interleaved pairs), frequencies ``exp(-ln(1e4) j / (d_a / 2))``
(the lang ladder written through ``exp``), the angles of rows and columns divided by the
pipeline's ``scale_factor``: ``axes_scale`` is its inverse.
"""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError
from posenc.spec.families.base import Audit, Classes, Config, Family, Row, axes, width
from posenc.spec.presets.base import RotaryPreset, Table

KANDINSKY_SCALE = (1.0, 2.0, 2.0)
"""The ``scale_factor`` (t, h, w) Kandinsky 5's pipeline passes when both sides are within 480
… 854 pixels, and Kandinsky 6's default: the angles are divided by it."""
KANDINSKY_SCALE_LARGE = (1.0, 3.16, 3.16)
"""Kandinsky 5's ``scale_factor`` for any other size (1024 pixels and up)."""

ONE_D = "Kandinsky6RoPE1D's max_pos = 2048; Kandinsky5RoPE1D's 1024, the same rows"
"""The text tokens' 1-D table of both."""


def kandinsky_scale(height: int, width: int) -> tuple[float, float, float]:
    """Kandinsky 5's pipeline's ``scale_factor`` for a video of ``height x width`` pixels."""
    inside = 480 <= height <= 854 and 480 <= width <= 854
    return KANDINSKY_SCALE if inside else KANDINSKY_SCALE_LARGE


def axes_scale_of(scale_factor: tuple[float, ...]) -> tuple[float, ...]:
    """The ``axes_scale`` of a Kandinsky ``scale_factor``: its inverse, per axis."""
    return tuple(1.0 / s for s in scale_factor)


def _kandinsky(name: str) -> Any:
    """``(dim, base) -> {"axes_dim": (d/4, 3d/8, 3d/8), "axes_scale": 1 / (1, 2, 2)}``, or the
    error naming the rule when ``dim`` is not a multiple of 16."""

    def axial(dim: int, base: float) -> dict[str, Any]:
        if dim % 16:
            raise PosencError(
                f"`dim` = {dim} does not split into {name}'s even blocks (t = dim / 4, h = w = "
                "3 dim / 8, dim a multiple of 16)"
            )
        return {
            "axes_dim": (dim // 4, 3 * dim // 8, 3 * dim // 8),
            "axes_scale": axes_scale_of(KANDINSKY_SCALE),
        }

    return axial


_QUIRKS = (
    "the angles of rows and columns are divided by the pipeline's scale_factor: (1, 2, 2) "
    "(the default: axes_scale=(1, 1/2, 1/2)) when both sides are within 480 … 854 pixels, "
    "else (1, 3.16, 3.16) (axes_scale=(1, 1 / 3.16, 1 / 3.16)); the text tokens' RoPE is 1-D "
    "over the whole head (posenc.rope(pos, d, layout='interleaved')); diffusers computes in "
    "float32 (the exp form: 2.7e-6 off at row 127)"
)


KANDINSKY5 = RotaryPreset(
    "kandinsky5",
    "diffusers Kandinsky5RoPE3D, Kandinsky5RoPE1D (Kandinsky 5.0 Video, Image)",
    "3D axial, [t | h | w] blocks of d/4, 3d/8, 3d/8 (16, 24, 24) interleaved (2 x 2 "
    "matrices), base 10000, rows and columns at half speed",
    64,
    {"base": 10000.0, "layout": "interleaved"},
    _QUIRKS + "; its attention rounds the rotated q and k to bfloat16 whatever the "
    "model's dtype (transformer_kandinsky.py's apply_rotary): a float32 run is not "
    "float32 there, with or without posenc",
    axial=_kandinsky("kandinsky5"),
    replays={"diffusers": "posenc.compat.diffusers_kandinsky:rotary_grid"},
    rows=(
        Table("Kandinsky5RoPE3D's max_pos = (128, 128, 128)", ((0, 128),) * 3),
        Table(ONE_D, ((0, 2048),)),
    ),
)


KANDINSKY6 = RotaryPreset(
    "kandinsky6",
    "diffusers Kandinsky6RoPE3D, Kandinsky6SRRoPE3D, Kandinsky6RoPE1D (Kandinsky 6)",
    "3D axial, [t | h | w] blocks of d/4, 3d/8, 3d/8 (32, 48, 48) interleaved (2 x 2 "
    "matrices), base 10000, rows and columns at half speed",
    128,
    {"base": 10000.0, "layout": "interleaved"},
    _QUIRKS + "; the model's config holds its scale_factor (default (1, 2, 2)); the "
    "audio tokens' 1-D RoPE multiplies its frequencies by audio_freqs_scaling",
    axial=_kandinsky("kandinsky6"),
    replays={"diffusers": "posenc.compat.diffusers_kandinsky:rotary_grid"},
    rows=(
        Table("Kandinsky6RoPE3D's max_pos = (128, 128, 128)", ((0, 128),) * 3),
        Table(ONE_D, ((0, 2048),)),
    ),
)


K5_VIDEO, K6_1D = "Kandinsky5RoPE3D", "Kandinsky6RoPE1D"
"""Kandinsky 5's video module (its tables batched) and Kandinsky 6's 1-D one (its text's, and
its audio's with ``freqs_scaling``)."""
VIDEO = Classes("diffusers", K5_VIDEO, "Kandinsky6RoPE3D", "Kandinsky6SRRoPE3D")
"""The video tokens' modules."""
TEXT = Classes("diffusers", "Kandinsky5RoPE1D", K6_1D)
"""The text (and Kandinsky 6's audio) tokens' modules: 1-D over the whole head."""


def _scale_at(cfg: Config, rows: int, cols: int) -> dict[str, Any]:
    """Kandinsky 5's pipeline's ``scale_factor`` at a size (16 pixels a token)."""
    return {"axes_scale": axes_scale_of(kandinsky_scale(16 * rows, 16 * cols))}


def _audit(
    models: tuple[str, ...],
    preset: RotaryPreset,
    blocks: tuple[int, ...],
    at_size: Any = None,
) -> Audit:
    name = models[0].removesuffix("Transformer3DModel")
    return Audit(
        models,
        preset,
        f"visual_rope_embeddings ({name}RoPE3D)",
        (31, 32, 48),
        "512 x 768, 121 frames",
        f"diffusers {name}RoPE3D: float32 angles (exp form)",
        keywords=axes("axes_dims", blocks),
        dim=width("axes_dims", blocks),
        largest=23.5,
        at_size=at_size,
    )


FAMILY = Family(
    "Kandinsky",
    (KANDINSKY5, KANDINSKY6),
    classes=(VIDEO, TEXT),
    audits=(
        _audit(("Kandinsky5Transformer3DModel",), KANDINSKY5, (16, 24, 24), _scale_at),
        _audit(("Kandinsky6Transformer3DModel",), KANDINSKY6, (32, 48, 48)),
    ),
    docs=(
        Row(
            KANDINSKY5,
            "diffusers grids",
            "Kandinsky 5.0 Video, Image (Lite, Pro)",
            "`d/4`, `3d/8`, `3d/8` (16, 24, 24); text: one block over the head",
            "integers; rows and columns / 2 (both sides 480 … 854 px) or / 3.16: `axes_scale`",
            layout="interleaved (2 x 2 matrices)",
        ),
        Row(
            KANDINSKY6,
            "diffusers grids",
            "Kandinsky 6, Kandinsky 6 SR",
            "`d/4`, `3d/8`, `3d/8` (32, 48, 48); text and audio: one block over the head",
            "integers; rows and columns / the config's `scale_factor`",
            layout="interleaved (2 x 2 matrices)",
        ),
    ),
)
