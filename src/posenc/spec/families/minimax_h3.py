"""MiniMax-H3 (diffusers ``MiniMaxH3RotaryPosEmbed``): one ladder shared by t, h and w."""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError
from posenc.spec.families.base import Classes, Family, Row
from posenc.spec.presets.base import RotaryPreset


def _thirds(dim: int, base: float) -> dict[str, Any]:
    """MiniMax-H3's ``[t | h | w]`` blocks of ``dim / 3``: one ladder shared by the axes."""
    side = dim // 3
    if dim % 6:
        raise PosencError(
            f"`dim` = {dim} does not split into minimax-h3's even blocks (dim / 3 per axis, dim "
            f"a multiple of 6 = 6 rope_freq_dim)"
        )
    return {"axes_dim": (side, side, side)}


MINIMAX_H3 = RotaryPreset(
    "minimax-h3",
    "diffusers MiniMaxH3RotaryPosEmbed (MiniMax-H3)",
    "3D axial, one ladder base ** (-2j / (d/3)) read by the [t | h | w] blocks of d/3, "
    "in halves over the rotated d channels, base 10000",
    96,
    {"base": 10000.0, "layout": "halves"},
    "d = 6 rope_freq_dim (96) is the rotated width: the head's leading channels, the "
    "rest passed through; positions are the model's position_ids (posenc.rope("
    "position_ids, 96, preset='minimax-h3')); diffusers computes in float32, its "
    "inv_freq buffer follows .to(bfloat16)",
    axial=_thirds,
    replays={"diffusers": "posenc.compat.diffusers_video:minimax_h3"},
)


VAE = "MiniMaxH3VideoRotaryPosEmbed"
"""The VAE decoder's module (coordinates in [-1, 1), 2 pi times a ladder of base 100)."""
MODULES = Classes("diffusers", "MiniMaxH3RotaryPosEmbed", VAE)
"""The transformer's module and its VAE decoder's (coordinates in [-1, 1), base 100)."""

FAMILY = Family(
    "MiniMax-H3",
    (MINIMAX_H3,),
    classes=(MODULES,),
    unaudited="its positions are the model's position_ids, which a config does not give",
    docs=(
        Row(
            MINIMAX_H3,
            "diffusers grids",
            "MiniMax-H3",
            "`d/3` x 3, one ladder `1e4^(-2j/(d/3))` read by t, h, w; `d = 6 rope_freq_dim` (96) "
            "leading channels",
            "the model's `position_ids` (`posenc.rope(ids)`), or integers",
            compat="`diffusers` (ids that are a grid: `start=`, `step=`)",
        ),
    ),
)
