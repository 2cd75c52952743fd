"""Allegro: ``get_3d_rotary_pos_embed_allegro``, halves inside each axis block, computed by the
pipeline (no module to patch).
"""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError
from posenc.spec.families.base import Audit, Family, Row
from posenc.spec.presets.base import RotaryPreset

ALLEGRO_SCALE = (2.2, 2.0, 2.0)
"""Allegro's ``interpolation_scale_t, _h, _w``: positions are grid indices divided by them."""


def _allegro(dim: int, base: float) -> dict[str, Any]:
    """Three blocks of ``dim / 3`` (``embed_dim // 3`` each in diffusers)."""
    if dim % 6:
        raise PosencError(
            f"`dim` = {dim} does not split into allegro's even blocks (dim // 3 per axis, "
            "dim a multiple of 6)"
        )
    return {"axes_dim": (dim // 3,) * 3}


def allegro_positions(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Allegro's positions ``i / s_a``: the grid indices over its interpolation scales."""
    return [0.0] * 3, [1.0 / s for s in ALLEGRO_SCALE]


ALLEGRO = RotaryPreset(
    "allegro",
    "diffusers get_3d_rotary_pos_embed_allegro and apply_rotary_emb_allegro (Allegro)",
    "3D axial, [t | h | w] blocks of d/3, halves inside each block, base 10000, "
    "positions i / (2.2, 2, 2)",
    96,
    {"base": 10000.0, "layout": "block-halves", "blocks": 3},
    "the pipeline computes the tables (float32, 9.3e-7 off at 720 x 1280, 88 frames) "
    "and the transformer gathers rows by the tokens' integer ids; rotate with "
    "posenc.apply_rope(q, cos, sin, 'block-halves', blocks=3)",
    axial=_allegro,
    positions=allegro_positions,
    replays={"diffusers": "posenc.compat.diffusers_ltx2:allegro"},
)


FAMILY = Family(
    "Allegro",
    (ALLEGRO,),
    audits=(
        Audit(
            ("AllegroTransformer3DModel",),
            ALLEGRO,
            "pipeline (get_3d_rotary_pos_embed_allegro)",
            (22, 45, 80),
            "720 x 1280, 88 frames",
            "diffusers get_3d_rotary_pos_embed_allegro: float32, computed by the pipeline",
            fix="pipeline",
            largest=39.5,
        ),
    ),
    docs=(
        Row(
            ALLEGRO,
            "diffusers grids",
            "Allegro",
            "`d/3`, `d/3`, `d/3`",
            "integers / (2.2, 2, 2)",
            layout="halves inside each block (`block-halves`, `blocks=3`)",
        ),
    ),
)
