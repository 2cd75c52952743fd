"""The validation layer: posenc's one exception type and every check that raises it.

Every public entry (``table``, ``encode``, ``grid``, ``detr``, the sharding helpers, the
modules' constructors and ``forward``, the command line) checks its arguments here, before any
work: scalar options, position arrays (dtype kind, finiteness, range), the size of the output
against the memory that can hold it, devices, and the one accuracy rule that bounds angles.
A rejection is a :class:`PosencError` naming the argument, the rule and the value; no NumPy or
torch error text reaches the user.

The accuracy rule. An angle ``x * w`` is formed in float64 from a float64 frequency, so it
carries a relative error of about ``1.5 * 2^-52``. Below ``2^27`` rad that is under ``5e-8``,
which with float32's own rounding keeps every value within ``1e-7`` of the exact one; beyond
it the float32 result would be wrong, so such positions are refused. Frequencies that are
powers of two (NeRF) make exact products, and only need the angle to be finite.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
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


MAX_DIM = 1 << 20
"""Largest width: a million channels (4 MiB per float32 row) is far past any model."""
MAX_AXES = 32
"""Most position axes of a grid or of coordinates."""
MAX_POSITION = float(1 << 53)
INT64_MAX = (1 << 63) - 1
"""Largest position magnitude: every integer up to it is a float64."""
ANGLE_LIMIT = float(1 << 27)
"""Largest angle ``|x| * w`` (rad) whose float64 rounding keeps float32 output exact."""


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


# ---------------------------------------------------------------------------------------------
# sizes and devices


def memory_limit(device: Any = None) -> int:
    """Bytes a call may allocate for its output: the memory of the device that holds it
    (no limit known for meta and devices other than the CPU and CUDA)."""
    kind = getattr(device, "type", "cpu")
    if kind == "cuda":
        return int(sys.modules["torch"].cuda.mem_get_info(device)[1])
    if kind != "cpu":
        return 1 << 62
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 62


def check_size(what: str, shape: tuple[int, ...], itemsize: int, device: Any = None) -> None:
    """Refuse an output of ``shape`` that the device's memory cannot hold, before allocating."""
    count = math.prod(shape)
    need = count * itemsize
    limit = memory_limit(device)
    if need > limit:
        dims = " x ".join(str(s) for s in shape)
        raise PosencError(
            f"{what} needs {dims} = {count:.4g} values ({need / 2**30:.4g} GiB), more than the "
            f"{limit / 2**30:.4g} GiB of memory here"
        )


def check_device(torch: Any, device: Any) -> Any:
    """``device`` as a ``torch.device`` this PyTorch build can allocate on."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise PosencError(
            f"`device` must be a torch device such as 'cpu' or 'cuda:0', got {show(device)}"
        ) from None
    if dev.type in ("cpu", "meta"):
        return dev
    try:
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError, ValueError):
        why = (
            " (torch.cuda.is_available() is False)"
            if dev.type == "cuda" and not torch.cuda.is_available()
            else ""
        )
        raise PosencError(
            f"`device` must be a device this PyTorch can use, got {str(dev)!r}{why}"
        ) from None
    return dev


# ---------------------------------------------------------------------------------------------
# positions


@dataclass(frozen=True)
class Positions:
    """Validated positions.

    Attributes:
        values: a NumPy array (int64, float32 or float64), a torch tensor (int64 or floating),
            or another Array API library's array.
        integral: integer positions.
        bound: the largest magnitude, or None where values are not read on the host (traced
            or meta tensors, a module's tensors on an accelerator, traced JAX values); such
            positions are checked on the device, or where they become known.
    """

    values: Any
    integral: bool
    low: float | None
    high: float | None

    @property
    def bound(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return max(-self.low, self.high)


def _torch() -> Any:
    return sys.modules.get("torch")


def _range_error(name: str, value: Any) -> PosencError:
    return PosencError(
        f"`{name}` must be within +-2^53 ({int(MAX_POSITION)}), where every integer is a "
        f"float64, got a value of {show(value)}"
    )


def _checked(name: str, values: Any, integral: bool, low: float, high: float) -> Positions:
    for v in (low, high):
        if not abs(v) <= MAX_POSITION:
            raise _range_error(name, v)
    return Positions(values, integral, low, high)


def as_positions(positions: Any, name: str = "positions", *, on_device: bool = False) -> Positions:
    """Positions of any library, checked: integers or reals (no bools, complex or objects),
    finite, within +-2^53; unsigned and narrow integers become int64, float16 float32.

    ``on_device`` (module forwards): a torch tensor on an accelerator is checked there, by
    assertions in its stream (:func:`assert_on_device`), and never read on the host, so the
    call neither waits for the device nor breaks a CUDA graph; its bounds are then unknown.
    """
    torch = _torch()
    if torch is not None and isinstance(positions, torch.Tensor):
        return _torch_positions(torch, positions, name, on_device)
    if hasattr(positions, "__array_namespace__") and not isinstance(
        positions, np.ndarray | np.generic
    ):
        return _foreign_positions(positions, name)
    if isinstance(positions, numbers.Number) and not isinstance(positions, numbers.Real):
        raise PosencError(f"`{name}` must hold integers or real numbers, got {show(positions)}")
    try:
        arr = np.asarray(positions)
    except (ValueError, TypeError, OverflowError):
        raise PosencError(
            f"`{name}` must be an array of numbers of one shape, got {show(positions)}"
        ) from None
    if arr.dtype == object and arr.size:
        flat = arr.reshape(-1)
        if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in flat):
            raise _range_error(name, max(flat.tolist(), key=abs))
        raise PosencError(f"`{name}` must be an array of numbers, got {show(positions)}")
    if arr.dtype.kind == "b" or (arr.dtype.kind not in "iuf" and arr.size):
        raise PosencError(f"`{name}` must hold integers or real numbers, got dtype {arr.dtype}")
    if arr.dtype.kind not in "iuf":
        arr = arr.astype(np.float32)  # an empty list or array of no numeric type
    if arr.dtype.kind in "iu":
        if arr.size and arr.dtype.kind == "u" and arr.max() > MAX_POSITION:
            raise _range_error(name, arr.max())
        lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
        return _checked(name, arr.astype(np.int64), True, float(lo), float(hi))
    if arr.dtype.itemsize < 4:
        arr = arr.astype(np.float32)  # exact: every float16 is a float32
    if not arr.size:
        return Positions(arr, False, 0.0, 0.0)
    low, high = float(arr.min()), float(arr.max())
    if not (math.isfinite(low) and math.isfinite(high)):
        flat = arr.reshape(-1)
        raise PosencError(f"`{name}` must be finite, got a value of {flat[~np.isfinite(flat)][0]}")
    return _checked(name, arr, False, low, high)


_TORCH_UNSIGNED = ("uint16", "uint32", "uint64")


def _torch_positions(torch: Any, t: Any, name: str, on_device: bool) -> Positions:
    if t.is_complex() or t.dtype == torch.bool:
        raise PosencError(f"`{name}` must hold integers or real numbers, got {t.dtype}")
    integral = not t.is_floating_point()
    unsigned = str(t.dtype).rsplit(".", 1)[-1] in _TORCH_UNSIGNED
    read = not (t.is_meta or tracing() or (on_device and t.device.type != "cpu"))
    if read and unsigned:
        # torch has few kernels for wide unsigned types: check on the host, once
        host = as_positions(np.asarray(t.cpu()), name)
        values = torch.from_numpy(host.values).to(t.device)
        return Positions(values, True, host.low, host.high)
    # exact: every narrow integer is an int64, every float16 and bfloat16 a float32
    if integral:
        t = t.to(torch.int64)  # a uint64 past 2^63 wraps negative: caught below
    elif t.dtype.itemsize < 4:
        t = t.to(torch.float32)
    if not read:  # checked on the device, bounds unknown
        if unsigned:
            assert_on_device(t >= 0, f"`{name}` must be within +-2^53")
        assert_traced(t, f"`{name}` must be finite and within +-2^53")
        return Positions(t, integral, None, None)
    if not t.numel():
        return Positions(t, integral, 0.0, 0.0)
    if integral:
        return _checked(name, t, True, float(t.min()), float(t.max()))
    low, high = float(t.min()), float(t.max())
    if not (math.isfinite(low) and math.isfinite(high)):
        flat = t.reshape(-1)
        raise PosencError(
            f"`{name}` must be finite, got a value of {float(flat[~flat.isfinite()][0])}"
        )
    return _checked(name, t, False, low, high)


def assert_on_device(ok: Any, message: str) -> None:
    """A check of torch values that are not read on the host: every element of the boolean
    tensor ``ok`` must be true. It runs in the values' stream (``torch._assert_async``), so it
    neither synchronises nor breaks a CUDA graph, and it is recorded in compiled and exported
    graphs. A failure raises ``message`` on the CPU and under ``torch.compile``; on CUDA it is
    a device-side assertion, as for PyTorch's own index checks (fatal to the CUDA context)."""
    _torch()._assert_async(ok.all(), message)


def assert_traced(t: Any, message: str, limit: float = MAX_POSITION) -> None:
    """:func:`assert_on_device`: every value of ``t`` finite and of magnitude at most
    ``limit``."""
    assert_on_device(t.abs() <= limit, message)


def tracing() -> bool:
    """Inside ``torch.compile``, ``torch.export`` or ``torch.jit.trace`` (where values cannot
    be read, and what is recorded must not depend on them)."""
    torch = _torch()
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and (compiler.is_compiling() or compiler.is_exporting()):
        return True
    return torch is not None and bool(torch.jit.is_tracing())


def _foreign_positions(x: Any, name: str) -> Positions:
    """Arrays of another Array API library (JAX, array-api-strict, CuPy)."""
    xp = x.__array_namespace__()
    if xp.isdtype(x.dtype, "bool") or not xp.isdtype(x.dtype, ("integral", "real floating")):
        raise PosencError(f"`{name}` must hold integers or real numbers, got {x.dtype}")
    if not _concrete(x):
        return Positions(x, xp.isdtype(x.dtype, "integral"), None, None)
    host = as_positions(np.asarray(_to_host(xp, x)), name)
    return Positions(x, host.integral, host.low, host.high)


def _concrete(x: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is None or not isinstance(x, jax.core.Tracer)


def _to_host(xp: Any, x: Any) -> Any:
    try:
        return np.asarray(x)
    except (TypeError, ValueError, RuntimeError):  # array-api-strict refuses __array__
        return np.asarray(xp.asarray(x, copy=True).tolist() if x.ndim else x.tolist())


# ---------------------------------------------------------------------------------------------
# angles


def check_angles(
    largest: float, bound: float | None, what: str, *, exact: bool, who: str = ""
) -> None:
    """The accuracy rule: ``bound * largest`` (the largest frequency) stays below
    ``ANGLE_LIMIT`` (finite for power-of-two frequencies, whose products are exact). Plain
    Python floats, so a tracer can run it."""
    if bound is None:
        return
    angle = bound * largest
    limit = 2.0**1000 if exact else ANGLE_LIMIT
    if not angle < limit:
        rule = (
            "finite angles"
            if exact
            else "angles below 2^27 rad, where float64 angles still give float32 accuracy"
        )
        raise PosencError(
            f"{what} must keep |position| x frequency within {rule}: positions reach {bound:.6g} "
            f"and the largest frequency{' of preset ' + who if who else ''} is {largest:.6g}, "
            f"an angle of {angle:.6g}"
        )


def check_float32_only(largest: float, bound: float | None, what: str) -> None:
    """What the float32-only evaluator (:mod:`posenc._float32`) needs: positions below 2^24
    (where every integer is a float32) and frequencies below 2^15."""
    if largest >= 2.0**15:
        raise PosencError(
            f"float32-only evaluation (exported graphs, MPS) needs frequencies below 2^15, "
            f"got {largest:.6g}; evaluate eagerly, or on a device with float64"
        )
    if bound is not None and bound >= 2.0**24:
        raise PosencError(
            f"{what} must stay below 2^24 in float32-only evaluation (exported graphs, MPS), "
            f"got {bound:.6g}"
        )


def check_finite_frequencies(omega: np.ndarray, who: str, detail: str) -> None:
    """Frequencies that overflow (or are NaN) come from options out of range."""
    if len(omega) and not np.isfinite(omega).all():
        raise PosencError(
            f"the frequencies of preset {who} overflow for {detail}: choose options whose "
            "frequencies are finite"
        )
