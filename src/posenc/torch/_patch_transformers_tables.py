"""The fixed tables transformers models keep, for :func:`posenc.torch.patch`: Whisper's encoder
table (and the Qwen audio towers' copy), Marian's and fairseq's (M2M100, Speech2Text)
sinusoidal embeddings and ViT-MAE's fixed 2D table, their recognisers and stand-ins (and the
stand-in for diffusers' AnimateDiff table, a 1D table of the same kind). A
stand-in takes the original's call and attributes (``weight``, ``num_embeddings``,
``weights``) and holds no tensor (:mod:`posenc.torch._placing` writes the original's keys from
it on save); the original's checkpoint key routes to posenc's checkpoint check. A table is
replaced only when it holds the sinusoid (the checkpoint check's rule) and is not trainable."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from posenc.api.sinusoidal import encode, table
from posenc.spec.presets import get_preset
from posenc.spec.presets.sinusoidal import FAIRSEQ, MAE, MARIAN, WHISPER
from posenc.torch._checkpoint import _problem, check_saved_table
from posenc.torch._patching import (
    Found,
    TableParameter,
    by_class,
    from_library,
    holds,
    learned,
    left_alone,
    unlike,
)
from posenc.torch.sequence import SinusoidalEmbedding
from posenc.torch.vision import GridEncoding


def _parent(root: nn.Module, path: str) -> nn.Module:
    return root.get_submodule(path.rpartition(".")[0])


# ---------------------------------------------------------------------------------------------
# 1D tables: Whisper's encoder, Marian, fairseq's (M2M100, Speech2Text)


def _check_weight(module: nn.Module, state: dict[str, Any], prefix: str, *args: Any) -> None:
    check_saved_table(module, state, prefix + module.TABLE)  # type: ignore[operator]  # the original's key


class PositionTable(SinusoidalEmbedding):
    """posenc's stand-in for an ``nn.Embedding`` of fixed sinusoidal rows (Whisper's encoder
    ``embed_positions``): ``forward(ids)`` gathers rows, ``weight`` is the whole table in the
    module's dtype and device (it follows ``.to()``), nothing is saved, and a checkpoint's
    ``weight`` is checked as posenc's modules check their tables. ``compat="original"``: the
    original's float32 arithmetic (then the module's dtype), for identical outputs."""

    TABLE = "weight"
    """The attribute that holds the original's whole table."""

    def __init__(
        self,
        rows: int,
        dim: int,
        preset: str,
        *,
        compat: str | None,
        device: Any,
        dtype: Any,
        **options: Any,
    ) -> None:
        # read by _span while the kept rows are built; a preset whose original computes in
        # float64 (marian, mae) has no replay: its exact table is the original's
        self.compat = compat if get_preset(preset).replay else None
        super().__init__(
            dim, preset=preset, cached_length=rows, device=device, dtype=dtype, **options
        )
        self.num_embeddings, self.embedding_dim = rows, dim
        self._register_load_state_dict_pre_hook(_check_weight, with_module=True)  # type: ignore[no-untyped-call]

    @property
    def weight(self) -> Tensor:
        """The table ``[rows, dim]``, as the original's ``weight`` (not a parameter)."""
        return self.cache

    def _span(self, start: int, length: Any, dtype: torch.dtype, device: Any) -> Tensor:
        if self.compat is None:
            return super()._span(start, length, dtype, device)
        out: Tensor = table(
            length,
            self.dim,
            preset=self.preset,
            offset=start,
            compat="original",
            dtype=torch.float32,
            device=device,
            **self.options,
        )
        return out.to(dtype)

    def _computed(self, pos: Any, dtype: torch.dtype) -> Tensor:
        if self.compat is None:
            return super()._computed(pos, dtype)
        out: Tensor = encode(
            pos.values,
            self.dim,
            preset=self.preset,
            compat="original",
            dtype=torch.float32,
            **self.options,
        )
        return out.to(dtype)

    def _expected_table(self, rows: int) -> Any:  # the exact table, whatever the mode
        return SinusoidalEmbedding._span(self, 0, rows, torch.float64, torch.device("cpu")).numpy()

    def extra_repr(self) -> str:
        mode = "" if self.compat is None else ", compat='original'"
        return super().extra_repr() + mode


class MarianPositions(PositionTable):
    """The stand-in for ``MarianSinusoidalPositionalEmbedding`` (Marian, Pegasus)."""

    def forward(  # type: ignore[override]
        self, input_ids_shape: Any, past_key_values_length: int = 0, position_ids: Any = None
    ) -> Tensor:
        """Rows ``past … past + seq - 1`` (``[seq, d]``), or of ``position_ids``."""
        if position_ids is None:
            seq = input_ids_shape[1]
            start = past_key_values_length
            position_ids = torch.arange(start, start + seq, device=self._device)
        return self._rows(position_ids, self._dtype)


class FairseqPositions(PositionTable):
    """The stand-in for M2M100's ``SinusoidalPositionalEmbedding`` (and its copies that take
    ``input_ids, inputs_embeds, past_key_values_length``): fairseq's positions, counted past
    ``padding_idx`` over non-pad tokens, pads on the zero row; ``weights`` is the table."""

    TABLE = "weights"

    @property
    def weights(self) -> Tensor:
        """The table, as the original's ``weights`` buffer."""
        return self.cache

    def forward(  # type: ignore[override]
        self, input_ids: Any = None, inputs_embeds: Any = None, past_key_values_length: Any = 0
    ) -> Tensor:
        """``[b, s, d]`` rows of fairseq's positions of ``input_ids`` (or of a run)."""
        pad = self.padding_idx
        if input_ids is not None:
            mask = input_ids.ne(pad).int()
            ids = (torch.cumsum(mask, dim=1).type_as(mask) + past_key_values_length) * mask
            ids = ids.long() + pad
        else:
            b, s = inputs_embeds.shape[:2]
            run = torch.arange(pad + 1, s + pad + 1, device=inputs_embeds.device)
            ids = run.expand(b, s) + past_key_values_length
        return self._rows(ids, self._dtype)

    @property
    def padding_idx(self) -> int:
        pad = self.enc.padding_idx
        assert pad is not None
        return pad


class AudioPositions(PositionTable):
    """The stand-in for the Qwen audio towers' ``SinusoidsPositionEmbedding`` (Whisper's
    sinusoids in a buffer): ``forward(seqlen)`` gives rows ``0 … seqlen - 1``;
    ``positional_embedding`` is the table."""

    TABLE = "positional_embedding"

    @property
    def positional_embedding(self) -> Tensor:
        """The table, as the original's buffer."""
        return self.cache

    def forward(self, seqlen: Any) -> Tensor:  # type: ignore[override]
        """``[seqlen, d]``: the first ``seqlen`` rows."""
        return self._rows(torch.arange(seqlen, device=self._device), self._dtype)


class SequencePositions(PositionTable):
    """The stand-in for diffusers' ``SinusoidalPositionalEmbedding`` (AnimateDiff's motion
    modules, DreamLite): ``forward(x)`` adds the first ``x.shape[1]`` rows to ``x``; ``pe`` is
    the ``[1, rows, d]`` table, as the original's buffer (and checkpoint key)."""

    TABLE = "pe"

    @property
    def pe(self) -> Tensor:
        """The table ``[1, rows, d]``, as the original's buffer."""
        return self.cache[None]

    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]
        """``x + pe[:, :s]`` for ``x`` ``[b, s, d]``."""
        rows = self._rows(torch.arange(x.shape[1], device=x.device), self._dtype)
        return x + rows


class TokenPositions(FairseqPositions):
    """The stand-in for Speech2Text's form, ``forward(input_ids, past_key_values_length)``."""

    def forward(self, input_ids: Any, past_key_values_length: Any = 0) -> Tensor:  # type: ignore[override]
        """``[b, s, d]`` rows of fairseq's positions of ``input_ids``."""
        return super().forward(input_ids, None, past_key_values_length)


def _table(
    name: str,
    saved: Tensor,
    make: Callable[[str | None], nn.Module],
    what: str,
    probe: Callable[[Any], Tensor],
    attribute: str | None = None,
) -> Found:
    """A fixed table ``saved`` that ``make``'s module computes: replaced when it holds that
    sinusoid (the checkpoint check's rule) and is not trainable. On the meta device (a model
    built before its weights are loaded) the architecture says what it holds, and the
    checkpoint check, when the weights arrive, whether it does."""
    exact = make(None)
    values = saved.detach().reshape(-1, saved.shape[-1])
    problem = None if saved.is_meta else _problem(exact, values)
    if saved.requires_grad:
        if problem is not None:
            return left_alone(name, learned(saved), attribute)
        return left_alone(
            name, f"learned (a trainable table; holds the {what}), left alone", attribute
        )
    if problem is not None:
        held = holds(saved)
        held = f" ({held})" if held else ""
        return left_alone(
            name, f"a fixed table that is not the {what}{held}: left alone", attribute
        )
    rows = saved.reshape(-1, saved.shape[-1]).shape[0]
    return Found(
        name,
        f"{type(exact).__name__}({what})",
        make,
        numbers=lambda: [saved.detach()],
        probe=lambda m: [probe(m)],
        note=f"max diff over its {rows} rows",
        attribute=attribute,
    )


@by_class("transformers", "SinusoidsPositionEmbedding")
def audio_table(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """The Qwen audio towers' ``SinusoidsPositionEmbedding``: Whisper's sinusoids in a buffer."""
    name = type(module).__name__
    table = getattr(module, AudioPositions.TABLE, None)
    takes = tuple(inspect.signature(type(module).forward).parameters)[1:]
    if not (isinstance(table, Tensor) and table.ndim == 2 and takes == ("seqlen",)):
        return unlike(name, "transformers")
    return one_d(name, table, AudioPositions, WHISPER.name)


def embeddings(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Whisper's encoder table (an ``nn.Embedding`` in a transformers encoder, by its path),
    Marian's, and fairseq's (M2M100, Speech2Text), by their class names' form."""
    name = type(module).__name__
    if type(module) is nn.Embedding and path.endswith("embed_positions") and path != "":
        parent = _parent(root, path)
        if not (from_library(parent, "transformers") and type(parent).__name__.endswith("Encoder")):
            return None
        return one_d(name, module.weight, PositionTable, WHISPER.name)
    if not (
        from_library(module, "transformers") and name.endswith("SinusoidalPositionalEmbedding")
    ):
        return None
    if isinstance(module, nn.Embedding):  # Marian, Pegasus: [sin | cos] by split widths
        return one_d(name, module.weight, MarianPositions, MARIAN.name)
    table, pad = getattr(module, "weights", None), getattr(module, "padding_idx", None)
    params = list(inspect.signature(type(module).forward).parameters)[1:]
    forms = {
        ("input_ids", "inputs_embeds", "past_key_values_length"): FairseqPositions,
        ("input_ids", "past_key_values_length"): TokenPositions,
    }
    form = forms.get(tuple(params))
    if not isinstance(table, Tensor) or not isinstance(pad, int) or form is None:
        return left_alone(
            name, f"not covered: forward({', '.join(params)}) is not a form posenc reproduces"
        )
    return one_d(name, table, form, FAIRSEQ.name, padding_idx=pad)


def one_d(name: str, saved: Tensor, cls: type[PositionTable], preset: str, **options: Any) -> Found:
    """A 1D table ``saved`` (``[rows, dim]``, or ``[1, rows, dim]`` as its stand-in's
    ``TABLE`` gives it) that ``cls`` computes with ``preset``."""
    rows, dim = int(saved.shape[-2]), int(saved.shape[-1])

    def make(compat: str | None) -> nn.Module:
        return cls(
            rows, dim, preset, compat=compat, device=saved.device, dtype=saved.dtype, **options
        )

    what = " ".join([f"{preset} sinusoid", *(f"{k}={v}" for k, v in options.items())])
    return _table(name, saved, make, what, lambda m: getattr(m, cls.TABLE))


# ---------------------------------------------------------------------------------------------
# ViT-MAE's fixed 2D table


MAE_TABLES = {"ViTMAEEmbeddings": "position_embeddings", "ViTMAEDecoder": "decoder_pos_embed"}
"""ViT-MAE's classes and the attribute that holds each one's table."""


@by_class("transformers", *MAE_TABLES)
def mae(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """ViT-MAE's ``position_embeddings`` (and its decoder's ``decoder_pos_embed``): a fixed
    ``[1, 1 + H*W, d]`` table, MAE's 2D sin-cos with a class row."""
    key = MAE_TABLES[type(module).__name__]
    saved = getattr(module, key, None)
    if not isinstance(saved, nn.Parameter) or saved.ndim != 3:
        return None
    side, dim = math.isqrt(saved.shape[1] - 1), saved.shape[2]
    if side * side != saved.shape[1] - 1 or dim % 4:
        return left_alone("Parameter", "not a square grid with a class row: left alone", key)

    def make(compat: str | None) -> nn.Module:
        grid = GridEncoding(dim, preset=MAE.name, cls_token=True)
        return TableParameter(
            lambda dtype, device: grid.encoding((side, side), dtype=dtype, device=device)[None],
            grid._expected_table,
            grid._largest_position,
            dtype=saved.dtype,
            device=saved.device,
            description=f"{dim}, preset='mae', cls_token=True, grid=({side}, {side})",
        )

    what = f"mae sinusoid on a {side} x {side} grid"
    return _table("Parameter", saved, make, what, lambda m: m.table, attribute=key)
