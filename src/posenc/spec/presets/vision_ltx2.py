"""The rotary presets of halves inside each block: Allegro's per-axis halves and LTX-2's
tables (interleaved, or its "split" per-head halves): the ``LTX2_PRESETS`` data (see
:mod:`posenc.spec.presets.vision` for what a vision preset holds).

The ``block-halves`` layout (:func:`posenc.spec.rotary.layout_columns`) cuts a table into
``blocks`` equal blocks, each laid out as halves of its own frequencies: Allegro's three axis
blocks, LTX-2's heads.
"""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError
from posenc.spec.presets.base import RotaryPreset

ALLEGRO_SCALE = (2.2, 2.0, 2.0)
"""Allegro's ``interpolation_scale_t, _h, _w``: positions are grid indices divided by them."""


def _allegro(dim: int, base: float) -> dict[str, Any]:
    """Three blocks of ``dim / 3`` (``embed_dim // 3`` each in diffusers)."""
    if dim % 6:
        raise PosencError(
            f"`dim` = {dim} does not split into allegro's even blocks (dim // 3 per axis, "
            "dim a multiple of 6)"
        )
    return {"axes_dim": (dim // 3,) * 3}


def allegro_positions(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Allegro's positions ``i / s_a``: the grid indices over its interpolation scales."""
    return [0.0] * 3, [1.0 / s for s in ALLEGRO_SCALE]


LTX2_BASES = (20.0, 2048.0, 2048.0)
"""LTX-2's ``base_num_frames`` (``pos_embed_max_pos``), ``base_height``, ``base_width``."""

LTX2_HEADS = 32
"""LTX-2's attention heads (video and audio): the blocks of its ``split`` tables."""

_LTX2_QUIRKS = (
    "d is the attention's inner width (LTX-2: 4096 video, 2048 audio and cross-attention); "
    "the positions are 2c - 1 with c the midpoint of a patch's bounds over the base: "
    "posenc.rope(2 * c - 1, d, preset=…) of the model's coordinates, or posenc.torch.patch; "
    "diffusers computes the ladder's powers in float64 (double_precision, else float32), "
    "then everything in float32, and its largest angles, pi / 2 * 10000 rad, sit at c = 0: "
    "1.2e-3 off at 704 x 1280, 121 frames (4.8e-3 without double_precision)"
)


def _split(dim: int, base: float) -> dict[str, Any]:
    """The ``split`` form: ``blocks`` = LTX-2's 32 heads, a default under the call's
    ``blocks`` or ``layout`` (``rotary`` checks the count that stays against ``dim``)."""
    return {"blocks": LTX2_HEADS}


def _ltx2(name: str, axes: int, split: bool, what: str) -> RotaryPreset:
    layout = "block-halves" if split else "interleaved"
    form = (
        f"halves inside each of {LTX2_HEADS} heads (rope_type='split')"
        if split
        else "pairs (2i, 2i+1) (rope_type='interleaved')"
    )
    return RotaryPreset(
        name,
        f"diffusers LTX2AudioVideoRotaryPosEmbed (LTX-2: {what})",
        f"LTX's one ladder (pi / 2) * 10000 ** (k / (n - 1)), n = d // {2 * axes}, read by "
        f"{axes} position axes in turn, {form} after the still channels; positions 2c - 1",
        4096 if axes == 3 else 2048,
        {"base": 10000.0, "layout": layout, "spacing": "ltx", "ladder_axes": axes},
        _LTX2_QUIRKS,
        axial=_split if split else None,
        originals=(),
    )


LTX2_PRESETS: dict[str, RotaryPreset] = {
    p.name: p
    for p in [
        RotaryPreset(
            "allegro",
            "diffusers get_3d_rotary_pos_embed_allegro and apply_rotary_emb_allegro (Allegro)",
            "3D axial, [t | h | w] blocks of d/3, halves inside each block, base 10000, "
            "positions i / (2.2, 2, 2)",
            96,
            {"base": 10000.0, "layout": "block-halves", "blocks": 3},
            "the pipeline computes the tables (float32, 9.3e-7 off at 720 x 1280, 88 frames) "
            "and the transformer gathers rows by the tokens' integer ids; rotate with "
            "posenc.apply_rope(q, cos, sin, 'block-halves', blocks=3)",
            axial=_allegro,
            positions=allegro_positions,
            originals=("diffusers",),
        ),
        _ltx2("ltx2-video", 3, False, "video self-attention"),
        _ltx2("ltx2-audio", 1, False, "audio self-attention, audio-video cross-attention"),
        _ltx2("ltx2-video-split", 3, True, "video self-attention, rope_type='split'"),
        _ltx2("ltx2-audio-split", 1, True, "audio and cross-attention, rope_type='split'"),
    ]
}
