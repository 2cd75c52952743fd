"""The recognisers of diffusers' rotary modules of Kandinsky 5 and 6 (``Kandinsky5RoPE1D``,
``Kandinsky5RoPE3D``, ``Kandinsky6RoPE1D``, ``Kandinsky6RoPE3D``, ``Kandinsky6SRRoPE3D``), for
:func:`posenc.torch.patch`, and of the rotary modules posenc leaves alone on purpose (Mochi's
learned frequencies; the modules that hand out angles, not tables). Their stand-ins are in
``_kandinsky_rope.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.errors import PosencError
from posenc.spec.families import kandinsky
from posenc.spec.families.kandinsky import (
    KANDINSKY5,
    KANDINSKY6,
    KANDINSKY_SCALE,
    KANDINSKY_SCALE_LARGE,
)
from posenc.torch._kandinsky_rope import KandinskyRope1D, KandinskyRope3D
from posenc.torch._patching import (
    Found,
    Recogniser,
    by_class,
    device_of,
    float_dtype,
    left_alone,
    unlike,
)


def _built(make: Any) -> nn.Module | str:
    try:
        out: nn.Module = make()
    except PosencError as err:
        return f"not covered: {err}"
    return out


@by_class(kandinsky.TEXT)
def kandinsky_rope_1d(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Kandinsky's text (and Kandinsky 6's audio) rotary module, measured over its rows
    ``0 … max_pos - 1``."""
    name = type(module).__name__
    m: Any = module
    try:
        dim, rows, base = int(m.dim), int(m.max_pos), float(m.max_period)
        scaling = float(m.freqs_scaling) if name == kandinsky.K6_1D else None
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    dtype, device = float_dtype(module) or torch.float32, device_of(module)

    def build(compat: str | None) -> nn.Module | str:
        return _built(
            lambda: KandinskyRope1D(
                dim,
                rows,
                base,
                freqs_scaling=scaling,
                device=device,
                dtype=dtype,
                compat=None if compat is None else "diffusers",
            )
        )

    def run(mod: nn.Module) -> list[Tensor]:
        return [mod(torch.arange(rows, device=device))]

    what = f"rope(pos, {dim}, preset={KANDINSKY5.name!r}, axes_dim=({dim},), base={base:g})"
    if scaling is not None:  # Kandinsky 6's audio: its frequencies times freqs_scaling
        what = (
            f"rope(pos, {dim}, preset={KANDINSKY6.name!r}, axes_dim=({dim},), base={base:g}, "
            f"axes_scale=({scaling:g},)) (freqs_scaling={scaling:g})"
        )
    return Found(
        name,
        what,
        build,
        numbers=lambda: run(module),
        probe=run,
        note=f"max diff over positions 0 … {rows - 1}",
    )


@by_class(kandinsky.VIDEO)
def kandinsky_rope_3d(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Kandinsky's video rotary module, measured one axis at a time over its rows (``max_pos``
    per axis), at both of Kandinsky 5's ``scale_factor``s."""
    name = type(module).__name__
    m: Any = module
    try:
        axes = tuple(int(d) for d in m.axes_dims)
        rows, base = tuple(int(n) for n in m.max_pos), float(m.max_period)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    if len(axes) != 3 or len(rows) != 3:
        return left_alone(name, f"not covered: axes_dims {axes} is not three axes")
    dtype, device = float_dtype(module) or torch.float32, device_of(module)
    batched = name == kandinsky.K5_VIDEO
    preset = KANDINSKY5.name if batched else KANDINSKY6.name

    def build(compat: str | None) -> nn.Module | str:
        return _built(
            lambda: KandinskyRope3D(
                axes,
                rows,
                base,
                batched=batched,
                device=device,
                dtype=dtype,
                compat=None if compat is None else "diffusers",
            )
        )

    probes = []
    for a in range(3):
        pos = [torch.arange(rows[b] if b == a else 1, device=device) for b in range(3)]
        probes += [(pos, KANDINSKY_SCALE), (pos, KANDINSKY_SCALE_LARGE)]

    def run(mod: nn.Module) -> list[Tensor]:
        if batched:
            return [mod((1, *(len(p) for p in pos)), pos, s) for pos, s in probes]
        return [mod(pos, s) for pos, s in probes]

    return Found(
        name,
        f"rope_grid(preset={preset!r}, axes_dim={axes})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note=f"max diff over rows {rows} of each axis, scale_factor (1, 2, 2) and (1, 3.16, 3.16)",
    )


LEFT_ALONE = {
    "MochiRoPE": "learned, left alone: Mochi's frequencies are the model's trained "
    "pos_frequencies parameter [3, heads, d / 2], not a fixed encoding",
    "StableAudio3RotaryEmbedding": "not covered: it returns float32 angles, whose cos and sin "
    "the attention takes itself (no table to make exact); its inv_freq is in the checkpoint",
    "RotaryEmbedding": "not covered: SAME's module returns float32 angles, whose cos and sin "
    "the attention takes itself (no table to make exact)",
}
"""The rotary modules left alone on purpose, and why."""
_LIBRARY_PATHS = {"RotaryEmbedding": "diffusers.models.autoencoders.autoencoder_same"}


@by_class("diffusers", *LEFT_ALONE)
def on_purpose(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """The modules of ``LEFT_ALONE``, reported with their reason."""
    name = type(module).__name__
    where = _LIBRARY_PATHS.get(name)
    if where is not None and type(module).__module__ != where:
        return None
    return left_alone(name, LEFT_ALONE[name])


RECOGNISERS: tuple[Recogniser, ...] = (
    kandinsky_rope_1d,
    kandinsky_rope_3d,
    on_purpose,
)
"""Asked before diffusers' catch-all ``others``."""
