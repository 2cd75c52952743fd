"""LTX-Video 0.9.x (diffusers ``LTXVideoRotaryPosEmbed``): one ladder read by the three axes."""

from __future__ import annotations

from posenc.spec.families.base import Audit, Classes, Family, Row
from posenc.spec.presets.base import RotaryPreset

LTX_BASES = (20.0, 2048.0, 2048.0)
"""LTX-Video's ``base_num_frames``, ``base_height``, ``base_width``: coordinates are fractions
of them."""
LTX_SCALES = (8 / 25, 32.0, 32.0)
"""The LTX pipeline's ``rope_interpolation_scale`` at 25 fps: the VAE's compression over the
frame rate, and its spatial compression."""


def ltx_positions(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """LTX-Video's ``2 c - 1`` with ``c = i * scale / base`` per axis (patch size 1)."""
    return [-1.0] * 3, [2 * s / b for s, b in zip(LTX_SCALES, LTX_BASES, strict=True)]


LTX_VIDEO = RotaryPreset(
    "ltx-video",
    "diffusers LTXVideoRotaryPosEmbed (LTX-Video 0.9.x)",
    "one ladder (pi / 2) * 10000 ** (k / (n - 1)), n = d // 6, read by (t, h, w) in "
    "turn per frequency, pairs (2i, 2i+1) after d % 6 still channels; coordinates 2c - 1",
    2048,
    {"base": 10000.0, "layout": "interleaved", "spacing": "ltx"},
    "d is the attention's inner width (2048): LTX rotates q and k before splitting "
    "them into heads; its coordinates c = i * scale * patch / base with base (20, "
    "2048, 2048) and the pipeline's scale (8 / frame_rate, 32, 32): the default "
    "positions are 25 fps (start -1, step 2 * scale / base: pass step= for another "
    "frame rate); its largest angles, pi / 2 * 10000 rad, are at c = 0, so float32 "
    "errs by 3.6e-3 at any size (704 x 1280, 121 frames)",
    positions=ltx_positions,
    replays={"diffusers": "posenc.compat.diffusers:ltx_video"},
)


MODULE = Classes("diffusers", "LTXVideoRotaryPosEmbed")

FAMILY = Family(
    "LTX-Video",
    (LTX_VIDEO,),
    classes=(MODULE,),
    audits=(
        Audit(
            ("LTXVideoTransformer3DModel",),
            LTX_VIDEO,
            "rope (LTXVideoRotaryPosEmbed)",
            (16, 22, 40),
            "704 x 1280, 121 frames at 25 fps",
            "diffusers LTXVideoRotaryPosEmbed: float32, "
            "its largest angles (pi / 2 * 10000 rad) at the coordinate 0",
            pixels=32,
            frames=8,
            dim=lambda cfg: (
                int(cfg.get("num_attention_heads") or 32)
                * int(cfg.get("attention_head_dim") or 128)
            ),
        ),
    ),
    docs=(
        Row(
            LTX_VIDEO,
            "diffusers grids",
            "LTX-Video 0.9",
            "one ladder `(pi/2) 1e4^(k/(n-1))`, `n = d // 6`, read by t, h, w in turn; `d % 6` "
            "still channels",
            "`2c - 1`, `c = i x scale / base` (25 fps by default)",
        ),
    ),
)
