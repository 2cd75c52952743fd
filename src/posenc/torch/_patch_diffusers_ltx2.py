"""The recognisers of diffusers' rotary modules of halves inside each block: Allegro's per-axis
halves and LTX-2's per-head split, for :func:`posenc.torch.patch`."""

from __future__ import annotations

from posenc.torch._patching import Recogniser

RECOGNISERS: tuple[Recogniser, ...] = ()
"""Asked before diffusers' catch-all ``others``."""
