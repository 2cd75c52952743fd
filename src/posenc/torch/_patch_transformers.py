"""The transformers recognisers of :func:`posenc.torch.patch`, and the stand-ins they build.

Each recogniser knows one kind of transformers module by its class name and module path
(transformers is never imported here): the rotary modules ``RotaryEmbedding.from_hf``
reproduces, Whisper's encoder table, Marian's and fairseq's (M2M100, Speech2Text) sinusoidal
embeddings, ViT-MAE's fixed 2D table and DETR's sine encoding. The stand-ins take the
original's call and attributes (``weight``, ``num_embeddings``, ``weights``), hold no tensor
(:mod:`posenc.torch._placing` writes the original's keys from them on save);
the original's checkpoint key routes to posenc's checkpoint check.
"""

from __future__ import annotations

import copy
import inspect
import math
import re
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch
from torch import Tensor, nn

from posenc import evaluate
from posenc.api.sinusoidal import encode, table
from posenc.compat import transformers as _rope_compat
from posenc.compat.sinusoid import ORIGINALS
from posenc.errors import PosencError
from posenc.torch._checkpoint import _problem, check_saved_table
from posenc.torch._patching import (
    Found,
    Recogniser,
    TableParameter,
    compare,
    device_of,
    float_dtype,
    from_library,
    holds,
    learned,
    left_alone,
    measured,
)
from posenc.torch.rotary import RotaryEmbedding
from posenc.torch.sequence import SinusoidalEmbedding
from posenc.torch.vision import DetrSineEncoding, GridEncoding

POSITIONAL_NAMES = ("embed_positions", "position_embeddings", "position_embedding", "wpe",
                    "pos_embed", "positional_embedding", "decoder_pos_embed")  # fmt: skip


def _tf(module: Any) -> bool:
    return from_library(module, "transformers")


def _parent(root: nn.Module, path: str) -> nn.Module:
    return root.get_submodule(path.rpartition(".")[0])


# ---------------------------------------------------------------------------------------------
# rotary modules


def rotary(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """A transformers ``*RotaryEmbedding`` that ``RotaryEmbedding.from_hf`` reproduces."""
    name = type(module).__name__
    if not (name.endswith("RotaryEmbedding") and _tf(module)):
        return None
    config = getattr(module, "config", None)
    if config is None:
        return left_alone(name, "not covered: it has no config for RotaryEmbedding.from_hf")
    try:
        probe = RotaryEmbedding.from_hf(config)
    except PosencError as err:
        return left_alone(name, f"not covered yet: {err}")
    edited, grown = _state(module, probe)
    if edited:
        return left_alone(name, f"{edited}: changed after it was built? posenc builds from the "
                          "config, so it is left alone")  # fmt: skip
    device, dtype = device_of(module), float_dtype(module)
    length = getattr(config, "max_position_embeddings", None) or 4096
    layer_types = list(probe.layer_types or [None])  # per-layer-type families: each one
    sections = any(r.sections is not None for r in probe.rotaries.values())

    state = ""
    if grown:
        lengths = ", ".join(str(n) for n in grown.values())
        trained = getattr(module, "original_max_seq_len", "?")
        state = (f"its dynamic rule had grown inv_freq to {lengths} positions (it ran past "
                 f"max_position_embeddings={trained})")  # fmt: skip

    def build(compat: str | None) -> nn.Module | str:
        if compat is not None and grown:
            return f"{state}; compat={compat!r} repeats the module its config builds, not this"
        out = RotaryEmbedding.from_hf(config, None if compat is None else "transformers",
                                      device=device)  # fmt: skip
        return out if dtype in (None, torch.float32) else out.to(dtype)

    runs, measured_over = measured(length)

    def run(m: nn.Module) -> Iterator[Tensor]:
        x = torch.zeros(1, device=device)
        for start, stop in runs:
            ids = torch.arange(start, stop, device=device)[None]
            ids = ids.expand(3, 1, -1) if sections else ids
            for lt in layer_types:
                out = m(x, ids) if lt is None else m(x, ids, lt)
                for t in out if isinstance(out, tuple) else (out,):
                    yield torch.view_as_real(t) if t.is_complex() else t

    model_type = getattr(config, "model_type", "?")
    rules = "/".join(sorted({r.scaling.rope_type for r in probe.rotaries.values()}))
    note = f"max diff over {measured_over}"
    if grown:
        note = (f"{state}; {note}, from the state its config gives; the exact module computes "
                "each call's frequencies from that call's length")  # fmt: skip
    return Found(
        name,
        f"RotaryEmbedding.from_hf({model_type!r}): {rules}",
        build,
        numbers=lambda: run(_as_built(module, grown)),  # a copy: the dynamic rule remembers
        probe=run,
        note=note,
    )


def _prefix(layer_type: str | None) -> str:
    return "" if layer_type is None else f"{layer_type}_"


def _state(module: Any, probe: Any) -> tuple[str, dict[str | None, int]]:
    """What a transformers rotary module holds beyond what its config gives: ``(edited,
    grown)``, a description of frequencies that are not its config's (empty: none), and the
    lengths the ``dynamic`` rule grew its ``inv_freq`` to, by layer type. Its config's are
    transformers' own float32 arithmetic (:func:`posenc.compat.transformers.inv_freq`),
    compared after the 16-bit casts a move may have made (within 2^-8, relative)."""
    grown: dict[str | None, int] = {}
    original = getattr(module, "original_max_seq_len", None)
    for layer_type, tables in probe._tables.items():
        prefix, r = _prefix(layer_type), tables.rotary
        cached: Any = getattr(module, f"{prefix}max_seq_len_cached", 0)  # an int or a tensor
        if r.scaling.rule.remembers_length and original and int(cached) > original:
            grown[layer_type] = int(cached)
        held = getattr(module, f"{prefix}original_inv_freq", None)
        if not (grown.get(layer_type) or r.scaling.rule.switches_tables):  # the buffer read
            held = getattr(module, f"{prefix}inv_freq", held)
        if not isinstance(held, Tensor) or held.is_meta or held.is_complex():
            continue
        want, _ = _rope_compat.inv_freq(r, None, "cpu")
        if held.shape != want.shape:
            continue
        rel = ((held.detach().cpu().double() - want.double()) / want.double()).abs()
        if float(rel.max()) > 2.0**-8:
            i = int(rel.argmax())
            return (f"its {prefix}inv_freq is not what its config gives: channel {i} holds "
                    f"{float(held.reshape(-1)[i]):.6g}, the config {float(want[i]):.6g}",
                    grown)  # fmt: skip
    return "", grown


def _as_built(module: nn.Module, grown: dict[str | None, int]) -> nn.Module:
    """A copy of ``module`` with its grown ``dynamic`` frequencies back to its config's."""
    out: Any = copy.deepcopy(module)
    for layer_type in grown:
        prefix = _prefix(layer_type)
        out.register_buffer(f"{prefix}inv_freq", getattr(out, f"{prefix}original_inv_freq"),
                            persistent=False)  # fmt: skip
        setattr(out, f"{prefix}max_seq_len_cached", out.original_max_seq_len)
    return cast(nn.Module, out)


# ---------------------------------------------------------------------------------------------
# 1D tables: Whisper's encoder, Marian, fairseq's (M2M100, Speech2Text)


def _check_weight(module: nn.Module, state: dict[str, Any], prefix: str, *args: Any) -> None:
    check_saved_table(module, state, prefix + "weight")  # nn.Embedding's key


class PositionTable(SinusoidalEmbedding):
    """posenc's stand-in for an ``nn.Embedding`` of fixed sinusoidal rows (Whisper's encoder
    ``embed_positions``): ``forward(ids)`` gathers rows, ``weight`` is the whole table in the
    module's dtype and device (it follows ``.to()``), nothing is saved, and a checkpoint's
    ``weight`` is checked as posenc's modules check their tables. ``compat="original"``: the
    original's float32 arithmetic (then the module's dtype), for identical outputs."""

    def __init__(
        self, rows: int, dim: int, preset: str, *, compat: str | None, device: Any,
        dtype: Any, **options: Any,
    ) -> None:  # fmt: skip
        # read by _span while the kept rows are built; a preset whose original computes in
        # float64 (marian, mae) has no replay: its exact table is the original's
        self.compat = compat if preset in ORIGINALS else None
        super().__init__(dim, preset=preset, cached_length=rows, device=device, dtype=dtype,
                         **options)  # fmt: skip
        self.num_embeddings, self.embedding_dim = rows, dim
        self._register_load_state_dict_pre_hook(_check_weight, with_module=True)  # type: ignore[no-untyped-call]

    @property
    def weight(self) -> Tensor:
        """The table ``[rows, dim]``, as the original's ``weight`` (not a parameter)."""
        return self.cache

    def _span(self, start: int, length: Any, dtype: torch.dtype, device: Any) -> Tensor:
        if self.compat is None:
            return super()._span(start, length, dtype, device)
        out: Tensor = table(length, self.dim, preset=self.preset, offset=start, compat="original",
                            dtype=torch.float32, device=device, **self.options)  # fmt: skip
        return out.to(dtype)

    def _computed(self, pos: Any, dtype: torch.dtype) -> Tensor:
        if self.compat is None:
            return super()._computed(pos, dtype)
        out: Tensor = encode(pos.values, self.dim, preset=self.preset, compat="original",
                             dtype=torch.float32, **self.options)  # fmt: skip
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


class TokenPositions(FairseqPositions):
    """The stand-in for Speech2Text's form, ``forward(input_ids, past_key_values_length)``."""

    def forward(self, input_ids: Any, past_key_values_length: Any = 0) -> Tensor:  # type: ignore[override]
        """``[b, s, d]`` rows of fairseq's positions of ``input_ids``."""
        return super().forward(input_ids, None, past_key_values_length)


def _table(name: str, saved: Tensor, make: Callable[[str | None], nn.Module], what: str,
           probe: Callable[[Any], Tensor], attribute: str | None = None) -> Found:  # fmt: skip
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
        return left_alone(name, f"learned (a trainable table; holds the {what}), left alone",
                          attribute)  # fmt: skip
    if problem is not None:
        held = holds(saved)
        held = f" ({held})" if held else ""
        return left_alone(name, f"a fixed table that is not the {what}{held}: left alone",
                          attribute)  # fmt: skip
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


def embeddings(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Whisper's encoder table, Marian's, and fairseq's (M2M100, Speech2Text)."""
    name = type(module).__name__
    if type(module) is nn.Embedding and path.endswith("embed_positions") and path != "":
        parent = _parent(root, path)
        if not (_tf(parent) and type(parent).__name__.endswith("Encoder")):
            return None
        return _one_d(name, module.weight, PositionTable, "whisper")
    if not (_tf(module) and name.endswith("SinusoidalPositionalEmbedding")):
        return None
    if isinstance(module, nn.Embedding):  # Marian, Pegasus: [sin | cos] by split widths
        return _one_d(name, module.weight, MarianPositions, "marian")
    table, pad = getattr(module, "weights", None), getattr(module, "padding_idx", None)
    params = list(inspect.signature(type(module).forward).parameters)[1:]
    forms = {("input_ids", "inputs_embeds", "past_key_values_length"): FairseqPositions,
             ("input_ids", "past_key_values_length"): TokenPositions}  # fmt: skip
    form = forms.get(tuple(params))
    if not isinstance(table, Tensor) or not isinstance(pad, int) or form is None:
        return left_alone(name, f"not covered: forward({', '.join(params)}) is not a form "
                          "posenc reproduces")  # fmt: skip
    return _one_d(name, table, form, "fairseq", padding_idx=pad)


def _one_d(name: str, saved: Tensor, cls: type[PositionTable], preset: str, **options: Any
           ) -> Found:  # fmt: skip
    """A 1D table ``saved`` (``[rows, dim]``) that ``cls`` computes with ``preset``."""
    rows, dim = int(saved.shape[0]), int(saved.shape[1])

    def make(compat: str | None) -> nn.Module:
        return cls(rows, dim, preset, compat=compat, device=saved.device, dtype=saved.dtype,
                   **options)  # fmt: skip

    what = " ".join([f"{preset} sinusoid", *(f"{k}={v}" for k, v in options.items())])
    attr = "weights" if issubclass(cls, FairseqPositions) else "weight"
    return _table(name, saved, make, what, lambda m: getattr(m, attr))


# ---------------------------------------------------------------------------------------------
# vision: ViT-MAE's fixed table, DETR's sine encoding


def mae(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """ViT-MAE's ``position_embeddings`` (and its decoder's ``decoder_pos_embed``): a fixed
    ``[1, 1 + H*W, d]`` table, MAE's 2D sin-cos with a class row."""
    name = type(module).__name__
    attr = {"ViTMAEEmbeddings": "position_embeddings", "ViTMAEDecoder": "decoder_pos_embed"}
    if not (_tf(module) and name in attr):
        return None
    key = attr[name]
    saved = getattr(module, key, None)
    if not isinstance(saved, nn.Parameter) or saved.ndim != 3:
        return None
    side, dim = math.isqrt(saved.shape[1] - 1), saved.shape[2]
    if side * side != saved.shape[1] - 1 or dim % 4:
        return left_alone("Parameter", "not a square grid with a class row: left alone", key)

    def make(compat: str | None) -> nn.Module:
        grid = GridEncoding(dim, preset="mae", cls_token=True)
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


class DetrPositions(DetrSineEncoding):
    """The stand-in for transformers' ``DetrSinePositionEmbedding`` (and its copies, Conditional
    DETR's): ``forward(shape, device, dtype, mask=None)`` with ``mask`` 1 on pixels (its
    convention), exact in ``dtype``."""

    def forward(  # type: ignore[override]
        self, shape: Any, device: Any, dtype: torch.dtype, mask: Tensor | None = None
    ) -> Tensor:
        """``[b, 2 * num_pos_feats, H, W]`` in ``dtype``."""
        b, _, h, w = shape
        padding = (
            torch.zeros(b, h, w, dtype=torch.bool, device=device) if mask is None else mask == 0
        )
        out: Tensor = evaluate.detr(self._plan, self.enc, padding, dtype=dtype, on_device=True)
        return out


class PixelMaskPositions(DetrSineEncoding):
    """The stand-in for the older form of DETR's sine embedding (Table Transformer's):
    ``forward(pixel_values, pixel_mask)``, float32 as the original computes it."""

    def forward(self, pixel_values: Tensor, pixel_mask: Tensor) -> Tensor:  # type: ignore[override]
        """``[b, 2 * num_pos_feats, H, W]`` in float32, on ``pixel_values``' device."""
        if pixel_mask is None:
            raise PosencError("`pixel_mask` must be given (1 on pixels, 0 on padding)")
        padding = (pixel_mask == 0).to(pixel_values.device)
        out: Tensor = evaluate.detr(self._plan, self.enc, padding, dtype=torch.float32,
                                    on_device=True)  # fmt: skip
        return out


SINE_FORMS: dict[tuple[str, ...], tuple[type[DetrSineEncoding], str]] = {
    ("shape", "device", "dtype", "mask"): (DetrPositions, "num_position_features"),
    ("pixel_values", "pixel_mask"): (PixelMaskPositions, "embedding_dim"),
}
"""The forms of DETR's sine embedding in transformers: the stand-in, and the attribute that
holds the channels per axis."""
SINE_CHECK = 1e-4
"""A sine embedding whose numbers differ from DETR's by more than this is another one."""


def detr(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """DETR's sine encoding in any transformers model that computes it (DETR, Conditional
    DETR, Table Transformer), checked on a padded feature map and measured on a 32 x 32 one;
    another ``*SinePositionEmbedding`` is left to ``others``, which reports it."""
    name = type(module).__name__
    params = tuple(inspect.signature(type(module).forward).parameters)[1:]
    if not (_tf(module) and name.endswith("SinePositionEmbedding") and params in SINE_FORMS):
        return None
    form, channels = SINE_FORMS[params]
    original: Any = module  # its attributes, untyped
    feats, temp = int(getattr(original, channels)), float(original.temperature)
    norm, scale = bool(original.normalize), float(original.scale)

    def build(compat: str | None) -> nn.Module | str:
        if compat is not None:
            return "compat='original': posenc has no replay of DETR's float32 arithmetic"
        return form(feats, temp, norm, scale if norm else None)

    def run(m: nn.Module, h: int = 32, w: int = 32, pad: int = 0) -> list[Tensor]:
        mask = torch.ones(1, h, w, dtype=torch.long)
        mask[:, h - pad :, :] = mask[:, :, w - pad :] = 0
        if form is PixelMaskPositions:
            return [m(torch.zeros(1, 1, h, w), mask)]
        return [m(torch.Size([1, 2 * feats, h, w]), torch.device("cpu"), torch.float32, mask)]

    differs, _ = compare(
        run(module, 12, 20, 3), run(form(feats, temp, norm, scale if norm else None), 12, 20, 3)
    )
    if differs > SINE_CHECK:
        return left_alone(name, f"not covered: its numbers differ from DETR's sine embedding by "
                          f"{differs:.2g} (on a padded 12 x 20 feature map)")  # fmt: skip
    return Found(name, f"DetrSineEncoding({feats}, normalize={norm})", build, lambda: run(module),
                 run, note="max diff on a 32 x 32 feature map")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# everything else that holds positions: reported, left alone


def others(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Any other positional module of transformers (by its class name or attribute name), or a
    positional table a transformers module keeps as a parameter or buffer (GPT-J's and
    CodeGen's ``embed_positions``, CTRL's ``pos_encoding``): reported, left alone, saying
    which sinusoid it holds when it holds one."""
    name, last = type(module).__name__, path.rpartition(".")[2]
    if (_tf(module) and _POSITIONAL.search(name)) or (path and last in POSITIONAL_NAMES):
        weight = next((t for t in module.parameters() if t.ndim >= 2), None)
        if any(p.requires_grad for p in module.parameters()):
            return left_alone(name, learned(weight))
        if not _tf(module) and weight is None:
            return None
        held = f"; it {holds(weight)}" if holds(weight) else ""
        why = f"not covered: posenc does not reproduce {name}'s forward{_signature(module)}"
        return left_alone(name, why + held)
    if not _tf(module):
        return None
    for key in (*POSITIONAL_NAMES, *BUFFER_NAMES):
        saved = module._parameters.get(key, module._buffers.get(key))
        if not isinstance(saved, Tensor) or not saved.is_floating_point():
            continue
        kind = "Parameter" if isinstance(saved, nn.Parameter) else "buffer"
        if saved.requires_grad:
            return left_alone(kind, learned(saved), key)
        held = f" ({holds(saved)})" if holds(saved) else ""
        why = f"a fixed table{held} that {name} reads as a tensor: posenc has no stand-in for it"
        return left_alone(kind, why, key)
    return None


def _signature(module: nn.Module) -> str:
    return str(inspect.signature(type(module).forward)).replace("self, ", "", 1)


BUFFER_NAMES = ("pos_encoding",)  # CTRL's
"""Attribute names of fixed positional tables besides ``POSITIONAL_NAMES``."""
_POSITIONAL = re.compile(r"Pos(ition(al)?)?(Embed|Encod)")
RECOGNISERS: tuple[Recogniser, ...] = (rotary, embeddings, mae, detr, others)
"""The transformers recognisers, in the order they are asked (the first answer wins)."""
