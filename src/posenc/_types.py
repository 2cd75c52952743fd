"""Names for the types of the public signatures (for type checkers; nothing here runs).

The return type of ``table``, ``encode``, ``grid``, ``rope``, ``apply_rope`` and ``detr``
follows the library of the input: NumPy in, NumPy out; a torch tensor, a torch dtype or a
device in, a torch tensor out; anything else (JAX, an Array API library) is ``Any``. The
overloads in :mod:`posenc.api.sinusoidal` and :mod:`posenc.api.rope` say so to a type checker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
from numpy.typing import DTypeLike, NDArray

if TYPE_CHECKING:
    import torch

    Tensor: TypeAlias = torch.Tensor
    TorchDType: TypeAlias = torch.dtype
    Device: TypeAlias = torch.device | str | int

Floats: TypeAlias = NDArray[np.floating[Any]]
"""A NumPy array of floats (the dtype asked for: float32 by default)."""

ArrayLike: TypeAlias = np.ndarray | Sequence[Any] | float
"""Positions NumPy takes: an array, (nested) lists, a number."""

NumpyDType: TypeAlias = DTypeLike
"""A NumPy dtype, its name, or None (float32)."""
