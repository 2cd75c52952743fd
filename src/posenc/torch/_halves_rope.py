"""The stand-ins :func:`posenc.torch.patch` puts in place of diffusers' one-off rotary modules
in the ``rotate_half`` form (the recognisers are in ``_patch_diffusers_halves.py``): one class
per original, called as it is, on one base, :class:`HalvesRope`, that makes the tables exact
(posenc's, rounded once to the output dtype) or, with ``compat``, as transformers' float32
arithmetic, which these modules repeat. Nothing is kept in the state dict.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from posenc.api.rope import rope
from posenc.compat.diffusers_kandinsky import halves_angles, inv_freq
from posenc.errors import PosencError
from posenc.torch._base import _Tracked


class HalvesRope(_Tracked):
    """The base of the stand-ins for diffusers' one-off ``rotate_half`` rotary modules: each
    subclass is one original, its ``forward`` called as the original's is.

    Exact: :func:`posenc.rope` rounded once to the output dtype, autocast off;
    ``compat="transformers"``: transformers' float32 arithmetic (the same as these modules',
    bit for bit), then the original's cast. A subclass whose original reads a kept
    non-persistent ``inv_freq`` buffer (``kept``) keeps one in compat mode (in ``inv_dtype``;
    ``.to()`` rounds it as it rounds diffusers') and replays the original's product of it with
    the positions: under the ambient autocast where the original's is unguarded
    (``autocast``: Anima's matmul), without it for the others.

    Args:
        dim: the rotary width.
        base: ``theta``.
        scaling: a rule (OmniGen's Phi-3 ``longrope``).
        sections: interleaved multimodal sections (Qwen3-VL's), for three position axes.
        compat: None (exact) or ``"transformers"``.
        device: where the kept buffer lives.
        inv_dtype: the dtype of the original's ``inv_freq`` buffer now.
    """

    kept: ClassVar[bool] = False
    autocast: ClassVar[bool] = False
    inv_freq: Tensor

    def __init__(
        self,
        dim: int,
        base: float,
        *,
        scaling: dict[str, Any] | None = None,
        sections: tuple[int, ...] | None = None,
        compat: str | None = None,
        device: Any = None,
        inv_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(device=device, dtype=torch.float32)
        if compat not in (None, "transformers"):
            raise PosencError(f"`compat` must be None or 'transformers', got {compat!r}")
        self.dim, self.base, self.compat = dim, float(base), compat
        self.scaling, self.sections = scaling, sections
        zeros = torch.zeros(3 if sections else 1, 1, dtype=torch.int64)
        rope(zeros, dim, compat=compat, **self._keywords(None))  # refused now if it cannot
        if compat is not None and self.kept:
            kept = inv_freq(dim, self.base, self._device).to(inv_dtype)
            self.register_buffer("inv_freq", kept, persistent=False)

    def _keywords(self, seq_len: int | None) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "base": self.base,
            "scaling": self.scaling,
            "layout": "halves",
            "seq_len": seq_len,
        }
        if self.sections is not None:
            kw.update(sections=self.sections, interleave_sections=True)
        return kw

    def table(self, pos: Tensor, seq_len: int | None, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` ``[*pos.shape, dim]`` (``[*pos.shape[1:], dim]`` with sections)."""
        if self.compat is not None and self.kept:
            return self._replay(pos, dtype)
        kw = self._keywords(seq_len)
        with torch.autocast(pos.device.type, enabled=False):
            if self.compat is None:
                cos, sin = rope(pos, self.dim, dtype=dtype, **kw)
                return cos, sin
            cos, sin = rope(pos, self.dim, dtype=torch.float32, compat=self.compat, **kw)
        return cos.to(dtype), sin.to(dtype)

    def _replay(self, pos: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The compat tables of a ``kept`` original: its angles from the kept buffer
        (:func:`~posenc.compat.diffusers_kandinsky.halves_angles`), halves, cos and sin cast
        to ``dtype``; the product under the ambient autocast where the original's is."""
        guard = (
            contextlib.nullcontext()
            if self.autocast
            else torch.autocast(pos.device.type, enabled=False)
        )
        with guard:
            angles = halves_angles(self.inv_freq.to(pos.device), pos, self.sections)
        emb = torch.cat((angles, angles), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{self.dim}, base={self.base:g}{mode}"


class OmniGenRope(HalvesRope):
    """OmniGen's ``OmniGenSuScaledRotaryEmbedding`` (Phi-3 ``longrope``: ``scaling``; the long
    factors past the batch's largest position)."""

    def forward(self, hidden_states: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """``position_ids`` ``[B, L]`` -> ``[L, dim]`` float32, of the batch's first item."""
        seq_len = int(position_ids.max()) + 1
        return self.table(position_ids[0].to(hidden_states.device), seq_len, torch.float32)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward


class Ideogram4Rope(HalvesRope):
    """Ideogram 4's ``Ideogram4MRoPE`` (interleaved mrope, ``sections``)."""

    kept = True

    def forward(self, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """``position_ids`` ``[B, L, 3]`` -> ``[B, L, dim]`` float32."""
        if position_ids.ndim != 3 or position_ids.shape[-1] != 3:
            raise PosencError(f"`position_ids` must be [B, L, 3], got {tuple(position_ids.shape)}")
        return self.table(position_ids.permute(2, 0, 1), None, torch.float32)

    if TYPE_CHECKING:
        __call__ = forward


class Cosmos3TextRope(HalvesRope):
    """Cosmos 3's ``Cosmos3VLTextRotaryEmbedding`` (interleaved mrope, ``sections``)."""

    kept = True

    def forward(self, position_ids: Tensor, device: Any, dtype: Any) -> tuple[Tensor, Tensor]:
        """``position_ids`` ``[3, B, N]`` or ``[B, N]`` -> ``[B, N, dim]`` in ``dtype``."""
        if position_ids.ndim == 2:
            position_ids = position_ids[None].expand(3, *position_ids.shape)
        return self.table(position_ids.to(device), None, dtype)

    if TYPE_CHECKING:
        __call__ = forward


class MiniMaxMusicRope(HalvesRope):
    """MiniMax-Music 3's ``MiniMaxMusic3RotaryEmbedding``."""

    def forward(self, seq_len: int, device: Any) -> tuple[Tensor, Tensor]:
        """Positions ``0 … seq_len - 1`` -> ``[L, dim]`` float32."""
        return self.table(torch.arange(int(seq_len), device=device), None, torch.float32)

    if TYPE_CHECKING:
        __call__ = forward


class AudioDiTRope(HalvesRope):
    """LongCat-AudioDiT's ``AudioDiTRotaryEmbedding``."""

    def forward(self, hidden_states: Tensor, seq_len: int | None = None) -> tuple[Tensor, Tensor]:
        """Positions ``0 … L - 1`` (the states' length, or ``seq_len``) -> ``[L, dim]`` in the
        states' dtype."""
        n = hidden_states.shape[1] if seq_len is None else int(seq_len)
        pos = torch.arange(n, device=hidden_states.device)
        return self.table(pos, None, hidden_states.dtype)

    if TYPE_CHECKING:
        __call__ = forward


class AnimaRope(HalvesRope):
    """Anima's ``AnimaRotaryEmbedding``, whose product of its buffer with the positions is an
    unguarded matmul: under an autocast, compat repeats it there."""

    kept = True
    autocast = True

    def forward(self, hidden_states: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """``position_ids`` ``[B, L]`` -> ``[B, L, dim]`` in the states' dtype."""
        return self.table(position_ids.to(hidden_states.device), None, hidden_states.dtype)

    if TYPE_CHECKING:
        __call__ = forward
