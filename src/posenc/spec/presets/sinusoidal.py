"""The sinusoidal presets: the ``PRESETS`` data and the Option constants its entries share.

A sinusoidal preset is an :class:`~posenc.spec.encoding.Encoding` plus the keyword options its
original exposes, under the original's own names (``max_timescale``, ``temperature``,
``flip_sin_to_cos``, …), and the option sets ``posenc identify`` tries. Adding a convention
means adding an entry here, not a code path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from posenc.errors import PosencError, check_bool, check_int
from posenc.spec.encoding import Encoding
from posenc.spec.presets.base import (
    ZERO_ROW,
    Option,
    Preset,
    position_or_none,
    positive,
    positive_or_none,
    real,
    set_field,
)


def _detr_normalize(enc: Encoding, v: bool, opts: Mapping[str, Any]) -> Encoding:
    scale = opts.get("scale")
    if scale is not None and not v:
        raise PosencError("option `scale` of preset 'detr' needs normalize=True (as in DETR)")
    return enc.replace(normalize=v, scale=(2 * math.pi if scale is None else scale) if v else 1.0)


def _detr_scale_apply(enc: Encoding, v: float | None, opts: Mapping[str, Any]) -> Encoding:
    return _detr_normalize(enc, opts.get("normalize", False), opts)


BASE = Option("largest timescale (10000)", positive, set_field("base"))
TEMPERATURE = Option("largest timescale, `temperature` (10000)", positive, set_field("base"))
MIN_TIMESCALE = Option(
    "multiplies every frequency (tensor2tensor's behaviour; 1.0)",
    positive,
    set_field("min_timescale"),
)
MAX_TIMESCALE = Option("largest timescale (10000)", positive, set_field("base"))
MAE_CLS = Option(
    "prepend one all-zero row for the class token (False)",
    check_bool,
    lambda enc, v, _: enc.replace(extra_tokens=int(v)),
    grid_only=True,
)

_2D = {"ndim": 2, "layout": "halves", "widths": "exact"}

VASWANI = Preset(
    "vaswani",
    "Vaswani et al. 2017, 'Attention Is All You Need'; PyTorch tutorial, labml",
    "interleaved [sin, cos] pairs, paper spacing base**(-2i/dim)",
    Encoding(layout="interleaved", widths="exact"),
    {"base": BASE},
    "odd widths are refused",
    replay="tutorial",
)


TENSOR2TENSOR = Preset(
    "tensor2tensor",
    "tensor2tensor common_attention.get_timing_signal_1d; THUMT",
    "[sin | cos] halves, last frequency exactly min_timescale/max_timescale",
    Encoding(shift=1.0, guard=True, layout="halves", widths="floor"),
    {"min_timescale": MIN_TIMESCALE, "max_timescale": MAX_TIMESCALE},
    "frequencies are min_timescale * (max/min)**(-k/(n-1)): the original multiplies by "
    "min_timescale (reported upstream, never changed); n - 1 is floored at 1, so "
    "dim 2 and 3 work; odd widths get one zero channel appended",
)


FAIRSEQ = Preset(
    "fairseq",
    "fairseq modules.SinusoidalPositionalEmbedding.get_embedding",
    "the tensor2tensor table; row padding_idx is all zero",
    Encoding(shift=1.0, layout="halves", widths="floor"),
    {
        "padding_idx": Option(
            "position whose row is zero (None)", position_or_none, set_field("padding_idx")
        )
    },
    "row p encodes position p; fairseq numbers tokens from padding_idx + 1 "
    "(see posenc.fairseq_positions) and maps pads to the zero row; odd widths get one "
    "zero channel appended; dim must give n >= 2 frequencies (n - 1 is a divisor)",
    identify=({}, {"padding_idx": ZERO_ROW}),
    replay="fairseq",
)


WHISPER = Preset(
    "whisper",
    "OpenAI whisper.model.sinusoids; HF WhisperEncoder",
    "[sin | cos] halves, tensor2tensor spacing",
    Encoding(shift=1.0, layout="halves", widths="exact"),
    {"max_timescale": MAX_TIMESCALE},
    "identical to the fairseq table without padding; odd widths are refused",
    identify_rank=-1,  # the table checkpoints store: named before its equals
    replay="whisper",
)


MARIAN = Preset(
    "marian",
    "HF MarianSinusoidalPositionalEmbedding (Marian, Pegasus)",
    "first ceil(dim/2) channels sin, the rest cos, frequencies base**(-2j/dim)",
    Encoding(layout="halves", widths="split"),
    {},
    "odd widths: ceil(dim/2) sines and floor(dim/2) cosines, with 2j/dim exponents",
)


TIMESTEP = Preset(
    "timestep",
    "diffusers embeddings.get_timestep_embedding (DDPM, Stable Diffusion, DiT)",
    "diffusion timestep embedding of real t, [sin | cos] or [cos | sin]",
    Encoding(shift=1.0, layout="halves", widths="floor"),
    {
        "flip_sin_to_cos": Option(
            "cos half first (False)",
            check_bool,
            lambda enc, v, _: enc.replace(layout="halves-cos-first" if v else "halves"),
        ),
        "downscale_freq_shift": Option(
            "the spacing shift s of max_period**(-k/(n-s)) (1)", real, set_field("shift")
        ),
        "scale": Option("multiplies the timesteps (1)", real, set_field("scale")),
        "max_period": Option("largest period (10000)", positive, set_field("base")),
    },
    "odd widths get one zero channel appended; the original casts t to float32 "
    "(`timesteps.float()`) and posenc encodes the t it is given exactly: float32 t "
    "reproduce the original, float64 t are not rounded first (at t = 12345.678 the two "
    "differ by 1.9e-4)",
    identify=(
        {},
        {"flip_sin_to_cos": True},
        {"flip_sin_to_cos": True, "downscale_freq_shift": 0},
        {"downscale_freq_shift": 0},
    ),
    replay="timestep",
)


MAE = Preset(
    "mae",
    "MAE / ViT-MAE util.pos_embed.get_2d_sincos_pos_embed",
    "2D grid, row-major tokens, [column block | row block], each [sin | cos]",
    Encoding(axis_order=(1, 0), **_2D),  # type: ignore[arg-type]
    {"cls_token": MAE_CLS},
    "the first dim/2 channels encode the column index and the last dim/2 the row "
    "index (the original's names say the opposite); dim % 4 == 0",
    identify=({}, {"cls_token": True}),
)


DIFFUSERS_2D = Preset(
    "diffusers-2d",
    "diffusers embeddings.get_2d_sincos_pos_embed (PixArt, SD3, DiT patch grids)",
    "MAE's layout with positions i / (H / base_size) / interpolation_scale",
    Encoding(axis_order=(1, 0), base_size=16.0, **_2D),  # type: ignore[arg-type]
    {
        "cls_token": Option(
            "prepend extra_tokens zero rows, only with extra_tokens > 0 (False)",
            check_bool,
            lambda enc, v, o: enc.replace(extra_tokens=o.get("extra_tokens", 0) if v else 0),
            grid_only=True,
        ),
        "extra_tokens": Option(
            "number of zero rows, used only with cls_token=True (0)",
            check_int,
            lambda enc, v, o: enc.replace(extra_tokens=v if o.get("cls_token") else 0),
            grid_only=True,
        ),
        "interpolation_scale": Option(
            "divides the positions (1.0)", positive, set_field("interpolation_scale"), True
        ),
        "base_size": Option(
            "grid side at which positions are 0, 1, 2, … (16)",
            positive,
            set_field("base_size"),
            True,
        ),
    },
    "equals MAE when the grid side equals base_size; cls_token=True alone adds no "
    "row (extra_tokens defaults to 0), as in diffusers; the original rounds the scaled "
    "positions to float32 first (up to ~1e-6 off in the table), posenc uses them exact",
    identify=({}, {"cls_token": True, "extra_tokens": 1}),
)


DIFFUSERS_3D = Preset(
    "diffusers-3d",
    "diffusers embeddings.get_3d_sincos_pos_embed (CogVideoX, Latte)",
    "(T, H, W) grid: time block dim/4, then MAE's 2D block over 3*dim/4",
    Encoding(
        ndim=3,
        layout="halves",
        widths="exact",
        fractions=(0.25, 0.375, 0.375),
        axis_order=(0, 2, 1),
    ),
    {
        "spatial_interpolation_scale": Option(
            "divides the H and W positions (1.0)",
            positive,
            lambda enc, v, _: enc.replace(interpolation_scale=_axes(enc, 1, v, v)),
            True,
        ),
        "temporal_interpolation_scale": Option(
            "divides the T positions (1.0)",
            positive,
            lambda enc, v, _: enc.replace(interpolation_scale=_axes(enc, 0, v)),
            True,
        ),
    },
    "the original takes spatial_size as (W, H); posenc.grid takes (T, H, W); "
    "dim % 16 == 0; result [T*H*W, dim], reshape to [T, H*W, dim] for the original's",
    identify=(),  # identify tries tables and 2-D grids only
)


TIMM_2D = Preset(
    "timm-2d",
    "timm layers.pos_embed_sincos.build_sincos2d_pos_embed",
    "2D grid, [sin h | sin w | cos h | cos w] (or per-axis [sin | cos] blocks)",
    Encoding(ndim=2, layout="sin-major", widths="exact"),
    {
        "temperature": TEMPERATURE,
        "interleave_sin_cos": Option(
            "[sin h | cos h | sin w | cos w] (False)",
            check_bool,
            lambda enc, v, _: enc.replace(layout="halves" if v else "sin-major"),
        ),
        "reverse_coord": Option(
            "W before H, in the channels and in the token order (False)",
            check_bool,
            lambda enc, v, _: enc.replace(
                axis_order=(1, 0) if v else None,
                tokens="column-major" if v else "row-major",
            ),
        ),
    },
    "reverse_coord swaps the axes in the channels and the token order both",
    identify=tuple(
        {"reverse_coord": rev, "interleave_sin_cos": inter}
        for rev in (False, True)
        for inter in (False, True)
    ),
)


HF_2D = Preset(
    "hf-2d",
    "HF transformers build_2d_sinusoidal_position_embedding",
    "2D grid, row-major, [sin h | cos h | sin w | cos w]",
    Encoding(**_2D),  # type: ignore[arg-type]
    {"temperature": TEMPERATURE, "cls_token": MAE_CLS},
    "MAE with its halves swapped (AIMv2, RT-DETR and D-FINE in transformers; ViT-MAE "
    "keeps MAE's own function: preset 'mae'); "
    "frequencies temperature**(-k / (dim/4)); dim % 4 == 0",
    identify=({}, {"cls_token": True}),
    identify_rank=-1,  # named before timm-2d's interleave_sin_cos, the same numbers
)


DETR = Preset(
    "detr",
    "DETR models.position_encoding.PositionEmbeddingSine",
    "[y block | x block], each interleaved pairs; 1-based coordinates",
    Encoding(ndim=2, layout="interleaved", widths="exact", grid_offset=1.0),
    {
        "temperature": TEMPERATURE,
        "normalize": Option(
            "divide by the last coordinate + 1e-6, times scale (False)",
            check_bool,
            _detr_normalize,
            True,
        ),
        "scale": Option(
            "with normalize: multiplies the coordinates (2*pi)",
            positive_or_none,
            _detr_scale_apply,
            True,
        ),
    },
    "dim = 2 * num_pos_feats; posenc.detr(mask) gives the NCHW, mask-aware original",
    identify=({}, {"normalize": True}),
)


T2T_ND = Preset(
    "t2t-nd",
    "tensor2tensor common_attention.add_timing_signal_nd",
    "N-D: axis d fills channels [2nd, 2n(d+1)) with [sin | cos], the rest zero",
    Encoding(ndim=None, shift=1.0, layout="halves", widths="floor"),
    {"min_timescale": MIN_TIMESCALE, "max_timescale": MAX_TIMESCALE},
    "n = dim // (2 * ndim) must be >= 2 (the original divides by n - 1 unguarded)",
)


TATP22 = Preset(
    "tatp22",
    "PyPI positional-encodings (tatp22) PositionalEncoding1D/2D/3D",
    "N-D: per-axis interleaved blocks of 2*ceil(dim/(2*ndim)), truncated to dim",
    Encoding(ndim=None, layout="interleaved", widths="ceil"),
    {},
    "frequencies base**(-2k/c) use the padded per-axis width c",
)


NERF = Preset(
    "nerf",
    "NeRF (Mildenhall et al. 2020) get_embedder",
    "[x, sin(2^0 x), cos(2^0 x), …, sin(2^(L-1) x), cos(2^(L-1) x)], no pi",
    Encoding(
        ndim=None,
        spacing="pow2",
        layout="frequency-major",
        widths="exact",
        include_input=True,
    ),
    {
        "include_input": Option(
            "the coordinates themselves come first (True)",
            check_bool,
            set_field("include_input"),
        )
    },
    "frequencies 2**k with no pi (the code, not the paper); dim = ndim * (1 + 2L)",
    identify=(),  # its include_input columns are the raw coordinates, not a sinusoid
)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        VASWANI,
        TENSOR2TENSOR,
        FAIRSEQ,
        WHISPER,
        MARIAN,
        TIMESTEP,
        MAE,
        DIFFUSERS_2D,
        DIFFUSERS_3D,
        TIMM_2D,
        HF_2D,
        DETR,
        T2T_ND,
        TATP22,
        NERF,
    )
}


def _axes(enc: Encoding, first: int, *values: float) -> tuple[float, ...]:
    current = enc.interpolation_scale
    scales = list(current) if isinstance(current, tuple) else [current] * 3
    scales[first : first + len(values)] = values
    return tuple(scales)
