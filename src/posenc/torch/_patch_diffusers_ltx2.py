"""The recognisers of diffusers' rotary modules of halves inside each block, for
:func:`posenc.torch.patch`: LTX-2's ``LTX2AudioVideoRotaryPosEmbed`` (video, audio and the
audio-video cross-attention tables, interleaved or ``split`` per head) and Sana-WM's copy of it.
Allegro's tables are the pipeline's (``posenc.rope_grid(..., preset="allegro")``): its
transformer has no rotary module to replace."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.errors import PosencError
from posenc.spec.families import ltx2
from posenc.spec.families.ltx2 import LTX2_AUDIO, LTX2_AUDIO_SPLIT, LTX2_VIDEO, LTX2_VIDEO_SPLIT
from posenc.torch._ltx2_rope import LTX2Rope
from posenc.torch._patching import Found, Recogniser, by_class, unlike

SETTINGS = (
    "dim",
    "patch_size",
    "patch_size_t",
    "base_num_frames",
    "base_height",
    "base_width",
    "sampling_rate",
    "hop_length",
    "scale_factors",
    "theta",
    "causal_offset",
    "modality",
    "double_precision",
    "rope_type",
    "num_attention_heads",
)
"""The original's attributes the stand-in is built from."""

VIDEO, AUDIO_FRAMES = (16, 22, 40), 126
"""The measured range: a 704 x 1280, 121-frame video at 24 fps (16 x 22 x 40 latents) and
its 5 s of audio (126 latent frames)."""


@by_class(ltx2.MODULES)
def ltx2_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """LTX-2's rotary module (any modality, rope type and precision), measured one axis at a
    time over :data:`VIDEO` (a video module also on the time axis alone, as the
    cross-attention uses it) or over :data:`AUDIO_FRAMES`."""
    name = type(module).__name__
    try:
        settings = {k: getattr(module, k) for k in SETTINGS}
    except AttributeError:
        return unlike(name, "diffusers")

    def build(compat: str | None) -> nn.Module | str:
        try:
            return LTX2Rope(settings, None if compat is None else "diffusers")
        except (PosencError, TypeError, ValueError, KeyError) as err:
            return f"not covered: {err}"

    video = settings["modality"] == "video"

    def run(mod: Any) -> list[Tensor]:
        cpu = torch.device("cpu")
        if not video:
            return list(mod(mod.prepare_audio_coords(1, AUDIO_FRAMES, cpu)))
        out = []
        for dims in ((VIDEO[0], 1, 1), (1, VIDEO[1], 1), (1, 1, VIDEO[2])):
            out += list(mod(mod.prepare_video_coords(1, *dims, cpu)))
        frames = mod.prepare_video_coords(1, VIDEO[0], 1, 1, cpu)[:, 0:1]
        return out + list(mod(frames))

    split = settings["rope_type"] == "split"
    preset = (
        (LTX2_VIDEO_SPLIT if split else LTX2_VIDEO)
        if video
        else (LTX2_AUDIO_SPLIT if split else LTX2_AUDIO)
    ).name
    range_note = (
        "16 frames, 22 rows, 40 columns (704 x 1280, 121 frames at 24 fps), and the frames "
        "alone (cross-attention)"
        if video
        else f"{AUDIO_FRAMES} audio latent frames (5 s)"
    )
    return Found(
        name,
        f"posenc.rope(2c - 1, {settings['dim']}, preset={preset!r})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note=f"max diff over {range_note}",
    )


RECOGNISERS: tuple[Recogniser, ...] = (ltx2_rope,)
"""Asked before diffusers' catch-all ``others``."""
