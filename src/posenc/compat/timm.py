"""timm's own arithmetic for the sin-cos tables it builds (``compat="original"`` of the
stand-ins :func:`posenc.torch.patch` puts in timm models) and for its rotary tables
(``posenc.rope_grid(..., compat="timm")``: :func:`rotary_grid`), kept apart from the exact
engine.

timm 1.0's ``build_sincos2d_pos_embed`` computes in float32 throughout: its band exponents
``arange(n) / n``, the bands ``1 / temperature ** e``, the grid, their products and sin/cos.
The replay repeats those operations in their order and dtypes, bit for bit with timm on CPU
torch (checked against timm itself in the tests). MoCo v3's ``build_2d_sincos_position_embedding``
(a timm ViT with a frozen table) does the same operations, and is the same replay with
``reverse_coord=True, interleave_sin_cos=True``.

The rotary tables (``timm/layers/pos_embed_sincos.py``) are float32 throughout too:
``RotaryEmbeddingCat``'s bands ``freq_bands(dim // 4, temperature, step=1)``, its ``'index'``
grid ``(arange(n) + grid_offset) / feat * ref`` (EVA-02, Perception Encoder: a
``ref_feat_shape``), or ``arange(n) + grid_offset`` without one (RoPE-ViT, and an EVA built
without ``ref_feat_shape``, timm ``Eva``'s default: preset ``vit-rope`` with ``base=10000,
block_axes=(0, 1)``; ``eva02`` always divides by ``feat`` and multiplies by ``ref``, which at
``ref = feat`` is not the plain integers in float32: 4 % of the cos entries of a 13 x 21 grid
differ, by up to 9.5e-7); with
``in_pixels=True`` (and ``RotaryEmbedding``'s defaults) the pixel bands ``pixel_freq_bands(dim
// 4, max_res, linear_bands)`` (posenc's ``base`` is ``max_res``: presets ``timm-pixel``,
``timm-pixel-linear``) over the ``'pixel'`` grid ``linspace(-1, 1, n)``;
``RotaryEmbeddingDinoV3``'s periods ``temperature ** (2k / (dim // 2))`` over the ``'centered'``
grid, ``angle = 2 pi c / period``; ``RotaryEmbeddingMRope``'s one ladder (:func:`mrope_tables`).
:func:`rotary_grid` maps posenc's per-axis ``start + i * step`` back to those arguments
(``grid_offset``, ``ref_feat_shape``, ``normalize_coords``, ``grid_indexing`` from
``block_axes``, ``rotate_half`` from ``layout``), refuses the positions timm's code cannot
produce and every other keyword that is not the family's own
(:func:`~posenc.compat.grid.check_form`). Gemma 4's ``Gemma4RotaryEmbedding2D`` is
transformers' arithmetic too: its replay is :mod:`posenc.compat.gemma4`'s, which
:func:`rotary_grid` forwards ``gemma4-vision`` to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import torch

from posenc.compat.grid import Free, GridCall, check_form, compat_grid
from posenc.errors import PosencError
from posenc.spec.rotary import Rotary


def sincos_2d(
    shape: Sequence[int],
    dim: int,
    *,
    temperature: float = 10000.0,
    reverse_coord: bool = False,
    interleave_sin_cos: bool = False,
    device: Any = None,
) -> torch.Tensor:
    """``build_sincos2d_pos_embed(shape, dim, temperature, reverse_coord,
    interleave_sin_cos)``: the ``[H * W, dim]`` float32 table (``dim % 4 == 0``)."""
    n = dim // 4
    exponent = torch.arange(n, device=device, dtype=torch.int64).to(torch.float32) / n
    bands = 1.0 / (temperature**exponent)
    sides = list(shape)[::-1] if reverse_coord else list(shape)
    axes = [torch.arange(s, device=device, dtype=torch.int64).to(torch.float32) for s in sides]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij")).flatten(1).transpose(0, 1)
    angles = grid.unsqueeze(-1) * bands.unsqueeze(0)  # [H * W, 2, n]
    stacked = torch.stack(
        [torch.sin(angles), torch.cos(angles)], dim=2 if interleave_sin_cos else 1
    )
    return stacked.flatten(1)


# ---------------------------------------------------------------------------------------------
# the rotary tables: posenc.rope_grid(..., compat="timm")


CAT_REF = "cat-ref"
CAT = "cat"
DINOV3 = "periods"
PIXEL = "pixel"


def _snap(x: float) -> float:
    """``x``, or the simple fraction (denominator up to 1024: an integer ``ref``, an offset
    like 0.25) it is within float64 rounding of, as posenc's ``start`` and ``step`` were
    computed from it (``ref / n``, ``(0.5 + offset) / n * 2 - 1``)."""
    if not math.isfinite(x):
        return x
    near = float(Fraction(x).limit_denominator(1024))
    return near if abs(x - near) <= 1e-9 * max(1.0, abs(x)) else x


def _one_offset(family: str, offsets: Sequence[float], what: str) -> float:
    """timm's single ``grid_offset`` for every axis, or the error naming ``start``."""
    if any(o != offsets[0] for o in offsets):
        raise PosencError(
            f"`start`: compat='timm' builds {family}'s grid with one grid_offset for both axes "
            f"({what}), got offsets {tuple(offsets)}"
        )
    return offsets[0]


def _check_table(family: str, kind: str, rotary: Rotary, blocks: Sequence[int]) -> tuple[str, bool]:
    """timm's ``grid_indexing`` and ``rotate_half`` for this table, or the error naming the
    block widths or factors timm's module cannot take (the rest: :data:`FREE`)."""
    dim = rotary.dim
    if rotary.axes_dim is None or len(rotary.axes_dim) != 2:
        raise PosencError(
            f"`axes_dim`: timm's rotary tables have two grid axes of dim / 4 frequencies each, "
            f"got {rotary.axes_dim}"
        )
    if dim % 4 or tuple(rotary.axes_dim) != (dim // 2, dim // 2):
        raise PosencError(
            f"`axes_dim`: compat='timm' takes dim / 2 channels per axis (dim // 4 bands, dim a "
            f"multiple of 4), got {tuple(rotary.axes_dim)} for dim = {dim}"
        )
    want = (2 * math.pi, 2 * math.pi) if kind == DINOV3 else None
    if rotary.axes_scale != want:
        rule = "2 pi c / period: (2 pi, 2 pi)" if want else "none"
        raise PosencError(
            f"`axes_scale`: {family}'s timm module scales its frequencies by {rule}, got "
            f"{rotary.axes_scale}"
        )
    return ("ij" if list(blocks) == [0, 1] else "xy"), rotary.layout == "halves"


FREE: Free = {"layout": ("interleaved", "halves"), "block_axes": ((0, 1), (1, 0))}
"""What timm's modules take from the call (:func:`~posenc.compat.grid.check_form`):
``rotate_half`` (halves, else interleaved) and ``grid_indexing`` (``'ij'``: block axes ``(0,
1)``; ``'xy'``: ``(1, 0)``); every other keyword is the family's."""


def _cat_grid(
    family: str, kind: str, dims: Sequence[int], starts: Sequence[float], steps: Sequence[float]
) -> tuple[float, list[float] | None]:
    """``RotaryEmbeddingCat``'s ``grid_offset`` and ``ref_feat_shape`` (per grid axis) for
    positions ``start + i * step``."""
    if kind == CAT:
        for g, st in enumerate(steps):
            if st != 1.0:
                raise PosencError(
                    f"`step`: {family}'s timm grid is arange(n) + grid_offset (no "
                    f"ref_feat_shape), so step must be 1, got step[{g}] = {st:g}"
                )
        return _one_offset(family, [float(s) for s in starts], "start"), None
    refs = []
    for g, (n, st) in enumerate(zip(dims, steps, strict=True)):
        ref = _snap(st * n)
        if st <= 0 or ref != int(ref):
            raise PosencError(
                f"`step`: {family}'s timm positions are (i + grid_offset) / n * ref with "
                f"ref_feat_shape a positive integer, so step[{g}] * {n} must be one, got "
                f"step[{g}] = {st:g} (ref {st * n:g})"
            )
        refs.append(ref)
    offsets = [_snap(s / st) for s, st in zip(starts, steps, strict=True)]
    return _one_offset(family, offsets, "start / step"), refs


def _pixel_grid(
    family: str, dims: Sequence[int], starts: Sequence[float], steps: Sequence[float]
) -> None:
    """Refuse positions other than timm's ``'pixel'`` grid ``linspace(-1, 1, n)`` per axis."""
    for g, (n, s, st) in enumerate(zip(dims, starts, steps, strict=True)):
        if s != -1.0 or (n > 1 and _snap(st * (n - 1)) != 2.0):
            raise PosencError(
                f"`start`, `step`: {family}'s timm grid is linspace(-1, 1, n) on each axis "
                f"(start -1, step 2 / (n - 1)), got start[{g}] = {s:g}, step[{g}] = {st:g} "
                f"for n = {n}"
            )


def pixel_bands(n: int, max_res: float, linear: bool) -> torch.Tensor:
    """timm's ``pixel_freq_bands(n, max_res, linear_bands)``: float32 on the CPU."""
    if linear:
        bands = torch.linspace(1.0, max_res / 2, n, dtype=torch.float32)
    else:
        bands = 2 ** torch.linspace(0, math.log(max_res, 2) - 1, n, dtype=torch.float32)
    return bands * torch.pi


def lang_bands(n: int, base: float) -> torch.Tensor:
    """timm's ``freq_bands(n, base, step=1)``: ``1 / base ** (k / n)``, float32 on the CPU."""
    exponent = torch.arange(0, n, 1, dtype=torch.int64).to(torch.float32) / n
    return 1.0 / (float(base) ** exponent)


def _dinov3_grid(
    family: str, dims: Sequence[int], starts: Sequence[float], steps: Sequence[float]
) -> tuple[float, str]:
    """``RotaryEmbeddingDinoV3``'s ``grid_offset`` and ``normalize_coords`` for positions
    ``start + i * step`` (timm's ``((i + 0.5 + offset) / denom) * 2 - 1``)."""
    denoms = [_snap(2.0 / st) if st > 0 else math.inf for st in steps]
    modes = {
        "separate": [float(n) for n in dims],
        "max": [float(max(dims))] * len(dims),
        "min": [float(min(dims))] * len(dims),
    }
    mode = next((m for m, want in modes.items() if denoms == want), None)
    if mode is None:
        raise PosencError(
            f"`step`: {family}'s timm coordinates are ((i + 0.5) / d) * 2 - 1 with d each "
            f"axis's size ('separate'), the largest ('max') or the smallest ('min'), so step "
            f"must be 2 / d, got {tuple(steps)} for grid {tuple(dims)}"
        )
    offsets = [_snap((s + 1.0) * d / 2.0 - 0.5) for s, d in zip(starts, denoms, strict=True)]
    return _one_offset(family, offsets, "(start + 1) * d / 2 - 0.5"), mode


def _layout(x: torch.Tensor, rotate_half: bool) -> torch.Tensor:
    """timm's ``_rope_layout``: ``cat(x, x)`` (halves) or each column twice (interleaved)."""
    return torch.cat([x, x], dim=-1) if rotate_half else x.repeat_interleave(2, -1)


def _cat_tables(
    dims: Sequence[int],
    bands: torch.Tensor,
    offset: float | None,
    refs: list[float] | None,
    indexing: str,
    rotate_half: bool,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``RotaryEmbeddingCat(dim, temperature=base, grid_offset=offset, ref_feat_shape=refs,
    grid_indexing=indexing, rotate_half=…).get_embed(dims)`` as ``(sin, cos)``, ``bands``
    computed on the CPU (``_compute_bands``), the rest on ``device``; ``offset`` None: the
    ``'pixel'`` grid of ``in_pixels=True``."""
    bands = bands.to(device=device)
    feat = list(dims)
    ref = None if refs is None else [int(v) for v in refs]
    if indexing == "xy":  # timm's swap_shape_xy of feat_shape and ref_feat_shape
        feat = [feat[1], feat[0]]
        ref = None if ref is None else [ref[1], ref[0]]
    if offset is None:
        t = [torch.linspace(-1.0, 1.0, steps=s, device=device, dtype=torch.float32) for s in feat]
    else:
        t = [
            torch.arange(s, device=device, dtype=torch.int64).to(torch.float32) + offset
            for s in feat
        ]
    if ref is not None:
        t = [x / f * r for x, f, r in zip(t, feat, ref, strict=True)]
    grid = torch.stack(torch.meshgrid(t, indexing=indexing), dim=-1).to(dtype=torch.float32)
    pos = grid.unsqueeze(-1) * bands
    sin, cos = pos.sin().to(dtype=torch.float32), pos.cos().to(dtype=torch.float32)
    return (
        _layout(sin.flatten(-2).flatten(0, -2), rotate_half),
        _layout(cos.flatten(-2).flatten(0, -2), rotate_half),
    )


def _dinov3_tables(
    dims: Sequence[int],
    dim: int,
    base: float,
    offset: float,
    mode: str,
    indexing: str,
    rotate_half: bool,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``RotaryEmbeddingDinoV3(dim, temperature=base, grid_offset=offset,
    normalize_coords=mode, grid_indexing=indexing, rotate_half=…).get_embed(dims)`` as
    ``(sin, cos)``: periods and grid on the CPU, the angles on ``device``."""
    n = dim // 4
    exponents = 2.0 * torch.arange(n, device="cpu", dtype=torch.float32) / (dim // 2)
    periods = (float(base) ** exponents).to(device=device, dtype=torch.float32)
    feat = list(dims)
    if indexing == "xy":
        feat = [feat[1], feat[0]]
    if mode == "max":
        denom = [float(max(feat))] * len(feat)
    elif mode == "min":
        denom = [float(min(feat))] * len(feat)
    else:
        denom = [float(s) for s in feat]
    t = [
        (torch.arange(0.5, s, dtype=torch.float32) + offset) / d
        for s, d in zip(feat, denom, strict=True)
    ]
    grid = torch.stack(torch.meshgrid(t, indexing=indexing), dim=-1).to(dtype=torch.float32)
    coords = (2.0 * grid - 1.0).flatten(0, -2)
    coords = coords[:, :, None].to(device=device, dtype=torch.float32)
    angles = (2 * math.pi * coords / periods[None, None, :]).flatten(1)
    return _layout(angles.sin(), rotate_half), _layout(angles.cos(), rotate_half)


def mrope_tables(
    shape: Sequence[int],
    dim: int,
    row_col: tuple[int, int],
    temperature: float,
    device: Any,
    freq_dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``RotaryEmbeddingMRope(dim, mrope_section=(_, *row_col), temperature).get_embed(shape)``
    as float32 ``(sin, cos)`` ``[H * W, dim]`` (halves), on ``device``: one ladder ``1 /
    temperature ** (2j / dim)``; frequency ``j`` reads the row (``j % 3 == 1``, ``j < 3 *
    row_col[0]``), the column (``j % 3 == 2``, ``j < 3 * row_col[1]``) or 0. ``freq_dtype``:
    the module's ``inv_freq`` (float32, or float64 after ``.double()``: the float32 ladder
    widened), which the angles take."""
    exponent = torch.arange(0, dim, 2, dtype=torch.int64, device=device).to(torch.float32) / dim
    inv_freq = (1.0 / (float(temperature) ** exponent)).to(freq_dtype)
    axis = torch.zeros(dim // 2, dtype=torch.long, device=device)
    axis[1 : row_col[0] * 3 : 3] = 1
    axis[2 : row_col[1] * 3 : 3] = 2
    rows, cols = (
        torch.arange(s, device=device, dtype=torch.int64).to(torch.float32) for s in shape
    )
    grid = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1).reshape(-1, 2)
    pos = torch.cat([torch.zeros_like(grid[:, :1]), grid], dim=-1).index_select(-1, axis)
    angles = pos * inv_freq
    return _layout(angles.sin(), True), _layout(angles.cos(), True)


def _replay(call: GridCall, kind: str) -> tuple[Any, Any]:
    """``posenc.rope_grid(..., preset=family, compat="timm")``: the tables of timm's module of
    this ``kind``, their float32 operations in timm's order, bit for bit on CPU torch.
    ``block_axes`` ``(0, 1)`` is timm's ``grid_indexing='ij'``, ``(1, 0)`` ``'xy'``; the layout
    ``rotate_half``. Returned as ``(cos, sin)`` (timm's ``get_embed`` is ``cat(sin, cos)``);
    NumPy out unless torch is asked for (a torch ``dtype``, ``device`` or ``like``)."""
    r = call.rotary
    indexing, rotate_half = _check_table(call.family, kind, r, call.blocks)
    check_form(call, FREE)
    offset: float | None = None
    refs: list[float] | None = None
    if kind == DINOV3:
        offset, mode = _dinov3_grid(call.family, call.dims, call.starts, call.steps)
    elif kind == PIXEL:
        _pixel_grid(call.family, call.dims, call.starts, call.steps)
    else:
        offset, refs = _cat_grid(call.family, kind, call.dims, call.starts, call.steps)

    def tables(work: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if kind == DINOV3:
            sin, cos = _dinov3_tables(
                call.dims, r.dim, r.base, offset or 0.0, mode, indexing, rotate_half, work
            )
        else:
            n = r.dim // 4
            bands = (
                pixel_bands(n, r.base, r.spacing == "pixel-linear")
                if kind == PIXEL
                else lang_bands(n, r.base)
            )
            sin, cos = _cat_tables(call.dims, bands, offset, refs, indexing, rotate_half, work)
        return cos, sin

    return compat_grid(tables, call)


def cat_ref(call: GridCall) -> tuple[Any, Any]:
    """``RotaryEmbeddingCat`` with a ``ref_feat_shape``: positions ``(i + offset) / feat *
    ref`` (EVA-02, Perception Encoder)."""
    return _replay(call, CAT_REF)


def cat(call: GridCall) -> tuple[Any, Any]:
    """``RotaryEmbeddingCat`` without a ``ref_feat_shape``: positions ``i + offset`` (RoPE-ViT,
    at any ``base`` and ``block_axes``, so also an EVA built without one)."""
    return _replay(call, CAT)


def pixel(call: GridCall) -> tuple[Any, Any]:
    """``RotaryEmbeddingCat`` / ``RotaryEmbedding`` with ``in_pixels=True``: pixel bands over
    ``linspace(-1, 1, n)``."""
    return _replay(call, PIXEL)


def dinov3(call: GridCall) -> tuple[Any, Any]:
    """``RotaryEmbeddingDinoV3``: periods over the patch centres."""
    return _replay(call, DINOV3)
