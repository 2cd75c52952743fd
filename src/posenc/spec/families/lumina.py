"""Lumina-Next, Lumina-Image-2.0, Z-Image and Bria-FIBO2: complex tables gathered by ids.

Each keeps one complex table per position axis (rows ``0 … len - 1``, pairs ``(2i, 2i + 1)``
as complex numbers: the ``interleaved`` layout's numbers, or ``compact`` for
``torch.complex(cos, sin)``) and gathers a token's row of each by its ``(t, h, w)`` ids:
``posenc.rope(ids, d, preset=…)`` with ids ``[N, 3]``, or :func:`posenc.rope_grid` for a grid.
"""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError
from posenc.spec.families.base import Audit, Classes, Family, Row, Trained, axes, width
from posenc.spec.presets.base import RotaryPreset, Table


def _lumina_next(dim: int, base: float) -> dict[str, Any]:
    """Two blocks of ``dim / 2`` (rows, columns), their frequencies taken in turn."""
    if dim % 4:
        raise PosencError(
            f"`dim` = {dim} does not split into lumina-next's two blocks (dim / 2 per axis, "
            "dim a multiple of 4)"
        )
    return {"axes_dim": (dim // 2, dim // 2)}


LUMINA_NEXT = RotaryPreset(
    "lumina-next",
    "diffusers get_2d_rotary_pos_embed_lumina (Lumina-Next-SFT, LuminaPipeline)",
    "2D, rows and columns d/2 each with the ladder 10000 ** (-2j / (d/2)), taken in "
    "turn per frequency ((h w_0, w w_0, h w_1, …) as complex pairs), base 10000",
    72,
    {"base": 10000.0, "layout": "interleaved", "interleave_axes": True},
    "the pipeline slices a 384 x 384 table (integer rows and columns) and rescales it "
    "by s = sqrt(H W) / 1024 px: linear_factor = s divides the frequencies "
    "(axes_scale=(1 / s, 1 / s)) before scaling_watershed, ntk_factor = s multiplies "
    "the base (base=10000 * s) after; diffusers computes in float32 (complex64)",
    axial=_lumina_next,
    replays={"diffusers": "posenc.compat.diffusers_gathered:lumina_next"},
)


LUMINA2 = RotaryPreset(
    "lumina2",
    "diffusers Lumina2RotaryPosEmbed (Lumina-Image-2.0)",
    "3D, [t | h | w] blocks of 32, 32, 32 as complex pairs, base 10000; captions at "
    "(i, 0, 0), image patches at (L, row, column), L the caption length",
    96,
    {"base": 10000.0, "layout": "interleaved", "axes_dim": (32, 32, 32)},
    "diffusers keeps complex128 tables (float64 angles, 1.4e-14 off) on CPU and CUDA, "
    "so its rotations run in float64: compat='diffusers' with dtype=torch.float64 "
    "gives their real and imaginary parts (layout='compact', torch.complex(cos, sin) "
    "the table); on a host with MPS (even on its CPU) they are complex64 from float32 "
    "angles (1.7e-5 off: 'diffusers-mps'); tables of 300, 512, 512 rows",
    replays={
        "diffusers": "posenc.compat.diffusers_gathered:lumina2",
        "diffusers-mps": "posenc.compat.diffusers_gathered:lumina2",
    },
    rows=(
        Table(
            "Lumina2RotaryPosEmbed's axes_lens = (300, 512, 512)", ((0, 300), (0, 512), (0, 512))
        ),
    ),
)


Z_IMAGE = RotaryPreset(
    "z-image",
    "diffusers RopeEmbedder of transformer_z_image (Z-Image, Z-Image-Turbo, its "
    "ControlNet) and of transformer_bria_fibo2 (Bria-FIBO2)",
    "3D, [t | h | w] blocks of 32, 48, 48 as complex pairs, base 256; captions at "
    "(i, 0, 0) for i = 1 … Lc, image patches at (Lc + 1 + frame, row, column), padding "
    "tokens at (0, 0, 0)",
    128,
    {"base": 256.0, "layout": "interleaved", "axes_dim": (32, 48, 48)},
    "diffusers computes the angles in float64 and rounds them to float32 before cos "
    "and sin (complex64): 3.0e-5 off at row 1023; Lc is the caption length rounded up "
    "to a multiple of 32 (its padding slots get positions too); tables of 1024 (FIBO2: "
    "2048), 512, 512 rows",
    replays={"diffusers": "posenc.compat.diffusers_gathered:z_image"},
    rows=(
        Table(
            "RopeEmbedder's axes_lens: Z-Image's (1024, 512, 512), Bria-FIBO2's (2048, 512, 512)",
            ((0, 2048), (0, 512), (0, 512)),
        ),
    ),
)


LUMINA2_MODULE = Classes("diffusers", "Lumina2RotaryPosEmbed")
"""Lumina-Image-2.0's module: complex128 tables (complex64 on a host with MPS)."""

FAMILY = Family(
    "Lumina",
    (LUMINA_NEXT, LUMINA2, Z_IMAGE),
    classes=(LUMINA2_MODULE,),
    audits=(
        Audit(
            ("LuminaNextDiT2DModel",),
            LUMINA_NEXT,
            "pipeline (get_2d_rotary_pos_embed_lumina)",
            (64, 64),
            "1024 x 1024 pixels (the pipeline's factor s = 1)",
            "diffusers get_2d_rotary_pos_embed_lumina: float32 (complex64), computed by the "
            "pipeline",
            fix="pipeline",
            dim=lambda cfg: (
                int(cfg.get("hidden_size") or 2304) // int(cfg.get("num_attention_heads") or 32)
            ),
        ),
        Audit(
            ("Lumina2Transformer2DModel",),
            LUMINA2,
            "rope_embedder (Lumina2RotaryPosEmbed)",
            (1, 64, 64),
            "1024 x 1024 pixels after a 256-token caption",
            "diffusers Lumina2RotaryPosEmbed: complex128 tables (complex64 on a host with MPS)",
            frames=0,
            keywords=lambda cfg: {
                **axes("axes_dim_rope", (32, 32, 32))(cfg),
                "start": (256.0, 0.0, 0.0),
            },
            dim=width("axes_dim_rope", (32, 32, 32)),
            largest=256,
            also=(("diffusers-mps", "on a host with MPS"),),
        ),
        Audit(
            ("ZImageTransformer2DModel",),
            Z_IMAGE,
            "rope_embedder (RopeEmbedder)",
            (1, 64, 64),
            "1024 x 1024 pixels after a 256-token caption",
            "diffusers RopeEmbedder: float64 angles rounded to float32, then cos and sin",
            frames=0,
            keywords=lambda cfg: {
                **axes("axes_dims", (32, 48, 48), 256.0)(cfg),
                "start": (257.0, 0.0, 0.0),
            },
            dim=width("axes_dims", (32, 48, 48)),
            largest=257,
        ),
    ),
    trained=(
        Trained(LUMINA_NEXT, (64, 64), None, "1024 x 1024 px: 64 x 64 tokens"),
        Trained(LUMINA2, (None, 64, 64), None, "1024 x 1024 px: 64 x 64 tokens"),
        Trained(Z_IMAGE, (None, 64, 64), None, "1024 x 1024 px: 64 x 64 tokens"),
    ),
    docs=(
        Row(
            LUMINA_NEXT,
            "diffusers grids",
            "Lumina-Next-SFT",
            "`d/2`, `d/2`, taken in turn per frequency",
            "integers (a 384 x 384 table); linear factor `s`: `axes_scale=(1/s, 1/s)`",
            base="1e4 (NTK: `1e4 s`)",
            layout="interleaved (complex: `compact`)",
        ),
        Row(
            LUMINA2,
            "diffusers grids",
            "Lumina-Image-2.0",
            "32, 32, 32",
            "ids: caption `(i, 0, 0)`, image `(L, row, col)` (`posenc.rope(ids)`, or `start=(L, "
            "0, 0)`)",
            layout="interleaved (complex: `compact`)",
            compat=(
                "`diffusers`, `diffusers-mps` (grids: caption `(L, 1, 1)`, image `start=(L, 0, 0)`)"
            ),
        ),
        Row(
            Z_IMAGE,
            "diffusers grids",
            "Z-Image, Z-Image-Turbo, its ControlNet, Bria-FIBO2",
            "32, 48, 48",
            "ids: caption `(1 … Lc, 0, 0)`, image `(Lc + 1 + f, row, col)`, padding `(0, 0, 0)`",
            layout="interleaved (complex: `compact`)",
            compat=(
                "`diffusers` (grids: caption `(Lc, 1, 1)` at `start=(1, 0, 0)`, image "
                "`start=(Lc + 1, 0, 0)`, padding `(1, 1, 1)`)"
            ),
        ),
    ),
)
