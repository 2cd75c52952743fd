"""LTX-2 (diffusers ``LTX2AudioVideoRotaryPosEmbed``): LTX's one ladder, interleaved or in
halves per head (``rope_type='split'``, the ``block-halves`` layout over its 32 heads).
"""

from __future__ import annotations

from typing import Any

from posenc.spec.families.base import Classes, Family, Row
from posenc.spec.presets.base import RotaryPreset

LTX2_BASES = (20.0, 2048.0, 2048.0)
"""LTX-2's ``base_num_frames`` (``pos_embed_max_pos``), ``base_height``, ``base_width``."""

LTX2_HEADS = 32
"""LTX-2's attention heads (video and audio): the blocks of its ``split`` tables."""

_LTX2_QUIRKS = (
    "d is the attention's inner width (LTX-2: 4096 video, 2048 audio and cross-attention); "
    "the positions are 2c - 1 with c the midpoint of a patch's bounds over the base: "
    "posenc.rope(2 * c - 1, d, preset=…) of the model's coordinates, or posenc.torch.patch; "
    "diffusers computes the ladder's powers in float64 (double_precision, else float32), "
    "then everything in float32, and its largest angles, pi / 2 * 10000 rad, sit at c = 0: "
    "1.2e-3 off at 704 x 1280, 121 frames (4.8e-3 without double_precision)"
)


def _heads(dim: int, base: float) -> dict[str, Any]:
    """The ``split`` form: ``blocks`` = LTX-2's 32 heads, a default under the call's
    ``blocks`` or ``layout`` (``rotary`` checks the count that stays against ``dim``)."""
    return {"blocks": LTX2_HEADS}


def _ltx2(name: str, axes: int, split: bool, what: str) -> RotaryPreset:
    layout = "block-halves" if split else "interleaved"
    form = (
        f"halves inside each of {LTX2_HEADS} heads (rope_type='split')"
        if split
        else "pairs (2i, 2i+1) (rope_type='interleaved')"
    )
    return RotaryPreset(
        name,
        f"diffusers LTX2AudioVideoRotaryPosEmbed (LTX-2: {what})",
        f"LTX's one ladder (pi / 2) * 10000 ** (k / (n - 1)), n = d // {2 * axes}, read by "
        f"{axes} position axes in turn, {form} after the still channels; positions 2c - 1",
        4096 if axes == 3 else 2048,
        {"base": 10000.0, "layout": layout, "spacing": "ltx", "ladder_axes": axes},
        _LTX2_QUIRKS,
        axial=_heads if split else None,
    )


LTX2_VIDEO = _ltx2("ltx2-video", 3, False, "video self-attention")

LTX2_AUDIO = _ltx2("ltx2-audio", 1, False, "audio self-attention, audio-video cross-attention")

LTX2_VIDEO_SPLIT = _ltx2("ltx2-video-split", 3, True, "video self-attention, rope_type='split'")

LTX2_AUDIO_SPLIT = _ltx2(
    "ltx2-audio-split", 1, True, "audio and cross-attention, rope_type='split'"
)


MODULES = Classes("diffusers", "LTX2AudioVideoRotaryPosEmbed", "SanaWMLTX2AudioVideoRotaryPosEmbed")

FAMILY = Family(
    "LTX-2",
    (LTX2_VIDEO, LTX2_AUDIO, LTX2_VIDEO_SPLIT, LTX2_AUDIO_SPLIT),
    classes=(MODULES,),
    unaudited="its coordinates are the midpoints of each patch's bounds, which the model builds "
    "from the latents it is given",
    docs=(
        Row(
            LTX2_VIDEO,
            "diffusers ids",
            "LTX-2 (video self-attention)",
            "one ladder `(pi/2) 1e4^(k/(n-1))`, `n = d // 6`, read by t, h, w in turn; `d % 6` "
            "still channels",
            "`2c - 1`, `c` = midpoint of the patch's pixel bounds / (20, 2048, 2048), frames in "
            "seconds (causal first frame)",
        ),
        Row(
            LTX2_AUDIO,
            "diffusers ids",
            "LTX-2 (audio self-attention, audio-video cross-attention)",
            "one ladder, `n = d // 2`, one time axis",
            "`2c - 1`, `c` = seconds / 20",
        ),
        Row(
            LTX2_VIDEO_SPLIT,
            "diffusers ids",
            'LTX-2 with `rope_type="split"`',
            "as above, the `d/2` angles cut into 32 heads",
            "as above",
            layout="halves inside each head (`block-halves`, `blocks=32`)",
        ),
        Row(
            LTX2_AUDIO_SPLIT,
            "diffusers ids",
            'LTX-2 with `rope_type="split"`',
            "as above, the `d/2` angles cut into 32 heads",
            "as above",
            layout="halves inside each head (`block-halves`, `blocks=32`)",
        ),
    ),
)
