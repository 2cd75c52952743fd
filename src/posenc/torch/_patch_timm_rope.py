"""The recognisers of timm's rotary modules for :func:`posenc.torch.patch`."""

from __future__ import annotations

from posenc.torch._patching import Recogniser

RECOGNISERS: tuple[Recogniser, ...] = ()
"""The timm rotary recognisers, in the order they are asked."""
