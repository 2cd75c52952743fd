"""The stand-ins :func:`posenc.torch.patch` puts in place of Kandinsky 5's and 6's rotary
modules (the recognisers are in ``_patch_diffusers_kandinsky.py``): called as the originals
are, returning their 2 x 2 rotation matrices, exact (posenc's tables, rounded once to the
module's dtype) or, with ``compat``, diffusers' own float32 arithmetic
(:mod:`posenc.compat.diffusers_kandinsky`). Nothing is kept in the state dict.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from posenc.api.rope import rope
from posenc.compat.diffusers_kandinsky import halves_angles, inv_freq, kandinsky_angles
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


FORMS = ("longrope", "ideogram4", "cosmos3", "minimax", "audiodit", "anima")
"""The call forms of :class:`HalvesRope`: the modules it stands in for."""
KEPT = ("ideogram4", "cosmos3", "anima")
"""The forms whose originals read a kept ``inv_freq`` buffer (``.to()`` casts it)."""


class HalvesRope(_Tracked):
    """The stand-in for diffusers' one-off rotary modules in the ``rotate_half`` form, each
    called as its original is (``form``):

    - ``"longrope"``: OmniGen's ``OmniGenSuScaledRotaryEmbedding``, ``forward(hidden_states,
      position_ids [B, L])`` -> ``[L, dim]`` float32 of the batch's first item (Phi-3
      ``longrope``: ``scaling``; the long factors past the batch's largest position);
    - ``"ideogram4"``: ``Ideogram4MRoPE``, ``forward(position_ids [B, L, 3])`` -> ``[B, L,
      dim]`` float32 (interleaved mrope, ``sections``);
    - ``"cosmos3"``: ``Cosmos3VLTextRotaryEmbedding``, ``forward(position_ids [3, B, N] or [B,
      N], device, dtype)`` -> ``[B, N, dim]`` in ``dtype``;
    - ``"minimax"``: ``MiniMaxMusic3RotaryEmbedding``, ``forward(seq_len, device)`` -> ``[L,
      dim]`` float32;
    - ``"audiodit"``: ``AudioDiTRotaryEmbedding``, ``forward(hidden_states, seq_len=None)`` ->
      ``[L, dim]`` in the states' dtype;
    - ``"anima"``: ``AnimaRotaryEmbedding``, ``forward(hidden_states, position_ids [B, L])``
      -> ``[B, L, dim]`` in the states' dtype.

    Exact: :func:`posenc.rope` rounded once to the output dtype, autocast off;
    ``compat="transformers"``: transformers' float32 arithmetic (the same as these modules',
    bit for bit), then the original's cast. The ``KEPT`` forms keep in compat mode the
    original's non-persistent ``inv_freq`` buffer (in ``inv_dtype``; ``.to()`` rounds it as
    it rounds diffusers'), and replay the original's product of it with the positions, under
    the ambient autocast for Anima (whose matmul is unguarded), without it for the others."""

    inv_freq: Tensor

    def __init__(
        self,
        dim: int,
        base: float,
        *,
        form: str,
        scaling: dict[str, Any] | None = None,
        sections: tuple[int, ...] | None = None,
        compat: str | None = None,
        device: Any = None,
        inv_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(device=device, dtype=torch.float32)
        if form not in FORMS or compat not in (None, "transformers"):
            raise PosencError(
                f"`form` must be one of {FORMS} and `compat` None or "
                f"'transformers', got {form!r}, {compat!r}"
            )
        self.dim, self.base, self.form, self.compat = dim, float(base), form, compat
        self.scaling, self.sections = scaling, sections
        zeros = torch.zeros(3 if sections else 1, 1, dtype=torch.int64)
        rope(zeros, dim, compat=compat, **self._keywords(None))  # refused now if it cannot
        if compat is not None and form in KEPT:
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
        if self.compat is not None and self.form in KEPT:
            return self._replay(pos, dtype)
        kw = self._keywords(seq_len)
        with torch.autocast(pos.device.type, enabled=False):
            if self.compat is None:
                cos, sin = rope(pos, self.dim, dtype=dtype, **kw)
                return cos, sin
            cos, sin = rope(pos, self.dim, dtype=torch.float32, compat=self.compat, **kw)
        return cos.to(dtype), sin.to(dtype)

    def _replay(self, pos: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The ``KEPT`` forms' compat tables: the original's angles from the kept buffer
        (:func:`~posenc.compat.diffusers_kandinsky.halves_angles`), halves, cos and sin cast
        to ``dtype``; only Anima's product under the ambient autocast."""
        guard = (
            contextlib.nullcontext()
            if self.form == "anima"
            else torch.autocast(pos.device.type, enabled=False)
        )
        with guard:
            angles = halves_angles(self.inv_freq.to(pos.device), pos, self.sections)
        emb = torch.cat((angles, angles), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        """The tables, as the original's call gives them."""
        call = getattr(self, "_" + self.form)
        out: tuple[Tensor, Tensor] = call(*args, **kwargs)
        return out

    def _longrope(self, hidden_states: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        seq_len = int(position_ids.max()) + 1
        return self.table(position_ids[0].to(hidden_states.device), seq_len, torch.float32)

    def _ideogram4(self, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        if position_ids.ndim != 3 or position_ids.shape[-1] != 3:
            raise PosencError(f"`position_ids` must be [B, L, 3], got {tuple(position_ids.shape)}")
        return self.table(position_ids.permute(2, 0, 1), None, torch.float32)

    def _cosmos3(self, position_ids: Tensor, device: Any, dtype: Any) -> tuple[Tensor, Tensor]:
        if position_ids.ndim == 2:
            position_ids = position_ids[None].expand(3, *position_ids.shape)
        cos, sin = self.table(position_ids.to(device), None, dtype)
        return cos, sin

    def _minimax(self, seq_len: int, device: Any) -> tuple[Tensor, Tensor]:
        return self.table(torch.arange(int(seq_len), device=device), None, torch.float32)

    def _audiodit(self, hidden_states: Tensor, seq_len: int | None = None) -> tuple[Tensor, Tensor]:
        n = hidden_states.shape[1] if seq_len is None else int(seq_len)
        pos = torch.arange(n, device=hidden_states.device)
        return self.table(pos, None, hidden_states.dtype)

    def _anima(self, hidden_states: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        return self.table(position_ids.to(hidden_states.device), None, hidden_states.dtype)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{self.dim}, base={self.base:g}, form={self.form!r}{mode}"
