"""RoPE scaling rules: the one registry of how a long-context rule rewrites the frequencies.

Each rule of transformers 5.x (``rope_type``) is a small float64 function of validated
parameters: it takes the rotary width ``d``, the base and the sequence length, and returns the
``d / 2`` angular frequencies and the attention factor that multiplies cos and sin. The keys a
rule takes, their defaults and their rules are data (:data:`RULES`), checked before any work,
with errors that name the key (transformers only logs bad values). A :class:`Rule` also
carries transformers' float32 arithmetic and all else posenc asks of the rule: a rule is one
entry of :data:`RULES`, and rope_type names are compared nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc.errors import PosencError, check_choice, show
from posenc.spec.extrapolation import (
    Reference,
    dype,
    dype_comfyui,
    dype_comfyui_reference,
    dype_reference,
    imax,
    linear_reference,
    lumina_time,
    lumina_time_reference,
    multi_inter,
    ntk,
    ntk_aware,
    ntk_aware_reference,
    ntk_reference,
    riflex,
    riflex_check,
    riflex_reference,
    vision_yarn,
    vision_yarn_reference,
)
from posenc.spec.frequencies import paper
from posenc.spec.scaling_keys import CHECKS, SHARED
from posenc.spec.transformers_rules import (
    dynamic,
    dynamic32,
    linear32,
    llama3,
    llama3_32,
    llama3_check,
    longrope,
    longrope32,
    longrope_long,
    paper32,
    prop32,
    proportional,
    yarn,
    yarn32,
    yarn_factor,
)

Params = dict[str, Any]


@dataclass(frozen=True)
class Rule:
    """One ``rope_type``: everything posenc knows of it.

    Attributes:
        required: the keys it requires; ``optional``: the others, with their defaults.
        evaluate: its exact float64 frequencies
            ``(params, d, base, seq_len) -> (omega [d/2], attention factor)``.
        float32: ``(xp, params, d, base, seq_len, device) -> (inv_freq [d/2] float32,
            attention factor)``: the original's (transformers') float32 arithmetic, replayed
            op for op in its order with the torch module :mod:`posenc.compat.transformers`
            passes in as ``xp`` (the originals' tensor library), so its bits are theirs.
        phase: ``(params, seq_len)`` -> the part of the length the frequencies depend on
            (:meth:`Scaling.phase`), for the rules that read it; None: they do not.
        requires_factor: ``factor`` may not be None; ``check``: further checks of the params.
        from_config: the config fields a transformers dict lacking them is completed from
            (``from_hf``), each with whether the config must then have it.
        remembers_length: transformers' module keeps the longest length seen, from
            ``config.max_position_embeddings`` on (which ``from_hf`` then requires).
        switches_tables: two tables, chosen by the length (short up to the original one).
        unscaled: no scaling (the model's own default function; a config has no dict for it).
        origin: ``"transformers"`` (a ``rope_type`` of transformers, which its configs may
            name) or ``"vision"`` (a rule of image and video models past their trained size,
            applied to one axis of a grid: ``rope_grid(..., scaling=...)``; no float32 replay
            of transformers').
        reference: ``(params, d, base) -> Reference``: the rule in its references' own terms
            (:class:`~posenc.spec.extrapolation.Reference`: a base, a divisor, pairs set, a
            blend), which a ``compat=`` replay applies within the original's arithmetic; None:
            no reference code applies it that way (``compat=`` refuses it).
        forms: the :attr:`Reference.forms <posenc.spec.extrapolation.Reference.forms>` its
            ``reference`` can give, whatever the parameters (within the trained size it may
            give none): a replay that does not take them all refuses the rule at any size.
        from_grid: the keys a rule of one grid axis takes, when it has none, from the grid
            and the size the preset's family was trained at (:func:`sized`): ``length``
            (the axis's extent), ``repeats_at`` (where the family's videos repeat, when no
            ``k`` is given either), ``original_max_position_embeddings`` (the trained extent),
            ``factor`` (the extent over the trained one) and ``global_factor`` (the largest
            ``factor`` of the grid's axes given the same rule: :func:`across`).
    """

    required: tuple[str, ...]
    optional: Mapping[str, Any]
    evaluate: Callable[[Params, int, float, int | None], tuple[np.ndarray, float]]
    float32: Callable[[Any, Params, int, float, int | None, Any], tuple[Any, float]] | None
    phase: Callable[[Params, int], int | None] | None = None
    requires_factor: bool = False
    check: Callable[[Params], object] | None = None
    from_config: Mapping[str, bool] = field(default_factory=dict)
    remembers_length: bool = False
    switches_tables: bool = False
    unscaled: bool = False
    origin: str = "transformers"
    reference: Callable[[Params, int, float], Reference] | None = None
    forms: frozenset[str] = frozenset()
    from_grid: tuple[str, ...] = ()

    @property
    def uses_seq_len(self) -> bool:
        """The frequencies read the sequence length."""
        return self.phase is not None


_YARN_OPTIONAL = {
    "factor": None,
    "attention_factor": None,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": None,
    "mscale_all_dim": None,
    "truncate": True,
    "max_position_embeddings": None,
}
_LONGEST = {"max_position_embeddings": False}  # completed from the config, when it has it


_VISION_BANDS = {"beta_fast": 1.25, "beta_slow": 0.75, "gamma_fast": 16.0, "gamma_slow": 2.0}
"""Vision YaRN's band thresholds (rotations in the trained extent), as DyPE's code has them."""

RULES: dict[str, Rule] = {
    "default": Rule(
        (),
        {},
        lambda p, d, base, n: (paper(d, base), 1.0),
        lambda xp, p, d, base, n, dev: (paper32(xp, d, base, dev), 1.0),
        unscaled=True,
    ),
    "linear": Rule(
        ("factor",),
        {},
        lambda p, d, base, n: (paper(d, base) / p["factor"], 1.0),
        linear32,
        requires_factor=True,
        reference=linear_reference,
        forms=frozenset({"linear"}),
    ),
    "dynamic": Rule(
        ("factor", "max_position_embeddings"),
        {},
        dynamic,
        dynamic32,
        lambda p, n: n if n > p["max_position_embeddings"] else None,
        requires_factor=True,
        from_config=_LONGEST,
        remembers_length=True,
    ),
    "yarn": Rule(
        ("original_max_position_embeddings",),
        _YARN_OPTIONAL,
        yarn,
        yarn32,
        check=yarn_factor,
        from_config=_LONGEST,  # factor, or the lengths it follows from
    ),
    "longrope": Rule(
        ("short_factor", "long_factor", "original_max_position_embeddings"),
        {"factor": None, "attention_factor": None, "max_position_embeddings": None},
        longrope,
        longrope32,
        check=yarn_factor,
        switches_tables=True,
        phase=lambda p, n: (
            p["original_max_position_embeddings"] + 1 if longrope_long(p, n) else None
        ),
        from_config={**_LONGEST, "original_max_position_embeddings": True},
    ),
    "llama3": Rule(
        ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
        {},
        llama3,
        llama3_32,
        requires_factor=True,
        check=llama3_check,
    ),
    "proportional": Rule(("partial_rotary_factor",), {"factor": 1.0}, proportional, prop32),
    "ntk": Rule(
        ("factor",),
        {},
        ntk,
        None,
        requires_factor=True,
        origin="vision",
        reference=ntk_reference,
        forms=frozenset({"base"}),
    ),
    "ntk-aware": Rule(
        ("factor",),
        {},
        ntk_aware,
        None,
        requires_factor=True,
        origin="vision",
        reference=ntk_aware_reference,
        forms=frozenset({"base"}),
    ),
    "riflex": Rule(
        ("length",),
        {"k": None, "repeats_at": None, "riflex_scale": 0.9, "always": False},
        riflex,
        None,
        check=riflex_check,
        origin="vision",
        reference=riflex_reference,
        forms=frozenset({"pairs"}),
        from_grid=("length", "repeats_at"),
    ),
    "vision-yarn": Rule(
        ("factor", "original_max_position_embeddings"),
        _VISION_BANDS,
        vision_yarn,
        None,
        requires_factor=True,
        origin="vision",
        reference=vision_yarn_reference,
        forms=frozenset({"by_parts"}),
        from_grid=("original_max_position_embeddings", "factor"),
    ),
    "dype": Rule(
        ("factor", "original_max_position_embeddings", "time"),
        _VISION_BANDS,
        dype,
        None,
        requires_factor=True,
        origin="vision",
        reference=dype_reference,
        forms=frozenset({"by_parts"}),
        from_grid=("original_max_position_embeddings", "factor"),
    ),
    "dype-comfyui": Rule(
        ("factor", "original_max_position_embeddings", "time"),
        {
            **_VISION_BANDS,
            "global_factor": None,
            "dype_scale": 2.0,
            "dype_exponent": 2.0,
            "dype_start_sigma": 1.0,
        },
        dype_comfyui,
        None,
        requires_factor=True,
        origin="vision",
        reference=dype_comfyui_reference,
        forms=frozenset({"comfyui"}),
        from_grid=("original_max_position_embeddings", "factor", "global_factor"),
    ),
    "lumina-time": Rule(
        ("factor", "time"),
        {"watershed": 0.3},
        lumina_time,
        None,
        requires_factor=True,
        origin="vision",
        reference=lumina_time_reference,
        forms=frozenset({"linear", "base"}),
    ),
    "imax": Rule(
        ("factor",), {"ntk_factor": 10.0}, imax, None, requires_factor=True, origin="vision"
    ),
    "multi-inter": Rule(
        ("factor", "freq_id"), {}, multi_inter, None, requires_factor=True, origin="vision"
    ),
}
"""Every ``rope_type`` of transformers 5.x, and the rules of image and video models past their
trained size (``origin="vision"``): all there is to know of each (see :class:`Rule`)."""

DEFAULT = "default"
"""The ``rope_type`` of a dict (or config) that names none."""


@dataclass(frozen=True)
class Scaling:
    """A validated scaling dict: the rule's name and its complete parameters (defaults
    filled in), plus the keys that overlap keywords (checked by the caller)."""

    rope_type: str
    params: tuple[tuple[str, Any], ...]
    shared: tuple[tuple[str, Any], ...]

    @property
    def rule(self) -> Rule:
        return RULES[self.rope_type]

    @property
    def is_default(self) -> bool:
        """No ``rope_type`` (or ``"default"``): the paper's frequencies, nothing to show."""
        return self.rope_type == DEFAULT

    @property
    def p(self) -> Params:
        return dict(self.params)

    def phase(self, seq_len: int | None) -> int | None:
        """The part of ``seq_len`` the frequencies depend on: None up to the rule's original
        length (and for rules that ignore it), one value for every longer sequence under
        ``longrope``, the length itself under ``dynamic``. Equal phases, equal tables."""
        phase = self.rule.phase
        return None if phase is None or seq_len is None else phase(self.p, seq_len)

    def frequencies(self, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        """``(omega [d/2] float64, attention factor)`` for rotary width ``d``."""
        return self.rule.evaluate(self.p, d, base, seq_len)


def parse_scaling(scaling: Any, name: str = "scaling") -> Scaling:
    """``scaling`` (an HF rope-parameters dict, or None) validated: unknown ``rope_type``,
    missing or invalid keys and keys the rule does not take are errors naming the key (as
    ``name[key]``)."""
    if scaling is None:
        return Scaling(DEFAULT, (), ())
    if not isinstance(scaling, Mapping):
        raise PosencError(
            f"`{name}` must be a dict of rope parameters such as {{'rope_type': 'linear', "
            f"'factor': 2.0}}, got {show(scaling)}"
        )
    for key in scaling:
        if not isinstance(key, str):
            raise PosencError(f"`{name}` keys must be strings, got {show(key)}")
    kind = scaling.get("rope_type", scaling.get("type", DEFAULT))
    if "rope_type" in scaling and "type" in scaling and scaling["type"] != kind:
        raise PosencError(
            f"`{name}['type']` ({show(scaling['type'])}) disagrees with `{name}['rope_type']` "
            f"({show(kind)})"
        )
    kind = check_choice(f"{name}['rope_type']", kind, RULES)
    rule = RULES[kind]
    allowed = set(rule.required) | set(rule.optional) | set(SHARED)
    for key in scaling:
        if key not in allowed:
            takes = ", ".join(sorted(set(rule.required) | set(rule.optional))) or "no keys"
            raise PosencError(
                f"`{name}['{key}']` is not a key of rope_type {kind!r} (it takes {takes})"
            )
    params: Params = {}
    for key in rule.required:
        if key not in scaling or (scaling[key] is None and key != "factor"):
            raise PosencError(f"`{name}['{key}']` is required by rope_type {kind!r}")
        params[key] = CHECKS[key](f"{name}['{key}']", scaling[key])
    for key, default in rule.optional.items():
        value = scaling.get(key, default)
        params[key] = default if value is None else CHECKS[key](f"{name}['{key}']", value)
    if rule.requires_factor and params["factor"] is None:
        raise PosencError(f"`{name}['factor']` is required by rope_type {kind!r}")
    if rule.check is not None:
        rule.check(params)
    shared = tuple((k, scaling[k]) for k in SHARED if k in scaling and k not in params)
    shared = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in shared)  # frozen
    return Scaling(kind, tuple(sorted(params.items())), shared)


def named(rule: Any) -> tuple[str, Rule] | None:
    """The rope_type a rule dict names and its registry entry; None for anything else (None,
    a name the registry lacks: refused where the rule is parsed)."""
    kind = rule.get("rope_type", rule.get("type")) if isinstance(rule, Mapping) else None
    return (kind, RULES[kind]) if isinstance(kind, str) and kind in RULES else None


def reads_time(rule: Any) -> bool:
    """A rule dict whose rope_type follows the diffusion time (its ``time`` key, given or
    not)."""
    found = named(rule)
    return found is not None and "time" in found[1].required


def timed(scaling: Any, time: Any) -> Any:
    """``scaling`` (a rule, or one per axis) with the diffusion ``time`` (1: pure noise) given
    to each rule that reads it and has none; ``time`` None: ``scaling`` as it is. A time that
    no rule reads is an error (it would change nothing)."""
    if time is None:
        return scaling
    rules = scaling if isinstance(scaling, list | tuple) else (scaling,)
    if not any(reads_time(r) for r in rules):
        raise PosencError(
            f"`time` is read by the rules that follow the diffusion "
            f"({', '.join(n for n, r in RULES.items() if 'time' in r.required)}); "
            f"`scaling` has none, got time={show(time)}"
        )
    given = [{"time": time, **r} if reads_time(r) else r for r in rules]
    return type(scaling)(given) if isinstance(scaling, list | tuple) else given[0]


def sized(
    rule: Any,
    extent: int,
    trained: int | None,
    repeats_at: int | None,
    *,
    where: str = "scaling",
    family: str | None = None,
) -> Any:
    """One grid axis's ``rule`` with the keys its :class:`Rule` takes from the grid
    (``from_grid``) where it has none: ``length`` the axis's ``extent``; ``repeats_at`` the
    family's (only when neither ``k`` nor ``repeats_at`` is given);
    ``original_max_position_embeddings`` the ``trained`` extent; ``factor`` ``extent``
    over the trained extent. A key still missing is an error naming ``where`` (the rule's
    place in the call), the key and ``family`` (the preset, which records no such size).
    Anything but a rule dict is returned as it is."""
    found = named(rule)
    if found is None:
        return rule
    kind, entry = found
    out = dict(rule)
    wanted = entry.from_grid
    of = f"preset {family!r}" if family else "a call without a preset"
    extent = max(extent, 1)  # an empty axis: the table is empty, any valid key does
    if "length" in wanted:
        out.setdefault("length", extent)
    if "repeats_at" in wanted and out.get("k") is None and out.get("repeats_at") is None:
        if repeats_at is None:
            raise PosencError(
                f"`{where}`: rope_type {kind!r} takes `k` (the intrinsic pair, 1-based) or "
                f"`repeats_at` (the latent frame where the video repeats), and {of} records "
                "neither for this axis: give one"
            )
        out["repeats_at"] = repeats_at
    if "original_max_position_embeddings" in wanted:
        if trained is None and "original_max_position_embeddings" not in out:
            raise PosencError(
                f"`{where}`: rope_type {kind!r} needs `original_max_position_embeddings` (the "
                f"axis's trained extent in tokens), and {of} records none for this axis: give it"
            )
        out.setdefault("original_max_position_embeddings", trained)
    length = out.get("original_max_position_embeddings")
    if "factor" in wanted and isinstance(length, int | float) and length > 0:
        out.setdefault("factor", extent / length)
    return out


def across(rules: list[Any]) -> list[Any]:
    """One rule per grid axis (each filled in by :func:`sized`), with ``global_factor`` where
    a rule takes it from the grid (``from_grid``) and has none: the largest ``factor`` of the
    axes given the same rope_type (ComfyUI-DyPE's ``s_glob``, the image's larger side)."""
    kinds = [named(rule) for rule in rules]
    largest: dict[str, float] = {}
    for rule, found in zip(rules, kinds, strict=True):
        if found is not None and "global_factor" in found[1].from_grid and "factor" in rule:
            largest[found[0]] = max(largest.get(found[0], 0.0), float(rule["factor"]))
    return [
        {**rule, "global_factor": largest[found[0]]}
        if found is not None and found[0] in largest and rule.get("global_factor") is None
        else rule
        for rule, found in zip(rules, kinds, strict=True)
    ]
