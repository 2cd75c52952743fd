"""The one exception type of posenc and the argument checks that raise it."""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable
from typing import Any


class PosencError(ValueError):
    """A bad argument: the message names the argument, the rule and the value received."""


def suggest(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of `choices`, or an empty string."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_int(name: str, value: Any, *, minimum: int | None = 0) -> int:
    """`value` as an int; bools, floats and values below `minimum` are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PosencError(f"`{name}` must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise PosencError(f"`{name}` must be >= {minimum}, got {value}")
    return int(value)


def check_real(name: str, value: Any, *, positive: bool = False) -> float:
    """`value` as a finite float (optionally > 0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PosencError(f"`{name}` must be a real number, got {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise PosencError(f"`{name}` must be finite, got {value!r}")
    if positive and out <= 0:
        raise PosencError(f"`{name}` must be > 0, got {value!r}")
    return out


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PosencError(f"`{name}` must be True or False, got {value!r}")
    return value
