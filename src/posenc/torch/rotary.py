"""Rotary position embeddings as a module: ``RotaryEmbedding`` rotates queries and keys, and
``RotaryEmbedding.from_hf`` stands in for a transformers model's own rotary module.

The tables come from the core (:mod:`posenc.api.rope`): exact (float64 angles, one rounding),
in float32 for float32 and 16-bit activations (the rotation runs in float32, then rounds once
to the activations' dtype) and float64 for float64 ones. The tables of the first
``cached_length`` positions are kept (:class:`~posenc.torch._kept.KeptRows`), and a window
of rows past them for decoding: eager calls slice or gather them; ``torch.compile`` reads
the kept rows that cover a call and computes the rest in the graph; ``torch.export`` and
ONNX compute every row in the graph. No length or offset is baked in. Nothing is a buffer:
the state_dict is empty and DDP has nothing to broadcast.

Shapes: ``b`` batch, ``h`` heads, ``s`` sequence, ``d`` head channels, ``t`` packed tokens.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, overload

import torch
from torch import Tensor

from posenc import evaluate
from posenc.api.options import RotaryOptions, checked
from posenc.errors import PosencError, check_bool, check_int
from posenc.evaluate.libs import as_positions, tracing
from posenc.evaluate.libs.torch_rotation import rotate
from posenc.evaluate.positions import Positions
from posenc.spec.ladders import SPACINGS
from posenc.spec.layout import Plan
from posenc.spec.rotary import Rotary, rotary
from posenc.torch._base import _traceable, _Tracked
from posenc.torch._hf_rotary import HFRotaryEmbedding
from posenc.torch._kept import KeptRows
from posenc.torch._positions import _spread, offset_positions, packed_positions

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11

WINDOW = 256
"""Rows kept past the cached ones, for decoding: a call whose positions span less than half
of it refills it at most once per ``WINDOW / 2`` steps of a decoding loop."""


class RotaryEmbedding(_Tracked):
    """Rotates queries and keys by their positions: RoPE, exact, in any scaling rule.

    ``q, k = rope(q, k)`` rotates the first ``dim`` channels of every head of ``q`` and
    ``k`` (the rest pass through: partial rotary) by the exact tables of their positions.

    Args:
        dim: the rotary width (even; at most the head dimension).
        preset: a model family's keywords (``posenc.presets("rotary")``); keywords given
            beside it replace the preset's.
        seq_len: the sequence length the ``dynamic`` and ``longrope`` rules read. Default:
            the largest position + 1 of each call (transformers' rule), which eager calls
            read from the positions; traced ``longrope`` computes both tables and chooses on
            the device (as transformers does); traced ``dynamic`` needs it given.
        heads_first: ``q`` and ``k`` are ``[b, h, s, d]`` (True, transformers' and SDPA's
            order) or ``[b, s, h, d]`` (False: flash-attn, Megatron, vLLM).
        cached_length: positions whose tables are kept (1-D positions; eager and
            ``torch.compile`` calls read them).
        device: where the kept tables live (they follow ``.to()``).
        **options: the table's keywords, as :func:`posenc.rope` takes them
            (:class:`posenc.RotaryOptions`: ``base``, ``scaling``, ``sections``,
            ``interleave_sections``, ``axes_dim``, ``axes_scale``, ``axes_base``); ``layout``
            is how channels pair: ``"halves"`` (``i`` with ``i + dim/2``: HF ``rotate_half``,
            GPT-NeoX; ``"compact"`` is the same pairing) or ``"interleaved"`` (``2i`` with
            ``2i + 1``: Meta, GPT-J, Cohere, FLUX); ``"block-halves"`` and its ``blocks`` are a
            table's layout, refused here (``posenc.rope`` gives it).

    Shapes:
        - q, k: ``[b, h, s, d]`` (or ``[b, s, h, d]``); with ``cu_seqlens``, ``[t, h, d]``.
          ``q`` and ``k`` may have different head counts (grouped-query attention).
        - positions: ``[b, s]`` or ``[s]`` (with ``sections``: also ``[n_sections, b, s]``;
          with ``axes_dim``: ``[b, s, n_axes]`` or ``[s, n_axes]``), integer or real.
        - offset: int, or ``[b]`` tensor (KV-cache lengths): positions ``offset + i``.
        - cu_seqlens: ``[n + 1]`` cumulative lengths of packed documents (positions restart).
        - output: ``(q, k)`` rotated, same shapes and dtypes.

    Examples:
        >>> rope = RotaryEmbedding(128, preset="llama3")
        >>> q, k = torch.randn(1, 32, 16, 128), torch.randn(1, 8, 16, 128)
        >>> q, k = rope(q, k)                                  # positions 0 … 15
        >>> q1, k1 = rope(q[:, :, :1], k[:, :, :1], offset=16)  # the next decoding step
    """

    def __init__(
        self,
        dim: int,
        *,
        preset: str | None = None,
        seq_len: int | None = None,
        heads_first: bool = True,
        cached_length: int = 4096,
        device: Any = None,
        **options: Unpack[RotaryOptions],
    ) -> None:
        super().__init__(device=device, dtype=torch.float32)
        own = ("preset", "seq_len", "heads_first", "cached_length", "device")
        r = rotary(dim, preset=preset, **checked("RotaryEmbedding", options, RotaryOptions, own))
        if r.layout == "block-halves":
            raise PosencError(
                "`layout` of RotaryEmbedding pairs channels as 'halves', 'compact' or "
                "'interleaved'; 'block-halves' (halves inside blocks: Allegro, LTX-2) is a "
                "table's layout: use posenc.rope(..., layout='block-halves')"
            )
        if not SPACINGS[r.spacing].takes_rules:
            raise PosencError(
                f"`RotaryEmbedding` rotates by sequence or axial positions; spacing "
                f"{r.spacing!r} (LTX-Video) is read by three axes at once: use "
                "posenc.rope_grid(shape, dim, preset='ltx-video') or posenc.rope(ids, dim, ...)"
            )
        self.rotary = r
        self.preset = preset
        self.dim = r.dim
        self.pairing = "interleaved" if r.layout == "interleaved" else "halves"
        # the tables: one column per frequency ([cos | sin], dim wide), whatever the pairing
        self._tables = dataclasses.replace(r, layout="compact")
        self.seq_len = None if seq_len is None else check_int("seq_len", seq_len, minimum=1)
        self.heads_first = check_bool("heads_first", heads_first)
        self.cached_length = check_int("cached_length", cached_length, maximum=1 << 24)
        self._plan = self._plan_for(self.seq_len)
        self._kept = KeptRows(self.cached_length, self._kept_span, window=WINDOW)
        rule = r.scaling
        self._long = None  # traced longrope: the long table's plan, made now (no lock traced)
        if rule.rule.switches_tables and self.seq_len is None:
            self._long = self._plan_for(rule.p["original_max_position_embeddings"] + 1)
        self._moved()

    @classmethod
    def from_hf(
        cls, config: Any, compat: str | None = None, *, device: Any = None
    ) -> HFRotaryEmbedding:
        """A drop-in for the rotary module of the transformers model ``config`` describes:
        ``model.model.rotary_emb = RotaryEmbedding.from_hf(model.config)``.

        Args:
            config: a transformers config (``LlamaConfig``, ``Qwen2VLConfig``,
                ``Gemma3TextConfig``, …) of a family in
                ``posenc.compat.transformers.FAMILIES``; any other is refused, by name. Keys of
                ``rope_parameters`` its ``rope_type`` does not take (such as
                ``original_max_position_embeddings`` on a ``dynamic`` config) are dropped
                with a warning, as transformers ignores them; a rotary width past the head
                (``partial_rotary_factor`` or GPT-NeoX's ``rotary_pct`` above 1) is refused.
            compat: ``"transformers"``: transformers' float32 numbers bit for bit (not one
                logit changes), in float32 and 16-bit models alike once this module has the
                dtype of the replaced module's ``inv_freq`` (``model.to(torch.bfloat16)``
                rounds that buffer, and this module moved to bf16 rounds alike); default
                exact, whatever the module's dtype.
            device: where the module lives (it follows ``.to()``).

        Returns:
            :class:`HFRotaryEmbedding`: ``forward(x, position_ids)`` as the family's module;
            ``forward(x, position_ids, layer_type)`` for the families with one set of tables
            per layer type (Gemma 3), which one module holds, as transformers' does.

        Examples:
            >>> config = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4)
            >>> rotary = RotaryEmbedding.from_hf(config)
            >>> cos, sin = rotary(torch.zeros(1, dtype=torch.bfloat16), torch.arange(8)[None])
            >>> cos.shape, cos.dtype
            (torch.Size([1, 8, 64]), torch.bfloat16)
            >>> gemma = RotaryEmbedding.from_hf(transformers.Gemma3TextConfig(head_dim=64))
            >>> gemma.layer_types
            ('full_attention', 'sliding_attention')
            >>> cos, sin = gemma(torch.zeros(1), torch.arange(8)[None], "sliding_attention")
        """
        return HFRotaryEmbedding(config, compat, device)

    def _plan_for(self, seq_len: int | None) -> Plan:
        return _traceable(self._tables.plan(seq_len, _label(self.rotary)))

    def _moved(self) -> None:
        """Forget the kept tables, and rebuild the one for activations in the module's dtype
        (float32 tables for 16-bit and float32 activations, float64 for float64). Rotations of
        several axes (sections, axes_dim) keep no rows: their positions are not a run."""
        work = torch.float64 if self._dtype == torch.float64 else torch.float32
        self._kept.reset(self._device, work if self.rotary.ndim == 1 else None)

    def reset_parameters(self) -> None:
        """Rebuild the kept tables (``nn.Module`` convention; they hold no learned state)."""
        self._moved()

    def _kept_span(self, start: int, length: Any, work: torch.dtype, device: Any) -> Tensor:
        """Rows ``start … start + length - 1`` of the kept plan, ``[length, dim]``."""
        return _computed(self._plan, start, length, work, device)

    @overload
    def forward(
        self,
        q: Tensor,
        k: Tensor,
        positions: Tensor | None = ...,
        *,
        offset: int | Tensor = ...,
        cu_seqlens: Tensor | None = ...,
    ) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(
        self,
        q: Tensor,
        k: None = ...,
        positions: Tensor | None = ...,
        *,
        offset: int | Tensor = ...,
        cu_seqlens: Tensor | None = ...,
    ) -> tuple[Tensor, None]: ...

    def forward(
        self,
        q: Tensor,
        k: Tensor | None = None,
        positions: Tensor | None = None,
        *,
        offset: int | Tensor = 0,
        cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``(q, k)`` rotated by their positions (``k`` may be None)."""
        for name, x in (("q", q), ("k", k)):
            if x is not None:
                self._check(name, x, packed=cu_seqlens is not None)
        length = q.shape[0] if cu_seqlens is not None else q.shape[self._seq_axis]
        if k is not None and self._batch_seq(k) != self._batch_seq(q):
            raise PosencError(
                f"`q` and `k` must share batch and sequence, got shapes {tuple(q.shape)} and "
                f"{tuple(k.shape)}"
            )
        tab = self.tables(q, positions, offset=offset, cu_seqlens=cu_seqlens, length=length)
        n = self.dim // 2
        c, s = tab[..., :n], tab[..., n:]
        if cu_seqlens is not None or not self.heads_first:
            c, s = c.unsqueeze(-2), s.unsqueeze(-2)  # [..., s, 1, n]: every head
        else:
            c, s = c.unsqueeze(-3), s.unsqueeze(-3)  # [..., 1, s, n]
        parts = (c, c, s, s)
        q = rotate(q, self.dim, self.pairing, parts)
        return q, None if k is None else rotate(k, self.dim, self.pairing, parts)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    @property
    def _seq_axis(self) -> int:
        return -2 if self.heads_first else -3

    def _batch_seq(self, x: Tensor) -> tuple[Any, ...]:
        """The batch and sequence sizes (tokens, packed) that ``q`` and ``k`` share."""
        if x.ndim == 3:
            return (x.shape[0],)
        return (x.shape[0], x.shape[self._seq_axis])

    def _check(self, name: str, x: Tensor, *, packed: bool) -> None:
        want = 3 if packed else 4
        if not isinstance(x, Tensor) or x.ndim != want or not x.is_floating_point():
            order = (
                "[tokens, heads, head_dim] (with cu_seqlens)"
                if packed
                else (
                    "[batch, heads, seq, head_dim]"
                    if self.heads_first
                    else "[batch, seq, heads, head_dim]"
                )
            )
            raise PosencError(
                f"`{name}` must be a floating tensor {order}, got "
                f"{getattr(x, 'dtype', type(x).__name__)} of shape "
                f"{tuple(getattr(x, 'shape', ()))}"
            )
        if x.shape[-1] < self.dim:
            raise PosencError(
                f"`{name}` has head_dim {x.shape[-1]}, less than the rotary width {self.dim}"
            )

    def tables(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        *,
        offset: int | Tensor = 0,
        cu_seqlens: Tensor | None = None,
        length: Any = None,
    ) -> Tensor:
        """The ``[cos | sin]`` rows ``forward`` rotates by: ``[b or 1, s, dim]`` (``[t, dim]``
        packed), one column per frequency, float32 (float64 for float64 ``x``)."""
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        if length is None:
            length = x.shape[0] if cu_seqlens is not None else x.shape[self._seq_axis]
        if cu_seqlens is not None:
            if positions is not None or not (isinstance(offset, int) and offset == 0):
                raise PosencError("`cu_seqlens` takes neither `positions` nor `offset`")
            pos = packed_positions(cu_seqlens.to(x.device), length)
            return self._rows(_spread(self.rotary, pos), work)
        if positions is not None:
            if not (isinstance(offset, int) and offset == 0):
                raise PosencError("give `positions` or `offset`, not both")
            return self._rows(self._given(positions, x, length), work)
        if self.rotary.axes_dim is not None:
            raise PosencError(
                f"axial RoPE (axes_dim={self.rotary.axes_dim}) needs `positions`: "
                f"[batch, seq, {len(self.rotary.axes_dim)}] coordinates"
            )
        if isinstance(offset, Tensor):
            continued = offset_positions(offset, x.shape[0], length, x.device)
            return self._rows(_spread(self.rotary, continued), work)
        start = check_int("offset", offset)
        if self.rotary.ndim > 1:
            rows = torch.arange(start, start + length, device=x.device)
            return self._rows(_spread(self.rotary, rows), work)
        return self._span(start, length, work, x.device)

    def _given(self, positions: Tensor, x: Tensor, length: Any) -> Tensor:
        if not isinstance(positions, Tensor):
            raise PosencError(f"`positions` must be a tensor, got {type(positions).__name__}")
        batch, r = x.shape[0], self.rotary
        p = positions.to(x.device)
        if r.axes_dim is not None:
            k = len(r.axes_dim)
            ok: tuple[tuple[int, ...], ...] = ((batch, length, k), (length, k))
        elif r.sections is not None and p.ndim == 3:
            k = len(r.sections)
            ok = ((k, batch, length), (k, length))
        else:
            ok = ((batch, length), (length,))
        if tuple(p.shape) not in ok:
            raise PosencError(
                f"`positions` must have shape {' or '.join(str(list(s)) for s in ok)}, got "
                f"{list(p.shape)}"
            )
        return p if p.ndim == 3 and r.sections is not None else _spread(self.rotary, p)

    def _plan_at(self, largest: float | Positions | None) -> Plan:
        """The plan for positions up to ``largest`` (the rules that read the length). Eager
        positions not read on the host (on an accelerator) are read here for those rules
        alone, as transformers' module does: one wait for the device (``seq_len=`` avoids
        it)."""
        rule = self._tables.scaling
        if self.seq_len is not None or not rule.rule.uses_seq_len:
            return self._plan
        if isinstance(largest, Positions):
            values = largest.values
            largest = largest.high
            if largest is None and not tracing() and not values.is_meta and values.numel():
                largest = float(values.max())
        if largest is None:
            raise PosencError(
                f"rope_type {rule.rope_type!r} reads the sequence length, which a traced "
                "(compiled or exported) call cannot: pass seq_len= to RotaryEmbedding"
            )
        return self._plan_for(int(largest) + 1)

    def _traced_longrope(self, pos: Positions, work: torch.dtype) -> Tensor | None:
        """``longrope`` without ``seq_len``, positions not read on the host (traced, or on an
        accelerator): both tables, chosen on the device by the largest position
        (transformers' own traceable choice), so no host read."""
        if self._long is None or pos.high is not None:
            return None
        length = self._tables.scaling.p["original_max_position_embeddings"]
        coords = self.rotary.ndim > 1
        short = evaluate.points(self._plan, pos, coords=coords, dtype=work, padding_idx=None)
        long = evaluate.points(self._long, pos, coords=coords, dtype=work, padding_idx=None)
        return torch.where(pos.values.max() + 1 > length, long, short)

    def _rows(self, values: Tensor | Positions, work: torch.dtype) -> Tensor:
        """Rows for explicit positions (sections leading, axes trailing)."""
        r = self.rotary
        given = values if isinstance(values, Positions) else as_positions(values, on_device=True)
        pos = evaluate.rotary_axes_last(r, given)
        if (chosen := self._traced_longrope(pos, work)) is not None:
            return chosen
        plan = self._plan_at(pos)
        if (
            plan is self._plan
            and r.ndim == 1
            and (kept := self._kept.gather(pos, work)) is not None
        ):
            return kept
        out: Tensor = evaluate.points(plan, pos, coords=r.ndim > 1, dtype=work, padding_idx=None)
        return out

    def _span(self, start: int, length: Any, work: torch.dtype, device: torch.device) -> Tensor:
        """Rows ``start … start + length - 1``, ``[1, length, dim]``: the kept rows (and the
        window) when the plan is the kept one, else computed."""
        if tracing() and self._long is not None:
            return self._rows(torch.arange(start, start + length, device=device)[None], work)
        plan = self._plan_at(None if tracing() else start + length - 1)
        if plan is self._plan:
            return self._kept.run(start, length, work, device).unsqueeze(0)
        return _computed(plan, start, length, work, device)[None]

    def extra_repr(self) -> str:
        r = self.rotary
        parts = [str(r.dim)]
        if self.preset is not None:
            parts.append(f"preset={self.preset!r}")
        parts.append(f"base={r.base:g}")
        if not r.scaling.is_default:
            parts.append(f"scaling={dict(r.scaling.p, rope_type=r.scaling.rope_type)!r}")
        parts.append(f"layout={self.pairing!r}")
        for key in ("sections", "axes_dim"):
            if getattr(r, key) is not None:
                parts.append(f"{key}={getattr(r, key)!r}")
        if r.interleave_sections:
            parts.append("interleave_sections=True")
        if not self.heads_first:
            parts.append("heads_first=False")
        return ", ".join(parts) + f", cached_length={self.cached_length}"


def _computed(plan: Plan, start: int, length: Any, work: torch.dtype, device: Any) -> Tensor:
    """Rows ``start … start + length - 1`` of ``plan``, in ``work``, computed as a module
    forward does: on an accelerator, on the device alone (no host read or copy)."""
    out: Tensor = evaluate.span(
        plan, float(start), length, dtype=work, device=device, on_device=True
    )
    return out


def _label(rotary: Rotary) -> str:
    kind = rotary.scaling.rope_type
    return f"RotaryEmbedding({rotary.dim}, rope_type={kind!r}, base={rotary.base:g})"
