"""What ``posenc audit`` recognises in a model's config: each positional encoding a
transformers or timm model computes, as a :class:`Finding` (where it is, its posenc
equivalent, the positions to measure, the fix, and how to compute its figures); diffusers'
in :mod:`posenc.app.audit_diffusers` and :mod:`posenc.app.audit_vision`.

Configs are read as plain JSON dicts: neither transformers nor diffusers is imported.
Transformers rotary configs go through :func:`posenc.compat.transformers.read_config` (a
``types.SimpleNamespace`` of the dict, ``text_config`` included), which needs torch; a
config with one rope-parameters set per layer type (Gemma 3) is audited one set at a time.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from posenc.app import audit_figures as fig
from posenc.errors import PosencError
from posenc.spec.families import FAMILIES
from posenc.spec.families.base import TimmAudit
from posenc.spec.presets.sinusoidal import MAE, MARIAN, WHISPER
from posenc.spec.presets.transformers import FAMILIES as FROM_HF
from posenc.spec.scaling import RULES

PATCH = "posenc.torch.patch(model)"
ROTARY_KEYS = ("rope_parameters", "rope_theta", "rope_scaling", "rotary_emb_base")


@dataclass
class Finding:
    """One positional encoding of one component, how to measure it, and once measured its
    figures: a row of ``posenc audit``'s table, a record of its ``--json``.

    ``measure`` returns ``(float32 error, bf16 .to() error, a note)``; each figure is None
    where it does not apply (or cannot be computed without torch: ``needs_torch``)."""

    component: str
    where: str
    encoding: str
    equivalent: str
    max_position: float
    positions: str
    original: str
    fix: str
    alternative: str | None = None
    note: str | None = None
    needs_torch: bool = True
    measure: Callable[[], tuple[float | None, float | None, str | None]] | None = field(
        default=None, repr=False
    )
    float32_error: float | None = None  # measured (posenc.app.audit)
    bf16_error: float | None = None


def _call(name: str, *args: Any, **kw: Any) -> str:
    parts = [*(str(a) for a in args), *(f"{k}={v!r}" for k, v in kw.items())]
    return f"{name}({', '.join(parts)})"


# --- transformers ------------------------------------------------------------------------------


def transformers_findings(cfg: dict[str, Any], component: str) -> list[Finding]:
    """The encodings of a transformers config (``model_type``); [] when none is recognised.
    A rotary config that ``read_config`` refuses even as a generic model raises its error."""
    mt = cfg.get("model_type")
    if mt == "whisper":
        return [_whisper(cfg, component)]
    if mt in ("marian", "pegasus"):
        return [_marian(cfg, component)]
    if mt == "vit_mae":
        return [_mae(cfg, component)]
    text = cfg.get("text_config")
    source = cfg
    if isinstance(text, dict) and _has_rotary(text) and not _has_rotary(cfg, own=True):
        source, component = text, f"{component} (text_config)"
    if not _has_rotary(source):
        return []
    return _rotary(_modern(source), component)


def _has_rotary(cfg: dict[str, Any], own: bool = False) -> bool:
    """The config (or its ``text_config``) is of a rotary model: it has rope fields, or its
    ``model_type`` is a rotary family ``from_hf`` reads (a Llama-2 config has neither
    ``rope_theta`` nor ``rope_scaling``: transformers reads default RoPE, base 10000)."""
    if any(cfg.get(k) is not None for k in ROTARY_KEYS) or cfg.get("model_type") in FROM_HF:
        return True
    text = cfg.get("text_config")
    return not own and isinstance(text, dict) and _has_rotary(text)


def _modern(cfg: dict[str, Any]) -> dict[str, Any]:
    """A config dict with ``rope_parameters`` (transformers 5), from the 4.x fields
    (``rope_theta``, ``rope_scaling``, ``rotary_pct``) where it has none."""
    out = dict(cfg)
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = _modern(out["text_config"])
    if out.get("model_type") in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl") and "text_config" not in out:
        out["model_type"] += "_text"  # a 4.x multimodal config: the text model's fields
    if out.get("rope_parameters") is not None:
        return out
    rp = dict(out.get("rope_scaling") or {})
    theta = out.get("rope_theta", out.get("rotary_emb_base"))
    if theta is None:  # its config class's default (Meta's Llama-2 config has none)
        family = FROM_HF.get(str(out.get("model_type")))
        theta = None if family is None else family.theta
    if theta is not None:
        rp.setdefault("rope_theta", theta)
    if "type" in rp and "rope_type" not in rp:
        rp["rope_type"] = rp.pop("type")
    if rp.get("rope_type") == "mrope":
        rp["rope_type"] = "default"
    partial = out.get("partial_rotary_factor", out.get("rotary_pct"))
    if partial is not None:
        rp.setdefault("partial_rotary_factor", partial)
    out["rope_parameters"] = rp
    return out


def _namespace(cfg: dict[str, Any]) -> SimpleNamespace:
    ns = SimpleNamespace(**cfg)
    if isinstance(cfg.get("text_config"), dict):
        ns.text_config = _namespace(cfg["text_config"])
    return ns


def _rotary(cfg: dict[str, Any], component: str) -> list[Finding]:
    rp = cfg["rope_parameters"]
    sets: list[tuple[str | None, str]] = [(None, "rotary_emb")]
    if isinstance(rp, dict) and rp and all(isinstance(v, dict | None) for v in rp.values()):
        sets = [(k, f"rotary_emb ({k} layers)") for k, v in rp.items() if isinstance(v, dict)]
    if fig.torch_missing():
        return [_rotary_unread(cfg, component, where, kind) for kind, where in sets]
    return [_rotary_read(cfg, component, where, kind) for kind, where in sets]


def _rotary_unread(cfg: dict[str, Any], component: str, where: str, layer: str | None) -> Finding:
    """Without torch (``read_config`` needs it): what the dict says, unmeasured."""
    rp = cfg.get("rope_parameters") or {}
    rp = rp[layer] if layer is not None else rp
    n = int(cfg.get("max_position_embeddings") or 0)
    return Finding(
        component,
        where,
        f"rotary {rp.get('rope_type', 'default')}, base {rp.get('rope_theta')}",
        "RotaryEmbedding.from_hf(config)",
        n,
        f"0…{n - 1}",
        "transformers float32",
        PATCH,
    )


def _read(cfg: dict[str, Any], layer: str | None) -> tuple[Any, str, list[str]]:
    """``read_config`` of the config, for one layer type's set: by the per-layer reading
    where ``read_config`` has one, else that set alone as a config of its own, else (a model
    type from_hf does not cover) as a generic rotary model. Returns the result, how it was
    read (``"family"``, ``"alone"``, ``"generic"``) and the warnings ``read_config`` gave."""
    from posenc.compat import transformers as hf

    attempts: list[tuple[SimpleNamespace, str | None, str]] = []
    if layer is not None and "layer_type" in inspect.signature(hf.read_config).parameters:
        attempts.append((_namespace(cfg), layer, "family"))
    alone = {**cfg, "rope_parameters": cfg["rope_parameters"][layer]} if layer else cfg
    attempts.append((_namespace(alone), None, "alone" if layer else "family"))
    if cfg.get("model_type") not in hf.FAMILIES and not isinstance(cfg.get("text_config"), dict):
        partial = alone["rope_parameters"].get("partial_rotary_factor", 1.0)
        generic = {**alone, "model_type": "gpt_neox" if partial != 1.0 else "llama"}
        attempts.append((_namespace(generic), None, "generic"))
    first: PosencError | None = None
    for ns, layer_type, how in attempts:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = hf.read_config(ns, layer_type) if layer_type else hf.read_config(ns)
            except PosencError as err:
                first = first or err
                continue
        return out, how, [" ".join(str(w.message).split()) for w in caught]
    assert first is not None
    raise first


def _rotary_read(cfg: dict[str, Any], component: str, where: str, layer: str | None) -> Finding:
    hf, how, said = _read(cfg, layer)
    kw = dict(hf.keywords)
    n = hf.max_position_embeddings or 0
    note = "; ".join(said) or None
    if not n:
        n = 4096
        note = _join(note, "the config has no max_position_embeddings: measured up to 4096")
    kind = kw.get("scaling", {}).get("rope_type", "default")
    label = f"rotary {kind}, d={kw['dim']}, base {kw['base']:g}"
    if kw.get("sections"):
        label += f", sections {tuple(kw['sections'])}"
    if kw["layout"] != "halves":
        label += f", {kw['layout']}"
    alt = None
    if how == "generic":
        why = f"model_type {cfg.get('model_type')!r} is not a family from_hf lists: measured"
        note = _join(
            note,
            f"{why} as transformers' standard rotary machinery ({kw['layout']}), which "
            "posenc.torch.patch checks against the module itself before it replaces it",
        )
    elif how == "alone":
        note = _join(note, "one rope_parameters set per layer type: each audited on its own")
    else:
        module = "model.model.language_model" if hf.family.sections else "model.model"
        alt = f"{module}.rotary_emb = RotaryEmbedding.from_hf(model.config)"
    if kind in RULES and RULES[kind].uses_seq_len:
        note = _join(
            note,
            f"{kind}: the module recomputes inv_freq in float32 when the length "
            "changes; the bf16 figure holds until then",
        )
    _, words = fig.sample(n)

    def measure() -> tuple[float | None, float | None, str | None]:
        a, b = fig.rotary_figures(kw, n)
        return a, b, None

    return Finding(
        component,
        where,
        label,
        _rope_call(kw, cfg.get("model_type")),
        n - 1,
        words,
        "transformers float32 (compat='transformers')",
        PATCH,
        alt,
        note,
        measure=measure,
    )


def _rope_call(kw: dict[str, Any], model_type: Any = None) -> str:
    """``posenc.rope(ids, d, ...)``: by the name of a rotary preset of the model's own family
    (``llama3`` for a Llama, not ``qwen2`` for a Gemma whose base is Qwen2's) where one has
    these keywords, else by the keywords."""
    from posenc.api.presets import presets
    from posenc.spec.presets import get_rotary_preset

    rest = {k: v for k, v in kw.items() if k != "dim"}
    default = {"base": 10000.0, "layout": "halves", "interleave_sections": False}
    given = {**default, **rest}
    if given.get("sections") is not None:
        given["sections"] = tuple(given["sections"])
    family = re.sub(r"[^a-z0-9]", "", str(model_type).lower())
    for name in presets("rotary") if given != default else ():
        own = re.sub(r"[^a-z0-9]", "", name.rstrip("0123456789").lower()) in family
        if own and {**default, **get_rotary_preset(name).rotary} == given:
            return _call("posenc.rope", "ids", kw["dim"], preset=name)
    shown = {k: v for k, v in rest.items() if default.get(k) != v}
    return _call("posenc.rope", "ids", kw["dim"], **shown)


def _join(a: str | None, b: str) -> str:
    return b if a is None else f"{a}; {b}"


def _whisper(cfg: dict[str, Any], component: str) -> Finding:
    n, d = int(cfg.get("max_source_positions", 1500)), int(cfg.get("d_model", 384))
    call = _call("posenc.table", n, d, preset=WHISPER.name)

    def measure() -> tuple[float | None, float | None, str | None]:
        a, b = fig.table_figures(WHISPER.name, n, d, {}, float32_original=True)
        return a, b, None

    return Finding(
        component,
        "encoder.embed_positions",
        f"sinusoid whisper, {n} x {d}",
        call,
        n - 1,
        f"all {n} rows (0…{n - 1})",
        "OpenAI whisper sinusoids, float32 (compat='original')",
        PATCH,
        f"model.model.encoder.embed_positions.weight.copy_({call[:-1]}, dtype=torch.float32))",
        "decoder positions are learned: not audited",
        measure=measure,
    )


def _marian(cfg: dict[str, Any], component: str) -> Finding:
    n, d = int(cfg.get("max_position_embeddings", 1024)), int(cfg.get("d_model", 1024))

    def measure() -> tuple[float | None, float | None, str | None]:
        a, b = fig.table_figures(MARIAN.name, n, d, {}, float32_original=False)
        return a, b, None

    return Finding(
        component,
        "encoder/decoder embed_positions",
        f"sinusoid marian, {n} x {d}",
        _call("posenc.table", n, d, preset=MARIAN.name),
        n - 1,
        f"all {n} rows (0…{n - 1})",
        "transformers MarianSinusoidalPositionalEmbedding: float64, rounded once (exact)",
        PATCH,
        needs_torch=False,
        measure=measure,
    )


def _mae(cfg: dict[str, Any], component: str) -> Finding:
    image, patch = cfg.get("image_size", 224), cfg.get("patch_size", 16)
    image = image[0] if isinstance(image, list | tuple) else image
    patch = patch[0] if isinstance(patch, list | tuple) else patch
    side, d = int(image) // int(patch), int(cfg.get("hidden_size", 768))

    def measure() -> tuple[float | None, float | None, str | None]:
        a, b = fig.grid_figures(MAE.name, side, d, {"cls_token": True})
        return a, b, None

    return Finding(
        component,
        "embeddings.position_embeddings",
        f"2D sin-cos mae, {side}x{side} + cls, d={d}",
        _call("posenc.grid", (side, side), d, preset=MAE.name, cls_token=True),
        side - 1,
        f"all {side}x{side} cells and the cls row",
        "transformers build_2d_sinusoidal_position_embedding: float64, rounded once (exact)",
        PATCH,
        needs_torch=False,
        measure=measure,
    )


# --- timm --------------------------------------------------------------------------------------

TIMM_ROTARY = (
    "rope",
    *(a.fragment for f in FAMILIES.values() for a in f.audits if isinstance(a, TimmAudit)),
)
"""Names of timm rotary architectures (any ``rope``, and the records' fragments): those of
learned frequencies are errors saying so; the others are :mod:`posenc.app.audit_vision`'s."""


def is_timm(cfg: dict[str, Any]) -> bool:
    """A timm ``config.json`` (``architecture`` and ``pretrained_cfg`` or ``num_features``)."""
    return "architecture" in cfg and ("pretrained_cfg" in cfg or "num_features" in cfg)


def timm_findings(cfg: dict[str, Any], component: str) -> list[Finding]:
    """A timm vision transformer's absolute table: learned in every timm architecture, so
    named and not measured; a rotary architecture is an error saying so."""
    arch = str(cfg["architecture"])
    if any(word in arch for word in TIMM_ROTARY):
        raise PosencError(
            f"timm architecture {arch!r} rotates by learned frequencies (timm's "
            "RotaryEmbeddingMixed): no formula to be exact to"
        )
    if not arch.startswith(("vit_", "deit")):
        return []
    size = (cfg.get("pretrained_cfg") or {}).get("input_size") or [3, 224, 224]
    match = re.search(r"patch(\d+)", arch)
    side = size[-1] // int(match.group(1)) if match else 0
    grid = f"not measured (learned; {side}x{side} cells)" if side else "not measured (learned)"
    return [
        Finding(
            component,
            "pos_embed",
            "learned position table (timm)",
            "none: a learned table is no formula's",
            max(side - 1, 0),
            grid,
            "trained parameters",
            f"none needed; a frozen sin-cos table your code puts there: {PATCH}",
            note="learned: nothing to measure",
            needs_torch=False,
        )
    ]
