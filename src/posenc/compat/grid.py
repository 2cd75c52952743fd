"""What the grid replays of the ``compat/`` modules share (``posenc.rope_grid(...,
compat=…)``): the device they compute on and the form of their result."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from posenc.errors import PosencError, show
from posenc.evaluate.libs.torch import compat_dtype, compat_out


@dataclass(frozen=True)
class GridCall:
    """One ``posenc.rope_grid(..., compat=…)`` call as the replays take it
    (``rotary_grid(call)`` in each ``compat/`` module of ``api/rope_grid.py``'s ``ORIGINALS``):
    the preset's name, the mode, the grid, the checked :class:`~posenc.spec.rotary.Rotary`,
    the grid axis of each block, each axis's ``start`` and ``step``, whether they came from
    ``crop=``, and the output's ``dtype``, ``device`` and ``like``."""

    family: str
    compat: str
    dims: tuple[int, ...]
    r: Any
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
    the original's, only held in it)."""
    dtype, device, like = call.dtype, call.device, call.like
    out_device = like.device if isinstance(like, torch.Tensor) and device is None else device
    work = torch.device(out_device) if out_device is not None else torch.device("cpu")
    torch_out = (
        isinstance(dtype, torch.dtype) or out_device is not None or isinstance(like, torch.Tensor)
    )
    out = compat_dtype(dtype, torch.get_default_dtype() if torch_out else torch.float32)
    cos, sin = compute(work)
    pair = compat_out((cos.to(out), sin.to(out)), numpy_out=not torch_out)
    return pair[0], pair[1]


FORM = ("layout", "blocks", "axes_dim", "axes_scale", "axes_base", "spacing", "interleave_axes",
        "ladder_axes", "scaling", "sections", "interleave_sections")  # fmt: skip
"""The fields of a call's :class:`~posenc.spec.rotary.Rotary` that :func:`check_form` compares
with the family's own (``dim`` and ``base`` are every replay's arguments)."""

PAIRS = ("interleaved", "halves", "compact")
"""The layouts a replay that computes one column per frequency, then places it, takes."""

TAKEN = ("layout", "axes_dim", "axes_scale", "axes_base")
"""The free fields a family's own table is rebuilt with (``rotary()``'s keywords)."""

Free = Mapping[str, Collection[Any] | None]
"""A replay's free keywords: each with the values it takes (None: any), e.g. ``{"layout":
("interleaved", "halves")}``; ``"block_axes"`` names the call's block order."""


def check_form(call: GridCall, free: Free | None = None) -> None:
    """Refuse a call whose table is not its family's own form: every field of ``call.r`` in
    :data:`FORM` and the block order ``call.blocks`` must be those of the family's
    :class:`~posenc.spec.rotary.Rotary` built from its preset at the call's ``dim`` and
    ``base`` (and the call's free keywords), except the keywords in ``free``, which the
    family's replay takes from the call (within their values). Else a
    :class:`~posenc.errors.PosencError` naming the keyword: the replay would silently give the
    family's table (or a wrong one) under another name."""
    from posenc.spec.presets import get_rotary_preset
    from posenc.spec.rotary import rotary

    free = free or {}
    r, label = call.r, f"compat={call.compat!r} repeats {call.family}'s own tables"
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
    mine = {**{k: getattr(own, k) for k in FORM},
            "block_axes": preset.block_axes or tuple(range(len(call.blocks)))}  # fmt: skip
    for key, value in given.items():
        if key not in free and value != mine[key]:
            raise PosencError(
                f"`{key}`: {label} ({key}={show(mine[key])}), not {key}={show(value)}: drop `{key}`"
            )
