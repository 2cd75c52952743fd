"""PyTorch's file format for the command line: ``.pt`` tables written and read, and what a
loaded tensor holds (``posenc table -o x.pt``, ``posenc identify x.pt``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch


def save_pt(path: Path, array: Any, name: str) -> None:
    """``array`` (NumPy or torch) saved as ``path``, under ``name`` when given."""
    tensor = array if isinstance(array, torch.Tensor) else torch.from_numpy(array)
    torch.save({name: tensor} if name else tensor, path)


def load_pt(path: Path) -> dict[str, Any]:
    """Every tensor or NumPy array in a ``.pt`` file, by dotted name (nested dicts, lists and
    tuples flattened), loaded with ``weights_only=True``."""
    rebuild = np.zeros(1).__reduce__()[0]  # how pickle rebuilds an ndarray, on any NumPy
    arrays: list[Any] = [rebuild, np.ndarray, np.dtype]  # NumPy arrays inside a .pt load too
    arrays += [getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith("DType")]
    with torch.serialization.safe_globals(arrays):
        obj = torch.load(path, map_location="cpu", weights_only=True)
    return _flatten(obj)


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return {prefix: obj}
    items: Any = obj.items() if isinstance(obj, dict) else ()
    if isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def real_dtype(value: torch.Tensor) -> tuple[bool, str]:
    """Whether a loaded tensor holds real numbers (floating or integer) in a dense layout,
    and its dtype's name."""
    dtype = value.dtype
    ok = (
        value.layout == torch.strided
        and not value.is_quantized
        and not dtype.is_complex
        and dtype != torch.bool
    )
    return ok, str(dtype).replace("torch.", "")
