"""PyTorch modules: drop-in sinusoidal encodings for transformers, ViTs, DETR and diffusion.

Every module holds a preset (an :class:`~posenc.Encoding` and a width) and calls the core,
which chooses the evaluation (:mod:`posenc._evaluate`): eager calls run the exact engine, and
traced ones (``torch.compile(fullgraph=True)``, ``torch.export``, ONNX) the same float64
formula in torch ops; meta inputs give meta outputs. Angles are formed in float64 and the
result is rounded once to the dtype of the activations (to odd first for 16-bit dtypes), so
``module.to(torch.bfloat16)``, ``.half()`` and autocast never degrade the encoding.

No table is saved, and the modules have no buffers: a checkpoint of a module that did save its
table (a ``pe`` or ``weights`` key) loads with that key ignored. :class:`PositionalEncoding`
and :class:`SinusoidalEmbedding` keep a table of the first ``cached_length`` positions, outside
the buffers, in the module's dtype and on its device: ``.to()``, ``.half()``, ``.float()``,
``.cuda()`` and ``to_empty()`` rebuild it, so it never holds stale numbers.

Shapes: ``b`` batch, ``s`` sequence, ``d`` channels, ``t`` packed tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from . import _api
from ._layout import Plan, channel_plan, check_channels
from ._positions import grid_shape
from ._presets import get_preset
from ._validate import (
    PosencError,
    Positions,
    as_positions,
    check_bool,
    check_device,
    check_int,
    check_real,
    tracing,
)

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


def packed_positions(cu_seqlens: Tensor, total: int | None = None) -> Tensor:
    """Positions of packed sequences: ``0, 1, …`` restarting at every boundary.

    Args:
        cu_seqlens: ``[n + 1]`` cumulative sequence lengths: starting at 0, non-decreasing
            (flash-attn's varlen convention).
        total: number of tokens (default ``cu_seqlens[-1]``); ``cu_seqlens`` must end there.

    Returns:
        ``[t]`` int64 positions.

    Example:
        >>> packed_positions(torch.tensor([0, 3, 5])).tolist()
        [0, 1, 2, 0, 1]
    """
    if (
        not isinstance(cu_seqlens, Tensor)
        or cu_seqlens.ndim != 1
        or cu_seqlens.is_floating_point()
        or cu_seqlens.is_complex()
        or cu_seqlens.dtype == torch.bool
        or cu_seqlens.shape[0] < 2
    ):
        raise PosencError(
            "`cu_seqlens` must be a 1-D integer tensor [n + 1] of cumulative lengths, got "
            f"{getattr(cu_seqlens, 'dtype', type(cu_seqlens).__name__)} of shape "
            f"{tuple(getattr(cu_seqlens, 'shape', ()))}"
        )
    cu = as_positions(cu_seqlens, "cu_seqlens").values
    if total is not None:
        total = check_int("total", total)
    if not tracing() and not cu.is_meta:
        first, last = int(cu[0]), int(cu[-1])
        if first != 0 or bool((cu[1:] < cu[:-1]).any()) or (total is not None and last != total):
            end = "" if total is None else f" and end at the number of tokens {total}"
            raise PosencError(
                f"`cu_seqlens` must start at 0, never decrease{end}, got {_short(cu.tolist())}"
            )
    count = int(cu[-1]) if total is None else total
    tokens = torch.arange(count, device=cu.device)
    doc = torch.searchsorted(cu[1:], tokens, right=True)
    return tokens - cu.index_select(0, doc)


def _short(values: list[Any]) -> str:
    return str(values) if len(values) <= 8 else f"[{', '.join(map(str, values[:8]))}, …]"


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
    """
    return _api.encode(
        positions, dim, preset=preset, dtype=dtype or torch.get_default_dtype(), **options
    )


class _Module(nn.Module):
    """What every module shares: a preset resolved once, and the dtype and device the module
    was built for or moved to (tracked through ``_apply``, so ``.to()``, ``.half()``,
    ``to_empty()`` and friends reach it without a buffer that DDP would broadcast)."""

    def __init__(
        self, preset: str, options: dict[str, Any], *, grid: bool, device: Any, dtype: Any
    ) -> None:
        super().__init__()
        p = get_preset(preset)
        self.preset = p.name
        self.options = dict(options)
        self.enc = p.resolve(self.options, grid=grid)
        self.label = p.label(self.options)  # how errors name the preset and its options
        dtype = dtype or torch.get_default_dtype()
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise PosencError(f"`dtype` must be a floating torch dtype, got {dtype!r}")
        probe = torch.empty(0, dtype=dtype, device=_api_device(device))
        self._dtype, self._device = probe.dtype, probe.device
        self._register_load_state_dict_pre_hook(_drop_saved_tables)

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> _Module:
        super()._apply(fn, recurse)
        probe = fn(torch.empty(0, dtype=self._dtype, device=self._device))
        if (probe.dtype, probe.device) != (self._dtype, self._device):
            self._dtype, self._device = probe.dtype, probe.device
            self._moved()
        return self

    def _moved(self) -> None:
        """Called after the module's dtype or device changed."""


def _traceable(plan: Plan) -> Plan:
    """A plan whose constants are computed now, so a tracer only reads attributes."""
    plan.constants  # noqa: B018
    return plan


def _api_device(device: Any) -> torch.device:
    return check_device(torch, "cpu" if device is None else device)


class _Cached(_Module):
    """The shared part of the 1D modules: a preset, and a table of the first rows."""

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
        super().__init__(preset, options, grid=False, device=device, dtype=dtype)
        if self.enc.ndim not in (1, None):
            raise PosencError(
                f"preset {self.preset!r} encodes {self.enc.ndim} axes; it cannot serve a "
                "sequence module"
            )
        self.dim = check_int("dim", dim, minimum=1)
        self.channels = check_channels(channels, self.dim)
        self._plan = _traceable(channel_plan(self.enc, self.dim, 1, self.label, self.channels))
        self.width = self._plan.dim
        self.cached_length = check_int("cached_length", cached_length, maximum=1 << 24)
        self.reset_parameters()

    @property
    def cache(self) -> Tensor:
        """The kept table ``[cached_length, width]``, in the module's dtype and device."""
        return self._table

    def reset_parameters(self) -> None:
        """(Re)build the table of the first ``cached_length`` rows."""
        positions = torch.arange(self.cached_length, device=self._device)
        self._table = self._computed(as_positions(positions), self._dtype)

    def _moved(self) -> None:
        self.reset_parameters()

    def _computed(self, pos: Positions, dtype: torch.dtype) -> Tensor:
        return _api.evaluate_points(
            self._plan, pos, coords=False, dtype=dtype, padding_idx=self.enc.padding_idx
        )

    def _usable(self, length: int, dtype: torch.dtype, device: torch.device) -> bool:
        if torch.compiler.is_exporting():  # first: a size test would specialise the export
            return False
        return dtype == self._dtype and device == self._device and length <= self.cached_length

    def _rows(self, positions: Tensor | Positions, dtype: torch.dtype) -> Tensor:
        """Rows for explicit positions (checked once): eager integer positions inside the
        table are gathered from it (the same bits: the table is the core's); others are
        computed. Traced and meta positions have no known bounds, so they are computed."""
        pos = positions if isinstance(positions, Positions) else as_positions(positions)
        if (
            pos.integral
            and pos.low is not None
            and pos.high is not None
            and pos.low >= 0
            and pos.high < self.cached_length
            and pos.values.numel()
            and self._usable(0, dtype, pos.values.device)
        ):
            return self._table[pos.values]
        return self._computed(pos, dtype)

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
        self.batch_first = check_bool("batch_first", batch_first)

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
            if (
                offset.shape not in ((batch,), ())
                or offset.is_floating_point()
                or offset.is_complex()
                or offset.dtype == torch.bool
            ):
                raise PosencError(
                    f"`offset` must be an int or an integer tensor [batch] = [{batch}], got "
                    f"{offset.dtype} of shape {tuple(offset.shape)}"
                )
            given = as_positions(offset, "offset")
            if given.low is not None and given.low < 0:
                raise PosencError(f"`offset` must be >= 0, got {_short(offset.tolist())}")
            steps = torch.arange(length, device=x.device)
            rows = given.values.to(x.device).reshape(-1, 1) + steps
            if given.low is not None and given.high is not None:  # bounds known: no 2nd pass
                rows = Positions(rows, True, given.low, given.high + length - 1)
            pe = self._rows(rows, x.dtype)
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
        self.from_tokens = check_bool("from_tokens", from_tokens)
        if self.from_tokens and self.enc.padding_idx is None:
            raise PosencError("`from_tokens=True` needs `padding_idx` (fairseq's positions)")

    def forward(self, input: Tensor, *, step: int | None = None) -> Tensor:
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


class GridEncoding(_Module):
    """Adds a grid encoding to ViT tokens, for any grid size per call.

    Args:
        dim: channels.
        preset: ``mae`` (default), ``diffusers-2d``, ``diffusers-3d``, ``timm-2d``, ``hf-2d``,
            ``detr``, or an N-D one (``t2t-nd``, ``tatp22``).
        channels: ``slice(start, stop)``: only these channels (tensor parallelism).
        device, dtype: the default device and dtype of the output (they follow ``.to()``).
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
        super().__init__(preset, options, grid=True, device=device, dtype=dtype)
        self.dim = check_int("dim", dim, minimum=1)
        self.channels = check_channels(channels, self.dim)
        self.width = self.dim if self.channels is None else len(range(self.dim)[self.channels])
        self._core_extra = self.enc.extra_tokens  # zero rows posenc.grid leads with
        self.extra = self._core_extra
        if num_prefix_tokens is not None:
            self.extra = check_int("num_prefix_tokens", num_prefix_tokens)
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
        dims = grid_shape(tuple(grid), self.enc.ndim)
        full = _api.evaluate_grid(
            self._plan_for(len(dims)),
            self.enc,
            dims,
            dtype=dtype or self._dtype,
            device=self._device if device is None else device,
            like=None,
        )
        return self._lead(full[self._core_extra :])

    def _lead(self, body: Tensor) -> Tensor:
        if not self.extra:
            return body
        zeros = body.new_zeros(self.extra, self.width)
        return torch.cat((zeros, body), dim=0)

    def forward(self, x: Tensor, grid: tuple[int, ...]) -> Tensor:
        if x.ndim != 3 or x.shape[-1] != self.width:
            raise PosencError(f"`x` must be [batch, tokens, {self.width}], got {tuple(x.shape)}")
        want = self.extra + math.prod(grid)
        if x.shape[1] != want:
            raise PosencError(
                f"`x` must have {want} tokens for grid {tuple(grid)} "
                f"({self.extra} extra), got {x.shape[1]}"
            )
        return x + self.encoding(grid, dtype=x.dtype, device=x.device)

    def extra_repr(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"{self.dim}, preset={self.preset!r}{opts}"


class DetrSineEncoding(_Module):
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
        super().__init__("detr", opts, grid=True, device=device, dtype=dtype)
        self.num_pos_feats = check_int("num_pos_feats", num_pos_feats, minimum=1)
        self._plan = _traceable(channel_plan(self.enc, 2 * self.num_pos_feats, 2, self.label, None))

    def forward(self, mask: Tensor) -> Tensor:
        return _api.evaluate_detr(self._plan, self.enc, mask, dtype=self._dtype)

    def extra_repr(self) -> str:
        return f"num_pos_feats={self.num_pos_feats}, " + ", ".join(
            f"{k}={v!r}" for k, v in self.options.items()
        )


class Timesteps(_Module):
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
        options = {
            "flip_sin_to_cos": flip_sin_to_cos,
            "downscale_freq_shift": downscale_freq_shift,
            "scale": scale,
            "max_period": max_period,
        }
        super().__init__("timestep", options, grid=False, device=device, dtype=dtype)
        self.dim = check_int("dim", dim, minimum=1)
        self._plan = _traceable(channel_plan(self.enc, self.dim, 1, self.label, None))

    def forward(self, timesteps: Tensor) -> Tensor:
        pos = as_positions(timesteps, "timesteps")
        return _api.evaluate_points(
            self._plan, pos, coords=False, dtype=self._dtype, padding_idx=None
        )

    def extra_repr(self) -> str:
        return f"{self.dim}, " + ", ".join(f"{k}={v!r}" for k, v in self.options.items())
