"""RoPE scaling rules: the one registry of how a long-context rule rewrites the frequencies.

Each rule of transformers 5.x (``rope_type``) is a small float64 function of validated
parameters: it takes the rotary width ``d``, the base and the sequence length, and returns the
``d / 2`` angular frequencies and the attention factor that multiplies cos and sin. The keys a
rule takes, their defaults and their rules are data (:data:`RULES`), checked before any work,
with errors that name the key (transformers only logs bad values).

The float32 arithmetic transformers itself does for the same rules lives apart, in
:mod:`posenc.compat.transformers`; this module is the exact definition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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


def _beta(name: str, v: Any) -> float | None:
    return None if v is None or v == 0 else _positive(name, v)  # transformers: `or` default


def _optional_positive(name: str, v: Any) -> float | None:
    return None if v is None else _positive(name, v)


def _optional_real(name: str, v: Any) -> float | None:
    return None if v is None else check_real(name, v)


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
    """One ``rope_type``: the keys it requires, the optional ones with their defaults, and
    its float64 frequencies ``(params, d, base, seq_len) -> (omega [d/2], attention factor)``."""

    required: tuple[str, ...]
    optional: Mapping[str, Any]
    evaluate: Callable[[Params, int, float, int | None], tuple[np.ndarray, float]]
    uses_seq_len: bool = False


def paper(d: int, base: float) -> np.ndarray:
    """``w_i = base ** (-2i / d)`` for ``i < d / 2``, in float64."""
    return frequencies("geometric", d // 2, den=d / 2, base=base)


def _default(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    return paper(d, base), 1.0


def _linear(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    return paper(d, base) / p["factor"], 1.0


def dynamic_base(p: Params, d: int, base: float, seq_len: int | None) -> float:
    """NTK-aware base for a sequence of ``seq_len``: unchanged up to the original length."""
    length = p["max_position_embeddings"]
    s = max(seq_len or length, length)
    f = p["factor"]
    out: float = base * ((f * s / length) - (f - 1)) ** (d / (d - 2))
    return out


def _dynamic(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    return paper(d, dynamic_base(p, d, base, seq_len)), 1.0


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
    factor: float = p["max_position_embeddings"] / p["original_max_position_embeddings"]
    return factor


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


def _proportional(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    rotated = int(p["partial_rotary_factor"] * d // 2)
    w = np.zeros(d // 2)
    w[:rotated] = frequencies("geometric", rotated, den=d / 2, base=base)
    return w / p["factor"], 1.0


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

RULES: dict[str, Rule] = {
    "default": Rule((), {}, _default),
    "linear": Rule(("factor",), {}, _linear),
    "dynamic": Rule(("factor", "max_position_embeddings"), {}, _dynamic, uses_seq_len=True),
    "yarn": Rule(("original_max_position_embeddings",), _YARN_OPTIONAL, _yarn),
    "longrope": Rule(
        ("short_factor", "long_factor", "original_max_position_embeddings"),
        {"factor": None, "attention_factor": None, "max_position_embeddings": None},
        _longrope,
        uses_seq_len=True,
    ),
    "llama3": Rule(
        ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
        {},
        _llama3,
    ),
    "proportional": Rule(("partial_rotary_factor",), {"factor": 1.0}, _proportional),
}
"""Every ``rope_type`` of transformers 5.x: its keys and its frequencies."""

_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "factor": _optional_positive,
    "max_position_embeddings": lambda n, v: None if v is None else _length(n, v),
    "original_max_position_embeddings": _length,
    "attention_factor": _optional_positive,
    "beta_fast": _beta,
    "beta_slow": _beta,
    "mscale": _optional_real,
    "mscale_all_dim": _optional_real,
    "truncate": check_bool,
    "short_factor": _factors,
    "long_factor": _factors,
    "low_freq_factor": _positive,
    "high_freq_factor": _positive,
    "partial_rotary_factor": _fraction,
}

SHARED = ("rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section",
          "mrope_interleaved", "max_position_embeddings")  # fmt: skip
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
    def p(self) -> Params:
        return dict(self.params)

    def phase(self, seq_len: int | None) -> int | None:
        """The part of ``seq_len`` the frequencies depend on: None up to the rule's original
        length (and for rules that ignore it), one value for every longer sequence under
        ``longrope``, the length itself under ``dynamic``. Equal phases, equal tables."""
        if not self.rule.uses_seq_len or seq_len is None:
            return None
        p = self.p
        if self.rope_type == "longrope":
            length = p["original_max_position_embeddings"]
            return length + 1 if seq_len > length else None
        return seq_len if seq_len > p["max_position_embeddings"] else None

    def frequencies(self, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        """``(omega [d/2] float64, attention factor)`` for rotary width ``d``."""
        if self.rope_type == "dynamic" and d < 4:
            raise PosencError(
                f"`dim` must be at least 4 for dynamic scaling (its exponent is d / (d - 2)), "
                f"got {d}"
            )
        return self.rule.evaluate(self.p, d, base, seq_len)


def parse_scaling(scaling: Any) -> Scaling:
    """``scaling`` (an HF rope-parameters dict, or None) validated: unknown ``rope_type``,
    missing or invalid keys and keys the rule does not take are errors naming the key."""
    if scaling is None:
        return Scaling("default", (), ())
    if not isinstance(scaling, Mapping):
        raise PosencError(
            f"`scaling` must be a dict of rope parameters such as {{'rope_type': 'linear', "
            f"'factor': 2.0}}, got {show(scaling)}"
        )
    for key in scaling:
        if not isinstance(key, str):
            raise PosencError(f"`scaling` keys must be strings, got {show(key)}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if "rope_type" in scaling and "type" in scaling and scaling["type"] != kind:
        raise PosencError(
            f"`scaling['type']` ({show(scaling['type'])}) disagrees with `scaling['rope_type']` "
            f"({show(kind)})"
        )
    kind = check_choice("scaling['rope_type']", kind, RULES)
    rule = RULES[kind]
    allowed = set(rule.required) | set(rule.optional) | set(SHARED)
    for key in scaling:
        if key not in allowed:
            takes = ", ".join(sorted(set(rule.required) | set(rule.optional))) or "no keys"
            raise PosencError(
                f"`scaling['{key}']` is not a key of rope_type {kind!r} (it takes {takes})"
            )
    params: Params = {}
    for key in rule.required:
        if key not in scaling or (scaling[key] is None and key != "factor"):
            raise PosencError(f"`scaling['{key}']` is required by rope_type {kind!r}")
        params[key] = _CHECKS[key](f"scaling['{key}']", scaling[key])
    for key, default in rule.optional.items():
        value = scaling.get(key, default)
        params[key] = default if value is None else _CHECKS[key](f"scaling['{key}']", value)
    if kind in ("linear", "dynamic", "llama3") and params["factor"] is None:
        raise PosencError(f"`scaling['factor']` is required by rope_type {kind!r}")
    if kind == "llama3" and not params["low_freq_factor"] < params["high_freq_factor"]:
        raise PosencError(
            "`scaling['low_freq_factor']` must be below `scaling['high_freq_factor']`, got "
            f"{params['low_freq_factor']:g} and {params['high_freq_factor']:g}"
        )
    if kind in ("yarn", "longrope"):
        yarn_factor(params)  # factor, or the lengths it follows from
    shared = tuple((k, _frozen(scaling[k])) for k in SHARED if k in scaling and k not in params)
    return Scaling(kind, tuple(sorted(params.items())), shared)


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


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
    s = parse_scaling(params)
    if s.rope_type != "yarn":
        return scale
    p = s.p
    if not p["mscale_all_dim"]:
        return scale
    m: float = mscale(yarn_factor(p), p["mscale_all_dim"])
    return scale * m * m  # transformers' order of operations
