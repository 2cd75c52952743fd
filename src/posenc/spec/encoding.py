"""`Encoding`: the frozen description of one sinusoidal encoding. A preset is a named instance."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

from posenc.errors import (
    MAX_AXES,
    MAX_POSITION,
    PosencError,
    check_bool,
    check_choice,
    check_int,
    check_real,
)
from posenc.spec.frequencies import Spacing

Layout = Literal["interleaved", "halves", "halves-cos-first", "sin-major", "frequency-major"]
"""How the sines and cosines of the blocks are ordered in the channels.

- ``interleaved``: per block ``[sin a0, cos a0, sin a1, cos a1, …]``
- ``halves``: per block ``[sin a0 … sin a(n-1) | cos a0 … cos a(n-1)]``
- ``halves-cos-first``: per block ``[cos … | sin …]``
- ``sin-major``: the sines of every block, then the cosines of every block
  (timm's ``[sin h | sin w | cos h | cos w]``)
- ``frequency-major``: for each frequency, the sines of every block, then the cosines of
  every block (NeRF's ``[sin(f0 x), sin(f0 y), cos(f0 x), cos(f0 y), sin(f1 x), …]``)
"""

Widths = Literal["exact", "floor", "ceil", "split"]
"""How the width ``dim`` is shared among the axes' blocks.

- ``exact``: each block gets ``dim * fraction`` channels, which must be an even integer;
  otherwise the width is refused.
- ``floor``: each block gets ``2 * (dim // (2 * ndim))`` channels; leftover channels are zero
  (tensor2tensor, fairseq and diffusers append one zero channel to odd 1D widths).
- ``ceil``: each block gets ``2 * ceil(dim / (2 * ndim))`` channels and the table is
  truncated to ``dim`` (PyPI ``positional-encodings``).
- ``split``: 1D only; ``ceil(dim / 2)`` sines then ``floor(dim / 2)`` cosines (Marian).
"""

TokenOrder = Literal["row-major", "column-major"]


@dataclass(frozen=True)
class Encoding:
    """Everything that defines one fixed sinusoidal encoding, for any width.

    Blocks: one per position axis, in the channel order ``axis_order``. Inside a block the
    angles are ``x * scale * omega_k`` with ``omega_k`` from :mod:`posenc.spec.frequencies`.

    Attributes:
        ndim: number of position axes (1 for sequences, 2 for image grids, …); ``None``
            when the convention takes any number (the count comes from the call).
        spacing: frequency family, ``"geometric"`` or ``"pow2"`` (NeRF).
        base: the largest timescale (``max_timescale``, ``temperature``, ``max_period``).
        shift: ``0`` for the paper's spacing, ``1`` for tensor2tensor's.
        min_timescale: tensor2tensor's multiplier of every frequency.
        guard: floor the exponent denominator at 1 (tensor2tensor 1D, for ``n = 1``).
        layout: channel order of sines and cosines, see :data:`Layout`.
        widths: how ``dim`` is shared among the axes, see :data:`Widths`.
        fractions: with ``widths="exact"``, the share of each block in channel order
            (``None``: equal shares).
        axis_order: the position axis of each block, in channel order (``None``: 0, 1, …).
        include_input: NeRF: the raw coordinates come first, one channel per axis.
        scale: multiplies every position before the frequencies.
        padding_idx: fairseq: the rows whose position equals it are all zero.
        grid_offset: added to the grid indices (DETR counts from 1).
        interpolation_scale: grids: positions are divided by it (one per axis, or one for all).
        base_size: grids: positions are multiplied by ``base_size / length`` (diffusers).
        normalize: grids: positions are divided by ``last + 1e-6`` (DETR).
        extra_tokens: grids: this many all-zero rows come first (class/register tokens).
        tokens: grids: flattening order of the grid cells.

    Examples:
        >>> enc = posenc.preset("whisper").encoding     # every preset stands for one
        >>> enc.layout, enc.shift, enc.base
        ('halves', 1.0, 10000.0)
    """

    ndim: int | None = 1
    spacing: Spacing = "geometric"
    base: float = 10000.0
    shift: float = 0.0
    min_timescale: float = 1.0
    guard: bool = False
    layout: Layout = "interleaved"
    widths: Widths = "exact"
    fractions: tuple[float, ...] | None = None
    axis_order: tuple[int, ...] | None = None
    include_input: bool = False
    scale: float = 1.0
    padding_idx: int | None = None
    grid_offset: float = 0.0
    interpolation_scale: tuple[float, ...] | float = 1.0
    base_size: float | None = None
    normalize: bool = False
    extra_tokens: int = 0
    tokens: TokenOrder = "row-major"

    def __post_init__(self) -> None:
        """Every field checked and normalised, so no encoding can describe NaN frequencies,
        an unknown layout or a hang."""
        fix = object.__setattr__
        if self.ndim is not None:
            fix(self, "ndim", check_int("ndim", self.ndim, minimum=1, maximum=MAX_AXES))
        check_choice("spacing", self.spacing, get_args(Spacing))
        check_choice("layout", self.layout, get_args(Layout))
        check_choice("widths", self.widths, get_args(Widths))
        check_choice("tokens", self.tokens, get_args(TokenOrder))
        for name in ("base", "min_timescale"):
            fix(self, name, check_real(name, getattr(self, name), positive=True))
        for name in ("shift", "scale", "grid_offset"):
            fix(self, name, check_real(name, getattr(self, name)))
        for name in ("guard", "include_input", "normalize"):
            fix(self, name, check_bool(name, getattr(self, name)))
        fix(self, "extra_tokens", check_int("extra_tokens", self.extra_tokens))
        if self.padding_idx is not None:
            fix(
                self,
                "padding_idx",
                check_int(
                    "padding_idx",
                    self.padding_idx,
                    minimum=-int(MAX_POSITION),
                    maximum=int(MAX_POSITION),
                ),
            )
        if self.base_size is not None:
            fix(self, "base_size", check_real("base_size", self.base_size, positive=True))
        scales = self.interpolation_scale
        if isinstance(scales, tuple):
            fix(
                self,
                "interpolation_scale",
                tuple(
                    check_real(f"interpolation_scale[{i}]", v, positive=True)
                    for i, v in enumerate(scales)
                ),
            )
        else:
            fix(
                self,
                "interpolation_scale",
                check_real("interpolation_scale", scales, positive=True),
            )
        if self.fractions is not None:
            fr = _tuple("fractions", self.fractions)
            fix(
                self,
                "fractions",
                tuple(check_real(f"fractions[{i}]", v, positive=True) for i, v in enumerate(fr)),
            )
            if not math.isclose(sum(self.fractions), 1.0, rel_tol=1e-9):
                raise PosencError(f"`fractions` must add up to 1, got {self.fractions!r}")
        if self.axis_order is not None:
            order = tuple(
                check_int(f"axis_order[{i}]", a)
                for i, a in enumerate(_tuple("axis_order", self.axis_order))
            )
            if sorted(order) != list(range(len(order))):
                raise PosencError(
                    f"`axis_order` must be a permutation of 0 … {len(order) - 1}, got {order!r}"
                )
            fix(self, "axis_order", order)

    def replace(self, **changes: object) -> Encoding:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _tuple(name: str, value: Any) -> tuple[Any, ...]:
    if not isinstance(value, tuple | list):
        raise PosencError(f"`{name}` must be a tuple, got {value!r}")
    return tuple(value)
