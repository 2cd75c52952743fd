"""The recognisers of diffusers' rotary modules of Kandinsky 5 and 6 (``Kandinsky5RoPE1D``,
``Kandinsky5RoPE3D``, ``Kandinsky6RoPE1D``, ``Kandinsky6RoPE3D``, ``Kandinsky6SRRoPE3D``), of
the one-off ``rotate_half`` modules (OmniGen's longrope, Ideogram 4's and Cosmos 3's
interleaved mrope, MiniMax-Music 3's, LongCat-AudioDiT's and Anima's 1-D RoPE), for
:func:`posenc.torch.patch`, and of the rotary modules posenc leaves alone on purpose (Mochi's
learned frequencies; the modules that hand out angles, not tables). Their stand-ins are in
``_kandinsky_rope.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.compat.diffusers_kandinsky import inv_freq
from posenc.errors import PosencError
from posenc.spec.families import kandinsky, omnigen
from posenc.spec.families.kandinsky import (
    KANDINSKY5,
    KANDINSKY6,
    KANDINSKY_SCALE,
    KANDINSKY_SCALE_LARGE,
)
from posenc.spec.families.omnigen import OMNIGEN
from posenc.torch._kandinsky_rope import KEPT, HalvesRope, KandinskyRope1D, KandinskyRope3D
from posenc.torch._patching import (
    Found,
    Recogniser,
    by_class,
    device_of,
    float_dtype,
    left_alone,
    readable_theta,
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
        scaling = float(m.freqs_scaling) if name == "Kandinsky6RoPE1D" else None
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
    batched = name == "Kandinsky5RoPE3D"
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


# ---------------------------------------------------------------------------------------------
# the rotate_half modules

NO_BASE = (
    "not covered: its inv_freq buffer is not 1 / base ** (2j / d) in float32 (or cast "
    "to 16 bits) of a base posenc can read"
)


def _base_of(module: Any, root: nn.Module, d: int) -> float | None:
    """The base a module's ``inv_freq`` buffer was built from: the model's ``rope_theta`` (or
    10000), or a round estimate from the buffer (:func:`readable_theta`), whose float32
    ladder, cast as the buffer is (float32, or bfloat16 / float16 after ``.to()``), rebuilds
    it bit for bit; or None."""
    inv = module.inv_freq
    if inv.is_meta or not inv.is_floating_point() or inv.numel() != d // 2 or d < 4:
        return None
    kept = inv.detach().cpu()

    def matches(base: float) -> bool:
        return torch.equal(inv_freq(d, base).to(kept.dtype), kept)

    usual = getattr(getattr(root, "config", None), "rope_theta", None)
    usual = float(usual) if isinstance(usual, int | float) and usual > 0 else 10000.0
    return readable_theta(float(kept[-1].double()), d, matches, usual)


def _halves(
    name: str,
    dim: int,
    base: float,
    form: str,
    note: str,
    probes: Any,
    *,
    scaling: dict[str, Any] | None = None,
    sections: tuple[int, ...] | None = None,
    module: nn.Module,
) -> Found:
    """A :class:`Found` for a :class:`HalvesRope` stand-in, measured on ``probes`` (the
    arguments of calls)."""

    kept = getattr(module, "inv_freq", None) if form in KEPT else None
    inv_dtype = kept.dtype if isinstance(kept, Tensor) else torch.float32

    def build(compat: str | None) -> nn.Module | str:
        return _built(
            lambda: HalvesRope(
                dim,
                base,
                form=form,
                scaling=scaling,
                sections=sections,
                device=device_of(module),
                compat=None if compat is None else "transformers",
                inv_dtype=inv_dtype,
            )
        )

    def run(mod: nn.Module) -> list[Tensor]:
        return [t for args in probes for t in mod(*args)]

    extra = "" if sections is None else f", sections={sections}, interleave_sections=True"
    if scaling is not None:
        extra = f", preset={OMNIGEN.name!r}, scaling={{'rope_type': 'longrope', …}}"
    return Found(
        name,
        f"rope(pos, {dim}, base={base:g}{extra})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note=note,
    )


@by_class(omnigen.MODULE)
def omnigen_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """OmniGen's Phi-3 longrope, measured over its original length (short factors) and four
    times that (long)."""
    name = type(module).__name__
    m: Any = module
    try:
        dim, base, short = int(m.dim), float(m.base), int(m.original_max_position_embeddings)
        scaling: dict[str, Any] = {
            "rope_type": "longrope",
            "short_factor": list(m.short_factor),
            "long_factor": list(m.long_factor),
            "original_max_position_embeddings": short,
            "max_position_embeddings": int(m.max_position_embeddings),
        }
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    x = torch.zeros(1, device=device_of(module))
    probes = [(x, torch.arange(n, device=x.device)[None]) for n in (short, 4 * short)]
    return _halves(
        name,
        dim,
        base,
        "longrope",
        f"max diff over positions 0 … {short - 1} (short factors) and 0 … {4 * short - 1} (long)",
        probes,
        scaling=scaling,
        module=module,
    )


@by_class("diffusers", "Ideogram4MRoPE", "Cosmos3VLTextRotaryEmbedding")
def mrope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Ideogram 4's and Cosmos 3's interleaved mrope (Qwen3-VL's), measured over positions
    0 … 4095 and, Ideogram 4's images, 65536 … 69631 on every axis."""
    name = type(module).__name__
    m: Any = module
    try:
        ideogram = name == "Ideogram4MRoPE"
        sections = tuple(int(n) for n in (m.mrope_section if ideogram else m.rope_axes_dim))
        dim = 2 * int(m.inv_freq.numel())
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    base = _base_of(m, root, dim)
    if base is None:
        return left_alone(name, NO_BASE)
    device = device_of(module)
    pos = [torch.arange(4096, device=device), 65536 + torch.arange(4096, device=device)]
    probes: list[tuple[Any, ...]]
    if ideogram:
        probes = [(p[None, :, None].expand(1, -1, 3),) for p in pos]
    else:
        probes = [(p[None], device, torch.float32) for p in pos]
    return _halves(
        name,
        dim,
        base,
        "ideogram4" if ideogram else "cosmos3",
        "max diff over positions 0 … 4095 and 65536 … 69631 on every axis",
        probes,
        sections=sections,
        module=module,
    )


AUDIO_FORMS = {
    "MiniMaxMusic3RotaryEmbedding": "minimax",
    "AudioDiTRotaryEmbedding": "audiodit",
    "AnimaRotaryEmbedding": "anima",
}


@by_class("diffusers", *AUDIO_FORMS)
def audio_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """MiniMax-Music 3's, LongCat-AudioDiT's and Anima's 1-D RoPE, measured over positions
    0 … 8191."""
    name = type(module).__name__
    m: Any = module
    device, n = device_of(module), 8192
    try:
        if name == "AnimaRotaryEmbedding":
            dim = 2 * int(m.inv_freq.numel())
            base: float | None = _base_of(m, root, dim)
        else:
            dim = int(m.rotary_dim) if hasattr(m, "rotary_dim") else int(m.dim)
            base = float(m.theta) if hasattr(m, "theta") else float(m.base)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")
    if base is None:
        return left_alone(name, NO_BASE)
    x = torch.zeros(1, n, 1, device=device)
    probes = {
        "minimax": [(n, device)],
        "audiodit": [(x,)],
        "anima": [(x, torch.arange(n, device=device)[None])],
    }[AUDIO_FORMS[name]]
    return _halves(
        name,
        dim,
        base,
        AUDIO_FORMS[name],
        f"max diff over positions 0 … {n - 1}",
        probes,
        module=module,
    )


RECOGNISERS: tuple[Recogniser, ...] = (
    kandinsky_rope_1d,
    kandinsky_rope_3d,
    omnigen_rope,
    mrope,
    audio_rope,
    on_purpose,
)
"""Asked before diffusers' catch-all ``others``."""
