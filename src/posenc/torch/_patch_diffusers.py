"""The diffusers recognisers of :func:`posenc.torch.patch`, and the stand-ins they build.

Each recogniser knows one kind of diffusers module by its class name and module path
(diffusers is never imported here): ``Timesteps`` (the timestep embedding of UNets, DiT,
PixArt, SD3, FLUX), AnimateDiff's ``SinusoidalPositionalEmbedding``, ``PatchEmbed``'s fixed 2D
sin-cos table (DiT, PixArt, SD3's cropped one) and FLUX's axial rotary ``FluxPosEmbed`` (and its
copies). The stand-ins take the original's
call, attributes and submodules, hold no table tensor (the original's keys are written from
them on save), and route the original's checkpoint key (SD3's
``pos_embed.pos_embed``) to posenc's checkpoint check. ``compat="original"`` replays
diffusers' own arithmetic (:mod:`posenc.compat.diffusers`, :mod:`posenc.compat.sinusoid`).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from posenc.compat import diffusers as original
from posenc.errors import PosencError
from posenc.spec.families import flux
from posenc.spec.presets.sinusoidal import DIFFUSERS_2D, VASWANI
from posenc.torch import (
    _patch_diffusers_gathered,
    _patch_diffusers_halves,
    _patch_diffusers_ids,
    _patch_diffusers_kandinsky,
    _patch_diffusers_ltx2,
    _patch_diffusers_rope,
    _patch_diffusers_video,
)
from posenc.torch import _patch_transformers_tables as fixed_tables
from posenc.torch._checkpoint import _problem, check_saved_table
from posenc.torch._ids_rope import AxialRope
from posenc.torch._patching import (
    Found,
    Recogniser,
    TableParameter,
    by_class,
    from_library,
    holds,
    learned,
    left_alone,
    unlike,
    unreproduced,
)
from posenc.torch.diffusion import Timesteps
from posenc.torch.vision import GridEncoding


def _mode(compat: str | None) -> str:
    return "" if compat is None else f", compat={compat!r}"


# ---------------------------------------------------------------------------------------------
# the timestep embedding


class DiffusersTimesteps(Timesteps):
    """The stand-in for diffusers' ``Timesteps(num_channels, flip_sin_to_cos,
    downscale_freq_shift, scale)``: the same call and attributes, and, as diffusers' (which
    holds no tensor), float32 output whatever the model is moved to."""

    def __init__(
        self,
        num_channels: int,
        flip_sin_to_cos: bool,
        downscale_freq_shift: float,
        scale: float = 1,
        *,
        compat: str | None = None,
    ) -> None:
        super().__init__(
            num_channels,
            flip_sin_to_cos,
            downscale_freq_shift,
            scale,
            compat=compat,
            dtype=torch.float32,
        )
        self.num_channels, self.flip_sin_to_cos = num_channels, flip_sin_to_cos
        self.downscale_freq_shift, self.scale = downscale_freq_shift, scale

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> DiffusersTimesteps:
        super()._apply(fn, recurse)
        self._dtype = torch.float32  # .to(dtype) leaves diffusers' module float32
        return self


@by_class("diffusers", "SinusoidalPositionalEmbedding")
def sequence_table(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """``SinusoidalPositionalEmbedding`` (AnimateDiff's motion modules, DreamLite): a fixed
    ``[1, rows, d]`` buffer ``pe`` of the interleaved ``vaswani`` sinusoid, added to ``x``."""
    name = type(module).__name__
    saved = module._buffers.get("pe")
    takes = tuple(inspect.signature(type(module).forward).parameters)[1:]
    if not (
        isinstance(saved, Tensor) and saved.ndim == 3 and saved.shape[0] == 1 and takes == ("x",)
    ):
        return unlike(name, "diffusers")
    return fixed_tables.one_d(name, saved, fixed_tables.SequencePositions, VASWANI.name)


@by_class("diffusers", "Timesteps")
def timesteps(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """diffusers' ``Timesteps``, measured at 8000 timesteps over ``[0, 1000)`` (float32), or
    over ``[0, 1)`` where its ``scale`` turns flow sigmas into timesteps (``scale >= 1000``)."""
    name = type(module).__name__
    m: Any = module
    try:
        dim, flip = int(m.num_channels), bool(m.flip_sin_to_cos)
        shift, scale = m.downscale_freq_shift, m.scale
    except (AttributeError, TypeError, ValueError):
        return unlike("Timesteps", "diffusers")

    def build(compat: str | None) -> nn.Module | str:
        try:
            return DiffusersTimesteps(dim, flip, shift, scale, compat=compat)
        except PosencError as err:
            return f"not covered: {err}"

    # the timesteps the model is fed: 0 … 1000, or flow sigmas 0 … 1 where it scales them
    # by 1000 itself (Qwen-Image, SANA)
    top = 1.0 if float(scale) >= 1000 else 1000.0
    t = torch.arange(8000, dtype=torch.float32) * (top / 8000)
    return Found(
        name,
        f"Timesteps({dim}, flip_sin_to_cos={flip}, downscale_freq_shift={shift}, scale={scale})",
        build,
        numbers=lambda: [module(t)],
        probe=lambda new: [new(t)],
        note=f"max diff over timesteps 0 … {float(t[-1]):g} (8000 steps)",
    )


# ---------------------------------------------------------------------------------------------
# PatchEmbed's 2D sin-cos table


def _check_pos_embed(module: Any, state: dict[str, Any], prefix: str, *args: Any) -> None:
    """SD3's persistent ``pos_embed`` key: checked as posenc's modules check their tables."""
    check_saved_table(module.pos_embed, state, prefix + "pos_embed")


class SinCosPatchEmbed(nn.Module):
    """The stand-in for diffusers' ``PatchEmbed`` with its fixed 2D sin-cos table: the
    original's ``proj`` (and ``norm``) and forward, with ``pos_embed`` (``[1, rows, d]``, as
    the buffer read: slicing, ``.shape``, arithmetic) from ``GridEncoding(d,
    preset="diffusers-2d")``, following ``.to()``, saved nowhere. Other image sizes (which
    diffusers recomputes) and SD3's crops come from the same encoding; ``compat="original"``:
    diffusers' own arithmetic for both."""

    def __init__(self, original_module: nn.Module, compat: str | None) -> None:
        super().__init__()
        o: Any = original_module
        saved: Tensor = o.pos_embed
        self.flatten, self.layer_norm, self.patch_size = o.flatten, o.layer_norm, o.patch_size
        self.height, self.width, self.base_size = o.height, o.width, o.base_size
        self.interpolation_scale: Any = o.interpolation_scale
        self.pos_embed_max_size: int | None = o.pos_embed_max_size
        self.proj, self.norm = o.proj, o.norm
        self.compat = compat
        self.dim = int(saved.shape[-1])
        self.side = self.pos_embed_max_size or math.isqrt(saved.shape[-2])
        self.grid = GridEncoding(
            self.dim,
            preset=DIFFUSERS_2D.name,
            base_size=self.base_size,
            interpolation_scale=self.interpolation_scale,
            pos_embed_max_size=self.pos_embed_max_size,
        )
        self.pos_embed = TableParameter(
            self._stored,
            self.grid._expected_table,
            self.grid._largest_position,
            dtype=saved.dtype,
            device=saved.device,
            description=f"[1, {self.side}², {self.dim}]{_mode(compat)}",
        )
        self._register_load_state_dict_pre_hook(_check_pos_embed, with_module=True)  # type: ignore[no-untyped-call]

    def _stored(self, dtype: torch.dtype, device: Any) -> Tensor:
        """The table ``pos_embed`` holds (a method, not a closure: copies and pickles follow)."""
        return self._table((self.side, self.side), dtype, device, "cpu")

    def _table(
        self, grid: tuple[int, int], dtype: torch.dtype, device: Any, where: Any = None
    ) -> Tensor:
        """``[1, H * W, d]``: exact, or diffusers' float32 table computed ``where`` it is (on
        the CPU for the stored table, built before the model moved), then in ``dtype``."""
        if self.compat is None:
            return self.grid.encoding(grid, dtype=dtype, device=device)[None]
        table = original.sincos_2d(
            self.dim,
            grid,
            base_size=self.base_size,
            interpolation_scale=self.interpolation_scale,
            device=where or device,
        )
        return table.to(device=device, dtype=dtype)[None]

    def cropped_pos_embed(self, height: int, width: int) -> Tensor:
        """The centred ``height / p x width / p`` crop of the table (SD3), as diffusers'."""
        m = self.pos_embed_max_size
        if m is None:
            raise ValueError("`pos_embed_max_size` must be set for cropping.")
        height, width = height // self.patch_size, width // self.patch_size
        if height > m:
            raise ValueError(f"Height ({height}) cannot be greater than `pos_embed_max_size`: {m}.")
        if width > m:
            raise ValueError(f"Width ({width}) cannot be greater than `pos_embed_max_size`: {m}.")
        top, left = (m - height) // 2, (m - width) // 2
        table = self.pos_embed.table.reshape(1, m, m, -1)
        table = table[:, top : top + height, left : left + width]
        return table.reshape(1, -1, table.shape[-1])

    def forward(self, latent: Tensor) -> Tensor:
        """``[b, C, H, W]`` latents to ``[b, H/p * W/p, d]`` tokens plus their encoding."""
        if self.pos_embed_max_size is not None:
            height, width = latent.shape[-2:]
        else:
            height = latent.shape[-2] // self.patch_size
            width = latent.shape[-1] // self.patch_size
        latent = self.proj(latent)
        if self.flatten:
            latent = latent.flatten(2).transpose(1, 2)
        if self.layer_norm:
            latent = self.norm(latent)
        if self.pos_embed_max_size:
            pos_embed = self.cropped_pos_embed(height, width)
        elif self.height != height or self.width != width:  # diffusers recomputes, float32
            wide = torch.promote_types(latent.dtype, torch.float32)
            pos_embed = self._table(
                (height, width), torch.float32 if self.compat else wide, latent.device
            )
        else:
            pos_embed = self.pos_embed.table
        out: Tensor = (latent + pos_embed).to(latent.dtype)
        return out

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        return f"{self.grid.extra_repr()}, grid=({self.side}, {self.side}){_mode(self.compat)}"


def _table_of(stand_in: Any) -> Tensor:
    table: Tensor = stand_in.pos_embed.table
    return table


@by_class("diffusers", "PatchEmbed")
def patch_embed(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """diffusers' ``PatchEmbed`` (DiT, PixArt, SD3) holding its fixed 2D sin-cos table."""
    name = type(module).__name__
    if type(module).__module__ != "diffusers.models.embeddings":  # a copy: another class
        return None
    saved = getattr(module, "pos_embed", None)
    if saved is None:  # said here: transformers' `learned` would call it learned
        return left_alone(
            name,
            "no positional table (pos_embed_type=None): the model's "
            "positions, if any, are in another module",
        )
    if isinstance(saved, nn.Parameter) and saved.requires_grad:
        return left_alone("Parameter", learned(saved), "pos_embed")
    m: Any = module
    if isinstance(saved, Tensor) and saved.is_meta:
        return left_alone(name, "its table is on the meta device: load the model first")
    if not isinstance(saved, Tensor) or saved.ndim != 3 or saved.shape[-1] % 4:
        return left_alone(
            name, "not covered: a pos_embed that is not a [1, rows, d % 4 == 0] table"
        )
    side = m.pos_embed_max_size or math.isqrt(saved.shape[1])
    if side * side != saved.shape[1]:
        return left_alone(name, "not covered: its table is not a square grid")

    def build(compat: str | None) -> nn.Module:
        return SinCosPatchEmbed(module, compat)

    exact = SinCosPatchEmbed(module, None)
    problem = _problem(exact.pos_embed, saved.detach().reshape(-1, saved.shape[-1]))
    if problem is not None:
        return left_alone(
            name, "a fixed table that is not the diffusers-2d sinusoid it should be: left alone"
        )
    crop = "" if m.pos_embed_max_size is None else f", pos_embed_max_size={side}"
    return Found(
        name,
        f"GridEncoding({exact.dim}, preset='diffusers-2d', base_size={m.base_size}, "
        f"interpolation_scale={m.interpolation_scale}{crop})",
        build,
        numbers=lambda: [saved.detach()],
        probe=lambda new: [_table_of(new)],
        note=f"max diff over its {side} x {side} grid",
    )


# ---------------------------------------------------------------------------------------------
# FLUX's axial rotary tables


@by_class(flux.IDS)
def flux_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """FLUX's ``FluxPosEmbed`` (and its copies), measured at ids ``0 … 1023`` on every axis."""
    return _flux_found(module, every_axis=False)


@by_class(flux.EVERY_AXIS)
def flux2_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """FLUX.2's and FLUX.3's, which read every block of ``axes_dim``: the same."""
    return _flux_found(module, every_axis=True)


def _flux_found(module: nn.Module, *, every_axis: bool) -> Found | None:
    name = type(module).__name__
    m: Any = module
    try:
        theta, axes = m.theta, tuple(int(d) for d in m.axes_dim)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    trained = name == flux.FLUX1_CLASS  # FLUX.1's training, its preset's

    def build(compat: str | None) -> nn.Module | str:
        try:
            preset = flux.FLUX.name if trained else None
            return AxialRope(theta, axes, every_axis, compat, preset)
        except PosencError as err:
            return f"not covered: {err}"

    ids = torch.arange(1024, dtype=torch.float32)[:, None].expand(-1, len(axes))
    return Found(
        name,
        f"rope(axes_dim={axes}, base={theta}, layout='interleaved')",
        build,
        numbers=lambda: list(module(ids)),
        probe=lambda new: list(new(ids)),
        note="max diff over ids 0 … 1023 on every axis",
    )


# ---------------------------------------------------------------------------------------------
# what is reported and left alone

TABLE_NAMES = (
    "pos_embed",
    "pos_embedding",
    "positional_embedding",
    "position_embedding",
    "position_embeddings",
    "pe",
    "temp_pos_embed",  # Latte's
    "decoder_pos_embed",  # the RAE autoencoder's
    "learnable_pos_embed",  # Cosmos'
)
_ROTARY = re.compile(r"(Rotary|Rope|RoPE|MRoPE).*(Embed|$)|PosEmbed$|EmbedND\d*$|RoPE\d+D$")


def others(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """A diffusers module with a positional table under one of ``TABLE_NAMES`` (learned: a
    parameter, trainable or frozen for inference; fixed: a buffer, which posenc does not
    replace yet: CogVideoX's 3D table, OmniGen's patch table), a rotary module posenc has no
    stand-in for, or another module whose class says it holds positions: reported, left
    alone."""
    if not from_library(module, "diffusers"):
        return None
    for key in TABLE_NAMES:
        t = module._parameters.get(key, module._buffers.get(key))
        if isinstance(t, Tensor):
            if isinstance(t, nn.Parameter):  # diffusers keeps its fixed tables in buffers
                return left_alone("Parameter", learned(t), key)
            held = holds(t)
            return left_alone(
                "buffer",
                f"not covered yet: {type(module).__name__}'s fixed "
                f"table{f' ({held})' if held else ''}",
                key,
            )
    name = type(module).__name__
    trainable = any(p.requires_grad for p in module.parameters())
    if _ROTARY.search(name) and not trainable:
        return left_alone(name, "not covered yet: posenc has no stand-in for this module")
    if _POSITIONAL.search(name):  # Cosmos' learnable table, LongCat-AudioDiT's sinusoid
        return unreproduced(module, "not covered yet: posenc has no stand-in for this module")
    return None


_POSITIONAL = re.compile(r"Pos(ition(al)?)?Embed|Sinus")
"""Any other positional module of diffusers, by its class name."""


RECOGNISERS: tuple[Recogniser, ...] = (
    sequence_table,
    timesteps,
    patch_embed,
    flux_rope,
    flux2_rope,
    *_patch_diffusers_rope.RECOGNISERS,
    *_patch_diffusers_ids.RECOGNISERS,
    *_patch_diffusers_video.RECOGNISERS,
    *_patch_diffusers_gathered.RECOGNISERS,
    *_patch_diffusers_ltx2.RECOGNISERS,
    *_patch_diffusers_kandinsky.RECOGNISERS,
    *_patch_diffusers_halves.RECOGNISERS,
    others,
)
"""The diffusers recognisers: those by class found by the index, those by form asked in this
order (the catch-all ``others`` last)."""
