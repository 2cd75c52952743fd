"""The recognisers of diffusers' one-off rotary modules in the ``rotate_half`` form (OmniGen's
longrope, Ideogram 4's and Cosmos 3's interleaved mrope, MiniMax-Music 3's, LongCat-AudioDiT's
and Anima's 1-D RoPE), for :func:`posenc.torch.patch`; their stand-ins are in
``_halves_rope.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.compat.diffusers_kandinsky import inv_freq
from posenc.spec.families import omnigen
from posenc.spec.families.omnigen import OMNIGEN
from posenc.torch._halves_rope import (
    AnimaRope,
    AudioDiTRope,
    Cosmos3TextRope,
    HalvesRope,
    Ideogram4Rope,
    MiniMaxMusicRope,
    OmniGenRope,
)
from posenc.torch._patch_diffusers_kandinsky import _built
from posenc.torch._patching import (
    Found,
    Recogniser,
    by_class,
    device_of,
    left_alone,
    readable_theta,
    unlike,
)

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
    stand_in: type[HalvesRope],
    note: str,
    probes: Any,
    *,
    scaling: dict[str, Any] | None = None,
    sections: tuple[int, ...] | None = None,
    module: nn.Module,
) -> Found:
    """A :class:`Found` for a :class:`HalvesRope` stand-in, measured on ``probes`` (the
    arguments of calls)."""

    kept = getattr(module, "inv_freq", None) if stand_in.kept else None
    inv_dtype = kept.dtype if isinstance(kept, Tensor) else torch.float32

    def build(compat: str | None) -> nn.Module | str:
        return _built(
            lambda: stand_in(
                dim,
                base,
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
        OmniGenRope,
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
        Ideogram4Rope if ideogram else Cosmos3TextRope,
        "max diff over positions 0 … 4095 and 65536 … 69631 on every axis",
        probes,
        sections=sections,
        module=module,
    )


AUDIO: dict[str, type[HalvesRope]] = {
    "MiniMaxMusic3RotaryEmbedding": MiniMaxMusicRope,
    "AudioDiTRotaryEmbedding": AudioDiTRope,
    "AnimaRotaryEmbedding": AnimaRope,
}
"""The 1-D modules, by class: their stand-ins."""


@by_class("diffusers", *AUDIO)
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
        MiniMaxMusicRope: [(n, device)],
        AudioDiTRope: [(x,)],
        AnimaRope: [(x, torch.arange(n, device=device)[None])],
    }[AUDIO[name]]
    return _halves(
        name,
        dim,
        base,
        AUDIO[name],
        f"max diff over positions 0 … {n - 1}",
        probes,
        module=module,
    )


RECOGNISERS: tuple[Recogniser, ...] = (omnigen_rope, mrope, audio_rope)
"""Asked before diffusers' catch-all ``others``."""
