"""The recognisers of diffusers' rotary modules of FLUX-style id tables of other families (HiDream,
PRX, Bria, Ernie-Image, Krea2), for :func:`posenc.torch.patch`."""

from __future__ import annotations

from posenc.torch._patching import Recogniser

RECOGNISERS: tuple[Recogniser, ...] = ()
"""Asked before diffusers' catch-all ``others``."""
