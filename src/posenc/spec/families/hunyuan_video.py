"""HunyuanVideo (1.0, 1.5), Framepack, Motif-Video, and HunyuanImage-2.1 (its two axes
with HunyuanVideo's arithmetic).
"""

from __future__ import annotations

from typing import Any

from posenc.spec.families.base import (
    Audit,
    Classes,
    Config,
    Family,
    Row,
    Trained,
    axes,
    two_blocks,
    width,
)
from posenc.spec.presets.base import RotaryPreset

HUNYUAN_VIDEO = RotaryPreset(
    "hunyuan-video",
    "diffusers HunyuanVideoRotaryPosEmbed (HunyuanVideo, 1.5, Framepack)",
    "3D axial, [t | h | w] blocks of 16, 56, 56 interleaved, base 256",
    128,
    {"base": 256.0, "layout": "interleaved", "axes_dim": (16, 56, 56)},
    "diffusers computes in float32 (4.7e-6 off at 720p, 129 frames); text tokens are not rotated",
    replays={"diffusers": "posenc.compat.diffusers:hunyuan_video"},
)


HUNYUAN_IMAGE = RotaryPreset(
    "hunyuan-image",
    "diffusers HunyuanImageRotaryPosEmbed (HunyuanImage-2.1)",
    "2D axial, [row | column] blocks of d/2 interleaved, base 256",
    128,
    {"base": 256.0, "layout": "interleaved"},
    "diffusers computes in float32 (positions, frequencies and angles); a video form "
    "takes three blocks (axes_dim=(d_t, d_h, d_w)), HunyuanVideo's arithmetic",
    axial=two_blocks("hunyuan-image"),
    replays={"diffusers": "posenc.compat.diffusers_video:hunyuan_image"},
)


VIDEO = Classes("diffusers", "HunyuanVideoRotaryPosEmbed", "HunyuanVideo15RotaryPosEmbed")
"""HunyuanVideo's module: float32, computed per call."""
GRIDS = Classes("diffusers", "HunyuanImageRotaryPosEmbed", "MotifVideoRotaryPosEmbed")
"""HunyuanImage-2.1's (float32) and Motif-Video's (float64 frequencies) modules."""
FRAMEPACK = Classes("diffusers", "HunyuanVideoFramepackRotaryPosEmbed")
"""Framepack's: HunyuanVideo's tables at given frame indices."""


VIDEO_GRID, VIDEO_RUN = (33, 45, 80), "720p, 129 frames"
"""The latent grid HunyuanVideo is run (and trained) at: what ``patch`` and ``audit`` measure."""
IMAGE_GRID, IMAGE_RUN = (64, 64), "2048 x 2048 pixels"
"""HunyuanImage-2.1's."""


def _video(cfg: Config) -> dict[str, Any]:
    blocks = tuple(int(a) for a in cfg.get("rope_axes_dim") or (16, 56, 56))
    return {"axes_dim": blocks, "base": float(cfg.get("rope_theta") or 256.0)}


FAMILY = Family(
    "HunyuanVideo",
    (HUNYUAN_VIDEO, HUNYUAN_IMAGE),
    classes=(VIDEO, GRIDS, FRAMEPACK),
    audits=(
        Audit(
            ("HunyuanVideoTransformer3DModel", "HunyuanVideo15Transformer3DModel"),
            HUNYUAN_VIDEO,
            "rope (HunyuanVideoRotaryPosEmbed)",
            VIDEO_GRID,
            VIDEO_RUN,
            "diffusers HunyuanVideoRotaryPosEmbed: float32 angles per call",
            keywords=_video,
            dim=lambda cfg: sum(_video(cfg)["axes_dim"]),
        ),
        Audit(
            ("HunyuanImageTransformer2DModel",),
            HUNYUAN_IMAGE,
            "rope (HunyuanImageRotaryPosEmbed)",
            IMAGE_GRID,
            IMAGE_RUN,
            "diffusers HunyuanImageRotaryPosEmbed: float32 angles per call",
            pixels=32,
            keywords=axes("rope_axes_dim", (64, 64), 256.0),
            dim=width("rope_axes_dim", (64, 64)),
        ),
    ),
    trained=(
        Trained(
            HUNYUAN_VIDEO,
            VIDEO_GRID,
            48,
            "129 frames of 720p; RIFLEx saw its videos repeat at 48 latent frames (pair 4)",
            noise_timestep=1000.0,
        ),
    ),
    docs=(
        Row(
            HUNYUAN_VIDEO,
            "diffusers grids",
            "HunyuanVideo, 1.5, Motif-Video; Framepack (frame ids: `posenc.rope(ids)`)",
            "16, 56, 56",
            "integers",
        ),
        Row(
            HUNYUAN_IMAGE,
            "diffusers grids",
            "HunyuanImage-2.1",
            "`d/2`, `d/2` (a video form: `axes_dim=(16, 56, 56)`)",
            "integers",
        ),
    ),
)
