"""Positions: the one place that turns what the caller gives into position values.

Three kinds reach the engine:

- a :class:`Progression` ``x_i = start + i * step`` (tables, grid axes), whose structure
  lets the engine evaluate ``O(sqrt(length))`` sines instead of ``length``;
- integer position arrays (token positions, packed sequences, KV-cache offsets);
- real position arrays (diffusion timesteps, scaled coordinates).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from posenc.errors import MAX_AXES, MAX_POSITION, PosencError, check_int, show
from posenc.spec.encoding import Encoding


@dataclass(frozen=True)
class Positions:
    """Validated positions (made by the backends' ``positions``).

    Attributes:
        values: an array of the caller's library: integers as int64, reals as float32 or
            float64.
        integral: integer positions.
        low: the smallest value, or None where values are not read on the host (traced
            or meta tensors, a module's tensors on an accelerator, traced JAX values); such
            positions are checked on the device, or where they become known.
        high: the largest value, or None likewise.
    """

    values: Any
    integral: bool
    low: float | None
    high: float | None

    @property
    def bound(self) -> float | None:
        """The largest magnitude, or None where the values are not known."""
        if self.low is None or self.high is None:
            return None
        return max(-self.low, self.high)


def range_error(name: str, value: Any) -> PosencError:
    """The error for positions beyond +-2^53."""
    return PosencError(
        f"`{name}` must be within +-2^53 ({int(MAX_POSITION)}), where every integer is a "
        f"float64, got a value of {show(value)}"
    )


def checked_positions(name: str, values: Any, integral: bool, low: float, high: float) -> Positions:
    """Positions whose bounds are known: within +-2^53."""
    for v in (low, high):
        if not abs(v) <= MAX_POSITION:
            raise range_error(name, v)
    return Positions(values, integral, low, high)


@dataclass(frozen=True)
class Progression:
    """Positions ``start + i * step`` for ``i = 0 … length-1``."""

    start: float
    step: float
    length: int

    def values(self) -> np.ndarray:
        return self.start + np.arange(self.length, dtype=np.float64) * self.step

    @property
    def bound(self) -> float:
        """The largest magnitude of its positions (0 when empty)."""
        if not self.length:
            return 0.0
        return max(abs(self.start), abs(self.start + (self.length - 1) * self.step))


def grid_axis(
    length: int,
    *,
    offset: float = 0.0,
    interpolation_scale: float = 1.0,
    base_size: float | None = None,
    normalize: bool = False,
) -> Progression:
    """Positions of one grid axis: ``(offset + i) * f`` with the conventions' factors.

    ``f = 1 / interpolation_scale`` (diffusers), times ``base_size / length`` (diffusers'
    ``i / (length / base_size)``), divided by ``last + 1e-6`` when ``normalize`` (DETR).
    """
    if not length:
        return Progression(0.0, 1.0, 0)
    f = 1.0 / interpolation_scale
    if base_size is not None:
        f *= base_size / length
    if normalize:
        f /= (offset + length - 1) * f + 1e-6
    if not math.isfinite(f) or not math.isfinite(offset * f):
        raise PosencError(
            f"the grid positions must be finite: `interpolation_scale`={interpolation_scale:g}"
            f"{'' if base_size is None else f', `base_size`={base_size:g}'} scale them by {f:g}"
        )
    return Progression(offset * f, f, length)


def grid_axes(
    enc: Encoding, dims: tuple[int, ...], crop_from: tuple[int, ...] | None = None
) -> list[Progression]:
    """The positions of every axis of a grid of size ``dims`` under ``enc``'s conventions.

    With ``crop_from``, the grid is the centred ``dims`` crop of a grid of that larger size
    (diffusers' ``pos_embed_max_size``, SD3): each axis starts ``(full - n) // 2`` rows in.
    """
    scales = enc.interpolation_scale
    if not isinstance(scales, tuple):
        scales = (scales,) * len(dims)
    full = dims if crop_from is None else crop_from
    axes = []
    for a, n in enumerate(dims):
        if n > full[a]:
            raise PosencError(
                f"the grid {dims} must fit the grid it is cropped from, {full}: axis {a} "
                f"has {n} > {full[a]}"
            )
        whole = grid_axis(
            full[a],
            offset=enc.grid_offset,
            interpolation_scale=scales[a],
            base_size=enc.base_size,
            normalize=enc.normalize,
        )
        top = (full[a] - n) // 2
        axes.append(Progression(whole.start + top * whole.step, whole.step, n))
    return axes


def grid_shape(
    shape: Any,
    ndim: int | None,
    *,
    name: str = "shape",
    axes: str = "for this preset",
    symbolic: type | tuple[type, ...] = (),
) -> tuple[int, ...]:
    """``shape`` as a tuple of sizes (an int means a square or cube of ``ndim`` axes): the one
    check of a grid's shape, made by every function and module that takes one
    (``posenc.grid``, ``posenc.rope_grid``, ``GridEncoding``, ``AxialRotaryEmbedding``, the
    stand-ins that take a grid).

    Each size must be an integer >= 0 (0 gives an empty grid: a table with no rows); bools,
    floats and strings are refused, and so are more than ``MAX_AXES`` axes or, with ``ndim``,
    another number of axes.

    Args:
        shape: the grid's sizes, first axis outermost.
        ndim: the number of axes the encoding takes, or None for any.
        name: the argument as its caller names it (``grid``, ``fhw``), for the messages.
        axes: why there are ``ndim`` axes, the words after "must have k axes".
        symbolic: the type of a size known only when a traced graph runs (``torch.SymInt``
            under ``torch.export``): taken as it is, since reading it would fix the graph to
            one size; the eager calls check the values.
    """
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,) * (ndim or 1)
    if not isinstance(shape, (tuple, list)) or not shape:
        raise PosencError(f"`{name}` must be an int or a non-empty tuple of ints, got {shape!r}")
    if len(shape) > MAX_AXES:
        raise PosencError(f"`{name}` must have at most {MAX_AXES} axes, got {len(shape)}")
    dims = tuple(
        cast(int, s) if isinstance(s, symbolic) else check_int(f"{name}[{i}]", s)
        for i, s in enumerate(shape)
    )  # a symbolic size stands for an int
    if ndim is not None and len(dims) != ndim:
        raise PosencError(f"`{name}` must have {ndim} axes {axes}, got {tuple(shape)}")
    return dims
