"""FLUX and the families of its id tables: FLUX.1 (Chroma, LongCat-Image, Ovis-Image, Bria,
Bria-FIBO), FLUX.2, Flux3, Krea 2, HiDream, PRX, ERNIE-Image.

These read no grid: the model builds ``[N, n_axes]`` ids (text tokens and image patches, their
own convention) and each block of the head encodes one column of them. ``posenc.rope(ids, d,
preset=...)`` gives their tables; the patch stand-ins repeat diffusers' own arithmetic with
``compat="original"``.
"""

from __future__ import annotations

from posenc.spec.families.base import Audit, Classes, Family, Row, Trained, axes
from posenc.spec.presets.base import RotaryPreset

FLUX = RotaryPreset(
    "flux",
    "diffusers FluxPosEmbed(theta=10000, axes_dim=(16, 56, 56)); BFL flux rope",
    "axial: interleaved blocks of 16, 56, 56 channels for (t, row, col) ids",
    128,
    {"base": 10000.0, "layout": "interleaved", "axes_dim": (16, 56, 56)},
    "positions are [N, 3] ids (text tokens all zero); diffusers computes in float64, "
    "so its float32 tables are these (float32 on MPS/NPU, where they are not)",
    replays={
        "comfyui-dype": "posenc.compat.dype:comfyui",
        "comfyui-dype-cuda": "posenc.compat.dype:comfyui_cuda",
    },
)


def _ids(
    name: str, origin: str, summary: str, dim: int, base: float, axes: tuple[int, ...], quirks: str
) -> RotaryPreset:
    """An id-table family: interleaved pairs, one block per id column."""
    rotary = {"base": base, "layout": "interleaved", "axes_dim": axes}
    return RotaryPreset(name, origin, summary, dim, rotary, quirks)


FLUX2 = _ids(
    "flux2",
    "diffusers Flux2PosEmbed(theta=2000, axes_dim=(32, 32, 32, 32)); BFL FLUX.2",
    "axial: interleaved blocks of 32, 32, 32, 32 channels for (t, row, col, layer) ids",
    128,
    2000.0,
    (32, 32, 32, 32),
    "ids are [N, 4]: text (0, 0, 0, l), image (0, row, col, 0), reference image k at "
    "t = 10 + 10 k; diffusers computes in float64, so its float32 tables are these "
    "(float32 on MPS/NPU, where they are not)",
)

FLUX3 = _ids(
    "flux3",
    "diffusers Flux3PosEmbed(theta=10000, axes_dim=(32, 32, 32, 32)) (code defaults)",
    "axial: interleaved blocks of 32, 32, 32, 32 channels, base 1e4",
    128,
    10000.0,
    (32, 32, 32, 32),
    "FLUX.2's recipe with Flux3Transformer2DModel's default rope_theta 10000: pass a "
    "checkpoint's own `base` if its config differs; float64 in diffusers",
)

KREA2 = _ids(
    "krea2",
    "diffusers Krea2RotaryPosEmbed(theta=1000, axes_dim=(32, 48, 48)) (Krea 2)",
    "axial: interleaved blocks of 32, 48, 48 channels for (t, row, col) ids, base 1e3",
    128,
    1000.0,
    (32, 48, 48),
    "a copy of FluxPosEmbed (float64 in diffusers, float32 on MPS/NPU)",
)

HIDREAM = _ids(
    "hidream",
    "diffusers HiDreamImageEmbedND(theta=10000, axes_dims_rope=(64, 32, 32)); "
    "HiDream-I1 (BFL's rope)",
    "axial: interleaved blocks of 64, 32, 32 channels for (0, row, col) ids",
    128,
    10000.0,
    (64, 32, 32),
    "the module returns [B, N, 1, d/2, 2, 2] rotation matrices [[cos, -sin], [sin, "
    "cos]] per pair (the patch stand-in builds them from these tables); text ids are "
    "0 and non-square images pad their ids with 0 rows; float64 in diffusers",
)

PRX = _ids(
    "prx",
    "diffusers PRXEmbedND(theta=10000, axes_dim=(32, 32)) (Photoroom PRX)",
    "axial: interleaved blocks of 32, 32 channels for (row, col) ids",
    64,
    10000.0,
    (32, 32),
    "the module returns [B, 1, N, d/2, 2, 2] rotation matrices, as HiDream's; image "
    "tokens only; float64 in diffusers",
)

ERNIE_IMAGE = _ids(
    "ernie-image",
    "diffusers ErnieImageEmbedND3(theta=256, axes_dim=(32, 48, 48)) (ERNIE-Image)",
    "axial: interleaved blocks of 32, 48, 48 channels for (t, row, col) ids, base 256",
    128,
    256.0,
    (32, 48, 48),
    "the module returns the float32 angles [B, S, 1, d] (each pair's twice), and the "
    "attention rotates the halves (rotate_half) by them: channel i turns with the "
    "angle of column i, its partner i + d/2 with that of column i + d/2, so apply "
    "these tables with layout 'halves'; ids: image (text length, row, col), text "
    "(i, 0, 0); diffusers computes in float32",
)


FLUX1_CLASS = "FluxPosEmbed"
"""FLUX.1's own module (the ``flux`` preset's: FLUX.1's training); its copies follow."""
IDS = Classes(
    "diffusers",
    FLUX1_CLASS,
    "LongCatImagePosEmbed",
    "OvisImagePosEmbed",
    "BriaEmbedND",
    "BriaPosEmbed",
    "BriaFiboEmbedND",
    "Krea2RotaryPosEmbed",
)
"""FluxPosEmbed and its copies: per axis of ids, float64 angles (float32 on MPS/NPU), over the
first ``ids.shape[-1]`` blocks of ``axes_dim`` (FLUX.1's loop)."""
EVERY_AXIS = Classes("diffusers", "Flux2PosEmbed", "Flux3PosEmbed")
"""FLUX.2's and FLUX.3's: the same, over every block of ``axes_dim``."""
HIDREAM_CLASS, PRX_CLASS = "HiDreamImageEmbedND", "PRXEmbedND"
"""HiDream's module (the head axis at 2) and PRX's (at 1)."""
MATRICES = Classes("diffusers", HIDREAM_CLASS, PRX_CLASS)
"""Rotation matrices of ids, float64."""
ERNIE_CLASS = "ErnieImageEmbedND3"
ERNIE = Classes("diffusers", ERNIE_CLASS)
"""Float32 angles of ids."""


FIXED = ("axes_dims_rope", None)
"""The config keys of a FLUX-like model whose class fixes its base at 10000 (FLUX.1, Chroma,
LongCat-Image, Ovis-Image, HiDream): its blocks only."""


def _audit(
    models: tuple[str, ...],
    preset: RotaryPreset,
    module: str,
    attribute: str = "pos_embed",
    keys: tuple[str, str | None] = ("axes_dims_rope", "rope_theta"),
) -> Audit:
    """A FLUX-like model's audit: its module at ``attribute``, its blocks and base read from
    its config under ``keys`` (None: a base the model's class fixes), the preset's where the
    config has none."""
    own = preset.rotary
    blocks, theta = tuple(own["axes_dim"]), float(own["base"])
    keywords = axes(keys[0], blocks) if keys[1] is None else axes(keys[0], blocks, theta, keys[1])
    return Audit(
        models,
        preset,
        f"{attribute} ({module})",
        (128, 128),
        "2048 px images; the config holds no resolution",
        f"diffusers {module}: float64 on CPU/CUDA (exact, rounded once), float32 on MPS/NPU",
        ids=True,
        keywords=keywords,
    )


FAMILY = Family(
    "FLUX",
    (FLUX, FLUX2, FLUX3, KREA2, HIDREAM, PRX, ERNIE_IMAGE),
    classes=(IDS, EVERY_AXIS, MATRICES, ERNIE),
    audits=(
        _audit(
            ("FluxTransformer2DModel", "ChromaTransformer2DModel"), FLUX, FLUX1_CLASS, keys=FIXED
        ),
        _audit(("LongCatImageTransformer2DModel",), FLUX, "LongCatImagePosEmbed", keys=FIXED),
        _audit(("OvisImageTransformer2DModel",), FLUX, "OvisImagePosEmbed", keys=FIXED),
        _audit(("BriaTransformer2DModel",), FLUX, "BriaEmbedND"),
        _audit(("BriaFiboTransformer2DModel",), FLUX, "BriaFiboEmbedND"),
        _audit(("Flux2Transformer2DModel",), FLUX2, "Flux2PosEmbed"),
        _audit(("Flux3Transformer2DModel",), FLUX3, "Flux3PosEmbed"),
        _audit(("Krea2Transformer2DModel",), KREA2, "Krea2RotaryPosEmbed", "rotary_emb"),
        _audit(("HiDreamImageTransformer2DModel",), HIDREAM, HIDREAM_CLASS, "pe_embedder", FIXED),
        _audit(("PRXTransformer2DModel",), PRX, PRX_CLASS, "pe_embedder", ("axes_dim", "theta")),
        _audit(
            ("ErnieImageTransformer2DModel",),
            ERNIE_IMAGE,
            ERNIE_CLASS,
            keys=("rope_axes_dim", "rope_theta"),
        ),
    ),
    trained=(
        Trained(
            FLUX,
            (None, 64, 64),
            None,
            "1024 x 1024 px: 64 x 64 tokens (FLUX.1, DyPE's L)",
            noise_timestep=1.0,
        ),
    ),
    docs=(
        Row(
            FLUX,
            "diffusers ids",
            "FLUX.1, Chroma, LongCat-Image, Ovis-Image, Bria, Bria-FIBO",
            "16, 56, 56",
            "ids `(t, row, col)`",
            compat="diffusers' (and the official DyPE code's) by [patch](patch.md); "
            "ComfyUI-DyPE's `comfyui-dype`, `comfyui-dype-cuda` (bfloat16 ladders)",
        ),
        Row(
            FLUX2,
            "diffusers ids",
            "FLUX.2",
            "32, 32, 32, 32",
            "ids `(t, row, col, layer)`; reference image k at t = 10 + 10k",
        ),
        Row(
            FLUX3,
            "diffusers ids",
            "Flux3 (diffusers' code defaults)",
            "32, 32, 32, 32",
            "ids `(t, row, col, layer)`",
        ),
        Row(KREA2, "diffusers ids", "Krea 2", "32, 48, 48", "ids `(0, row, col)`, text all zero"),
        Row(
            HIDREAM,
            "diffusers ids",
            "HiDream-I1 (Full, Dev, Fast)",
            "64, 32, 32",
            "ids `(0, row, col)`, text all zero",
            layout="interleaved (the module returns 2 x 2 rotation matrices)",
        ),
        Row(
            PRX,
            "diffusers ids",
            "PRX (Photoroom)",
            "32, 32",
            "ids `(row, col)`",
            layout="interleaved (2 x 2 rotation matrices)",
        ),
        Row(
            ERNIE_IMAGE,
            "diffusers ids",
            "ERNIE-Image",
            "32, 48, 48",
            "ids: image `(text length, row, col)`, text `(i, 0, 0)`",
            layout="interleaved tables, rotated as halves",
        ),
    ),
)
