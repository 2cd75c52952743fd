"""The recognisers of diffusers' rotary modules of Kandinsky 5 and 6, OmniGen and the other one-off
families, for :func:`posenc.torch.patch`."""

from __future__ import annotations

from posenc.torch._patching import Recogniser

RECOGNISERS: tuple[Recogniser, ...] = ()
"""Asked before diffusers' catch-all ``others``."""
