"""The recognisers of diffusers' grid rotary modules for :func:`posenc.torch.patch`:
``WanRotaryPosEmbed`` (Wan 2.1/2.2, Sana-Video, Wan-Animate; SkyReels-V2's copy),
``HunyuanVideoRotaryPosEmbed`` (HunyuanVideo, 1.5), ``CosmosRotaryPosEmbed`` (Cosmos-1),
``QwenEmbedRope`` (Qwen-Image), ``LTXVideoRotaryPosEmbed`` (LTX-Video),
``CogView4RotaryPosEmbed`` and ``GlmImageRotaryPosEmbed``. Their stand-ins
(``_diffusers_rope.py``) are called as the originals are and give exact tables, or, with
``compat="original"``, diffusers' own (:mod:`posenc.compat.diffusers`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.compat import diffusers as original
from posenc.errors import PosencError
from posenc.spec.families import cogview4, cosmos, hunyuan_video, ltx_video, qwen_image, wan
from posenc.spec.families.cogview4 import COGVIEW4
from posenc.spec.families.cosmos import COSMOS
from posenc.spec.families.hunyuan_video import HUNYUAN_VIDEO
from posenc.spec.families.ltx_video import LTX_BASES, LTX_VIDEO
from posenc.spec.families.qwen_image import QWEN_IMAGE
from posenc.spec.families.wan import WAN
from posenc.torch._diffusers_rope import (
    CogView4Rope,
    CosmosRope,
    LTXRope,
    QwenImageRope,
    VideoRope,
    WanRope,
)
from posenc.torch._patching import Found, Recogniser, by_class, left_alone, unlike


def _axis_tables(stand_in: Any, rows: int) -> list[Tensor]:
    out: list[Tensor] = stand_in.axis_tables(rows)
    return out


@by_class(wan.BUFFERS)
def wan_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Wan's rotary module: its float32 buffers of rows ``0 … max_seq_len - 1`` per axis
    (float64 angles; float32 on a host with MPS), measured whole."""
    name = type(module).__name__
    m: Any = module
    try:
        dim, patch, rows = int(m.attention_head_dim), tuple(m.patch_size), int(m.max_seq_len)
        saved = (m.freqs_cos, m.freqs_sin)
        axes = (int(m.t_dim), int(m.h_dim), int(m.w_dim))
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    if saved[0].is_meta:
        return left_alone(name, "its tables are on the meta device: load the model first")
    mode = "diffusers-mps" if torch.backends.mps.is_available() else "diffusers"

    def build(compat: str | None) -> nn.Module | str:
        try:
            stand_in = WanRope(
                WAN.name,
                dim,
                patch,
                axes_dim=axes,
                compat=None if compat is None else mode,
                device=saved[0].device,
            )
        except PosencError as err:
            return f"not covered: {err}"
        return stand_in.to(saved[0].dtype)

    return Found(
        name,
        f"AxialRotaryEmbedding({dim}, preset={WAN.name!r}, axes_dim={axes})",
        build,
        numbers=lambda: [t.detach() for t in saved],
        probe=lambda new: _axis_tables(new, rows),
        note=f"max diff over its tables of rows 0 … {rows - 1}",
    )


@by_class(hunyuan_video.VIDEO)
def hunyuan_video_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """HunyuanVideo's rotary module (float32, computed per call), measured over the rows of
    the grid its record says it runs at (33 x 45 x 80 patches), one axis at a time."""
    name = type(module).__name__
    m: Any = module
    try:
        axes = tuple(int(d) for d in m.rope_dim)
        p, p_t, theta = int(m.patch_size), int(m.patch_size_t), float(m.theta)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    if len(axes) != 3:
        return left_alone(name, f"not covered: rope_dim {axes} is not three axes")

    def build(compat: str | None) -> nn.Module | str:
        try:
            mode = None if compat is None else "diffusers"
            return VideoRope(
                HUNYUAN_VIDEO.name,
                sum(axes),
                (p_t, p, p),
                axes_dim=axes,
                base=theta,
                compat=mode,
            )
        except PosencError as err:
            return f"not covered: {err}"

    frames, rows, columns = hunyuan_video.VIDEO_GRID
    probes = [
        torch.zeros(1, 1, frames * p_t, p, p),
        torch.zeros(1, 1, p_t, rows * p, p),
        torch.zeros(1, 1, p_t, p, columns * p),
    ]

    def run(mod: nn.Module) -> list[Tensor]:
        return [t for x in probes for t in mod(x)]

    return Found(
        name,
        f"AxialRotaryEmbedding({sum(axes)}, preset={HUNYUAN_VIDEO.name!r}, "
        f"axes_dim={axes}, base={theta:g})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note=f"max diff over {frames} frames, {rows} rows, {columns} columns "
        f"({hunyuan_video.VIDEO_RUN})",
    )


@by_class(cosmos.MODULE)
def cosmos_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Cosmos's rotary module (float32, per-axis NTK bases), measured over 121 frames of a
    704 x 1280 video at 30 fps and as an image, one axis at a time."""
    name = type(module).__name__
    m: Any = module
    try:
        axes = (int(m.dim_t), int(m.dim_h), int(m.dim_w))
        ntk = (float(m.t_ntk_factor), float(m.h_ntk_factor), float(m.w_ntk_factor))
        patch, base_fps, largest = tuple(m.patch_size), float(m.base_fps), max(m.max_size)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    bases = tuple(10000.0 * f for f in ntk)  # diffusers' own float: 10000.0 * factor

    def build(compat: str | None) -> nn.Module | str:
        if compat is not None and base_fps != original.COSMOS_FPS:
            return (
                f"compat='original': posenc replays base_fps {original.COSMOS_FPS}, not "
                f"{base_fps:g}"
            )
        try:
            return CosmosRope(
                sum(axes),
                patch,
                axes,
                bases,
                base_fps,
                compat=None if compat is None else "diffusers",
            )
        except PosencError as err:
            return f"not covered: {err}"

    p_t, p_h, p_w = patch
    n = min(largest, 121)
    probes = [(torch.zeros(1, 1, n * p_t, p_h, p_w), fps) for fps in (None, 30)]
    probes += [
        (torch.zeros(1, 1, p_t, min(largest, 88) * p_h, p_w), None),
        (torch.zeros(1, 1, p_t, p_h, min(largest, 160) * p_w), None),
    ]

    def run(mod: nn.Module) -> list[Tensor]:
        return [t for x, fps in probes for t in mod(x, fps=fps)]

    return Found(
        name,
        f"AxialRotaryEmbedding({sum(axes)}, preset={COSMOS.name!r}, axes_dim={axes})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note="max diff over the frames of 121 (as an image and at 30 fps), 88 rows, 160 columns",
    )


@by_class(qwen_image.MODULE)
def qwen_image_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Qwen-Image's rotary module (complex64, float32 angles), measured on a 1328 x 1328
    image (83 x 83 patches) and 1024 text tokens."""
    name = type(module).__name__
    m: Any = module
    try:
        theta, axes, scale = float(m.theta), tuple(int(d) for d in m.axes_dim), bool(m.scale_rope)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    if len(axes) != 3:
        return left_alone(name, f"not covered: axes_dim {axes} is not three axes")

    def build(compat: str | None) -> nn.Module | str:
        return QwenImageRope(theta, axes, scale, None if compat is None else "diffusers")

    def run(mod: nn.Module) -> list[Tensor]:
        out = mod([(1, 83, 83)], device=torch.device("cpu"), max_txt_seq_len=1024)
        return [torch.view_as_real(t) for t in out]

    return Found(
        name,
        f"rope_grid(preset={QWEN_IMAGE.name!r}, axes_dim={axes})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note="max diff over a 1328 x 1328 image and 1024 text tokens",
    )


@by_class(ltx_video.MODULE)
def ltx_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """LTX-Video's rotary module, measured one axis at a time over a 704 x 1280, 121-frame
    video (16 x 22 x 40 latents) at the pipeline's 25 fps scales."""
    name = type(module).__name__
    m: Any = module
    try:
        dim, theta = int(m.dim), float(m.theta)
        bases = (float(m.base_num_frames), float(m.base_height), float(m.base_width))
        patch = (int(m.patch_size_t), int(m.patch_size), int(m.patch_size))
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")

    def build(compat: str | None) -> nn.Module | str:
        if compat is not None and (bases != LTX_BASES or patch != (1, 1, 1)):
            return "compat='original': posenc replays bases (20, 2048, 2048) and patch size 1"
        try:
            return LTXRope(dim, bases, patch, theta, None if compat is None else "diffusers")
        except PosencError as err:
            return f"not covered: {err}"

    x, scale = torch.zeros(1), (8 / 25, 32.0, 32.0)

    def run(mod: nn.Module) -> list[Tensor]:
        return [
            t
            for dims in ((16, 1, 1), (1, 22, 1), (1, 1, 40))
            for t in mod(x, *dims, rope_interpolation_scale=scale)
        ]

    return Found(
        name,
        f"rope_grid(preset={LTX_VIDEO.name!r}, dim={dim})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note="max diff over 16 frames, 22 rows, 40 columns (704 x 1280, 121 frames)",
    )


@by_class(cogview4.MODULES)
def cogview4_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """CogView4's and GLM-Image's rotary modules, measured on a 2048 x 2048 image (128 x 128
    patches) and a 300 x 200 one (past CogView4's 256 canvas rows on neither axis)."""
    name = type(module).__name__
    m: Any = module
    try:
        dim, patch, theta = int(m.dim), int(m.patch_size), float(m.theta)
        axes = getattr(m, "rope_axes_dim", None)
        canvas = None if axes is None else (int(axes[0]), int(axes[1]))
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")

    def build(compat: str | None) -> nn.Module | str:
        try:
            return CogView4Rope(dim, patch, theta, canvas, None if compat is None else "diffusers")
        except PosencError as err:
            return f"not covered: {err}"

    probes = [
        torch.zeros(1, 1, 128 * patch, 128 * patch),
        torch.zeros(1, 1, 300 * patch, 200 * patch),
    ]

    def run(mod: nn.Module) -> list[Tensor]:
        return [t for x in probes for t in mod(x)]

    return Found(
        name,
        f"rope(ids, {dim}, preset={COGVIEW4.name!r})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note="max diff over 128 x 128 and 300 x 200 patch grids",
    )


RECOGNISERS: tuple[Recogniser, ...] = (
    wan_rope,
    hunyuan_video_rope,
    cosmos_rope,
    qwen_image_rope,
    ltx_rope,
    cogview4_rope,
)
"""The video rotary recognisers (asked before diffusers' catch-all ``others``)."""
