"""The stand-in for transformers' vision-tower rotary modules that :func:`posenc.torch.patch`
puts in place (:class:`VisionRope`; the recognisers are in ``_patch_hf_vision.py``): called as
the original is, exact tables from posenc or, with compat, transformers' own arithmetic
(:mod:`posenc.compat.transformers_vision`) with the inverse frequencies the original's buffer
holds, rounded as ``.to()`` rounds that buffer. Nothing is kept in the state dict."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from posenc.api.rope import rope
from posenc.api.rope_grid import rope_grid
from posenc.compat import transformers_vision as original
from posenc.errors import PosencError
from posenc.spec.families.dinov3 import DINOV3
from posenc.spec.families.llama4_vision import LLAMA4_VISION
from posenc.spec.families.pixtral import PIXTRAL
from posenc.spec.families.sam import SAM2, SAM3_VIT
from posenc.torch._base import _Tracked


class VisionRope(_Tracked):
    """The stand-in for a transformers vision-tower rotary module of one ``family`` (a preset
    of :mod:`posenc.spec.families`): called as the original is.

    Exact (``compat=False``): posenc's tables (float64 angles, one rounding). Compat: the
    module's float32 arithmetic, step for step, with the ``inv_freq`` its buffer holds (the
    float32 ladder, rounded to the dtype ``.to()`` moved the module to, as the buffer is).

    Args:
        family: ``qwen2-vl-vision``, ``pixtral``, ``sam2``, ``sam3-vit``, ``dinov3`` or
            ``llama4-vision``.
        dim: the rotary width (the head dimension).
        base: ``rope_theta``.
        compat: repeat transformers' arithmetic.
        dtype: the dtype of the original's buffer (the module is moved to it).
        device: the original's device.
        grid: SAM 3: the layer's ``(rows, columns)`` and the id scale ``window / columns``;
            Llama 4: the side ``n`` of its square patch grid; DINOv3: its patch size.
        config: DINOv3: the original's config (its training augmentation is read from it).
    """

    def __init__(
        self,
        family: str,
        dim: int,
        base: float,
        *,
        compat: bool,
        dtype: torch.dtype,
        device: Any,
        grid: Any = None,
        config: Any = None,
    ) -> None:
        super().__init__(device=device, dtype=torch.float32)
        self.family, self.dim, self.base, self.compat = family, dim, float(base), compat
        self.grid, self.config = grid, config
        rope_grid((1, 1), dim, preset=family, base=base)  # refuses what posenc cannot do
        self._llama_dtype = torch.complex64  # what Llama 4's buffer is now
        self._kept: dict[Any, Any] = {}
        if dtype != torch.float32:
            self.to(dtype)

    # -- state: only the tracked dtype and device (and tables kept for them) ------------------

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> VisionRope:
        if self.family == LLAMA4_VISION.name:  # the original's buffer is complex: follow its cast
            with warnings.catch_warnings():  # a real cast: the original's buffer warns
                warnings.simplefilter("ignore")
                probe = fn(torch.empty(0, dtype=self._llama_dtype, device=self._device))
            self._llama_dtype = probe.dtype
        super()._apply(fn, recurse)
        self._kept = {}
        return self

    def _moved(self) -> None:
        self._kept = {}

    def _inv(self, device: Any) -> Tensor:
        """The ``inv_freq`` buffer the original holds now (float32 ladder, ``.to()``'s cast)."""
        inv = original.inv_freq(self.family, self.dim, self.base)
        return inv.to(self._dtype).to(device)

    # -- the forwards -------------------------------------------------------------------------

    def forward(self, x: Tensor, position_ids: Tensor | None = None) -> Any:
        """As the original: ``(x, position_ids)`` for the id forms; ``(pixel_values)`` for
        DINOv3; ``(hidden_states)`` for Llama 4."""
        if self.family == DINOV3.name:
            return self._dinov3(x)
        if self.family == LLAMA4_VISION.name:
            return self._llama4(x.device)
        if position_ids is None:
            raise PosencError(f"{type(self).__name__}({self.family!r}) needs `position_ids`")
        with torch.no_grad():
            cos, sin = (
                self._compat_ids(x, position_ids)
                if self.compat
                else self._exact_ids(x, position_ids)
            )
        if self.family == PIXTRAL.name:
            return cos.to(x.dtype), sin.to(x.dtype)
        if self.family in (SAM2.name, SAM3_VIT.name):
            return cos[None], sin[None]
        return cos, sin

    def _compat_ids(self, x: Tensor, ids: Tensor) -> tuple[Tensor, Tensor]:
        return original.ids_tables(self.family, ids, self._inv(x.device))

    def _exact_ids(self, x: Tensor, ids: Tensor) -> tuple[Tensor, Tensor]:
        if self.family == SAM3_VIT.name:  # the layer's own ids: the grid at i * window / columns
            (h, w), scale = self.grid
            key = ("grid", x.device)
            if key not in self._kept:
                rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
                own = torch.stack([cols.flatten(), rows.flatten()], dim=-1) * scale
                table = rope_grid(
                    (h, w),
                    self.dim,
                    preset=self.family,
                    base=self.base,
                    step=scale,
                    dtype=torch.float32,
                    device=x.device,
                )
                self._kept[key] = (own.to(x.device), table)
            own, table = self._kept[key]
            if ids.shape == own.shape and torch.equal(ids, own):
                cos, sin = table
                return cos, sin
        cos, sin = rope(ids, self.dim, preset=self.family, base=self.base, dtype=torch.float32)
        return cos.contiguous(), sin.contiguous()

    def _dinov3(self, pixel_values: Tensor) -> tuple[Tensor, Tensor]:
        ph, pw = self.grid
        h, w = pixel_values.shape[-2] // ph, pixel_values.shape[-1] // pw
        device, dtype = pixel_values.device, pixel_values.dtype
        c = self.config
        augment = (c.pos_embed_shift, c.pos_embed_jitter, c.pos_embed_rescale)
        if not self.compat and not (self.training and any(a is not None for a in augment)):
            cos, sin = rope_grid(
                (h, w), self.dim, preset=DINOV3.name, base=self.base, dtype=dtype, device=device
            )
            return cos.contiguous(), sin.contiguous()
        coords = original.dinov3_coords(h, w, device)
        if self.training:  # the original's random draws, in its order
            coords = original.dinov3_augment(coords, *augment)
        if self.compat:
            cos, sin = original.dinov3_tables(coords, self._inv(device))
            return cos.to(dtype), sin.to(dtype)
        k = torch.arange(self.dim // 4, dtype=torch.float64, device=device)
        omega = self.base ** (-4 * k / self.dim)  # exact at the drawn coordinates
        angles = 2 * math.pi * coords.double()[:, :, None] * omega[None, None, :]
        angles = angles.flatten(1, 2).tile(2)
        return torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)

    def _llama4(self, device: torch.device) -> Tensor:
        key = (self._llama_dtype, device)
        if key not in self._kept:
            n = self.grid
            mode = "transformers" if self.compat else None
            wide = self._llama_dtype == torch.complex128 and not self.compat
            cos, sin = rope_grid(
                (n, n),
                self.dim,
                preset=LLAMA4_VISION.name,
                base=self.base,
                compat=mode,
                device=device,
                dtype=torch.float64 if wide else torch.float32,
            )
            one = torch.ones(1, self.dim // 2, dtype=cos.dtype, device=device)
            real = torch.cat([cos[:, 0::2], one])  # the class token last, at angle 0
            imag = torch.cat([sin[:, 0::2], torch.zeros_like(one)])
            table = torch.complex(real, imag)[:, None]
            if self.compat:  # the buffer as .to() left it (a real cast keeps the real part)
                table = table.to(self._llama_dtype)
            self._kept[key] = table
        out: Tensor = self._kept[key]
        return out

    def extra_repr(self) -> str:
        mode = ", compat='transformers'" if self.compat else ""
        return f"{self.dim}, preset={self.family!r}, base={self.base:g}{mode}"
