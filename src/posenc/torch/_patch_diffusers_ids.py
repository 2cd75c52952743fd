"""The recognisers of diffusers' rotary modules of FLUX-style id tables of other families
(HiDream, PRX, Ernie-Image), for :func:`posenc.torch.patch`; their stand-ins are in
``_ids_rope.py``. The exact copies of FLUX's ``FluxPosEmbed`` (Bria, Bria-FIBO, Krea2) are
``flux_rope`` and ``flux2_rope`` of ``_patch_diffusers.py``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posenc.errors import PosencError
from posenc.spec.families import flux
from posenc.torch._ids_rope import ErnieRope, MatrixRope
from posenc.torch._patching import Found, Recogniser, by_class, unlike

MATRIX_FORMS = {flux.HIDREAM_CLASS: 2, flux.PRX_CLASS: 1}
"""BFL's ``rope`` restated (rotation matrices per pair), and where each inserts the head axis."""

ROWS = 1024
"""Measured over ids ``0 … ROWS - 1`` on every axis."""


def _ids(n: int) -> torch.Tensor:
    return torch.arange(ROWS, dtype=torch.float32)[None, :, None].expand(1, -1, n)


@by_class(flux.MATRICES)
def matrix_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """HiDream's ``HiDreamImageEmbedND`` and PRX's ``PRXEmbedND``: rotation matrices of ids,
    float64 in diffusers."""
    name = type(module).__name__
    m: Any = module
    try:
        theta, axes = m.theta, tuple(int(d) for d in m.axes_dim)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")

    def build(compat: str | None) -> nn.Module | str:
        try:
            return MatrixRope(theta, axes, MATRIX_FORMS[name], compat)
        except PosencError as err:
            return f"not covered: {err}"

    ids = _ids(len(axes))
    return Found(
        name,
        f"rope(axes_dim={axes}, base={theta}, layout='compact') as [[cos, -sin], [sin, cos]]",
        build,
        numbers=lambda: [module(ids)],
        probe=lambda new: [new(ids)],
        note=f"max diff over ids 0 … {ROWS - 1} on every axis",
    )


@by_class(flux.ERNIE)
def ernie_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Ernie-Image's ``ErnieImageEmbedND3``: float32 angles of ids."""
    name = type(module).__name__
    m: Any = module
    try:
        dim, theta, axes = int(m.dim), m.theta, tuple(int(d) for d in m.axes_dim)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "diffusers")

    def build(compat: str | None) -> nn.Module | str:
        try:
            return ErnieRope(dim, theta, axes, compat)
        except PosencError as err:
            return f"not covered: {err}"

    ids = _ids(3)
    return Found(
        name,
        f"float64 angles of rope(axes_dim={axes}, base={theta}) rounded once",
        build,
        numbers=lambda: [module(ids)],
        probe=lambda new: [new(ids)],
        note=f"max diff of the angles over ids 0 … {ROWS - 1} on every axis",
    )


RECOGNISERS: tuple[Recogniser, ...] = (matrix_rope, ernie_rope)
"""Asked before diffusers' catch-all ``others``."""
