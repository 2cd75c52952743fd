"""The recognisers of transformers' vision-tower rotary modules for :func:`posenc.torch.patch`
(asked before the language-model ``*RotaryEmbedding`` recogniser)."""

from __future__ import annotations

from posenc.torch._patching import Recogniser

RECOGNISERS: tuple[Recogniser, ...] = ()
"""The transformers vision recognisers, in the order they are asked."""
