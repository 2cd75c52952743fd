"""The stand-in :func:`posenc.torch.patch` puts in place of diffusers'
``LTX2AudioVideoRotaryPosEmbed`` (LTX-2's video, audio and cross-attention rotary modules; the
recogniser is in ``_patch_diffusers_ltx2.py``): called as the original is, its coordinates
(``prepare_video_coords``, ``prepare_audio_coords``) in float64 and its tables exact, or, with
``compat``, diffusers' own float32 arithmetic (:mod:`posenc.compat.diffusers_ltx2`). Nothing
is kept in the state dict."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.api.rope import rope
from posenc.compat.diffusers_ltx2 import ltx2_coords, ltx2_tables
from posenc.errors import PosencError
from posenc.spec.families.ltx2 import LTX2_AUDIO, LTX2_VIDEO


class LTX2Rope(nn.Module):
    """``LTX2AudioVideoRotaryPosEmbed``'s stand-in: ``forward(coords, device=None)`` ->
    ``(cos, sin)``, ``[B, N, dim]`` float32 (``rope_type="interleaved"``) or ``[B, heads, N,
    dim / (2 heads)]`` (``"split"``), for ``coords`` ``[B, k, N, 2]`` patch bounds (their
    midpoints) or ``[B, k, N]`` positions, ``k`` = 3 (video) or 1 (audio, cross-attention).
    Exact: posenc's tables of ``2 c - 1``, ``c = midpoint / base`` in float64 (presets
    ``ltx2-video``, ``ltx2-audio``); ``compat``: diffusers' arithmetic.

    ``settings`` are the original's attributes of the same names (``dim``, ``patch_size``,
    ``patch_size_t``, ``base_num_frames``, ``base_height``, ``base_width``, ``sampling_rate``,
    ``hop_length``, ``scale_factors``, ``theta``, ``causal_offset``, ``modality``,
    ``double_precision``, ``rope_type``, ``num_attention_heads``)."""

    def __init__(self, settings: dict[str, Any], compat: str | None = None) -> None:
        super().__init__()
        s = settings
        self.dim, self.theta = int(s["dim"]), float(s["theta"])
        self.patch_size, self.patch_size_t = int(s["patch_size"]), int(s["patch_size_t"])
        self.base_num_frames = s["base_num_frames"]
        self.base_height, self.base_width = s["base_height"], s["base_width"]
        self.sampling_rate, self.hop_length = s["sampling_rate"], s["hop_length"]
        self.scale_factors = tuple(s["scale_factors"])
        self.causal_offset, self.modality = s["causal_offset"], s["modality"]
        self.double_precision, self.rope_type = bool(s["double_precision"]), s["rope_type"]
        self.num_attention_heads = int(s["num_attention_heads"])
        self.audio_latents_per_second = (
            float(self.sampling_rate) / float(self.hop_length) / float(self.scale_factors[0])
        )
        self.compat = compat
        kinds = (self.modality, self.rope_type)
        if kinds[0] not in ("video", "audio") or kinds[1] not in ("interleaved", "split"):
            raise PosencError(
                f"LTX2AudioVideoRotaryPosEmbed: modality {self.modality!r} and rope_type "
                f"{self.rope_type!r} are not diffusers' ('video'/'audio', 'interleaved'/'split')"
            )
        heads = self.num_attention_heads
        if self.rope_type == "split" and (self.dim // 2) % heads:
            raise PosencError(
                f"LTX2AudioVideoRotaryPosEmbed: dim / 2 = {self.dim // 2} does not split into "
                f"{heads} heads"
            )
        for axes in (1, 3) if self.modality == "video" else (1,):  # refused now if it cannot
            self._exact(torch.zeros(1, axes, 1, dtype=torch.float64))

    @property
    def bases(self) -> tuple[float, ...]:
        """``max_positions``: the coordinates' divisors, per axis."""
        if self.modality == "audio":
            return (float(self.base_num_frames),)
        return (float(self.base_num_frames), float(self.base_height), float(self.base_width))

    def _coords_dtype(self) -> torch.dtype:
        return torch.float32 if self.compat is not None else torch.float64

    def prepare_video_coords(
        self,
        batch_size: int,
        num_frames: int,
        height: int,
        width: int,
        device: Any,
        fps: float = 24.0,
    ) -> Tensor:
        """``[B, 3, N, 2]`` patch bounds in pixels, frames in seconds (float64 when exact)."""
        p = (self.patch_size_t, self.patch_size, self.patch_size)
        out = ltx2_coords(
            (num_frames, height, width),
            self.scale_factors,
            p,
            self.causal_offset,
            fps=fps,
            dtype=self._coords_dtype(),
            device=device,
        )
        return out.repeat(batch_size, 1, 1, 1)

    def prepare_audio_coords(
        self, batch_size: int, num_frames: int, device: Any, shift: int = 0
    ) -> Tensor:
        """``[B, 1, N, 2]`` start and end of each latent frame in seconds."""
        out = ltx2_coords(
            (num_frames,),
            self.scale_factors[:1],
            (self.patch_size_t,),
            self.causal_offset,
            hop=self.hop_length,
            rate=self.sampling_rate,
            shift=shift,
            dtype=self._coords_dtype(),
            device=device,
        )
        return out.expand(batch_size, -1, -1, -1)

    def prepare_coords(self, *args: Any, **kwargs: Any) -> Tensor:
        """``prepare_video_coords`` or ``prepare_audio_coords``, by the modality."""
        if self.modality == "video":
            return self.prepare_video_coords(*args, **kwargs)
        return self.prepare_audio_coords(*args, **kwargs)

    def forward(self, coords: Tensor, device: Any = None) -> tuple[Tensor, Tensor]:
        """The tables of every token of ``coords``."""
        device = device or coords.device
        heads = self.num_attention_heads if self.rope_type == "split" else None
        if self.compat is not None:
            return ltx2_tables(
                coords.to(device),
                self.dim,
                self.theta,
                self.bases,
                double_precision=self.double_precision,
                heads=heads,
            )
        cos, sin = self._exact(coords)
        if heads is not None:
            b, n = cos.shape[:2]
            cos, sin = (t.reshape(b, n, heads, -1).swapaxes(1, 2) for t in (cos, sin))
        return cos.to(device), sin.to(device)

    def _exact(self, coords: Tensor) -> tuple[Tensor, Tensor]:
        """``[B, N, dim]`` (interleaved) or ``[B, N, dim / 2]`` (one column per angle)."""
        c = coords.double()
        if c.ndim == 4:
            c = c.mean(dim=-1)  # the midpoint, rounded once
        k = c.shape[1]
        if k not in (1, 3) or (k == 3 and self.modality == "audio"):
            raise PosencError(
                f"LTX2AudioVideoRotaryPosEmbed ({self.modality}): coordinates of 3 axes "
                f"(video) or 1 (audio, cross-attention), got {k}"
            )
        base = torch.tensor(self.bases[:k], dtype=torch.float64, device=c.device)
        ids = 2 * c.transpose(1, 2) / base - 1  # [B, N, k]
        preset = LTX2_VIDEO.name if k == 3 else LTX2_AUDIO.name
        layout = "compact" if self.rope_type == "split" else "interleaved"
        cos, sin = rope(
            ids if k == 3 else ids[..., 0],
            self.dim,
            preset=preset,
            base=self.theta,
            layout=layout,
            dtype=torch.float32,
        )
        return cos, sin

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{self.dim}, {self.modality}, rope_type={self.rope_type!r}{mode}"
