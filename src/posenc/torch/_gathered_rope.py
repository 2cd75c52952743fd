"""The stand-ins :func:`posenc.torch.patch` puts in place of diffusers' rotary modules whose
complex tables are gathered by ids (the recognisers are in ``_patch_diffusers_gathered.py``):
Lumina-Image-2.0's ``Lumina2RotaryPosEmbed`` and Z-Image's (and Bria-FIBO2's) ``RopeEmbedder``.

Both keep, as their originals do, one complex table per position axis (rows ``0 … len - 1``,
``[len, d_a / 2]``) in a plain list (nothing in the state dict) and gather a token's row of
each by its ids: exact (posenc's tables, rounded once to the original's complex dtype) or, with
``compat``, diffusers' own arithmetic (:mod:`posenc.compat.diffusers_gathered`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from posenc.api.rope import rope
from posenc.compat import diffusers_gathered as original
from posenc.errors import PosencError


def axis_tables(
    rows: original.Rows | None,
    theta: float,
    axes_dim: tuple[int, ...],
    axes_lens: tuple[int, ...],
    dtype: torch.dtype,
) -> list[Tensor]:
    """Per axis the complex table ``[len, d_a / 2]`` of rows ``0 … len - 1`` (on the CPU):
    exact, each row's ``exp(i p w_j)`` rounded once to ``dtype`` (complex64 or complex128), or
    the original's ``rows`` (its ``compat`` replay)."""
    tables = []
    for d, n in zip(axes_dim, axes_lens, strict=True):
        if rows is not None:
            tables.append(rows(d, torch.arange(n), theta))
            continue
        real = np.float64 if dtype == torch.complex128 else np.float32
        cos, sin = rope(np.arange(n), d, base=theta, layout="compact", dtype=real)
        tables.append(torch.complex(torch.from_numpy(cos), torch.from_numpy(sin)))
    return tables


def gather(tables: list[Tensor], ids: Tensor) -> Tensor:
    """Each token's rows of the axes' tables, concatenated: ids ``[..., k]`` (integers) ->
    ``[..., sum(d_a) / 2]``."""
    return torch.cat([t[ids[..., a].long()] for a, t in enumerate(tables)], dim=-1)


class Lumina2Rope(nn.Module):
    """The stand-in for diffusers' ``Lumina2RotaryPosEmbed(theta, axes_dim, axes_lens,
    patch_size)``: ``forward(hidden_states, attention_mask)`` with latents ``[B, C, H, W]`` and
    the caption mask ``[B, L]`` -> ``(patches, caption_tables, image_tables, tables,
    caption_lengths, sequence_lengths)``, as the original returns them: a caption of ``L``
    tokens at ``(i, 0, 0)``, the image patches at ``(L, row, column)``, padding at
    ``(0, 0, 0)``.

    ``dtype``: the tables' complex dtype (complex128, diffusers' on CPU and CUDA; complex64 on
    a host with MPS). ``compat``: ``"diffusers"`` or ``"diffusers-mps"``."""

    def __init__(
        self,
        theta: float,
        axes_dim: tuple[int, ...],
        axes_lens: tuple[int, ...],
        patch_size: int,
        *,
        dtype: torch.dtype = torch.complex128,
        compat: str | None = None,
    ) -> None:
        super().__init__()
        self.theta, self.axes_dim, self.axes_lens = theta, tuple(axes_dim), tuple(axes_lens)
        self.patch_size, self.compat = patch_size, compat
        rows = None if compat is None else original.lumina2_rows(compat)
        self.freqs_cis = axis_tables(rows, theta, self.axes_dim, self.axes_lens, dtype)

    def positions(self, caps: list[int], rows: int, cols: int, device: Any) -> Tensor:
        """The ids ``[B, max(L_i) + rows * cols, 3]`` of each caption length ``L_i``."""
        n = rows * cols
        ids = torch.zeros(len(caps), max(caps) + n, 3, dtype=torch.int64, device=device)
        r, c = torch.arange(rows, device=device), torch.arange(cols, device=device)
        grid = torch.stack(torch.meshgrid(r, c, indexing="ij"), dim=-1)
        for i, cap in enumerate(caps):
            ids[i, :cap, 0] = torch.arange(cap, device=device)
            ids[i, cap : cap + n, 0] = cap
            ids[i, cap : cap + n, 1:] = grid.reshape(n, 2)
        return ids

    def forward(self, hidden_states: Tensor, attention_mask: Tensor) -> tuple[Any, ...]:
        """The patches ``[B, H/p * W/p, p * p * C]`` and the tables of captions and images."""
        b, c, h, w = hidden_states.shape
        p, device = self.patch_size, hidden_states.device
        rows, cols = h // p, w // p
        n = rows * cols
        caps = [int(v) for v in attention_mask.sum(dim=1).tolist()]
        where = torch.device("cpu") if device.type == "mps" else device  # no complex128 there
        ids = self.positions(caps, rows, cols, where)
        tables = gather([t.to(where) for t in self.freqs_cis], ids).to(device)
        caption = tables.new_zeros(b, attention_mask.shape[1], tables.shape[-1])
        image = tables.new_zeros(b, n, tables.shape[-1])
        for i, cap in enumerate(caps):
            caption[i, :cap] = tables[i, :cap]
            image[i] = tables[i, cap : cap + n]
        patches = hidden_states.view(b, c, rows, p, cols, p).permute(0, 2, 4, 3, 5, 1)
        patches = patches.flatten(3).flatten(1, 2)
        return patches, caption, image, tables, caps, [cap + n for cap in caps]

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return (
            f"theta={self.theta}, axes_dim={list(self.axes_dim)}, "
            f"axes_lens={list(self.axes_lens)}{mode}"
        )


class ZImageRope(nn.Module):
    """The stand-in for diffusers' ``RopeEmbedder(theta, axes_dims, axes_lens)`` (Z-Image, its
    ControlNet, Bria-FIBO2; a plain object there, an attribute of the transformer):
    ``forward(ids)`` with ids ``[N, k]`` -> the complex64 rows ``[N, sum(d_a) / 2]``; the
    tables follow the ids' device. ``compat``: ``"diffusers"``."""

    def __init__(
        self,
        theta: float,
        axes_dims: tuple[int, ...],
        axes_lens: tuple[int, ...],
        compat: str | None = None,
    ) -> None:
        super().__init__()
        self.theta, self.axes_dims, self.axes_lens = theta, tuple(axes_dims), tuple(axes_lens)
        self.compat = compat
        rows = None if compat is None else original.z_image_rows
        self.freqs_cis = axis_tables(rows, theta, self.axes_dims, self.axes_lens, torch.complex64)

    def forward(self, ids: Tensor) -> Tensor:
        """The rows of ids ``[N, k]`` (each below its axis's ``axes_lens``)."""
        if ids.ndim != 2 or ids.shape[-1] != len(self.axes_dims):
            raise PosencError(
                f"`ids` must be [N, {len(self.axes_dims)}] (one column per axis), got "
                f"{tuple(ids.shape)}"
            )
        if self.freqs_cis[0].device != ids.device:
            self.freqs_cis = [t.to(ids.device) for t in self.freqs_cis]
        return gather(self.freqs_cis, ids)

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return (
            f"theta={self.theta}, axes_dims={list(self.axes_dims)}, "
            f"axes_lens={list(self.axes_lens)}{mode}"
        )
