"""PyTorch modules: drop-in sinusoidal encodings for transformers, ViTs, DETR and diffusion.

Every module holds a preset (an :class:`~posenc.Encoding` and a width) and evaluates it in
``forward`` with plain torch ops, so ``torch.compile(fullgraph=True)``, ``torch.export`` and
ONNX export trace it. Angles are formed in float64 and the result is rounded once to the
dtype of the activations (to odd first for 16-bit dtypes), so ``module.to(torch.bfloat16)``,
``.half()`` and autocast never degrade the encoding.

No table is saved: the only buffers are non-persistent (absent from ``state_dict``), and a
checkpoint of a module that did save its table (a ``pe`` or ``weights`` key) loads with that
key ignored. :class:`PositionalEncoding` and :class:`SinusoidalEmbedding` keep a table of the
first ``cached_length`` positions (a non-persistent buffer, rebuilt by
``reset_parameters()``) for the common no-offset case; longer sequences and explicit
positions are computed, never cached, so ``forward`` never changes the module.

Shapes: ``b`` batch, ``s`` sequence, ``d`` channels, ``t`` packed tokens.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from . import _api
from ._backends import round_to_odd
from ._errors import PosencError, check_int, check_real
from ._layout import ZERO, Plan, channel_plan, check_channels
from ._positions import grid_axes, grid_shape
from ._presets import get_preset
from ._spec import Encoding

__all__ = [
    "DetrSineEncoding",
    "GridEncoding",
    "PositionalEncoding",
    "SinusoidalEmbedding",
    "Timesteps",
    "encode",
    "packed_positions",
]

_IGNORED_KEYS = ("pe", "weights", "_float_tensor", "pos_embed", "positional_embedding")


def _round(values: Tensor, dtype: torch.dtype) -> Tensor:
    """float64 values rounded once to ``dtype`` (to odd first for 16-bit dtypes)."""
    if dtype.itemsize == 2:
        return round_to_odd(values, torch).to(dtype)
    return values.to(dtype)


class _Evaluator:
    """A plan as Python constants: no tensor state, so ``.to()`` cannot touch it."""

    def __init__(self, pl: Plan) -> None:
        self.dim = pl.dim
        self.ndim = pl.ndim
        u = len(pl.omega)
        self.omega = tuple(float(w) for w in pl.omega)
        self.axis = tuple(int(a) for a in pl.axis)
        # basis columns: [sin u0, cos u0, …, sin, cos, 0, x_0, …, x_{k-1}]
        self.index = tuple(
            int(s) if s >= 0 else (2 * u if s == ZERO else 2 * u + 1 + (-2 - int(s)))
            for s in pl.src
        )

    def points(self, x: Tensor, dtype: torch.dtype) -> Tensor:
        """``[..., k]`` coordinates -> ``[..., dim]`` encoding in ``dtype``."""
        x64 = x.to(torch.float64)
        w = torch.tensor(self.omega, dtype=torch.float64, device=x.device)
        if self.ndim == 1:
            theta = x64 * w
        else:
            axis = torch.tensor(self.axis, dtype=torch.long, device=x.device)
            theta = x64.index_select(-1, axis) * w
        basis = torch.stack((theta.sin(), theta.cos()), dim=-1).flatten(-2)
        basis = torch.cat((basis, torch.zeros_like(x64[..., :1]), x64), dim=-1)
        index = torch.tensor(self.index, dtype=torch.long, device=x.device)
        return _round(basis.index_select(-1, index), dtype)

    def grid(self, axes: list[Tensor], order: list[int], dtype: torch.dtype) -> Tensor:
        """Per-axis positions ``[L_a]`` -> the grid's encoding, separably.

        ``order[i]`` is the position axis that output dimension ``i`` runs along, so the
        result is ``[L_order[0], …, L_order[k-1], dim]``. Each axis evaluates its own
        frequencies only; its part is zero in the other axes' channels, so the parts add up
        exactly.
        """
        k = len(axes)
        device = axes[0].device
        out: Tensor | None = None
        for a, pos in enumerate(axes):
            us = [u for u, b in enumerate(self.axis) if b == a]
            x64 = pos.to(torch.float64).unsqueeze(-1)
            w = torch.tensor([self.omega[u] for u in us], dtype=torch.float64, device=device)
            theta = x64 * w
            basis = torch.stack((theta.sin(), theta.cos()), dim=-1).flatten(-2)
            basis = torch.cat((basis, torch.zeros_like(x64), x64), dim=-1)
            local = torch.tensor(self._local(a, us), dtype=torch.long, device=device)
            view = [1] * k
            view[order.index(a)] = int(pos.shape[0])
            part = basis.index_select(-1, local).reshape(*view, self.dim)
            out = part if out is None else out + part
        assert out is not None
        return _round(out, dtype)

    def _local(self, a: int, us: list[int]) -> list[int]:
        """For each channel, its column in axis ``a``'s basis ``[sin, cos, …, 0, x_a]``;
        channels of other axes (and zero channels) take the zero column."""
        u = len(self.omega)
        n = len(us)
        where = {g: i for i, g in enumerate(us)}
        cols = []
        for i in self.index:
            if i < 2 * u and (i // 2) in where:
                cols.append(2 * where[i // 2] + i % 2)
            elif i == 2 * u + 1 + a:
                cols.append(2 * n + 1)
            else:
                cols.append(2 * n)
        return cols


def _resolve(
    preset: str,
    dim: int,
    ndim: int,
    options: dict[str, Any],
    *,
    grid: bool,
    channels: slice | None = None,
) -> tuple[Encoding, _Evaluator]:
    p = get_preset(preset)
    enc = p.resolve(options, grid=grid)
    fixed = enc.ndim
    if fixed is not None and fixed != ndim:
        what = "a sequence module" if ndim == 1 else f"{ndim} axes"
        raise PosencError(f"preset {p.name!r} encodes {fixed} axes; it cannot serve {what}")
    dim = check_int("dim", dim, minimum=1)
    return enc, _Evaluator(channel_plan(enc, dim, ndim, p.name, channels))


def packed_positions(cu_seqlens: Tensor, total: int | None = None) -> Tensor:
    """Positions of packed sequences: ``0, 1, …`` restarting at every boundary.

    Args:
        cu_seqlens: ``[n + 1]`` cumulative sequence lengths, starting at 0 (flash-attn's
            varlen convention).
        total: number of tokens (default ``cu_seqlens[-1]``).

    Returns:
        ``[t]`` int64 positions.

    Example:
        >>> packed_positions(torch.tensor([0, 3, 5])).tolist()
        [0, 1, 2, 0, 1]
    """
    if cu_seqlens.ndim != 1 or cu_seqlens.is_floating_point() or cu_seqlens.shape[0] < 2:
        raise PosencError(
            "`cu_seqlens` must be a 1-D integer tensor [n + 1] of cumulative lengths, got "
            f"{cu_seqlens.dtype} of shape {tuple(cu_seqlens.shape)}"
        )
    cu = cu_seqlens.long()
    count = int(cu[-1]) if total is None else total
    tokens = torch.arange(count, device=cu.device)
    doc = torch.searchsorted(cu[1:], tokens, right=True)
    return tokens - cu.index_select(0, doc)


def encode(
    positions: Tensor,
    dim: int,
    *,
    preset: str = "vaswani",
    dtype: torch.dtype | None = None,
    **options: Any,
) -> Tensor:
    """Torch-only encoding of positions, traceable by ``torch.compile`` and export.

    Same numbers as :func:`posenc.encode` (within one float32 ulp; both are the float64 value
    rounded once). ``positions`` ``[*s]`` (1D presets) -> ``[*s, dim]``.
    """
    enc, ev = _resolve(preset, dim, 1, options, grid=False)
    out = ev.points(positions.unsqueeze(-1), dtype or torch.get_default_dtype())
    if enc.padding_idx is not None:
        out = out.masked_fill((positions == enc.padding_idx).unsqueeze(-1), 0)
    return out


class _Cached(nn.Module):
    """The shared part of the 1D modules: a preset, and a cache of the first rows."""

    cache: Tensor

    def __init__(
        self,
        dim: int,
        preset: str,
        cached_length: int,
        device: Any,
        dtype: Any,
        options: dict[str, Any],
        channels: slice | None,
    ) -> None:
        super().__init__()
        self.dim = check_int("dim", dim, minimum=1)
        self.preset = get_preset(preset).name
        self.options = dict(options)
        self.channels = check_channels(channels, self.dim)
        self.enc, self._ev = _resolve(preset, dim, 1, options, grid=False, channels=channels)
        self.width = self._ev.dim  # channels this module produces: dim, or its shard
        self.cached_length = check_int("cached_length", cached_length)
        dtype = dtype or torch.get_default_dtype()
        self.register_buffer(
            "cache", torch.empty(0, self.width, device=device, dtype=dtype), persistent=False
        )
        self._cache_dtype = dtype
        self._register_load_state_dict_pre_hook(_drop_saved_tables)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """(Re)build the cache of the first ``cached_length`` rows on the buffers' device."""
        device, dtype = self.cache.device, self.cache.dtype
        self._cache_dtype = dtype
        if device.type == "meta":
            self.cache = torch.empty(self.cached_length, self.width, device=device, dtype=dtype)
            return
        self.cache = _api.table(
            self.cached_length,
            self.dim,
            preset=self.preset,
            dtype=dtype,
            device=device,
            channels=self.channels,
            **self.options,
        )

    def _usable(self, length: int, x_dtype: torch.dtype, device: torch.device) -> bool:
        if torch.compiler.is_exporting():  # first: a size test would specialise the export
            return False
        c = self.cache
        return (
            c.dtype == x_dtype == self._cache_dtype and c.device == device and length <= c.shape[0]
        )

    def _rows(self, positions: Tensor, dtype: torch.dtype) -> Tensor:
        """Rows for explicit positions. Eager integer positions go through the core, whose
        numbers depend on each position alone, so shards and the cache agree bit for bit;
        traced code evaluates the same float64 formula with torch ops (within one ulp)."""
        tracing = torch.compiler.is_compiling() or torch.compiler.is_exporting()
        if not tracing and not positions.is_floating_point():
            if (
                self._usable(0, dtype, positions.device)
                and positions.numel()
                and int(positions.min()) >= 0
                and int(positions.max()) < self.cache.shape[0]
            ):
                return self.cache[positions]  # the same bits: the cache is the core's table
            return _api.encode(
                positions,
                self.dim,
                preset=self.preset,
                dtype=dtype,
                channels=self.channels,
                **self.options,
            )
        out = self._ev.points(positions.unsqueeze(-1), dtype)
        if self.enc.padding_idx is not None:
            out = out.masked_fill((positions == self.enc.padding_idx).unsqueeze(-1), 0)
        return out

    def extra_repr(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        shard = "" if self.channels is None else f", channels={self.channels!r}"
        return (
            f"{self.dim}, preset={self.preset!r}{opts}{shard}, cached_length={self.cached_length}"
        )


def _drop_saved_tables(state: dict[str, Any], prefix: str, *args: Any) -> None:
    """Checkpoints of modules that saved their table load cleanly: the table is recomputed."""
    for key in [k for k in state if k.startswith(prefix)]:
        if key[len(prefix) :] in _IGNORED_KEYS:
            del state[key]


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
        device, dtype: of the cache (it follows ``.to()``).
        **options: the preset's options.

    Shapes:
        - x: ``[b, s, d]`` (or ``[s, b, d]``); with ``cu_seqlens``, ``[t, d]`` or ``[1, t, d]``.
        - positions: ``[b, s]`` or ``[s]``, integer or real.
        - offset: int, or ``[b]`` tensor (KV-cache lengths).
        - output: as ``x``.

    Example:
        >>> pe = PositionalEncoding(512, dropout=0.1, input_scale=math.sqrt(512))
        >>> y = pe(torch.randn(8, 100, 512))                 # positions 0 … 99
        >>> y = pe(torch.randn(8, 1, 512), offset=cache_len) # one decoding step
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
        self.batch_first = bool(batch_first)

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        *,
        offset: int | Tensor | None = None,
        cu_seqlens: Tensor | None = None,
    ) -> Tensor:
        pe = self.encoding(x, positions, offset=offset, cu_seqlens=cu_seqlens)
        if self.input_scale != 1.0:
            x = x * self.input_scale
        return self.dropout(x + pe)

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
            if offset.shape not in ((batch,), ()) or offset.is_floating_point():
                raise PosencError(
                    f"`offset` must be an int or an integer tensor [batch] = [{batch}], got "
                    f"{offset.dtype} of shape {tuple(offset.shape)}"
                )
            if not torch.compiler.is_compiling() and bool((offset < 0).any()):
                raise PosencError(f"`offset` must be >= 0, got {offset.tolist()}")
            steps = torch.arange(length, device=x.device)
            pe = self._rows(offset.to(x.device).reshape(-1, 1) + steps, x.dtype)
        else:
            start = 0 if offset is None else check_int("offset", offset)
            if self._usable(start + length, x.dtype, x.device):
                pe = self.cache[start : start + length]
            else:
                pe = self._rows(torch.arange(start, start + length, device=x.device), x.dtype)
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
        if not torch.compiler.is_compiling() and int(cu_seqlens[-1]) != total:
            raise PosencError(
                f"`cu_seqlens` must end at the number of tokens {total}, got {int(cu_seqlens[-1])}"
            )
        pe = self._rows(packed_positions(cu_seqlens.to(x.device), total), x.dtype)
        return pe if x.ndim == 2 else pe.unsqueeze(0)


class SinusoidalEmbedding(_Cached):
    """An ``nn.Embedding``-like lookup of position ids, or fairseq's module from token ids.

    Args:
        dim: channels.
        preset: any 1D preset; ``fairseq`` with ``padding_idx`` for fairseq's embedding.
        from_tokens: the input is token ids; positions are fairseq's ``padding_idx + 1, …``
            over non-pad tokens, pad tokens get the zero row (needs ``padding_idx``).
        cached_length, channels, device, dtype: as in :class:`PositionalEncoding`; the output dtype
            follows the module's (``.to(torch.bfloat16)`` gives bf16 rows, exact).
        **options: the preset's options (``padding_idx`` for ``fairseq``).

    Shapes:
        - input: ``[*]`` integer ids (``[b, s]`` tokens with ``from_tokens``).
        - output: ``[*, d]``; with ``from_tokens`` and ``step``, ``[b, 1, d]``.

    Example:
        >>> emb = SinusoidalEmbedding(512, preset="fairseq", padding_idx=1, from_tokens=True)
        >>> emb(tokens)              # [b, s, 512], pads are zero rows
        >>> emb(tokens, step=7)      # incremental decoding: position padding_idx + 8
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
        self.from_tokens = bool(from_tokens)
        if self.from_tokens and self.enc.padding_idx is None:
            raise PosencError("`from_tokens=True` needs `padding_idx` (fairseq's positions)")

    def forward(self, input: Tensor, *, step: int | None = None) -> Tensor:
        if input.is_floating_point() or input.is_complex() or input.dtype == torch.bool:
            raise PosencError(f"`input` must hold integer ids, got {input.dtype}")
        dtype = self.cache.dtype
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


class GridEncoding(nn.Module):
    """Adds a grid encoding to ViT tokens, for any grid size per call.

    Args:
        dim: channels.
        preset: ``mae`` (default), ``diffusers-2d``, ``diffusers-3d``, ``timm-2d``, ``hf-2d``,
            ``detr``, or an N-D one (``t2t-nd``, ``tatp22``).
        channels: ``slice(start, stop)``: only these channels (tensor parallelism).
        device, dtype: of the (empty) probe buffer whose dtype is the default output dtype.
        num_prefix_tokens: leading all-zero rows for class and register tokens (timm's name),
            whatever the preset's own option says.
        **options: the preset's options (``cls_token``, ``extra_tokens``, ``reverse_coord``, …);
            ``extra_tokens`` zero rows lead (class and register tokens).

    Shapes:
        - x: ``[b, extra + prod(grid), d]``; grid: ``(H, W)`` or ``(T, H, W)``.
        - output: as ``x``.

    Example:
        >>> enc = GridEncoding(768, preset="mae", cls_token=True)
        >>> tokens = enc(tokens, (14, 14))                  # [b, 197, 768]
    """

    probe: Tensor

    def __init__(
        self,
        dim: int,
        *,
        preset: str = "mae",
        channels: slice | None = None,
        num_prefix_tokens: int | None = None,
        device: Any = None,
        dtype: Any = None,
        **options: Any,
    ) -> None:
        super().__init__()
        p = get_preset(preset)
        self.dim = check_int("dim", dim, minimum=1)
        self.channels = check_channels(channels, self.dim)
        self.width = self.dim if self.channels is None else len(range(self.dim)[self.channels])
        self.preset = p.name
        self.options = dict(options)
        self.enc = p.resolve(options, grid=True)
        self._core_extra = self.enc.extra_tokens  # zero rows posenc.grid leads with
        if num_prefix_tokens is not None:
            extra = check_int("num_prefix_tokens", num_prefix_tokens)
            self.enc = self.enc.replace(extra_tokens=extra)
        self._plans: dict[int, _Evaluator] = {}
        if self.enc.ndim is not None:
            self._evaluator(self.enc.ndim)  # refuse a bad width now, not in forward
        self.register_buffer(
            "probe",
            torch.empty(0, device=device, dtype=dtype or torch.get_default_dtype()),
            persistent=False,
        )
        self._register_load_state_dict_pre_hook(_drop_saved_tables)

    def _evaluator(self, ndim: int) -> _Evaluator:
        if ndim not in self._plans:
            self._plans[ndim] = _Evaluator(
                channel_plan(self.enc, self.dim, ndim, self.preset, self.channels)
            )
        return self._plans[ndim]

    def encoding(
        self, grid: tuple[int, ...], *, dtype: torch.dtype | None = None, device: Any = None
    ) -> Tensor:
        """``[extra + prod(grid), d]``: the rows ``forward`` adds."""
        dims = grid_shape(tuple(grid), self.enc.ndim)
        enc = self.enc
        device = torch.device(self.probe.device if device is None else device)
        dtype = dtype or self.probe.dtype
        tracing = torch.compiler.is_compiling() or torch.compiler.is_exporting()
        if not tracing and device.type != "meta":  # eager: the core, bit for bit posenc.grid
            full = _api.grid(
                dims,
                self.dim,
                preset=self.preset,
                dtype=dtype,
                device=device,
                channels=self.channels,
                **self.options,
            )
            return self._lead(full[self._core_extra :])
        ev = self._evaluator(len(dims))
        axes = [
            torch.arange(prog.length, dtype=torch.float64, device=device) * prog.step + prog.start
            for prog in grid_axes(enc, dims)
        ]
        order = list(range(len(dims)))
        if enc.tokens == "column-major":
            order.reverse()
        body = ev.grid(axes, order, dtype).reshape(-1, self.width)
        return self._lead(body)

    def _lead(self, body: Tensor) -> Tensor:
        if not self.enc.extra_tokens:
            return body
        zeros = body.new_zeros(self.enc.extra_tokens, self.width)
        return torch.cat((zeros, body), dim=0)

    def forward(self, x: Tensor, grid: tuple[int, ...]) -> Tensor:
        if x.ndim != 3 or x.shape[-1] != self.width:
            raise PosencError(f"`x` must be [batch, tokens, {self.width}], got {tuple(x.shape)}")
        want = self.enc.extra_tokens + math.prod(grid)
        if x.shape[1] != want:
            raise PosencError(
                f"`x` must have {want} tokens for grid {tuple(grid)} "
                f"({self.enc.extra_tokens} extra), got {x.shape[1]}"
            )
        return x + self.encoding(grid, dtype=x.dtype, device=x.device)

    def extra_repr(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"{self.dim}, preset={self.preset!r}{opts}"


class DetrSineEncoding(nn.Module):
    """DETR's ``PositionEmbeddingSine``, reproduced exactly, from a padding mask.

    Args:
        num_pos_feats: channels per axis (DETR: ``hidden_dim // 2``); output ``2 *`` that.
        temperature: largest timescale (10000).
        normalize: divide the 1-based coordinates by the last one (+1e-6), times ``scale``.
        scale: with ``normalize`` (default ``2*pi``).

    Shapes:
        - mask: ``[b, H, W]`` bool, True on padding.
        - output: ``[b, 2 * num_pos_feats, H, W]``: ``[y block | x block]``.
    """

    probe: Tensor

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
        super().__init__()
        self.num_pos_feats = check_int("num_pos_feats", num_pos_feats, minimum=1)
        opts: dict[str, Any] = {"temperature": temperature, "normalize": normalize}
        if scale is not None:
            opts["scale"] = scale
        self.options = opts
        self.enc, self._ev = _resolve("detr", 2 * self.num_pos_feats, 2, opts, grid=True)
        self.register_buffer(
            "probe",
            torch.empty(0, device=device, dtype=dtype or torch.get_default_dtype()),
            persistent=False,
        )

    def forward(self, mask: Tensor) -> Tensor:
        if mask.dtype != torch.bool or mask.ndim != 3:
            raise PosencError(
                f"`mask` must be a [batch, H, W] bool tensor, got {mask.dtype} of shape "
                f"{tuple(mask.shape)}"
            )
        filled = (~mask).to(torch.float64)
        y = filled.cumsum(1)
        x = filled.cumsum(2)
        if self.enc.normalize:
            y = y / (y[:, -1:, :] + 1e-6)
            x = x / (x[:, :, -1:] + 1e-6)
        out = self._ev.points(torch.stack((y, x), dim=-1), self.probe.dtype)
        return out.permute(0, 3, 1, 2)

    def extra_repr(self) -> str:
        return f"num_pos_feats={self.num_pos_feats}, " + ", ".join(
            f"{k}={v!r}" for k, v in self.options.items()
        )


class Timesteps(nn.Module):
    """The diffusion timestep embedding (diffusers ``Timesteps`` / ``get_timestep_embedding``).

    Args:
        dim: channels (``num_channels``).
        flip_sin_to_cos: ``[cos | sin]`` (Stable Diffusion, DiT).
        downscale_freq_shift: ``s`` in ``max_period ** (-k / (n - s))`` (1; 0 for SD).
        scale: multiplies the timesteps.
        max_period: largest period (10000).

    Shapes:
        - timesteps: ``[n]`` (any shape ``[*]``), integer or real.
        - output: ``[*, dim]`` in the module's dtype (float32 unless moved).
    """

    probe: Tensor

    def __init__(
        self,
        dim: int,
        flip_sin_to_cos: bool = False,
        downscale_freq_shift: float = 1,
        scale: float = 1,
        max_period: float = 10000,
        *,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.dim = check_int("dim", dim, minimum=1)
        self.options = {
            "flip_sin_to_cos": flip_sin_to_cos,
            "downscale_freq_shift": downscale_freq_shift,
            "scale": scale,
            "max_period": max_period,
        }
        self.enc, self._ev = _resolve("timestep", dim, 1, self.options, grid=False)
        self.register_buffer(
            "probe",
            torch.empty(0, device=device, dtype=dtype or torch.get_default_dtype()),
            persistent=False,
        )

    def forward(self, timesteps: Tensor) -> Tensor:
        if timesteps.is_complex() or timesteps.dtype == torch.bool:
            raise PosencError(f"`timesteps` must be integer or real, got {timesteps.dtype}")
        return self._ev.points(timesteps.unsqueeze(-1), self.probe.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, " + ", ".join(f"{k}={v!r}" for k, v in self.options.items())
