"""diffusers' own arithmetic for Kandinsky 5 and 6, OmniGen and the other one-off families:
``compat="diffusers"`` of their presets (reached through
:func:`posenc.compat.diffusers.rotary_grid`, which forwards the families in ``FAMILIES`` here)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FAMILIES: tuple[str, ...] = ()
"""The presets whose ``compat="diffusers"`` tables this module computes."""


def rotary_grid(
    family: str,
    compat: str,
    dims: Sequence[int],
    r: Any,
    blocks: Sequence[int],
    starts: Sequence[float],
    steps: Sequence[float],
    *,
    cropped: bool,
    dtype: Any,
    device: Any,
    like: Any,
) -> tuple[Any, Any]:
    """``posenc.rope_grid(..., preset=family, compat="diffusers")`` for ``FAMILIES``."""
    raise NotImplementedError(family)
