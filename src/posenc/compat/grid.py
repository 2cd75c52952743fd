"""What the grid replays of the ``compat/`` modules share (``posenc.rope_grid(...,
compat=…)``): the device they compute on and the form of their result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from posenc.evaluate.libs.torch import compat_dtype, compat_out


@dataclass(frozen=True)
class GridCall:
    """One ``posenc.rope_grid(..., compat=…)`` call as the replays take it
    (``rotary_grid(call)`` in each ``compat/`` module of ``api/rope_grid.py``'s ``ORIGINALS``):
    the preset's name, the mode, the grid, the checked :class:`~posenc.spec.rotary.Rotary`,
    the grid axis of each block, each axis's ``start`` and ``step``, whether they came from
    ``crop=``, and the output's ``dtype``, ``device`` and ``like``."""

    family: str
    compat: str
    dims: tuple[int, ...]
    r: Any
    blocks: tuple[int, ...]
    starts: tuple[float, ...]
    steps: tuple[float, ...]
    cropped: bool = False
    dtype: Any = None
    device: Any = None
    like: Any = None


def compat_grid(
    compute: Callable[[torch.device], tuple[torch.Tensor, torch.Tensor]], call: GridCall
) -> tuple[Any, Any]:
    """A compat replay's grid tables ``compute(work) -> (cos, sin)``: computed on the device
    the call asks for (``device``, else ``like``'s, else the CPU), cast to its ``dtype``, NumPy
    unless torch is asked for (a torch ``dtype``, ``device`` or ``like``). The default dtype
    is the exact mode's: float32 for NumPy, torch's default dtype for torch (the values are
    the original's, only held in it)."""
    dtype, device, like = call.dtype, call.device, call.like
    out_device = like.device if isinstance(like, torch.Tensor) and device is None else device
    work = torch.device(out_device) if out_device is not None else torch.device("cpu")
    torch_out = (
        isinstance(dtype, torch.dtype) or out_device is not None or isinstance(like, torch.Tensor)
    )
    out = compat_dtype(dtype, torch.get_default_dtype() if torch_out else torch.float32)
    cos, sin = compute(work)
    pair = compat_out((cos.to(out), sin.to(out)), numpy_out=not torch_out)
    return pair[0], pair[1]
