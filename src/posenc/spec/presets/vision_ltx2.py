"""The rotary presets of halves inside each block: Allegro's per-axis halves and LTX-2's per-head
split: the ``LTX2_PRESETS`` data (see :mod:`posenc.spec.presets.vision` for what a vision preset
holds)."""

from __future__ import annotations

from posenc.spec.presets.base import RotaryPreset

LTX2_PRESETS: dict[str, RotaryPreset] = {}
