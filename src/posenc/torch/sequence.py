"""Sequence modules: the paper's `PositionalEncoding`, the `SinusoidalEmbedding` lookup
(fairseq's module from token ids), packed sequences and explicit positions.

Shapes: ``b`` batch, ``s`` sequence, ``d`` channels, ``t`` packed tokens.
"""

from __future__ import annotations

import math  # noqa: F401  (the examples use it)
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from posenc.api import sinusoidal
from posenc.errors import (
    PosencError,
    check_bool,
    check_int,
    check_real,
)
from posenc.evaluate.libs import as_positions
from posenc.torch._base import _Cached
from posenc.torch._positions import offset_positions, packed_positions


def encode(
    positions: Tensor,
    dim: int,
    *,
    preset: str = "vaswani",
    dtype: torch.dtype | None = None,
    **options: Any,
) -> Tensor:
    """:func:`posenc.encode` for torch positions, in torch's default dtype unless given;
    traceable by ``torch.compile`` and export. ``[*s]`` (1D presets) -> ``[*s, dim]``.

    Examples:
        >>> ids = torch.arange(10).reshape(2, 5)
        >>> posenc.torch.encode(ids, 64).shape
        torch.Size([2, 5, 64])
    """
    out: Tensor = sinusoidal.encode(
        positions, dim, preset=preset, dtype=dtype or torch.get_default_dtype(), **options
    )
    return out


class PositionalEncoding(_Cached):
    """Adds a sinusoidal encoding to activations: the paper's module, done right.

    ``forward(x) = dropout(x * input_scale + PE)``, with ``PE`` exact to the dtype of ``x``.

    Args:
        dim: channels ``d`` of the activations.
        preset: any 1D preset (``vaswani``, ``whisper``, ``fairseq``, ``marian``, …).
        dropout: dropout probability after the addition.
        input_scale: multiplies ``x`` first (``math.sqrt(dim)`` in the paper).
        batch_first: ``x`` is ``[b, s, d]`` (True) or ``[s, b, d]``.
        cached_length: rows kept ready for the plain case; longer inputs are computed.
        channels: ``slice(start, stop)``: produce only these channels of the ``dim``-wide
            encoding (tensor parallelism); ``x`` then has ``stop - start`` channels.
        device: of the cache (it follows ``.to()``).
        dtype: of the cache (it follows ``.to()``).
        **options: the preset's options.

    Shapes:
        - x: ``[b, s, d]`` (or ``[s, b, d]``); with ``cu_seqlens``, ``[t, d]`` or ``[1, t, d]``.
        - positions: ``[b, s]`` or ``[s]``, integer or real.
        - offset: int, or ``[b]`` tensor (KV-cache lengths).
        - output: as ``x``.

    Examples:
        >>> pe = PositionalEncoding(512, dropout=0.1, input_scale=math.sqrt(512))
        >>> y = pe(torch.randn(8, 100, 512))                 # positions 0 … 99
        >>> y.shape
        torch.Size([8, 100, 512])
        >>> y = pe(torch.randn(8, 1, 512), offset=100)       # one decoding step: position 100
        >>> y = pe(torch.randn(2, 1, 512), offset=torch.tensor([100, 37]))  # per-sequence
    """

    def __init__(
        self,
        dim: int,
        *,
        preset: str = "vaswani",
        dropout: float = 0.0,
        input_scale: float = 1.0,
        batch_first: bool = True,
        cached_length: int = 2048,
        channels: slice | None = None,
        device: Any = None,
        dtype: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(dim, preset, cached_length, device, dtype, options, channels)
        p = check_real("dropout", dropout)
        if not 0 <= p < 1:
            raise PosencError(f"`dropout` must be in [0, 1), got {dropout!r}")
        self.dropout = nn.Dropout(p)
        self.input_scale = check_real("input_scale", input_scale)
        self.batch_first = check_bool("batch_first", batch_first)

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        *,
        offset: int | Tensor | None = None,
        cu_seqlens: Tensor | None = None,
    ) -> Tensor:
        """``dropout(x * input_scale + PE)``, ``PE`` in ``x``'s dtype, exact to it.

        Args:
            x: ``[b, s, d]`` with ``batch_first=True`` (the default, unlike
                ``nn.TransformerEncoder``'s ``[s, b, d]``: pass ``batch_first=False`` there);
                packed ``[t, d]`` or ``[1, t, d]`` with ``cu_seqlens``.
            positions: ``[b, s]`` or ``[s]`` explicit positions, integer or real (default
                ``offset + 0, 1, …``).
            offset: int, or ``[b]`` tensor: the KV-cache length of each sequence.
            cu_seqlens: ``[n + 1]`` boundaries of packed documents (flash-attn's), each
                restarting at position 0.

        Returns:
            A tensor shaped like ``x``.
        """
        pe = self.encoding(x, positions, offset=offset, cu_seqlens=cu_seqlens)
        if self.input_scale != 1.0:
            x = x * self.input_scale
        out: Tensor = self.dropout(x + pe)
        return out

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def encoding(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        *,
        offset: int | Tensor | None = None,
        cu_seqlens: Tensor | None = None,
    ) -> Tensor:
        """The encoding ``forward`` adds to ``x``, broadcastable to ``x``."""
        if cu_seqlens is not None:
            return self._packed(x, cu_seqlens, positions, offset)
        if x.ndim != 3:
            raise PosencError(
                f"`x` must be [batch, seq, dim]{'' if self.batch_first else ' (seq first)'}, "
                f"got shape {tuple(x.shape)}"
            )
        if x.shape[-1] != self.width:
            raise PosencError(f"`x` must have {self.width} channels, got {x.shape[-1]}")
        seq_axis = 1 if self.batch_first else 0
        length, batch = x.shape[seq_axis], x.shape[1 - seq_axis]
        if positions is not None:
            if offset is not None:
                raise PosencError("give `positions` or `offset`, not both")
            if positions.shape not in ((batch, length), (length,)) or positions.is_complex():
                raise PosencError(
                    f"`positions` must be [batch, seq] = [{batch}, {length}] or [seq] = "
                    f"[{length}], got shape {tuple(positions.shape)}"
                )
            pe = self._rows(positions.to(x.device), x.dtype)
        elif isinstance(offset, Tensor):
            rows = offset_positions(offset, batch, length, x.device)
            pe = self._rows(rows, x.dtype)
        else:
            start = 0 if offset is None else check_int("offset", offset)
            pe = self._kept.run(start, length, x.dtype, x.device)
        if pe.ndim == 3 and not self.batch_first:
            return pe.transpose(0, 1)
        return pe if self.batch_first or pe.ndim == 3 else pe.unsqueeze(1)

    def _packed(
        self, x: Tensor, cu_seqlens: Tensor, positions: Tensor | None, offset: Any
    ) -> Tensor:
        if positions is not None or offset is not None:
            raise PosencError("`cu_seqlens` takes neither `positions` nor `offset`")
        if not (x.ndim == 2 or (x.ndim == 3 and x.shape[0] == 1)):
            raise PosencError(
                f"with `cu_seqlens`, `x` must be [tokens, dim] or [1, tokens, dim], got shape "
                f"{tuple(x.shape)}"
            )
        if x.shape[-1] != self.width:
            raise PosencError(f"`x` must have {self.width} channels, got {x.shape[-1]}")
        total = x.shape[-2]
        pe = self._rows(packed_positions(cu_seqlens.to(x.device), total), x.dtype)
        return pe if x.ndim == 2 else pe.unsqueeze(0)


class SinusoidalEmbedding(_Cached):
    """An ``nn.Embedding``-like lookup of position ids, or fairseq's module from token ids.

    Args:
        dim: channels.
        preset: any 1D preset; ``fairseq`` with ``padding_idx`` for fairseq's embedding.
        from_tokens: the input is token ids; positions are fairseq's ``padding_idx + 1, …``
            over non-pad tokens, pad tokens get the zero row (needs ``padding_idx``).
        cached_length: as in :class:`PositionalEncoding`.
        channels: as in :class:`PositionalEncoding`.
        device: as in :class:`PositionalEncoding`.
        dtype: as in :class:`PositionalEncoding`; the output dtype follows the module's
            (``.to(torch.bfloat16)`` gives bf16 rows, exact).
        **options: the preset's options (``padding_idx`` for ``fairseq``).

    Shapes:
        - input: ``[*]`` integer ids (``[b, s]`` tokens with ``from_tokens``).
        - output: ``[*, d]``; with ``from_tokens`` and ``step``, ``[b, 1, d]``.

    Examples:
        >>> emb = SinusoidalEmbedding(512, preset="fairseq", padding_idx=1, from_tokens=True)
        >>> tokens = torch.tensor([[5, 6, 7, 1], [8, 9, 1, 1]])  # 1 = padding
        >>> out = emb(tokens)        # [b, s, 512], pads are zero rows
        >>> out.shape, bool(out[1, 2:].eq(0).all())
        (torch.Size([2, 4, 512]), True)
        >>> emb(tokens, step=7).shape  # incremental decoding: position padding_idx + 8
        torch.Size([2, 1, 512])
    """

    def __init__(
        self,
        dim: int,
        *,
        preset: str = "vaswani",
        from_tokens: bool = False,
        cached_length: int = 2048,
        channels: slice | None = None,
        device: Any = None,
        dtype: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(dim, preset, cached_length, device, dtype, options, channels)
        self.from_tokens = check_bool("from_tokens", from_tokens)
        if self.from_tokens and self.enc.padding_idx is None:
            raise PosencError("`from_tokens=True` needs `padding_idx` (fairseq's positions)")

    def forward(self, input: Tensor, *, step: int | None = None) -> Tensor:
        """Rows of the table for ``input``.

        Args:
            input: integer position ids ``[*]``; with ``from_tokens``, token ids ``[b, s]``
                whose positions are counted past ``padding_idx``, skipping pads (fairseq).
            step: with ``from_tokens``: incremental decoding, one position
                ``padding_idx + step + 1`` for every sequence.

        Returns:
            ``[*, dim]`` (``[b, 1, dim]`` with ``step``), pads all zero.
        """
        if input.is_floating_point() or input.is_complex() or input.dtype == torch.bool:
            raise PosencError(f"`input` must hold integer ids, got {input.dtype}")
        if input.dtype != torch.int64:
            input = as_positions(input, "input").values
        dtype = self._dtype
        if self.from_tokens:
            pad = self.enc.padding_idx
            assert pad is not None
            if step is not None:
                if input.ndim != 2:
                    raise PosencError(f"`input` must be [batch, seq], got {tuple(input.shape)}")
                pos = torch.full(
                    (input.shape[0], 1), pad + check_int("step", step) + 1, device=input.device
                )
            else:
                mask = input != pad
                pos = torch.cumsum(mask, dim=-1) * mask + pad
        elif step is not None:
            raise PosencError("`step` applies with from_tokens=True only")
        else:
            pos = input
        return self._rows(pos, dtype)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward
