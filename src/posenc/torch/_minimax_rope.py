"""The stand-ins :func:`posenc.torch.patch` puts in place of diffusers' MiniMax-H3 rotary
modules (the recogniser is in ``_patch_diffusers_video.py``): the transformer's
``MiniMaxH3RotaryPosEmbed`` (one ladder shared by t, h and w) and its VAE decoder's
``MiniMaxH3VideoRotaryPosEmbed``, exact or, with ``compat``, diffusers' own arithmetic
(:mod:`posenc.compat.diffusers_video`). Nothing is kept in the state dict."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posenc.api.rope import rope
from posenc.api.rope_grid import rope_grid
from posenc.compat import diffusers_video as original
from posenc.spec.families.minimax_h3 import MINIMAX_H3


class MiniMaxRope(nn.Module):
    """The stand-in for diffusers' ``MiniMaxH3RotaryPosEmbed``: ``forward(position_ids)`` with
    ``position_ids`` ``[S, 3]`` -> ``(cos, sin)`` ``[S, 6 n]`` float32, ``posenc.rope(ids, 6 n,
    preset="minimax-h3")``. In compat mode it keeps the original's non-persistent ``inv_freq``
    buffer, so ``.to(bfloat16)`` rounds its ladder as diffusers' does."""

    inv_freq: Tensor

    def __init__(
        self, n: int, theta: float, compat: str | None = None, dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        self.n, self.theta, self.compat = n, theta, compat
        rope_grid((1, 1, 1), 6 * n, preset=MINIMAX_H3.name, base=theta)  # refused now if not
        self.register_buffer("inv_freq", torch.zeros(0, dtype=dtype), persistent=False)

    def forward(self, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """The tables of the positions ``position_ids``."""
        if self.compat is not None:
            return original.minimax_tables(position_ids, self.n, self.theta, self.inv_freq.dtype)
        ids = position_ids.to(torch.float32).double()  # the positions diffusers reads
        cos, sin = rope(
            ids, 6 * self.n, preset=MINIMAX_H3.name, base=self.theta, dtype=torch.float32
        )
        return cos, sin

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{6 * self.n}, preset={MINIMAX_H3.name!r}, base={self.theta:g}{mode}"


class MiniMaxVideoRope(MiniMaxRope):
    """The stand-in for diffusers' ``MiniMaxH3VideoRotaryPosEmbed`` (MiniMax-H3's VAE decoder):
    ``forward(position_ids)`` with coordinates ``[B, S, k]`` (the decoder's k = 3: t, h, w)
    -> ``(cos, sin)`` ``[B, S, 1, 2 k n]`` float32: angles ``2 pi c theta ** (-j / n)``, the k
    axes' blocks twice over (``posenc.rope(c, 2 k n, base=theta, axes_dim=(2 n,) * k,
    axes_scale=(2 pi,) * k, layout="halves")``). The original keeps no axis count (its
    ``num_axes`` only sets the ladder's length ``n = dim / (2 k)``): its forward, and this
    one, read ``k`` from the coordinates."""

    def forward(self, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """The tables of the coordinates ``position_ids``."""
        if self.compat is not None:
            return original.minimax_video_tables(
                position_ids, self.n, self.theta, self.inv_freq.dtype
            )
        b, s, k = position_ids.shape
        ids = position_ids.to(torch.float32).double().reshape(b * s, k)
        side = 2 * self.n
        cos, sin = rope(
            ids,
            k * side,
            base=self.theta,
            axes_dim=(side,) * k,
            axes_scale=(2 * math.pi,) * k,
            layout="halves",
            dtype=torch.float32,
        )
        return cos.reshape(b, s, 1, -1), sin.reshape(b, s, 1, -1)

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{2 * self.n} k, base={self.theta:g}, axes_scale=2 pi, layout='halves'{mode}"
