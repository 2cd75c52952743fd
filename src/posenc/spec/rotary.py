"""The rotary spec: :class:`Rotary` (what defines one rotary table), its keyword checks,
:data:`LAYOUTS` (where each frequency's cosine and sine go) and the channel pairs they rotate.

A RoPE table is a plan like any other (:mod:`posenc.spec.layout`): its channels are the
cosines, then the sines, of the rotary frequencies, each placed by a layout, so the exact
engine evaluates it (float64 angles, the attention factor applied in float64, one rounding).
The scaling rules that rewrite the frequencies are :mod:`posenc.spec.scaling`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from posenc.cache import nbytes
from posenc.errors import (
    MAX_AXES,
    MAX_DIM,
    PosencError,
    check_bool,
    check_choice,
    check_int,
    check_real,
    show,
)
from posenc.spec.ladders import SPACINGS
from posenc.spec.layout import PLANS, Plan
from posenc.spec.presets import get_rotary_preset
from posenc.spec.scaling import Rule, Scaling, parse_scaling

RopeLayout = Literal["halves", "interleaved", "compact", "block-halves"]


LAYOUTS: dict[str, Callable[[int], list[int]]] = {
    "halves": lambda n: [*range(n), *range(n)],  # GPT-NeoX, HF rotate_half: cat(f, f)
    "interleaved": lambda n: [i for i in range(n) for _ in (0, 1)],  # GPT-J, Meta, FLUX
    "compact": lambda n: list(range(n)),  # flash-attn, vLLM: one column per pair
}
"""For ``n`` frequencies of a block, the frequency of each of the block's table columns.
``"block-halves"`` is :func:`layout_columns`'s: halves inside each of ``blocks`` blocks."""


def layout_columns(layout: str, n: int, blocks: int = 1) -> list[int]:
    """The frequency of each table column, for ``n`` frequencies: :data:`LAYOUTS`, or
    ``"block-halves"``: the table cut into ``blocks`` equal blocks, block ``b`` holding the
    ``n / blocks`` frequencies from ``b * n / blocks`` twice over (channel ``i`` of a block of
    width ``w_b`` pairs with ``i + w_b / 2``: Allegro's per-axis halves, LTX-2's per-head
    split)."""
    if layout != "block-halves":
        return LAYOUTS[layout](n)
    m = n // blocks
    return [j for b in range(blocks) for _ in (0, 1) for j in range(b * m, (b + 1) * m)]


@dataclass(frozen=True)
class Rotary:
    """Everything that defines one rotary table, for any positions.

    Attributes:
        dim: rotary width ``d`` (channels that rotate; even): tables are ``d`` wide
            (``d / 2`` in the compact layout).
        scaling: the validated scaling rule.
        base: ``rope_theta``.
        layout: see :data:`LAYOUTS`.
        sections: multimodal RoPE: how many of the ``d / 2`` frequencies each position axis
            takes (Qwen2-VL ``mrope_section``), in consecutive chunks, or, with
            ``interleave_sections``, round robin (Qwen3-VL).
        axes_dim: axial RoPE: one block of this width per position axis, each with its own
            frequencies ``base ** (-2j / d_k)`` (FLUX). The blocks' frequencies are laid out
            one after the other, then placed by ``layout`` over the whole width: interleaved
            pairs stay inside their block; halves pair channel ``i`` with ``i + dim / 2``,
            both halves holding every block (Qwen2-VL's vision tower, Pixtral, DINOv3).
        axes_scale: with ``axes_dim``, a factor multiplying each block's frequencies (in
            float64): DINOv3's ``2 pi``, Pixtral's odd-index shift, a per-axis downscaling.
        axes_base: with ``axes_dim``, each block's own base in place of ``base`` (Cosmos's
            per-axis NTK bases); with a pixel ``spacing``, each block's own maximum resolution
            (the ``base`` of its pixel bands).
        spacing: an entry of :data:`posenc.spec.ladders.SPACINGS`: ``"lang"`` (the ladders
            above) or ``"ltx"``: LTX-Video's one ladder of ``n =
            dim // (2 a)`` frequencies ``(pi / 2) * base ** (k / (n - 1))``, each read by the
            ``a = ladder_axes`` position axes in turn (``(t, h, w)`` per frequency; LTX-2's
            audio: one axis), after ``dim % (2 a)`` channels that do not rotate (frequency
            0); ``"pixel"`` / ``"pixel-linear"`` (with ``axes_dim``): timm's pixel bands,
            each block's ``d_k / 2`` frequencies from ``pi`` to ``pi * base / 2`` (``base`` the
            maximum resolution), log- or evenly spaced.
        interleave_axes: with ``axes_dim``, the blocks' frequencies taken in turn, ``(a_0
            j_0, a_1 j_0, …, a_0 j_1, …)``, not block after block (Lumina-Next's
            ``(h, w)`` per frequency); a preset's keyword.
        blocks: with ``layout="block-halves"``, how many equal blocks hold halves (Allegro's
            three axes, LTX-2's heads); a preset's keyword.
        ladder_axes: with ``spacing="ltx"``, the position axes reading the ladder (3; 1 for
            LTX-2's audio and cross-attention tables); a preset's keyword.
    """

    dim: int
    scaling: Scaling
    base: float = 10000.0
    layout: RopeLayout = "halves"
    sections: tuple[int, ...] | None = None
    interleave_sections: bool = False
    axes_dim: tuple[int, ...] | None = None
    axes_scale: tuple[float, ...] | None = None
    axes_base: tuple[float, ...] | None = None
    spacing: str = "lang"
    interleave_axes: bool = False
    blocks: int = 1
    ladder_axes: int = 3
    axes_scaling: tuple[Scaling, ...] | None = None

    @property
    def scalings(self) -> tuple[Scaling, ...]:
        """The scaling of each block (``axes_scaling``), or the one of every frequency."""
        return self.axes_scaling or (self.scaling,)

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The rules of :attr:`scalings`."""
        return tuple(s.rule for s in self.scalings)

    @property
    def bases(self) -> tuple[float, ...]:
        """Each block's base (``axes_base``, or ``base`` for every block of ``axes_dim``;
        ``(base,)`` without blocks): what a call given them gets whatever its preset's bases
        (``axes_base`` None means the preset's own, not ``base``)."""
        return self.axes_base or (self.base,) * len(self.axes_dim or (0,))

    @property
    def ndim(self) -> int:
        """Position axes: 1, ``len(sections)``, ``len(axes_dim)``, or ``ladder_axes`` (a
        shared ladder: ``ltx``)."""
        if SPACINGS[self.spacing].shared:
            return self.ladder_axes
        return len(self.sections or self.axes_dim or (0,))

    @property
    def width(self) -> int:
        """Channels of each of the cos and sin tables."""
        return self.dim // 2 if self.layout == "compact" else self.dim

    def plan(self, seq_len: int | None, label: str = "rope") -> Plan:
        """The plan of ``[cos | sin]`` (``2 * width`` channels) at this sequence length (which
        only the ``dynamic`` and ``longrope`` rules read), named ``label`` in messages."""
        key = (self, self.scaling.phase(seq_len))
        kept = PLANS.get_or_make(
            key, lambda: _plan(*key, label), lambda p: nbytes(p.omega, p.axis, p.src)
        )
        return kept.labelled(label)


def _plan(rotary: Rotary, seq_len: int | None, label: str) -> Plan:
    blocks: list[tuple[np.ndarray, np.ndarray]] = []  # (omega, axis) per channel block
    factor = 1.0
    axis_factors: tuple[float, ...] | None = None
    spacing = SPACINGS[rotary.spacing]
    if spacing.shared and spacing.ladder is not None:  # one ladder, read by t, h, w in turn
        a = rotary.ladder_axes
        n, still = rotary.dim // (2 * a), (rotary.dim % (2 * a)) // 2
        ladder = spacing.ladder(n, rotary.base)
        blocks.append((np.zeros(still), np.zeros(still, dtype=np.int64)))
        blocks.append((np.repeat(ladder, a), np.tile(np.arange(a), n)))
    elif rotary.axes_dim is not None:
        scales = rotary.axes_scale or (1.0,) * len(rotary.axes_dim)
        bases = rotary.bases
        rules = rotary.axes_scaling or (rotary.scaling,) * len(rotary.axes_dim)
        factors = [1.0] * len(rotary.axes_dim)
        for k, (dk, scale, base) in enumerate(zip(rotary.axes_dim, scales, bases, strict=True)):
            if spacing.ladder is not None:  # the spacing's own (pixel bands): no rule (checked)
                omega = spacing.ladder(dk // 2, base)
            else:
                omega, factors[k] = rules[k].frequencies(dk, base, seq_len)
            blocks.append((omega * scale, np.full(len(omega), k)))
        factor = factors[-1]
        if len(set(factors)) > 1:  # a magnitude on some axes only: each axis its own
            axis_factors = tuple(factors)
    else:
        omega, factor = rotary.scaling.frequencies(rotary.dim, rotary.base, seq_len)
        blocks.append((omega, section_axes(rotary)))
    omega = np.concatenate([b[0] for b in blocks])
    axis = np.concatenate([b[1] for b in blocks]).astype(np.int64)
    if rotary.interleave_axes:  # frequency j of every block in turn, then j + 1 (Lumina-Next)
        rank = np.concatenate([np.arange(len(b[0])) for b in blocks])
        turn = np.lexsort((axis, rank))
        omega, axis = omega[turn], axis[turn]
    cols = np.asarray(layout_columns(rotary.layout, len(omega), rotary.blocks), dtype=np.int64)
    src = np.concatenate([2 * cols + 1, 2 * cols])  # cosines, then sines
    if axis_factors is not None:
        return Plan(len(src), rotary.ndim, omega, axis, src, label, 1.0, axis_factors)
    return Plan(len(src), rotary.ndim, omega, axis, src, label, factor)


def section_axes(rotary: Rotary) -> np.ndarray:
    """The position axis of each of the ``d / 2`` frequencies."""
    n = rotary.dim // 2
    if rotary.sections is None:
        return np.zeros(n, dtype=np.int64)
    if not rotary.interleave_sections:
        return np.repeat(np.arange(len(rotary.sections)), rotary.sections)
    k = len(rotary.sections)
    j = np.arange(n)
    axis = np.zeros(n, dtype=np.int64)
    for a in range(1, k):  # Qwen3-VL: axis a takes j = a mod k below k * sections[a]
        axis[(j % k == a) & (j < k * rotary.sections[a])] = a
    return axis


def _ints(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise PosencError(f"`{name}` must be a tuple of positive integers, got {show(value)}")
    out = tuple(check_int(f"{name}[{i}]", v, minimum=1) for i, v in enumerate(value))
    if len(out) > MAX_AXES:
        raise PosencError(f"`{name}` may have at most {MAX_AXES} entries, got {len(out)}")
    return out


def rotary(
    dim: Any,
    *,
    preset: Any = None,
    base: Any = None,
    scaling: Any = None,
    layout: Any = None,
    sections: Any = None,
    interleave_sections: Any = None,
    axes_dim: Any = None,
    axes_scale: Any = None,
    axes_base: Any = None,
    blocks: Any = None,
) -> Rotary:
    """The checked :class:`Rotary` of :func:`rope`'s keywords: a preset's, replaced by those
    given, then the defaults (base 10000, halves). A preset's ``axial`` and ``per_block``
    keywords are defaults under the call's: ``per_block`` (what follows the blocks' widths) is
    not asked when the call gives ``axes_base``, and the block counts are checked as the call
    leaves them (by :func:`_blocks`), never by the preset."""
    given = {
        "base": base,
        "scaling": scaling,
        "layout": layout,
        "sections": sections,
        "interleave_sections": interleave_sections,
        "axes_dim": axes_dim,
        "axes_scale": axes_scale,
        "axes_base": axes_base,
        "blocks": blocks,
    }
    kw: dict[str, Any] = {"base": 10000.0, "layout": "halves", "interleave_sections": False}
    axial = per_block = None
    if preset is not None:
        p = get_rotary_preset(preset)
        kw.update(p.rotary)
        axial = p.axial if axes_dim is None else None  # blocks given: the preset's are not
        per_block = p.per_block
    kw.update({k: v for k, v in given.items() if v is not None})
    per_axis = kw.get("scaling") if isinstance(kw.get("scaling"), list | tuple) else None
    if per_axis is not None:  # one rule per block: checked once the blocks are known
        kw["scaling"] = None
    if axial is not None:  # the blocks this width takes, under every keyword given
        width = check_int("dim", dim, minimum=1, maximum=MAX_DIM)
        kw = {**axial(width, check_real("base", kw["base"], positive=True)), **kw}
    if layout not in (None, "block-halves") and blocks is None:
        kw.pop("blocks", None)  # another layout given: the preset's blocks of halves go
    if per_block is not None and axes_base is None and kw.get("axes_dim") is not None:
        widths = _ints("axes_dim", kw["axes_dim"])
        kw = {**per_block(widths, check_real("base", kw["base"], positive=True)), **kw}
    default = preset if blocks is None and kw.get("blocks") is not None else None
    r = _rotary(dim, **kw, blocks_of=default)
    return r if per_axis is None else with_axes_scaling(r, per_axis)


def with_axes_scaling(rotary: Rotary, scaling: Any, order: Any = None) -> Rotary:
    """``r`` with one scaling rule (a dict, or None: unscaled) per block of ``axes_dim``;
    ``order``: the block of each entry (default: entry ``a`` is block ``a``)."""
    if rotary.axes_dim is None or not SPACINGS[rotary.spacing].takes_rules:
        raise PosencError(
            "`scaling` as one rule per axis needs one block per axis (`axes_dim` or an axial "
            f"preset), got {show(scaling)}"
        )
    n = len(rotary.axes_dim)
    if len(scaling) != n:
        raise PosencError(
            f"`scaling` must be one rule or {n} (one per axis, None for an axis left as it is), "
            f"got {len(scaling)}"
        )
    parsed = [parse_scaling(v, f"scaling[{i}]") for i, v in enumerate(scaling)]
    for i, one in enumerate(parsed):
        if one.rule.uses_seq_len:
            raise PosencError(
                f"`scaling[{i}]`: rope_type {one.rope_type!r} reads the sequence length, which "
                "one axis of a grid does not have: give it for the whole table"
            )
        keys = [k for k, _ in one.shared if k not in ("rope_type", "type")]
        if keys:
            raise PosencError(
                f"`scaling[{i}]` takes its rule's keys only (the keywords give the rest), got "
                f"{', '.join(keys)}"
            )
    blocks = list(range(n)) if order is None else list(order)
    per_block = [parsed[blocks.index(b)] for b in range(n)]
    if all(one.is_default for one in per_block):
        return rotary
    return dataclasses.replace(rotary, axes_scaling=tuple(per_block))


def _rotary(
    dim: Any,
    *,
    base: Any,
    layout: Any,
    interleave_sections: Any,
    scaling: Any = None,
    sections: Any = None,
    axes_dim: Any = None,
    axes_scale: Any = None,
    axes_base: Any = None,
    spacing: Any = "lang",
    interleave_axes: Any = False,
    blocks: Any = None,
    ladder_axes: Any = 3,
    blocks_of: str | None = None,
) -> Rotary:
    dim = check_int("dim", dim, minimum=1, maximum=MAX_DIM)
    if dim % 2:
        raise PosencError(
            f"`dim` (the rotary width) must be even: channels rotate in pairs, got {dim}"
        )
    s = parse_scaling(scaling)
    base = check_real("base", base, positive=True)
    layout = check_choice("layout", layout, get_args(RopeLayout))
    interleave_sections = check_bool("interleave_sections", interleave_sections)
    shared = dict(s.shared)
    if "rope_theta" in shared and check_real("scaling['rope_theta']", shared["rope_theta"]) != base:
        raise PosencError(
            f"`scaling['rope_theta']` ({show(shared['rope_theta'])}) disagrees with `base` "
            f"({base:g}): pass base={shared['rope_theta']!r}"
        )
    if "partial_rotary_factor" in shared and shared["partial_rotary_factor"] != 1:
        raise PosencError(
            f"`scaling['partial_rotary_factor']` ({show(shared['partial_rotary_factor'])}) "
            "does not apply here: `dim` is already the rotary width (int(head_dim * factor)); "
            "drop the key"
        )
    if "mrope_section" in shared:
        given = _ints("scaling['mrope_section']", shared["mrope_section"])
        if sections is None:
            sections = given
        elif tuple(sections) != given:
            raise PosencError(
                f"`scaling['mrope_section']` ({show(shared['mrope_section'])}) disagrees with "
                f"`sections` ({show(sections)})"
            )
    if "mrope_interleaved" in shared:
        flag = check_bool("scaling['mrope_interleaved']", shared["mrope_interleaved"])
        if flag != interleave_sections and interleave_sections:
            raise PosencError(
                "`scaling['mrope_interleaved']` is False but `interleave_sections` is True"
            )
        interleave_sections = flag
    if sections is not None and axes_dim is not None:
        raise PosencError("`sections` and `axes_dim` exclude each other: pass one")
    if sections is not None:
        sections = _ints("sections", sections)
        if sum(sections) != dim // 2:
            raise PosencError(
                f"`sections` must add up to dim / 2 = {dim // 2} (one entry per frequency), "
                f"got {sections} (sum {sum(sections)})"
            )
    elif interleave_sections:
        raise PosencError("`interleave_sections` needs `sections`")
    if axes_dim is not None:
        axes_dim = _ints("axes_dim", axes_dim)
        odd = [d for d in axes_dim if d % 2]
        if odd or sum(axes_dim) != dim:
            raise PosencError(
                f"`axes_dim` must be even widths adding up to `dim` = {dim}, got {axes_dim}"
            )
    axes_scale = _per_block("axes_scale", "factors", axes_scale, axes_dim, 1.0)
    axes_base = _per_block("axes_base", "bases", axes_base, axes_dim, base)
    spacing = check_choice("spacing", spacing, tuple(SPACINGS))
    how = SPACINGS[spacing]
    if how.blockwise and (axes_dim is None or not s.is_default):
        raise PosencError(
            f"`spacing={spacing!r}` ({how.summary}) is a ladder per block: it needs "
            "`axes_dim` and takes no `sections` or `scaling`"
        )
    if how.shared and (sections is not None or axes_dim is not None or not s.is_default):
        raise PosencError(
            f"`spacing={spacing!r}` is {how.summary}: it takes no `sections`, `axes_dim` or "
            "`scaling`"
        )
    ladder_axes = check_int("ladder_axes", ladder_axes, minimum=1, maximum=MAX_AXES)
    if how.shared and dim < 2 * ladder_axes:
        raise PosencError(
            f"`spacing={spacing!r}` needs `dim` >= {2 * ladder_axes} (dim // {2 * ladder_axes} "
            f"frequencies), got {dim}"
        )
    blocks = _blocks(blocks, layout, dim, blocks_of)
    if check_bool("interleave_axes", interleave_axes) and axes_dim is None:
        raise PosencError("`interleave_axes` needs `axes_dim`: it takes the blocks in turn")
    return Rotary(
        dim,
        s,
        base,
        layout,
        sections,
        interleave_sections,
        axes_dim,
        axes_scale,
        axes_base,
        spacing,
        bool(interleave_axes),
        blocks=blocks,
        ladder_axes=ladder_axes,
    )


def _blocks(blocks: Any, layout: str, dim: int, preset: str | None = None) -> int:
    """``layout="block-halves"``'s count of equal blocks, each an even width (1 otherwise);
    ``preset``: the count is that preset's default, not the call's."""
    if blocks is None:
        return 1
    n = check_int("blocks", blocks, minimum=1, maximum=MAX_DIM)
    if layout != "block-halves" and n != 1:
        raise PosencError(f"`blocks` cuts the 'block-halves' layout, not {layout!r}: drop it")
    if dim % (2 * n):
        raise PosencError(
            f"`blocks` = {n} must cut `dim` = {dim} into blocks of an even width "
            f"(dim a multiple of 2 * blocks)"
            + (
                f": {n} is preset {preset!r}'s count, pass `blocks` or another `layout`"
                if preset
                else ""
            )
        )
    return n


def _per_block(
    name: str, what: str, value: Any, axes_dim: tuple[int, ...] | None, default: float
) -> tuple[float, ...] | None:
    """One positive real per block of ``axes_dim``, or None where every one is ``default``
    (one table: one cache entry)."""
    if value is None:
        return None
    if axes_dim is None:
        raise PosencError(f"`{name}` needs `axes_dim` (one of its {what} per block)")
    if not isinstance(value, list | tuple) or len(value) != len(axes_dim):
        raise PosencError(
            f"`{name}` must be a tuple of {len(axes_dim)} {what} (one per block of `axes_dim` "
            f"{axes_dim}), got {show(value)}"
        )
    out = tuple(check_real(f"{name}[{i}]", v, positive=True) for i, v in enumerate(value))
    return None if all(v == default for v in out) else out


def pair_channels(w: int, layout: str) -> tuple[slice, slice]:
    """The channels of the first and second member of each rotating pair."""
    if layout == "interleaved":
        return slice(0, w, 2), slice(1, w, 2)
    return slice(0, w // 2), slice(w // 2, w)


def member_columns(t: Any, layout: str, a: slice, b: slice) -> tuple[Any, Any]:
    """A table's columns for the first and the second member of each pair (a compact table
    serves both)."""
    return (t, t) if layout == "compact" else (t[..., a], t[..., b])
