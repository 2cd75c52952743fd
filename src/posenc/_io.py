"""Reading and writing tables: .npy, .pt, .safetensors, .csv, .json; writes are atomic."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ._validate import PosencError

FORMATS = ("npy", "pt", "safetensors", "csv", "json")
READABLE = ("npy", "pt", "safetensors")


class MissingDependency(PosencError):
    """An optional dependency is not installed; the message names the extra."""


def need(module: str, extra: str, what: str) -> Any:
    """Import an optional dependency or say which extra brings it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(
            f"{what} needs {module.split('.')[0]}: pip install 'posenc[{extra}]'"
        ) from None


def file_format(path: Path, given: str | None) -> str:
    fmt = given or path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise PosencError(
            f"`--format` must be one of {', '.join(FORMATS)} (or a file extension naming one), "
            f"got {fmt or path.name!r}"
        )
    return fmt


def check_writable(path: Path, force: bool) -> None:
    if path.exists() and not force:
        raise PosencError(f"{str(path)!r} exists; pass --force to overwrite it")
    if not path.parent.exists():
        raise PosencError(f"directory {str(path.parent)!r} does not exist")


@contextlib.contextmanager
def atomic(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``, renamed onto it only when the block succeeds."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write(path: Path, array: Any, fmt: str, name: str, meta: dict[str, Any]) -> None:
    """Write one table; ``array`` is NumPy, or torch for bfloat16."""
    writer: dict[str, Callable[[Path], None]] = {
        "npy": lambda p: _npy(p, array),
        "pt": lambda p: _pt(p, array, name),
        "safetensors": lambda p: _safetensors(p, array, name, meta),
        "csv": lambda p: _text(p, array, "csv", meta),
        "json": lambda p: _text(p, array, "json", meta),
    }
    with atomic(path) as tmp:
        writer[fmt](tmp)


def _npy(path: Path, array: Any) -> None:
    if not isinstance(array, np.ndarray):
        raise PosencError("`--dtype bfloat16` cannot be stored in .npy; use .pt or .safetensors")
    with open(path, "wb") as f:
        np.save(f, array)


def _pt(path: Path, array: Any, name: str) -> None:
    torch = need("torch", "torch", "writing .pt")
    t = array if isinstance(array, torch.Tensor) else torch.from_numpy(array)
    torch.save({name: t} if name else t, path)


def _safetensors(path: Path, array: Any, name: str, meta: dict[str, Any]) -> None:
    info = {k: str(v) for k, v in meta.items()}
    if isinstance(array, np.ndarray):
        st = need("safetensors.numpy", "io", "writing .safetensors")
        st.save_file({name or "pe": np.ascontiguousarray(array)}, str(path), metadata=info)
    else:
        st = need("safetensors.torch", "io", "writing .safetensors")
        st.save_file({name or "pe": array.contiguous()}, str(path), metadata=info)


def _as_float64(array: Any) -> np.ndarray:
    if isinstance(array, np.ndarray):
        return array.astype(np.float64)
    return array.detach().cpu().double().numpy()


def _text(path: Path, array: Any, fmt: str, meta: dict[str, Any]) -> None:
    values = _as_float64(array)
    digits = 17 if meta.get("dtype") == "float64" else 9  # enough to round-trip
    if fmt == "csv":
        np.savetxt(path, values, delimiter=",", fmt=f"%.{digits}g")
        return
    rows = [[float(f"{v:.{digits}g}") for v in row] for row in values.tolist()]
    with open(path, "w") as f:
        json.dump({**meta, "shape": list(values.shape), "data": rows}, f)


def read(path: Path, name: str | None) -> tuple[str, np.ndarray, str]:
    """``(tensor name, values as float64, stored dtype)`` of one table in a file."""
    if not path.exists():
        raise PosencError(f"{str(path)!r} does not exist")
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in READABLE:
        raise PosencError(f"FILE must be one of .{', .'.join(READABLE)}, got {path.name!r}")
    tensors: dict[str, Any]
    if fmt == "npy":
        tensors = {"": np.load(path, allow_pickle=False)}
    elif fmt == "pt":
        torch = need("torch", "torch", "reading .pt")
        tensors = _flatten(torch.load(path, map_location="cpu", weights_only=True), torch)
    else:
        need("safetensors", "io", "reading .safetensors")
        tensors = _read_safetensors(path)
    key = _pick(tensors, name, path)
    value = tensors[key]
    dtype = str(value.dtype).replace("torch.", "")
    return key, _as_float64(value), dtype


def _read_safetensors(path: Path) -> dict[str, Any]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    except (TypeError, ValueError):  # bfloat16 needs torch
        need("torch", "torch", "reading bfloat16 .safetensors")
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118


def _flatten(obj: Any, torch: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flatten(v, torch, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _pick(tensors: dict[str, Any], name: str | None, path: Path) -> str:
    if name is not None:
        if name not in tensors:
            raise PosencError(
                f"`--name` {name!r} is not in {path.name}; it holds: {', '.join(tensors)}"
            )
        return name
    tables = {k: v for k, v in tensors.items() if len([s for s in v.shape if s > 1]) == 2}
    if len(tables) == 1:
        return next(iter(tables))
    hinted = [k for k in tables if "pos" in k.lower()]
    if len(hinted) == 1:
        return hinted[0]
    if not tables:
        raise PosencError(f"{path.name} holds no 2-D table")
    raise PosencError(
        f"{path.name} holds several tables; pick one with --name: {', '.join(tables)}"
    )
