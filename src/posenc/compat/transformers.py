"""transformers' own float32 RoPE arithmetic, kept apart from the exact engine.

``compat="transformers"`` exists so a model can switch to posenc without changing one logit:
it reproduces, op for op in torch float32, what transformers 5.x computes: the inverse
frequencies of each ``rope_type`` (``modeling_rope_utils.py`` and the models'
``compute_default_rope_parameters``), then ``ids.float()[..., None] * inv_freq``, ``cos`` and
``sin``, ``* attention_factor`` as a Python float, the layout, ``.to(dtype)``. Every step is
elementwise, so merging multimodal sections or duplicating halves before or after ``cos``
gives the same bits. The rules' parameters, validation and float32 inverse frequencies are
those of :mod:`posenc.spec.scaling` (each :class:`~posenc.spec.scaling.Rule` replays
transformers' ops with the torch module passed in); the rest is here. These numbers are not
exact (float32 angles drift with the position): :func:`posenc.rope` without ``compat`` is.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch

from posenc.errors import PosencError, check_int, check_real, show
from posenc.evaluate.libs.torch import compat_dtype, compat_in, compat_out
from posenc.evaluate.positions import Positions
from posenc.spec import scaling as _scaling
from posenc.spec.ladders import SPACINGS
from posenc.spec.presets.transformers import FAMILIES as FAMILIES
from posenc.spec.presets.transformers import Family as Family
from posenc.spec.rotary import Rotary, layout_columns, section_axes

Casts = tuple[Any, ...]
"""The 16-bit dtypes a rotary module's ``inv_freq`` buffer was cast to, in order (``.to()``
casts a transformers module's float buffers; its forward upcasts them to float32 again)."""

InvFreq = tuple[Any, float]
"""What :func:`inv_freq` returns: float32 inverse frequencies ``[d/2]`` and the attention
factor (a module keeps them, as transformers' module keeps its ``inv_freq`` buffer)."""


def inv_freq(
    rotary: Rotary, seq_len: int | None, device: Any = None, casts: Casts = ()
) -> tuple[Any, float]:
    """transformers' float32 inverse frequencies and attention factor for this rule, as a
    freshly built rotary module holds them for a sequence of ``seq_len``: the rule's own
    float32 arithmetic (:attr:`posenc.spec.scaling.Rule.float32`), run with torch; then
    rounded through ``casts`` and back to float32, as the module's forward reads its buffer
    after ``model.to(torch.bfloat16)``."""
    arithmetic = rotary.scaling.rule.float32
    if arithmetic is None:  # the rope functions refuse it before (api.rope._check_compat)
        raise PosencError(f"rope_type {rotary.scaling.rope_type!r} has no transformers arithmetic")
    freq, factor = arithmetic(torch, rotary.scaling.p, rotary.dim, rotary.base, seq_len, device)
    for dtype in casts:
        freq = freq.to(dtype).float()
    return freq, factor


_inv_freq = inv_freq  # for the functions whose ``inv_freq`` parameter hides it


def rope(
    rotary: Rotary,
    pos: Positions,
    seq_len: int | None,
    dtype: Any,
    casts: Casts = (),
    inv_freq: InvFreq | None = None,
) -> tuple[Any, Any]:
    """``(cos, sin)`` as transformers computes them; positions with the axis of several
    sections last (as :func:`posenc.rope` passes them); ``casts``: as :func:`inv_freq`.
    ``inv_freq``: ``(freq, factor)`` kept from :func:`inv_freq` for this ``seq_len`` and
    ``casts``, on the positions' device, used instead of recomputing them."""
    if rotary.axes_dim is not None or not SPACINGS[rotary.spacing].takes_rules:
        raise PosencError(
            "`compat='transformers'` has no axial rule: axial RoPE (FLUX, the image and video "
            "families) is not transformers' language models'; posenc.rope_grid(..., compat=…) "
            "has the families' own; drop `compat`"
        )
    x, numpy_out = compat_in(pos.values)
    out_dtype = compat_dtype(dtype, torch.get_default_dtype())
    freq, factor = _inv_freq(rotary, seq_len, x.device, casts) if inv_freq is None else inv_freq
    ids = x.float()
    if rotary.sections is not None:  # each frequency reads its section's axis
        axis = torch.from_numpy(section_axes(rotary)).to(x.device)
        angles = torch.take_along_dim(ids, axis.expand(*ids.shape[:-1], -1), dim=-1) * freq
    else:
        angles = ids[..., None] * freq
    cols = torch.tensor(
        layout_columns(rotary.layout, rotary.dim // 2, rotary.blocks), device=x.device
    )
    cos = (angles.cos() * factor)[..., cols].to(out_dtype)
    sin = (angles.sin() * factor)[..., cols].to(out_dtype)
    cos, sin = compat_out((cos, sin), numpy_out)
    return cos, sin


# ---------------------------------------------------------------------------------------------
# transformers configs: what each model family's rotary module computes


STANDARD: tuple[Family, ...] = tuple(
    Family(form, partial=partial, float32=float32, per_layer=per_layer, checked=True)
    for per_layer in (False, True)
    for form in ("halves", "interleaved", "compact")
    for float32 in (False, True)
    for partial in (True, False)
)
"""The forms of transformers' standard rotary machinery (``compute_default_rope_parameters``
and ``ROPE_INIT_FUNCTIONS`` from ``config.rope_parameters``, ``inv_freq``, ``attention_scaling``;
``[freqs | freqs]``, interleaved or compact tables, in ``x``'s dtype or float32, one set or one
per layer type as Gemma 3's), which a model type ``FAMILIES`` does not list may follow:
:func:`posenc.torch.patch` takes the first whose replay repeats the module's own tables bit for
bit (Falcon, Helium, GLM-4, Cohere 2 MoE, BLT, …), and leaves the module alone when none does."""


def multimodal(sections: Any) -> tuple[Family, ...]:
    """The forms of transformers' standard multimodal rotary machinery for a module that holds
    ``mrope_section`` (``sections``, its default when the config gives none): Qwen2-VL's
    blocks of sections and Qwen3-VL's round robin, in halves or interleaved (GLM-OCR's) tables.
    ``()`` when ``sections`` is not a list of positive integers."""
    if not (isinstance(sections, (list, tuple)) and sections):
        return ()
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sections):
        return ()
    split = tuple(sections)
    return tuple(
        Family(form, partial=partial, sections=split, interleave=interleave, checked=True)
        for form in ("halves", "interleaved")
        for interleave in (False, True)
        for partial in (True, False)
    )


_WRAPPERS = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llama4", "gemma3", "gemma3n", "gemma4")
_NOT_SCALING = ("rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved", "type")
_PRF = "partial_rotary_factor"  # the proportional rule's own key: its width, not the table's
_TAKEN = ("rope_type", "type", "rope_theta", "partial_rotary_factor")  # by every rope_type
_SECTIONS = ("mrope_section", "mrope_interleaved")  # read by the multimodal families


@dataclass(frozen=True)
class HfRotary:
    """A transformers config read: :func:`posenc.rope`'s keywords, the family, the model
    type, the dynamic rule's original length (its module's ``original_max_seq_len``), and the
    layer type read (per-layer-type families; else None)."""

    keywords: dict[str, Any]
    family: Family
    model_type: str
    max_position_embeddings: int | None
    layer_type: str | None = None


def layer_types(config: Any, family: Family | None = None) -> tuple[str, ...]:
    """The layer types whose tables ``config``'s rotary module holds, as transformers' module
    lists them (``sorted(set(config.layer_types))``, those with parameters; where the config
    names its rotary sets apart from its layer types, ``config._rope_type_labels``, as
    DeepSeek-V4's and LFM3's, those of its labels that ``rope_parameters`` holds); ``()`` for a
    family with one set of tables. ``family``: how a model type ``FAMILIES`` does not list
    reads its config (:data:`STANDARD`), once its module was seen to compute that."""
    config, model_type, family = _family(config, family)
    if not family.per_layer:
        return ()
    rp = _parameters(config, model_type)
    labels = getattr(config, "_rope_type_labels", None)
    if labels:
        types = [t for t in labels if isinstance(rp.get(t), dict)]
    else:
        types = sorted(set(_field(config, "layer_types", model_type)))
    for t in types:
        if t not in rp:
            raise PosencError(
                f"`config.rope_parameters` of {model_type!r} has no entry for layer type {t!r} "
                f"(it holds {', '.join(map(repr, rp)) or 'none'})"
            )
    found = tuple(t for t in types if rp[t] is not None)
    if not found:
        raise PosencError(f"`config.rope_parameters` of {model_type!r} holds no layer type's set")
    return found


def read_config(
    config: Any, layer_type: str | None = None, family: Family | None = None
) -> HfRotary:
    """What ``config``'s rotary module computes (for ``layer_type``, in a per-layer-type
    family: see :func:`layer_types`); a family not covered, a missing field or a rotary
    width past the head are errors naming it. Keys of ``rope_parameters`` that the rule does
    not take are dropped with one warning, as transformers ignores them (with a logged
    warning); model-specific keys it does not warn about are refused. ``family``: as for
    :func:`layer_types`."""
    config, model_type, family = _family(config, family)
    rp = outer = _parameters(config, model_type)
    if family.per_layer:
        own_set = rp.get(layer_type) if layer_type is not None else None
        if not isinstance(own_set, dict):
            kinds = ", ".join(map(repr, layer_types(config, family)))
            raise PosencError(
                f"`config.rope_parameters` of {model_type!r} holds one set per layer type; "
                f"`layer_type` must be one of {kinds}, got {layer_type!r}"
            )
        rp = own_set
    elif layer_type is not None:
        raise PosencError(
            f"the rotary module of {model_type!r} holds one set of tables: `layer_type` must be "
            f"None, got {layer_type!r}"
        )
    elif rp and all(isinstance(v, dict) for v in rp.values()):
        raise PosencError(
            f"`config.rope_parameters` of {model_type!r} holds one set per layer type "
            f"({', '.join(rp)}), which the rotary module of {model_type!r} does not read; "
            "build one module per layer type from a config with that set"
        )
    where = "" if layer_type is None else f"[{layer_type!r}]"
    if "rope_theta" not in rp:
        raise PosencError(
            f"`config.rope_parameters{where}['rope_theta']` is missing ({model_type})"
        )
    kind = rp.get("rope_type", rp.get("type", _scaling.DEFAULT))
    rule = _scaling.RULES.get(kind) if isinstance(kind, str) else None  # None: rotary() says
    if rule is not None and rule.origin != "transformers":
        raise PosencError(
            f"`config.rope_parameters{where}['rope_type']` {kind!r} is not a rope_type of "
            f"transformers ({model_type}): it is posenc's rule of image and video models, "
            "for posenc.rope_grid(..., scaling=...)"
        )
    if rule is not None:
        rp = _known_keys(config, rp, kind, rule, family, f"config.rope_parameters{where}")
        truncate = outer.get("truncate", True)  # what _compute_yarn_parameters reads
        if (
            family.per_layer
            and "truncate" in rule.optional
            and rp.get("truncate", True) != truncate
        ):
            rp = {**rp, "truncate": truncate}
            warnings.warn(
                f"`config.rope_parameters{where}['truncate']` is not what transformers reads: "
                f"its module reads `config.rope_parameters.get('truncate', True)` "
                f"({truncate!r}), used instead",
                UserWarning,
                stacklevel=4,
            )
    scaled = rule is None or not rule.unscaled
    head_dim = getattr(_layer_config(config, layer_type), "head_dim", None)
    if head_dim is None:
        hidden = _size(config, "hidden_size", model_type)
        head_dim = hidden // _size(config, "num_attention_heads", model_type)
    head_dim = check_int("config.head_dim", head_dim, minimum=1)
    factor = 1.0
    # a rule that reads partial_rotary_factor itself (proportional) spans the whole head,
    # its frequencies past the factor 0
    whole = rule is not None and _PRF in (*rule.required, *rule.optional)
    if (family.partial or scaled) and not whole:
        name = f"config.rope_parameters{where}['partial_rotary_factor']"
        factor = check_real(name, rp.get("partial_rotary_factor", 1.0), positive=True)
        if int(head_dim * factor) > head_dim:
            raise PosencError(
                f"`{name}` (GPT-NeoX's `rotary_pct`) must be at most 1, got {factor:g}: a rotary "
                f"width of int({head_dim} * {factor:g}) = {int(head_dim * factor)} exceeds the "
                f"head dim {head_dim} ({model_type})"
            )
    keywords: dict[str, Any] = {
        "dim": int(head_dim * factor),
        "base": check_real(
            f"config.rope_parameters{where}['rope_theta']", rp["rope_theta"], positive=True
        ),
        "layout": family.form if family.form != "complex" else "compact",
    }
    longest = getattr(config, "max_position_embeddings", None)
    if longest is not None:
        longest = check_int("config.max_position_embeddings", longest, minimum=1)
    if scaled:
        scaling = {k: v for k, v in rp.items() if k not in _NOT_SCALING or (whole and k == _PRF)}
        scaling["rope_type"] = kind
        if rule is not None and rule.remembers_length and longest is None:
            raise PosencError(f"`config.max_position_embeddings` is missing ({model_type})")
        for name, needed in rule.from_config.items() if rule is not None else ():
            if name not in scaling:  # the dict's own value wins
                value = _size(config, name, model_type) if needed else getattr(config, name, None)
                scaling[name] = value
        if rule is not None:  # its keys checked now, named as the config names them
            _scaling.parse_scaling(scaling, f"config.rope_parameters{where}")
        keywords["scaling"] = scaling
    if family.sections is not None:
        keywords["sections"] = tuple(rp.get("mrope_section", family.sections))
        keywords["interleave_sections"] = family.interleave
    return HfRotary(keywords, family, model_type, longest, layer_type)


def _family(config: Any, given: Family | None = None) -> tuple[Any, Any, Family]:
    """The config that holds the rotary parameters (a multimodal one's text config), its
    model type and family (``given``, else the model type's in ``FAMILIES``); a family not
    covered is an error."""
    model_type = getattr(config, "model_type", None)
    if model_type in _WRAPPERS and getattr(config, "text_config", None) is not None:
        config = config.text_config
        model_type = getattr(config, "model_type", None)
    family = given or FAMILIES.get(model_type)  # type: ignore[arg-type]
    if family is None:
        raise PosencError(
            f"`config` of model_type {model_type!r} is not a family from_hf covers (it would "
            f"risk a silently different table); covered: {', '.join(sorted(FAMILIES))}"
        )
    return config, model_type, family


def _layer_config(config: Any, layer_type: str | None) -> Any:
    """The config a layer type's module reads its head dim from: Gemma 4's
    ``config.per_layer_config[layer_type]`` (its full-attention layers' ``global_head_dim``),
    else ``config``."""
    per_layer = getattr(config, "per_layer_config", None) if layer_type is not None else None
    if per_layer is None:
        return config
    try:
        return per_layer[layer_type]
    except (KeyError, ValueError, TypeError, IndexError):
        return config


def _parameters(config: Any, model_type: Any) -> dict[str, Any]:
    rp = _field(config, "rope_parameters", model_type)
    if not isinstance(rp, dict):
        raise PosencError(f"`config.rope_parameters` must be a dict, got {show(rp)} ({model_type})")
    return rp


def _known_keys(
    config: Any, rp: dict[str, Any], kind: str, rule: _scaling.Rule, family: Family, name: str
) -> dict[str, Any]:
    """``rp`` without the keys rope_type ``kind`` does not take, which transformers' rotary
    modules ignore (``_check_received_keys`` logs them; no rule's function reads them), with
    one warning naming them. ``max_position_embeddings`` is one: the rules read the config's.
    A key the model declares its own (``ignore_keys_at_rope_validation``) may be read by the
    model, so one posenc does not take is an error, never dropped."""
    takes = {*_TAKEN, *rule.required, *rule.optional} - {"max_position_embeddings"}
    if family.sections is not None:
        takes.update(_SECTIONS)
    unknown = [k for k in rp if k not in takes]
    own = set(getattr(config, "ignore_keys_at_rope_validation", None) or ()) - set(_SECTIONS)
    if family.checked:  # the module's tables showed the rule reads none of them
        rp = {k: v for k, v in rp.items() if k not in own or k in takes}
        unknown = [k for k in unknown if k not in own]
    for key in unknown:
        if key in own:
            raise PosencError(
                f"`{name}['{key}']` is a key of the model's own that posenc does not reproduce "
                f"(rope_type {kind!r} takes {', '.join(sorted(takes - set(_TAKEN)))})"
            )
    if not unknown:
        return rp
    one = len(unknown) == 1
    warnings.warn(
        f"`{name}` holds {', '.join(map(repr, unknown))}, not {'a key' if one else 'keys'} of "
        f"rope_type {kind!r}: dropped, as transformers ignores {'it' if one else 'them'}",
        UserWarning,
        stacklevel=5,
    )
    return {k: v for k, v in rp.items() if k not in unknown}


def _field(config: Any, name: str, model_type: Any) -> Any:
    value = getattr(config, name, None)
    if value is None:
        raise PosencError(f"`config.{name}` is missing ({model_type})")
    return value


def _size(config: Any, name: str, model_type: Any) -> int:
    """``config.<name>``, a size: a positive integer."""
    return check_int(f"config.{name}", _field(config, name, model_type), minimum=1)


def polar(
    rotary: Rotary,
    pos: Positions,
    seq_len: int | None,
    casts: Casts = (),
    inv_freq: InvFreq | None = None,
) -> Any:
    """Llama 4's and DeepSeek-V2's complex form, as transformers computes it:
    ``polar(1, ids.float() * inv_freq) * attention_factor``, complex64; ``inv_freq``: as
    :func:`rope`'s."""
    x = pos.values
    freq, factor = _inv_freq(rotary, seq_len, x.device, casts) if inv_freq is None else inv_freq
    angles = x.float()[..., None] * freq
    return torch.polar(torch.ones_like(angles), angles) * factor
