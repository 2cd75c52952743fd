"""The backend contract: every operation posenc asks of an array library, written down once.

One :class:`Backend` subclass per library (:mod:`.numpy`, :mod:`.torch`, :mod:`.array_api`),
in the manner of einops' ``AbstractBackend``: the evaluation layer, the rounding and the
front-ends ask a backend, never the library. A backend is made for one output dtype and
device (``Backend(dtype, device)``); the array operations do not depend on them.

Three groups of methods:

- **the library** (input handling): whether an object is one of its arrays, positions checked
  and widened, its dtypes, whether a request goes to the direct formula (traced, or on a
  device without float64), how much memory a device has;
- **array operations** for the direct formula (:mod:`posenc.evaluate.direct`), the float32-only
  evaluator and the rounding, named and meaning as in the Python Array API standard
  (``like`` is an array whose device the result takes);
- **the exact engine's** chunked operations (:mod:`posenc.evaluate.engine`): NumPy and
  PyTorch only; an Array API library is evaluated by the direct formula alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from posenc.evaluate.positions import Positions

FLOATS = ("float16", "bfloat16", "float32", "float64")
"""The float dtypes posenc computes in, by name."""

_LARGEST = {2: 65504.0, 4: float(np.finfo(np.float32).max), 8: float(np.finfo(np.float64).max)}


def dtype_name(dtype: Any) -> str:
    """``float32``, ``bfloat16``… of a float dtype of any library (NumPy, torch, JAX,
    array-api-strict); ``None`` is posenc's default, float32."""
    if dtype is None:
        return "float32"
    if isinstance(dtype, str | np.dtype | type):  # NumPy's and JAX's (never np.dtype(torch
        try:  # dtype): torch.compile cannot trace that)
            return str(np.dtype(dtype).name)
        except TypeError:
            pass
    return str(getattr(dtype, "name", None) or dtype).rsplit(".", 1)[-1]


def itemsize(dtype: Any) -> int:
    """Bytes of a float dtype of any library."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    return {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}.get(dtype_name(dtype), 8)


def largest(dtype: Any) -> float:
    """The largest finite value of a float dtype of any library."""
    if "bfloat16" in str(dtype):  # no dtype_name: torch.compile cannot trace np.dtype
        return _LARGEST[4] * (1 - 2.0**-8)
    return _LARGEST[itemsize(dtype)]


DOUBLINGS = 10  # levels per direct evaluation: errors grow to at most about 2**11 * 2^-52


def doubling(
    z: Any, a: Any, seed: Callable[[int, Any], None], square: Callable[[int], None]
) -> None:
    """``z[k] = exp(i 2**k a)`` for the ``[levels, rows]`` complex128 array ``z``: every
    ``DOUBLINGS``-th level evaluated directly by ``seed`` (``2**k * a`` is exact), the levels
    between by ``square`` (``z[k] = z[k-1]**2``, one complex product). Each squaring doubles
    the error it inherits and adds a few 2^-53, so no value is off by more than about
    ``2**11 * 2^-52`` (5e-13) — far below a float32 half ulp — for one sine and cosine per
    ``DOUBLINGS`` levels (NeRF's L = 10 needs one)."""
    for k in range(z.shape[0]):
        if k % DOUBLINGS == 0:
            seed(k, a * 2.0**k)
        else:
            square(k)


class Backend:
    """One array library, for one output ``dtype`` and ``device``. Methods a library cannot
    serve raise ``NotImplementedError`` (an Array API library has no exact engine)."""

    name: str
    """The library's name (part of the engine's cache keys)."""
    dtype: Any
    """The output dtype, in the library's own dtype type."""
    device: Any = None
    """The output device (None: the library's default)."""
    float32: Any
    float64: Any
    int32: Any
    int64: Any
    chunk: int = 1 << 18
    """float64 values per chunk of the engine's work."""

    # -- the library --------------------------------------------------------------------

    has_engine: bool = False
    """Whether the exact engine runs on this library (NumPy, PyTorch)."""

    @property
    def has_float64(self) -> bool:
        """Whether this library computes in float64 here (JAX without x64 does not)."""
        return True

    def direct(self, on_device: bool) -> bool:
        """Whether a request is evaluated by the direct formula rather than the engine: no
        engine here, or traced, or (``on_device``: a module's forward) where the values live
        on an accelerator and must stay there."""
        return not self.has_engine

    def float32_only(self) -> bool:
        """The device or graph has no float64 (MPS, exported graphs): the direct formula
        then computes in float32 alone."""
        return False

    def traced(self) -> bool:
        """Inside a compiler's trace (``torch.compile``), where the graph, not the calling
        context, decides how a request is evaluated."""
        return False

    def anchor(self, like: Any) -> Any:
        """An array on the output device, for the direct formula's ``like``: ``like`` itself
        when it is this library's."""
        return like

    def positions(self, x: Any, name: str, on_device: bool) -> Positions:
        """``x`` (an array of this library) checked as positions: integers or reals, finite,
        within +-2^53; narrow integers widened to int64, float16 to float32. ``on_device``:
        values on an accelerator are checked there, not read on the host (bounds unknown)."""
        raise NotImplementedError

    def concrete(self, x: Any) -> bool:
        """Whether ``x``'s values can be read now (not a tracer)."""
        return True

    def memory(self) -> int:
        """Bytes the output device can hold (``1 << 62`` where unknown)."""
        return 1 << 62

    def check_on_device(self, x: Any, limit: float, message: str) -> None:
        """Check, on the device and without reading ``x`` on the host, that every value of
        ``x`` is finite with magnitude at most ``limit``; a failure raises ``message``."""

    def from_numpy(self, array: np.ndarray) -> Any:
        """A NumPy array as this library's array, on the backend's device."""
        raise NotImplementedError

    def half_cast_rounds_once(self, dtype: Any) -> bool:
        """Whether casting float64 to the 16-bit ``dtype`` rounds once (NumPy's float16);
        where not, values are rounded to odd in float32 first."""
        return False

    # -- array operations (Array API names) ----------------------------------------------

    def asarray(self, values: Any, dtype: Any, like: Any) -> Any:
        """``values`` (a NumPy array, a list or a tuple of numbers) as an array of ``dtype``
        on ``like``'s device."""
        raise NotImplementedError

    def astype(self, x: Any, dtype: Any) -> Any:
        """``x`` converted to ``dtype`` (round to nearest for floats)."""
        raise NotImplementedError

    def take(self, x: Any, index: Any, axis: int) -> Any:
        """``x`` indexed along ``axis`` by the int64 array ``index``."""
        raise NotImplementedError

    def stack(self, xs: list[Any], axis: int) -> Any:
        """Arrays of one shape stacked along a new ``axis``."""
        raise NotImplementedError

    def concat(self, xs: list[Any], axis: int) -> Any:
        """Arrays joined along an existing ``axis``."""
        raise NotImplementedError

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        """``x`` with a new shape of the same size."""
        raise NotImplementedError

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any) -> Any:
        """An array of zeros on ``like``'s device."""
        raise NotImplementedError

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        """``a`` where ``cond``, else ``b`` (broadcast)."""
        raise NotImplementedError

    def sin(self, x: Any) -> Any:
        """Elementwise sine."""
        raise NotImplementedError

    def cos(self, x: Any) -> Any:
        """Elementwise cosine."""
        raise NotImplementedError

    def abs(self, x: Any) -> Any:
        """Elementwise magnitude."""
        raise NotImplementedError

    def floor(self, x: Any) -> Any:
        """Elementwise floor (float in, float out)."""
        raise NotImplementedError

    def round(self, x: Any) -> Any:
        """Elementwise nearest integer, ties to even (float in, float out)."""
        raise NotImplementedError

    def bitcast(self, x: Any, dtype: Any) -> Any:
        """The bits of ``x`` read as ``dtype`` of the same width (float32 <-> int32)."""
        raise NotImplementedError

    def cumsum(self, x: Any, axis: int) -> Any:
        """Cumulative sum along ``axis``."""
        raise NotImplementedError

    def permute(self, x: Any, axes: tuple[int, ...]) -> Any:
        """``x`` with its axes reordered."""
        raise NotImplementedError

    def arange(self, n: Any, like: Any, dtype: Any = None) -> Any:
        """``0, 1, …, n-1`` in ``dtype`` (default float64) on ``like``'s device; ``n`` may be
        a symbolic size under tracing."""
        raise NotImplementedError

    # -- the exact engine ------------------------------------------------------------------

    @property
    def sixteen(self) -> bool:
        """The output dtype has 16 bits (its rounding needs a step of its own)."""
        return itemsize(self.dtype) == 2

    def rows_per_chunk(self, n: int) -> int:
        """Rows of a chunk for ``n`` frequencies (``2n`` basis columns)."""
        return max(1, self.chunk // max(1, 2 * n))

    def run(self, work: Callable[[int, int], None], ranges: list[tuple[int, int]]) -> None:
        """Run ``work(lo, hi)`` on every row range."""
        for lo, hi in ranges:
            work(lo, hi)

    def empty(self, shape: tuple[int, ...]) -> Any:
        """An uninitialised output array of ``shape`` in the output dtype."""
        raise NotImplementedError

    def f64(self, x: Any) -> Any:
        """``x`` (NumPy or this library's) as a float64 array on the device."""
        raise NotImplementedError

    def temp(self, rows: int, width: int, *, exact: bool = False) -> Any:
        """A ``[rows, width]`` basis buffer: float64 when ``exact`` or the output has 16 bits
        (whose rounding is a step of its own), else in the output dtype (one fused rounding)."""
        raise NotImplementedError

    def scatter_pairs(self, into: Any, pairs: Any, sin: int, cos: int, step: int) -> None:
        """``into[..., sin + k*step] = pairs[..., k, 0]`` and ``into[..., cos + k*step] =
        pairs[..., k, 1]``, rounded to ``into``'s dtype, in one copy through a strided view."""
        raise NotImplementedError

    def sincos(self, theta: Any, into: Any) -> None:
        """``into[:, 2i] = sin(theta[:, i])``, ``into[:, 2i+1] = cos``, rounded once."""
        raise NotImplementedError

    def sincos_doubling(self, theta: Any, n: int, into: Any) -> None:
        """``sincos`` of ``theta * 2**k`` for ``k < n`` (``theta``: ``[rows, 1]``), by
        squaring phasors (:func:`doubling`): one sine and cosine per row instead of ``n``."""
        raise NotImplementedError

    def phasors(self, theta: Any, *, coarse: bool) -> Any:
        """Complex factors whose products are ``sin + i cos`` of summed angles. coarse:
        ``i * exp(-i theta) = sin + i cos``; fine: ``exp(-i theta)``. Then ``coarse(a) *
        fine(b) = sin(a + b) + i cos(a + b)``, which in memory is the interleaved basis."""
        raise NotImplementedError

    def product(self, coarse: Any, fine: Any, into: Any) -> None:
        """``into`` (``[rows, 2n]``) = the basis of ``coarse * fine``, computed in float64 and
        rounded once on the way out."""
        raise NotImplementedError

    def rows(self, x: Any, index: np.ndarray) -> Any:
        """Rows ``index`` (a NumPy int array) of ``x``."""
        raise NotImplementedError

    def contiguous(self, x: Any, dtype: Any) -> Any:
        """``x`` as a contiguous array of ``dtype``."""
        raise NotImplementedError

    def complex(self, z: np.ndarray) -> Any:
        """A NumPy complex128 array as this library's array on the device."""
        raise NotImplementedError

    def gather_rows(self, table: Any, index: np.ndarray, out: Any) -> None:
        """``out[i] = table[index[i]]``, into ``out``."""
        raise NotImplementedError

    def rounded(self, basis: Any) -> Any:
        """A basis ready to be stored in the output dtype with one correct rounding."""
        raise NotImplementedError
