"""The recognisers of diffusers' rotary modules of the families whose complex tables are gathered
by ids (Lumina-Next, Lumina-Image-2.0, Z-Image, Bria-FIBO2), for :func:`posenc.torch.patch`."""

from __future__ import annotations

from posenc.torch._patching import Recogniser

RECOGNISERS: tuple[Recogniser, ...] = ()
"""Asked before diffusers' catch-all ``others``."""
