"""The stand-ins :func:`posenc.torch.patch` puts in place of diffusers' id rotary modules that
are not FLUX's form (the recognisers are in ``_patch_diffusers_ids.py``): HiDream's and PRX's
rotation matrices, Ernie-Image's angles. Each is called as its original is and returns what
its model consumes, exact (posenc's tables) or, with ``compat``, diffusers' own arithmetic
(:mod:`posenc.compat.diffusers_ids`). Nothing is kept in the state dict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from posenc.api.rope import rope
from posenc.compat import diffusers_ids as original
from posenc.errors import PosencError
from posenc.spec.rotary import rotary


def _mode(compat: str | None) -> str:
    return "" if compat is None else f", compat={compat!r}"


def _axes(ids: Tensor, axes_dim: Sequence[int], every_axis: bool) -> tuple[int, ...]:
    """The blocks the ids' columns read: the first ``ids.shape[-1]`` (or every one)."""
    n = len(axes_dim) if every_axis else ids.shape[-1]
    if not 0 < n <= len(axes_dim) or ids.shape[-1] < n:
        raise PosencError(
            f"`ids` of shape {tuple(ids.shape)} must have one column per block of axes_dim "
            f"{list(axes_dim)}"
        )
    return tuple(axes_dim[:n])


class MatrixRope(nn.Module):
    """The stand-in for diffusers' ``HiDreamImageEmbedND(theta, axes_dim)`` and
    ``PRXEmbedND(dim, theta, axes_dim)``: ``forward(ids)`` with ``ids`` ``[B, N, n]``, each
    pair's rotation ``[[cos, -sin], [sin, cos]]`` float32, ``[B, N, 1, D/2, 2, 2]``
    (``head_axis=2``, HiDream) or ``[B, 1, N, D/2, 2, 2]`` (``head_axis=1``, PRX), ``D`` the
    width of the blocks the ids' columns read; exact (``posenc.rope(ids, ...,
    axes_dim=...)``, interleaved) or, with ``compat="original"``, diffusers' float64
    arithmetic."""

    def __init__(
        self, theta: float, axes_dim: Sequence[int], head_axis: int, compat: str | None = None
    ) -> None:
        super().__init__()
        self.theta, self.axes_dim = theta, list(axes_dim)
        self.head_axis, self.compat = head_axis, compat
        rope(
            torch.zeros(1, len(axes_dim)),
            sum(axes_dim),
            base=float(theta),
            layout="compact",
            axes_dim=tuple(axes_dim),
        )  # checked now

    def forward(self, ids: Tensor) -> Tensor:
        """The rotation matrices of the ids ``[B, N, n]``."""
        axes = _axes(ids, self.axes_dim, every_axis=False)
        if self.compat is not None:
            out = original.matrix_rope(ids, self.theta, axes)
        else:
            cos, sin = rope(
                ids,
                sum(axes),
                base=float(self.theta),
                layout="compact",
                axes_dim=axes,
                dtype=torch.float32,
            )
            out = original.rotation_matrices(cos, sin)
        return out.unsqueeze(self.head_axis)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        return f"theta={self.theta}, axes_dim={self.axes_dim}{_mode(self.compat)}"


class ErnieRope(nn.Module):
    """The stand-in for diffusers' ``ErnieImageEmbedND3(dim, theta, axes_dim)``:
    ``forward(ids)`` with ``ids`` ``[B, S, 3]``, the float32 angles ``[B, S, 1,
    sum(axes_dim)]`` (each pair's twice) that Ernie-Image's attention takes the cos and sin
    of. Exact: each angle ``id * theta ** (-2j / d)`` in float64 (the frequencies of
    :func:`posenc.rope`'s plan), rounded once to float32 (the angle is what the model takes,
    so it stays the float32 angle nearest the true one; computed on the CPU where the ids'
    device has no float64). ``compat="original"``: diffusers' float32 arithmetic."""

    def __init__(
        self, dim: int, theta: float, axes_dim: Sequence[int], compat: str | None = None
    ) -> None:
        super().__init__()
        self.dim, self.theta, self.axes_dim = dim, theta, list(axes_dim)
        self.compat = compat
        if len(self.axes_dim) != 3:
            raise PosencError(
                f"`axes_dim` of ErnieImageEmbedND3 needs 3 blocks, got {self.axes_dim}"
            )
        plan = rotary(
            sum(axes_dim), base=float(theta), layout="compact", axes_dim=tuple(self.axes_dim)
        ).plan(None)
        column = plan.src[: plan.dim // 2] // 2  # each compact cos column's frequency
        self._omega = torch.from_numpy(plan.omega[column].copy())  # float64 [D/2]
        self._axis = torch.from_numpy(plan.axis[column].copy())  # the id column each reads

    def forward(self, ids: Tensor) -> Tensor:
        """The angles of the ids ``[B, S, 3]``."""
        _axes(ids, self.axes_dim, every_axis=True)
        if self.compat is not None:
            return original.ernie_angles(ids, self.theta, self.axes_dim)
        work = ids.device if ids.device.type in ("cpu", "cuda") else torch.device("cpu")
        pos = ids.to(device=work, dtype=torch.float64)[..., self._axis.to(work)]
        angles = (pos * self._omega.to(work)).float().to(ids.device)[..., None, :]
        return torch.stack([angles, angles], dim=-1).reshape(*angles.shape[:-1], -1)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        return f"dim={self.dim}, theta={self.theta}, axes_dim={self.axes_dim}{_mode(self.compat)}"
