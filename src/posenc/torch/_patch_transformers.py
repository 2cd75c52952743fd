"""The transformers recognisers of :func:`posenc.torch.patch`, and the stand-ins they build.

Each recogniser knows one kind of transformers module by its class name and module path
(transformers is never imported here): the rotary modules ``RotaryEmbedding.from_hf``
reproduces, DETR's sine encoding and its copies, and (``others``) everything else that holds
positions, reported and left alone with what it holds; the fixed tables (Whisper, Marian,
fairseq, ViT-MAE) are in ``_patch_transformers_tables.py``.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch import Tensor, nn

from posenc import evaluate
from posenc.compat import transformers as _rope_compat
from posenc.errors import PosencError
from posenc.torch import _patch_transformers_tables as fixed_tables
from posenc.torch._hf_rotary import HFRotaryEmbedding
from posenc.torch._patching import (
    Found,
    Recogniser,
    compare,
    device_of,
    float_dtype,
    from_library,
    has_meta,
    left_alone,
    left_table,
    measured,
    table_of,
    unlike,
    unreproduced,
)
from posenc.torch.vision import DetrSineEncoding

POSITIONAL_NAMES = (
    "embed_positions",
    "position_embeddings",
    "position_embedding",
    "wpe",
    "pos_embed",
    "positional_embedding",
    "decoder_pos_embed",
)


# ---------------------------------------------------------------------------------------------
# rotary modules


def rotary(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """A transformers ``*RotaryEmbedding`` that ``RotaryEmbedding.from_hf`` reproduces."""
    name = type(module).__name__
    if not (name.endswith("RotaryEmbedding") and from_library(module, "transformers")):
        return None
    config = getattr(module, "config", None)
    if config is None:
        return left_alone(name, "not covered: it has no config for RotaryEmbedding.from_hf")
    family: _rope_compat.Family | None = None
    try:
        probe = HFRotaryEmbedding(config)
    except PosencError as err:
        family, why = _standard_form(module, config)
        if family is None:
            why = "" if why == f"; {err}" else why
            return left_alone(name, f"not covered yet: {err}{why}")
        probe = HFRotaryEmbedding(config, family=family)
    edited, grown = _state(module, probe)
    if edited:
        return left_alone(
            name,
            f"{edited}: changed after it was built? posenc builds from the "
            "config, so it is left alone",
        )
    device, dtype = device_of(module), float_dtype(module)
    length = getattr(config, "max_position_embeddings", None) or 4096
    layer_types = list(probe.layer_types or [None])  # per-layer-type families: each one
    sections = any(r.sections is not None for r in probe.rotaries.values())

    state = ""
    if grown:
        lengths = ", ".join(str(n) for n in grown.values())
        trained = getattr(module, "original_max_seq_len", "?")
        state = (
            f"its dynamic rule had grown inv_freq to {lengths} positions (it ran past "
            f"max_position_embeddings={trained})"
        )

    def build(compat: str | None) -> nn.Module | str:
        if compat is not None and grown:
            return f"{state}; compat={compat!r} repeats the module its config builds, not this"
        replay = None if compat is None else "transformers"
        out = HFRotaryEmbedding(config, replay, device=device, family=family)
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
        note = (
            f"{state}; {note}, from the state its config gives; the exact module computes "
            "each call's frequencies from that call's length"
        )
    call = "RotaryEmbedding.from_hf" if family is None else "transformers' standard rotary"
    return Found(
        name,
        f"{call}({model_type!r}): {rules}",
        build,
        numbers=lambda: run(_as_built(module, grown)),  # a copy: the dynamic rule remembers
        probe=run,
        note=note,
    )


def _standard_form(module: nn.Module, config: Any) -> tuple[_rope_compat.Family | None, str]:
    """The form of transformers' standard rotary machinery (:data:`~posenc.compat.transformers.
    STANDARD`) whose replay gives ``module``'s own tables bit for bit (on its first and last
    256 positions, for each of its layer types, and on three axes of positions where the
    module takes them: a multimodal one is not standard), for a model type ``from_hf`` does not
    list; else None and why (appended to the note)."""
    layer_types = [  # those with tables (a NoPE layer type has none: Beam's full attention)
        str(t)
        for t in getattr(module, "layer_types", None) or ()
        if isinstance(getattr(module, f"{_prefix(str(t))}inv_freq", None), Tensor)
    ]
    held = getattr(module, f"{_prefix(layer_types[0] if layer_types else None)}inv_freq", None)
    if not isinstance(held, Tensor):
        return None, ""  # not the standard machinery
    if held.is_meta:  # its values come from its config at load: check a fresh one on the CPU
        try:
            with torch.device("cpu"):
                module = type(module)(config)
        except Exception:  # any constructor: then it cannot be checked
            why = "posenc cannot check on the meta device that it computes transformers' "
            return None, f"; {why}standard rotary tables: load the model first"
        return _standard_form(module, config) if not has_meta(module) else (None, "")
    if held.is_complex() or held.ndim != 1:
        return None, ""
    length = getattr(config, "max_position_embeddings", None) or 4096
    ids = torch.cat([torch.arange(min(256, length)), torch.arange(max(0, length - 256), length)])
    ids = ids.to(held.device)[None]
    axes = torch.stack([ids, 2 * ids, 3 * ids])  # multimodal ids: the original may take them
    kinds: list[tuple[str, ...]] = [(t,) for t in layer_types] or [()]
    tried = [  # x in bfloat16 too: tables that follow x's dtype, or stay float32
        (torch.zeros(1, dtype=dtype, device=held.device), p, *t)
        for p in (ids, axes)
        for t in kinds
        for dtype in (torch.float32, torch.bfloat16)
    ]
    failures = [_fails(module, call) for call in tried]
    calls = [call for call, failed in zip(tried, failures, strict=True) if failed is None]
    if not calls:  # not called as transformers' rotary modules are (a TypeError), or broken
        standard = list(inspect.signature(module.forward).parameters)[:2] == ["x", "position_ids"]
        broken = [
            f for f in failures if standard and f is not None and not isinstance(f, TypeError)
        ]
        return None, f"; {OWN_FAILS} on position ids ({_first(broken[0])})" if broken else ""
    first = ""
    theirs: list[Tensor] | None = None  # the module's own tables: the same for every form
    sections = getattr(module, "mrope_section", None)
    for family in (*_rope_compat.multimodal(sections), *_rope_compat.STANDARD):
        if family.per_layer != bool(layer_types):
            continue
        try:
            replay = HFRotaryEmbedding(config, "transformers", held.device, family)
            replay = replay.to(float_dtype(module) or torch.float32)
            if theirs is None:  # a copy: a dynamic rule remembers
                original: Any = copy.deepcopy(module)
                theirs = [t for call in calls for t in original(*call)]
            ours = [t for call in calls for t in cast(Any, replay)(*call)]
        except PosencError as err:
            first = first or str(err)
            continue
        except Exception as err:  # a config or a forward of another form
            first = first or f"not transformers' standard rotary machinery ({_first(err)})"
            continue
        if len(theirs) == len(ours) and compare(theirs, ours)[1]:
            return family, ""
    return None, f"; {first or NOT_STANDARD}"


NOT_STANDARD = "its tables are not those of transformers' standard rotary arithmetic"


OWN_FAILS = "its own forward fails"


def _fails(module: nn.Module, call: tuple[Any, ...]) -> Exception | None:
    """Why the module (a copy: a dynamic rule remembers) does not take this call; None if it
    does."""
    try:
        copy.deepcopy(module)(*call)
    except Exception as err:  # a form of positions it does not take, or a broken module
        return err
    return None


def _first(err: Exception) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"[:160]


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
            return (
                f"its {prefix}inv_freq is not what its config gives: channel {i} holds "
                f"{float(held.reshape(-1)[i]):.6g}, the config {float(want[i]):.6g}",
                grown,
            )
    return "", grown


def _as_built(module: nn.Module, grown: dict[str | None, int]) -> nn.Module:
    """A copy of ``module`` with its grown ``dynamic`` frequencies back to its config's."""
    out: Any = copy.deepcopy(module)
    for layer_type in grown:
        prefix = _prefix(layer_type)
        out.register_buffer(
            f"{prefix}inv_freq", getattr(out, f"{prefix}original_inv_freq"), persistent=False
        )
        setattr(out, f"{prefix}max_seq_len_cached", out.original_max_seq_len)
    return cast(nn.Module, out)


# ---------------------------------------------------------------------------------------------
# DETR's sine encoding and its copies


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
        out: Tensor = evaluate.detr(
            self._plan, self.enc, padding, dtype=torch.float32, on_device=True
        )
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
    if not (
        from_library(module, "transformers")
        and name.endswith("SinePositionEmbedding")
        and params in SINE_FORMS
    ):
        return None
    form, channels = SINE_FORMS[params]
    original: Any = module  # its attributes, untyped
    try:
        feats, temp = int(getattr(original, channels)), float(original.temperature)
        norm, scale = bool(original.normalize), float(original.scale)
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "transformers")

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

    exact = build(None)
    assert not isinstance(exact, str)
    differs, _ = compare(run(module, 12, 20, 3), run(exact, 12, 20, 3))
    if differs > SINE_CHECK:
        return left_alone(
            name,
            f"not covered: its numbers differ from DETR's sine embedding by "
            f"{differs:.2g} (on a padded 12 x 20 feature map)",
        )
    return Found(
        name,
        f"DetrSineEncoding({feats}, normalize={norm})",
        build,
        lambda: run(module),
        run,
        note="max diff on a 32 x 32 feature map",
    )


# ---------------------------------------------------------------------------------------------
# everything else that holds positions: reported, left alone


def others(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Any other positional module of transformers (by its class name or attribute name), or a
    positional table a transformers module keeps as a parameter or buffer (GPT-J's and
    CodeGen's ``embed_positions``, CTRL's ``pos_encoding``): reported, left alone, saying
    which sinusoid it holds when it holds one."""
    name, last = type(module).__name__, path.rpartition(".")[2]
    if (from_library(module, "transformers") and _POSITIONAL.search(name)) or (
        path and last in POSITIONAL_NAMES
    ):
        trainable = any(p.requires_grad for p in module.parameters())
        if not (trainable or from_library(module, "transformers") or table_of(module) is not None):
            return None
        why = f"not covered: posenc does not reproduce {name}'s forward{_signature(module)}"
        return unreproduced(module, why)
    if not from_library(module, "transformers"):
        return None
    for key in (*POSITIONAL_NAMES, *BUFFER_NAMES):
        saved = module._parameters.get(key, module._buffers.get(key))
        if not isinstance(saved, Tensor) or not saved.is_floating_point():
            continue
        fixed = (
            f"a fixed table{{held}} that {name} reads as a tensor: posenc has no stand-in for it"
        )
        return left_table(saved, key, fixed)
    return None


def _signature(module: nn.Module) -> str:
    return str(inspect.signature(type(module).forward)).replace("self, ", "", 1)


BUFFER_NAMES = ("pos_encoding",)  # CTRL's
"""Attribute names of fixed positional tables besides ``POSITIONAL_NAMES``."""
_POSITIONAL = re.compile(r"Pos(ition(al)?)?(Embed|Encod)|Sinusoid|TimeEmbedding$")
RECOGNISERS: tuple[Recogniser, ...] = (
    fixed_tables.audio_table,
    fixed_tables.mae,
    rotary,
    fixed_tables.embeddings,
    detr,
    others,
)
"""The transformers recognisers: by class name (found by :func:`posenc.torch._patching.index`)
and by form (a class name's suffix, a path, an attribute), the latter asked in this order."""
