"""Vision modules: grid encodings of ViT tokens, and DETR's mask-aware sine encoding."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from posenc import evaluate
from posenc.errors import PosencError, check_int
from posenc.evaluate.positions import grid_shape
from posenc.spec.layout import Plan, channel_plan, check_channels
from posenc.spec.presets.sinusoidal import DETR
from posenc.torch._base import _Module, _traceable


class GridEncoding(_Module):
    """Adds a grid encoding to ViT tokens, for any grid size per call.

    Args:
        dim: channels.
        preset: ``mae`` (default), ``diffusers-2d``, ``diffusers-3d``, ``timm-2d``, ``hf-2d``,
            ``detr``, or an N-D one (``t2t-nd``, ``tatp22``).
        channels: ``slice(start, stop)``: only these channels (tensor parallelism).
        device: the default device of the output (it follows ``.to()``).
        dtype: the default dtype of the output (it follows ``.to()``).
        num_prefix_tokens: leading all-zero rows for class and register tokens (timm's name),
            whatever the preset's own option says.
        pos_embed_max_size: encode every grid as the centred crop of this larger square grid
            (diffusers' ``PatchEmbed`` with ``pos_embed_max_size``, Stable Diffusion 3 and
            Flux-style DiTs), so one image size's positions stay put inside larger ones.
        **options: the preset's options (``cls_token``, ``extra_tokens``, ``reverse_coord``, …);
            ``extra_tokens`` zero rows lead (class and register tokens).

    Shapes:
        - x: ``[b, extra + prod(grid), d]``; grid: ``(H, W)`` or ``(T, H, W)``.
        - output: as ``x``.

    Examples:
        >>> enc = GridEncoding(768, preset="mae", cls_token=True)
        >>> tokens = torch.randn(2, 197, 768)               # class token + 14 x 14 patches
        >>> enc(tokens, (14, 14)).shape
        torch.Size([2, 197, 768])
    """

    def __init__(
        self,
        dim: int,
        *,
        preset: str = "mae",
        channels: slice | None = None,
        num_prefix_tokens: int | None = None,
        pos_embed_max_size: int | None = None,
        device: Any = None,
        dtype: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(preset, options, grid=True, device=device, dtype=dtype)
        self.dim = check_int("dim", dim, minimum=1)
        self.channels = check_channels(channels, self.dim)
        self.width = self.dim if self.channels is None else len(range(self.dim)[self.channels])
        self._core_extra = self.enc.extra_tokens  # zero rows posenc.grid leads with
        self.extra = self._core_extra
        if num_prefix_tokens is not None:
            self.extra = check_int("num_prefix_tokens", num_prefix_tokens)
        self.pos_embed_max_size = (
            None
            if pos_embed_max_size is None
            else check_int("pos_embed_max_size", pos_embed_max_size, minimum=1)
        )
        self._plans: dict[int, Plan] = {}
        if self.enc.ndim is not None:  # refuse a bad width now, not in forward
            self._plan_for(self.enc.ndim)

    def _plan_for(self, ndim: int) -> Plan:
        if ndim not in self._plans:
            self._plans[ndim] = _traceable(
                channel_plan(self.enc, self.dim, ndim, self.label, self.channels)
            )
        return self._plans[ndim]

    def encoding(
        self, grid: tuple[int, ...], *, dtype: torch.dtype | None = None, device: Any = None
    ) -> Tensor:
        """``[extra + prod(grid), d]``: the rows ``forward`` adds."""
        dims = self._grid(grid)
        crop = None if self.pos_embed_max_size is None else (self.pos_embed_max_size,) * len(dims)
        full = evaluate.grid(
            self._plan_for(len(dims)),
            self.enc,
            dims,
            dtype=dtype or self._dtype,
            device=self._device if device is None else device,
            like=None,
            crop_from=crop,
            on_device=True,
        )
        return self._lead(full[self._core_extra :])

    def _grid(self, grid: Any) -> tuple[int, ...]:
        """``grid`` checked as ``posenc.grid`` checks its ``shape``."""
        return grid_shape(grid, self.enc.ndim, name="grid")

    def _expected_table(self, rows: int) -> np.ndarray | str:
        side = math.isqrt(max(rows - self.extra, 0))
        if self.enc.ndim not in (2, None) or side * side != rows - self.extra or not side:
            return (
                f"does not have the {self.extra} leading rows and H x H rows of a square grid "
                "this module can compare it with"
            )
        table = self.encoding((side, side), dtype=torch.float64, device="cpu")
        return table.numpy()

    def _largest_position(self, rows: int) -> int:
        return math.isqrt(max(rows - self.extra, 0))

    def _lead(self, body: Tensor) -> Tensor:
        if not self.extra:
            return body
        zeros = body.new_zeros(self.extra, self.width)
        return torch.cat((zeros, body), dim=0)

    def forward(self, x: Tensor, grid: tuple[int, ...]) -> Tensor:
        """``x`` plus the grid's encoding.

        Args:
            x: ``[b, extra + prod(grid), dim]`` tokens (class/register tokens first).
            grid: the patch grid, e.g. ``(14, 14)``; any size, no interpolation needed,
                checked as ``posenc.grid`` checks ``shape`` (integers >= 0).

        Returns:
            A tensor shaped like ``x``.
        """
        if x.ndim != 3 or x.shape[-1] != self.width:
            raise PosencError(f"`x` must be [batch, tokens, {self.width}], got {tuple(x.shape)}")
        dims = self._grid(grid)
        want = self.extra + math.prod(dims)
        if x.shape[1] != want:
            raise PosencError(
                f"`x` must have {want} tokens for grid {dims} "
                f"({self.extra} extra), got {x.shape[1]}"
            )
        return x + self.encoding(dims, dtype=x.dtype, device=x.device)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        if self.pos_embed_max_size is not None:
            opts += f", pos_embed_max_size={self.pos_embed_max_size}"
        return f"{self.dim}, preset={self.preset!r}{opts}"


class DetrSineEncoding(_Module):
    """DETR's ``PositionEmbeddingSine``, reproduced exactly, from a padding mask.

    Args:
        num_pos_feats: channels per axis (DETR: ``hidden_dim // 2``); output ``2 *`` that.
        temperature: largest timescale (10000).
        normalize: divide the 1-based coordinates by the last one (+1e-6), times ``scale``.
        scale: with ``normalize`` (default ``2*pi``).

    Shapes:
        - mask: ``[b, H, W]`` bool, True on padding (DETR's convention); or, by keyword,
          ``pixel_mask``: ``[b, H, W]``, 1 (or True) on valid pixels, 0 on padding (Hugging
          Face's convention, as ``DetrForObjectDetection`` takes it).
        - output: ``[b, 2 * num_pos_feats, H, W]``: ``[y block | x block]``.

    Examples:
        >>> pos = DetrSineEncoding(128, normalize=True)
        >>> mask = torch.zeros(2, 20, 30, dtype=torch.bool)
        >>> mask[1, :, 24:] = True                      # DETR: True = padding
        >>> pos(mask).shape
        torch.Size([2, 256, 20, 30])
        >>> pixel_mask = (~mask).long()                 # transformers: 1 = pixel
        >>> torch.equal(pos(pixel_mask=pixel_mask), pos(mask))
        True
    """

    def __init__(
        self,
        num_pos_feats: int = 64,
        temperature: float = 10000.0,
        normalize: bool = False,
        scale: float | None = None,
        *,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        opts: dict[str, Any] = {"temperature": temperature, "normalize": normalize}
        if scale is not None:
            opts["scale"] = scale
        super().__init__(DETR.name, opts, grid=True, device=device, dtype=dtype)
        self.num_pos_feats = check_int("num_pos_feats", num_pos_feats, minimum=1)
        self._plan = _traceable(channel_plan(self.enc, 2 * self.num_pos_feats, 2, self.label, None))

    def forward(self, mask: Tensor | None = None, *, pixel_mask: Tensor | None = None) -> Tensor:
        """The position encoding of a padded batch of images.

        Args:
            mask: ``[b, H, W]`` booleans, True where padding (DETR's convention).
            pixel_mask: instead of ``mask``, ``[b, H, W]`` with 1 where a pixel is (the
                Hugging Face convention).

        Returns:
            ``[b, dim, H, W]``.
        """
        if (mask is None) == (pixel_mask is None):
            raise PosencError(
                "give `mask` (True = padding, DETR) or `pixel_mask` (1 = pixel, Hugging Face), "
                "exactly one"
            )
        if pixel_mask is not None:
            if not isinstance(pixel_mask, Tensor) or pixel_mask.is_floating_point():
                raise PosencError(
                    "`pixel_mask` must be an integer or boolean tensor [batch, H, W] (1 = pixel), "
                    f"got {getattr(pixel_mask, 'dtype', type(pixel_mask).__name__)}"
                )
            mask = pixel_mask == 0
        out: Tensor = evaluate.detr(self._plan, self.enc, mask, dtype=self._dtype, on_device=True)
        return out

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        return f"num_pos_feats={self.num_pos_feats}, " + ", ".join(
            f"{k}={v!r}" for k, v in self.options.items()
        )
