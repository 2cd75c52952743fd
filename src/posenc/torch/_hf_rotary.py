"""``RotaryEmbedding.from_hf``'s module: a stand-in for a transformers model's own rotary
module, returning what that family's module returns (see :class:`HFRotaryEmbedding`).

Shapes: ``b`` batch, ``s`` sequence, ``d`` head channels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from posenc import evaluate
from posenc.compat import transformers as _rope_compat
from posenc.errors import check_choice
from posenc.evaluate.libs import as_positions
from posenc.spec.rotary import rotary
from posenc.torch._base import _traceable, _Tracked
from posenc.torch._positions import _spread


class HFRotaryEmbedding(_Tracked):
    """A drop-in for a transformers model's rotary module (``<Model>RotaryEmbedding(config)``),
    built by :meth:`RotaryEmbedding.from_hf`.

    ``forward(x, position_ids)`` returns what that model family's module returns, with its
    shapes: ``(cos, sin)`` ``[b, s, d]`` in ``x.dtype`` (float32 for OLMo; halves, interleaved,
    or compact ``[b, s, d/2]`` for gpt-oss), or one complex64 ``[b, s, d/2]`` tensor (Llama 4,
    DeepSeek-V2). ``position_ids`` is ``[b, s]`` (multimodal families: also ``[3, b, s]``).

    ``compat="transformers"`` gives transformers' own float32 numbers, bit for bit on CPU,
    including the dynamic rule's memory (its module keeps the longest sequence seen until a
    call shorter than the original length). Default: exact tables, and ``dynamic`` reads each
    call's own length (the same ids give the same tables, whatever came before).
    """

    def __init__(self, config: Any, compat: str | None = None, device: Any = None) -> None:
        super().__init__(device=device, dtype=torch.float32)
        hf = _rope_compat.read_config(config)
        self.config = config
        self.model_type = hf.model_type
        self.form = hf.family.form
        self._float32 = hf.family.float32 or self.form == "complex"
        self.compat = None if compat is None else check_choice("compat", compat, ("transformers",))
        self.rotary = rotary(**hf.keywords)
        self._plan = _traceable(self.rotary.plan(None, f"from_hf({hf.model_type!r})"))
        self.original_max_seq_len = hf.max_position_embeddings
        self.max_seq_len_cached = hf.max_position_embeddings  # transformers' dynamic memory

    def forward(self, x: Tensor, position_ids: Tensor) -> Any:
        """What the family's own rotary module returns for ``position_ids`` (``[b, s]``, or
        ``[3, b, s]`` for multimodal sections): ``(cos, sin)`` in ``x``'s dtype (float32
        for OLMo) and the family's form, or one complex tensor (Llama 4, DeepSeek-V2)."""
        r = self.rotary
        pos = as_positions(position_ids, "position_ids", on_device=not r.scaling.rule.uses_seq_len)
        if pos.values.ndim == 2:
            pos = _spread(r, pos)
        pos = evaluate.rotary_axes_last(r, pos)
        seq_len = evaluate.rotary_seq_len(r, pos, None) if r.scaling.rule.uses_seq_len else None
        if self.compat is not None:
            if r.scaling.rule.remembers_length and seq_len is not None:
                seq_len = self._remember(seq_len)
            if self.form == "complex":
                return _rope_compat.polar(r, pos, seq_len)
            return _rope_compat.rope(r, pos, seq_len, torch.float32 if self._float32 else x.dtype)
        plan = self._plan if r.scaling.phase(seq_len) is None else r.plan(seq_len)
        work = torch.float32 if self._float32 else x.dtype
        both = evaluate.points(plan, pos, coords=r.ndim > 1, dtype=work, padding_idx=None)
        w = r.width
        if self.form == "complex":
            return torch.complex(both[..., :w], both[..., w:])
        return both[..., :w], both[..., w:]

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def _remember(self, seq_len: int) -> int:
        """transformers' dynamic update: grow past the longest length seen, reset below the
        original one; the length whose frequencies the module then holds."""
        original, cached = self.original_max_seq_len, self.max_seq_len_cached
        assert original is not None
        assert cached is not None
        if seq_len > cached:
            cached = seq_len
        elif seq_len < original < cached:
            cached = original
        self.max_seq_len_cached = cached
        return cached

    def extra_repr(self) -> str:
        r = self.rotary
        mode = "exact" if self.compat is None else f"compat={self.compat!r}"
        return (
            f"{self.model_type!r}, {self.form}, dim={r.dim}, base={r.base:g}, "
            f"rope_type={r.scaling.rope_type!r}, {mode}"
        )
