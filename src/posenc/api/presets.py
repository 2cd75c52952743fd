"""The preset lookups: ``presets`` (the names, by family) and ``preset`` (one's record)."""

from __future__ import annotations

from posenc.errors import check_choice
from posenc.spec.presets import PRESETS, ROTARY_PRESETS, Preset, RotaryPreset, get_preset


def presets(kind: str | None = None) -> list[str]:
    """Names of the presets: the sinusoidal ones (added to activations: :func:`table`,
    :func:`encode`, :func:`grid`), then the rotary ones (:func:`rope`). ``kind``
    (``"sinusoidal"`` or ``"rotary"``) lists one family. ``posenc.preset(name)`` tells each
    one's origin and settings.

    Examples:
        >>> "whisper" in posenc.presets(), "llama3" in posenc.presets("rotary")
        (True, True)
    """
    kind = None if kind is None else check_choice("kind", kind, ("sinusoidal", "rotary"))
    sinusoidal = [] if kind == "rotary" else list(PRESETS)
    return sinusoidal + ([] if kind == "sinusoidal" else list(ROTARY_PRESETS))


def preset(name: str) -> Preset | RotaryPreset:
    """The preset record: ``origin``, ``summary`` and ``quirks``, with ``options`` (a
    sinusoidal :class:`Preset`) or the :func:`rope` keywords ``rotary`` (a
    :class:`RotaryPreset`).

    Examples:
        >>> posenc.preset("whisper").summary
        '[sin | cos] halves, tensor2tensor spacing'
        >>> posenc.preset("llama").rotary["base"]
        10000.0
    """
    if isinstance(name, str) and name in ROTARY_PRESETS:
        return ROTARY_PRESETS[name]
    return get_preset(name)
