"""The rotary presets of the families whose complex tables are gathered by ids (Lumina-Next,
Lumina-Image-2.0, Z-Image, Bria-FIBO2): the ``GATHERED_PRESETS`` data (see
:mod:`posenc.spec.presets.vision` for what a vision preset holds).

Each keeps one complex table per position axis (rows ``0 … len - 1``, pairs ``(2i, 2i + 1)``
as complex numbers: the ``interleaved`` layout's numbers, or ``compact`` for
``torch.complex(cos, sin)``) and gathers a token's row of each by its ``(t, h, w)`` ids:
``posenc.rope(ids, d, preset=…)`` with ids ``[N, 3]``, or :func:`posenc.rope_grid` for a grid.
"""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError
from posenc.spec.presets.base import RotaryPreset


def _lumina_next(dim: int, base: float) -> dict[str, Any]:
    """Two blocks of ``dim / 2`` (rows, columns), their frequencies taken in turn."""
    if dim % 4:
        raise PosencError(
            f"`dim` = {dim} does not split into lumina-next's two blocks (dim / 2 per axis, "
            "dim a multiple of 4)"
        )
    return {"axes_dim": (dim // 2, dim // 2)}


GATHERED_PRESETS: dict[str, RotaryPreset] = {
    p.name: p
    for p in [
        RotaryPreset(
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
            originals=("diffusers",),
        ),
        RotaryPreset(
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
            originals=("diffusers", "diffusers-mps"),
        ),
        RotaryPreset(
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
            originals=("diffusers",),
        ),
    ]
}
