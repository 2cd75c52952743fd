"""The stand-ins :func:`posenc.torch.patch` puts in place of diffusers' grid rotary modules
(the recognisers are in ``_patch_diffusers_rope.py``): each called as its original is and
returning what its model consumes, exact (posenc's tables) or, with ``compat``, diffusers' own
arithmetic (:mod:`posenc.compat.diffusers`). Nothing is kept in the state dict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from posenc.api.rope import rope
from posenc.api.rope_grid import rope_grid
from posenc.compat import diffusers as original
from posenc.errors import PosencError
from posenc.evaluate.positions import grid_shape
from posenc.spec.families.cogview4 import COGVIEW4
from posenc.spec.families.cosmos import COSMOS
from posenc.spec.families.ltx_video import LTX_VIDEO
from posenc.spec.families.qwen_image import QWEN_IMAGE
from posenc.torch._scaled import Scaled
from posenc.torch.axial import AxialRotaryEmbedding


class VideoRope(Scaled, AxialRotaryEmbedding):
    """The stand-in for a video rotary module: ``forward(hidden_states)`` with latents ``[B,
    C, F, H, W]``, the tables of the patched grid ``(F / p_t, H / p_h, W / p_w)``, in
    HunyuanVideo's form: ``[S, D]`` float32 on the latents' device (its module holds no
    tensor, so ``.to()`` changes nothing); Wan's is :class:`WanRope`. ``compat``: the
    ``compat=`` mode of :func:`posenc.rope_grid` that repeats diffusers' arithmetic. With a
    rule past the trained size (:meth:`scale`), ``posenc.rope_grid(..., scaling=...)`` of
    the grid."""

    def __init__(
        self,
        preset: str,
        dim: int,
        patch: tuple[int, int, int],
        *,
        compat: str | None = None,
        axes_dim: tuple[int, ...] | None = None,
        base: float | None = None,
        axes_base: tuple[float, ...] | None = None,
        device: Any = None,
    ) -> None:
        super().__init__(
            dim, preset=preset, axes_dim=axes_dim, base=base, axes_base=axes_base, device=device
        )
        self.patch_size, self.compat = tuple(patch), compat

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> VideoRope:
        super()._apply(fn, recurse)
        self._dtype = torch.float32  # the original holds no tensor: float32 whatever .to() says
        return self

    def grid(self, hidden_states: Tensor) -> tuple[int, int, int]:
        """The patched grid of the latents."""
        _, _, f, h, w = hidden_states.shape
        p_t, p_h, p_w = self.patch_size
        return f // p_t, h // p_h, w // p_w

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """``(cos, sin)`` of every token of the latents' patched grid."""
        shape = self.grid(hidden_states)
        if self.scaling is not None:
            cos, sin = self.tables(shape, None, partial(self.grid_tables, shape))
        elif self.compat is not None:  # float32, cast as the buffers' .to() casts them
            cos, sin = self.grid_tables(shape, None)
        else:  # rounded once, to the dtype the module was moved to (Wan's) or float32
            cos, sin = super().forward(shape, dtype=self._dtype)
        return self.shaped(cos, sin, hidden_states)

    def shaped(self, cos: Tensor, sin: Tensor, hidden_states: Tensor) -> tuple[Tensor, Tensor]:
        """The ``[S, D]`` tables as the original returns them: on the latents' device."""
        return cos.to(hidden_states.device), sin.to(hidden_states.device)

    def grid_tables(
        self, shape: Sequence[int], rules: Any, step: Any = None
    ) -> tuple[Tensor, Tensor]:
        """``posenc.rope_grid`` of the grid ``shape`` with the module's blocks and bases, under
        ``rules`` (its ``scaling``; None: none) and at ``step``, exact or in the ``compat``
        arithmetic (float32), in the module's dtype."""
        r = self.rotary
        cos, sin = rope_grid(
            tuple(shape),
            self.dim,
            preset=self.preset,
            axes_dim=r.axes_dim,
            base=r.base,
            axes_base=r.bases,
            scaling=rules,
            step=step,
            compat=self.compat,
            dtype=torch.float32 if self.compat is not None else self._dtype,
            device=self._device,
        )
        return cos.to(self._dtype), sin.to(self._dtype)

    def trial(self, grid: tuple[int, ...]) -> None:
        k = self.rotary.ndim
        shape = grid if len(grid) == k else (1,) * k
        self.tables(shape, None, partial(self.grid_tables, shape))

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward  # type: ignore[assignment]

    def axis_tables(self, rows: int) -> list[Tensor]:
        """Each block's table over positions ``0 … rows - 1``, concatenated (``[rows, dim]``
        cos, then sin): Wan's buffers, in the module's dtype."""
        r, tables = self.rotary, []
        for d in r.axes_dim or ():
            if self.compat is not None:
                wide = torch.float64 if self.compat == "diffusers" else torch.float32
                pos = torch.arange(rows, device=self._device)
                tables.append(original.rotary_1d(d, pos, float(r.base), freqs_dtype=wide))
            else:
                tables.append(
                    rope_grid(
                        (rows,),
                        d,
                        axes_dim=(d,),
                        base=r.base,
                        layout=r.layout,
                        dtype=torch.float32,
                        device=self._device,
                    )
                )
        return [torch.cat([t[j] for t in tables], dim=-1).to(self._dtype) for j in (0, 1)]

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{super().extra_repr()}, patch_size={self.patch_size}{mode}{self.scaling_words()}"


class WanRope(VideoRope):
    """:class:`VideoRope` in Wan's form: ``[1, S, 1, D]`` tables in the module's dtype
    (diffusers keeps float32 buffers, which ``.to()`` casts); ``compat`` ``"diffusers"``, or
    ``"diffusers-mps"`` on an MPS host (float32 angles)."""

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> VideoRope:
        AxialRotaryEmbedding._apply(self, fn, recurse)  # the buffers' dtype follows .to()
        return self

    def shaped(self, cos: Tensor, sin: Tensor, hidden_states: Tensor) -> tuple[Tensor, Tensor]:
        """The ``[S, D]`` tables as ``[1, S, 1, D]``."""
        return cos[None, :, None], sin[None, :, None]


class CosmosRope(VideoRope):
    """The stand-in for diffusers' ``CosmosRotaryPosEmbed``: ``forward(hidden_states,
    fps=None)``, ``(cos, sin)`` ``[S, D]`` float32 (diffusers' dtype, whatever ``.to()``
    says), a video's frames at ``i * base_fps / fps``."""

    def __init__(
        self,
        dim: int,
        patch: tuple[int, int, int],
        axes: tuple[int, ...],
        bases: tuple[float, ...],
        base_fps: float,
        *,
        compat: str | None = None,
        device: Any = None,
    ) -> None:
        super().__init__(
            COSMOS.name,
            dim,
            patch,
            compat=compat,
            axes_dim=axes,
            axes_base=bases,
            device=device,
        )
        self.base_fps = base_fps

    def forward(self, hidden_states: Tensor, fps: float | None = None) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """``(cos, sin)`` of every token of the latents' patched grid."""
        shape = self.grid(hidden_states)
        step = 1.0 if fps is None else self.base_fps / fps
        if self.scaling is not None:
            steps = (step, 1.0, 1.0)
            cos, sin = self.tables(shape, steps, partial(self.grid_tables, shape, step=steps))
        elif self.compat is None and step == 1.0:
            cos, sin = AxialRotaryEmbedding.forward(self, shape, dtype=torch.float32)
        else:  # its frames at i * base_fps / fps, or diffusers' arithmetic
            cos, sin = self.grid_tables(shape, None, step=(step, 1.0, 1.0))
        return cos.to(hidden_states.device), sin.to(hidden_states.device)


class QwenImageRope(Scaled, nn.Module):
    """The stand-in for diffusers' ``QwenEmbedRope``: ``forward(video_fhw, device,
    max_txt_seq_len)`` -> ``(video, text)`` complex64 tables ``[S, 64]``, ``[L, 64]``: image
    ``i`` of ``video_fhw`` at frames from ``i``, rows and columns centred (``scale_rope``) or
    from 0; the text at ``M + j`` on every axis, ``M`` the images' largest half-side (side).
    With a rule past the trained size (:meth:`scale`), the rule as the first image's grid
    sets it, on every image and the text."""

    def __init__(
        self, theta: float, axes_dim: tuple[int, ...], scale_rope: bool, compat: str | None = None
    ) -> None:
        super().__init__()
        self.theta, self.axes_dim, self.scale_rope = theta, tuple(axes_dim), scale_rope
        self.compat, self.preset = compat, QWEN_IMAGE.name

    def _table(
        self, shape: tuple[int, ...], start: tuple[float, ...], device: Any, rules: Any
    ) -> Tensor:
        cos, sin = rope_grid(
            shape,
            sum(self.axes_dim),
            preset=QWEN_IMAGE.name,
            base=self.theta,
            axes_dim=self.axes_dim,
            layout="compact",
            start=start,
            scaling=rules,
            compat=self.compat,
            dtype=torch.float32,
            device=device,
        )
        return torch.complex(cos, sin)

    def forward(
        self, video_fhw: Any, device: Any = None, max_txt_seq_len: Any = None
    ) -> tuple[Tensor, Tensor]:
        """The tables of the images of ``video_fhw`` and of ``max_txt_seq_len`` text tokens."""
        if max_txt_seq_len is None:
            raise PosencError("`max_txt_seq_len` must be given (QwenEmbedRope's rule)")
        return self.run(video_fhw, int(max_txt_seq_len), device)

    def run(self, video_fhw: Any, n: int, device: Any) -> tuple[Tensor, Tensor]:
        """The tables of the images of ``video_fhw`` and of ``n`` text tokens (:meth:`_tables`),
        under the rule past the trained size where there is one."""
        device = torch.device("cpu") if device is None else device
        shapes = self.shapes(video_fhw)
        if self.scaling is None:
            return self._tables(shapes, n, device, None)
        make = partial(self._tables, shapes, n, device)
        return self.tables(shapes[0], (tuple(shapes), n, str(device)), make)  # type: ignore[no-any-return]

    def _tables(
        self, shapes: list[tuple[int, ...]], n: int, device: Any, rules: Any
    ) -> tuple[Tensor, Tensor]:
        """Each image's table from frame ``i``, then the text's after the largest half-side."""
        images = [self._image(shape, idx, device, rules) for idx, shape in enumerate(shapes)]
        largest = max(side for _, side in images)
        table = torch.cat([t for t, _ in images], dim=0)
        return table, self._text(largest, n, device, rules)

    def trial(self, grid: tuple[int, ...]) -> None:
        shape = grid if len(grid) == 3 else (1, 1, 1)
        self.tables(shape, None, partial(self._tables, [shape], 1, torch.device("cpu")))

    def shapes(self, video_fhw: Any) -> list[tuple[int, ...]]:
        """The ``(F, H, W)`` of each image of ``video_fhw`` (the first batch item's list),
        each checked as :func:`posenc.rope_grid` checks a grid, before any table is made."""
        name = "video_fhw"
        if isinstance(video_fhw, list):
            video_fhw, name = video_fhw[0], "video_fhw[0]"
        if isinstance(video_fhw, list):
            names = [f"{name}[{i}]" for i in range(len(video_fhw))]
        else:
            video_fhw, names = [video_fhw], [name]
        axes = f"(one per block of axes_dim {self.axes_dim})"
        return [
            grid_shape(fhw, len(self.axes_dim), name=label, axes=axes)
            for label, fhw in zip(names, video_fhw, strict=True)
        ]

    def _image(
        self, fhw: tuple[int, ...], frame: int, device: Any, rules: Any = None
    ) -> tuple[Tensor, int]:
        """One image's table, its frames from ``frame``, and its half-side (its side without
        ``scale_rope``): what the text positions start after."""
        f, h, w = fhw
        start = (frame, -(h - h // 2), -(w - w // 2)) if self.scale_rope else (frame, 0, 0)
        side = max(h // 2, w // 2) if self.scale_rope else max(h, w)
        return self._table((f, h, w), tuple(float(v) for v in start), device, rules), side

    def _text(self, first: int, n: int, device: Any, rules: Any = None) -> Tensor:
        """The text tokens' table: positions ``first + j`` on every axis."""
        pos = torch.arange(first, first + n, device=device)
        if self.compat is not None:  # a rule is refused by the images' replay, made first
            rows = [original.qwen_image_rows(pos, d, self.theta) for d in self.axes_dim]
            return torch.cat(rows, dim=1)
        cos, sin = rope(
            pos[:, None].expand(n, len(self.axes_dim)),
            sum(self.axes_dim),
            base=self.theta,
            axes_dim=self.axes_dim,
            layout="compact",
            scaling=rules,
            dtype=torch.float32,
        )
        return torch.complex(cos, sin)

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"theta={self.theta}, axes_dim={list(self.axes_dim)}{mode}{self.scaling_words()}"


class LTXRope(nn.Module):
    """The stand-in for diffusers' ``LTXVideoRotaryPosEmbed(dim)``: ``forward(hidden_states,
    num_frames, height, width, rope_interpolation_scale, video_coords)`` -> ``(cos, sin)``
    ``[B, N, dim]`` float32, the coordinates ``c = i * scale * patch / base`` of the latent
    grid, or ``video_coords / base``; exact (``posenc.rope_grid`` / ``posenc.rope`` of ``2c -
    1``, preset ``ltx-video``) or diffusers' float32 arithmetic."""

    def __init__(
        self,
        dim: int,
        bases: tuple[float, float, float],
        patch: tuple[int, int, int],
        theta: float,
        compat: str | None = None,
    ) -> None:
        super().__init__()
        self.dim, self.bases, self.patch, self.theta = dim, bases, patch, theta
        self.compat = compat
        rope_grid((1, 1, 1), dim, preset=LTX_VIDEO.name, base=theta)  # refused now if it cannot

    def forward(
        self,
        hidden_states: Tensor,
        num_frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        rope_interpolation_scale: Any = None,
        video_coords: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The tables of every token, for each of the batch's ``B`` items."""
        b, device = hidden_states.size(0), hidden_states.device
        if video_coords is not None:
            return self._coords(video_coords, device)
        dims = (int(num_frames or 0), int(height or 0), int(width or 0))
        if rope_interpolation_scale is None:  # diffusers leaves the grid unscaled: c = i
            steps = [2.0, 2.0, 2.0]
        else:
            scales = [float(v) for v in rope_interpolation_scale]
            steps = [
                2 * s * p / base for s, p, base in zip(scales, self.patch, self.bases, strict=True)
            ]
        cos, sin = rope_grid(
            dims,
            self.dim,
            preset=LTX_VIDEO.name,
            base=self.theta,
            step=steps,
            compat=self.compat,
            dtype=torch.float32,
            device=device,
        )
        return cos[None].expand(b, -1, -1), sin[None].expand(b, -1, -1)

    def _coords(self, coords: Tensor, device: Any) -> tuple[Tensor, Tensor]:
        if self.compat is not None:  # diffusers: coords / base in float32
            grid = torch.stack([coords[:, a] / self.bases[a] for a in range(3)], dim=-1)
            return original.ltx_tables(grid, self.dim, self.theta)
        base = torch.tensor(self.bases, dtype=torch.float64, device=coords.device)
        ids = 2 * coords.double().transpose(1, 2) / base - 1  # [B, N, 3]
        cos, sin = rope(ids, self.dim, preset=LTX_VIDEO.name, base=self.theta, dtype=torch.float32)
        return cos.to(device), sin.to(device)

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{self.dim}, preset={LTX_VIDEO.name!r}, base={self.theta:g}{mode}"


class CogView4Rope(nn.Module):
    """The stand-in for diffusers' ``CogView4RotaryPosEmbed`` (``canvas``: its
    ``rope_axes_dim``, patch ``i`` of ``n`` at ``floor(i * canvas / n)``) and
    ``GlmImageRotaryPosEmbed`` (``canvas`` None: at ``i``): ``forward(hidden_states)`` ->
    ``(cos, sin)`` ``[H * W, dim]`` float32 on the CPU, as the originals build them."""

    def __init__(
        self,
        dim: int,
        patch: int,
        theta: float,
        canvas: tuple[int, int] | None,
        compat: str | None = None,
    ) -> None:
        super().__init__()
        self.dim, self.patch_size, self.theta, self.canvas = dim, patch, theta, canvas
        self.compat = compat
        rope_grid((1, 1), dim, preset=COGVIEW4.name, base=theta)  # refused now if it cannot

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Tensor]:
        """The tables of the latents' patch grid."""
        h, w = (n // self.patch_size for n in hidden_states.shape[-2:])
        if self.compat is not None:
            return original.cogview4_tables(h, w, self.dim, self.theta, self.canvas)
        rows, cols = torch.arange(h), torch.arange(w)
        if self.canvas is not None:
            rows, cols = rows * self.canvas[0] // h, cols * self.canvas[1] // w
        ids = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1).reshape(-1, 2)
        cos, sin = rope(ids, self.dim, preset=COGVIEW4.name, base=self.theta, dtype=torch.float32)
        return cos, sin

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{self.dim}, preset={COGVIEW4.name!r}, canvas={self.canvas}{mode}"
