"""diffusers' own arithmetic for the tables its modules compute, kept apart from the exact
engine (``compat="original"`` of the stand-ins :func:`posenc.torch.patch` puts in diffusers
models).

Each function repeats diffusers' torch operations in their order and dtypes (0.3x and later,
``diffusers/models/embeddings.py``): float64 where diffusers computes in float64, except on the
devices without float64 (MPS, NPU, Neuron), where diffusers falls back to float32 and so does
this replay. Bit for bit with diffusers on CPU torch, checked against diffusers itself in the
tests. The timestep embedding (float32 throughout) is :mod:`posenc.compat.sinusoid`'s
``timestep``. These numbers are not exact (the 2D table's positions are rounded to float32
first): the stand-ins without ``compat`` are.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from posenc.compat.grid import PAIRS, Free, GridCall, check_form, compat_grid, references
from posenc.errors import PosencError

NO_FLOAT64 = frozenset({"mps", "npu", "neuron"})
"""The device types diffusers' ``maybe_adjust_dtype_for_device`` computes in float32 on."""


def wide_dtype(device: torch.device) -> torch.dtype:
    """float64, or float32 on a device without float64 (diffusers' rule)."""
    return torch.float32 if device.type in NO_FLOAT64 else torch.float64


def sincos_1d(dim: int, pos: torch.Tensor) -> torch.Tensor:
    """``get_1d_sincos_pos_embed_from_grid(dim, pos)``: ``[M, dim]`` ``[sin | cos]``."""
    omega = torch.arange(dim // 2, device=pos.device, dtype=wide_dtype(pos.device))
    omega /= dim / 2.0
    omega = 1.0 / 10000**omega
    out = torch.outer(pos.reshape(-1), omega)
    return torch.concat([torch.sin(out), torch.cos(out)], dim=1)


def sincos_2d(
    dim: int,
    grid_size: int | Sequence[int],
    *,
    base_size: float = 16,
    interpolation_scale: float = 1.0,
    device: Any = None,
) -> torch.Tensor:
    """``get_2d_sincos_pos_embed(dim, grid_size, base_size=…, interpolation_scale=…)
    .float()``: the ``[H * W, dim]`` float32 table ``PatchEmbed`` keeps (and recomputes for
    other sizes); ``grid_size`` is ``(H, W)`` or a side."""
    size = (grid_size, grid_size) if isinstance(grid_size, int) else tuple(grid_size)
    grid_h = (
        torch.arange(size[0], device=device, dtype=torch.float32)
        / (size[0] / base_size)
        / interpolation_scale
    )
    grid_w = (
        torch.arange(size[1], device=device, dtype=torch.float32)
        / (size[1] / base_size)
        / interpolation_scale
    )
    grid = torch.stack(torch.meshgrid(grid_w, grid_h, indexing="xy"), dim=0)
    grid = grid.reshape([2, 1, size[1], size[0]])
    emb_h = sincos_1d(dim // 2, grid[0])
    emb_w = sincos_1d(dim // 2, grid[1])
    return torch.concat([emb_h, emb_w], dim=1).float()


def rotary_1d(
    dim: int,
    pos: torch.Tensor,
    theta: float,
    *,
    freqs_dtype: torch.dtype = torch.float32,
    interleave: bool = True,
    linear_factor: float = 1.0,
    ntk_factor: float = 1.0,
    pairs: Mapping[int, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``get_1d_rotary_pos_embed(dim, pos, theta, use_real=True, linear_factor, ntk_factor,
    repeat_interleave_real=interleave, freqs_dtype)``: ``(cos, sin)`` ``[S, dim]`` float32,
    each frequency's column repeated in place (interleaved) or the table twice (halves).
    The angles take the dtype ``pos`` and ``freqs_dtype`` promote to. ``pairs``: frequencies
    set into the ladder before the product, as RIFLEx's copy of this function
    (``get_1d_rotary_pos_embed_riflex``) sets its pair ``k - 1``."""
    theta = theta * ntk_factor
    exponent = torch.arange(0, dim, 2, dtype=freqs_dtype, device=pos.device) / dim
    freqs = 1.0 / (theta**exponent) / linear_factor
    for j, value in (pairs or {}).items():
        freqs[j] = value
    freqs = torch.outer(pos, freqs)
    if freqs.device.type == "npu":
        freqs = freqs.float()
    if interleave:
        n = freqs.shape[1] * 2
        cos = freqs.cos().repeat_interleave(2, dim=1, output_size=n).float()
        return cos, freqs.sin().repeat_interleave(2, dim=1, output_size=n).float()
    return torch.cat([freqs.cos(), freqs.cos()], dim=-1).float(), torch.cat(
        [freqs.sin(), freqs.sin()], dim=-1
    ).float()


def axial_rope(
    ids: torch.Tensor, theta: float, axes_dim: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``FluxPosEmbed(theta, axes_dim)(ids)``: ``ids`` ``[N, n]`` (``n`` the axes used,
    ``len(axes_dim)`` at most), per axis ``get_1d_rotary_pos_embed(d, ids[:, i], theta,
    use_real=True, repeat_interleave_real=True, freqs_dtype=float64)``, concatenated:
    ``(cos, sin)``, ``[N, sum(axes_dim[:n])]`` float32."""
    pos = ids.float()
    wide = wide_dtype(ids.device)
    tables = [
        rotary_1d(axes_dim[i], pos[..., i], theta, freqs_dtype=wide) for i in range(ids.shape[-1])
    ]
    cos, sin = (torch.cat([t[j] for t in tables], dim=-1).to(ids.device) for j in (0, 1))
    return cos, sin


# ---------------------------------------------------------------------------------------------
# the grid families: per axis a 1-D table at diffusers' own positions, broadcast, concatenated


def _crop_linspace(start: float, step: float, n: int, device: Any) -> torch.Tensor:
    """diffusers' crop grid: ``linspace(start, stop * (n - 1) / n, n)`` in float32, with
    ``stop = start + n * step`` (``numpy.linspace(start, stop, n, endpoint=False)`` only when
    ``start`` is 0)."""
    stop = start + n * step
    return torch.linspace(start, stop * (n - 1) / n, n, device=device, dtype=torch.float32)


def _positions(call: GridCall, g: int, rows: str, device: Any) -> torch.Tensor:
    """The positions a family's own code builds for grid axis ``g``: ``"int64"`` or
    ``"float32"``, an ``arange`` (the family's tables hold 0, 1, 2, …); ``"crop"``, diffusers'
    crop ``linspace`` of the call's start and step; ``"linspace"``, that of 0, 1, 2, …."""
    n, start, step = call.dims[g], call.starts[g], call.steps[g]
    if rows == "crop":
        return _crop_linspace(start, step, n, device)
    if rows == "linspace":
        return _crop_linspace(0.0, 1.0, n, device)
    if (start, step) != (0.0, 1.0):
        raise PosencError(
            f"`compat='diffusers'`: {call.family}'s tables hold the positions 0, 1, 2, …; "
            f"start={start:g}, step={step:g} are not its"
        )
    dtype = torch.int64 if rows == "int64" else torch.float32
    return torch.arange(n, device=device, dtype=dtype)


COSMOS_FPS = 24
"""Cosmos's ``base_fps``: a video's frame ``i`` sits at ``i / fps * 24``."""


def _cosmos(
    dims: Sequence[int], r: Any, starts: Sequence[float], steps: Sequence[float], device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``CosmosRotaryPosEmbed(hidden_size, rope_scale=…)(latents, fps)``: float32 bases'
    powers, the positions of ``arange`` in float32 (frames ``/ fps * 24`` for a video), the
    ``[t | h | w]`` angles twice over (halves), then cos and sin. A step of 1 on the frames is
    an image (no ``fps``)."""
    if any(s0 != 0.0 for s0 in starts) or list(steps[1:]) != [1.0, 1.0]:
        raise PosencError(
            "`compat='diffusers'`: cosmos's positions are 0, 1, 2, … on every axis, frames "
            f"times 24 / fps; got start={list(starts)}, step={list(steps)}"
        )
    fps = None
    if steps[0] != 1.0:
        fps = COSMOS_FPS / steps[0]
        if abs(fps - round(fps)) > 1e-9 * fps or round(fps) <= 0:
            raise PosencError(
                f"`step`: cosmos's frames sit at i / fps * 24 for an integer fps; step[0] = "
                f"{steps[0]!r} is 24 / {fps!r}"
            )
        fps = round(fps)
    bases = r.bases
    freqs = []
    for d, theta in zip(r.axes_dim, bases, strict=True):
        exponent = torch.arange(0, d, 2, device=device, dtype=torch.float32)[: d // 2] / d
        freqs.append(1.0 / (theta**exponent))
    seq = torch.arange(max(dims), device=device, dtype=torch.float32)
    t = seq[: dims[0]] if fps is None else seq[: dims[0]] / fps * COSMOS_FPS
    f, h, w = dims
    emb_h = torch.outer(seq[:h], freqs[1])[None, :, None, :].repeat(f, 1, w, 1)
    emb_w = torch.outer(seq[:w], freqs[2])[None, None, :, :].repeat(f, h, 1, 1)
    emb_t = torch.outer(t, freqs[0])[:, None, None, :].repeat(1, h, w, 1)
    angles = torch.cat([emb_t, emb_h, emb_w] * 2, dim=-1).flatten(0, 2).float()
    return torch.cos(angles), torch.sin(angles)


def qwen_image_rows(pos: torch.Tensor, dim: int, theta: float) -> torch.Tensor:
    """``QwenEmbedRope.rope_params(index, dim, theta)``: complex64 ``[n, dim / 2]``, the
    integer positions times float32 inverse frequencies, then ``polar``."""
    inv = 1.0 / torch.pow(
        theta, torch.arange(0, dim, 2, device=pos.device).to(torch.float32).div(dim)
    )
    freqs = torch.outer(pos, inv)
    return torch.polar(torch.ones_like(freqs), freqs)


def _qwen_image(
    dims: Sequence[int], r: Any, starts: Sequence[float], steps: Sequence[float], device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``QwenEmbedRope``'s video table of one image: per axis the rows of its integer
    positions (within ``-4096 … 4095``: the preset's ``rows``), broadcast, concatenated, as
    cos and sin."""
    parts = []
    for a, (d, n, s0, st) in enumerate(zip(r.axes_dim, dims, starts, steps, strict=True)):
        if st != 1.0 or s0 != int(s0):
            raise PosencError(
                f"`compat='diffusers'`: qwen-image's tables hold the integers -4096 … 4095; "
                f"axis {a} asks for {s0:g} + i * {st:g}, i < {n}"
            )
        rows = qwen_image_rows(torch.arange(int(s0), int(s0) + n, device=device), d, r.base)
        shape = [1] * len(dims) + [d // 2]
        shape[a] = n
        parts.append(rows.reshape(shape).expand(*dims, d // 2))
    table = torch.cat(parts, dim=-1).reshape(math.prod(dims), -1)
    cos, sin = table.real, table.imag
    if r.layout == "interleaved":
        return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    if r.layout == "halves":
        return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
    return cos.contiguous(), sin.contiguous()


def _ltx(
    dims: Sequence[int], r: Any, starts: Sequence[float], steps: Sequence[float], device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``LTXVideoRotaryPosEmbed(dim)(latents, F, H, W, rope_interpolation_scale)`` for one
    video: float32 grids ``i * scale * 1 / base``, the float32 ladder ``theta ** linspace(0, 1,
    n) * pi / 2``, times ``2 c - 1``, ``(t, h, w)`` per frequency, pairs, ``dim % 6`` still
    channels first. ``scale`` is read back from ``step = 2 * scale / base``."""
    from fractions import Fraction

    from posenc.spec.families.ltx_video import LTX_BASES

    if any(s0 != -1.0 for s0 in starts):
        raise PosencError(
            f"`compat='diffusers'`: ltx-video's coordinates are 2c - 1 from c = 0 (start -1 "
            f"on every axis), got start={list(starts)}"
        )
    scales = [
        float(Fraction(st * b / 2).limit_denominator(1 << 20))
        for st, b in zip(steps, LTX_BASES, strict=True)
    ]
    grids = [
        torch.arange(n, dtype=torch.float32, device=device) * s * 1 / b
        for n, s, b in zip(dims, scales, LTX_BASES, strict=True)
    ]
    grid = torch.stack(torch.meshgrid(*grids, indexing="ij"), dim=0).flatten(1).transpose(0, 1)
    return ltx_tables(grid, r.dim, float(r.base))


def ltx_tables(
    grid: torch.Tensor,
    dim: int,
    theta: float,
    *,
    wide: torch.dtype = torch.float32,
    pairs: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """LTX-Video's tables of coordinates ``c`` ``[..., k]`` (float32, ``k`` axes): the ladder
    ``theta ** linspace(0, 1, n) * pi / 2`` (``n = dim // 2k``, in ``wide``: LTX-2's
    ``double_precision`` float64, then float32) times ``2 c - 1``, the ``k`` axes per
    frequency; ``pairs``: ``[..., dim]`` each angle twice (interleaved), ``dim % 2k`` still
    channels first; else ``[..., dim / 2]`` one column per angle after the still ones (LTX-2's
    ``split`` before its per-head reshape)."""
    k = grid.shape[-1]
    ladder = theta ** torch.linspace(
        math.log(1.0, theta), math.log(theta, theta), dim // (2 * k), device=grid.device, dtype=wide
    )
    ladder = (ladder * math.pi / 2.0).float()
    freqs = (ladder * (grid.unsqueeze(-1) * 2 - 1)).transpose(-1, -2).flatten(-2)
    cos, sin = freqs.cos(), freqs.sin()
    if pairs:
        cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    still = (dim if pairs else dim // 2) - cos.shape[-1]
    if still:
        cos = torch.cat([torch.ones_like(cos[..., :still]), cos], dim=-1)
        sin = torch.cat([torch.zeros_like(cos[..., :still]), sin], dim=-1)
    return cos, sin


def cogview4_tables(
    h: int, w: int, dim: int, theta: float, canvas: Sequence[int] | None, device: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``CogView4RotaryPosEmbed`` (``canvas``: its ``rope_axes_dim``, patch ``i`` of ``n`` at
    row ``i * canvas // n``) or ``GlmImageRotaryPosEmbed`` (``canvas`` None: row ``i``):
    float32 ``[row | column]`` angles, twice over (halves), cos and sin, ``[h * w, dim]``."""
    half = dim // 2
    inv = 1.0 / (
        theta ** (torch.arange(0, half, 2, dtype=torch.float32)[: half // 2].float() / half)
    )
    parts = []
    for n, side in zip((h, w), canvas or (None, None), strict=True):
        idx = torch.arange(n) if side is None else torch.arange(n) * side // n
        parts.append(torch.outer(idx, inv))
    freqs_h = parts[0].unsqueeze(1).expand(h, w, -1)
    freqs_w = parts[1].unsqueeze(0).expand(h, w, -1)
    freqs = torch.cat([freqs_h, freqs_w], dim=-1)
    freqs = torch.cat([freqs, freqs], dim=-1).reshape(h * w, -1)
    return freqs.cos().to(device), freqs.sin().to(device)


def _cogview4(
    dims: Sequence[int], r: Any, starts: Sequence[float], steps: Sequence[float], device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """GLM-Image's table (positions 0, 1, 2, … on both axes)."""
    if any(s0 != 0.0 for s0 in starts) or any(st != 1.0 for st in steps):
        raise PosencError(
            f"`compat='diffusers'`: cogview4's grid is 0, 1, 2, … on both axes (CogView4's "
            f"canvas positions: its patch stand-in), got start={list(starts)}, "
            f"step={list(steps)}"
        )
    return cogview4_tables(dims[0], dims[1], r.dim, float(r.base), None, device)


Replay = Callable[[GridCall, torch.device], tuple[torch.Tensor, torch.Tensor]]


def _replay(
    call: GridCall, tables: Replay, free: Free | None = None, takes: tuple[str, ...] = ()
) -> tuple[Any, Any]:
    """One family's replay: the call's form checked against the family's own (``free``: the
    keywords the replay takes from the call, e.g. the module's own widths; ``takes``: the
    forms of a rule past the trained size its references apply), then its tables
    ``tables(call, device)``, NumPy out unless torch is asked for (a torch ``dtype``,
    ``device`` or ``like``)."""
    check_form(call, free, takes)
    return compat_grid(lambda work: tables(call, work), call)


MODULE_WIDTHS: Free = {"axes_dim": None}
"""A module's own block widths, which its replay takes from the call."""


RIFLEX = ("pairs",)
"""What RIFLEx's references change in the 1-D function: its pair ``k - 1``."""


def wan(call: GridCall) -> tuple[Any, Any]:
    """``WanRotaryPosEmbed``: per block ``get_1d_rotary_pos_embed`` of the integer rows
    (``0 … max_seq_len - 1``) in float64 (float32 on a host with MPS: ``"diffusers-mps"``),
    broadcast to the grid and concatenated; RIFLEx as kijai's wrapper (the float64 pair)."""
    wide = torch.float64 if call.compat == "diffusers" else torch.float32
    tables: Replay = lambda c, work: _per_axis(c, work, ("int64",), wide)  # noqa: E731
    return _replay(call, tables, MODULE_WIDTHS, RIFLEX)


def hunyuan_video(call: GridCall) -> tuple[Any, Any]:
    """``HunyuanVideoRotaryPosEmbed``: float32 ``arange`` positions, float32 throughout;
    RIFLEx as thu-ml's ``HunyuanVideoRotaryPosEmbedRifleX``."""
    tables: Replay = lambda c, work: _per_axis(c, work, ("float32",))  # noqa: E731
    return _replay(call, tables, MODULE_WIDTHS, RIFLEX)


def cogvideox(call: GridCall) -> tuple[Any, Any]:
    """``get_3d_rotary_pos_embed``: integer ``slice`` grids (float32 ``arange``), or with
    ``crop`` the ``linspace`` grids of the crop (the time axis ``linspace`` of its frames);
    RIFLEx as thu-ml's ``get_3d_rotary_pos_embed_riflex``."""
    rows = ("linspace", "crop") if call.cropped else ("float32",)
    return _replay(call, lambda c, work: _per_axis(c, work, rows), MODULE_WIDTHS, RIFLEX)


def hunyuan_dit(call: GridCall) -> tuple[Any, Any]:
    """``get_2d_rotary_pos_embed``: the crop ``linspace`` grids, the column block first."""
    return _replay(call, lambda c, work: _per_axis(c, work, ("crop",)), MODULE_WIDTHS)


def cosmos(call: GridCall) -> tuple[Any, Any]:
    """``CosmosRotaryPosEmbed``: float32, per-axis bases, halves; ``step[0] = 24 / fps``. A
    rule's new base on an axis (``"ntk-aware"``: Cosmos' ``rope_scale``) is that axis's."""
    free: Free = {**MODULE_WIDTHS, "axes_base": None}
    bases = [ref.base for ref in references(call, ("base",))]
    own = call.rotary.bases
    rotary = dataclasses.replace(
        call.rotary,
        axes_base=tuple(b if b is not None else o for b, o in zip(bases, own, strict=True)),
    )
    tables: Replay = lambda c, work: _cosmos(c.dims, rotary, c.starts, c.steps, work)  # noqa: E731
    return _replay(call, tables, free, ("base",))


def qwen_image(call: GridCall) -> tuple[Any, Any]:
    """``QwenEmbedRope``: complex64 rows of integer positions, centred or not, in any pairs'
    layout."""
    free: Free = {**MODULE_WIDTHS, "layout": PAIRS}
    return _replay(
        call, lambda c, work: _qwen_image(c.dims, c.rotary, c.starts, c.steps, work), free
    )


def ltx_video(call: GridCall) -> tuple[Any, Any]:
    """``LTXVideoRotaryPosEmbed`` of one video at the pipeline's scales."""
    return _replay(call, lambda c, work: _ltx(c.dims, c.rotary, c.starts, c.steps, work))


def cogview4(call: GridCall) -> tuple[Any, Any]:
    """``GlmImageRotaryPosEmbed``'s table (CogView4's canvas positions: its patch stand-in)."""
    return _replay(call, lambda c, work: _cogview4(c.dims, c.rotary, c.starts, c.steps, work))


def _per_axis(
    call: GridCall, work: torch.device, rows: Sequence[str], wide: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Wan's, HunyuanVideo's, CogVideoX's and HunyuanDiT's tables: per block
    ``get_1d_rotary_pos_embed`` at the family's own positions (:func:`_positions`: ``rows``,
    the first for the first grid axis, the last for the others), broadcast, concatenated."""
    r, dims = call.rotary, call.dims
    k = len(dims)
    parts_cos, parts_sin = [], []
    refs = references(call, RIFLEX)
    for d, g, ref in zip(r.axes_dim, call.blocks, refs, strict=True):
        pos = _positions(call, g, rows[0] if g == 0 else rows[-1], work)
        cos, sin = rotary_1d(
            d,
            pos,
            float(r.base),
            freqs_dtype=wide,
            interleave=r.layout == "interleaved",
            pairs=ref.pairs,
        )
        shape = [1] * k + [d]
        shape[g] = dims[g]
        full = [*dims, d]
        parts_cos.append(cos.reshape(shape).expand(full))
        parts_sin.append(sin.reshape(shape).expand(full))
    n = math.prod(dims)
    return torch.cat(parts_cos, dim=-1).reshape(n, -1), torch.cat(parts_sin, dim=-1).reshape(n, -1)
