"""The stand-in for timm's ``RotaryEmbeddingMRope`` that :func:`posenc.torch.patch` puts in
place (:class:`TimmMRopeEmbedding`; the recogniser is in ``_patch_timm_rope.py``): called as
the original is (``get_embed(shape, dtype)``: ``cat(sin, cos)`` ``[H * W, 2 * dim]``, halves),
exact by default or timm's own float32 tables (:func:`posenc.compat.timm.mrope_tables`).

timm's module (GenLIP, NaFlexViT ``rope_type='mrope'``) is Qwen3-VL's interleaved multimodal
RoPE over an image: one ladder ``temperature ** (-2j / dim)``, frequency ``j`` reading the
row, the column or a time axis held at 0 (:func:`posenc.spec.families.timm_mrope
.mrope_sections`); posenc's ``rope(ids, dim, sections=…, interleave_sections=True)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from posenc.api.rope import rope
from posenc.compat import timm as original
from posenc.evaluate.positions import grid_shape
from posenc.spec.families.timm_mrope import TIMM_MROPE, mrope_sections
from posenc.torch._base import _Tracked


class TimmMRopeEmbedding(_Tracked):
    """timm's ``RotaryEmbeddingMRope(dim, mrope_section, temperature)``, its tables exact
    (float64 angles rounded once) or, with ``compat=True``, timm's float32 ones.

    ``get_embed(shape, dtype=None)`` gives ``cat(sin, cos)`` ``[H * W, 2 * dim]`` of the
    ``(H, W)`` grid, in ``dtype`` or the module's frequency dtype (float32; float64 after
    ``.double()``), as timm's. Nothing is kept: timm builds the tables per call, and its
    buffers (``inv_freq``, ``axis``) are not saved either.
    """

    def __init__(
        self,
        dim: int,
        mrope_section: Sequence[int],
        temperature: float,
        *,
        compat: bool = False,
        dtype: torch.dtype = torch.float32,
        device: Any = None,
    ) -> None:
        super().__init__(device=device, dtype=dtype)
        self.dim, self.temperature, self.compat = int(dim), float(temperature), compat
        self.mrope_section = tuple(int(s) for s in mrope_section)
        self.sections = mrope_sections(self.dim, self.mrope_section)
        self.grid_indexing = "ij"
        self.aug_active = False

    def _freq_dtype(self) -> torch.dtype:
        """timm's ``inv_freq`` dtype: the module's, at least float32."""
        return self._dtype if torch.finfo(self._dtype).bits >= 32 else torch.float32

    def get_embed(self, shape: Sequence[int], dtype: torch.dtype | None = None) -> Tensor:
        """``cat(sin, cos)`` ``[H * W, 2 * dim]`` of the grid ``shape`` (halves layout)."""
        h, w = grid_shape(shape, 2, axes="(H, W): timm's MRoPE tables are of 2D grids")
        if self.compat:
            row_col = (self.mrope_section[1], self.mrope_section[2])
            sin, cos = original.mrope_tables(
                (h, w), self.dim, row_col, self.temperature, self._device, self._freq_dtype()
            )
            return torch.cat([sin, cos], dim=-1).to(dtype=dtype)
        f64 = torch.float64
        rows, cols = torch.meshgrid(
            torch.arange(h, dtype=f64), torch.arange(w, dtype=f64), indexing="ij"
        )
        ids = torch.stack([torch.zeros_like(rows), rows, cols]).reshape(3, -1).to(self._device)
        cos, sin = rope(
            ids,
            self.dim,
            base=self.temperature,
            layout="halves",
            sections=self.sections,
            interleave_sections=True,
            dtype=dtype or self._freq_dtype(),
        )
        return torch.cat([sin, cos], dim=-1)

    def extra_repr(self) -> str:
        mode = ", compat='timm'" if self.compat else ""
        return (
            f"{self.dim}, preset={TIMM_MROPE.name!r}, mrope_section={self.mrope_section}, "
            f"sections={self.sections}, base={self.temperature:g}{mode}"
        )
