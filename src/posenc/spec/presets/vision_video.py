"""The rotary presets of the video and image families that share Wan's, HunyuanVideo's or Qwen-
Image's formula (HunyuanImage-2.1, Framepack, Motif-Video, Helios, ChronoEdit, AnyFlow, SANA-WM,
MiniMax-H3, Qwen-Image 2.1 …): the ``VIDEO_PRESETS`` data (see :mod:`posenc.spec.presets.vision`
for what a vision preset holds)."""

from __future__ import annotations

from posenc.spec.presets.base import RotaryPreset

VIDEO_PRESETS: dict[str, RotaryPreset] = {}
