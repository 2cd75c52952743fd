"""What the grid replays of the ``compat/`` modules share (``posenc.rope_grid(...,
compat=…)``): the device they compute on and the form of their result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from posenc.evaluate.libs.torch import compat_dtype, compat_out


def compat_grid(
    compute: Callable[[torch.device], tuple[torch.Tensor, torch.Tensor]],
    *,
    dtype: Any,
    device: Any,
    like: Any,
) -> tuple[Any, Any]:
    """A compat replay's grid tables ``compute(work) -> (cos, sin)``: computed on the device
    asked for (``device``, else ``like``'s, else the CPU), cast to ``dtype``, NumPy unless torch
    is asked for (a torch ``dtype``, ``device`` or ``like``). The default dtype is the exact
    mode's: float32 for NumPy, torch's default dtype for torch (the values are the
    original's, only held in it)."""
    out_device = like.device if isinstance(like, torch.Tensor) and device is None else device
    work = torch.device(out_device) if out_device is not None else torch.device("cpu")
    torch_out = (
        isinstance(dtype, torch.dtype) or out_device is not None or isinstance(like, torch.Tensor)
    )
    out = compat_dtype(dtype, torch.get_default_dtype() if torch_out else torch.float32)
    cos, sin = compute(work)
    pair = compat_out((cos.to(out), sin.to(out)), numpy_out=not torch_out)
    return pair[0], pair[1]
