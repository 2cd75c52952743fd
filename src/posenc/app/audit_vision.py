"""What ``posenc audit`` recognises of the image and video rotary embeddings in diffusers
model configs: one :class:`~posenc.app.audit_models.Finding` per family's rotary module,
measured on the grid of the size the family is run at (the config holds no resolution).

The figure is the original's own float32 table (posenc's ``compat=`` replay of it, bit for bit
with the original) against the exact float64 one, over every token of that grid; where the
original keeps its tables in buffers (Wan), the bf16 figure is those buffers after
``model.to(torch.bfloat16)``. Adding a family is one :class:`VisionFamily` entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc.api.rope_grid import rope_grid
from posenc.app import audit_figures as fig
from posenc.app.audit_models import FLOW_T, FLOW_WORDS, PATCH, Finding, _call, timestep
from posenc.spec.presets import get_rotary_preset

Keywords = Callable[[dict[str, Any]], dict[str, Any]]


def _head(cfg: dict[str, Any]) -> int:
    return int(cfg.get("attention_head_dim") or 128)


def _none(cfg: dict[str, Any]) -> dict[str, Any]:
    return {}


def _hunyuan(cfg: dict[str, Any]) -> dict[str, Any]:
    axes = tuple(int(a) for a in cfg.get("rope_axes_dim") or (16, 56, 56))
    return {"axes_dim": axes, "base": float(cfg.get("rope_theta") or 256.0)}


def _qwen(cfg: dict[str, Any]) -> dict[str, Any]:
    return {"axes_dim": tuple(int(a) for a in cfg.get("axes_dims_rope") or (16, 56, 56))}


def _axes(key: str, default: tuple[int, ...], theta: float | None = None) -> Keywords:
    """The blocks a config sets under ``key`` (and its ``rope_theta``, when ``theta``)."""

    def read(cfg: dict[str, Any]) -> dict[str, Any]:
        kw: dict[str, Any] = {"axes_dim": tuple(int(a) for a in cfg.get(key) or default)}
        if theta is not None:
            kw["base"] = float(cfg.get("rope_theta") or theta)
        return kw

    return read


def _width(key: str, default: tuple[int, ...]) -> Callable[[dict[str, Any]], int]:
    return lambda cfg: sum(int(a) for a in cfg.get(key) or default)


def _cosmos(cfg: dict[str, Any]) -> dict[str, Any]:
    from posenc.spec.presets.vision import cosmos_bases

    head = _head(cfg)
    side = head // 6 * 2
    axes = (head - 2 * side, side, side)
    scale = tuple(float(s) for s in cfg.get("rope_scale") or (2.0, 1.0, 1.0))
    return {"axes_base": cosmos_bases(axes, 10000.0, scale), "step": (24 / 30, 1.0, 1.0)}


PIPELINE = (
    "the pipeline computes the tables: pass posenc's (the posenc call above, float32) as "
    "image_rotary_emb"
)


@dataclass(frozen=True)
class VisionFamily:
    """A diffusers transformer's rotary embedding: the preset, where the module sits, the grid
    measured (and its words), the head width, the keywords the config sets, the original's
    ``compat=`` mode and what it computes in, and whether it keeps its tables in buffers."""

    preset: str
    where: str
    grid: tuple[int, ...]
    grid_words: str
    original: str
    dim: Callable[[dict[str, Any]], int] = _head
    keywords: Keywords = _none
    compat: str = "diffusers"
    buffers: bool = False
    also: tuple[tuple[str, str], ...] = field(default=())  # (compat mode, where it applies)
    fix: str = PATCH
    largest: float | None = None  # the largest position, when not the grid's last index


_WAN = VisionFamily(
    "wan",
    "rope (WanRotaryPosEmbed)",
    (21, 45, 80),
    "720p, 81 frames",
    "diffusers WanRotaryPosEmbed: float64 tables of rows 0…1023 at init, float32 buffers "
    "(float32 angles on a host with MPS, even on its CPU)",
    buffers=True,
    also=(("diffusers-mps", "on a host with MPS"),),
)
_HUNYUAN = VisionFamily(
    "hunyuan-video",
    "rope (HunyuanVideoRotaryPosEmbed)",
    (33, 45, 80),
    "720p, 129 frames",
    "diffusers HunyuanVideoRotaryPosEmbed: float32 angles per call",
    keywords=_hunyuan,
    dim=lambda cfg: sum(_hunyuan(cfg)["axes_dim"]),
)
_COGVIEW4 = VisionFamily(
    "cogview4",
    "rope (CogView4RotaryPosEmbed)",
    (64, 64),
    "1024 x 1024 pixels",
    "diffusers CogView4RotaryPosEmbed: float32 angles, on the CPU",
)

VISION: dict[str, VisionFamily] = {
    **dict.fromkeys(
        (
            "WanTransformer3DModel",
            "WanVACETransformer3DModel",
            "WanAnimateTransformer3DModel",
            "SkyReelsV2Transformer3DModel",
            "SanaVideoTransformer3DModel",
            "ChronoEditTransformer3DModel",
        ),
        _WAN,
    ),
    **dict.fromkeys(
        ("HunyuanVideoTransformer3DModel", "HunyuanVideo15Transformer3DModel"), _HUNYUAN
    ),
    "CosmosTransformer3DModel": VisionFamily(
        "cosmos",
        "rope (CosmosRotaryPosEmbed)",
        (16, 44, 80),
        "704 x 1280, 121 frames at 30 fps",
        "diffusers CosmosRotaryPosEmbed: float32 angles per call",
        keywords=_cosmos,
    ),
    "QwenImageTransformer2DModel": VisionFamily(
        "qwen-image",
        "pos_embed (QwenEmbedRope)",
        (1, 83, 83),
        "1328 x 1328 pixels",
        "diffusers QwenEmbedRope: complex64 tables of float32 angles",
        keywords=_qwen,
    ),
    "LTXVideoTransformer3DModel": VisionFamily(
        "ltx-video",
        "rope (LTXVideoRotaryPosEmbed)",
        (16, 22, 40),
        "704 x 1280, 121 frames at 25 fps",
        "diffusers LTXVideoRotaryPosEmbed: float32, "
        "its largest angles (pi / 2 * 10000 rad) at the coordinate 0",
        dim=lambda cfg: int(cfg.get("num_attention_heads") or 32) * _head(cfg),
    ),
    "CogView4Transformer2DModel": _COGVIEW4,
    "GlmImageTransformer2DModel": _COGVIEW4,
    "CogVideoXTransformer3DModel": VisionFamily(
        "cogvideox",
        "pipeline (get_3d_rotary_pos_embed)",
        (13, 30, 45),
        "480 x 720, 49 frames",
        "diffusers get_3d_rotary_pos_embed: float32, computed by the pipeline",
        fix=PIPELINE,
    ),
    "HunyuanImageTransformer2DModel": VisionFamily(
        "hunyuan-image",
        "rope (HunyuanImageRotaryPosEmbed)",
        (64, 64),
        "2048 x 2048 pixels",
        "diffusers HunyuanImageRotaryPosEmbed: float32 angles per call",
        keywords=_axes("rope_axes_dim", (64, 64), 256.0),
        dim=_width("rope_axes_dim", (64, 64)),
    ),
    "Kandinsky5Transformer3DModel": VisionFamily(
        "kandinsky5",
        "visual_rope_embeddings (Kandinsky5RoPE3D)",
        (31, 32, 48),
        "512 x 768, 121 frames",
        "diffusers Kandinsky5RoPE3D: float32 angles (exp form)",
        keywords=_axes("axes_dims", (16, 24, 24)),
        dim=_width("axes_dims", (16, 24, 24)),
        largest=23.5,
    ),
    "Kandinsky6Transformer3DModel": VisionFamily(
        "kandinsky6",
        "visual_rope_embeddings (Kandinsky6RoPE3D)",
        (31, 32, 48),
        "512 x 768, 121 frames",
        "diffusers Kandinsky6RoPE3D: float32 angles (exp form)",
        keywords=_axes("axes_dims", (32, 48, 48)),
        dim=_width("axes_dims", (32, 48, 48)),
        largest=23.5,
    ),
    "Lumina2Transformer2DModel": VisionFamily(
        "lumina2",
        "rope_embedder (Lumina2RotaryPosEmbed)",
        (1, 64, 64),
        "1024 x 1024 pixels after a 256-token caption",
        "diffusers Lumina2RotaryPosEmbed: complex128 tables (complex64 on a host with MPS)",
        keywords=lambda cfg: {
            **_axes("axes_dim_rope", (32, 32, 32))(cfg),
            "start": (256.0, 0.0, 0.0),
        },
        dim=_width("axes_dim_rope", (32, 32, 32)),
        largest=256,
        also=(("diffusers-mps", "on a host with MPS"),),
    ),
    "ZImageTransformer2DModel": VisionFamily(
        "z-image",
        "rope_embedder (RopeEmbedder)",
        (1, 64, 64),
        "1024 x 1024 pixels after a 256-token caption",
        "diffusers RopeEmbedder: float64 angles rounded to float32, then cos and sin",
        keywords=lambda cfg: {
            **_axes("axes_dims", (32, 48, 48), 256.0)(cfg),
            "start": (257.0, 0.0, 0.0),
        },
        dim=_width("axes_dims", (32, 48, 48)),
        largest=257,
    ),
    "AllegroTransformer3DModel": VisionFamily(
        "allegro",
        "pipeline (get_3d_rotary_pos_embed_allegro)",
        (22, 45, 80),
        "720 x 1280, 88 frames",
        "diffusers get_3d_rotary_pos_embed_allegro: float32, computed by the pipeline",
        fix=PIPELINE,
        largest=39.5,
    ),
    "HunyuanDiT2DModel": VisionFamily(
        "hunyuan-dit",
        "pipeline (get_2d_rotary_pos_embed)",
        (64, 64),
        "1024 x 1024 pixels",
        "diffusers get_2d_rotary_pos_embed: float32, computed by the pipeline (a crop of "
        "its 32 x 32 base grid)",
        keywords=lambda cfg: {"crop": ((0, 0), (32, 32))},
        fix=PIPELINE,
        largest=31.5,
    ),
}
"""diffusers ``_class_name`` → its rotary family."""


# --- FLUX and the families of its ids ---------------------------------------------------------

ID_FAMILIES: dict[str, tuple[str, str]] = {
    "FluxTransformer2DModel": ("FluxPosEmbed", "flux"),
    "ChromaTransformer2DModel": ("FluxPosEmbed", "flux"),
    "LongCatImageTransformer2DModel": ("LongCatImagePosEmbed", "flux"),
    "OvisImageTransformer2DModel": ("OvisImagePosEmbed", "flux"),
    "BriaTransformer2DModel": ("BriaEmbedND", "flux"),
    "BriaFiboTransformer2DModel": ("BriaFiboEmbedND", "flux"),
    "Flux2Transformer2DModel": ("Flux2PosEmbed", "flux2"),
    "Flux3Transformer2DModel": ("Flux3PosEmbed", "flux3"),
    "Krea2Transformer2DModel": ("Krea2RotaryPosEmbed", "krea2"),
    "HiDreamImageTransformer2DModel": ("HiDreamImageEmbedND", "hidream"),
}
"""diffusers transformers whose rotary tables are FLUX's ``get_1d_rotary_pos_embed`` per axis
of ids (float64 angles; float32 on MPS/NPU): ``_class_name`` → (the module, the preset)."""


def axial(
    component: str,
    axes_dim: tuple[int, ...],
    theta: float,
    side: int,
    module: str = "FluxPosEmbed",
    preset: str = "flux",
) -> Finding:
    """FLUX's ``FluxPosEmbed`` and its kind: axial rotary of ids, float64 on CPU/CUDA, float32
    on MPS/NPU."""

    def measure() -> tuple[float | None, float | None, str | None]:
        a, mps = fig.axial_figures(axes_dim, theta, side)
        return a, None, f"on MPS/NPU diffusers computes in float32: error {mps:.3g} there"

    own = get_rotary_preset(preset).rotary
    extra: dict[str, Any] = {}
    if tuple(axes_dim) != tuple(own.get("axes_dim", ())):
        extra["axes_dim"] = tuple(axes_dim)
    if float(theta) != float(own.get("base", 10000.0)):
        extra["base"] = float(theta)

    return Finding(
        component,
        f"pos_embed ({module})",
        f"axial rotary, axes {tuple(axes_dim)}, base {theta:g}",
        _call("posenc.rope", "ids", sum(axes_dim), preset=preset, **extra),
        side - 1,
        f"ids (0, h, w) for h, w < {side} (2048 px images; the config holds no resolution)",
        f"diffusers {module}: float64 on CPU/CUDA (exact, rounded once), float32 on MPS/NPU",
        "none needed on CPU/CUDA; on MPS/NPU: " + PATCH,
        note="computed per call: no bf16 buffer",
        needs_torch=False,
        measure=measure,
    )


def _ids_findings(cfg: dict[str, Any], component: str, name: str) -> list[Finding]:
    module, preset = ID_FAMILIES.get(name, ("FluxPosEmbed", "flux"))
    own = get_rotary_preset(preset).rotary  # the config's values, else the family's defaults
    axes = tuple(int(a) for a in cfg.get("axes_dims_rope") or own["axes_dim"])
    theta = float(cfg.get("rope_theta") or own["base"])
    out = [axial(component, axes, theta, 128, module, preset)]
    if name in ("FluxTransformer2DModel", ""):  # FLUX.1's own timestep embedding
        where = "time_text_embed.time_proj" + (
            " (and guidance)" if cfg.get("guidance_embeds") else ""
        )
        out.append(timestep(component, where, 256, True, 0, FLOW_T, FLOW_WORDS))
    return out


# --- grids -------------------------------------------------------------------------------------


def vision_findings(cfg: dict[str, Any], component: str) -> list[Finding]:
    """The rotary embedding of a diffusers image or video transformer config (FLUX's and its
    kind's, with FLUX.1's timestep embedding), or [] (CogVideoX without
    ``use_rotary_positional_embeddings`` has none)."""
    name = str(cfg.get("_class_name", ""))
    if name in ID_FAMILIES or (not name and "axes_dims_rope" in cfg):
        return _ids_findings(cfg, component, name)
    family = VISION.get(name)
    if family is None:
        return []
    if name.startswith("CogVideoX") and not cfg.get("use_rotary_positional_embeddings"):
        return []
    return [_finding(family, cfg, component)]


def _finding(f: VisionFamily, cfg: dict[str, Any], component: str) -> Finding:
    dim, kw = f.dim(cfg), f.keywords(cfg)
    shape = " x ".join(str(n) for n in f.grid)

    def measure() -> tuple[float | None, float | None, str | None]:
        exact = rope_grid(f.grid, dim, preset=f.preset, dtype=np.float64, **kw)

        def error(tables: Any) -> float:
            return max(fig._err(t, e) for t, e in zip(tables, exact, strict=True))

        def replayed(compat: str) -> float:  # the replay's float32 tables, as NumPy arrays
            return error(rope_grid(f.grid, dim, preset=f.preset, compat=compat, **kw))

        bf16 = None
        if f.buffers:  # what model.to(torch.bfloat16) leaves in the module's buffers
            rounded = rope_grid(f.grid, dim, preset=f.preset, dtype=np.float32, **kw)
            bf16 = error([fig.bf16(r) for r in rounded])
        notes = [f"{where}: {replayed(mode):.3g}" for mode, where in f.also]
        note = None if not notes else "float32 error " + "; ".join(notes)
        return replayed(f.compat), bf16, note

    shown = {k: v for k, v in kw.items() if k != "axes_base"}
    largest = max(f.grid) - 1 if f.largest is None else f.largest
    return Finding(
        component,
        f.where,
        f"axial rotary {f.preset}, d={dim}",
        _call_grid(f.grid, dim, f.preset, shown),
        largest,
        f"every token of the {shape} grid ({f.grid_words})",
        f.original,
        f.fix,
        note=None if f.buffers else "computed per call: no bf16 buffer",
        measure=measure,
    )


def _call_grid(grid: tuple[int, ...], dim: int, preset: str, kw: dict[str, Any]) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in kw.items())
    return f"posenc.rope_grid({grid}, {dim}, preset={preset!r}{extra})"


# --- timm ------------------------------------------------------------------------------------

TIMM_HEAD = 64
"""The head width measured for timm's rotary models: their ``config.json`` does not hold it
(64 in EVA-02, the ViT-RoPE variants, Perception Encoder core and DINOv3 up to ViT-H+; 128
is assumed for the ``_7b_`` DINOv3)."""
TIMM_FAMILIES = (
    ("dinov3", "dinov3"),
    ("eva02", "eva02"),
    ("vit_pe_", "perception-encoder"),
    ("_rope_mixed", ""),
    ("_rope_reg", "eva02"),
    ("_rope_", "vit-rope"),
)
"""Architecture name fragments → preset, the first match wins ("": learned frequencies)."""


def timm_vision_findings(cfg: dict[str, Any], component: str) -> list[Finding]:
    """A timm rotary vision transformer's table at the size in its ``pretrained_cfg``
    (``compat="timm"`` against exact), or [] for an architecture that is not rotary or whose
    frequencies are learned (the caller says so)."""
    import re

    arch = str(cfg["architecture"])
    preset = next((p for frag, p in TIMM_FAMILIES if frag in arch), "")
    match = re.search(r"patch(\d+)", arch)
    if not preset or not match:
        return []
    size = (cfg.get("pretrained_cfg") or {}).get("input_size") or [3, 224, 224]
    grid = (size[-2] // int(match.group(1)), size[-1] // int(match.group(1)))
    kw: dict[str, Any] = {}
    largest = None
    if preset == "eva02":  # positions i * ref / feat, ref 16 x 16; a fixed size keeps its table
        kw["step"] = (16 / grid[0], 16 / grid[1])
        largest = max((n - 1) * 16 / n for n in grid)
    elif preset == "perception-encoder":  # i + 1 at the native size (i: the gigantic models)
        gigantic = "gigantic" in arch
        if gigantic:
            kw["start"] = (0.0, 0.0)
        largest = max(grid) - (1 if gigantic else 0)
    head = 128 if "_7b_" in arch else TIMM_HEAD
    words = f"{size[-2]} x {size[-1]} pixels, head width {head} assumed"
    family = VisionFamily(
        preset,
        "rope (timm rotary embedding)",
        grid,
        words,
        "timm's rotary embedding: float32 angles",
        compat="timm",
        keywords=lambda cfg: kw,
        dim=lambda cfg: head,
        buffers=preset == "eva02",
        largest=largest,
    )
    return [_finding(family, cfg, component)]
