"""Backends: the one place that knows NumPy from PyTorch.

The engine asks a backend for a handful of array operations; NumPy is the reference and the
only hard dependency. PyTorch is used only when the caller hands over a tensor, a torch dtype
or a device (it is never imported otherwise), in the manner of einops.

All angles are computed in float64 and rounded once, at the end, to the output dtype. A
plain float64 -> float32 -> 16-bit cast rounds twice, and is then wrong where the float32
lands on a 16-bit midpoint; so NumPy casts float64 to float16 directly, torch's tables step
those few float32 values off the midpoint toward the exact value before the cast (found by
a bit pattern, block by block), and the direct formula rounds to float32 *to odd* (last bit
set when inexact).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from ._cache import BoundedCache, nbytes
from ._validate import PosencError, check_device, check_int
from ._validate import tracing as _tracing

_NUMPY_FLOATS = ("float16", "float32", "float64")


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


def _torch() -> Any:
    return sys.modules.get("torch")


def is_torch(x: object) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def array_namespace(x: Any) -> Any | None:
    """The Array API namespace of ``x`` for arrays that are neither NumPy nor torch (JAX,
    array-api-strict, CuPy), else None."""
    if x is None or isinstance(x, (np.ndarray, np.generic)) or is_torch(x):
        return None
    if not hasattr(x, "__array_namespace__"):
        return None
    return x.__array_namespace__()


class _Chunked:
    """What both backends share: work in row chunks of about ``chunk`` float64 values."""

    chunk: int

    def rows_per_chunk(self, n: int) -> int:
        """Rows of a chunk for ``n`` frequencies (``2n`` basis columns)."""
        return max(1, self.chunk // max(1, 2 * n))


class NumpyBackend(_Chunked):
    name = "numpy"
    chunk = 1 << 18  # float64 values per chunk: 2 MiB, about the L2 cache

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.sixteen = dtype.itemsize == 2

    def run(self, work: Callable[[int, int], None], ranges: list[tuple[int, int]]) -> None:
        """Run ``work`` on every row range (on threads: NumPy releases the GIL)."""
        _run_threads(work, ranges)

    def empty(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.empty(shape, dtype=self.dtype)

    def f64(self, x: Any) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)

    @property
    def basis_dtype(self) -> np.dtype:
        """dtype of the basis before it reaches the output: float64 where a 16-bit output
        needs a rounding step of its own, else the output dtype (one rounding, fused)."""
        return np.dtype(np.float64) if self.sixteen else self.dtype

    def temp(self, rows: int, width: int, *, exact: bool = False) -> np.ndarray:
        """A basis buffer: float64 when ``exact``, else ``basis_dtype``."""
        return np.empty((rows, width), dtype=np.float64 if exact else self.basis_dtype)

    def scatter_pairs(
        self, into: np.ndarray, pairs: np.ndarray, sin: int, cos: int, step: int
    ) -> None:
        """``into[..., sin + k*step] = pairs[..., k, 0]`` and ``into[..., cos + k*step] =
        pairs[..., k, 1]``, rounded to ``into``'s dtype, in one copy through a strided view."""
        first = min(sin, cos)
        item = into.strides[-1]
        view = np.lib.stride_tricks.as_strided(
            into[..., first:],
            (*into.shape[:-1], pairs.shape[-2], 2),
            (*into.strides[:-1], step * item, abs(cos - sin) * item),
        )
        view[...] = pairs if sin < cos else pairs[..., ::-1]

    def sincos(self, theta: np.ndarray, into: np.ndarray) -> None:
        """``into[:, 2i] = sin(theta[:, i])``, ``into[:, 2i+1] = cos``, rounded once."""
        np.sin(theta, out=into[:, 0::2], casting="same_kind")
        np.cos(theta, out=into[:, 1::2], casting="same_kind")

    def sincos_doubling(self, theta: np.ndarray, n: int, into: np.ndarray) -> None:
        """``sincos`` of ``theta * 2**k`` for ``k < n`` (``theta``: ``[rows, 1]``), by
        squaring phasors: one sine and cosine per row instead of ``n`` (NeRF's frequencies)."""
        z = np.empty((n, theta.shape[0]), dtype=np.complex128)

        def seed(k: int, t: np.ndarray) -> None:
            np.cos(t, out=z[k].real)
            np.sin(t, out=z[k].imag)

        _doubling(z, theta[:, 0], seed, lambda k: np.square(z[k - 1], out=z[k]))
        pairs = into.reshape(theta.shape[0], n, 2)
        pairs[..., 0] = z.imag.T
        pairs[..., 1] = z.real.T

    def phasors(self, theta: np.ndarray, *, coarse: bool) -> np.ndarray:
        """Complex factors whose products are ``sin + i cos`` of summed angles.

        coarse: ``i * exp(-i theta) = sin + i cos``; fine: ``exp(-i theta)``. Then
        ``coarse(a) * fine(b) = sin(a + b) + i cos(a + b)``, which in memory is the
        interleaved ``[sin, cos]`` basis.
        """
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
        """``into`` (``[rows, 2n]``) = the basis of ``coarse * fine``, in float64 then rounded
        once on the way out (NumPy's buffered casting fuses the two)."""
        complex_type = np.complex128 if into.dtype == np.float64 else np.complex64
        out = into.view(complex_type)
        np.multiply(
            coarse,
            fine,
            out=out.reshape(np.broadcast_shapes(coarse.shape, fine.shape)),
            casting="same_kind",
        )

    def take(self, x: np.ndarray, index: np.ndarray) -> np.ndarray:
        return np.take(x, index, axis=0)

    def cast(self, x: np.ndarray, dtype: np.dtype) -> np.ndarray:
        return np.ascontiguousarray(x, dtype=dtype)

    def complex(self, z: np.ndarray) -> np.ndarray:
        """A NumPy complex128 array as this backend's array."""
        return z

    def gather_rows(self, table: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
        np.take(table, index, axis=0, out=out, mode="clip")  # "raise" would buffer a copy

    def rounded(self, basis: np.ndarray) -> np.ndarray:
        """The basis ready to be stored with one correct rounding."""
        return (
            round_to_odd(basis, NUMPY_OPS)
            if self.sixteen and not _direct_half(self.dtype)
            else basis
        )


class TorchBackend(_Chunked):
    name = "torch"
    chunk = 1 << 19  # float64 values per chunk: torch's per-call overhead is larger

    def __init__(self, dtype: Any, device: Any) -> None:
        self.torch = _torch()
        self.dtype = dtype
        self.device = device
        self.sixteen = dtype.itemsize == 2
        self._buffers: dict[tuple[str, Any], Any] = {}

    def _reused(self, slot: str, shape: tuple[int, ...], dtype: Any) -> Any:
        """A tensor of ``shape`` from the buffer ``slot``, kept from chunk to chunk: chunks
        run one after another, and a fresh CPU temporary of a few MiB costs more in page
        faults than the arithmetic done in it."""
        n = int(np.prod(shape))
        buf = self._buffers.get((slot, dtype))
        if buf is None or buf.numel() < n:
            buf = self._buffers[slot, dtype] = self.torch.empty(n, dtype=dtype, device=self.device)
        return buf[:n].view(shape)

    def run(self, work: Callable[[int, int], None], ranges: list[tuple[int, int]]) -> None:
        """Run ``work`` on every row range, in order (torch ops use its own threads)."""
        for lo, hi in ranges:
            work(lo, hi)

    def empty(self, shape: tuple[int, ...]) -> Any:
        t = self.torch
        if self.device.type == "cpu" and int(np.prod(shape)) >= 1 << 20:
            # NumPy backs large arrays with huge pages; torch's CPU allocator does not, and
            # first-touch page faults then cost more than computing the table
            raw = np.empty(shape, dtype=f"i{self.dtype.itemsize}")
            return t.from_numpy(raw).view(self.dtype)
        return t.empty(shape, dtype=self.dtype, device=self.device)

    def f64(self, x: Any) -> Any:
        t = self.torch
        if isinstance(x, t.Tensor):
            return x.to(device=self.device, dtype=t.float64)
        return t.as_tensor(np.asarray(x, dtype=np.float64), device=self.device)

    @property
    def basis_dtype(self) -> Any:
        return self.torch.float64 if self.sixteen else self.dtype

    def temp(self, rows: int, width: int, *, exact: bool = False) -> Any:
        dtype = self.torch.float64 if exact else self.basis_dtype
        return self._reused("basis", (rows, width), dtype)

    def scatter_pairs(self, into: Any, pairs: Any, sin: int, cos: int, step: int) -> None:
        first = min(sin, cos)
        item = into.stride(-1)
        view = into[..., first:].as_strided(
            (*into.shape[:-1], pairs.shape[-2], 2),
            (*into.stride()[:-1], step * item, abs(cos - sin) * item),
        )
        view.copy_(pairs if sin < cos else pairs.flip(-1))  # torch has no negative strides

    def sincos(self, theta: Any, into: Any) -> None:
        pairs = into.view(*theta.shape, 2)
        pairs[..., 0] = self.torch.sin(theta)
        pairs[..., 1] = self.torch.cos(theta)

    def sincos_doubling(self, theta: Any, n: int, into: Any) -> None:
        t = self.torch
        z = t.empty((n, theta.shape[0]), dtype=t.complex128, device=self.device)

        def seed(k: int, a: Any) -> None:
            z[k] = t.complex(t.cos(a), t.sin(a))

        _doubling(z, theta[:, 0], seed, lambda k: t.mul(z[k - 1], z[k - 1], out=z[k]))
        pairs = into.view(theta.shape[0], n, 2)
        pairs[..., 0].copy_(z.imag.T)
        pairs[..., 1].copy_(z.real.T)

    def phasors(self, theta: Any, *, coarse: bool) -> Any:
        t = self.torch
        if coarse:
            return t.complex(t.sin(theta), t.cos(theta))
        return t.complex(t.cos(theta), -t.sin(theta))

    def product(self, coarse: Any, fine: Any, into: Any) -> None:
        t = self.torch
        pairs = into.view(*into.shape[:-1], -1, 2)
        if into.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in pairs.stride()[:-1]):
            t.mul(coarse, fine, out=t.view_as_complex(pairs))
        else:  # a complex view needs even strides: odd widths (NeRF, tatp22) get a copy
            pairs.copy_(t.view_as_real(coarse * fine))

    def take(self, x: Any, index: Any) -> Any:
        return x[self.torch.as_tensor(index, device=x.device)]

    def cast(self, x: Any, dtype: Any) -> Any:
        return x.to(dtype)

    def complex(self, z: np.ndarray) -> Any:
        return self.torch.from_numpy(z).to(self.device)

    def gather_rows(self, table: Any, index: np.ndarray, out: Any) -> None:
        t = self.torch
        t.index_select(table, 0, t.as_tensor(index, device=table.device), out=out)

    def rounded(self, basis: Any) -> Any:
        """The basis ready to be stored with one correct rounding: itself, or for a 16-bit
        output float32 values that torch's cast rounds as ``basis`` would be rounded once
        (:func:`_ready_for_half`, in buffers kept from chunk to chunk)."""
        if not self.sixteen:
            return basis
        f = self._reused("float32", basis.shape, self.torch.float32)
        return _ready_for_half(self.torch, basis, self.dtype, f, self._key)

    def _key(self, n: int) -> Any:
        """int32 scratch of ``n`` values, kept from chunk to chunk (float16's midpoint
        search)."""
        return self._reused("key", (n,), self.torch.int32)


HALF_MIDPOINTS = {"bfloat16": (0xFFFF, 0x8000), "float16": (0xFFF, 0)}
"""float32 bit patterns (``bits & mask == value``) that include every midpoint of a 16-bit
format: bfloat16's are the float32 values whose low 16 bits are 0x8000 (subnormals alike);
float16's have their low 12 bits zero (0x1000 in the low 13 for normal values, a higher
single bit for subnormal ones, whose spacing is a fixed 2^-24, and 65520, the overflow
threshold)."""

BLOCK = 64  # float32 values per block of the midpoint search


def _ready_for_half(torch: Any, x64: Any, half: Any, f: Any, scratch: Callable[[int], Any]) -> Any:
    """float32 values ``f`` (of ``x64``'s shape) whose cast to ``half`` (torch.bfloat16 or
    torch.float16) is ``x64`` rounded once, to nearest, ties to even.

    torch casts to 16 bits through float32. Rounding twice is wrong only where the float32
    lands exactly on a 16-bit midpoint from an inexact value; those values are stepped one
    float32 ulp toward the exact one, off the midpoint on its side (no float32 value lies
    between, so nothing else changes). Midpoints are found by a bit pattern
    (:data:`HALF_MIDPOINTS`): the minimum over blocks of 64 values of the masked bits (for
    bfloat16 of the low halves, read as int16: 0x8000 is their minimum) marks the few blocks
    that hold one, and only the values of those blocks that show the pattern are looked
    at: a few hundred per million. Any finite values, signed zeros and subnormals included.
    ``scratch(n)``: an int32 buffer of ``n`` values (asked for by float16 only)."""
    f.copy_(x64)
    flat = f.view(-1)
    name = dtype_name(half)
    mask, value = HALF_MIDPOINTS[name]
    whole = flat.shape[0] // BLOCK * BLOCK
    bits = flat[:whole].view(torch.int32)
    if name == "bfloat16":
        least = bits.view(torch.int16).view(-1, 2 * BLOCK).amin(dim=1)
        marked = least == -0x8000
    else:
        masked = torch.bitwise_and(bits, mask, out=scratch(whole))
        marked = masked.view(-1, BLOCK).amin(dim=1) == value
    blocks = marked.nonzero()
    at = (blocks * BLOCK + torch.arange(BLOCK, device=f.device)).view(-1)
    if whole < flat.shape[0]:
        at = torch.cat([at, torch.arange(whole, flat.shape[0], device=f.device)])
    near = flat.index_select(0, at)
    pick = ((near.view(torch.int32) & mask) == value).nonzero().view(-1)
    at, near = at.index_select(0, pick), near.index_select(0, pick)
    if at.numel():
        back = near.double()
        want = x64.reshape(-1).index_select(0, at)
        # a float32 past ``near`` on ``want``'s side, or ``near`` itself, signed zeros
        # kept, where exact: the difference (at least a float64 ulp of a 16-bit midpoint)
        # times 2^40 is far above ``near``'s float32 ulp
        toward = torch.sub(back, back - want, alpha=2.0**40).to(torch.float32)
        flat.index_copy_(0, at, torch.nextafter(near, toward))
    return f


Backend = NumpyBackend | TorchBackend


DOUBLINGS = 10  # levels per direct evaluation: errors grow to at most about 2**11 * 2^-52


def _doubling(
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


class Ops(Protocol):
    """The array operations the direct formula (:mod:`posenc._direct`) and the one rounding
    need; one implementation per library: :class:`NumpyOps`, :class:`TorchOps`,
    :class:`ArrayApiOps` (JAX, array-api-strict, CuPy). Names and meanings follow the Python
    Array API standard; ``like`` is an array whose device the result takes."""

    float32: Any
    float64: Any
    int32: Any
    int64: Any

    def asarray(self, values: Any, dtype: Any, like: Any) -> Any:
        """``values`` (a NumPy array or a list) as an array of ``dtype`` on ``like``'s device."""

    def astype(self, x: Any, dtype: Any) -> Any:
        """``x`` converted to ``dtype`` (round to nearest for floats)."""

    def take(self, x: Any, index: Any, axis: int) -> Any:
        """``x`` indexed along ``axis`` by the int64 array ``index``."""

    def stack(self, xs: list[Any], axis: int) -> Any:
        """Arrays of one shape stacked along a new ``axis``."""

    def concat(self, xs: list[Any], axis: int) -> Any:
        """Arrays joined along an existing ``axis``."""

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        """``x`` with a new shape of the same size."""

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any) -> Any:
        """An array of zeros on ``like``'s device."""

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        """``a`` where ``cond``, else ``b`` (broadcast)."""

    def sin(self, x: Any) -> Any:
        """Elementwise sine."""

    def cos(self, x: Any) -> Any:
        """Elementwise cosine."""

    def abs(self, x: Any) -> Any:
        """Elementwise magnitude."""

    def floor(self, x: Any) -> Any:
        """Elementwise floor (float in, float out)."""

    def round(self, x: Any) -> Any:
        """Elementwise nearest integer, ties to even (float in, float out)."""

    def bitcast(self, x: Any, dtype: Any) -> Any:
        """The bits of ``x`` read as ``dtype`` of the same width (float32 <-> int32)."""

    def cumsum(self, x: Any, axis: int) -> Any:
        """Cumulative sum along ``axis``."""

    def permute(self, x: Any, axes: tuple[int, ...]) -> Any:
        """``x`` with its axes reordered."""

    def arange(self, n: Any, like: Any, dtype: Any = None) -> Any:
        """``0, 1, …, n-1`` in ``dtype`` (default float64); ``n`` may be a symbolic size under
        tracing."""


class NumpyOps:
    """:class:`Ops` for NumPy (any NumPy from 1.24 on)."""

    float32, float64, int32, int64 = np.float32, np.float64, np.int32, np.int64

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

    sin, cos, abs = staticmethod(np.sin), staticmethod(np.cos), staticmethod(np.abs)
    floor, round = staticmethod(np.floor), staticmethod(np.rint)

    def bitcast(self, x: Any, dtype: Any) -> Any:
        return x.view(dtype)

    def cumsum(self, x: Any, axis: int) -> Any:
        return np.cumsum(x, axis=axis)

    def permute(self, x: Any, axes: tuple[int, ...]) -> Any:
        return x.transpose(axes)

    def arange(self, n: Any, like: Any, dtype: Any = None) -> Any:
        return np.arange(n, dtype=dtype or np.float64)


DEVICE_CONSTANTS = BoundedCache(64 << 20)
"""The direct formula's constants (frequencies, column orders) on devices other than the CPU,
by value, dtype and device."""


class TorchOps:
    """:class:`Ops` for PyTorch tensors; every op traces under ``torch.compile`` and export,
    and runs on meta tensors (shapes and dtypes only)."""

    def __init__(self) -> None:
        t = self.torch = _torch()
        self.float32, self.float64, self.int32, self.int64 = (
            t.float32,
            t.float64,
            t.int32,
            t.int64,
        )

    def asarray(self, values: Any, dtype: Any, like: Any) -> Any:
        """Constants (tuples of Python numbers). Eager on a device other than the CPU they
        are made once and kept there (:data:`DEVICE_CONSTANTS`): a copy from the host on
        every call would wait for it, and a CUDA graph cannot capture one."""
        t, device = self.torch, like.device
        if device.type == "cpu" or _tracing() or not isinstance(values, tuple):
            return t.tensor(values, dtype=dtype, device=device)

        def make() -> Any:
            with t.inference_mode(False):  # usable by autograd outside inference mode too
                return t.tensor(values, dtype=dtype, device=device)

        return DEVICE_CONSTANTS.get_or_make((values, dtype, device), make, nbytes)

    def astype(self, x: Any, dtype: Any) -> Any:
        return x.to(dtype)

    def take(self, x: Any, index: Any, axis: int) -> Any:
        return x.index_select(axis, index)

    def stack(self, xs: list[Any], axis: int) -> Any:
        return self.torch.stack(xs, dim=axis)

    def concat(self, xs: list[Any], axis: int) -> Any:
        return self.torch.cat(xs, dim=axis)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return x.reshape(shape)

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any) -> Any:
        return self.torch.zeros(shape, dtype=dtype, device=like.device)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return self.torch.where(cond, a, b)

    def sin(self, x: Any) -> Any:
        return x.sin()

    def cos(self, x: Any) -> Any:
        return x.cos()

    def abs(self, x: Any) -> Any:
        return x.abs()

    def floor(self, x: Any) -> Any:
        return x.floor()

    def round(self, x: Any) -> Any:
        return x.round()

    def bitcast(self, x: Any, dtype: Any) -> Any:
        return x.view(dtype)

    def cumsum(self, x: Any, axis: int) -> Any:
        return x.cumsum(axis)

    def permute(self, x: Any, axes: tuple[int, ...]) -> Any:
        return x.permute(axes)

    def arange(self, n: Any, like: Any, dtype: Any = None) -> Any:
        return self.torch.arange(n, dtype=dtype or self.torch.float64, device=like.device)


class ArrayApiOps:
    """:class:`Ops` for any Python Array API namespace (JAX, array-api-strict, CuPy)."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.float32, self.float64, self.int32, self.int64 = (
            xp.float32,
            xp.float64,
            xp.int32,
            xp.int64,
        )
        jax = sys.modules.get("jax")
        if jax is not None and xp.__name__.startswith("jax") and not jax.config.jax_enable_x64:
            self.int64 = xp.int32  # JAX without x64 has no int64; indices fit in int32

    def asarray(self, values: Any, dtype: Any, like: Any) -> Any:
        return self.xp.asarray(values, dtype=dtype, device=_device(like))

    def astype(self, x: Any, dtype: Any) -> Any:
        return self.xp.astype(x, dtype)

    def take(self, x: Any, index: Any, axis: int) -> Any:
        return self.xp.take(x, index, axis=axis)

    def stack(self, xs: list[Any], axis: int) -> Any:
        return self.xp.stack(xs, axis=axis)

    def concat(self, xs: list[Any], axis: int) -> Any:
        return self.xp.concat(xs, axis=axis)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return self.xp.reshape(x, shape)

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any) -> Any:
        return self.xp.zeros(shape, dtype=dtype, device=_device(like))

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return self.xp.where(cond, a, b)

    def sin(self, x: Any) -> Any:
        return self.xp.sin(x)

    def cos(self, x: Any) -> Any:
        return self.xp.cos(x)

    def abs(self, x: Any) -> Any:
        return self.xp.abs(x)

    def floor(self, x: Any) -> Any:
        return self.xp.floor(x)

    def round(self, x: Any) -> Any:
        return self.xp.round(x)

    def bitcast(self, x: Any, dtype: Any) -> Any:
        from jax import lax  # 16-bit float dtypes reach here only from JAX

        return lax.bitcast_convert_type(x, dtype)

    def cumsum(self, x: Any, axis: int) -> Any:
        return self.xp.cumulative_sum(x, axis=axis)

    def permute(self, x: Any, axes: tuple[int, ...]) -> Any:
        return self.xp.permute_dims(x, axes)

    def arange(self, n: Any, like: Any, dtype: Any = None) -> Any:
        return self.xp.arange(n, dtype=dtype or self.xp.float64, device=_device(like))


def ops_for(x: Any) -> Ops:
    """The :class:`Ops` of ``x``'s library."""
    if is_torch(x):
        return TorchOps()
    xp = array_namespace(x)
    return NUMPY_OPS if xp is None else ArrayApiOps(xp)


def _device(like: Any) -> Any:
    return getattr(like, "device", None) if like is not None else None


def round_to_odd(x64: Any, ops: Ops) -> Any:
    """float64 -> float32 rounded to odd: exact values stay, an inexact one becomes the
    neighbour (of the two around it) whose last bit is set.

    Round to nearest, step back toward zero where that went away from zero (the truncation),
    then set the last bit where the value was inexact: int32 work only, a few passes.
    """
    f = ops.astype(x64, ops.float32)
    back = ops.astype(f, ops.float64)
    away = ops.astype(ops.abs(back) > ops.abs(x64), ops.int32)
    inexact = ops.astype(back != x64, ops.int32)
    return ops.bitcast((ops.bitcast(f, ops.int32) - away) | inexact, ops.float32)


def round_once(x64: Any, dtype: Any, ops: Ops) -> Any:
    """float64 values rounded once to ``dtype`` (to odd first for 16-bit dtypes, so the
    second rounding is correct, except where the cast itself rounds once)."""
    if _itemsize(dtype) == 2 and not (isinstance(ops, NumpyOps) and _direct_half(dtype)):
        return ops.astype(round_to_odd(x64, ops), dtype)
    return ops.astype(x64, dtype)


def _direct_half(dtype: Any) -> bool:
    """NumPy casts float64 to float16 directly from the double's bits, rounding once (to
    nearest even), so that cast needs no round to odd first; torch and ml_dtypes' bfloat16
    pass through float32 and do."""
    return dtype_name(dtype) == "float16" and not is_torch_dtype(dtype)


def is_torch_dtype(dtype: Any) -> bool:
    return type(dtype).__module__ == "torch"


def dtype_name(dtype: Any) -> str:
    """``float32``, ``bfloat16``… of a float dtype of any library (NumPy, torch, JAX,
    array-api-strict); ``None`` is posenc's default, float32."""
    if dtype is None:
        return "float32"
    try:
        return str(np.dtype(dtype).name)
    except TypeError:
        return str(getattr(dtype, "name", None) or dtype).rsplit(".", 1)[-1]


# ---------------------------------------------------------------------------------------------
# the originals' torch arithmetic (compat modes), for NumPy or torch positions


def compat_torch(compat: str) -> Any:
    """torch, which a ``compat`` mode computes with (the originals are torch code)."""
    try:
        import torch
    except ImportError:
        raise PosencError(
            f"`compat={compat!r}` computes with torch: pip install 'posenc[torch]'"
        ) from None
    return torch


def compat_dtype(torch: Any, dtype: Any, default: Any) -> Any:
    """The torch float dtype a compat result is cast to (``default`` for None)."""
    if dtype is None:
        return default
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return dtype
    name = dtype_name(dtype)
    if name not in ("float16", "bfloat16", "float32", "float64"):
        raise PosencError(f"`dtype` must be a float dtype, got {dtype!r}")
    return getattr(torch, name)


def compat_in(torch: Any, x: Any) -> tuple[Any, bool]:
    """Positions as a torch tensor, and whether they came as NumPy (and go back so)."""
    if is_torch(x):
        return x, False
    return torch.from_numpy(np.ascontiguousarray(x)), True


def compat_out(torch: Any, outs: tuple[Any, ...], numpy_out: bool) -> tuple[Any, ...]:
    """Compat results in the caller's library: NumPy for NumPy positions."""
    if not numpy_out:
        return outs
    if any(o.dtype == torch.bfloat16 for o in outs):
        raise PosencError("`dtype` bfloat16 has no NumPy form: pass torch positions")
    return tuple(o.numpy() for o in outs)


def _itemsize(dtype: Any) -> int:
    """Bytes of a float dtype of any library."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    return {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}.get(dtype_name(dtype), 8)


NUMPY_OPS = NumpyOps()


def backend_for(dtype: Any = None, device: Any = None, like: Any = None) -> Backend:
    """The backend and output dtype for a call; ``like`` is the positions argument."""
    torch = _torch()
    wants_torch = (
        is_torch(like)
        or device is not None
        or (torch is not None and isinstance(dtype, torch.dtype))
    )
    if wants_torch:
        if torch is None:
            try:
                import torch
            except ImportError:  # pragma: no cover - depends on the environment
                raise PosencError("`device` needs PyTorch: pip install 'posenc[torch]'") from None
        if device is None:
            device = like.device if is_torch(like) else torch.device("cpu")
        return TorchBackend(_torch_dtype(torch, dtype), check_device(torch, device))
    return NumpyBackend(_numpy_dtype(dtype))


def _torch_dtype(torch: Any, dtype: Any) -> Any:
    if dtype is None:
        return torch.get_default_dtype()
    if isinstance(dtype, torch.dtype):
        out = dtype
    else:
        name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
        out = getattr(torch, name, None)
    if not isinstance(out, torch.dtype) or not out.is_floating_point or out.itemsize < 2:
        raise PosencError(
            "`dtype` must be a floating dtype of 16 bits or more (float16, bfloat16, float32, "
            f"float64), got {dtype!r}"
        )
    return out


def _numpy_dtype(dtype: Any) -> np.dtype:
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
