"""The recognisers of diffusers' grid rotary modules for :func:`posenc.torch.patch`: Wan's
``WanRotaryPosEmbed`` (Wan 2.1/2.2, Sana-Video, Wan-Animate; SkyReels-V2's copy),
``HunyuanVideoRotaryPosEmbed`` (HunyuanVideo, 1.5), ``CosmosRotaryPosEmbed`` (Cosmos-1) and
``QwenEmbedRope`` (Qwen-Image) and ``LTXVideoRotaryPosEmbed`` (LTX-Video), with their
stand-ins: an
:class:`~posenc.torch.axial.AxialRotaryEmbedding` called as the original is, on the latents
``[B, C, F, H, W]``, exact; or, with ``compat="original"``, diffusers' own tables
(:func:`posenc.compat.diffusers.rotary_grid`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from posenc.api.rope import rope
from posenc.api.rope_grid import rope_grid
from posenc.compat import diffusers as original
from posenc.errors import PosencError
from posenc.spec.presets.vision import LTX_BASES
from posenc.torch._patching import Found, Recogniser, from_library, left_alone
from posenc.torch.axial import AxialRotaryEmbedding

WAN = ("WanRotaryPosEmbed", "SkyReelsV2RotaryPosEmbed")
HUNYUAN = ("HunyuanVideoRotaryPosEmbed", "HunyuanVideo15RotaryPosEmbed")


class VideoRope(AxialRotaryEmbedding):
    """The stand-in for a video rotary module: ``forward(hidden_states)`` with latents ``[B,
    C, F, H, W]``, the tables of the patched grid ``(F / p_t, H / p_h, W / p_w)``.

    Wan's form (``wan=True``) returns ``[1, S, 1, D]`` tables in the module's dtype (diffusers
    keeps float32 buffers, which ``.to()`` casts); HunyuanVideo's ``[S, D]`` float32 on the
    latents' device. ``compat``: the ``compat=`` mode of :func:`posenc.rope_grid` that
    repeats diffusers' arithmetic (``"diffusers"``, or ``"diffusers-mps"``: Wan on an MPS
    host)."""

    def __init__(self, preset: str, dim: int, patch: tuple[int, int, int], *, wan: bool,
                 compat: str | None = None, axes_dim: tuple[int, ...] | None = None,
                 base: float | None = None, axes_base: tuple[float, ...] | None = None,
                 device: Any = None) -> None:  # fmt: skip
        super().__init__(dim, preset=preset, axes_dim=axes_dim, base=base, axes_base=axes_base,
                         device=device)  # fmt: skip
        self.patch_size, self.wan, self.compat = tuple(patch), wan, compat

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> VideoRope:
        super()._apply(fn, recurse)
        if not self.wan:  # HunyuanVideo's module holds no tensor: float32 whatever .to() says
            self._dtype = torch.float32
        return self

    def grid(self, hidden_states: Tensor) -> tuple[int, int, int]:
        """The patched grid of the latents."""
        _, _, f, h, w = hidden_states.shape
        p_t, p_h, p_w = self.patch_size
        return f // p_t, h // p_h, w // p_w

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """``(cos, sin)`` of every token of the latents' patched grid."""
        shape = self.grid(hidden_states)
        if self.compat is not None:
            cos, sin = rope_grid(shape, self.dim, preset=self.preset, axes_dim=self.rotary.axes_dim,
                                 base=self.rotary.base, compat=self.compat, dtype=torch.float32,
                                 device=self._device)  # fmt: skip
            cos, sin = cos.to(self._dtype), sin.to(self._dtype)  # buffers .to() cast
        else:  # rounded once, to the dtype the module was moved to (Wan's) or float32
            cos, sin = super().forward(shape, dtype=self._dtype)
        if not self.wan:
            return cos.to(hidden_states.device), sin.to(hidden_states.device)
        return cos[None, :, None], sin[None, :, None]

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
                tables.append(rope_grid((rows,), d, axes_dim=(d,), base=r.base, layout=r.layout,
                                        dtype=torch.float32, device=self._device))  # fmt: skip
        return [torch.cat([t[j] for t in tables], dim=-1).to(self._dtype) for j in (0, 1)]

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{super().extra_repr()}, patch_size={self.patch_size}{mode}"


def _axis_tables(stand_in: Any, rows: int) -> list[Tensor]:
    out: list[Tensor] = stand_in.axis_tables(rows)
    return out


def _df(module: Any) -> bool:
    return from_library(module, "diffusers")


def wan_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Wan's rotary module: its float32 buffers of rows ``0 … max_seq_len - 1`` per axis
    (float64 angles; float32 on a host with MPS), measured whole."""
    name = type(module).__name__
    if not (name in WAN and _df(module)):
        return None
    m: Any = module
    try:
        dim, patch, rows = int(m.attention_head_dim), tuple(m.patch_size), int(m.max_seq_len)
        saved = (m.freqs_cos, m.freqs_sin)
        axes = (int(m.t_dim), int(m.h_dim), int(m.w_dim))
    except (AttributeError, TypeError, ValueError):
        return left_alone(name, "not covered: not the attributes of diffusers' WanRotaryPosEmbed")
    if saved[0].is_meta:
        return left_alone(name, "its tables are on the meta device: load the model first")
    mode = "diffusers-mps" if torch.backends.mps.is_available() else "diffusers"

    def build(compat: str | None) -> nn.Module | str:
        try:
            stand_in = VideoRope("wan", dim, patch, wan=True, axes_dim=axes,
                                 compat=None if compat is None else mode,
                                 device=saved[0].device)  # fmt: skip
        except PosencError as err:
            return f"not covered: {err}"
        return stand_in.to(saved[0].dtype)

    return Found(name, f"AxialRotaryEmbedding({dim}, preset='wan', axes_dim={axes})", build,
                 numbers=lambda: [t.detach() for t in saved],
                 probe=lambda new: _axis_tables(new, rows),
                 note=f"max diff over its tables of rows 0 … {rows - 1}")  # fmt: skip


def hunyuan_video_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """HunyuanVideo's rotary module (float32, computed per call), measured over the rows of a
    720p, 129-frame video (33 x 45 x 80 patches), one axis at a time."""
    name = type(module).__name__
    if not (name in HUNYUAN and _df(module)):
        return None
    m: Any = module
    try:
        axes = tuple(int(d) for d in m.rope_dim)
        p, p_t, theta = int(m.patch_size), int(m.patch_size_t), float(m.theta)
    except (AttributeError, TypeError, ValueError):
        return left_alone(name, "not covered: not the attributes of diffusers' "
                          "HunyuanVideoRotaryPosEmbed")  # fmt: skip
    if len(axes) != 3:
        return left_alone(name, f"not covered: rope_dim {axes} is not three axes")

    def build(compat: str | None) -> nn.Module | str:
        try:
            mode = None if compat is None else "diffusers"
            return VideoRope("hunyuan-video", sum(axes), (p_t, p, p), wan=False, axes_dim=axes,
                             base=theta, compat=mode)  # fmt: skip
        except PosencError as err:
            return f"not covered: {err}"

    probes = [torch.zeros(1, 1, 33 * p_t, p, p), torch.zeros(1, 1, p_t, 45 * p, p),
              torch.zeros(1, 1, p_t, p, 80 * p)]  # fmt: skip

    def run(mod: nn.Module) -> list[Tensor]:
        return [t for x in probes for t in mod(x)]

    return Found(name, f"AxialRotaryEmbedding({sum(axes)}, preset='hunyuan-video', "
                 f"axes_dim={axes}, base={theta:g})", build, numbers=lambda: run(module),
                 probe=run, note="max diff over 33 frames, 45 rows, 80 columns "
                 "(720p, 129 frames)")  # fmt: skip


class CosmosRope(VideoRope):
    """The stand-in for diffusers' ``CosmosRotaryPosEmbed``: ``forward(hidden_states,
    fps=None)``, ``(cos, sin)`` ``[S, D]`` float32 (diffusers' dtype, whatever ``.to()``
    says), a video's frames at ``i * base_fps / fps``."""

    def __init__(self, dim: int, patch: tuple[int, int, int], axes: tuple[int, ...],
                 bases: tuple[float, ...], base_fps: float, *, compat: str | None = None,
                 device: Any = None) -> None:  # fmt: skip
        super().__init__("cosmos", dim, patch, wan=False, compat=compat, axes_dim=axes,
                         axes_base=bases, device=device)  # fmt: skip
        self.base_fps = base_fps

    def forward(self, hidden_states: Tensor, fps: float | None = None) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """``(cos, sin)`` of every token of the latents' patched grid."""
        shape = self.grid(hidden_states)
        step = 1.0 if fps is None else self.base_fps / fps
        if self.compat is None and step == 1.0:
            cos, sin = AxialRotaryEmbedding.forward(self, shape, dtype=torch.float32)
        else:
            r = self.rotary
            cos, sin = rope_grid(shape, self.dim, preset="cosmos", axes_dim=r.axes_dim,
                                 axes_base=r.axes_base, step=(step, 1.0, 1.0),
                                 dtype=torch.float32, device=self._device,
                                 compat=self.compat)  # fmt: skip
        return cos.to(hidden_states.device), sin.to(hidden_states.device)


def cosmos_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Cosmos's rotary module (float32, per-axis NTK bases), measured over 121 frames of a
    704 x 1280 video at 30 fps and as an image, one axis at a time."""
    name = type(module).__name__
    if not (name == "CosmosRotaryPosEmbed" and _df(module)):
        return None
    m: Any = module
    try:
        axes = (int(m.dim_t), int(m.dim_h), int(m.dim_w))
        ntk = (float(m.t_ntk_factor), float(m.h_ntk_factor), float(m.w_ntk_factor))
        patch, base_fps, largest = tuple(m.patch_size), float(m.base_fps), max(m.max_size)
    except (AttributeError, TypeError, ValueError):
        return left_alone(name, "not covered: not the attributes of diffusers' "
                          "CosmosRotaryPosEmbed")  # fmt: skip
    bases = tuple(10000.0 * f for f in ntk)  # diffusers' own float: 10000.0 * factor

    def build(compat: str | None) -> nn.Module | str:
        if compat is not None and base_fps != original.COSMOS_FPS:
            return (f"compat='original': posenc replays base_fps {original.COSMOS_FPS}, not "
                    f"{base_fps:g}")  # fmt: skip
        try:
            return CosmosRope(sum(axes), patch, axes, bases, base_fps,
                              compat=None if compat is None else "diffusers")  # fmt: skip
        except PosencError as err:
            return f"not covered: {err}"

    p_t, p_h, p_w = patch
    n = min(largest, 121)
    probes = [(torch.zeros(1, 1, n * p_t, p_h, p_w), fps) for fps in (None, 30)]
    probes += [(torch.zeros(1, 1, p_t, min(largest, 88) * p_h, p_w), None),
               (torch.zeros(1, 1, p_t, p_h, min(largest, 160) * p_w), None)]  # fmt: skip

    def run(mod: nn.Module) -> list[Tensor]:
        return [t for x, fps in probes for t in mod(x, fps=fps)]

    return Found(name, f"AxialRotaryEmbedding({sum(axes)}, preset='cosmos', axes_dim={axes})",
                 build, numbers=lambda: run(module), probe=run,
                 note="max diff over the frames of 121 (as an image and at 30 fps), 88 rows, "
                 "160 columns")  # fmt: skip


class QwenImageRope(nn.Module):
    """The stand-in for diffusers' ``QwenEmbedRope``: ``forward(video_fhw, device,
    max_txt_seq_len)`` -> ``(video, text)`` complex64 tables ``[S, 64]``, ``[L, 64]``: image
    ``i`` of ``video_fhw`` at frames from ``i``, rows and columns centred (``scale_rope``) or
    from 0; the text at ``M + j`` on every axis, ``M`` the images' largest half-side (side)."""

    def __init__(self, theta: float, axes_dim: tuple[int, ...], scale_rope: bool,
                 compat: str | None = None) -> None:  # fmt: skip
        super().__init__()
        self.theta, self.axes_dim, self.scale_rope = theta, tuple(axes_dim), scale_rope
        self.compat = compat

    def _table(self, shape: tuple[int, ...], start: tuple[float, ...], device: Any) -> Tensor:
        cos, sin = rope_grid(shape, sum(self.axes_dim), preset="qwen-image", base=self.theta,
                             axes_dim=self.axes_dim, layout="compact", start=start,
                             compat=self.compat, dtype=torch.float32, device=device)  # fmt: skip
        return torch.complex(cos, sin)

    def forward(self, video_fhw: Any, device: Any = None, max_txt_seq_len: Any = None
                ) -> tuple[Tensor, Tensor]:  # fmt: skip
        """The tables of the images of ``video_fhw`` and of ``max_txt_seq_len`` text tokens."""
        if max_txt_seq_len is None:
            raise PosencError("`max_txt_seq_len` must be given (QwenEmbedRope's rule)")
        if isinstance(video_fhw, list):
            video_fhw = video_fhw[0]
        shapes = video_fhw if isinstance(video_fhw, list) else [video_fhw]
        device = torch.device("cpu") if device is None else device
        tables, largest = [], 0
        for idx, (f, h, w) in enumerate(shapes):
            start = (idx, -(h - h // 2), -(w - w // 2)) if self.scale_rope else (idx, 0, 0)
            tables.append(self._table((f, h, w), tuple(float(v) for v in start), device))
            largest = max(largest, *((h // 2, w // 2) if self.scale_rope else (h, w)))
        return torch.cat(tables, dim=0), self._text(largest, int(max_txt_seq_len), device)

    def _text(self, first: int, n: int, device: Any) -> Tensor:
        """The text tokens' table: positions ``first + j`` on every axis."""
        pos = torch.arange(first, first + n, device=device)
        if self.compat is not None:
            rows = [original.qwen_image_rows(pos, d, self.theta) for d in self.axes_dim]
            return torch.cat(rows, dim=1)
        cos, sin = rope(pos[:, None].expand(n, len(self.axes_dim)), sum(self.axes_dim),
                        base=self.theta, axes_dim=self.axes_dim, layout="compact",
                        dtype=torch.float32)  # fmt: skip
        return torch.complex(cos, sin)

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"theta={self.theta}, axes_dim={list(self.axes_dim)}{mode}"


def qwen_image_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Qwen-Image's rotary module (complex64, float32 angles), measured on a 1328 x 1328
    image (83 x 83 patches) and 1024 text tokens."""
    name = type(module).__name__
    if not (name == "QwenEmbedRope" and _df(module)):
        return None
    m: Any = module
    try:
        theta, axes, scale = float(m.theta), tuple(int(d) for d in m.axes_dim), bool(m.scale_rope)
    except (AttributeError, TypeError, ValueError):
        return left_alone(name, "not covered: not the attributes of diffusers' QwenEmbedRope")
    if len(axes) != 3:
        return left_alone(name, f"not covered: axes_dim {axes} is not three axes")

    def build(compat: str | None) -> nn.Module | str:
        return QwenImageRope(theta, axes, scale, None if compat is None else "diffusers")

    def run(mod: nn.Module) -> list[Tensor]:
        out = mod([(1, 83, 83)], device=torch.device("cpu"), max_txt_seq_len=1024)
        return [torch.view_as_real(t) for t in out]

    return Found(name, f"rope_grid(preset='qwen-image', axes_dim={axes})", build,
                 numbers=lambda: run(module), probe=run,
                 note="max diff over a 1328 x 1328 image and 1024 text tokens")  # fmt: skip


class LTXRope(nn.Module):
    """The stand-in for diffusers' ``LTXVideoRotaryPosEmbed(dim)``: ``forward(hidden_states,
    num_frames, height, width, rope_interpolation_scale, video_coords)`` -> ``(cos, sin)``
    ``[B, N, dim]`` float32, the coordinates ``c = i * scale * patch / base`` of the latent
    grid, or ``video_coords / base``; exact (``posenc.rope_grid`` / ``posenc.rope`` of ``2c -
    1``, preset ``ltx-video``) or diffusers' float32 arithmetic."""

    def __init__(self, dim: int, bases: tuple[float, float, float],
                 patch: tuple[int, int, int], theta: float,
                 compat: str | None = None) -> None:  # fmt: skip
        super().__init__()
        self.dim, self.bases, self.patch, self.theta = dim, bases, patch, theta
        self.compat = compat
        rope_grid((1, 1, 1), dim, preset="ltx-video", base=theta)  # refused now if it cannot

    def forward(self, hidden_states: Tensor, num_frames: int | None = None,
                height: int | None = None, width: int | None = None,
                rope_interpolation_scale: Any = None, video_coords: Tensor | None = None
                ) -> tuple[Tensor, Tensor]:  # fmt: skip
        """The tables of every token, for each of the batch's ``B`` items."""
        b, device = hidden_states.size(0), hidden_states.device
        if video_coords is not None:
            return self._coords(video_coords, device)
        if rope_interpolation_scale is None:
            raise PosencError("LTXVideoRotaryPosEmbed's grid needs `rope_interpolation_scale`")
        dims = (int(num_frames or 0), int(height or 0), int(width or 0))
        scales = [float(v) for v in rope_interpolation_scale]
        steps = [2 * s * p / base for s, p, base in zip(scales, self.patch, self.bases,
                                                       strict=True)]  # fmt: skip
        cos, sin = rope_grid(dims, self.dim, preset="ltx-video", base=self.theta, step=steps,
                             compat=self.compat, dtype=torch.float32, device=device)  # fmt: skip
        return cos[None].expand(b, -1, -1), sin[None].expand(b, -1, -1)

    def _coords(self, coords: Tensor, device: Any) -> tuple[Tensor, Tensor]:
        if self.compat is not None:  # diffusers: coords / base in float32
            grid = torch.stack([coords[:, a] / self.bases[a] for a in range(3)], dim=-1)
            return original.ltx_tables(grid, self.dim, self.theta)
        base = torch.tensor(self.bases, dtype=torch.float64, device=coords.device)
        ids = 2 * coords.double().transpose(1, 2) / base - 1  # [B, N, 3]
        cos, sin = rope(ids, self.dim, preset="ltx-video", base=self.theta, dtype=torch.float32)
        return cos.to(device), sin.to(device)

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{self.dim}, preset='ltx-video', base={self.theta:g}{mode}"


def ltx_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """LTX-Video's rotary module, measured one axis at a time over a 704 x 1280, 121-frame
    video (16 x 22 x 40 latents) at the pipeline's 25 fps scales."""
    name = type(module).__name__
    if not (name == "LTXVideoRotaryPosEmbed" and _df(module)):
        return None
    m: Any = module
    try:
        dim, theta = int(m.dim), float(m.theta)
        bases = (float(m.base_num_frames), float(m.base_height), float(m.base_width))
        patch = (int(m.patch_size_t), int(m.patch_size), int(m.patch_size))
    except (AttributeError, TypeError, ValueError):
        return left_alone(name, "not covered: not the attributes of diffusers' "
                          "LTXVideoRotaryPosEmbed")  # fmt: skip

    def build(compat: str | None) -> nn.Module | str:
        if compat is not None and (bases != LTX_BASES or patch != (1, 1, 1)):
            return "compat='original': posenc replays bases (20, 2048, 2048) and patch size 1"
        try:
            return LTXRope(dim, bases, patch, theta, None if compat is None else "diffusers")
        except PosencError as err:
            return f"not covered: {err}"

    x, scale = torch.zeros(1), (8 / 25, 32.0, 32.0)

    def run(mod: nn.Module) -> list[Tensor]:
        return [t for dims in ((16, 1, 1), (1, 22, 1), (1, 1, 40))
                for t in mod(x, *dims, rope_interpolation_scale=scale)]  # fmt: skip

    return Found(name, f"rope_grid(preset='ltx-video', dim={dim})", build,
                 numbers=lambda: run(module), probe=run,
                 note="max diff over 16 frames, 22 rows, 40 columns (704 x 1280, "
                 "121 frames)")  # fmt: skip


RECOGNISERS: tuple[Recogniser, ...] = (wan_rope, hunyuan_video_rope, cosmos_rope,
                                        qwen_image_rope, ltx_rope)  # fmt: skip
"""The video rotary recognisers (asked before diffusers' catch-all ``others``)."""
