"""The recognisers of diffusers' rotary modules of the video and image families that share Wan's,
HunyuanVideo's or Qwen-Image's formula (HunyuanImage-2.1, Framepack, Motif-Video, Helios,
ChronoEdit, AnyFlow, SANA-WM, MiniMax-H3, Qwen-Image 2.1 …), for :func:`posenc.torch.patch`."""

from __future__ import annotations

from posenc.torch._patching import Recogniser

RECOGNISERS: tuple[Recogniser, ...] = ()
"""Asked before diffusers' catch-all ``others``."""
