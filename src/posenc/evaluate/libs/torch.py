"""PyTorch: its backend, its input handling (tensors as positions, devices, dtypes), whether
a call is traced, checks that run on the device, the 16-bit rounding of the engine's tables,
and the helpers of the originals' float32 torch arithmetic (``compat`` modes).

Imported only once the caller has handed over a tensor, a torch dtype or a device (or asked
for a ``compat`` mode), in the manner of einops: ``import posenc`` never imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from posenc.cache import BoundedCache, nbytes
from posenc.errors import MAX_POSITION, PosencError, show
from posenc.evaluate.libs.base import Backend, doubling, dtype_name
from posenc.evaluate.libs.numpy import host_memory, host_positions
from posenc.evaluate.positions import Positions, checked_positions


def _start_threads() -> None:
    """Start torch's intra-op worker threads with one parallel op, once, before posenc's first.

    With torch 2.13.0+cpu on an AVX-512 CPU, 2 threads, the first parallel ``torch.sin`` of a
    fresh process is sometimes wrong when the machine is busy: 1 of 160 fresh processes beside
    three busy ones (``python -m benchmarks.torch_sin_first_call 160 --jobs 2 --load 3``; a
    float64 sine off by 6.8e-9), and an audit's float32 error read 1.5e-4 instead of 4.9e-7;
    0 of 120 on an idle AVX2 machine. A torch bug, but it would make a first
    table (and a compat replay's "bit for bit") wrong: one throwaway op on zeros keeps posenc's
    own calls, and those of the originals it is compared with once posenc is imported, out of
    it."""
    if torch.get_num_threads() > 1:
        torch.sin(torch.zeros(1 << 17))


_start_threads()

# ---------------------------------------------------------------------------------------------
# the library: tracing, devices, dtypes, positions


def tracing() -> bool:
    """Inside ``torch.compile``, ``torch.export`` or ``torch.jit.trace`` (where values cannot
    be read, and what is recorded must not depend on them)."""
    compiler = torch.compiler
    return bool(compiler.is_compiling() or compiler.is_exporting() or torch.jit.is_tracing())  # type: ignore[attr-defined,no-untyped-call]


def check_device(device: Any) -> torch.device:
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


def torch_dtype(dtype: Any) -> torch.dtype:
    """``dtype`` (a torch dtype, a NumPy one or a name) as a torch float dtype of 16 bits or
    more; None is torch's default dtype."""
    if dtype is None:
        return torch.get_default_dtype()
    out: Any
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


def assert_on_device(ok: torch.Tensor, message: str) -> None:
    """A check of torch values that are not read on the host: every element of the boolean
    tensor ``ok`` must be true. It runs in the values' stream (``torch._assert_async``), so it
    neither synchronises nor breaks a CUDA graph, and it is recorded in compiled and exported
    graphs. A failure raises ``message`` on the CPU and under ``torch.compile``; on CUDA it is
    a device-side assertion, as for PyTorch's own index checks (fatal to the CUDA context)."""
    torch._assert_async(ok.all(), message)


def assert_bounded(t: torch.Tensor, message: str, limit: float = MAX_POSITION) -> None:
    """:func:`assert_on_device`: every value of ``t`` finite and of magnitude at most
    ``limit``."""
    assert_on_device(t.abs() <= limit, message)


_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


def tensor_positions(t: torch.Tensor, name: str, on_device: bool) -> Positions:
    """A tensor checked as positions (see :meth:`Backend.positions`)."""
    if t.is_complex() or t.dtype == torch.bool:
        raise PosencError(f"`{name}` must hold integers or real numbers, got {t.dtype}")
    integral = not t.is_floating_point()
    unsigned = t.dtype in _UNSIGNED
    read = not (t.is_meta or tracing() or (on_device and t.device.type != "cpu"))
    if read and unsigned:
        # torch has few kernels for wide unsigned types: check on the host, once
        host = host_positions(np.asarray(t.cpu()), name)
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
        assert_bounded(t, f"`{name}` must be finite and within +-2^53")
        return Positions(t, integral, None, None)
    if not t.numel():
        return Positions(t, integral, 0.0, 0.0)
    with torch.no_grad():  # reading bounds records nothing (positions may require grad)
        low, high = float(t.min()), float(t.max())
    if not integral and not (math.isfinite(low) and math.isfinite(high)):
        flat = t.detach().reshape(-1)
        raise PosencError(
            f"`{name}` must be finite, got a value of {float(flat[~flat.isfinite()][0])}"
        )
    return checked_positions(name, t, integral, low, high)


# ---------------------------------------------------------------------------------------------
# the originals' float32 torch arithmetic (compat modes), for NumPy or torch positions


def compat_dtype(dtype: Any, default: torch.dtype) -> torch.dtype:
    """The torch float dtype a compat result is cast to (``default`` for None)."""
    if dtype is None:
        return default
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return dtype
    name = dtype_name(dtype)
    if name not in ("float16", "bfloat16", "float32", "float64"):
        raise PosencError(f"`dtype` must be a float dtype, got {dtype!r}")
    out: torch.dtype = getattr(torch, name)
    return out


def compat_in(x: Any) -> tuple[torch.Tensor, bool]:
    """Positions as a torch tensor, and whether they came as NumPy (and go back so)."""
    if isinstance(x, torch.Tensor):
        return x, False
    return torch.from_numpy(np.ascontiguousarray(x)), True


def compat_out(outs: tuple[torch.Tensor, ...], numpy_out: bool) -> tuple[Any, ...]:
    """Compat results in the caller's library: NumPy for NumPy positions."""
    if not numpy_out:
        return outs
    if any(o.dtype == torch.bfloat16 for o in outs):
        raise PosencError("`dtype` bfloat16 has no NumPy form: pass torch positions")
    return tuple(o.numpy() for o in outs)


# ---------------------------------------------------------------------------------------------
# the engine's 16-bit rounding


HALF_MIDPOINTS = {"bfloat16": (0xFFFF, 0x8000), "float16": (0xFFF, 0)}
"""float32 bit patterns (``bits & mask == value``) that include every midpoint of a 16-bit
format: bfloat16's are the float32 values whose low 16 bits are 0x8000 (subnormals alike);
float16's have their low 12 bits zero (0x1000 in the low 13 for normal values, a higher
single bit for subnormal ones, whose spacing is a fixed 2^-24, and 65520, the overflow
threshold)."""

BLOCK = 64  # float32 values per block of the midpoint search


def ready_for_half(
    x64: torch.Tensor, half: torch.dtype, f: torch.Tensor, scratch: Callable[[int], Any]
) -> torch.Tensor:
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


# ---------------------------------------------------------------------------------------------
# the backend


DEVICE_CONSTANTS = BoundedCache(64 << 20)
"""The direct formula's constants (frequencies, column orders) on devices other than the CPU,
by value, dtype and device."""


class TorchBackend(Backend):
    """PyTorch tensors. The array operations trace under ``torch.compile`` and export, and run
    on meta tensors (shapes and dtypes only); the engine's chunks run one after another
    (torch ops use torch's own threads) in buffers kept from chunk to chunk."""

    name = "torch"
    has_engine = True
    chunk = 1 << 19  # float64 values per chunk: torch's per-call overhead is larger
    float32, float64, int32, int64 = torch.float32, torch.float64, torch.int32, torch.int64

    def __init__(self, dtype: Any = None, device: Any = None) -> None:
        self.dtype = torch_dtype(dtype)
        self.device = torch.device("cpu") if device is None else check_device(device)
        self._buffers: dict[tuple[str, Any], torch.Tensor] = {}

    # -- the library

    def positions(self, x: Any, name: str, on_device: bool) -> Positions:
        return tensor_positions(x, name, on_device)

    def direct(self, on_device: bool) -> bool:
        kind = self.device.type
        return tracing() or kind in ("meta", "mps") or (on_device and kind != "cpu")

    def float32_only(self) -> bool:
        return self.device.type == "mps" or bool(torch.compiler.is_exporting())

    def traced(self) -> bool:
        return tracing()

    def anchor(self, like: Any) -> Any:
        if isinstance(like, torch.Tensor):
            return like
        return torch.empty(0, device=self.device)

    def memory(self) -> int:
        kind = self.device.type
        if kind == "cuda":
            return int(torch.cuda.mem_get_info(self.device)[1])
        return host_memory() if kind == "cpu" else 1 << 62

    def check_on_device(self, x: Any, limit: float, message: str) -> None:
        assert_bounded(x, message, limit)

    def from_numpy(self, array: np.ndarray) -> Any:
        return torch.from_numpy(array).to(self.device)

    # -- array operations

    def asarray(self, values: Any, dtype: Any, like: Any) -> Any:
        """Constants (tuples of Python numbers). Eager on a device other than the CPU they
        are made once and kept there (:data:`DEVICE_CONSTANTS`): a copy from the host on
        every call would wait for it, and a CUDA graph cannot capture one."""
        device = like.device
        if device.type == "cpu" or tracing() or not isinstance(values, tuple):
            return torch.tensor(values, dtype=dtype, device=device)

        def make() -> Any:
            with torch.inference_mode(False):  # usable by autograd outside inference mode too
                return torch.tensor(values, dtype=dtype, device=device)

        return DEVICE_CONSTANTS.get_or_make((values, dtype, device), make, nbytes)

    def astype(self, x: Any, dtype: Any) -> Any:
        return x.to(dtype)

    def take(self, x: Any, index: Any, axis: int) -> Any:
        return x.index_select(axis, index)

    def stack(self, xs: list[Any], axis: int) -> Any:
        return torch.stack(xs, dim=axis)

    def concat(self, xs: list[Any], axis: int) -> Any:
        return torch.cat(xs, dim=axis)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return x.reshape(shape)

    def zeros(self, shape: tuple[int, ...], dtype: Any, like: Any) -> Any:
        return torch.zeros(shape, dtype=dtype, device=like.device)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return torch.where(cond, a, b)

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
        return torch.arange(n, dtype=dtype or torch.float64, device=like.device)

    # -- the exact engine

    def _reused(self, slot: str, shape: tuple[int, ...], dtype: Any) -> torch.Tensor:
        """A tensor of ``shape`` from the buffer ``slot``, kept from chunk to chunk: chunks
        run one after another, and a fresh CPU temporary of a few MiB costs more in page
        faults than the arithmetic done in it."""
        n = int(np.prod(shape))
        buf = self._buffers.get((slot, dtype))
        if buf is None or buf.numel() < n:
            buf = self._buffers[slot, dtype] = torch.empty(n, dtype=dtype, device=self.device)
        return buf[:n].view(shape)

    def empty(self, shape: tuple[int, ...]) -> Any:
        if self.device.type == "cpu" and int(np.prod(shape)) >= 1 << 20:
            # NumPy backs large arrays with huge pages; torch's CPU allocator does not, and
            # first-touch page faults then cost more than computing the table
            raw = np.empty(shape, dtype=f"i{self.dtype.itemsize}")
            return torch.from_numpy(raw).view(self.dtype)
        return torch.empty(shape, dtype=self.dtype, device=self.device)

    def f64(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.to(device=self.device, dtype=torch.float64)
        return torch.as_tensor(np.asarray(x, dtype=np.float64), device=self.device)

    def temp(self, rows: int, width: int, *, exact: bool = False) -> Any:
        dtype = torch.float64 if exact or self.sixteen else self.dtype
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
        pairs[..., 0] = torch.sin(theta)
        pairs[..., 1] = torch.cos(theta)

    def sincos_doubling(self, theta: Any, n: int, into: Any) -> None:
        z = torch.empty((n, theta.shape[0]), dtype=torch.complex128, device=self.device)

        def seed(k: int, a: Any) -> None:
            z[k] = torch.complex(torch.cos(a), torch.sin(a))

        def square(k: int) -> None:
            torch.mul(z[k - 1], z[k - 1], out=z[k])

        doubling(z, theta[:, 0], seed, square)
        pairs = into.view(theta.shape[0], n, 2)
        pairs[..., 0].copy_(z.imag.T)
        pairs[..., 1].copy_(z.real.T)

    def phasors(self, theta: Any, *, coarse: bool) -> Any:
        if coarse:
            return torch.complex(torch.sin(theta), torch.cos(theta))
        return torch.complex(torch.cos(theta), -torch.sin(theta))

    def product(self, coarse: Any, fine: Any, into: Any) -> None:
        pairs = into.view(*into.shape[:-1], -1, 2)
        if into.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in pairs.stride()[:-1]):
            torch.mul(coarse, fine, out=torch.view_as_complex(pairs))
        else:  # a complex view needs even strides: odd widths (NeRF, tatp22) get a copy
            pairs.copy_(torch.view_as_real(coarse * fine))

    def rows(self, x: Any, index: np.ndarray) -> Any:
        return x[torch.as_tensor(index, device=x.device)]

    def contiguous(self, x: Any, dtype: Any) -> Any:
        return x.to(dtype)

    def complex(self, z: np.ndarray) -> Any:
        return torch.from_numpy(z).to(self.device)

    def gather_rows(self, table: Any, index: np.ndarray, out: Any) -> None:
        torch.index_select(table, 0, torch.as_tensor(index, device=table.device), out=out)

    def rounded(self, basis: Any) -> Any:
        """The basis itself, or for a 16-bit output float32 values that torch's cast rounds
        as ``basis`` would be rounded once (:func:`ready_for_half`, in buffers kept from
        chunk to chunk)."""
        if not self.sixteen:
            return basis
        f = self._reused("float32", basis.shape, torch.float32)
        return ready_for_half(basis, self.dtype, f, self._key)

    def _key(self, n: int) -> Any:
        """int32 scratch of ``n`` values, kept from chunk to chunk (float16's midpoint
        search)."""
        return self._reused("key", (n,), torch.int32)
