"""The rotary presets of image and video models: the ``VISION_PRESETS`` data.

Each family is axial RoPE (:class:`~posenc.spec.rotary.Rotary` with ``axes_dim``): one block
of channels per grid axis, each block its own frequency ladder ``base ** (-2j / d_a)``. What
tells the families apart is how the head is split (``axial``), the layout, the base and which
grid axis each block encodes; their coordinates are :func:`posenc.rope_grid`'s ``start`` and
``step``. ``originals`` names the ``compat=`` modes that repeat a family's own arithmetic.
"""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError
from posenc.spec.presets.base import RotaryPreset


def _split(name: str, dim: int, rule: str, widths: tuple[int, ...]) -> dict[str, Any]:
    """``{"axes_dim": widths}``, or the error naming the family's rule when ``dim`` does not
    split into even blocks by it."""
    if any(w <= 0 or w % 2 for w in widths) or sum(widths) != dim:
        raise PosencError(
            f"`dim` = {dim} does not split into {name}'s even blocks ({rule}): got {widths}"
        )
    return {"axes_dim": widths}


def _wan(dim: int, base: float) -> dict[str, Any]:
    side = 2 * (dim // 6)
    return _split("wan", dim, "h = w = 2 * (dim // 6), t the rest", (dim - 2 * side, side, side))


def _cogvideox(dim: int, base: float) -> dict[str, Any]:
    rule = "t = dim // 4, h = w = dim // 8 * 3"
    return _split("cogvideox", dim, rule, (dim // 4, dim // 8 * 3, dim // 8 * 3))


COSMOS_SCALE = (2.0, 1.0, 1.0)
"""Cosmos-1's default ``rope_scale`` (t, h, w): the NTK factors of its per-axis bases."""


def cosmos_bases(axes: tuple[int, ...], base: float, scale: tuple[float, ...]) -> tuple[float, ...]:
    """Cosmos's per-axis bases ``base * s_a ** (d_a / (d_a - 2))``, in its own order of
    operations (so ``compat="diffusers"`` starts from the same floats)."""
    return tuple(base * (s ** (d / (d - 2))) for d, s in zip(axes, scale, strict=True))


def _cosmos(dim: int, base: float) -> dict[str, Any]:
    side = dim // 6 * 2
    return _split("cosmos", dim, "h = w = dim // 6 * 2, t the rest", (dim - 2 * side, side, side))


def _cosmos_bases(axes: tuple[int, ...], base: float) -> dict[str, Any]:
    if len(axes) != 3 or min(axes) <= 2:
        raise PosencError(
            f"`axes_dim` of cosmos must be three blocks wider than 2 (its bases "
            f"base * s ** (d_a / (d_a - 2))), got {axes}"
        )
    return {"axes_base": cosmos_bases(axes, base, COSMOS_SCALE)}


def qwen_image_positions(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Qwen-Image's ``scale_rope`` coordinates: frames from 0, rows and columns centred,
    ``-(n - n // 2) … n // 2 - 1``."""
    return [0.0, *(-float(n - n // 2) for n in dims[1:])], [1.0] * len(dims)


LTX_BASES = (20.0, 2048.0, 2048.0)
"""LTX-Video's ``base_num_frames``, ``base_height``, ``base_width``: coordinates are fractions
of them."""
LTX_SCALES = (8 / 25, 32.0, 32.0)
"""The LTX pipeline's ``rope_interpolation_scale`` at 25 fps: the VAE's compression over the
frame rate, and its spatial compression."""


def ltx_positions(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """LTX-Video's ``2 c - 1`` with ``c = i * scale / base`` per axis (patch size 1)."""
    return [-1.0] * 3, [2 * s / b for s, b in zip(LTX_SCALES, LTX_BASES, strict=True)]


def two_blocks(name: str) -> Any:
    """``(dim, base) -> {"axes_dim": (dim / 2, dim / 2)}``: two axes, ``dim / 4`` frequencies
    each (the 2D families), or the error naming the rule when ``dim`` is not a multiple of 4."""

    def axial(dim: int, base: float) -> dict[str, Any]:
        return _split(name, dim, "dim / 2 per axis, dim a multiple of 4", (dim // 2, dim // 2))

    return axial


def centred(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Patch centres ``((i + 0.5) / n) * 2 - 1`` per axis (DINOv3): step ``2 / n``, the start
    minus the middle offset times the step, so an odd axis's middle patch is at exactly 0."""
    steps = [2.0 / n if n else 1.0 for n in dims]
    return [-((n - 1) / 2) * s for n, s in zip(dims, steps, strict=True)], steps


VISION_PRESETS: dict[str, RotaryPreset] = {
    p.name: p
    for p in [
        RotaryPreset(
            "wan",
            "diffusers WanRotaryPosEmbed (Wan 2.1/2.2, SkyReels-V2, Sana-Video, ChronoEdit)",
            "3D axial, [t | h | w] blocks interleaved, h = w = 2 (d // 6), base 10000",
            128,
            {"base": 10000.0, "layout": "interleaved"},
            "diffusers keeps float64 tables of rows 0 … 1023 as float32 buffers: exact, except "
            "on a host with MPS (float32 angles, even on the CPU) and after .to(bfloat16)",
            axial=_wan,
            originals=("diffusers", "diffusers-mps"),
        ),
        RotaryPreset(
            "hunyuan-video",
            "diffusers HunyuanVideoRotaryPosEmbed (HunyuanVideo, 1.5, Framepack)",
            "3D axial, [t | h | w] blocks of 16, 56, 56 interleaved, base 256",
            128,
            {"base": 256.0, "layout": "interleaved", "axes_dim": (16, 56, 56)},
            "diffusers computes in float32 (4.7e-6 off at 720p, 129 frames); text tokens are "
            "not rotated",
            originals=("diffusers",),
        ),
        RotaryPreset(
            "cogvideox",
            "diffusers get_3d_rotary_pos_embed (CogVideoX 1.0/1.5, EasyAnimate, ConsisID)",
            "3D axial, [t | h | w] blocks d/4, 3d/8, 3d/8 interleaved, base 10000",
            64,
            {"base": 10000.0, "layout": "interleaved"},
            "float32 in diffusers; CogVideoX 1.0 crops its grid into 45 x 30 (fractional "
            "positions: rope_grid's crop=), 1.5 uses integer positions",
            axial=_cogvideox,
            originals=("diffusers",),
        ),
        RotaryPreset(
            "cosmos",
            "diffusers CosmosRotaryPosEmbed (Cosmos-1 diffusion world models)",
            "3D axial, [t | h | w] blocks (h = w = 2 (d // 6)) in halves over the whole head, "
            "per-axis NTK bases 10000 * s ** (d_a / (d_a - 2)), rope_scale s = (2, 1, 1)",
            128,
            {"base": 10000.0, "layout": "halves"},
            "a video's frames sit at i * 24 / fps (rope_grid's step for the first axis: "
            "24 / fps), an image's at i; another rope_scale is axes_base=(10000 * s_t ** (d_t "
            "/ (d_t - 2)), …) (posenc.torch.patch reads the module's own); diffusers computes "
            "in float32 (2.6e-6 off at 704 x 1280, 121 frames)",
            axial=_cosmos,
            per_block=_cosmos_bases,
            originals=("diffusers",),
        ),
        RotaryPreset(
            "qwen-image",
            "diffusers QwenEmbedRope(theta=10000, axes_dim=(16, 56, 56), scale_rope=True) "
            "(Qwen-Image, Qwen-Image-Edit, NucleusMoE-Image)",
            "3D axial, [t | h | w] blocks of 16, 56, 56, pairs (2i, 2i+1) (complex), base "
            "10000, rows and columns centred on 0",
            128,
            {"base": 10000.0, "layout": "interleaved", "axes_dim": (16, 56, 56)},
            "diffusers keeps complex64 tables (layout='compact' and torch.complex(cos, sin) "
            "give them), float32 angles (1.9e-6 off at 1328 x 1328, 2.5e-4 at row 4095); "
            "image i of a batch of references starts its frames at i (start=(i, …)); the text "
            "tokens sit at M + j on all three axes, M = max(H // 2, W // 2) over the images: "
            "posenc.rope(ids, 128, preset='qwen-image') of those ids; positions stop at +-4096",
            positions=qwen_image_positions,
            originals=("diffusers",),
        ),
        RotaryPreset(
            "ltx-video",
            "diffusers LTXVideoRotaryPosEmbed (LTX-Video 0.9.x)",
            "one ladder (pi / 2) * 10000 ** (k / (n - 1)), n = d // 6, read by (t, h, w) in "
            "turn per frequency, pairs (2i, 2i+1) after d % 6 still channels; coordinates 2c - 1",
            2048,
            {"base": 10000.0, "layout": "interleaved", "spacing": "ltx"},
            "d is the attention's inner width (2048): LTX rotates q and k before splitting "
            "them into heads; its coordinates c = i * scale * patch / base with base (20, "
            "2048, 2048) and the pipeline's scale (8 / frame_rate, 32, 32): the default "
            "positions are 25 fps (start -1, step 2 * scale / base: pass step= for another "
            "frame rate); its largest angles, pi / 2 * 10000 rad, are at c = 0, so float32 "
            "errs by 3.6e-3 at any size (704 x 1280, 121 frames)",
            positions=ltx_positions,
            originals=("diffusers",),
        ),
        RotaryPreset(
            "cogview4",
            "diffusers CogView4RotaryPosEmbed and GlmImageRotaryPosEmbed (CogView4, GLM-Image)",
            "2D axial, [row | column] blocks of d/2 in halves over the whole head, base 10000",
            128,
            {"base": 10000.0, "layout": "halves"},
            "GLM-Image's positions are the patch indices (rope_grid's default); CogView4 samples "
            "a fixed 256 x 256 canvas: patch i of n sits at floor(i * 256 / n) (repeated rows "
            "past 256): posenc.rope(ids, d, preset='cogview4') of those ids; diffusers computes "
            "in float32 (8.8e-6 off) and on the CPU",
            axial=two_blocks("cogview4"),
            originals=("diffusers",),
        ),
        RotaryPreset(
            "hunyuan-dit",
            "diffusers get_2d_rotary_pos_embed (HunyuanDiT); Tencent HunyuanDiT get_2d_rotary",
            "2D axial, [column | row] blocks of d/2 interleaved, base 10000",
            88,
            {"base": 10000.0, "layout": "interleaved"},
            "the first block encodes the column; positions are a crop of a 32 x 32 base grid "
            "(rope_grid's crop=), which diffusers' torch port computes off by up to 0.083 when "
            "the crop does not start at 0: compat='diffusers' repeats that, the default is the "
            "original's",
            axial=two_blocks("hunyuan-dit"),
            block_axes=(1, 0),
            originals=("diffusers",),
        ),
    ]
}
