"""The stand-ins :func:`posenc.torch.patch` puts in place of Kandinsky 5's and 6's rotary
modules (the recognisers are in ``_patch_diffusers_kandinsky.py``): called as the originals
are, returning their 2 x 2 rotation matrices, exact (posenc's tables, rounded once to the
module's dtype) or, with ``compat``, diffusers' own float32 arithmetic
(:mod:`posenc.compat.diffusers_kandinsky`). Nothing is kept in the state dict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from posenc.api.rope import rope
from posenc.compat.diffusers_kandinsky import kandinsky_angles
from posenc.errors import PosencError
from posenc.torch._base import _Tracked


def matrices(cos: Tensor, sin: Tensor) -> Tensor:
    """Kandinsky's rotation of each pair: ``[[cos, -sin], [sin, cos]]``, ``[*s, n]`` ->
    ``[*s[:-1], 1, n, 2, 2]`` (the head axis inserted before the frequencies)."""
    rope_ = torch.stack([cos, -sin, sin, cos], dim=-1)
    return rope_.view(*rope_.shape[:-1], 2, 2).unsqueeze(-4)


class _KandinskyRope(_Tracked):
    """What the 1-D and 3-D stand-ins share: the base, the mode and one block's tables."""

    def __init__(self, base: float, compat: str | None, device: Any, dtype: Any) -> None:
        super().__init__(device=device, dtype=dtype or torch.float32)
        if compat not in (None, "diffusers"):
            raise PosencError(f"`compat` must be None or 'diffusers', got {compat!r}")
        self.max_period, self.compat = float(base), compat

    def block(
        self, d: int, pos: Tensor, *, divisor: float = 1.0, freqs_scaling: float | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` ``[*pos.shape, d / 2]`` of one block of width ``d`` at the integer
        positions ``pos``, its angles divided by ``divisor`` and its frequencies multiplied
        by ``freqs_scaling``, in the module's dtype on its device."""
        pos = pos.to(self._device)
        if self.compat is not None:  # the float32 rows, cast as .to() cast the buffers
            angles = kandinsky_angles(
                d,
                pos,
                self.max_period,
                freqs_scaling=freqs_scaling,
                dtype=self._dtype,
                divisor=divisor,
            )
            return torch.cos(angles), torch.sin(angles)
        scale = (freqs_scaling if freqs_scaling is not None else 1.0) / divisor
        cos, sin = rope(
            pos,
            d,
            base=self.max_period,
            axes_dim=(d,),
            axes_scale=(scale,),
            layout="compact",
            dtype=self._dtype,
        )
        return cos, sin


class KandinskyRope1D(_KandinskyRope):
    """The stand-in for ``Kandinsky5RoPE1D`` and ``Kandinsky6RoPE1D`` (text and audio tokens):
    ``forward(pos)`` with integer positions ``[*s]`` -> ``[*s, 1, dim / 2, 2, 2]``, the
    rotation of the interleaved pairs of the whole head (``freqs_scaling``: Kandinsky 6's
    factor on the frequencies)."""

    def __init__(
        self,
        dim: int,
        max_pos: int,
        base: float,
        *,
        freqs_scaling: float | None = None,
        compat: str | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(base, compat, device, dtype)
        self.dim, self.max_pos, self.freqs_scaling = dim, max_pos, freqs_scaling
        rope([0], dim, base=base)  # refused now if it cannot

    def forward(self, pos: Tensor) -> Tensor:
        """The rotations of the positions ``pos``."""
        return matrices(*self.block(self.dim, pos, freqs_scaling=self.freqs_scaling))

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{self.dim}, base={self.max_period:g}, freqs_scaling={self.freqs_scaling}{mode}"


class KandinskyRope3D(_KandinskyRope):
    """The stand-in for ``Kandinsky5RoPE3D`` (``batched``: ``forward(shape, pos,
    scale_factor)`` -> ``[B, T, H, W, 1, D / 2, 2, 2]``) and ``Kandinsky6RoPE3D`` /
    ``Kandinsky6SRRoPE3D`` (``forward(pos, scale_factor)`` -> ``[T, H, W, 1, D / 2, 2, 2]``):
    ``pos`` one integer index tensor per axis, each block's angles divided by its
    ``scale_factor``, ``[t | h | w]`` concatenated per token."""

    def __init__(
        self,
        axes_dims: Sequence[int],
        max_pos: Sequence[int],
        base: float,
        *,
        batched: bool,
        compat: str | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(base, compat, device, dtype)
        self.axes_dims, self.max_pos = tuple(int(d) for d in axes_dims), tuple(max_pos)
        self.batched = batched
        if len(self.axes_dims) != 3:
            raise PosencError(f"`axes_dims` must be three widths (t, h, w), got {axes_dims}")
        rope([[0, 0, 0]], sum(self.axes_dims), base=base, axes_dim=self.axes_dims)  # checked

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        """The rotations of every token of the grid the positions span."""
        if self.batched:
            return self._batched(*args, **kwargs)
        return self._grid(*args, **kwargs)[0]

    def _batched(
        self,
        shape: Sequence[int],
        pos: Sequence[Tensor],
        scale_factor: Sequence[float] = (1.0, 1.0, 1.0),
    ) -> Tensor:
        """Kandinsky 5's call: the grid's tables repeated over the batch of ``shape``."""
        out, _ = self._grid(pos, scale_factor, tuple(int(n) for n in shape[1:]))
        return out.unsqueeze(0).repeat(int(shape[0]), *[1] * out.dim())

    def _grid(
        self,
        pos: Sequence[Tensor],
        scale_factor: Sequence[float] = (1.0, 1.0, 1.0),
        dims: tuple[int, ...] | None = None,
    ) -> tuple[Tensor, tuple[int, ...]]:
        if len(pos) != 3 or len(scale_factor) != 3:
            raise PosencError(
                f"`pos` and `scale_factor` must hold one entry per axis (t, h, w), got "
                f"{len(pos)} and {len(scale_factor)}"
            )
        dims = dims or tuple(int(p.shape[0]) for p in pos)
        cos_parts, sin_parts = [], []
        for a, (d, p, s) in enumerate(zip(self.axes_dims, pos, scale_factor, strict=True)):
            cos, sin = self.block(d, p, divisor=float(s))
            view = [1, 1, 1, d // 2]
            view[a] = dims[a]
            cos_parts.append(cos.view(view).expand(*dims, d // 2))
            sin_parts.append(sin.view(view).expand(*dims, d // 2))
        return matrices(torch.cat(cos_parts, dim=-1), torch.cat(sin_parts, dim=-1)), dims

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"axes_dims={self.axes_dims}, base={self.max_period:g}{mode}"
