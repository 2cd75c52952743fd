"""``RotaryEmbedding.from_hf``'s module: a stand-in for a transformers model's own rotary
module, returning what that family's module returns (see :class:`HFRotaryEmbedding`).

Shapes: ``b`` batch, ``s`` sequence, ``d`` head channels.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from posenc import evaluate
from posenc.compat import transformers as _rope_compat
from posenc.errors import PosencError, check_choice
from posenc.evaluate.libs import as_positions
from posenc.evaluate.positions import Positions
from posenc.spec.layout import Plan
from posenc.spec.rotary import Rotary, rotary
from posenc.torch._base import _traceable, _Tracked
from posenc.torch._positions import _spread

_HALF = (torch.bfloat16, torch.float16)
_EXACT_FLOAT32 = 2.0**24  # past it, not every integer position is a float32


@dataclass
class _Tables:
    """One set of tables (the module's, or one layer type's): its rotary spec and plan, and
    transformers' ``dynamic`` memory: the longest length its ``inv_freq`` was grown to, and
    the 16-bit casts that grown buffer went through since; compat's kept inverse frequencies
    of the default phase (the module's buffer: computed once, on the module's device, through
    its casts)."""

    rotary: Rotary
    plan: Plan
    cached: int | None
    grown: _rope_compat.Casts = ()
    inv_freq: _rope_compat.InvFreq | None = None


class HFRotaryEmbedding(_Tracked):
    """A drop-in for a transformers model's rotary module (``<Model>RotaryEmbedding(config)``),
    built by :meth:`RotaryEmbedding.from_hf`.

    ``forward(x, position_ids)`` returns what that model family's module returns, with its
    shapes: ``(cos, sin)`` ``[b, s, d]`` in ``x.dtype`` (float32 for OLMo; halves, interleaved,
    or compact ``[b, s, d/2]`` for gpt-oss), or one complex64 ``[b, s, d/2]`` tensor (Llama 4,
    DeepSeek-V2). ``position_ids`` is ``[b, s]`` (multimodal families: also ``[3, b, s]``).

    Per-layer-type families (Gemma 3, Gemma 3n, OLMo 3: ``config.rope_parameters`` keyed by
    layer type, e.g. ``{"sliding_attention": {...}, "full_attention": {...}}``): like
    transformers' module, one module serves every layer, holding one set of tables per layer
    type (:attr:`layer_types`, ``sorted(set(config.layer_types))``), and its forward is
    ``forward(x, position_ids, layer_type)``, as the model calls it once per layer type
    (``self.rotary_emb(hidden_states, position_ids, layer_type)``). So it replaces
    ``model.model.rotary_emb`` as a whole, as for every other family.

    ``compat="transformers"`` gives transformers' own float32 numbers, bit for bit on CPU,
    including the dynamic rule's memory (its module keeps the longest sequence seen until a
    call shorter than the original length), and its 16-bit buffers: ``model.to(torch.bfloat16)``
    (or ``float16``) casts the ``inv_freq`` buffer of transformers' module, which its forward
    reads back as float32. This module tracks its own moves alike: moved to a 16-bit dtype,
    it computes with the inverse frequencies rounded to it (for good: a later float32 keeps
    them rounded, as the buffer does). So give it the dtype of the replaced module's
    ``inv_freq`` (float32 after ``from_pretrained(..., dtype=torch.bfloat16)``, which
    recomputes the buffer; bf16 after ``model.to(torch.bfloat16)``), and later moves reach
    both alike. Positions past 2^24 are not all float32 numbers: there transformers' tables
    are float32 garbage, which compat returns bit for bit, with one warning per module.

    Default: exact tables, in ``x``'s dtype, whatever dtype the module was moved to (its
    ``inv_freq`` is never rounded: that is the point of posenc), and ``dynamic`` reads each
    call's own length (the same ids give the same tables, whatever came before).
    """

    def __init__(
        self,
        config: Any,
        compat: str | None = None,
        device: Any = None,
        family: _rope_compat.Family | None = None,
    ) -> None:
        super().__init__(device=device, dtype=torch.float32)
        self.compat = None if compat is None else check_choice("compat", compat, ("transformers",))
        self.layer_types = _rope_compat.layer_types(config, family)
        reads = [_rope_compat.read_config(config, t, family) for t in self.layer_types or (None,)]
        hf = reads[0]
        self.config = config
        self.model_type = hf.model_type
        self.form = hf.family.form
        self._float32 = hf.family.float32 or self.form == "complex"
        self.original_max_seq_len = hf.max_position_embeddings
        self._tables: dict[str | None, _Tables] = {}
        for read in reads:
            r = rotary(**read.keywords)
            which = "" if read.layer_type is None else f", {read.layer_type!r}"
            plan = _traceable(r.plan(None, f"from_hf({read.model_type!r}{which})"))
            self._tables[read.layer_type] = _Tables(r, plan, read.max_position_embeddings)
        self._casts: _rope_compat.Casts = ()  # the 16-bit dtypes it was moved to, in order
        self._warned = False
        self._keep_inv_freq()

    @property
    def rotary(self) -> Rotary:
        """The rotary spec of a module with one set of tables (``rotaries`` for all)."""
        if self.layer_types:
            raise PosencError(
                f"the {self.model_type!r} module holds one rotary per layer type: read "
                f"`.rotaries[layer_type]` ({', '.join(map(repr, self.layer_types))})"
            )
        return self._tables[None].rotary

    @property
    def max_seq_len_cached(self) -> int | None:
        """transformers' attribute of the same name: the longest length the ``dynamic`` rule's
        frequencies were grown to in compat mode (else ``max_position_embeddings``); with
        tables per layer type, the first layer type's."""
        return next(iter(self._tables.values())).cached

    @property
    def rotaries(self) -> dict[str | None, Rotary]:
        """The rotary spec of each layer type (``None``: the one set of most families)."""
        return {k: t.rotary for k, t in self._tables.items()}

    def forward(self, x: Tensor, position_ids: Tensor, layer_type: str | None = None) -> Any:
        """What the family's own rotary module returns for ``position_ids`` (``[b, s]``, or
        ``[3, b, s]`` for multimodal sections): ``(cos, sin)`` in ``x``'s dtype (float32
        for OLMo) and the family's form, or one complex tensor (Llama 4, DeepSeek-V2).
        ``layer_type``: which layer type's tables, in per-layer-type families (required
        there, as in transformers' module; None elsewhere)."""
        tables = self._tables_for(layer_type)
        r = tables.rotary
        pos = as_positions(position_ids, "position_ids", on_device=not r.scaling.rule.uses_seq_len)
        if self.compat is not None:
            self._warn_past_float32(pos)
        if pos.values.ndim == 2:
            pos = _spread(r, pos)
        pos = evaluate.rotary_axes_last(r, pos)
        seq_len = evaluate.rotary_seq_len(r, pos, None) if r.scaling.rule.uses_seq_len else None
        if self.compat is not None:
            casts = self._casts
            if r.scaling.rule.remembers_length and seq_len is not None:
                seq_len, casts = self._remember(tables, seq_len)
            elif r.scaling.rule.switches_tables and r.scaling.phase(seq_len) is not None:
                casts = self._dtype_casts()  # the long table, copied into the buffer
            kept = tables.inv_freq
            if (
                kept is None
                or r.scaling.phase(seq_len) is not None  # another phase: computed as before
                or casts != self._casts
                or kept[0].device != pos.values.device
            ):
                kept = None
            if self.form == "complex":
                return _rope_compat.polar(r, pos, seq_len, casts, kept)
            dtype = torch.float32 if self._float32 else x.dtype
            return _rope_compat.rope(r, pos, seq_len, dtype, casts, kept)
        plan = tables.plan if r.scaling.phase(seq_len) is None else r.plan(seq_len)
        work = torch.float32 if self._float32 else x.dtype
        both = evaluate.points(plan, pos, coords=r.ndim > 1, dtype=work, padding_idx=None)
        w = r.width
        if self.form == "complex":
            return torch.complex(both[..., :w], both[..., w:])
        return both[..., :w], both[..., w:]

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def _tables_for(self, layer_type: str | None) -> _Tables:
        tables = self._tables.get(layer_type)
        if tables is not None:
            return tables
        if not self.layer_types:
            raise PosencError(
                f"the {self.model_type!r} rotary module holds one set of tables: `layer_type` "
                f"must be None, got {layer_type!r}"
            )
        raise PosencError(
            f"`layer_type` must be one of {', '.join(map(repr, self.layer_types))} (the "
            f"{self.model_type!r} module holds one set of tables per layer type), got "
            f"{layer_type!r}"
        )

    def _warn_past_float32(self, pos: Positions) -> None:
        """Compat: one warning per module, the first time positions read on the host pass
        2^24 (never a device read to check)."""
        bound = pos.bound
        if self._warned or bound is None or bound <= _EXACT_FLOAT32:
            return
        self._warned = True
        warnings.warn(
            f"position_ids reach {bound:.0f}, past 2^24: transformers casts them to float32, "
            f"where not every position is exact, so its tables there (which compat="
            f"{self.compat!r} returns bit for bit) are not the positions' own; compat=None "
            "is exact at every position",
            UserWarning,
            stacklevel=5,
        )

    def _remember(self, tables: _Tables, seq_len: int) -> tuple[int, _rope_compat.Casts]:
        """transformers' dynamic update: grow past the longest length seen (a fresh float32
        buffer), reset below the original one (the original buffer); the length whose
        frequencies the module then holds, and the casts its buffer went through."""
        original, cached = self.original_max_seq_len, tables.cached
        assert original is not None
        assert cached is not None
        if seq_len > cached:
            cached = seq_len
            tables.grown = ()
        elif seq_len < original < cached:
            cached = original
        tables.cached = cached
        return cached, (self._casts if cached == original else tables.grown)

    def _dtype_casts(self) -> _rope_compat.Casts:
        """The rounding of a float32 table copied into a buffer of the module's dtype."""
        return (self._dtype,) if self._dtype in _HALF else ()

    def _moved(self) -> None:
        """transformers' ``.to(dtype)`` casts ``inv_freq`` (and ``original_inv_freq``): a
        16-bit dtype rounds them, for good (a later float32 keeps the rounded values)."""
        if self._dtype in _HALF:
            self._casts = _cast(self._casts, self._dtype)
            for tables in self._tables.values():
                tables.grown = _cast(tables.grown, self._dtype)
        self._keep_inv_freq()

    def _keep_inv_freq(self) -> None:
        """Compat: each layer type's inverse frequencies of the default phase, computed once
        on the module's device through its casts, as transformers' module keeps its
        ``inv_freq`` buffer (plain attributes, not buffers: the state dict stays empty).
        Other phases (a grown ``dynamic`` length, ``longrope``'s long table) are computed
        per call, as their buffers change with the length."""
        for tables in self._tables.values():
            tables.inv_freq = (
                None
                if self.compat is None
                else _rope_compat.inv_freq(tables.rotary, None, self._device, self._casts)
            )

    def extra_repr(self) -> str:
        sets = []
        for layer_type, tables in self._tables.items():
            r = tables.rotary
            name = "" if layer_type is None else f"{layer_type}: "
            sets.append(f"{name}dim={r.dim}, base={r.base:g}, rope_type={r.scaling.rope_type!r}")
        mode = "exact" if self.compat is None else f"compat={self.compat!r}"
        return f"{self.model_type!r}, {self.form}, {'; '.join(sets)}, {mode}"


def _cast(casts: _rope_compat.Casts, dtype: torch.dtype) -> _rope_compat.Casts:
    """``casts`` then ``dtype`` (rounding twice to the same dtype is rounding once)."""
    return casts if casts and casts[-1] == dtype else (*casts, dtype)
