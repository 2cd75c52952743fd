"""diffusers' own arithmetic for FLUX-style id tables of other families (HiDream, PRX,
Ernie-Image): what their rotary modules return, for the ``compat="original"`` stand-ins of
:func:`posenc.torch.patch`. Bria, Bria-FIBO, FLUX.2, Flux3 and Krea2 are copies of FLUX's
``FluxPosEmbed`` (:func:`posenc.compat.diffusers.axial_rope`).

These families build their tables from ids, not from a grid, so ``posenc.rope_grid`` has no
``compat=`` mode for them: ``posenc.rope(ids, d, preset=...)`` gives their exact tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posenc.compat.diffusers import axial_rope
from posenc.errors import PosencError


def rotation_matrices(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """BFL's ``rope`` layout from compact tables ``[..., d/2]``: ``[..., d/2, 2, 2]``, each
    pair's ``[[cos, -sin], [sin, cos]]`` (HiDream's and PRX's "M" layout)."""
    stacked = torch.stack([cos, -sin, sin, cos], dim=-1)
    return stacked.reshape(*cos.shape, 2, 2)


def matrix_rope(ids: torch.Tensor, theta: float, axes_dim: Sequence[int]) -> torch.Tensor:
    """HiDream's ``rope`` per axis (and PRX's ``PRXEmbedND.rope``), concatenated: ``ids``
    ``[..., n]`` to ``[..., sum(axes_dim[:n]) / 2, 2, 2]`` float32.

    diffusers' ``1 / theta ** (arange(0, d, 2) / d)`` in float64 (float32 on MPS, NPU,
    Neuron), times the ids promoted to it, cos and sin, then ``.float()``: the same numbers
    as ``FluxPosEmbed``'s at float32 ids (the ids' rows flattened for it: elementwise)."""
    n = ids.shape[-1]
    cos, sin = axial_rope(ids.float().reshape(-1, n), theta, axes_dim)
    lead = ids.shape[:-1]
    return rotation_matrices(cos[:, ::2].reshape(*lead, -1), sin[:, ::2].reshape(*lead, -1))


def ernie_angles(ids: torch.Tensor, theta: float, axes_dim: Sequence[int]) -> torch.Tensor:
    """``ErnieImageEmbedND3(dim, theta, axes_dim)(ids)``: ``ids`` ``[B, S, 3]`` to the float32
    angles ``[B, S, 1, sum(axes_dim)]``, each pair's angle twice.

    Per axis ``1 / theta ** (arange(0, d, 2) / d)`` in float32, times the ids in float32
    (autocast off: diffusers' ``einsum`` with autocast disabled), concatenated."""
    if ids.shape[-1] < 3:
        raise PosencError(
            f"`ids` of ErnieImageEmbedND3 needs 3 columns, got shape {tuple(ids.shape)}"
        )
    parts = []
    for i in range(3):
        d = axes_dim[i]
        exponent = torch.arange(0, d, 2, dtype=torch.float32, device=ids.device) / d
        omega = 1.0 / (theta**exponent)
        parts.append(ids[..., i, None] * omega)
    angles = torch.cat(parts, dim=-1).float()[..., None, :]
    return torch.stack([angles, angles], dim=-1).reshape(*angles.shape[:-1], -1)
