"""What ``posenc audit`` recognises in a diffusers model's config besides the rotary families
(:mod:`posenc.app.audit_vision`): a UNet's timestep embedding, and the 2D sin-cos ``pos_embed``
table and timestep embedding of the patch transformers that hold one (DiT, PixArt, SD3,
Latte), each a
:class:`~posenc.app.audit_models.Finding`. Configs are read as plain JSON dicts."""

from __future__ import annotations

from typing import Any

import numpy as np

from posenc.app import audit_figures as fig
from posenc.app.audit_models import PATCH, Finding, _call
from posenc.spec.presets.sinusoidal import DIFFUSERS_2D, TIMESTEP


def timestep(
    component: str,
    where: str,
    dim: int,
    flip: bool,
    shift: float,
    t: np.ndarray,
    words: str,
    alternative: str | None = None,
) -> Finding:
    """diffusers ``Timesteps(dim, flip_sin_to_cos, downscale_freq_shift)`` at timesteps ``t``."""
    options = {"flip_sin_to_cos": bool(flip), "downscale_freq_shift": shift}

    def measure() -> tuple[float | None, float | None, str | None]:
        return fig.timestep_figure(dim, options, t), None, None

    return Finding(
        component,
        where,
        f"timestep, d={dim}",
        _call("posenc.encode", "t", dim, preset=TIMESTEP.name, **options),
        float(np.max(t)),
        words,
        "diffusers get_timestep_embedding, float32 (compat='original')",
        PATCH,
        alternative,
        "computed per call in float32, then cast: no bf16 buffer",
        measure=measure,
    )


def patch_grid(component: str, side: int, dim: int, base_size: float, scale: float) -> Finding:
    """diffusers ``PatchEmbed``'s ``pos_embed`` buffer (``get_2d_sincos_pos_embed``)."""

    def measure() -> tuple[float | None, float | None, str | None]:
        a, b = fig.patch_grid_figures(side, dim, base_size, scale)
        return a, b, None

    pos = (side - 1) / (side / base_size) / scale
    return Finding(
        component,
        "pos_embed.pos_embed",
        f"2D sin-cos diffusers-2d, {side}x{side}, d={dim}",
        _call(
            "posenc.grid",
            (side, side),
            dim,
            preset=DIFFUSERS_2D.name,
            base_size=base_size,
            interpolation_scale=scale,
        ),
        pos,
        f"all {side}x{side} cells",
        "diffusers get_2d_sincos_pos_embed: float32 positions, float64 sin/cos, float32 buffer",
        PATCH,
        needs_torch=False,
        measure=measure,
    )


DDPM_T = np.arange(1000.0)
DDPM_WORDS = "timesteps 0…999 (1000 training steps)"
FLOW_T = np.arange(0.0, 1000.25, 0.25)
FLOW_WORDS = "t = 1000 sigma: 0…1000 in steps of 0.25"


PATCH_GRIDS = {
    "SD3Transformer2DModel": "sd3",
    "SD3ControlNetModel": "sd3",
    "PixArtTransformer2DModel": "pixart",
    "DiTTransformer2DModel": "dit",
    "LatteTransformer3DModel": "pixart",
}
"""The diffusers classes whose ``pos_embed`` is their config's 2D sin-cos table, by their
timestep's form; no other is guessed from its keys (AuraFlow's table is learned; Sana's is a
sin-cos table or none, by its ``interpolation_scale``, at ``patch_embed``: built, not read)."""
LEGACY = {"ada_norm_single": "pixart", "ada_norm_zero": "dit"}
"""``Transformer2DModel`` (PixArt-alpha's and DiT's configs) by ``norm_type``, as diffusers
reads it."""
TIMESTEPS = {
    "sd3": ("time_text_embed.time_proj", 0, FLOW_T, FLOW_WORDS),
    "pixart": ("adaln_single.emb.time_proj", 0, DDPM_T, DDPM_WORDS),
    "dit": ("transformer_blocks.*.norm1.emb.time_proj", 1, DDPM_T, DDPM_WORDS),
}
"""Each form's timestep sinusoid (256 channels, flipped): its module, shift and times measured."""


def diffusers_findings(cfg: dict[str, Any], component: str) -> list[Finding]:
    """The encodings of a diffusers model config (``_class_name``); [] when none is
    recognised: a UNet's timestep embedding, a patch transformer's ``pos_embed`` grid and
    timestep embedding (DiT, PixArt, SD3, Latte: :data:`PATCH_GRIDS`). The rotary families (FLUX's
    included) are :mod:`posenc.app.audit_vision`'s."""
    name = str(cfg.get("_class_name", ""))
    out: list[Finding] = []
    channels = cfg.get("block_out_channels")
    if "time_embedding_type" in cfg or name.startswith("UNet"):
        if cfg.get("time_embedding_type", "positional") == "positional" and channels:
            d, flip = int(channels[0]), bool(cfg.get("flip_sin_to_cos", True))
            shift = cfg.get("freq_shift", 0)
            alt = _call(
                "model.time_proj = posenc.torch.Timesteps",
                d,
                flip_sin_to_cos=flip,
                downscale_freq_shift=shift,
            )
            out.append(timestep(component, "time_proj", d, flip, shift, DDPM_T, DDPM_WORDS, alt))
        return out
    legacy = name == "Transformer2DModel"
    form = LEGACY.get(str(cfg.get("norm_type"))) if legacy else PATCH_GRIDS.get(name)
    heads, head_dim = cfg.get("num_attention_heads"), cfg.get("attention_head_dim")
    patch, size = cfg.get("patch_size"), cfg.get("sample_size")
    if form is None or not (heads and head_dim and patch and size and cfg.get("in_channels")):
        return out
    size = size[0] if isinstance(size, list | tuple) else size
    inner, base = int(heads) * int(head_dim), int(size) // int(patch)
    if form == "sd3":
        side, scale = int(cfg.get("pos_embed_max_size") or base), 1.0
    elif name == "DiTTransformer2DModel":
        side, scale = base, 1.0
    else:
        side, scale = base, float(cfg.get("interpolation_scale") or max(int(size) // 64, 1))
    where, shift, times, words = TIMESTEPS[form]
    return [
        patch_grid(component, side, inner, base, scale),
        timestep(component, where, 256, True, shift, times, words),
    ]
