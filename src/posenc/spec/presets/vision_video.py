"""The rotary presets of the video and image families that share Wan's, HunyuanVideo's or Qwen-
Image's formula: the ``VIDEO_PRESETS`` data (see :mod:`posenc.spec.presets.vision` for what a
vision preset holds).

Most of these families need no preset of their own: ChronoEdit, Sana-Video, Wan-Animate, SANA-
WM and AnyFlow are ``wan`` (the last two as complex tables: ``layout="compact"``); Helios is
``wan``'s blocks at its frame indices; Framepack (at its frame indices) and Motif-Video are
``hunyuan-video``; EasyAnimate is ``cogvideox`` on a crop; Qwen-Image-Layered, NucleusMoE-Image
and Qwen-Image 2.1 are ``qwen-image`` at their own positions (``posenc.rope(ids, 128,
preset="qwen-image")``). HunyuanImage-2.1's two axes and MiniMax-H3's shared ladder are new."""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError
from posenc.spec.presets.base import RotaryPreset
from posenc.spec.presets.vision import two_blocks


def _thirds(dim: int, base: float) -> dict[str, Any]:
    """MiniMax-H3's ``[t | h | w]`` blocks of ``dim / 3``: one ladder shared by the axes."""
    side = dim // 3
    if dim % 6:
        raise PosencError(
            f"`dim` = {dim} does not split into minimax-h3's even blocks (dim / 3 per axis, dim "
            f"a multiple of 6 = 6 rope_freq_dim)"
        )
    return {"axes_dim": (side, side, side)}


VIDEO_PRESETS: dict[str, RotaryPreset] = {
    p.name: p
    for p in [
        RotaryPreset(
            "hunyuan-image",
            "diffusers HunyuanImageRotaryPosEmbed (HunyuanImage-2.1)",
            "2D axial, [row | column] blocks of d/2 interleaved, base 256",
            128,
            {"base": 256.0, "layout": "interleaved"},
            "diffusers computes in float32 (positions, frequencies and angles); a video form "
            "takes three blocks (axes_dim=(d_t, d_h, d_w)), HunyuanVideo's arithmetic",
            axial=two_blocks("hunyuan-image"),
            originals=("diffusers",),
        ),
        RotaryPreset(
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
            originals=("diffusers",),
        ),
    ]
}
