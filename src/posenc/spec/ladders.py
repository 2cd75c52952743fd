"""How a rotary family spaces its frequencies over the head (``Rotary.spacing``), one entry of
:data:`SPACINGS` each, as the scaling rules are entries of ``posenc.spec.scaling.RULES``: the
ladders ``base ** (-2j / d)`` of transformers and most families (``"lang"``, which the scaling
rules rewrite), timm's pixel bands (``"pixel"``, ``"pixel-linear"``) and LTX's one ladder
read by every position axis in turn (``"ltx"``). A new spacing is one entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from posenc.spec.frequencies import pixel_bands


@dataclass(frozen=True)
class Spacing:
    """One spacing of a rotary table's frequencies.

    Attributes:
        summary: what it is, for messages.
        ladder: ``(n, base) -> n`` float64 frequencies of a block (or of the head, for a
            ``shared`` ladder), where the spacing fixes them; None: the scaling rule's.
        blockwise: a ladder per block of ``axes_dim``, which it needs; it takes no
            ``sections`` or ``scaling`` (timm's pixel bands).
        shared: one ladder over the head, each frequency read by the ``ladder_axes``
            position axes in turn, after ``dim % (2 ladder_axes)`` channels that do not rotate
            (LTX); it takes no ``sections``, ``axes_dim`` or ``scaling``.
    """

    summary: str
    ladder: Callable[[int, float], np.ndarray] | None = None
    blockwise: bool = False
    shared: bool = False

    @property
    def takes_rules(self) -> bool:
        """The scaling rules (and ``sections``) apply: the ladders are theirs."""
        return self.ladder is None


def _ltx(n: int, base: float) -> np.ndarray:
    """LTX-Video's ladder ``(pi / 2) * base ** (k / (n - 1))``."""
    u = np.arange(n, dtype=np.float64) / max(n - 1, 1)
    out: np.ndarray = (np.pi / 2) * base**u
    return out


SPACINGS: dict[str, Spacing] = {
    "lang": Spacing("the ladders base ** (-2j / d) of the scaling rules"),
    "ltx": Spacing("LTX's one ladder read by every axis", _ltx, shared=True),
    "pixel": Spacing(
        "timm's pixel bands", lambda n, base: pixel_bands(n, base, linear=False), blockwise=True
    ),
    "pixel-linear": Spacing(
        "timm's pixel bands", lambda n, base: pixel_bands(n, base, linear=True), blockwise=True
    ),
}
"""Every ``spacing`` of :class:`~posenc.spec.rotary.Rotary`, by name."""
