"""The stand-ins :func:`posenc.torch.patch` puts in place of diffusers' rotary modules of the
families that share Wan's, HunyuanVideo's, CogVideoX's or Qwen-Image's formula (the recognisers
are in ``_patch_diffusers_video.py``): each called as its original is, returning what its model
consumes, exact (posenc's tables: float64 angles rounded once) or, with ``compat``, diffusers'
own arithmetic (:mod:`posenc.compat.diffusers_video`). Nothing is kept in the state dict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from posenc.api.rope import rope
from posenc.api.rope_grid import rope_grid
from posenc.compat import diffusers_video as original
from posenc.compat.diffusers import wide_dtype
from posenc.errors import PosencError
from posenc.evaluate.positions import grid_shape
from posenc.spec.families.base import crop_region
from posenc.spec.families.cogvideox import COGVIDEOX
from posenc.spec.families.hunyuan_video import HUNYUAN_VIDEO
from posenc.spec.families.wan import WAN
from posenc.torch._diffusers_rope import QwenImageRope, VideoRope, WanRope


def _axis_tables(
    positions: Sequence[Tensor], axes_dim: tuple[int, ...], base: float
) -> tuple[Tensor, Tensor]:
    """Exact tables of the grid of ``positions`` (one float64 tensor per axis, first axis
    outermost): per axis ``posenc.rope`` of its positions (its block, pairs), broadcast over
    the grid and concatenated, float32 ``[S, sum(axes_dim)]``."""
    dims = [int(p.shape[0]) for p in positions]
    parts: list[list[Tensor]] = [[], []]
    for a, (d, pos) in enumerate(zip(axes_dim, positions, strict=True)):
        block = rope(
            pos[:, None], d, base=base, axes_dim=(d,), layout="interleaved", dtype=torch.float32
        )
        shape = [1] * len(dims) + [d]
        shape[a] = dims[a]
        for part, t in zip(parts, block, strict=True):
            part.append(t.reshape(shape).expand(*dims, d))
    n = math.prod(dims)
    cos, sin = (torch.cat(part, dim=-1).reshape(n, -1) for part in parts)
    return cos, sin


class HunyuanGridRope(VideoRope):
    """The stand-in for diffusers' ``HunyuanImageRotaryPosEmbed`` (HunyuanImage-2.1) and
    ``MotifVideoRotaryPosEmbed`` (Motif-Video, ``wide=True``: float64 frequencies where the
    device has them): ``forward(hidden_states)`` with latents ``[B, C, H, W]`` (two blocks) or
    ``[B, C, F, H, W]`` (three), ``(cos, sin)`` ``[S, D]`` float32 on the latents' device."""

    def __init__(
        self,
        preset: str,
        patch: tuple[int, ...],
        axes_dim: tuple[int, ...],
        theta: float,
        *,
        wide: bool = False,
        compat: str | None = None,
    ) -> None:
        if len(patch) != len(axes_dim):
            raise PosencError(
                f"`patch_size` {patch} and `rope_dim` {axes_dim} must have the same length "
                "(HunyuanImageRotaryPosEmbed's rule)"
            )
        super().__init__(
            preset,
            sum(axes_dim),
            (1, 1, 1),
            compat=compat,
            axes_dim=axes_dim,
            base=theta,
        )
        self.patch_size, self.wide = tuple(patch), wide

    def trial(self, grid: tuple[int, ...]) -> None:
        if self.wide:
            raise PosencError(
                "MotifVideoRotaryPosEmbed: posenc has no record of Motif-Video's training (its "
                "size, its timesteps) nor a reference of a rule in its float64 arithmetic"
            )
        super().trial(grid)

    def grid(self, hidden_states: Tensor) -> tuple[int, ...]:  # type: ignore[override]
        """The patched grid of the latents (the last two or three axes)."""
        k = len(self.patch_size)
        if hidden_states.ndim != k + 2:
            raise PosencError(
                f"`hidden_states` must be [B, C, {', '.join('FHW'[3 - k :])}] for rope_dim "
                f"{self.rotary.axes_dim}, got shape {tuple(hidden_states.shape)}"
            )
        return tuple(n // p for n, p in zip(hidden_states.shape[2:], self.patch_size, strict=True))

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """``(cos, sin)`` of every token of the latents' patched grid."""
        if self.compat is None or self.scaling is not None:
            return super().forward(hidden_states)
        device = hidden_states.device
        pos = [
            torch.arange(n, device=device, dtype=torch.float32) for n in self.grid(hidden_states)
        ]
        wide = wide_dtype(device) if self.wide else torch.float32
        r = self.rotary
        return original.grid_tables(pos, r.axes_dim or (), float(r.base), wide=wide)


class FramepackRope(nn.Module):
    """The stand-in for diffusers' ``HunyuanVideoFramepackRotaryPosEmbed``:
    ``forward(frame_indices, height, width, device)`` -> ``(cos, sin)`` ``[F * H' * W', D]``
    float32, the frames at the given indices, rows and columns ``0 … n - 1`` of the patched
    grid (HunyuanVideo's tables, ``preset="hunyuan-video"``)."""

    def __init__(
        self,
        patch: int,
        patch_t: int,
        axes_dim: tuple[int, ...],
        theta: float,
        compat: str | None = None,
    ) -> None:
        super().__init__()
        self.patch_size, self.patch_size_t = patch, patch_t
        self.axes_dim, self.theta, self.compat = tuple(axes_dim), theta, compat
        rope_grid((1, 1, 1), sum(axes_dim), axes_dim=axes_dim, base=theta)  # refused now if not

    def forward(
        self, frame_indices: Tensor, height: int, width: int, device: Any
    ) -> tuple[Tensor, Tensor]:
        """The tables of the frames ``frame_indices`` of a ``height x width`` latent grid."""
        h, w = height // self.patch_size, width // self.patch_size
        if self.compat is not None:
            pos = [
                frame_indices.to(device=device, dtype=torch.float32),
                torch.arange(h, device=device, dtype=torch.float32),
                torch.arange(w, device=device, dtype=torch.float32),
            ]
            return original.grid_tables(pos, self.axes_dim, self.theta)
        frames = frame_indices.to(device=device, dtype=torch.float32).double()  # as diffusers
        pos = [
            frames,
            torch.arange(h, device=device, dtype=torch.float64),
            torch.arange(w, device=device, dtype=torch.float64),
        ]
        return _axis_tables(pos, self.axes_dim, self.theta)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return (
            f"{sum(self.axes_dim)}, preset={HUNYUAN_VIDEO.name!r}, axes_dim={self.axes_dim}{mode}"
        )


class ChronoEditRope(WanRope):
    """The stand-in for diffusers' ``ChronoEditRotaryPosEmbed``: Wan's tables (``[1, S, 1,
    D]`` in the module's dtype), except that latents of 2 frames (an edit: input and output)
    take frame rows ``0`` and ``temporal_skip_len - 1``."""

    def __init__(
        self,
        dim: int,
        patch: tuple[int, int, int],
        rows: int,
        skip: int,
        *,
        axes_dim: tuple[int, ...],
        base: float = 10000.0,
        compat: str | None = None,
        device: Any = None,
    ) -> None:
        super().__init__(
            WAN.name,
            dim,
            patch,
            compat=compat,
            axes_dim=axes_dim,
            base=base,
            device=device,
        )
        self.rows, self.temporal_skip_len = rows, skip

    def trial(self, grid: tuple[int, ...]) -> None:
        if self.compat is not None:
            raise PosencError(
                "ChronoEditRotaryPosEmbed: no reference applies a rule past the trained size to "
                "its edit frames; patch without compat for the rule's exact tables"
            )
        super().trial(grid)

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """``(cos, sin)`` of every token of the latents' patched grid."""
        if hidden_states.shape[2] != 2:
            return super().forward(hidden_states)
        f, h, w = self.grid(hidden_states)
        if f != 2:
            raise PosencError(
                f"ChronoEditRotaryPosEmbed reads 2 frame rows for 2 latent frames: the temporal "
                f"patch {self.patch_size[0]} gives {f}"
            )
        last = min(self.temporal_skip_len, self.rows) - 1  # diffusers' [:skip][[0, -1]]
        r = self.rotary
        if self.scaling is not None:
            step = (float(last), 1.0, 1.0)
            make = partial(self.grid_tables, (2, h, w), step=step)
            cos, sin = self.tables((2, h, w), step, make)
        elif self.compat is not None:
            wide = torch.float64 if self.compat == "diffusers" else torch.float32
            dev = self._device
            pos = [
                torch.tensor([0, last], device=dev),
                torch.arange(h, device=dev),
                torch.arange(w, device=dev),
            ]
            cos, sin = original.grid_tables(pos, r.axes_dim or (), float(r.base), wide=wide)
            cos, sin = cos.to(self._dtype), sin.to(self._dtype)  # the buffers .to() cast
        else:
            cos, sin = rope_grid(
                (2, h, w),
                self.dim,
                preset=WAN.name,
                axes_dim=r.axes_dim,
                base=r.base,
                step=(float(last), 1.0, 1.0),
                dtype=self._dtype,
                device=self._device,
            )
        return cos[None, :, None], sin[None, :, None]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, temporal_skip_len={self.temporal_skip_len}"


EASYANIMATE_BASE = (60, 90)
"""EasyAnimate's base canvas in latent pixels (height, width): its grid is cropped into
``(60 / p) x (90 / p)`` patches."""


def easyanimate_crop(h: int, w: int, patch: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """``EasyAnimateRotaryPosEmbed.get_resize_crop_region_for_grid``: the ``h x w`` patch grid
    resized into the base canvas (the longer side fitted, rounded) and centred:
    ``((top, left), (bottom, right))``."""
    th, tw = (n // patch for n in EASYANIMATE_BASE)
    (top, left), (bottom, right) = crop_region((h, w), (th, tw))
    return (top, left), (bottom, right)


class EasyAnimateRope(nn.Module):
    """The stand-in for diffusers' ``EasyAnimateRotaryPosEmbed``: ``forward(hidden_states)``
    with latents ``[B, C, F, H, W]`` -> ``(cos, sin)`` ``[F * H' * W', D]`` float32 on the
    CPU, CogVideoX's tables (``preset="cogvideox"``) on the crop of the base canvas
    (:func:`easyanimate_crop`) at diffusers' own positions: ``linspace(top, bottom * (n - 1) /
    n, n)``, the frames ``0 … F - 1``."""

    def __init__(self, dim: int, patch: int, compat: str | None = None) -> None:
        super().__init__()
        self.dim, self.patch_size, self.compat = dim, patch, compat
        rope_grid((1, 1, 1), dim, preset=COGVIDEOX.name)  # refused now if it cannot
        self._axes = (dim // 4, dim // 8 * 3, dim // 8 * 3)

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Tensor]:
        """The tables of the latents' patched, cropped grid."""
        f, h, w = hidden_states.shape[2], *(n // self.patch_size for n in hidden_states.shape[3:])
        (top, left), (bottom, right) = easyanimate_crop(h, w, self.patch_size)
        if self.compat is not None:
            pos = [
                torch.linspace(0, f * (f - 1) / f, f, dtype=torch.float32),
                torch.linspace(top, bottom * (h - 1) / h, h, dtype=torch.float32),
                torch.linspace(left, right * (w - 1) / w, w, dtype=torch.float32),
            ]
            return original.grid_tables(pos, self._axes, 10000.0)
        steps = [1.0] + [
            (b * (n - 1) / n - a) / (n - 1) if n > 1 else 1.0
            for a, b, n in ((top, bottom, h), (left, right, w))
        ]
        cos, sin = rope_grid(
            (f, h, w),
            self.dim,
            preset=COGVIDEOX.name,
            start=(0, top, left),
            step=steps,
            dtype=torch.float32,
        )
        return cos, sin

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{self.dim}, preset={COGVIDEOX.name!r}, patch_size={self.patch_size}{mode}"


class QwenVariantRope(QwenImageRope):
    """The stand-in for diffusers' ``QwenEmbedLayer3DRope`` (``variant="layered"``: the last
    image is the condition, at frame ``-1``; the text after the images and the layers) and
    ``NucleusMoEEmbedRope`` (``"nucleus"``: the text after the last image only):
    Qwen-Image's complex64 tables (:class:`QwenImageRope`) at their positions."""

    def __init__(
        self,
        theta: float,
        axes_dim: tuple[int, ...],
        scale_rope: bool,
        variant: str,
        compat: str | None = None,
    ) -> None:
        super().__init__(theta, axes_dim, scale_rope, compat)
        self.variant = variant

    def forward(self, video_fhw: Any, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        """``(video, text)`` tables, called as the original is: ``(video_fhw, max_txt_seq_len,
        device)`` (layered) or ``(video_fhw, device, max_txt_seq_len)`` (nucleus)."""
        names = (
            ("max_txt_seq_len", "device")
            if self.variant == "layered"
            else ("device", "max_txt_seq_len")
        )
        given = {**dict(zip(names, args, strict=False)), **kwargs}
        n_text, device = given.get("max_txt_seq_len"), given.get("device")
        if n_text is None:
            raise PosencError("`max_txt_seq_len` must be given (the original's rule)")
        return self.run(video_fhw, int(n_text), device)

    def _tables(
        self, shapes: list[tuple[int, ...]], n: int, device: Any, rules: Any
    ) -> tuple[Tensor, Tensor]:
        """The images at their variant's frames, the text after the variant's side."""
        last = len(shapes) - 1
        images = [
            self._image(
                shape, -1 if self.variant == "layered" and idx == last else idx, device, rules
            )
            for idx, shape in enumerate(shapes)
        ]
        sides = [side for _, side in images]
        largest = sides[-1] if self.variant == "nucleus" else max(*sides, last)
        return torch.cat([t for t, _ in images], dim=0), self._text(largest, n, device, rules)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, variant={self.variant!r}"


class Qwen21Rope(nn.Module):
    """The stand-in for diffusers' ``QwenImage21Rope``: ``forward(img_shapes, image_pad_mask,
    device)`` -> complex64 ``[N, sum(axes_dim) / 2]`` over the joint sequence: text tokens
    advance one position on all three axes; each image block sits at the position reached
    (frame axis), rows and columns centred, and moves the position on by ``max(H, W)``."""

    def __init__(self, theta: float, axes_dim: tuple[int, ...], compat: str | None = None) -> None:
        super().__init__()
        self.theta, self.axes_dim, self.compat = theta, tuple(axes_dim), compat
        rope_grid((1, 1, 1), sum(axes_dim), axes_dim=axes_dim, base=theta)  # refused if not

    def ids(self, img_shapes: Sequence[Sequence[int]], image_pad_mask: Tensor) -> Tensor:
        """Each token's ``(t, h, w)`` position ``[N, 3]`` (int64); each image's ``(F, H, W)``
        checked first, as :func:`posenc.rope_grid` checks a grid."""
        axes = f"(one per block of axes_dim {self.axes_dim})"
        grids = [
            grid_shape(fhw, len(self.axes_dim), name=f"img_shapes[{i}]", axes=axes)
            for i, fhw in enumerate(img_shapes)
        ]
        mask = image_pad_mask.reshape(-1).tolist()
        out = torch.zeros(len(mask), 3, dtype=torch.long)
        cursor = position = 0
        for _, h, w in grids:
            if True not in mask[cursor:]:
                raise PosencError(f"`image_pad_mask` has no image block after token {cursor}")
            first = mask.index(True, cursor)
            out[cursor:first] = torch.arange(position, position + first - cursor)[:, None]
            position += first - cursor
            rows = torch.arange(-(h - h // 2), h // 2)[:, None].expand(h, w)
            cols = torch.arange(-(w - w // 2), w // 2)[None, :].expand(h, w)
            block = torch.stack([torch.full((h, w), position), rows, cols], dim=-1)
            out[first : first + h * w] = block.reshape(-1, 3)
            cursor, position = first + h * w, position + max(h, w)
        out[cursor:] = torch.arange(position, position + len(mask) - cursor)[:, None]
        return out

    def forward(
        self, img_shapes: Sequence[Sequence[int]], image_pad_mask: Tensor, device: Any
    ) -> Tensor:
        """The complex64 table of every token of the joint sequence."""
        ids = self.ids(img_shapes, image_pad_mask).to(device)
        if self.compat is not None:
            return original.qwen_ids_table(ids, self.axes_dim, self.theta)
        cos, sin = rope(
            ids,
            sum(self.axes_dim),
            base=self.theta,
            axes_dim=self.axes_dim,
            layout="compact",
            dtype=torch.float32,
        )
        return torch.complex(cos, sin)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"theta={self.theta}, axes_dim={list(self.axes_dim)}{mode}"


class HeliosRope(nn.Module):
    """The stand-in for diffusers' ``HeliosRotaryPosEmbed``: ``forward(frame_indices, height,
    width, device)`` with ``frame_indices`` ``[B, F]`` -> float32 ``[B, 2 D, F, H, W]``: the
    cos channels of the ``[t | h | w]`` blocks (pairs), then the sin ones, the frames at their
    indices, rows and columns ``0 … n - 1`` (Wan's blocks and base in HunyuanVideo's float32
    arithmetic). In compat mode it keeps the original's non-persistent ``freqs_base_t``, ``_y``
    and ``_x`` buffers (each axis's float32 ladder), so ``.to(bfloat16)`` rounds them as
    diffusers' are rounded."""

    freqs_base_t: Tensor
    freqs_base_y: Tensor
    freqs_base_x: Tensor

    def __init__(self, axes_dim: tuple[int, ...], theta: float, compat: str | None = None) -> None:
        super().__init__()
        self.axes_dim, self.theta, self.compat = tuple(axes_dim), theta, compat
        rope_grid((1, 1, 1), sum(axes_dim), axes_dim=axes_dim, base=theta)  # refused if not
        if compat is not None:
            for axis, d in zip("tyx", self.axes_dim, strict=True):
                self.register_buffer(
                    f"freqs_base_{axis}", original.ladder(d, theta), persistent=False
                )

    def forward(self, frame_indices: Tensor, height: int, width: int, device: Any) -> Tensor:
        """The tables of each batch item's frames on a ``height x width`` patch grid."""
        out = []
        for frames in frame_indices.to(device=device, dtype=torch.float32):
            if self.compat is not None:
                pos = [
                    frames,
                    torch.arange(height, device=device, dtype=torch.float32),
                    torch.arange(width, device=device, dtype=torch.float32),
                ]
                ladders = (self.freqs_base_t, self.freqs_base_y, self.freqs_base_x)
                cos, sin = original.grid_tables(pos, self.axes_dim, self.theta, ladders=ladders)
            else:
                pos = [
                    frames.double(),
                    torch.arange(height, device=device, dtype=torch.float64),
                    torch.arange(width, device=device, dtype=torch.float64),
                ]
                cos, sin = _axis_tables(pos, self.axes_dim, self.theta)
            both = torch.cat([cos, sin], dim=-1).reshape(len(frames), height, width, -1)
            out.append(both.permute(3, 0, 1, 2))
        return torch.stack(out)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{sum(self.axes_dim)}, axes_dim={self.axes_dim}, base={self.theta:g}{mode}"
