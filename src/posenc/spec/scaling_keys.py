"""The keys of a scaling rule's dict (transformers' rope parameters and the image and video
rules past the trained size): how each value is checked, named in its error (:data:`CHECKS`),
and the keys any rule's dict may carry (:data:`SHARED`). The rules themselves, and which keys
each takes, are :data:`posenc.spec.scaling.RULES`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from posenc.errors import PosencError, check_bool, check_int, check_real, show


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


def _unit(name: str, v: Any) -> float:
    f = check_real(name, v)
    if not 0 <= f <= 1:
        raise PosencError(f"`{name}` must be in [0, 1] (1: pure noise), got {show(v)}")
    return f


def _pairs(name: str, v: Any) -> tuple[int, ...]:
    if not isinstance(v, list | tuple) or not v:
        raise PosencError(f"`{name}` must be a list of 0-based pair indices, got {show(v)}")
    return tuple(check_int(f"{name}[{i}]", x, minimum=0) for i, x in enumerate(v))


CHECKS: dict[str, Callable[[str, Any], Any]] = {
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
    "k": lambda n, v: check_int(n, v, minimum=1),
    "repeats_at": _length,
    **dict.fromkeys(("gamma_fast", "gamma_slow", "ntk_factor"), _positive),
    **dict.fromkeys(("time", "watershed"), lambda n, v: _unit(n, v)),
    "freq_id": lambda n, v: _pairs(n, v),
    "length": _length,
    "riflex_scale": _positive,
    "global_factor": lambda n, v: None if v is None else _positive(n, v),
    **dict.fromkeys(("dype_scale", "dype_exponent"), _positive),
    "dype_start_sigma": lambda n, v: _unit(n, _positive(n, v)),
    "always": check_bool,
}
"""How each key's value is checked: ``(name, value) -> value``, the error naming ``name``."""

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
