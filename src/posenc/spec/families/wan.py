"""Wan 2.1/2.2 and the models built on its rotary module: SkyReels-V2, Sana-Video, ChronoEdit,
Wan-Animate, Wan-VACE, SANA-WM and AnyFlow (complex tables), Helios (Wan's blocks at its frame
indices).
"""

from __future__ import annotations

from typing import Any

from posenc.spec.families.base import Audit, Classes, Family, Row, Trained, split
from posenc.spec.presets.base import RotaryPreset, Table


def _wan(dim: int, base: float) -> dict[str, Any]:
    side = 2 * (dim // 6)
    return split("wan", dim, "h = w = 2 * (dim // 6), t the rest", (dim - 2 * side, side, side))


WAN = RotaryPreset(
    "wan",
    "diffusers WanRotaryPosEmbed (Wan 2.1/2.2, SkyReels-V2, Sana-Video, ChronoEdit)",
    "3D axial, [t | h | w] blocks interleaved, h = w = 2 (d // 6), base 10000",
    128,
    {"base": 10000.0, "layout": "interleaved"},
    "diffusers keeps float64 tables of rows 0 … 1023 as float32 buffers: exact, except "
    "on a host with MPS (float32 angles, even on the CPU) and after .to(bfloat16)",
    axial=_wan,
    replays={
        "diffusers": "posenc.compat.diffusers:wan",
        "diffusers-mps": "posenc.compat.diffusers:wan",
    },
    rows=(Table("WanRotaryPosEmbed's max_seq_len = 1024", ((0, 1024),) * 3),),
)


BUFFERS = Classes("diffusers", "WanRotaryPosEmbed", "SkyReelsV2RotaryPosEmbed")
"""Wan's module: float32 buffers of rows ``0 … max_seq_len - 1`` per axis (float64 angles)."""
CHRONOEDIT = Classes("diffusers", "ChronoEditRotaryPosEmbed")
"""Wan's buffers, with no theta kept."""
COMPLEX = Classes("diffusers", "SanaWMRotaryPosEmbed", "AnyFlowRotaryPosEmbed")
"""Wan's blocks as complex rows (SANA-WM complex64 of float32 angles, AnyFlow complex128)."""
HELIOS = Classes("diffusers", "HeliosRotaryPosEmbed")
"""Helios's: Wan's blocks and base at given frame indices, in HunyuanVideo's float32
arithmetic, cos then sin channels first."""
CAUSAL = Classes("diffusers", "AnyFlowCausalRotaryPosEmbed")
"""AnyFlow FAR's: compressed context frames pooled."""

FAMILY = Family(
    "Wan",
    (WAN,),
    classes=(BUFFERS, CHRONOEDIT, COMPLEX, CAUSAL, HELIOS),
    audits=(
        Audit(
            (
                "WanTransformer3DModel",
                "WanVACETransformer3DModel",
                "WanAnimateTransformer3DModel",
                "SkyReelsV2Transformer3DModel",
                "SanaVideoTransformer3DModel",
                "ChronoEditTransformer3DModel",
            ),
            WAN,
            "rope (WanRotaryPosEmbed)",
            (21, 45, 80),
            "720p, 81 frames",
            "diffusers WanRotaryPosEmbed: float64 tables of rows 0…1023 at init, float32 "
            "buffers (float32 angles on a host with MPS, even on its CPU)",
            buffers=True,
            also=(("diffusers-mps", "on a host with MPS"),),
        ),
    ),
    trained=(
        Trained(
            WAN,
            (21, 45, 80),
            51,
            "81 frames of 720p (Wan 2.1 14B); RIFLEx's pair 6 (ComfyUI-WanVideoWrapper's "
            "default), period 51 latent frames",
            noise_timestep=1000.0,
        ),
    ),
    docs=(
        Row(
            WAN,
            "diffusers grids",
            "Wan 2.1/2.2, SkyReels-V2, Sana-Video, Wan-Animate, ChronoEdit; Helios (frame ids: "
            "`posenc.rope(ids)`); SANA-WM, AnyFlow (complex: `compact`)",
            "`d - 4 (d//6)`, `2 (d//6)`, `2 (d//6)`",
            "integers",
        ),
    ),
)
