"""The recognisers of diffusers' rotary modules of the families whose complex tables are gathered
by ids (Lumina-Image-2.0, Z-Image, Bria-FIBO2), for :func:`posenc.torch.patch`:
``Lumina2RotaryPosEmbed`` (a module) and ``RopeEmbedder`` (a plain object the transformer keeps
as its ``rope_embedder`` attribute: the recogniser answers for the transformer and names the
attribute). Their stand-ins are in ``_gathered_rope.py``. Lumina-Next's table is computed by its
pipeline, not by a module: ``posenc.rope_grid(..., preset="lumina-next")`` gives it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.errors import PosencError
from posenc.spec.families import lumina
from posenc.spec.families.lumina import LUMINA2, Z_IMAGE
from posenc.torch._gathered_rope import Lumina2Rope, ZImageRope
from posenc.torch._patching import Found, Recogniser, by_class, from_library, left_alone, unlike


def _tables(mod: Any) -> list[Tensor]:
    """A module's per-axis complex tables as real ``[len, d_a / 2, 2]`` views (measured)."""
    return [torch.view_as_real(t) for t in mod.freqs_cis]


@by_class(lumina.LUMINA2_MODULE)
def lumina2_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Lumina-Image-2.0's rotary module: its complex tables (complex128; complex64 when built
    on a host with MPS), measured whole."""
    name = type(module).__name__
    m: Any = module
    try:
        theta, patch = float(m.theta), int(m.patch_size)
        axes = tuple(int(d) for d in m.axes_dim)
        lens = tuple(int(n) for n in m.axes_lens)
        dtype = m.freqs_cis[0].dtype
    except (AttributeError, TypeError, ValueError, IndexError):
        return unlike(name, "diffusers")
    if dtype not in (torch.complex64, torch.complex128) or len(axes) != len(lens):
        return left_alone(name, f"not covered: its tables are {dtype}, not complex")
    mode = "diffusers" if dtype == torch.complex128 else "diffusers-mps"

    def build(compat: str | None) -> nn.Module | str:
        try:
            return Lumina2Rope(
                theta, axes, lens, patch, dtype=dtype, compat=None if compat is None else mode
            )
        except PosencError as err:
            return f"not covered: {err}"

    return Found(
        name,
        f"posenc.rope(ids, {sum(axes)}, preset={LUMINA2.name!r}, axes_dim={axes})",
        build,
        numbers=lambda: _tables(module),
        probe=_tables,
        note=f"max diff over the tables' rows {lens}",
    )


ATTRIBUTE = "rope_embedder"
"""Where Z-Image's and Bria-FIBO2's transformers (and Z-Image's ControlNet) keep their
``RopeEmbedder``."""


def z_image_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """The ``RopeEmbedder`` a diffusers model keeps as its ``rope_embedder`` attribute (not a
    module): float64 angles rounded to float32, complex64 tables, measured whole."""
    held: Any = module.__dict__.get(ATTRIBUTE)
    name = type(held).__name__
    if not (name == "RopeEmbedder" and from_library(held, "diffusers")):
        return None
    try:
        theta = float(held.theta)
        axes = tuple(int(d) for d in held.axes_dims)
        lens = tuple(int(n) for n in held.axes_lens)
    except (AttributeError, TypeError, ValueError):
        return left_alone(
            name, "not covered: not the attributes of diffusers' RopeEmbedder", ATTRIBUTE
        )
    if len(axes) != len(lens):
        return left_alone(name, f"not covered: axes_dims {axes} and axes_lens {lens}", ATTRIBUTE)

    def numbers() -> list[Tensor]:  # its own tables, computed apart (its cache is not touched)
        own = held.freqs_cis or held.precompute_freqs_cis(list(axes), list(lens), theta=theta)
        return [torch.view_as_real(t).cpu() for t in own]

    def build(compat: str | None) -> nn.Module | str:
        return ZImageRope(theta, axes, lens, None if compat is None else "diffusers")

    return Found(
        name,
        f"posenc.rope(ids, {sum(axes)}, preset={Z_IMAGE.name!r}, axes_dim={axes})",
        build,
        numbers=numbers,
        probe=_tables,
        note=f"max diff over the tables' rows {lens}",
        attribute=ATTRIBUTE,
    )


RECOGNISERS: tuple[Recogniser, ...] = (lumina2_rope, z_image_rope)
"""Asked before diffusers' catch-all ``others``."""
