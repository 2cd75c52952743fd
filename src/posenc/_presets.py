"""Presets: every convention in use, as data.

A sinusoidal preset is an :class:`~posenc._spec.Encoding` plus the keyword options its
original exposes, under the original's own names (``max_timescale``, ``temperature``,
``flip_sin_to_cos``, …). A rotary preset (:class:`RotaryPreset`) is the keywords of
:func:`posenc.rope` a model family uses. Adding a convention means adding an entry here, not a
code path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._spec import Encoding
from ._validate import MAX_POSITION, PosencError, check_bool, check_int, check_real, show, suggest

Apply = Callable[[Encoding, Any, Mapping[str, Any]], Encoding]


@dataclass(frozen=True)
class Option:
    """One keyword option of a preset: how it is checked and what it changes."""

    doc: str
    check: Callable[[str, Any], Any]
    apply: Apply
    grid_only: bool = False


@dataclass(frozen=True)
class Preset:
    """A named convention.

    Attributes:
        name: the name to pass as ``preset=``.
        origin: the project and function whose output it reproduces.
        summary: one line on what it is.
        encoding: the :class:`Encoding` it stands for, before options.
        options: keyword options, by the original's names.
        quirks: behaviour of the original that is reproduced on purpose.

    Examples:
        >>> p = posenc.preset("fairseq")
        >>> p.origin
        'fairseq modules.SinusoidalPositionalEmbedding.get_embedding'
        >>> sorted(p.options)
        ['padding_idx']
    """

    name: str
    origin: str
    summary: str
    encoding: Encoding
    options: Mapping[str, Option] = field(default_factory=dict)
    quirks: str = ""

    def label(self, options: Mapping[str, Any]) -> str:
        """How error messages name this preset with the caller's options."""
        given = ", ".join(f"`{k}`={show(v)}" for k, v in options.items())
        return repr(self.name) + (f" with {given}" if given else "")

    def resolve(self, options: Mapping[str, Any], *, grid: bool) -> Encoding:
        """The Encoding for these options; unknown or misplaced options are refused."""
        for key in options:
            if key not in self.options:
                allowed = ", ".join(sorted(self.options)) or "none"
                raise PosencError(
                    f"unknown option `{key}` for preset {self.name!r}{suggest(key, self.options)}"
                    f"; its options are: {allowed}"
                )
            if self.options[key].grid_only and not grid:
                raise PosencError(
                    f"option `{key}` of preset {self.name!r} applies to posenc.grid() only; "
                    "encode() takes coordinates as they are"
                )
        checked = {k: self.options[k].check(k, v) for k, v in options.items()}
        enc = self.encoding
        for key, value in checked.items():
            enc = self.options[key].apply(enc, value, checked)
        return enc


def _set(name: str) -> Apply:
    return lambda enc, v, _: enc.replace(**{name: v})


def _positive(key: str, v: Any) -> float:
    return check_real(key, v, positive=True)


def _real(key: str, v: Any) -> float:
    return check_real(key, v)


def _index(key: str, v: Any) -> int | None:
    return None if v is None else check_int(key, v, maximum=int(MAX_POSITION))


def _detr_scale(key: str, v: Any) -> float | None:
    return None if v is None else check_real(key, v, positive=True)


def _detr_normalize(enc: Encoding, v: bool, opts: Mapping[str, Any]) -> Encoding:
    scale = opts.get("scale")
    if scale is not None and not v:
        raise PosencError("option `scale` of preset 'detr' needs normalize=True (as in DETR)")
    return enc.replace(normalize=v, scale=(2 * math.pi if scale is None else scale) if v else 1.0)


def _detr_scale_apply(enc: Encoding, v: float | None, opts: Mapping[str, Any]) -> Encoding:
    return _detr_normalize(enc, opts.get("normalize", False), opts)


BASE = Option("largest timescale (10000)", _positive, _set("base"))
TEMPERATURE = Option("largest timescale, `temperature` (10000)", _positive, _set("base"))
MIN_TIMESCALE = Option(
    "multiplies every frequency (tensor2tensor's behaviour; 1.0)", _positive, _set("min_timescale")
)
MAX_TIMESCALE = Option("largest timescale (10000)", _positive, _set("base"))
MAE_CLS = Option(
    "prepend one all-zero row for the class token (False)",
    check_bool,
    lambda enc, v, _: enc.replace(extra_tokens=int(v)),
    grid_only=True,
)

_2D = {"ndim": 2, "layout": "halves", "widths": "exact"}

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(
            "vaswani",
            "Vaswani et al. 2017, 'Attention Is All You Need'; PyTorch tutorial, labml",
            "interleaved [sin, cos] pairs, paper spacing base**(-2i/dim)",
            Encoding(layout="interleaved", widths="exact"),
            {"base": BASE},
            "odd widths are refused",
        ),
        Preset(
            "tensor2tensor",
            "tensor2tensor common_attention.get_timing_signal_1d; THUMT",
            "[sin | cos] halves, last frequency exactly min_timescale/max_timescale",
            Encoding(shift=1.0, guard=True, layout="halves", widths="floor"),
            {"min_timescale": MIN_TIMESCALE, "max_timescale": MAX_TIMESCALE},
            "frequencies are min_timescale * (max/min)**(-k/(n-1)): the original multiplies by "
            "min_timescale (reported upstream, never changed); n - 1 is floored at 1, so "
            "dim 2 and 3 work; odd widths get one zero channel appended",
        ),
        Preset(
            "fairseq",
            "fairseq modules.SinusoidalPositionalEmbedding.get_embedding",
            "the tensor2tensor table; row padding_idx is all zero",
            Encoding(shift=1.0, layout="halves", widths="floor"),
            {
                "padding_idx": Option(
                    "position whose row is zero (None)", _index, _set("padding_idx")
                )
            },
            "row p encodes position p; fairseq numbers tokens from padding_idx + 1 "
            "(see posenc.fairseq_positions) and maps pads to the zero row; odd widths get one "
            "zero channel appended; dim must give n >= 2 frequencies (n - 1 is a divisor)",
        ),
        Preset(
            "whisper",
            "OpenAI whisper.model.sinusoids; HF WhisperEncoder",
            "[sin | cos] halves, tensor2tensor spacing",
            Encoding(shift=1.0, layout="halves", widths="exact"),
            {"max_timescale": MAX_TIMESCALE},
            "identical to the fairseq table without padding; odd widths are refused",
        ),
        Preset(
            "marian",
            "HF MarianSinusoidalPositionalEmbedding (Marian, Pegasus)",
            "first ceil(dim/2) channels sin, the rest cos, frequencies base**(-2j/dim)",
            Encoding(layout="halves", widths="split"),
            {},
            "odd widths: ceil(dim/2) sines and floor(dim/2) cosines, with 2j/dim exponents",
        ),
        Preset(
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
                    "the spacing shift s of max_period**(-k/(n-s)) (1)", _real, _set("shift")
                ),
                "scale": Option("multiplies the timesteps (1)", _real, _set("scale")),
                "max_period": Option("largest period (10000)", _positive, _set("base")),
            },
            "odd widths get one zero channel appended; the original casts t to float32 "
            "(`timesteps.float()`) and posenc encodes the t it is given exactly: float32 t "
            "reproduce the original, float64 t are not rounded first (at t = 12345.678 the two "
            "differ by 1.9e-4)",
        ),
        Preset(
            "mae",
            "MAE / ViT-MAE util.pos_embed.get_2d_sincos_pos_embed",
            "2D grid, row-major tokens, [column block | row block], each [sin | cos]",
            Encoding(axis_order=(1, 0), **_2D),  # type: ignore[arg-type]
            {"cls_token": MAE_CLS},
            "the first dim/2 channels encode the column index and the last dim/2 the row "
            "index (the original's names say the opposite); dim % 4 == 0",
        ),
        Preset(
            "diffusers-2d",
            "diffusers embeddings.get_2d_sincos_pos_embed (PixArt, SD3, DiT patch grids)",
            "MAE's layout with positions i / (H / base_size) / interpolation_scale",
            Encoding(axis_order=(1, 0), base_size=16.0, **_2D),  # type: ignore[arg-type]
            {
                "cls_token": Option(
                    "prepend extra_tokens zero rows, only with extra_tokens > 0 (False)",
                    check_bool,
                    lambda enc, v, o: enc.replace(
                        extra_tokens=o.get("extra_tokens", 0) if v else 0
                    ),
                    grid_only=True,
                ),
                "extra_tokens": Option(
                    "number of zero rows, used only with cls_token=True (0)",
                    check_int,
                    lambda enc, v, o: enc.replace(extra_tokens=v if o.get("cls_token") else 0),
                    grid_only=True,
                ),
                "interpolation_scale": Option(
                    "divides the positions (1.0)", _positive, _set("interpolation_scale"), True
                ),
                "base_size": Option(
                    "grid side at which positions are 0, 1, 2, … (16)",
                    _positive,
                    _set("base_size"),
                    True,
                ),
            },
            "equals MAE when the grid side equals base_size; cls_token=True alone adds no "
            "row (extra_tokens defaults to 0), as in diffusers; the original rounds the scaled "
            "positions to float32 first (up to ~1e-6 off in the table), posenc uses them exact",
        ),
        Preset(
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
                    _positive,
                    lambda enc, v, _: enc.replace(interpolation_scale=_axes(enc, 1, v, v)),
                    True,
                ),
                "temporal_interpolation_scale": Option(
                    "divides the T positions (1.0)",
                    _positive,
                    lambda enc, v, _: enc.replace(interpolation_scale=_axes(enc, 0, v)),
                    True,
                ),
            },
            "the original takes spatial_size as (W, H); posenc.grid takes (T, H, W); "
            "dim % 16 == 0; result [T*H*W, dim], reshape to [T, H*W, dim] for the original's",
        ),
        Preset(
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
        ),
        Preset(
            "hf-2d",
            "HF transformers build_2d_sinusoidal_position_embedding",
            "2D grid, row-major, [sin h | cos h | sin w | cos w]",
            Encoding(**_2D),  # type: ignore[arg-type]
            {"temperature": TEMPERATURE, "cls_token": MAE_CLS},
            "MAE with its halves swapped (ViT-MAE, AIMv2, RT-DETR and D-FINE in transformers); "
            "frequencies temperature**(-k / (dim/4)); dim % 4 == 0",
        ),
        Preset(
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
                    _detr_scale,
                    _detr_scale_apply,
                    True,
                ),
            },
            "dim = 2 * num_pos_feats; posenc.detr(mask) gives the NCHW, mask-aware original",
        ),
        Preset(
            "t2t-nd",
            "tensor2tensor common_attention.add_timing_signal_nd",
            "N-D: axis d fills channels [2nd, 2n(d+1)) with [sin | cos], the rest zero",
            Encoding(ndim=None, shift=1.0, layout="halves", widths="floor"),
            {"min_timescale": MIN_TIMESCALE, "max_timescale": MAX_TIMESCALE},
            "n = dim // (2 * ndim) must be >= 2 (the original divides by n - 1 unguarded)",
        ),
        Preset(
            "tatp22",
            "PyPI positional-encodings (tatp22) PositionalEncoding1D/2D/3D",
            "N-D: per-axis interleaved blocks of 2*ceil(dim/(2*ndim)), truncated to dim",
            Encoding(ndim=None, layout="interleaved", widths="ceil"),
            {},
            "frequencies base**(-2k/c) use the padded per-axis width c",
        ),
        Preset(
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
                    _set("include_input"),
                )
            },
            "frequencies 2**k with no pi (the code, not the paper); dim = ndim * (1 + 2L)",
        ),
    ]
}


@dataclass(frozen=True)
class RotaryPreset:
    """A model family's rotary embedding: the keywords of :func:`posenc.rope` it uses.

    Attributes:
        name: the name to pass as ``preset=`` to :func:`posenc.rope` and
            :class:`posenc.torch.RotaryEmbedding`.
        origin: the projects and functions whose tables it reproduces.
        summary: one line on what it is.
        dim: the family's rotary width (``head_dim`` times any partial factor); a preset does
            not fix it: pass your model's.
        rotary: the keywords (``base``, ``scaling``, ``layout``, ``sections``,
            ``interleave_sections``, ``axes_dim``); keywords given with the preset replace
            these.
        quirks: what to know when porting a checkpoint.

    Examples:
        >>> p = posenc.preset("llama3")
        >>> p.rotary["base"], p.rotary["scaling"]["rope_type"]
        (500000.0, 'llama3')
        >>> cos, sin = posenc.rope(np.arange(16), 128, preset="llama3")
    """

    name: str
    origin: str
    summary: str
    dim: int
    rotary: Mapping[str, Any]
    quirks: str = ""

    def settings(self) -> str:
        """The keywords, as a call would spell them."""
        return ", ".join(f"{k}={v!r}" for k, v in self.rotary.items())


_YARN_V3 = {
    "rope_type": "yarn",
    "factor": 40.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}

ROTARY_PRESETS: dict[str, RotaryPreset] = {
    p.name: p
    for p in [
        RotaryPreset(
            "llama",
            "transformers LlamaRotaryEmbedding (Llama 2, Mistral 7B, most 5.x decoders)",
            "halves (rotate_half), base 10000, no scaling",
            128,
            {"base": 10000.0, "layout": "halves"},
            "Meta's own llama code pairs channels (2i, 2i+1) (layout='interleaved'); HF "
            "checkpoints permute the q/k rows so halves gives the same attention",
        ),
        RotaryPreset(
            "llama3",
            "transformers rope_type 'llama3'; meta-llama/llama-models apply_scaling (3.1-3.3)",
            "halves, base 500000, llama3 frequency scaling x8 from 8192 positions",
            128,
            {
                "base": 500000.0,
                "layout": "halves",
                "scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                },
            },
            "Llama 3.2 1B/3B use factor 32: pass scaling= with the model's own dict",
        ),
        RotaryPreset(
            "qwen2",
            "transformers Qwen2RotaryEmbedding (Qwen2, Qwen2.5, Qwen3)",
            "halves, base 1000000",
            128,
            {"base": 1000000.0, "layout": "halves"},
            "Qwen ignores partial_rotary_factor in its default rule (every channel rotates)",
        ),
        RotaryPreset(
            "neox",
            "transformers GPTNeoXRotaryEmbedding; EleutherAI gpt-neox (Pythia)",
            "halves over the first rotary_pct (0.25) of each head, base 10000",
            32,
            {"base": 10000.0, "layout": "halves"},
            "pass dim = int(head_dim * rotary_pct) (Pythia: 128 * 0.25 = 32); apply_rope and "
            "RotaryEmbedding pass the other channels through",
        ),
        RotaryPreset(
            "gptj",
            "transformers GPTJ (rotate_every_two); EleutherAI mesh-transformer-jax",
            "interleaved pairs (2i, 2i+1) over rotary_dim 64 of 256, base 10000",
            64,
            {"base": 10000.0, "layout": "interleaved"},
            "GPT-J stores its table as [sin | cos] rows; the numbers are these",
        ),
        RotaryPreset(
            "cohere",
            "transformers CohereRotaryEmbedding (Command R)",
            "interleaved pairs (repeat_interleave), base 500000 (CohereConfig's default)",
            128,
            {"base": 500000.0, "layout": "interleaved"},
            "checkpoints set their own rope_theta: pass the config's as base=",
        ),
        RotaryPreset(
            "qwen2-vl",
            "transformers Qwen2VLTextModel rotary (mrope), Qwen2.5-VL",
            "halves, base 1000000, sections (16, 24, 24) of the 64 frequencies for t, h, w",
            128,
            {"base": 1000000.0, "layout": "halves", "sections": (16, 24, 24)},
            "positions are [3, batch, seq] (temporal, height, width); text tokens repeat one id",
        ),
        RotaryPreset(
            "qwen3-vl",
            "transformers Qwen3VLTextModel rotary (interleaved mrope)",
            "halves, base 500000, sections (24, 20, 20) assigned round robin",
            128,
            {
                "base": 500000.0,
                "layout": "halves",
                "sections": (24, 20, 20),
                "interleave_sections": True,
            },
            "frequency j reads h if j % 3 == 1 and j < 60, w if j % 3 == 2 and j < 60, else t; "
            "base is Qwen3VLTextConfig's default: checkpoints set their own rope_theta",
        ),
        RotaryPreset(
            "flux",
            "diffusers FluxPosEmbed(theta=10000, axes_dim=(16, 56, 56)); BFL flux rope",
            "axial: interleaved blocks of 16, 56, 56 channels for (t, row, col) ids",
            128,
            {"base": 10000.0, "layout": "interleaved", "axes_dim": (16, 56, 56)},
            "positions are [N, 3] ids (text tokens all zero); diffusers computes in float64, "
            "so its float32 tables are these (float32 on MPS/NPU, where they are not)",
        ),
        RotaryPreset(
            "deepseek-v3",
            "transformers DeepseekV3RotaryEmbedding; deepseek-ai DeepSeek-V3 config",
            "YaRN x40 from 4096 (beta 32/1, mscale 1/1), qk_rope_head_dim 64, pairs (2i, 2i+1)",
            64,
            {"base": 10000.0, "layout": "interleaved", "scaling": _YARN_V3},
            "HF writes the rotated pairs in halves order (the same for q and k, so the same "
            "attention); the softmax scale also takes mscale**2: posenc.softmax_scale",
        ),
        RotaryPreset(
            "gpt-oss",
            "transformers GptOssRotaryEmbedding (gpt-oss-20b/120b)",
            "compact tables (d/2 columns), halves pairs, YaRN x32 from 4096, base 150000",
            64,
            {
                "base": 150000.0,
                "layout": "compact",
                "scaling": {
                    "rope_type": "yarn",
                    "factor": 32.0,
                    "original_max_position_embeddings": 4096,
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "truncate": False,
                },
            },
            "YaRN's correction range is not rounded to integers (truncate: False)",
        ),
    ]
}


def _axes(enc: Encoding, first: int, *values: float) -> tuple[float, ...]:
    current = enc.interpolation_scale
    scales = list(current) if isinstance(current, tuple) else [current] * 3
    scales[first : first + len(values)] = values
    return tuple(scales)


def get_preset(name: Any) -> Preset:
    """The sinusoidal preset called ``name``; an unknown name is refused with the closest
    one, a rotary preset with where it belongs."""
    if isinstance(name, Preset):
        return name
    if isinstance(name, RotaryPreset) or (isinstance(name, str) and name in ROTARY_PRESETS):
        rotary = name if isinstance(name, str) else name.name
        raise PosencError(
            f"`preset` {rotary!r} is a rotary preset: use posenc.rope(positions, dim, "
            f"preset={rotary!r}) or posenc.torch.RotaryEmbedding(dim, preset={rotary!r})"
        )
    if not isinstance(name, str):
        raise PosencError(f"`preset` must be a preset name or a posenc.Preset, got {show(name)}")
    if name not in PRESETS:
        raise PosencError(
            f"`preset` {show(name)} is unknown{suggest(name, PRESETS)}; "
            f"presets are: {', '.join(PRESETS)}"
        )
    return PRESETS[name]


def get_rotary_preset(name: Any) -> RotaryPreset:
    """The rotary preset called ``name``."""
    if isinstance(name, RotaryPreset):
        return name
    if isinstance(name, str) and name in PRESETS:
        raise PosencError(
            f"`preset` {name!r} is a sinusoidal preset, added to activations "
            f"(posenc.table, posenc.torch.PositionalEncoding); rotary presets are: "
            f"{', '.join(ROTARY_PRESETS)}"
        )
    if not isinstance(name, str) or name not in ROTARY_PRESETS:
        hint = suggest(name, ROTARY_PRESETS) if isinstance(name, str) else ""
        raise PosencError(
            f"`preset` {show(name)} is not a rotary preset{hint}; rotary presets are: "
            f"{', '.join(ROTARY_PRESETS)}"
        )
    return ROTARY_PRESETS[name]
