"""Qwen-Image (and Edit), Qwen-Image-Layered, NucleusMoE-Image, Qwen-Image 2.1: ``QwenEmbedRope``
and its copies.
"""

from __future__ import annotations

from posenc.spec.families.base import Audit, Classes, Family, Row, Trained, axes
from posenc.spec.presets.base import RotaryPreset, Table


def qwen_image_positions(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Qwen-Image's ``scale_rope`` coordinates: frames from 0, rows and columns centred,
    ``-(n - n // 2) … n // 2 - 1``."""
    return [0.0, *(-float(n - n // 2) for n in dims[1:])], [1.0] * len(dims)


QWEN_IMAGE = RotaryPreset(
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
    replays={"diffusers": "posenc.compat.diffusers:qwen_image"},
    rows=(Table("QwenEmbedRope's pos_freqs and neg_freqs: -4096 … 4095", ((-4096, 4096),) * 3),),
)


MODULE = Classes("diffusers", "QwenEmbedRope")
"""Qwen-Image's module: complex64 tables of float32 angles."""
LAYERED, NUCLEUS = "QwenEmbedLayer3DRope", "NucleusMoEEmbedRope"
"""Qwen-Image-Layered's module and NucleusMoE-Image's."""
VARIANTS = Classes("diffusers", LAYERED, NUCLEUS)
"""Qwen-Image-Layered's and NucleusMoE-Image's: Qwen-Image's tables at their positions."""
V21 = Classes("diffusers", "QwenImage21Rope")
"""Qwen-Image 2.1's: complex64 rows of positions -1024 … 8191."""

FAMILY = Family(
    "Qwen-Image",
    (QWEN_IMAGE,),
    classes=(MODULE, VARIANTS, V21),
    audits=(
        Audit(
            ("QwenImageTransformer2DModel",),
            QWEN_IMAGE,
            "pos_embed (QwenEmbedRope)",
            (1, 83, 83),
            "1328 x 1328 pixels",
            "diffusers QwenEmbedRope: complex64 tables of float32 angles",
            frames=0,
            keywords=lambda cfg: {
                "axes_dim": axes("axes_dims_rope", (16, 56, 56))(cfg)["axes_dim"]
            },
        ),
    ),
    trained=(
        Trained(
            QWEN_IMAGE, (None, 83, 83), None, "1328 x 1328 px: 83 x 83 tokens", noise_timestep=1.0
        ),
    ),
    docs=(
        Row(
            QWEN_IMAGE,
            "diffusers grids",
            "Qwen-Image, Qwen-Image-Edit, Qwen-Image-Layered, NucleusMoE-Image; Qwen-Image 2.1 "
            "(`posenc.rope(ids)`)",
            "16, 56, 56",
            "frames from 0, rows and columns centred; text `(m + k, m + k, m + k)`",
            layout="interleaved (complex: `compact`)",
            compat="`diffusers` (images; text rows: `patch`)",
        ),
    ),
)
