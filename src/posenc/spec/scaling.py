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

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc.errors import PosencError, check_bool, check_choice, check_int, check_real, show
from posenc.spec.frequencies import frequencies

Params = dict[str, Any]


def _positive(name: str, v: Any) -> float:
    return check_real(name, v, positive=True)


def _length(name: str, v: Any) -> int:
    if isinstance(v, float) and v.is_integer():
        v = int(v)  # JSON configs carry 4096.0 now and then
    return check_int(name, v, minimum=1)


def _factors(name: str, v: Any) -> tuple[float, ...]:
    if not isinstance(v, list | tuple) or not v:
        raise PosencError(f"`{name}` must be a list of positive numbers, got {show(v)}")
    return tuple(_positive(f"{name}[{i}]", x) for i, x in enumerate(v))


def _fraction(name: str, v: Any) -> float:
    f = check_real(name, v)
    if not 0 < f <= 1:
        raise PosencError(f"`{name}` must be in (0, 1], got {show(v)}")
    return f


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
    """

    required: tuple[str, ...]
    optional: Mapping[str, Any]
    evaluate: Callable[[Params, int, float, int | None], tuple[np.ndarray, float]]
    float32: Callable[[Any, Params, int, float, int | None, Any], tuple[Any, float]]
    phase: Callable[[Params, int], int | None] | None = None
    requires_factor: bool = False
    check: Callable[[Params], object] | None = None
    from_config: Mapping[str, bool] = field(default_factory=dict)
    remembers_length: bool = False
    switches_tables: bool = False
    unscaled: bool = False

    @property
    def uses_seq_len(self) -> bool:
        """The frequencies read the sequence length."""
        return self.phase is not None


def paper(d: int, base: float) -> np.ndarray:
    """``w_i = base ** (-2i / d)`` for ``i < d / 2``, in float64."""
    return frequencies("geometric", d // 2, den=d / 2, base=base)


def paper32(xp: Any, d: int, base: Any, device: Any) -> Any:
    """transformers' float32 ``1 / base ** (arange(0, d, 2) / d)`` (``base``: maybe a tensor)."""
    exponent = xp.arange(0, d, 2, dtype=xp.int64, device=device).float() / d
    return 1.0 / (base**exponent)


def _linear32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    out = paper32(xp, d, base, device)
    out /= p["factor"]
    return out, 1.0


def _dynamic(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """The paper's frequencies for the NTK-aware base, which grows past the original length."""
    if d < 4:
        raise PosencError(
            f"`dim` must be at least 4 for dynamic scaling (its exponent is d / (d - 2)), got {d}"
        )
    length, f = p["max_position_embeddings"], p["factor"]
    s = max(seq_len or length, length)
    return paper(d, base * ((f * s / length) - (f - 1)) ** (d / (d - 2))), 1.0


def _dynamic32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    f, length = p["factor"], p["max_position_embeddings"]
    if seq_len is not None and seq_len > length:  # the module's update: tensor arithmetic
        s = xp.maximum(xp.tensor(seq_len, device=device), xp.tensor(length, device=device))
        return paper32(xp, d, base * ((f * s / length) - (f - 1)) ** (d / (d - 2)), device), 1.0
    return paper32(xp, d, base * ((f * length / length) - (f - 1)) ** (d / (d - 2)), device), 1.0


def mscale(scale: float, m: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 m ln(scale) + 1`` (1 for ``scale <= 1``)."""
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def yarn_factor(p: Params) -> float:
    """The stretch ``factor``, or ``max_position_embeddings / original`` when absent."""
    if p["factor"] is not None:
        return float(p["factor"])
    if p["max_position_embeddings"] is None:
        raise PosencError(
            "`scaling['factor']` is required (or `max_position_embeddings`, from which "
            "factor = max_position_embeddings / original_max_position_embeddings)"
        )
    return float(p["max_position_embeddings"] / p["original_max_position_embeddings"])


def yarn_attention(p: Params) -> float:
    """YaRN's attention factor: given, or ``mscale(f, mscale) / mscale(f, mscale_all_dim)``
    when both are set (DeepSeek), else ``mscale(f)``."""
    if p["attention_factor"] is not None:
        return float(p["attention_factor"])
    f = yarn_factor(p)
    if p["mscale"] and p["mscale_all_dim"]:
        return mscale(f, p["mscale"]) / mscale(f, p["mscale_all_dim"])
    return mscale(f)


def yarn_range(p: Params, d: int, base: float) -> tuple[float, float]:
    """The pair indices ``(lo, hi)`` between which YaRN blends: where the original window
    holds ``beta_fast`` and ``beta_slow`` turns."""
    length = p["original_max_position_embeddings"]

    def pair(turns: float) -> float:
        return d * math.log(length / (turns * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = pair(p["beta_fast"] or 32.0), pair(p["beta_slow"] or 1.0)
    if p["truncate"]:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    return lo, (hi + 0.001 if lo == hi else hi)


def _yarn(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    w = paper(d, base)
    lo, hi = yarn_range(p, d, base)
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)
    return (w / yarn_factor(p)) * ramp + w * (1.0 - ramp), yarn_attention(p)


def _yarn32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    f = yarn_factor(p)
    pos_freqs = base ** (xp.arange(0, d, 2, device=device).float() / d)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (f * pos_freqs)
    lo, hi = yarn_range(p, d, base)
    ramp = xp.clamp((xp.arange(d // 2, dtype=xp.float32) - lo) / (hi - lo), 0, 1)
    keep = (1 - ramp).to(device=device, dtype=xp.float32)
    return interpolation * (1 - keep) + extrapolation * keep, yarn_attention(p)


def longrope_long(p: Params, seq_len: int | None) -> bool:
    """Long factors apply past the original length (strictly: ``seq_len = L`` is short)."""
    return seq_len is not None and seq_len > p["original_max_position_embeddings"]


def _longrope(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    for key in ("short_factor", "long_factor"):
        if len(p[key]) != d // 2:
            raise PosencError(
                f"`scaling['{key}']` must hold d / 2 = {d // 2} factors for a rotary width of "
                f"{d}, got {len(p[key])}"
            )
    ext = np.asarray(p["long_factor" if longrope_long(p, seq_len) else "short_factor"])
    return paper(d, base) / ext, longrope_attention(p)


def _longrope32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    key = "long_factor" if longrope_long(p, seq_len) else "short_factor"
    ext = xp.tensor(p[key], dtype=xp.float32, device=device)
    shape = xp.arange(0, d, 2, dtype=xp.int64, device=device).float() / d
    return 1.0 / (ext * base**shape), longrope_attention(p)


def longrope_attention(p: Params) -> float:
    if p["attention_factor"] is not None:
        return float(p["attention_factor"])
    f = yarn_factor(p)
    length = p["original_max_position_embeddings"]
    return 1.0 if f <= 1.0 else math.sqrt(1 + math.log(f) / math.log(length))


def _llama3(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    w = paper(d, base)
    f, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    length = p["original_max_position_embeddings"]
    wavelength = 2 * math.pi / w
    smooth = (length / wavelength - low) / (high - low)
    out = np.where(wavelength > length / low, w / f, w)
    medium = (wavelength >= length / high) & (wavelength <= length / low)
    return np.where(medium, (1 - smooth) * w / f + smooth * w, out), 1.0


def _llama3_32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    out = paper32(xp, d, base, device)
    f, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    length = p["original_max_position_embeddings"]
    low_wavelength, high_wavelength = length / low, length / high
    wavelength = 2 * math.pi / out
    scaled = xp.where(wavelength > low_wavelength, out / f, out)
    smooth = (length / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * scaled / f + smooth * scaled
    medium = ~(wavelength < high_wavelength) * ~(wavelength > low_wavelength)
    return xp.where(medium, smoothed, scaled), 1.0


def _llama3_check(p: Params) -> None:
    if not p["low_freq_factor"] < p["high_freq_factor"]:
        raise PosencError(
            "`scaling['low_freq_factor']` must be below `scaling['high_freq_factor']`, got "
            f"{p['low_freq_factor']:g} and {p['high_freq_factor']:g}"
        )


def _proportional(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    rotated = int(p["partial_rotary_factor"] * d // 2)
    w = np.zeros(d // 2)
    w[:rotated] = frequencies("geometric", rotated, den=d / 2, base=base)
    return w / p["factor"], 1.0


def _prop32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    rotated = int(p["partial_rotary_factor"] * d // 2)
    exponent = xp.arange(0, 2 * rotated, 2, dtype=xp.int64, device=device).float() / d
    out = 1.0 / (base**exponent)
    if d // 2 > rotated:
        zeros = xp.zeros(d // 2 - rotated, dtype=xp.float32, device=device)
        out = xp.cat((out, zeros), dim=0)
    out /= p["factor"]
    return out, 1.0


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
        _linear32,
        requires_factor=True,
    ),
    "dynamic": Rule(
        ("factor", "max_position_embeddings"),
        {},
        _dynamic,
        _dynamic32,
        lambda p, n: n if n > p["max_position_embeddings"] else None,
        requires_factor=True,
        from_config=_LONGEST,
        remembers_length=True,
    ),
    "yarn": Rule(
        ("original_max_position_embeddings",),
        _YARN_OPTIONAL,
        _yarn,
        _yarn32,
        check=yarn_factor,
        from_config=_LONGEST,  # factor, or the lengths it follows from
    ),
    "longrope": Rule(
        ("short_factor", "long_factor", "original_max_position_embeddings"),
        {"factor": None, "attention_factor": None, "max_position_embeddings": None},
        _longrope,
        _longrope32,
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
        _llama3,
        _llama3_32,
        requires_factor=True,
        check=_llama3_check,
    ),
    "proportional": Rule(("partial_rotary_factor",), {"factor": 1.0}, _proportional, _prop32),
}
"""Every ``rope_type`` of transformers 5.x: all there is to know of it (see :class:`Rule`)."""

DEFAULT = "default"
"""The ``rope_type`` of a dict (or config) that names none."""

_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    **dict.fromkeys(
        ("factor", "attention_factor"), lambda n, v: None if v is None else _positive(n, v)
    ),
    **dict.fromkeys(
        ("mscale", "mscale_all_dim"), lambda n, v: None if v is None else check_real(n, v)
    ),
    "max_position_embeddings": lambda n, v: None if v is None else _length(n, v),
    **dict.fromkeys(
        ("beta_fast", "beta_slow"),  # 0: transformers' `or` takes the default
        lambda n, v: None if v is None or v == 0 else _positive(n, v),
    ),
    "original_max_position_embeddings": _length,
    "truncate": check_bool,
    "short_factor": _factors,
    "long_factor": _factors,
    "low_freq_factor": _positive,
    "high_freq_factor": _positive,
    "partial_rotary_factor": _fraction,
}

SHARED = (
    "rope_type",
    "type",
    "rope_theta",
    "partial_rotary_factor",
    "mrope_section",
    "mrope_interleaved",
    "max_position_embeddings",
)
"""Keys any rule's dict may carry: the type, and values that must agree with keywords."""


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
        params[key] = _CHECKS[key](f"{name}['{key}']", scaling[key])
    for key, default in rule.optional.items():
        value = scaling.get(key, default)
        params[key] = default if value is None else _CHECKS[key](f"{name}['{key}']", value)
    if rule.requires_factor and params["factor"] is None:
        raise PosencError(f"`{name}['factor']` is required by rope_type {kind!r}")
    if rule.check is not None:
        rule.check(params)
    shared = tuple((k, scaling[k]) for k in SHARED if k in scaling and k not in params)
    shared = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in shared)  # frozen
    return Scaling(kind, tuple(sorted(params.items())), shared)


def softmax_scale(config: Any, head_dim: int | None = None) -> float:
    """The attention softmax scale of DeepSeek-V2/V3's YaRN: ``head_dim ** -0.5`` times
    ``mscale(factor, mscale_all_dim) ** 2``, which cos and sin cannot carry.

    Args:
        config: a transformers config (``rope_parameters`` or ``rope_scaling``, and
            ``qk_head_dim`` or ``qk_nope_head_dim + qk_rope_head_dim``), or a rope-parameters
            dict together with ``head_dim``.
        head_dim: the query/key width, when ``config`` is a dict.

    Examples:
        >>> posenc.softmax_scale({"rope_type": "yarn", "factor": 40,
        ...     "original_max_position_embeddings": 4096, "mscale": 1.0,
        ...     "mscale_all_dim": 1.0}, head_dim=192)  # 192**-0.5 * (0.1 ln 40 + 1)**2
        0.13523377886...
    """
    params: Any
    if isinstance(config, Mapping):
        params = config
        if head_dim is None:
            raise PosencError("`head_dim` is required when `config` is a dict")
    else:
        params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
        if head_dim is None:
            head_dim = getattr(config, "qk_head_dim", None)
            if head_dim is None:
                nope = getattr(config, "qk_nope_head_dim", None)
                rope_dim = getattr(config, "qk_rope_head_dim", None)
                if nope is None or rope_dim is None:
                    raise PosencError(
                        "`config` lacks `qk_head_dim` (or `qk_nope_head_dim` and "
                        "`qk_rope_head_dim`); pass `head_dim`"
                    )
                head_dim = nope + rope_dim
    d = check_int("head_dim", head_dim, minimum=1)
    scale: float = d**-0.5
    if not params:
        return scale
    p = parse_scaling(params).p
    if not p.get("mscale_all_dim"):  # a key of yarn's alone
        return scale
    m: float = mscale(yarn_factor(p), p["mscale_all_dim"])
    return scale * m * m  # transformers' order of operations
