"""What the grid replays of the ``compat/`` modules share (``posenc.rope_grid(...,
compat=…)``): the device they compute on and the form of their result."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from posenc.errors import NotHeld, PosencError, show
from posenc.evaluate.libs.torch import compat_dtype, compat_out
from posenc.spec.extrapolation import Reference


@dataclass(frozen=True)
class GridCall:
    """One ``posenc.rope_grid(..., compat=…)`` call as the replays take it
    (the function each preset's ``replays`` names, per mode):
    the preset's name, the mode, the grid, the checked :class:`~posenc.spec.rotary.Rotary`,
    the grid axis of each block, each axis's ``start`` and ``step``, whether they came from
    ``crop=``, and the output's ``dtype``, ``device`` and ``like``."""

    family: str
    compat: str
    dims: tuple[int, ...]
    rotary: Any
    blocks: tuple[int, ...]
    starts: tuple[float, ...]
    steps: tuple[float, ...]
    cropped: bool = False
    dtype: Any = None
    device: Any = None
    like: Any = None


def compat_grid(
    compute: Callable[[torch.device], tuple[torch.Tensor, torch.Tensor]], call: GridCall
) -> tuple[Any, Any]:
    """A compat replay's grid tables ``compute(work) -> (cos, sin)``: computed on the device
    the call asks for (``device``, else ``like``'s, else the CPU), cast to its ``dtype``, NumPy
    unless torch is asked for (a torch ``dtype``, ``device`` or ``like``). The default dtype
    is the exact mode's: float32 for NumPy, torch's default dtype for torch (the values are
    the original's, only held in it). A call past the rows of the family's table
    (the preset's ``rows``) is refused first; a grid with an empty axis has no rows to replay: its
    tables are empty, as the exact mode's."""
    empty = 0 in call.dims
    if not empty:
        check_rows(call)
    dtype, device, like = call.dtype, call.device, call.like
    out_device = like.device if isinstance(like, torch.Tensor) and device is None else device
    work = torch.device(out_device) if out_device is not None else torch.device("cpu")
    torch_out = (
        isinstance(dtype, torch.dtype) or out_device is not None or isinstance(like, torch.Tensor)
    )
    out = compat_dtype(dtype, torch.get_default_dtype() if torch_out else torch.float32)
    if empty:
        cos = sin = torch.zeros(0, call.rotary.width, dtype=out, device=work)
    else:
        cos, sin = compute(work)
    pair = compat_out((cos.to(out), sin.to(out)), numpy_out=not torch_out)
    return pair[0], pair[1]


def check_rows(call: GridCall) -> None:
    """Refuse a call whose grid reads rows outside the tables its family's original keeps (the
    preset's ``rows``): the original raises there (an ``IndexError``, or a shape error from a
    short slice; Qwen-Image's frames past 4095: a table of another width), so no replay of its
    numbers exists. A
    :class:`~posenc.errors.PosencError` naming ``shape``, ``start`` and ``step``, the axis, the
    table's rows and the rows asked for (:class:`~posenc.errors.NotHeld`, which says them). The
    family's table of as many axes as the grid, else
    its first (a module of fewer blocks zips them with its first lengths)."""
    from posenc.spec.presets import get_rotary_preset

    tables = get_rotary_preset(call.family).rows
    if not tables:
        return
    table = next((t for t in tables if len(t.rows) == len(call.dims)), tables[0])
    for a, ((low, high), n) in enumerate(zip(table.rows, call.dims, strict=False)):
        if table.indexed:
            first, last = 0.0, float(n - 1)
        else:
            ends = (call.starts[a], call.starts[a] + call.steps[a] * (n - 1))
            first, last = min(ends), max(ends)
        if first < low or last >= high:
            held = f"rows {low} … {high - 1} on axis {a} ({table.origin})"
            raise NotHeld(
                f"`shape`, `start`, `step`: compat={call.compat!r} repeats {call.family}'s "
                f"table of {held}; this grid reads rows {first:g} … {last:g} there (shape[{a}] "
                f"= {n}, start {call.starts[a]:g}, step {call.steps[a]:g}), which the original "
                "does not hold (it raises, or returns a malformed table): the exact mode (no "
                "compat) takes any position",
                held,
            )


FORM = (
    "layout",
    "blocks",
    "axes_dim",
    "axes_scale",
    "axes_base",
    "spacing",
    "interleave_axes",
    "ladder_axes",
    "scaling",
    "sections",
    "interleave_sections",
)
"""The fields of a call's :class:`~posenc.spec.rotary.Rotary` that :func:`check_form` compares
with the family's own (``dim`` and ``base`` are every replay's arguments)."""

PAIRS = ("interleaved", "halves", "compact")
"""The layouts a replay that computes one column per frequency, then places it, takes."""

TAKEN = ("layout", "axes_dim", "axes_scale", "axes_base")
"""The free fields a family's own table is rebuilt with (``rotary()``'s keywords)."""

Free = Mapping[str, Collection[Any] | None]
"""A replay's free keywords: each with the values it takes (None: any), e.g. ``{"layout":
("interleaved", "halves")}``; ``"block_axes"`` names the call's block order."""


def references(call: GridCall, takes: Collection[str] = ()) -> list[Reference]:
    """Each block's rule past the trained size (``call.rotary.axes_scaling``) in its
    references' own terms (:class:`~posenc.spec.extrapolation.Reference`: a base, a divisor,
    pairs set), for a replay whose original code takes them (``takes``: ``"base"``,
    ``"linear"``, ``"pairs"``); the error naming the grid axis and the rule where no
    reference applies the rule within this original's arithmetic."""
    rotary = call.rotary
    widths = tuple(rotary.axes_dim or ())
    if not rotary.axes_scaling:
        return [Reference()] * len(widths)
    bases = rotary.bases
    out = []
    for b, (one, d, base) in enumerate(zip(rotary.axes_scaling, widths, bases, strict=True)):
        make = None if one.is_default else one.rule.reference
        ref = Reference() if one.is_default else make(one.p, d, float(base)) if make else None
        forms = frozenset() if one.is_default else one.rule.forms  # at any size
        if ref is None or not (ref.forms | forms) <= set(takes):
            offered = ", ".join(sorted(takes)) or "no rule"
            raise PosencError(
                f"`scaling[{call.blocks[b]}]` with `compat`: compat={call.compat!r} repeats "
                f"{call.family}'s own arithmetic, where no reference applies rope_type "
                f"{one.rope_type!r} (this replay takes: {offered}): drop `compat` for the "
                "rule's exact tables"
            )
        out.append(ref)
    return out


def check_form(call: GridCall, free: Free | None = None, takes: Collection[str] = ()) -> None:
    """Refuse a call whose table is not its family's own form: every field of ``call.rotary`` in
    :data:`FORM` and the block order ``call.blocks`` must be those of the family's
    :class:`~posenc.spec.rotary.Rotary` built from its preset at the call's ``dim`` and
    ``base`` (and the call's free keywords), except the keywords in ``free``, which the
    family's replay takes from the call (within their values). Else a
    :class:`~posenc.errors.PosencError` naming the keyword: the replay would silently give the
    family's table (or a wrong one) under another name. A rule of one grid axis is refused
    unless the replay applies its references' form of it (``takes``: :func:`references`)."""
    from posenc.spec.presets import get_rotary_preset
    from posenc.spec.rotary import rotary

    references(call, takes)  # a rule past the trained size only where a reference applies it
    free = free or {}
    r, label = call.rotary, f"compat={call.compat!r} repeats {call.family}'s own tables"
    given = {**{k: getattr(r, k) for k in FORM}, "block_axes": tuple(call.blocks)}
    for key, values in free.items():
        if values is not None and given[key] not in values:
            raise PosencError(
                f"`{key}`: {label}, with {key} one of {show(tuple(values))}, not "
                f"{show(given[key])}: drop `{key}`"
            )
    taken = {k: given[k] for k in TAKEN if k in free}
    try:
        own = rotary(r.dim, preset=call.family, base=r.base, **taken)
    except PosencError as err:
        raise PosencError(
            f"`dim` = {r.dim}: {label}, which this width does not have ({err})"
        ) from err
    preset = get_rotary_preset(call.family)
    mine = {
        **{k: getattr(own, k) for k in FORM},
        "block_axes": preset.block_axes or tuple(range(len(call.blocks))),
    }
    for key, value in given.items():
        if key not in free and value != mine[key]:
            raise PosencError(
                f"`{key}`: {label} ({key}={show(mine[key])}), not {key}={show(value)}: drop `{key}`"
            )
