"""The stand-ins :func:`posenc.torch.patch` puts in place of diffusers' rotary modules that keep
Wan's tables as complex rows (SANA-WM: complex64; AnyFlow and AnyFlow FAR: complex128, the FAR
context frames pooled): each called as its original is, exact (posenc's tables) or, with
``compat``, diffusers' own arithmetic (:mod:`posenc.compat.diffusers_video`). The recognisers
are in ``_patch_diffusers_video.py``; nothing is kept in the state dict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from posenc.api.rope_grid import rope_grid
from posenc.compat import diffusers_video as original
from posenc.compat.diffusers import wide_dtype
from posenc.errors import PosencError
from posenc.evaluate.positions import grid_shape
from posenc.spec.families.wan import WAN


class SanaWMRope(nn.Module):
    """The stand-in for diffusers' ``SanaWMRotaryPosEmbed`` (``complex_dtype`` complex64) and
    AnyFlow's ``AnyFlowRotaryPosEmbed`` (complex128, float32 where the device has no float64):
    ``forward(fhw, device)`` -> complex ``[1, 1, F * H * W, D / 2]``, Wan's blocks (``wan``
    preset, ``layout="compact"``) at the rows ``0 … n - 1`` of each axis."""

    def __init__(
        self,
        dim: int,
        axes_dim: tuple[int, ...],
        theta: float,
        *,
        wide: bool = False,
        compat: str | None = None,
    ) -> None:
        super().__init__()
        self.dim, self.axes_dim, self.theta, self.wide = dim, tuple(axes_dim), theta, wide
        self.compat = compat
        rope_grid((1, 1, 1), dim, preset=WAN.name, axes_dim=axes_dim, base=theta)  # refused if not

    def grid(self, fhw: Any) -> tuple[int, ...]:
        """``fhw`` checked as :func:`posenc.rope_grid` checks a grid: one integer >= 0 per
        block of ``axes_dim``."""
        return grid_shape(
            fhw, len(self.axes_dim), name="fhw", axes=f"(one per block of axes_dim {self.axes_dim})"
        )

    def table(self, fhw: Sequence[int], device: Any) -> Tensor:
        """The complex table ``[F * H * W, D / 2]`` of the patched grid ``fhw``."""
        dims = self.grid(fhw)
        device = torch.device("cpu") if device is None else torch.device(device)
        wide = wide_dtype(device) if self.wide else torch.float32
        if self.compat is not None:
            pos = [torch.arange(n, device=device) for n in dims]
            return original.complex_grid(pos, self.axes_dim, self.theta, wide=wide)
        cos, sin = rope_grid(
            dims,
            self.dim,
            preset=WAN.name,
            axes_dim=self.axes_dim,
            base=self.theta,
            layout="compact",
            dtype=wide,
            device=device,
        )
        return torch.complex(cos, sin)

    def forward(self, fhw: Sequence[int], device: Any = None) -> Tensor:
        """SANA-WM's call: the table of ``fhw`` as ``[1, 1, S, D / 2]``."""
        return self.table(fhw, device)[None, None]

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{self.dim}, preset={WAN.name!r}, axes_dim={self.axes_dim}, layout='compact'{mode}"


class AnyFlowRope(SanaWMRope):
    """The stand-in for diffusers' ``AnyFlowRotaryPosEmbed``: ``forward(layout_cfg, device)``
    -> ``{"query": t, "key": t}``, ``t`` the complex128 table ``[1, 1, S, D / 2]`` of
    ``total_frames x full_frame_shape``."""

    def forward(self, layout_cfg: Any, device: Any = None) -> dict[str, Tensor]:  # type: ignore[override]
        """The tables of the full-resolution grid ``layout_cfg`` describes."""
        fhw = (layout_cfg["total_frames"], *layout_cfg["full_frame_shape"])
        freqs = self.table(fhw, device)[None, None]
        return {"query": freqs, "key": freqs}


class AnyFlowCausalRope(SanaWMRope):
    """The stand-in for diffusers' ``AnyFlowCausalRotaryPosEmbed`` (AnyFlow FAR):
    ``forward(far_cfg, device, clean_hidden_states=None)`` -> ``{"query": t, "key": t}``, ``t``
    complex128 ``[1, 1, S, D / 2]``: the compressed context frames first, then the full ones
    (twice with clean latents). A compressed axis pools ``k`` rows into their mean scaled back
    to modulus 1: exactly the rotation at their centre ``j k + (k - 1) / 2`` (while ``k w / 2 <
    pi`` for every frequency ``w <= 1``: ``k <= 6``), which is what the exact tables hold."""

    def __init__(
        self,
        dim: int,
        axes_dim: tuple[int, ...],
        theta: float,
        pool: tuple[int, int, int],
        rows: int,
        *,
        compat: str | None = None,
    ) -> None:
        super().__init__(dim, axes_dim, theta, wide=True, compat=compat)
        if not all(1 <= k <= 6 for k in pool):
            raise PosencError(
                f"`compressed_patch_size` / `patch_size` = {pool}: a pool of k rows is the "
                "rotation at their centre only for k from 1 to 6"
            )
        self.pool, self.rows = pool, rows

    def compressed(self, fhw: Sequence[int], device: Any) -> Tensor:
        """The compressed grid's table ``[F * H * W, D / 2]``."""
        fhw = self.grid(fhw)
        device = torch.device("cpu") if device is None else torch.device(device)
        wide = wide_dtype(device)
        if self.compat is not None:
            parts = []
            for a, (d, k, n) in enumerate(zip(self.axes_dim, self.pool, fhw, strict=True)):
                pos = [torch.arange(self.rows, device=device)]
                rows = original.pooled_rows(
                    original.complex_grid(pos, (d,), self.theta, wide=wide), k
                )[:n]
                shape = [1, 1, 1, d // 2]
                shape[a] = n
                parts.append(rows.reshape(shape).expand(*fhw, -1))
            return torch.cat(parts, dim=-1).flatten(0, -2)  # [n, width] (an empty grid too)
        cos, sin = rope_grid(
            tuple(fhw),
            self.dim,
            preset=WAN.name,
            axes_dim=self.axes_dim,
            base=self.theta,
            layout="compact",
            dtype=wide,
            device=device,
            start=[(k - 1) / 2 for k in self.pool],
            step=[float(k) for k in self.pool],
        )
        return torch.complex(cos, sin)

    def forward(  # type: ignore[override]
        self, far_cfg: Any, device: Any = None, clean_hidden_states: Any = None
    ) -> dict[str, Tensor]:
        """The tables of the compressed and full frames ``far_cfg`` describes."""
        frames, cut = far_cfg["total_frames"], int(far_cfg["num_compressed_frames"])
        full_fhw = self.grid((frames, *far_cfg["full_frame_shape"]))
        small_fhw = self.grid((frames, *far_cfg["compressed_frame_shape"]))
        total, d = full_fhw[0], self.dim // 2
        full = self.table(full_fhw, device).reshape(total, math.prod(full_fhw[1:]), d)
        small = self.compressed(small_fhw, device).reshape(total, math.prod(small_fhw[1:]), d)
        parts = [small[:cut].flatten(0, 1), full[cut:].flatten(0, 1)]
        if clean_hidden_states is not None:
            parts.append(parts[1])
        freqs = torch.cat(parts, dim=0)[None, None]
        return {"query": freqs, "key": freqs}
