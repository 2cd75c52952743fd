"""The stand-ins :func:`posenc.torch.patch` puts in place of diffusers' id rotary modules (the
recognisers are in ``_patch_diffusers.py`` for FLUX's form, ``_patch_diffusers_ids.py`` for
the others): FLUX's ``(cos, sin)`` (and a rule past the trained size), HiDream's and PRX's
rotation matrices, Ernie-Image's angles. Each is called as its original is and returns what
its model consumes, exact (posenc's tables) or, with ``compat``, diffusers' own arithmetic
(:mod:`posenc.compat.diffusers`, :mod:`posenc.compat.diffusers_ids`; the official DyPE code's,
:mod:`posenc.compat.dype`). Nothing is kept in the state dict."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from posenc.api.rope import rope
from posenc.compat import diffusers, dype
from posenc.compat import diffusers_ids as original
from posenc.compat.grid import GridCall, references
from posenc.errors import PosencError
from posenc.spec.families import flux
from posenc.spec.rotary import rotary, with_axes_scaling
from posenc.torch._scaled import Scaled, eager


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


class AxialRope(Scaled, nn.Module):
    """The stand-in for diffusers' ``FluxPosEmbed(theta, axes_dim)``: ``forward(ids)`` with
    ``ids`` ``[N, n]``, ``(cos, sin)`` ``[N, sum(axes_dim)]`` float32, each axis's block
    interleaved (``cos[:, 2i] == cos[:, 2i + 1]``); exact (``posenc.rope(ids, ...,
    axes_dim=...)``) or, with ``compat="original"``, diffusers' float64 arithmetic. With a
    rule past the trained size (:meth:`scale`), the rule at the grid the ids span (each
    axis' largest id minus its smallest, plus one: FLUX's ``max + 1``), exact, or with
    ``compat`` as the official DyPE code computes it (``"dype"``, ``"vision-yarn"``)."""

    def __init__(
        self,
        theta: float,
        axes_dim: Sequence[int],
        every_axis: bool,
        compat: str | None = None,
        preset: str | None = None,
    ) -> None:
        super().__init__()
        self.theta, self.axes_dim = theta, axes_dim
        self.every_axis, self.compat, self.preset = every_axis, compat, preset
        rope(
            torch.zeros(1, len(axes_dim)),
            sum(axes_dim),
            base=float(theta),
            layout="interleaved",
            axes_dim=tuple(axes_dim),
        )  # checked now

    def forward(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` of the ids ``[N, n]``."""
        n = len(self.axes_dim) if self.every_axis else ids.shape[-1]
        if n > len(self.axes_dim):
            raise PosencError(f"`ids` has {n} axes, more than axes_dim {list(self.axes_dim)}")
        ids, axes = ids[..., :n], tuple(self.axes_dim[:n])
        if self.scaling is not None:
            return self._scaled(ids, axes)  # type: ignore[no-any-return]
        if self.compat is not None:
            return diffusers.axial_rope(ids, self.theta, axes)
        return self._exact(ids, axes, None)

    def _exact(self, ids: Tensor, axes: tuple[int, ...], rules: Any) -> tuple[Tensor, Tensor]:
        cos, sin = rope(
            ids,
            sum(axes),
            base=float(self.theta),
            layout="interleaved",
            axes_dim=axes,
            scaling=rules,
            dtype=torch.float32,
        )
        return cos, sin

    @eager
    def _scaled(self, ids: Tensor, axes: tuple[int, ...]) -> Any:
        flat = ids.detach().reshape(-1, ids.shape[-1])
        spans = (flat.amax(0) - flat.amin(0) + 1).tolist() if flat.numel() else [0] * len(axes)
        values = flat.to("cpu", torch.float64).numpy().tobytes()  # any dtype, bfloat16 too
        key = (tuple(ids.shape), str(ids.device), ids.dtype, hash(values))
        make = self._exact if self.compat is None else self._official
        return self.tables([int(v) for v in spans], key, partial(make, ids, axes))

    def _official(self, ids: Tensor, axes: tuple[int, ...], rules: Any) -> tuple[Tensor, Tensor]:
        """The rule as the official DyPE code applies it in FLUX's arithmetic (``"dype"``,
        ``"vision-yarn"``: :func:`posenc.compat.dype.official`); any other is refused."""
        if not isinstance(rules, tuple):
            raise PosencError(
                f"`scaling` with compat: one rule for the whole table ({rules!r}) is not how a "
                "reference applies it; give one rule per id column, or drop compat for the "
                "rule's exact tables"
            )
        r = rotary(sum(axes), base=float(self.theta), layout="interleaved", axes_dim=axes)
        r = with_axes_scaling(r, rules[: len(axes)])
        call = GridCall(flux.FLUX.name, "original", (), r, tuple(range(len(axes))), (), ())
        return dype.official(ids, self.theta, axes, references(call, ("by_parts",)))

    def trial(self, grid: tuple[int, ...]) -> None:
        dims = grid if len(grid) == len(self.axes_dim) else (1,) * len(self.axes_dim)
        mesh = torch.meshgrid(*(torch.arange(n, dtype=torch.float32) for n in dims), indexing="ij")
        self._scaled(torch.stack(mesh, -1).reshape(-1, len(dims)), tuple(self.axes_dim))

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        words = self.scaling_words()
        return f"theta={self.theta}, axes_dim={list(self.axes_dim)}{_mode(self.compat)}{words}"
