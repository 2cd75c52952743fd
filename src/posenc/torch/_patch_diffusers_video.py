"""The recognisers of diffusers' rotary modules of the video and image families that share Wan's,
HunyuanVideo's, CogVideoX's or Qwen-Image's formula, for :func:`posenc.torch.patch`:
``HunyuanImageRotaryPosEmbed`` (HunyuanImage-2.1), ``MotifVideoRotaryPosEmbed``,
``HunyuanVideoFramepackRotaryPosEmbed`` (Framepack), ``HeliosRotaryPosEmbed``,
``ChronoEditRotaryPosEmbed``, ``EasyAnimateRotaryPosEmbed``, ``SanaWMRotaryPosEmbed``,
``AnyFlowRotaryPosEmbed``, ``QwenEmbedLayer3DRope`` (Qwen-Image-Layered),
``NucleusMoEEmbedRope``, ``QwenImage21Rope`` (Qwen-Image 2.1) and
``MiniMaxH3RotaryPosEmbed`` (and its VAE's ``MiniMaxH3VideoRotaryPosEmbed``), and
``AnyFlowCausalRotaryPosEmbed``. Sana-Video's and Wan-Animate's ``WanRotaryPosEmbed`` are Wan's
own module (``_patch_diffusers_rope.py``). Stand-ins: ``_video_rope.py``."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from posenc.compat import diffusers_video as original
from posenc.spec.families import cogvideox, hunyuan_video, minimax_h3, qwen_image, wan
from posenc.spec.families.cogvideox import COGVIDEOX
from posenc.spec.families.hunyuan_video import HUNYUAN_IMAGE, HUNYUAN_VIDEO
from posenc.spec.families.minimax_h3 import MINIMAX_H3
from posenc.spec.families.qwen_image import QWEN_IMAGE
from posenc.spec.families.wan import WAN
from posenc.torch._minimax_rope import MiniMaxRope, MiniMaxVideoRope
from posenc.torch._patching import (
    Found,
    Recogniser,
    by_class,
    covered,
    left_alone,
    readable_theta,
    unlike,
)
from posenc.torch._video_rope import (
    ChronoEditRope,
    EasyAnimateRope,
    FramepackRope,
    HeliosRope,
    HunyuanGridRope,
    Qwen21Rope,
    QwenVariantRope,
)
from posenc.torch._video_rope_complex import AnyFlowCausalRope, AnyFlowRope, SanaWMRope


@by_class(hunyuan_video.GRIDS)
def hunyuan_grid_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """HunyuanImage-2.1's rotary module (float32, computed per call) and Motif-Video's (float64
    frequencies), measured on the grids their record says they run at (a 2048 x 2048 image, 64
    x 64 patches, and a 1280 x 768 one; a video: HunyuanVideo's 33 x 45 x 80)."""
    name = type(module).__name__
    m: Any = module
    motif = name.startswith("Motif")
    preset = (HUNYUAN_VIDEO if motif else HUNYUAN_IMAGE).name
    try:
        patch = (
            (int(m.patch_size_t), int(m.patch_size), int(m.patch_size))
            if motif
            else tuple(int(p) for p in m.patch_size)
        )
        axes, theta = tuple(int(d) for d in m.rope_dim), float(m.theta)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    image = [hunyuan_video.IMAGE_GRID, (24, 40)]
    sides = image if len(patch) == 2 else [hunyuan_video.VIDEO_GRID]
    probes = [torch.zeros(1, 1, *(n * p for n, p in zip(s, patch, strict=True))) for s in sides]

    def run(mod: nn.Module) -> list[Tensor]:
        return [t for x in probes for t in mod(x)]

    def make(mode: str | None) -> nn.Module:
        return HunyuanGridRope(preset, patch, axes, theta, wide=motif, compat=mode)

    return Found(
        name,
        f"rope_grid(preset={preset!r}, axes_dim={axes})",
        covered(make, "diffusers"),
        numbers=lambda: run(module),
        probe=run,
        note=f"max diff over the patch grids {', '.join(map(str, sides))}",
    )


@by_class(hunyuan_video.FRAMEPACK)
def framepack_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Framepack's rotary module (HunyuanVideo's float32 tables at given frame indices),
    measured over frames 0 … 36 of a 45 x 80 patch grid."""
    name = type(module).__name__
    m: Any = module
    try:
        p, p_t, theta = int(m.patch_size), int(m.patch_size_t), float(m.theta)
        axes = tuple(int(d) for d in m.rope_dim)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    if len(axes) != 3:
        return left_alone(name, f"not covered: rope_dim {axes} is not three axes")

    def run(mod: nn.Module) -> list[Tensor]:
        return list(mod(torch.arange(37), 45 * p, 80 * p, torch.device("cpu")))

    build = covered(lambda mode: FramepackRope(p, p_t, axes, theta, mode), "diffusers")
    return Found(
        name,
        f"posenc.rope(ids, {sum(axes)}, preset={HUNYUAN_VIDEO.name!r}, axes_dim={axes})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note="max diff over frames 0 … 36 of 45 x 80 patches",
    )


@by_class(wan.CHRONOEDIT)
def chronoedit_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """ChronoEdit's rotary module: Wan's float32 buffers of rows ``0 … max_seq_len - 1`` per
    axis (float64 angles; float32 on a host with MPS), measured whole. It keeps no theta: the
    one whose tables its buffers hold bit for bit (:func:`readable_theta`)."""
    name = type(module).__name__
    m: Any = module
    try:
        dim, patch, rows = int(m.attention_head_dim), tuple(m.patch_size), int(m.max_seq_len)
        skip, saved = int(m.temporal_skip_len), (m.freqs_cos, m.freqs_sin)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    side = 2 * (dim // 6)
    if side != dim // 3:
        why = f"its forward splits the head {dim} at {dim // 3}, its tables at {side}"
        return left_alone(name, f"not covered: {why} (d % 6 = 4): another table")
    if saved[0].is_meta:
        return left_alone(name, "its tables are on the meta device: load the model first")
    axes = (dim - 2 * side, side, side)
    mps = "diffusers-mps" if torch.backends.mps.is_available() else "diffusers"
    kept = [t.detach().cpu() for t in saved]

    def stand_in(theta: float, mode: str | None, device: Any) -> ChronoEditRope:
        return ChronoEditRope(
            dim,
            patch,
            rows,
            skip,
            axes_dim=axes,
            base=theta,
            compat=None if mode is None else mps,
            device=device,
        ).to(saved[0].dtype)

    def matches(theta: float) -> bool:  # theta > 0: a base posenc takes
        tables = stand_in(theta, mps, "cpu").axis_tables(rows)
        return all(torch.equal(a, b) for a, b in zip(tables, kept, strict=True))

    last = float(kept[1][1, axes[0] - 1].double().asin()) if rows > 1 and axes[0] > 2 else 0.0
    theta = readable_theta(last, axes[0], matches)
    if theta is None:
        return left_alone(
            name,
            "not covered: it keeps no theta, and its freqs_cos / freqs_sin "
            f"buffers are Wan's tables (split {axes}) of none posenc can read "
            "(10000, or a round estimate from them)",
        )

    def make(mode: str | None) -> nn.Module:
        return stand_in(theta, mode, saved[0].device)

    def probe(new: Any) -> list[Tensor]:
        out: list[Tensor] = new.axis_tables(rows)
        return out

    return Found(
        name,
        f"AxialRotaryEmbedding({dim}, preset={WAN.name!r}, axes_dim={axes}, base={theta:g})",
        covered(make, "diffusers"),
        numbers=lambda: [t.detach() for t in saved],
        probe=probe,
        note=f"max diff over its tables of rows 0 … {rows - 1}",
    )


@by_class(cogvideox.EASYANIMATE)
def easyanimate_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """EasyAnimate's rotary module (CogVideoX's float32 crop grids), measured on 13 latent
    frames of 512 x 512 and 720 x 1280 videos."""
    name = type(module).__name__
    m: Any = module
    try:
        p, dim = int(m.patch_size), int(m.rope_dim)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    probes = [torch.zeros(1, 1, 13, 64, 64), torch.zeros(1, 1, 13, 90, 160)]

    def run(mod: nn.Module) -> list[Tensor]:
        return [t for x in probes for t in mod(x)]

    return Found(
        name,
        f"rope_grid({dim}, preset={COGVIDEOX.name!r}) on EasyAnimate's crop",
        covered(lambda mode: EasyAnimateRope(dim, p, mode), "diffusers"),
        numbers=lambda: run(module),
        probe=run,
        note="max diff over 13 latent frames of 64 x 64 and 90 x 160",
    )


QWEN_VARIANTS = {qwen_image.LAYERED: "layered", qwen_image.NUCLEUS: "nucleus"}


@by_class(qwen_image.VARIANTS)
def qwen_variant_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Qwen-Image-Layered's and NucleusMoE-Image's rotary modules (Qwen-Image's complex64
    tables), measured on 1328 x 1328 images (two layers and the condition for Layered) and
    1024 text tokens."""
    name = type(module).__name__
    m: Any = module
    try:
        theta, axes, scale = float(m.theta), tuple(int(d) for d in m.axes_dim), bool(m.scale_rope)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    if len(axes) != 3:
        return left_alone(name, f"not covered: axes_dim {axes} is not three axes")
    variant = QWEN_VARIANTS[name]
    shapes = [[(1, 83, 83)] * (3 if variant == "layered" else 1)]

    def run(mod: nn.Module) -> list[Tensor]:
        out = mod(shapes, max_txt_seq_len=1024, device=torch.device("cpu"))
        return [torch.view_as_real(t) for t in out]

    build = covered(lambda mode: QwenVariantRope(theta, axes, scale, variant, mode), "diffusers")
    return Found(
        name,
        f"rope_grid(preset={QWEN_IMAGE.name!r}, axes_dim={axes})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note="max diff over 1328 x 1328 images and 1024 text tokens",
    )


@by_class(qwen_image.V21)
def qwen21_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Qwen-Image 2.1's rotary module (complex64 rows of positions -1024 … 8191), measured on
    a sequence of 64 text tokens, a 1328 x 1328 image (83 x 83 tokens) and 32 text tokens."""
    name = type(module).__name__
    m: Any = module
    try:
        theta, axes = float(m.theta), tuple(int(d) for d in m.axes_dim)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    if len(axes) != 3:
        return left_alone(name, f"not covered: axes_dim {axes} is not three axes")
    mask = torch.zeros(64 + 83 * 83 + 32, dtype=torch.bool)
    mask[64 : 64 + 83 * 83] = True

    def run(mod: nn.Module) -> list[Tensor]:
        return [torch.view_as_real(mod([(1, 83, 83)], mask, torch.device("cpu")))]

    build = covered(lambda mode: Qwen21Rope(theta, axes, mode), "diffusers")
    return Found(
        name,
        f"posenc.rope(ids, {sum(axes)}, preset={QWEN_IMAGE.name!r}, layout='compact')",
        build,
        numbers=lambda: run(copy.deepcopy(module)),
        probe=run,
        note="max diff over 64 text tokens, an 83 x 83 image, 32 text tokens",
    )


@by_class(wan.HELIOS)
def helios_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Helios's rotary module (HunyuanVideo's float32 tables at given frame indices, cos then
    sin channels first), measured over frames 0 … 20 of a 30 x 52 patch grid (480p)."""
    name = type(module).__name__
    m: Any = module
    try:
        axes, theta = (int(m.DT), int(m.DY), int(m.DX)), float(m.theta)
        kept: Tensor = m.freqs_base_t  # its buffers' dtype: the compat replay's follows it
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")

    def run(mod: nn.Module) -> list[Tensor]:
        return [mod(torch.arange(21)[None], 30, 52, torch.device("cpu"))]

    def make(mode: str | None) -> nn.Module:
        return HeliosRope(axes, theta, mode).to(device=kept.device, dtype=kept.dtype)

    return Found(
        name,
        f"posenc.rope(ids, {sum(axes)}, axes_dim={axes}, base={theta:g})",
        covered(make, "diffusers"),
        numbers=lambda: run(module),
        probe=run,
        note="max diff over frames 0 … 20 of 30 x 52 patches",
    )


def _wan_blocks(dim: int) -> tuple[int, int, int]:
    side = 2 * (dim // 6)
    return (dim - 2 * side, side, side)


def _sana_theta(kept: Any, axes: tuple[int, int, int], rows: int) -> float | str:
    """The theta of SANA-WM's complex64 table ``[rows, D / 2]`` (it keeps neither theta nor
    ``fhw_dim``): the one whose table in Wan's split ``axes`` (the split its forward cuts at)
    it holds bit for bit, or why there is none."""
    width = sum(axes) // 2
    if not (
        isinstance(kept, Tensor)
        and kept.dtype == torch.complex64
        and tuple(kept.shape) == (rows, width)
        and rows > 1
    ):
        return f"not covered: its freqs is not a complex64 [{rows}, {width}] table"
    table, pos = kept.detach().cpu(), [torch.arange(rows)]

    def matches(theta: float) -> bool:
        own = torch.cat([original.complex_grid(pos, (d,), theta) for d in axes], dim=-1)
        return torch.equal(table, own)

    theta = readable_theta(float(table[1, axes[0] // 2 - 1].imag.double().asin()), axes[0], matches)
    if theta is not None:
        return theta
    starts = [c for c in range(width) if torch.equal(table[:, c], table[:, 0])]  # frequency 1
    wan = [0, axes[0] // 2, (axes[0] + axes[1]) // 2]
    if len(starts) == 3 and starts != wan:
        split = tuple(2 * (b - a) for a, b in zip(starts, [*starts[1:], width], strict=True))
        return (
            f"not covered: its table's blocks (fhw_dim {split}) are not Wan's split {axes}, "
            "at which its forward cuts it: another table"
        )
    return (
        "not covered: it keeps no theta, and its table is Wan's (split "
        f"{axes}) of none posenc can read (10000, or a round estimate from it)"
    )


@by_class(wan.COMPLEX)
def complex_wan_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """SANA-WM's rotary module (Wan's blocks as complex64 rows of float32 angles; it keeps no
    theta: the one its table holds, :func:`_sana_theta`) and AnyFlow's (complex128 rows of
    float64 angles), measured over a 21 x 30 x 52 patch grid (81 frames of 480p)."""
    name = type(module).__name__
    m: Any = module
    sana = name.startswith("Sana")
    try:
        dim, rows = int(m.attention_head_dim), int(m.max_seq_len)
        read = _sana_theta(m.freqs, _wan_blocks(dim), rows) if sana else float(m.theta)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    if isinstance(read, str):
        return left_alone(name, read)
    theta, axes = read, _wan_blocks(dim)
    fhw = tuple(min(n, rows) for n in (21, 30, 52))

    def run(mod: nn.Module) -> list[Tensor]:
        if sana:
            out = mod(fhw, device=torch.device("cpu"))
        else:
            cfg = {"total_frames": fhw[0], "full_frame_shape": fhw[1:]}
            out = mod(layout_cfg=cfg, device=torch.device("cpu"))["query"]
        return [torch.view_as_real(out)]

    def make(mode: str | None) -> nn.Module:
        stand_in = SanaWMRope if sana else AnyFlowRope
        return stand_in(dim, axes, theta, wide=not sana, compat=mode)

    return Found(
        name,
        f"rope_grid({dim}, preset={WAN.name!r}, layout='compact', base={theta:g})",
        covered(make, "diffusers"),
        numbers=lambda: run(copy.deepcopy(module)),
        probe=run,
        note=f"max diff over a {' x '.join(map(str, fhw))} patch grid",
    )


@by_class(minimax_h3.MODULES)
def minimax_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """MiniMax-H3's rotary module (one float32 ladder shared by t, h, w), measured over the
    positions of a 16 x 45 x 80 grid (61 frames of 720p), and its VAE decoder's (coordinates
    in [-1, 1), 2 pi times a ladder of base 100), over a 31 x 44 x 80 grid (121 frames of
    704 x 1280)."""
    name = type(module).__name__
    m: Any = module
    vae = name == minimax_h3.VAE
    try:
        inv: Tensor = m.inv_freq
        n = int(inv.numel()) if vae else int(m.rope_freq_dim)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")

    def ladder(theta: float) -> Tensor:  # diffusers' float32 inv_freq
        if vae:
            return 1.0 / theta ** torch.arange(0, 1, 6 / (6 * n), dtype=torch.float32)
        return 1.0 / (theta ** (torch.arange(0, 2 * n, 2, dtype=torch.float32) / (2 * n)))

    kept = inv.detach().cpu()

    def matches(theta: float) -> bool:  # the ladder, cast as the buffer is
        return torch.equal(ladder(theta).to(kept.dtype), kept)

    last = float(kept[-1].double()) if kept.numel() == n else 0.0
    theta = readable_theta(last, 2 * n, matches, 100.0 if vae else 10000.0)
    if theta is None:
        return left_alone(name, "not covered: its inv_freq is no ladder of an integer theta")
    dims = (31, 44, 80) if vae else (16, 45, 80)
    axes = [torch.arange(k, dtype=torch.float32) for k in dims]
    if vae:  # the decoder's cell centres 2 (i + 0.5) / n - 1
        axes = [2.0 * (torch.arange(0.5, k, dtype=torch.float32) / k) - 1.0 for k in dims]
    ids = torch.stack([g.reshape(-1) for g in torch.meshgrid(*axes, indexing="ij")], -1)
    ids = ids[None] if vae else ids

    def run(mod: nn.Module) -> list[Tensor]:
        return list(mod(ids))

    def make(mode: str | None) -> nn.Module:
        stand_in = MiniMaxVideoRope if vae else MiniMaxRope
        return stand_in(n, theta, mode, dtype=inv.dtype).to(inv.device)

    what = (
        f"posenc.rope(c, {2 * n} k, base={theta:g}, axes_dim=({2 * n},) * k, axes_scale=2 "
        "pi, layout='halves'), k coordinates (the call's: the module keeps none)"
        if vae
        else f"posenc.rope(position_ids, {6 * n}, preset={MINIMAX_H3.name!r}, base={theta:g})"
    )
    return Found(
        name,
        what,
        covered(make, "diffusers"),
        numbers=lambda: run(module),
        probe=run,
        note=f"max diff over the positions of a {' x '.join(map(str, dims))} grid",
    )


@by_class(wan.CAUSAL)
def anyflow_far_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """AnyFlow FAR's rotary module (complex128; compressed context frames pooled), measured on
    a 21-frame 480p video (30 x 52 patches, 15 x 26 compressed), 12 frames compressed."""
    name = type(module).__name__
    m: Any = module
    try:
        dim, rows, theta = int(m.attention_head_dim), int(m.max_seq_len), float(m.theta)
        pool = tuple(
            int(c) // int(p) for c, p in zip(m.compressed_patch_size, m.patch_size, strict=True)
        )
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    if len(pool) != 3:
        return left_alone(name, f"not covered: patch sizes of {len(pool)} axes")
    axes = _wan_blocks(dim)
    cfg = {
        "total_frames": min(21, rows),
        "num_compressed_frames": min(12, rows),
        "full_frame_shape": (min(30, rows), min(52, rows)),
        "compressed_frame_shape": (min(15, rows // pool[1]), min(26, rows // pool[2])),
    }

    def run(mod: nn.Module) -> list[Tensor]:
        return [torch.view_as_real(mod(cfg, torch.device("cpu"))["query"])]

    def make(mode: str | None) -> nn.Module:
        return AnyFlowCausalRope(dim, axes, theta, pool, rows, compat=mode)

    return Found(
        name,
        f"rope_grid({dim}, preset={WAN.name!r}, layout='compact'), pooled rows at their centres",
        covered(make, "diffusers"),
        numbers=lambda: run(copy.deepcopy(module)),
        probe=run,
        note="max diff over 12 compressed frames of 15 x 26 and 9 of 30 x 52",
    )


RECOGNISERS: tuple[Recogniser, ...] = (
    hunyuan_grid_rope,
    framepack_rope,
    chronoedit_rope,
    easyanimate_rope,
    qwen_variant_rope,
    qwen21_rope,
    helios_rope,
    complex_wan_rope,
    anyflow_far_rope,
    minimax_rope,
)
"""Asked before diffusers' catch-all ``others``."""
