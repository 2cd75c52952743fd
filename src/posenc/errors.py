"""posenc's one exception type, its limits, and the checks of scalar arguments.

Every public entry (``table``, ``encode``, ``grid``, ``detr``, ``rope``, the sharding helpers,
the modules' constructors and ``forward``, the command line) checks its arguments before any
work. A rejection is a :class:`PosencError` naming the argument, the rule and the value; no
NumPy or torch error text reaches the user. Scalar options are checked here; positions by
their library's backend (:mod:`posenc.evaluate.libs`); the accuracy rule that bounds angles
in :mod:`posenc.evaluate.accuracy`.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np


class PosencError(ValueError):
    """A bad argument: the message names the argument, the rule and the value received.

    A subclass of ``ValueError``, raised before any work is done.

    Examples:
        >>> try:
        ...     posenc.table(100, 7, preset="whisper")
        ... except posenc.PosencError as e:
        ...     print(e)
        `dim` must be a positive multiple of 2 for preset 'whisper' (...), got 7
    """


class NotHeld(PosencError):
    """A ``compat=`` grid past the rows its original keeps (the original raises there): a
    :class:`PosencError` that also says which, as ``held``: ``"rows 0 … 127 on axis 1
    (where the original keeps them)"``."""

    def __init__(self, message: str, held: str) -> None:
        super().__init__(message)
        self.held = held


MAX_DIM = 1 << 20
"""Largest width: a million channels (4 MiB per float32 row) is far past any model."""
MAX_AXES = 32
"""Most position axes of a grid or of coordinates."""
MAX_POSITION = float(1 << 53)
"""Largest position magnitude: every integer up to it is a float64."""
INT64_MAX = (1 << 63) - 1
"""Largest integer option: every integer posenc takes ends up in an int64."""


def suggest(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of `choices`, or an empty string."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def show(value: Any) -> str:
    """A short repr for messages (huge ints, whose repr may be refused, by their size)."""
    if isinstance(value, int) and value.bit_length() > 192:
        return f"an integer of {math.floor(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_int(name: str, value: Any, *, minimum: int | None = 0, maximum: int = INT64_MAX) -> int:
    """`value` as an int; bools, floats and values outside ``[minimum, maximum]`` are refused
    (every integer posenc takes ends up in an int64, so none may exceed 2^63 - 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PosencError(f"`{name}` must be an integer, got {show(value)}")
    out = int(value)
    if minimum is not None and out < minimum:
        raise PosencError(f"`{name}` must be >= {minimum}, got {out}")
    if out > maximum:
        raise PosencError(f"`{name}` must be <= {maximum}, got {show(out)}")
    return out


def check_real(name: str, value: Any, *, positive: bool = False) -> float:
    """`value` as a finite float (optionally > 0); bools, strings and overflowing ints are
    refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PosencError(f"`{name}` must be a real number, got {show(value)}")
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise PosencError(f"`{name}` must be finite, got {show(value)}")
    if positive and out <= 0:
        raise PosencError(f"`{name}` must be > 0, got {show(value)}")
    return out


def check_bool(name: str, value: Any) -> bool:
    """`value` if it is True or False (not 1, "no" or a tensor)."""
    if not isinstance(value, bool | np.bool_):
        raise PosencError(f"`{name}` must be True or False, got {show(value)}")
    return bool(value)


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """`value` if it is one of `choices` (strings)."""
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        hint = suggest(value, options) if isinstance(value, str) else ""
        raise PosencError(
            f"`{name}` must be one of {', '.join(map(repr, options))}{hint}, got {show(value)}"
        )
    return value


def check_size(what: str, shape: tuple[int, ...], itemsize: int, limit: int) -> None:
    """Refuse an output of ``shape`` that ``limit`` bytes of memory cannot hold, before
    allocating."""
    count = math.prod(shape)
    need = count * itemsize
    if need > limit:
        dims = " x ".join(str(s) for s in shape)
        raise PosencError(
            f"{what} needs {dims} = {count:.4g} values ({need / 2**30:.4g} GiB), more than the "
            f"{limit / 2**30:.4g} GiB of memory here"
        )
