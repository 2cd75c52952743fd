"""Cosmos-1 (diffusers ``CosmosRotaryPosEmbed``): per-axis NTK bases."""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError
from posenc.spec.families.base import Audit, Classes, Config, Family, Row, Trained, split
from posenc.spec.presets.base import RotaryPreset, Table

COSMOS_SCALE = (2.0, 1.0, 1.0)
"""Cosmos-1's default ``rope_scale`` (t, h, w): the NTK factors of its per-axis bases."""


def cosmos_bases(axes: tuple[int, ...], base: float, scale: tuple[float, ...]) -> tuple[float, ...]:
    """Cosmos's per-axis bases ``base * s_a ** (d_a / (d_a - 2))``, in its own order of
    operations (so ``compat="diffusers"`` starts from the same floats)."""
    return tuple(base * (s ** (d / (d - 2))) for d, s in zip(axes, scale, strict=True))


def _cosmos(dim: int, base: float) -> dict[str, Any]:
    side = dim // 6 * 2
    return split("cosmos", dim, "h = w = dim // 6 * 2, t the rest", (dim - 2 * side, side, side))


def _cosmos_bases(axes: tuple[int, ...], base: float) -> dict[str, Any]:
    if len(axes) != 3 or min(axes) <= 2:
        raise PosencError(
            f"`axes_dim` of cosmos must be three blocks wider than 2 (its bases "
            f"base * s ** (d_a / (d_a - 2))), got {axes}"
        )
    return {"axes_base": cosmos_bases(axes, base, COSMOS_SCALE)}


COSMOS = RotaryPreset(
    "cosmos",
    "diffusers CosmosRotaryPosEmbed (Cosmos-1 diffusion world models)",
    "3D axial, [t | h | w] blocks (h = w = 2 (d // 6)) in halves over the whole head, "
    "per-axis NTK bases 10000 * s ** (d_a / (d_a - 2)), rope_scale s = (2, 1, 1)",
    128,
    {"base": 10000.0, "layout": "halves"},
    "a video's frames sit at i * 24 / fps (rope_grid's step for the first axis: "
    "24 / fps), an image's at i; another rope_scale is axes_base=(10000 * s_t ** (d_t "
    "/ (d_t - 2)), …) (posenc.torch.patch reads the module's own); diffusers computes "
    "in float32 (2.6e-6 off at 704 x 1280, 121 frames)",
    axial=_cosmos,
    per_block=_cosmos_bases,
    replays={"diffusers": "posenc.compat.diffusers:cosmos"},
    rows=(
        Table(
            "CosmosRotaryPosEmbed's arange(max(max_size // patch_size)) = 128 rows",
            ((0, 128),) * 3,
            indexed=True,
        ),
    ),
)


MODULE = Classes("diffusers", "CosmosRotaryPosEmbed")


def _keywords(cfg: Config) -> dict[str, Any]:
    head = int(cfg.get("attention_head_dim") or 128)
    side = head // 6 * 2
    blocks = (head - 2 * side, side, side)
    scale = tuple(float(s) for s in cfg.get("rope_scale") or COSMOS_SCALE)
    return {"axes_base": cosmos_bases(blocks, 10000.0, scale), "step": (24 / 30, 1.0, 1.0)}


FAMILY = Family(
    "Cosmos",
    (COSMOS,),
    classes=(MODULE,),
    audits=(
        Audit(
            ("CosmosTransformer3DModel",),
            COSMOS,
            "rope (CosmosRotaryPosEmbed)",
            (16, 44, 80),
            "704 x 1280, 121 frames at 30 fps",
            "diffusers CosmosRotaryPosEmbed: float32 angles per call",
            frames=8,
            keywords=_keywords,
        ),
    ),
    trained=(
        Trained(
            COSMOS,
            (16, 44, 80),
            None,
            "121 frames of 704 x 1280 (Cosmos-1)",
            extend=("ntk-aware", "ntk-aware", "ntk-aware"),  # its rope_scale
        ),
    ),
    docs=(
        Row(
            COSMOS,
            "diffusers grids",
            "Cosmos-1",
            "`d - 4 (d//6)`, `2 (d//6)`, `2 (d//6)`, a base per axis",
            "integers, frames x 24 / fps",
            base="`1e4 s^(d_a/(d_a-2))`",
        ),
    ),
)
