"""Backends: the one place that knows NumPy from PyTorch.

The engine asks a backend for a handful of array operations; NumPy is the reference and the
only hard dependency. PyTorch is used only when the caller hands over a tensor, a torch dtype
or a device (it is never imported otherwise), in the manner of einops.

All angles are computed in float64 and rounded once, at the end, to the output dtype. For
16-bit outputs the float64 values are first rounded to float32 *to odd* (a float32 with its
last bit set when inexact): float32 has more than two extra bits over float16 and bfloat16,
so the second rounding is then correct, which a plain float64 -> float32 -> 16-bit cast is
not (double rounding).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ._errors import PosencError, check_int

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


def set_num_threads(n: int) -> None:
    """Threads the NumPy path uses for large tables (default ``POSENC_NUM_THREADS`` or 1).
    The PyTorch path follows ``torch.set_num_threads``."""
    global _threads, _pool
    _threads = check_int("n", n, minimum=1)
    if _pool is not None:
        _pool.shutdown()
        _pool = None


def get_num_threads() -> int:
    """Threads the NumPy path uses."""
    return _threads


def _run_threads(work: Callable[[int, int], None], ranges: list[tuple[int, int]]) -> None:
    global _pool
    if _threads == 1 or len(ranges) < 4:
        for lo, hi in ranges:
            work(lo, hi)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_threads, thread_name_prefix="posenc")
    for future in [_pool.submit(work, lo, hi) for lo, hi in ranges]:
        future.result()


def _torch() -> Any:
    return sys.modules.get("torch")


def is_torch(x: object) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


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
        """dtype of the basis before it reaches the output: float64 where 16-bit output
        needs rounding to odd first, else the output dtype (one rounding, fused)."""
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
        return round_to_odd(basis, np) if self.sixteen else basis


class TorchBackend(_Chunked):
    name = "torch"
    chunk = 1 << 19  # float64 values per chunk: torch's per-call overhead is larger

    def __init__(self, dtype: Any, device: Any) -> None:
        self.torch = _torch()
        self.dtype = dtype
        self.device = device
        self.sixteen = dtype.itemsize == 2

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
        return self.torch.empty((rows, width), dtype=dtype, device=self.device)

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
        t.mul(coarse, fine, out=t.view_as_complex(into.view(*into.shape[:-1], -1, 2)))

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
        return round_to_odd(basis, self.torch) if self.sixteen else basis


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


def round_to_odd(x64: Any, xp: Any) -> Any:
    """float64 -> float32 rounded to odd: exact values stay, inexact ones get an odd last bit."""
    f = x64.astype(xp.float32) if xp is np else x64.to(xp.float32)
    inexact = f != x64
    bits = f.view(xp.int32)
    even = (bits & 1) == 0
    step = xp.where(xp.abs(f) > xp.abs(x64), -1, 1)
    bits = bits + (inexact & even) * step
    return (bits.astype(np.int32) if xp is np else bits.to(xp.int32)).view(xp.float32)


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
        device = torch.device(device)
        return TorchBackend(_torch_dtype(torch, dtype), device)
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
