"""The stand-in for Gemma 4's vision rotary modules (transformers' ``Gemma4VisionRotaryEmbedding``,
timm's ``Gemma4RotaryEmbedding2D``) that :func:`posenc.torch.patch` puts in place; the
recognisers are in ``_patch_hf_vision.py`` and ``_patch_timm_rope.py``. Nothing is kept in the
state dict."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posenc.api.rope import rope
from posenc.compat import gemma4 as original
from posenc.errors import PosencError
from posenc.spec.families.gemma4_vision import GEMMA4_VISION
from posenc.torch._base import _Tracked

PRESET = GEMMA4_VISION.name


class Gemma4VisionRope(_Tracked):
    """Called as the original is: ``forward(x, position_ids)`` with ``position_ids`` ``[B, N,
    2]`` (x, y) patch ids (the processor's padding ``(-1, -1)`` included) returns ``(cos,
    sin)``, each ``[B, N, dim]`` in ``x``'s dtype, laid out ``[x | x][y | y]``.

    Exact (``compat=False``): :func:`posenc.rope` of the ids (float64 angles, one rounding to
    ``x``'s dtype). Compat: the originals' float32 arithmetic
    (:func:`posenc.compat.gemma4.ids_tables`) with the ``inv_freq`` their buffer holds (the
    float32 ladder, rounded to the dtype ``.to()`` moved the module to, as the buffer is).

    Args:
        dim: the head dimension (a multiple of 4).
        base: ``rope_theta`` (100).
        compat: repeat the originals' arithmetic.
        library: whose module it replaces, ``"transformers"`` or ``"timm"``.
        dtype: the dtype of the original's ``inv_freq`` buffer now.
        device: the original's device.
    """

    def __init__(
        self,
        dim: int,
        base: float,
        *,
        compat: bool,
        dtype: torch.dtype,
        device: Any,
        library: str = "transformers",
    ) -> None:
        super().__init__(device=device, dtype=torch.float32)
        rope([[0, 0]], dim, preset=PRESET, base=base)  # refuses what posenc cannot do
        self.dim, self.base, self.compat, self.library = dim, float(base), compat, library
        self.head_dim, self.rope_theta = dim, float(base)  # timm's attribute names
        if dtype != torch.float32:
            self.to(dtype)

    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """``x`` gives the dtype and device; ``position_ids`` ``[..., 2]`` the (x, y) ids."""
        if not isinstance(position_ids, Tensor) or position_ids.shape[-1:] != (2,):
            got = tuple(position_ids.shape) if isinstance(position_ids, Tensor) else position_ids
            raise PosencError(
                f"`position_ids` of {type(self).__name__} must be a [..., 2] tensor of (x, y) "
                f"patch ids, got {got!r}"
            )
        ids = position_ids.to(x.device)
        with torch.no_grad():
            if self.compat:
                inv = original.inv_freq(self.dim, self.base).to(self._dtype).to(x.device)
                cos, sin = original.ids_tables(ids, inv, matmul=self.library == "timm")
                return cos.to(x.dtype), sin.to(x.dtype)
            out = x.dtype if x.dtype.is_floating_point else torch.float32
            cos, sin = rope(ids, self.dim, preset=PRESET, base=self.base, dtype=out)
        return cos.contiguous(), sin.contiguous()

    def reset_parameters(self) -> None:
        """timm's ``init_weights`` calls it: nothing is kept, nothing to reset."""

    def init_non_persistent_buffers(self) -> None:
        """timm's name for the same: nothing to do."""

    def extra_repr(self) -> str:
        mode = f", compat='original' ({self.library}'s)" if self.compat else ""
        return f"{self.dim}, preset={PRESET!r}, base={self.base:g}{mode}"
