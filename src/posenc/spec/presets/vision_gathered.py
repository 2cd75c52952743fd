"""The rotary presets of the families whose complex tables are gathered by ids (Lumina-Next,
Lumina-Image-2.0, Z-Image, Bria-FIBO2): the ``GATHERED_PRESETS`` data (see
:mod:`posenc.spec.presets.vision` for what a vision preset holds)."""

from __future__ import annotations

from posenc.spec.presets.base import RotaryPreset

GATHERED_PRESETS: dict[str, RotaryPreset] = {}
