"""NumPy: the reference library and the only hard dependency; its backend, its input
handling, its dtypes, and the thread pool behind ``posenc.set_num_threads``."""

from __future__ import annotations

import math
import numbers
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from posenc.errors import MAX_POSITION, PosencError, check_int, show
from posenc.evaluate.libs.base import Backend, doubling, dtype_name
from posenc.evaluate.positions import Positions, checked_positions, range_error
from posenc.evaluate.rounding import round_to_odd


def _default_threads() -> int:
    """``POSENC_NUM_THREADS``, else 1: the table path is memory-bound, and on the 2-vCPU
    machines this is measured on, threads made it slower (see BENCHMARKS.md)."""
    env = os.environ.get("POSENC_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return 1


_threads = _default_threads()
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def set_num_threads(n: int) -> None:
    """Threads the NumPy path uses for large tables (default ``POSENC_NUM_THREADS`` or 1).
    The PyTorch path follows ``torch.set_num_threads``. Safe while other threads compute:
    their work already handed to the old pool finishes there.

    Examples:
        >>> before = posenc.get_num_threads()
        >>> posenc.set_num_threads(2)
        >>> pe = posenc.table(65536, 1024)       # rows computed by two threads, same bits
        >>> posenc.set_num_threads(before)"""
    global _threads, _pool
    n = check_int("n", n, minimum=1, maximum=1024)
    with _pool_lock:
        _threads = n
        old, _pool = _pool, None
    if old is not None:
        old.shutdown(wait=False)


def get_num_threads() -> int:
    """Threads the NumPy path uses (see :func:`set_num_threads`).

    Examples:
        >>> posenc.get_num_threads() >= 1
        True
    """
    return _threads


def _run_threads(work: Callable[[int, int], None], ranges: list[tuple[int, int]]) -> None:
    global _pool
    if _threads == 1 or len(ranges) < 4:
        for lo, hi in ranges:
            work(lo, hi)
        return
    with _pool_lock:  # a pool is never shut down while work is being handed to it
        if _pool is None:
            _pool = ThreadPoolExecutor(_threads, thread_name_prefix="posenc")
        futures = [_pool.submit(work, lo, hi) for lo, hi in ranges]
    for future in futures:
        future.result()


_NUMPY_FLOATS = ("float16", "float32", "float64")


def numpy_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a NumPy float dtype (default float32), or a PosencError naming it."""
    if dtype is None:
        return np.dtype(np.float32)
    out: np.dtype | None
    try:
        out = np.dtype(dtype)
    except TypeError:
        out = None
    if out is not None and (out.name in _NUMPY_FLOATS or out.name == "bfloat16"):
        return out
    hint = (
        " (bfloat16 in NumPy needs ml_dtypes imported, or pass a torch dtype)"
        if str(dtype) == "bfloat16"
        else ""
    )
    raise PosencError(
        f"`dtype` must be one of float16, float32, float64 for NumPy output{hint}, got {dtype!r}"
    )


def host_positions(positions: Any, name: str) -> Positions:
    """Positions given as NumPy arrays, lists or numbers, checked (see
    :meth:`Backend.positions`)."""
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
            raise range_error(name, max(flat.tolist(), key=abs))
        raise PosencError(f"`{name}` must be an array of numbers, got {show(positions)}")
    if arr.dtype.kind == "b" or (arr.dtype.kind not in "iuf" and arr.size):
        raise PosencError(f"`{name}` must hold integers or real numbers, got dtype {arr.dtype}")
    if arr.dtype.kind not in "iuf":
        arr = arr.astype(np.float32)  # an empty list or array of no numeric type
    if arr.dtype.kind in "iu":
        if arr.size and arr.dtype.kind == "u" and arr.max() > MAX_POSITION:
            raise range_error(name, arr.max())
        lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
        return checked_positions(name, arr.astype(np.int64), True, float(lo), float(hi))
    if arr.dtype.itemsize < 4:
        arr = arr.astype(np.float32)  # exact: every float16 is a float32
    if not arr.size:
        return Positions(arr, False, 0.0, 0.0)
    low, high = float(arr.min()), float(arr.max())
    if not (math.isfinite(low) and math.isfinite(high)):
        flat = arr.reshape(-1)
        raise PosencError(f"`{name}` must be finite, got a value of {flat[~np.isfinite(flat)][0]}")
    return checked_positions(name, arr, False, low, high)


def host_memory() -> int:
    """Bytes of this machine's memory (``1 << 62`` where unknown)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 62


class NumpyBackend(Backend):
    """NumPy arrays; the engine's work runs on :func:`set_num_threads` threads (NumPy
    releases the GIL)."""

    name = "numpy"
    has_engine = True
    chunk = 1 << 18  # float64 values per chunk: 2 MiB, about the L2 cache
    float32, float64, int32, int64 = np.float32, np.float64, np.int32, np.int64

    def __init__(self, dtype: Any = None, device: Any = None) -> None:
        self.dtype = numpy_dtype(dtype)

    # -- the library

    def positions(self, x: Any, name: str, on_device: bool) -> Positions:
        return host_positions(x, name)

    def memory(self) -> int:
        return host_memory()

    def from_numpy(self, array: np.ndarray) -> Any:
        return array

    def half_cast_rounds_once(self, dtype: Any) -> bool:
        # NumPy casts float64 to float16 from the double's bits, rounding once; ml_dtypes'
        # bfloat16 passes through float32
        return dtype_name(dtype) == "float16"

    # -- array operations

    def asarray(self, values: Any, dtype: Any, like: Any) -> Any:
        return np.asarray(values, dtype=dtype)

    def astype(self, x: Any, dtype: Any) -> Any:
        return x.astype(dtype)

    def take(self, x: Any, index: Any, axis: int) -> Any:
        return np.take(x, index, axis=axis)

    def stack(self, xs: list[Any], axis: int) -> Any:
        return np.stack(xs, axis=axis)

    def concat(self, xs: list[Any], axis: int) -> Any:
        return np.concatenate(xs, axis=axis)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return x.reshape(shape)

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any) -> Any:
        return np.zeros(shape, dtype=dtype)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return np.where(cond, a, b)

    def sin(self, x: Any) -> Any:
        return np.sin(x)

    def cos(self, x: Any) -> Any:
        return np.cos(x)

    def abs(self, x: Any) -> Any:
        return np.abs(x)

    def floor(self, x: Any) -> Any:
        return np.floor(x)

    def round(self, x: Any) -> Any:
        return np.rint(x)

    def bitcast(self, x: Any, dtype: Any) -> Any:
        return x.view(dtype)

    def cumsum(self, x: Any, axis: int) -> Any:
        return np.cumsum(x, axis=axis)

    def permute(self, x: Any, axes: tuple[int, ...]) -> Any:
        return x.transpose(axes)

    def arange(self, n: Any, like: Any, dtype: Any = None) -> Any:
        return np.arange(n, dtype=dtype or np.float64)

    # -- the exact engine

    def run(self, work: Callable[[int, int], None], ranges: list[tuple[int, int]]) -> None:
        _run_threads(work, ranges)

    def empty(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.empty(shape, dtype=self.dtype)

    def f64(self, x: Any) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)

    def temp(self, rows: int, width: int, *, exact: bool = False) -> np.ndarray:
        wide = exact or self.sixteen
        return np.empty((rows, width), dtype=np.float64 if wide else self.dtype)

    def scatter_pairs(
        self, into: np.ndarray, pairs: np.ndarray, sin: int, cos: int, step: int
    ) -> None:
        first = min(sin, cos)
        item = into.strides[-1]
        view = np.lib.stride_tricks.as_strided(
            into[..., first:],
            (*into.shape[:-1], pairs.shape[-2], 2),
            (*into.strides[:-1], step * item, abs(cos - sin) * item),
        )
        view[...] = pairs if sin < cos else pairs[..., ::-1]

    def sincos(self, theta: np.ndarray, into: np.ndarray) -> None:
        np.sin(theta, out=into[:, 0::2], casting="same_kind")
        np.cos(theta, out=into[:, 1::2], casting="same_kind")

    def sincos_doubling(self, theta: np.ndarray, n: int, into: np.ndarray) -> None:
        z = np.empty((n, theta.shape[0]), dtype=np.complex128)

        def seed(k: int, t: np.ndarray) -> None:
            np.cos(t, out=z[k].real)
            np.sin(t, out=z[k].imag)

        doubling(z, theta[:, 0], seed, lambda k: np.square(z[k - 1], out=z[k]))
        pairs = into.reshape(theta.shape[0], n, 2)
        pairs[..., 0] = z.imag.T
        pairs[..., 1] = z.real.T

    def phasors(self, theta: np.ndarray, *, coarse: bool) -> np.ndarray:
        z = np.empty(theta.shape, dtype=np.complex128)
        if coarse:
            np.sin(theta, out=z.real)
            np.cos(theta, out=z.imag)
        else:
            np.cos(theta, out=z.real)
            np.sin(theta, out=z.imag)
            np.negative(z.imag, out=z.imag)
        return z

    def product(self, coarse: np.ndarray, fine: np.ndarray, into: np.ndarray) -> None:
        # NumPy's buffered casting fuses the float64 product and the rounding
        complex_type = np.complex128 if into.dtype == np.float64 else np.complex64
        out = into.view(complex_type)
        np.multiply(
            coarse,
            fine,
            out=out.reshape(np.broadcast_shapes(coarse.shape, fine.shape)),
            casting="same_kind",
        )

    def rows(self, x: np.ndarray, index: np.ndarray) -> np.ndarray:
        return np.take(x, index, axis=0)

    def contiguous(self, x: np.ndarray, dtype: Any) -> np.ndarray:
        return np.ascontiguousarray(x, dtype=dtype)

    def complex(self, z: np.ndarray) -> np.ndarray:
        return z

    def gather_rows(self, table: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
        np.take(table, index, axis=0, out=out, mode="clip")  # "raise" would buffer a copy

    def rounded(self, basis: np.ndarray) -> np.ndarray:
        if self.sixteen and not self.half_cast_rounds_once(self.dtype):
            return round_to_odd(basis, self)  # type: ignore[no-any-return]
        return basis


NUMPY = NumpyBackend()
"""The NumPy backend for float32 output: array operations, NumPy inputs."""
