"""Presets: every convention in use, as data; this module looks them up by name.

The machinery (:class:`Option`, :class:`Preset`, :class:`RotaryPreset`, the option checkers)
is in :mod:`posenc.spec.presets.base`; the data in :mod:`posenc.spec.presets.sinusoidal`
(``PRESETS``) and :mod:`posenc.spec.presets.rotary` (``ROTARY_PRESETS``). A sinusoidal
preset is an :class:`~posenc.spec.encoding.Encoding` plus the keyword options its original
exposes, under the original's own names; a rotary preset is the keywords of
:func:`posenc.rope` a model family uses. Adding a convention means adding an entry to the
data, not a code path.
"""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError, show, suggest
from posenc.spec.presets.base import ZERO_ROW, FromTable, Option, Preset, RotaryPreset
from posenc.spec.presets.rotary import ROTARY_PRESETS
from posenc.spec.presets.sinusoidal import PRESETS

__all__ = [
    "PRESETS",
    "ROTARY_PRESETS",
    "ZERO_ROW",
    "FromTable",
    "Option",
    "Preset",
    "RotaryPreset",
    "get_preset",
    "get_rotary_preset",
]


def get_preset(name: Any) -> Preset:
    """The sinusoidal preset called ``name``; an unknown name is refused with the closest
    one, a rotary preset with where it belongs."""
    if isinstance(name, Preset):
        return name
    if isinstance(name, RotaryPreset) or (isinstance(name, str) and name in ROTARY_PRESETS):
        rotary = name if isinstance(name, str) else name.name
        raise PosencError(
            f"`preset` {rotary!r} is a rotary preset: use posenc.rope(positions, dim, "
            f"preset={rotary!r}) or posenc.torch.RotaryEmbedding(dim, preset={rotary!r})"
        )
    if not isinstance(name, str):
        raise PosencError(f"`preset` must be a preset name or a posenc.Preset, got {show(name)}")
    if name not in PRESETS:
        raise PosencError(
            f"`preset` {show(name)} is unknown{suggest(name, PRESETS)}; "
            f"presets are: {', '.join(PRESETS)}"
        )
    return PRESETS[name]


def get_rotary_preset(name: Any) -> RotaryPreset:
    """The rotary preset called ``name``."""
    if isinstance(name, RotaryPreset):
        return name
    if isinstance(name, str) and name in PRESETS:
        raise PosencError(
            f"`preset` {name!r} is a sinusoidal preset, added to activations "
            f"(posenc.table, posenc.torch.PositionalEncoding); rotary presets are: "
            f"{', '.join(ROTARY_PRESETS)}"
        )
    if not isinstance(name, str) or name not in ROTARY_PRESETS:
        hint = suggest(name, ROTARY_PRESETS) if isinstance(name, str) else ""
        raise PosencError(
            f"`preset` {show(name)} is not a rotary preset{hint}; rotary presets are: "
            f"{', '.join(ROTARY_PRESETS)}"
        )
    return ROTARY_PRESETS[name]
