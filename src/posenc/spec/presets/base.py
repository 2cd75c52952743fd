"""The preset machinery: Option, Preset, RotaryPreset and the option checkers the data uses.

This module imports no preset data: :mod:`posenc.spec.presets.sinusoidal` and
:mod:`posenc.spec.presets.rotary` build their entries from it, and
:mod:`posenc.spec.presets` looks them up by name.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from posenc.errors import MAX_POSITION, PosencError, check_int, check_real, show, suggest
from posenc.spec.encoding import Encoding

Apply = Callable[[Encoding, Any, Mapping[str, Any]], Encoding]


class FromTable(enum.Enum):
    """An option value that ``posenc identify`` reads off the stored table, not one to try."""

    ZERO_ROW = "the index of an all-zero row (each of the table's first two)"


ZERO_ROW = FromTable.ZERO_ROW


@dataclass(frozen=True)
class Option:
    """One keyword option of a preset: how it is checked and what it changes."""

    doc: str
    check: Callable[[str, Any], Any]
    apply: Apply
    grid_only: bool = False


@dataclass(frozen=True)
class Preset:
    """A named convention.

    Attributes:
        name: the name to pass as ``preset=``.
        origin: the project and function whose output it reproduces.
        summary: one line on what it is.
        encoding: the :class:`Encoding` it stands for, before options.
        options: keyword options, by the original's names.
        quirks: behaviour of the original that is reproduced on purpose.
        identify: the option sets ``posenc identify`` tries for this preset: as a table
            (``encoding.ndim`` 1), as a grid over each factorisation of the rows (2; the
            zero rows the options add, e.g. a class token, come off first), or both
            (``None``: any number of axes). An option set to ``ZERO_ROW`` takes each of the
            table's first two all-zero rows. Empty: never tried.
        identify_rank: where several presets give the same numbers, ``identify`` names the
            lowest rank first (then the registry's order).
        replay: the function of :mod:`posenc.compat.sinusoid` that repeats the original's
            float32 arithmetic (``compat="original"``), where it computes in float32; empty
            where its exact table is the original's.

    Examples:
        >>> p = posenc.preset("fairseq")
        >>> p.origin
        'fairseq modules.SinusoidalPositionalEmbedding.get_embedding'
        >>> sorted(p.options)
        ['padding_idx']
    """

    name: str
    origin: str
    summary: str
    encoding: Encoding
    options: Mapping[str, Option] = field(default_factory=dict)
    quirks: str = ""
    identify: tuple[Mapping[str, Any], ...] = ({},)
    identify_rank: int = 0
    replay: str = ""

    def label(self, options: Mapping[str, Any]) -> str:
        """How error messages name this preset with the caller's options."""
        given = ", ".join(f"`{k}`={show(v)}" for k, v in options.items())
        return repr(self.name) + (f" with {given}" if given else "")

    def resolve(self, options: Mapping[str, Any], *, grid: bool) -> Encoding:
        """The Encoding for these options; unknown or misplaced options are refused."""
        for key in options:
            if key not in self.options:
                allowed = ", ".join(sorted(self.options)) or "none"
                raise PosencError(
                    f"unknown option `{key}` for preset {self.name!r}{suggest(key, self.options)}"
                    f"; its options are: {allowed}"
                )
            if self.options[key].grid_only and not grid:
                raise PosencError(
                    f"option `{key}` of preset {self.name!r} applies to posenc.grid() only; "
                    "encode() takes coordinates as they are"
                )
        checked = {k: self.options[k].check(k, v) for k, v in options.items()}
        enc = self.encoding
        for key, value in checked.items():
            enc = self.options[key].apply(enc, value, checked)
        return enc


@dataclass(frozen=True)
class Table:
    """The fixed table of rows a family's original keeps and indexes (where the original raises
    past its end): per grid axis the rows ``[low, high)`` it holds, and the module that keeps
    them. ``indexed``: a grid axis reads row ``i`` of the table whatever its positions (Cosmos:
    frame ``i`` sits at ``i * 24 / fps``); else the row of a position is the position."""

    origin: str
    rows: tuple[tuple[int, int], ...]
    indexed: bool = False


@dataclass(frozen=True)
class RotaryPreset:
    """A model family's rotary embedding: the keywords of :func:`posenc.rope` it uses.

    Attributes:
        name: the name to pass as ``preset=`` to :func:`posenc.rope` and
            :class:`posenc.torch.RotaryEmbedding`.
        origin: the projects and functions whose tables it reproduces.
        summary: one line on what it is.
        dim: the family's rotary width (``head_dim`` times any partial factor); a preset does
            not fix it: pass your model's.
        rotary: the keywords (``base``, ``scaling``, ``layout``, ``sections``,
            ``interleave_sections``, ``axes_dim``, ``axes_scale``); keywords given with the
            preset replace these.
        quirks: what to know when porting a checkpoint.
        axial: for a family whose blocks follow its head width (Wan, CogVideoX, the vision
            towers): ``(dim, base) -> {"axes_dim": …, "axes_scale": …}``, the keywords it
            adds for a given width, under those of ``rotary``.
        per_block: for a family whose keywords follow its blocks' widths (Cosmos's per-axis
            bases): ``(axes_dim, base) -> {"axes_base": …}``, applied to the blocks ``axial``
            gives or the call's ``axes_dim``, under the keywords the call gives.
        block_axes: for :func:`posenc.rope_grid`: the grid axis each block encodes, when it
            is not the block's own index (``(1, 0)``: the column block first, as HunyuanDiT
            and SAM 2 lay them out).
        positions: for :func:`posenc.rope_grid`: ``dims -> (start, step)`` per grid axis,
            the family's coordinates when the call gives none (DINOv3's ``(i + 0.5) / n * 2
            - 1``); default ``0, 1, 2, …``.
        replays: the ``compat=`` modes that repeat the family's own arithmetic
            (``"diffusers"``, ``"transformers"``, ``"timm"``), beside the exact default, each
            with the function that replays it, as ``"module:function"`` (it takes a
            :class:`posenc.compat.grid.GridCall`); :attr:`originals` lists the modes.
        rows: the fixed tables of rows the original keeps, one per form (where it raises
            past their end): ``compat=`` refuses a grid past them.

    Examples:
        >>> p = posenc.preset("llama3")
        >>> p.rotary["base"], p.rotary["scaling"]["rope_type"]
        (500000.0, 'llama3')
        >>> cos, sin = posenc.rope(np.arange(16), 128, preset="llama3")
    """

    name: str
    origin: str
    summary: str
    dim: int
    rotary: Mapping[str, Any]
    quirks: str = ""
    axial: Callable[[int, float], Mapping[str, Any]] | None = None
    per_block: Callable[[tuple[int, ...], float], Mapping[str, Any]] | None = None
    block_axes: tuple[int, ...] | None = None
    positions: Callable[[tuple[int, ...]], tuple[list[float], list[float]]] | None = None
    replays: Mapping[str, str] = field(default_factory=dict)
    rows: tuple[Table, ...] = ()

    @property
    def originals(self) -> tuple[str, ...]:
        """The ``compat=`` modes that repeat the family's own arithmetic."""
        return tuple(self.replays)

    def settings(self) -> str:
        """The keywords, as a call would spell them."""
        return ", ".join(f"{k}={v!r}" for k, v in self.rotary.items())


# Option checkers and appliers shared by the preset data.


def set_field(name: str) -> Apply:
    """An option that sets the Encoding field ``name`` to its value."""
    return lambda enc, v, _: enc.replace(**{name: v})


def positive(key: str, v: Any) -> float:
    return check_real(key, v, positive=True)


def real(key: str, v: Any) -> float:
    return check_real(key, v)


def position_or_none(key: str, v: Any) -> int | None:
    return None if v is None else check_int(key, v, maximum=int(MAX_POSITION))


def positive_or_none(key: str, v: Any) -> float | None:
    return None if v is None else check_real(key, v, positive=True)
