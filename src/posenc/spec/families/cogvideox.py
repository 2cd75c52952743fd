"""CogVideoX 1.0/1.5, EasyAnimate and ConsisID: ``get_3d_rotary_pos_embed``."""

from __future__ import annotations

from typing import Any

from posenc.spec.families.base import (
    Audit,
    Classes,
    Config,
    Family,
    Row,
    Trained,
    crop_region,
    split,
)
from posenc.spec.presets.base import RotaryPreset


def _cogvideox(dim: int, base: float) -> dict[str, Any]:
    rule = "t = dim // 4, h = w = dim // 8 * 3"
    return split("cogvideox", dim, rule, (dim // 4, dim // 8 * 3, dim // 8 * 3))


COGVIDEOX = RotaryPreset(
    "cogvideox",
    "diffusers get_3d_rotary_pos_embed (CogVideoX 1.0/1.5, EasyAnimate, ConsisID)",
    "3D axial, [t | h | w] blocks d/4, 3d/8, 3d/8 interleaved, base 10000",
    64,
    {"base": 10000.0, "layout": "interleaved"},
    "float32 in diffusers; CogVideoX 1.0 crops its grid into 45 x 30 (fractional "
    "positions: rope_grid's crop=), 1.5 uses integer positions",
    axial=_cogvideox,
    replays={"diffusers": "posenc.compat.diffusers:cogvideox"},
)


EASYANIMATE = Classes("diffusers", "EasyAnimateRotaryPosEmbed")
"""EasyAnimate's module: CogVideoX's float32 crop grids (CogVideoX itself has no module: its
pipeline computes the tables)."""


def _crop_of_1_0(cfg: Config, rows: int, cols: int) -> dict[str, Any]:
    """CogVideoX 1.0 (no ``patch_size_t``) crops its 30 x 45 base grid (480 x 720) as the
    pipeline does; 1.5 takes the integers."""
    if cfg.get("patch_size_t"):
        return {}
    return {"crop": crop_region((rows, cols), (30, 45))}


FAMILY = Family(
    "CogVideoX",
    (COGVIDEOX,),
    classes=(EASYANIMATE,),
    audits=(
        Audit(
            ("CogVideoXTransformer3DModel",),
            COGVIDEOX,
            "pipeline (get_3d_rotary_pos_embed)",
            (13, 30, 45),
            "480 x 720, 49 frames",
            "diffusers get_3d_rotary_pos_embed: float32, computed by the pipeline",
            fix="pipeline",
            at_size=_crop_of_1_0,
        ),
    ),
    trained=(
        Trained(
            COGVIDEOX,
            (13, 30, 45),
            20,
            "49 frames of 480 x 720 (CogVideoX-5B); RIFLEx's pair 2, period 20 latent frames",
            noise_timestep=1000.0,
        ),
    ),
    docs=(
        Row(
            COGVIDEOX,
            "diffusers grids",
            "CogVideoX 1.0/1.5, EasyAnimate",
            "`d/4`, `3d/8`, `3d/8`",
            "integers (1.5), a crop (1.0: `crop=`)",
        ),
    ),
)
