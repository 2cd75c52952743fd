"""The rotary presets of FLUX-style id tables of other families (HiDream, PRX, Bria, Ernie-Image,
Krea2): the ``IDS_PRESETS`` data (see :mod:`posenc.spec.presets.vision` for what a vision preset
holds)."""

from __future__ import annotations

from posenc.spec.presets.base import RotaryPreset

IDS_PRESETS: dict[str, RotaryPreset] = {}
