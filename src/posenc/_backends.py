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

import sys
from typing import Any

import numpy as np

from ._errors import PosencError

_NUMPY_FLOATS = ("float16", "float32", "float64")


def _torch() -> Any:
    return sys.modules.get("torch")


def is_torch(x: object) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


class NumpyBackend:
    name = "numpy"

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.sixteen = dtype.itemsize == 2

    def empty(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.empty(shape, dtype=self.dtype)

    def zeros(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.zeros(shape, dtype=self.dtype)

    def f64(self, x: Any) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)

    def sincos(self, theta: np.ndarray) -> np.ndarray:
        """[..., n] angles -> [..., 2n] float64 with sin at even and cos at odd columns."""
        out = np.empty((*theta.shape, 2), dtype=np.float64)
        np.sin(theta, out=out[..., 0])
        np.cos(theta, out=out[..., 1])
        return out.reshape(*theta.shape[:-1], -1)

    def phasors(self, theta: np.ndarray, *, coarse: bool) -> np.ndarray:
        """Complex factors whose products are ``sin + i cos`` of summed angles.

        coarse: ``i * exp(-i theta) = sin + i cos``; fine: ``exp(-i theta)``. Then
        ``coarse(a) * fine(b) = sin(a + b) + i cos(a + b)``, whose float64 view is the
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

    def product(self, coarse: np.ndarray, fine: np.ndarray) -> np.ndarray:
        return np.multiply(coarse, fine).view(np.float64)

    def take(self, x: np.ndarray, index: np.ndarray) -> np.ndarray:
        return np.take(x, index, axis=0)

    def rounded(self, x64: np.ndarray) -> np.ndarray:
        """float64 values ready to be stored with one correct rounding."""
        return round_to_odd(x64, np) if self.sixteen else x64


class TorchBackend:
    name = "torch"

    def __init__(self, dtype: Any, device: Any) -> None:
        self.torch = _torch()
        self.dtype = dtype
        self.device = device
        self.sixteen = dtype.itemsize == 2

    def empty(self, shape: tuple[int, ...]) -> Any:
        return self.torch.empty(shape, dtype=self.dtype, device=self.device)

    def zeros(self, shape: tuple[int, ...]) -> Any:
        return self.torch.zeros(shape, dtype=self.dtype, device=self.device)

    def f64(self, x: Any) -> Any:
        t = self.torch
        if isinstance(x, t.Tensor):
            return x.to(device=self.device, dtype=t.float64)
        return t.as_tensor(np.asarray(x, dtype=np.float64), device=self.device)

    def sincos(self, theta: Any) -> Any:
        t = self.torch
        return t.stack((t.sin(theta), t.cos(theta)), dim=-1).flatten(-2)

    def phasors(self, theta: Any, *, coarse: bool) -> Any:
        t = self.torch
        if coarse:
            return t.complex(t.sin(theta), t.cos(theta))
        return t.complex(t.cos(theta), -t.sin(theta))

    def product(self, coarse: Any, fine: Any) -> Any:
        return self.torch.view_as_real(coarse * fine).flatten(-2)

    def take(self, x: Any, index: Any) -> Any:
        return x[self.torch.as_tensor(index, device=x.device)]

    def rounded(self, x64: Any) -> Any:
        return round_to_odd(x64, self.torch) if self.sixteen else x64


Backend = NumpyBackend | TorchBackend


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
