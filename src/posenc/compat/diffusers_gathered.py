"""diffusers' own arithmetic for the families whose complex tables are gathered by ids (Lumina-
Next, Lumina-Image-2.0, Z-Image, Bria-FIBO2): ``compat="diffusers"`` of their presets
(:func:`lumina_next`, :func:`lumina2`, :func:`z_image`, named by their records' ``replays``),
and the per-axis complex rows the stand-ins of :func:`posenc.torch.patch` gather.

Each keeps, per position axis, a complex table of integer rows: ``torch.polar`` of the angles,
in the dtype diffusers computes them in (Lumina-Image-2.0: float64, so complex128 tables;
Z-Image: float64 angles rounded to float32; Lumina-Next: float32). Bit for bit with diffusers
on CPU torch, checked against diffusers itself in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from posenc.compat.grid import PAIRS, GridCall, check_form, compat_grid, references
from posenc.errors import PosencError
from posenc.spec.rotary import Rotary

Rows = Callable[[int, torch.Tensor, float], torch.Tensor]
"""One axis's complex rows ``(dim, integer positions, theta) -> [S, dim / 2]``, as a module
computes its table."""


def lumina_rows(
    dim: int,
    pos: torch.Tensor,
    theta: float,
    wide: torch.dtype,
    *,
    linear_factor: float = 1.0,
    ntk_factor: float = 1.0,
) -> torch.Tensor:
    """``get_1d_rotary_pos_embed(dim, pos, theta, use_real=False, linear_factor, ntk_factor,
    freqs_dtype=wide)``: ``[S, dim / 2]`` complex (complex128 for float64 ``wide``), the
    frequencies ``1 / (theta * ntk) ** (2j / dim) / linear`` in ``wide``, times the positions
    (``pos`` integers), then ``polar``."""
    exponent = torch.arange(0, dim, 2, dtype=wide, device=pos.device) / dim
    freqs = 1.0 / ((theta * ntk_factor) ** exponent) / linear_factor
    angles = torch.outer(pos, freqs)
    return torch.polar(torch.ones_like(angles), angles)


def z_image_rows(dim: int, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """``RopeEmbedder.precompute_freqs_cis``'s rows at the integer positions ``pos``: float64
    frequencies and angles, the angles rounded to float32, ``polar`` in complex64;
    ``[S, dim / 2]``."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = torch.outer(pos.to("cpu", torch.float64), freqs).float()
    return torch.polar(torch.ones_like(angles), angles).to(pos.device)


def lumina2_rows(compat: str) -> Rows:
    """Lumina-Image-2.0's rows: complex128 (``"diffusers-mps"``: complex64 of float32)."""
    wide = torch.float32 if compat == "diffusers-mps" else torch.float64
    return lambda dim, pos, theta: lumina_rows(dim, pos, theta, wide)


def lumina_next_table(
    dim: int, h: int, w: int, base: float, linear_factor: float, device: Any = None
) -> torch.Tensor:
    """``get_2d_rotary_pos_embed_lumina(dim, h, w, linear_factor, ntk_factor)``, ``base`` its
    ``10000 * ntk_factor``: ``[h, w, dim / 2]`` complex64, each token's row and column rows
    taken in turn per frequency."""
    rows, cols = (
        lumina_rows(
            dim // 2,
            torch.arange(n, device=device),
            base,
            torch.float32,
            linear_factor=linear_factor,
        )
        for n in (h, w)
    )
    n = dim // 4
    both = torch.stack([rows[:, None, :].expand(h, w, n), cols[None, :, :].expand(h, w, n)], -1)
    return both.flatten(2)


def placed(table: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A complex table's ``(cos, sin)`` in a layout: each pair's column twice in place
    (``interleaved``), once (``compact``), or the table twice over (``halves``)."""
    cos, sin = table.real, table.imag
    if layout == "interleaved":
        return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    if layout == "halves":
        return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
    return cos.contiguous(), sin.contiguous()


def _factors(rotary: Rotary) -> tuple[float, float]:
    """Lumina-Next's ``linear_factor`` read back from the call's ``axes_scale = (1 / linear,
    1 / linear)``, and its base ``10000 * ntk_factor``."""
    scale = rotary.axes_scale or (1.0, 1.0)
    if scale[0] != scale[1] or rotary.axes_base is not None or not rotary.interleave_axes:
        raise PosencError(
            "`compat='diffusers'`: lumina-next scales both axes alike (axes_scale=(1 / "
            f"linear_factor,) * 2, base=10000 * ntk_factor), got axes_scale={rotary.axes_scale}, "
            f"axes_base={rotary.axes_base}"
        )
    return 1.0 / scale[0], float(rotary.base)


def _check(call: GridCall, *, from_zero: bool = False) -> list[int]:
    """The integer first row of each axis; an error where the call asks for positions the
    family's tables do not hold (fractional or strided; ``from_zero``: any but 0, 1, 2, …)."""
    if call.cropped:
        raise PosencError(f"`crop`: compat='diffusers' takes {call.family}'s integer rows, no crop")
    first = []
    for a, (s0, st) in enumerate(zip(call.starts, call.steps, strict=True)):
        if st != 1.0 or s0 != int(s0) or s0 < 0 or (from_zero and s0 != 0):
            raise PosencError(
                f"`compat='diffusers'`: {call.family}'s tables hold the integer rows 0, 1, 2, …; "
                f"axis {a} asks for {s0:g} + i * {st:g}"
            )
        first.append(int(s0))
    return first


def lumina_next(call: GridCall) -> tuple[Any, Any]:
    """``posenc.rope_grid(..., preset="lumina-next", compat="diffusers")``: the pipeline's
    ``get_2d_rotary_pos_embed_lumina`` table (float32, complex64), rows and columns taken in
    turn per frequency, in the call's layout; a rule on both axes (``"lumina-time"``,
    ``"linear"``, ``"ntk"``) as the pipeline's ``linear_factor`` or ``ntk_factor``."""
    takes = ("base", "linear")  # the pipeline's ntk_factor and linear_factor
    check_form(call, {"layout": PAIRS, "axes_scale": None}, takes)
    _check(call, from_zero=True)
    linear, base = _factors(call.rotary)
    rows, cols = references(call, takes)
    if rows != cols or (rows.forms and call.rotary.axes_scale is not None):
        raise PosencError(
            "`scaling` with `compat`: Lumina-Next's pipeline scales rows and columns alike, by "
            "one rule and no `axes_scale`: give the same rule for both axes"
        )
    linear = rows.linear if rows.forms else linear
    base = rows.base if rows.base is not None else base

    def tables(work: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        table = lumina_next_table(call.rotary.dim, call.dims[0], call.dims[1], base, linear, work)
        return placed(table.reshape(math.prod(call.dims), -1), call.rotary.layout)

    return compat_grid(tables, call)


def lumina2(call: GridCall) -> tuple[Any, Any]:
    """``posenc.rope_grid(..., preset="lumina2", compat=…)``: ``Lumina2RotaryPosEmbed``'s rows
    (complex128; ``"diffusers-mps"`` complex64) at the grid's integer positions; with
    ``dtype=torch.float64`` its float64 numbers."""
    return _gathered(call, lumina2_rows(call.compat))


def z_image(call: GridCall) -> tuple[Any, Any]:
    """``posenc.rope_grid(..., preset="z-image", compat="diffusers")``: ``RopeEmbedder``'s
    rows (float64 angles rounded to float32, complex64) at the grid's integer positions."""
    return _gathered(call, z_image_rows)


def _gathered(call: GridCall, rows: Rows) -> tuple[Any, Any]:
    """The rows of each axis's table at the grid's integer positions (``start`` the first:
    Lumina-Image-2.0's image patches at ``t = L``), broadcast, concatenated ``[t | h | w]``, as
    ``(cos, sin)`` in the call's layout."""
    check_form(call, {"layout": PAIRS, "axes_dim": None})  # the module's own widths
    first = _check(call)
    r = call.rotary

    def tables(work: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        parts = []
        for a, (d, n, s0) in enumerate(zip(r.axes_dim, call.dims, first, strict=True)):
            pos = torch.arange(s0, s0 + n, device=work)
            shape = [1] * len(call.dims) + [d // 2]
            shape[a] = n
            parts.append(rows(d, pos, float(r.base)).reshape(shape).expand(*call.dims, d // 2))
        return placed(torch.cat(parts, dim=-1).reshape(math.prod(call.dims), -1), r.layout)

    return compat_grid(tables, call)
