"""Which array library a call is in: the one place that tells NumPy, PyTorch and the Array API
libraries apart, and hands out their backends (:mod:`.base` documents the contract).

NumPy is the reference and the only hard dependency. PyTorch is used only when the caller
hands over a tensor, a torch dtype or a device (:mod:`.torch` is never imported otherwise), in
the manner of einops; an Array API library (JAX, array-api-strict, CuPy) when the caller's
array belongs to one. Adding a library is one file beside these and a branch here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from posenc.errors import PosencError
from posenc.evaluate.libs.base import Backend
from posenc.evaluate.libs.numpy import NUMPY, NumpyBackend, host_positions
from posenc.evaluate.positions import Positions


def _torch() -> Any:
    return sys.modules.get("torch")


def is_torch(x: object) -> bool:
    """``x`` is a torch tensor (False, without importing torch, when torch is not loaded)."""
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def is_torch_dtype(dtype: object) -> bool:
    """``dtype`` is a torch dtype."""
    torch = _torch()
    return torch is not None and isinstance(dtype, torch.dtype)


def array_namespace(x: Any) -> Any | None:
    """The Array API namespace of ``x`` for arrays that are neither NumPy nor torch (JAX,
    array-api-strict, CuPy), else None."""
    if x is None or isinstance(x, (np.ndarray, np.generic)) or is_torch(x):
        return None
    if not hasattr(x, "__array_namespace__"):
        return None
    return x.__array_namespace__()


def _torch_backend(dtype: Any, device: Any) -> Backend:
    try:
        from posenc.evaluate.libs.torch import TorchBackend
    except ImportError:  # pragma: no cover - depends on the environment
        raise PosencError("`device` needs PyTorch: pip install 'posenc[torch]'") from None
    return TorchBackend(dtype, device)


def backend_for(dtype: Any = None, device: Any = None, like: Any = None) -> Backend:
    """The backend of a call whose result follows ``like`` (the positions, or the ``like=``
    argument), in ``dtype`` (checked: a float dtype of that library) on ``device``.

    A torch tensor, a torch dtype or a ``device`` give torch output, on ``like``'s device when
    no ``device`` is given; an Array API array gives that library's; anything else NumPy."""
    if is_torch(like):
        return _torch_backend(dtype, like.device if device is None else device)
    if device is not None or is_torch_dtype(dtype):
        return _torch_backend(dtype, device)
    xp = array_namespace(like)
    if xp is not None:
        if device is not None:
            raise PosencError("`device` applies to torch output only; the result follows `like`")
        from posenc.evaluate.libs.array_api import ArrayApiBackend

        return ArrayApiBackend(xp, dtype)
    return NumpyBackend(dtype) if dtype is not None else NUMPY


def backend_of(x: Any) -> Backend:
    """The backend of ``x``'s library (for its array operations)."""
    if is_torch(x):
        return _torch_backend(None, x.device)
    xp = array_namespace(x)
    if xp is None:
        return NUMPY
    from posenc.evaluate.libs.array_api import ArrayApiBackend

    return ArrayApiBackend(xp)


def as_positions(positions: Any, name: str = "positions", *, on_device: bool = False) -> Positions:
    """Positions of any library, checked: integers or reals (no bools, complex or objects),
    finite, within +-2^53; unsigned and narrow integers become int64, float16 float32.

    ``on_device`` (module forwards): a torch tensor on an accelerator is checked there, by
    assertions in its stream, and never read on the host, so the call neither waits for the
    device nor breaks a CUDA graph; its bounds are then unknown.
    """
    if is_torch(positions) or array_namespace(positions) is not None:
        return backend_of(positions).positions(positions, name, on_device)
    return host_positions(positions, name)


def tracing() -> bool:
    """Inside a tracer of a loaded library (``torch.compile``, ``torch.export``,
    ``torch.jit.trace``), where values cannot be read."""
    if _torch() is None:
        return False
    global _torch_tracing
    if _torch_tracing is None:
        from posenc.evaluate.libs.torch import tracing as found

        _torch_tracing = found
    return _torch_tracing()


_torch_tracing: Callable[[], bool] | None = None
