"""The rotary presets of Kandinsky 5 and 6, OmniGen and the other one-off families: the
``KANDINSKY_PRESETS`` data (see :mod:`posenc.spec.presets.vision` for what a vision preset
holds)."""

from __future__ import annotations

from posenc.spec.presets.base import RotaryPreset

KANDINSKY_PRESETS: dict[str, RotaryPreset] = {}
