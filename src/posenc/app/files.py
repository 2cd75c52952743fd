"""Table files: read .npy/.npz/.pt/.safetensors, write .npy/.pt/.safetensors/.csv/.json.

Reading never trusts the bytes: a parser's complaint about a file becomes one
`PosencError` naming the file, and sizes are checked before anything is allocated.
Writing is atomic (a temporary file beside the target, renamed onto it), new files get the
mode the user's umask gives, and an overwritten file keeps its mode.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from posenc.errors import PosencError, check_size
from posenc.evaluate.libs.numpy import host_memory

FORMATS = ("npy", "pt", "safetensors", "csv", "json")
READABLE = ("npy", "npz", "pt", "safetensors")


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


# --- writing ---------------------------------------------------------------------------------


def file_format(path: Path, given: str | None) -> str:
    fmt = given or path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise PosencError(
            f"`--format` must be one of {', '.join(FORMATS)} (or a file extension naming one), "
            f"got {fmt or path.name!r}"
        )
    return fmt


def check_writer(fmt: str, dtype: str, values: int) -> None:
    """Everything writing ``values`` numbers of ``dtype`` as ``fmt`` needs, checked before the
    table is computed: the format takes the dtype, its library is installed, the disk has room."""
    if fmt == "npy" and dtype == "bfloat16":
        raise PosencError("`--dtype bfloat16` cannot be stored in .npy; use .pt or .safetensors")
    if fmt == "pt" or dtype == "bfloat16":
        need("torch", "torch", f"writing {dtype} .{fmt}")
    if fmt == "safetensors":
        need("safetensors", "io", "writing .safetensors")


def check_room(path: Path, nbytes: int) -> None:
    """Refuse a write the file system cannot hold, before computing it."""
    free = shutil.disk_usage(path.parent).free
    if nbytes > free:
        raise PosencError(
            f"`--output` {str(path)!r} needs {nbytes / 2**30:.3g} GiB, more than the "
            f"{free / 2**30:.3g} GiB free in {str(path.parent)!r}"
        )


def check_writable(path: Path, force: bool) -> None:
    if path.is_dir():
        raise PosencError(f"`--output` {str(path)!r} is a directory")
    if path.exists() and not force:
        raise PosencError(f"{str(path)!r} exists; pass --force to overwrite it")
    if not path.parent.is_dir():
        raise PosencError(f"directory {str(path.parent)!r} does not exist")


def _umask() -> int:
    """The process umask, read without changing it where Linux allows."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    old = os.umask(0o022)  # elsewhere: set and restore (the CLI is single-threaded)
    os.umask(old)
    return old


def _mode_for(path: Path) -> int:
    """The mode ``open(path, "w")`` would leave: an existing file's own, else 0666 & ~umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


@contextlib.contextmanager
def atomic(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``, renamed onto it only when the block succeeds; on any
    failure or signal the temporary file is removed."""
    mode = _mode_for(path)
    tmp: Path | None = None  # named before the file exists, so a signal once it does removes it
    try:
        for _ in range(100):
            tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.part"
            try:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                break
            except FileExistsError:  # another's: not ours to remove
                tmp = None
        if tmp is None:
            raise FileExistsError(f"no free temporary name beside {str(path)!r}")
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise


def write(path: Path, array: Any, fmt: str, name: str, meta: dict[str, Any]) -> None:
    """Write one table; ``array`` is NumPy, or torch for bfloat16."""
    writer: dict[str, Callable[[Path], None]] = {
        "npy": lambda tmp: _npy(tmp, array),
        "pt": lambda tmp: _pt(tmp, array, name),
        "safetensors": lambda tmp: _safetensors(tmp, array, name, meta),
        "csv": lambda tmp: _text(tmp, array, "csv", meta),
        "json": lambda tmp: _text(tmp, array, "json", meta),
    }
    with atomic(path) as tmp:
        writer[fmt](tmp)


def _npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, array)


def _pt(path: Path, array: Any, name: str) -> None:
    need("torch", "torch", "writing .pt")
    from posenc.torch.files import save_pt

    save_pt(path, array, name)


def _safetensors(path: Path, array: Any, name: str, meta: dict[str, Any]) -> None:
    info = {k: str(v) for k, v in meta.items()}
    if isinstance(array, np.ndarray):
        safetensors = need("safetensors.numpy", "io", "writing .safetensors")
        safetensors.save_file({name or "pe": np.ascontiguousarray(array)}, str(path), metadata=info)
    else:
        safetensors = need("safetensors.torch", "io", "writing .safetensors")
        safetensors.save_file({name or "pe": array.contiguous()}, str(path), metadata=info)


def _as_float64(array: Any) -> np.ndarray:
    if isinstance(array, np.ndarray):
        with np.errstate(invalid="ignore"):  # signalling NaNs from a damaged file stay NaN
            return array.astype(np.float64)
    out: np.ndarray = array.detach().cpu().double().numpy()
    return out


def _text(path: Path, array: Any, fmt: str, meta: dict[str, Any]) -> None:
    with open(path, "w") as f:
        write_text(f, array, fmt, meta)


def write_text(stream: IO[str], array: Any, fmt: str, meta: dict[str, Any]) -> None:
    """The table as CSV (one row per line) or JSON (``meta``, ``shape`` and ``data``), with
    enough digits to round-trip its dtype."""
    values = _as_float64(array)
    digits = 17 if meta.get("dtype") == "float64" else 9
    if fmt == "csv":
        np.savetxt(stream, values, delimiter=",", fmt=f"%.{digits}g")
        return
    rows = [[float(f"{v:.{digits}g}") for v in row] for row in values.tolist()]
    json.dump({**meta, "shape": list(values.shape), "data": rows}, stream)
    stream.write("\n")


def text_bytes(values: int, dtype: str) -> int:
    """An upper bound on the size of ``values`` numbers written as text."""
    return values * (26 if dtype == "float64" else 18)


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """One table read from a file: its name there, its values as float64, its stored dtype."""

    key: str
    values: np.ndarray
    dtype: str


def read(path: Path, name: str | None) -> Stored:
    """The table ``name`` (or the only, or the only positional, 2-D table) in ``path``."""
    if not path.exists():
        raise PosencError(f"FILE {str(path)!r} does not exist")
    if not path.is_file():
        raise PosencError(f"FILE {str(path)!r} is not a regular file")
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in READABLE:
        raise PosencError(f"FILE must be one of .{', .'.join(READABLE)}, got {path.name!r}")
    loader = {"npy": _load_npy, "npz": _load_npz, "pt": _load_pt, "safetensors": _load_st}[fmt]
    try:
        tensors = loader(path)
    except PosencError:
        raise
    except MemoryError:
        raise PosencError(f"FILE {path.name!r} does not fit in memory") from None
    except Exception as err:  # the parser's complaint about bytes that are not a table file
        raise PosencError(
            f"FILE {path.name!r} is not a valid .{fmt} file ({_reason(err)})"
        ) from None
    key = _pick(tensors, name, path)
    value = tensors[key]
    dtype = _real_dtype(value, f"{path.name}" + (f" [{key}]" if key else ""))
    check_size(f"reading {path.name}", tuple(value.shape), 8, host_memory())
    return Stored(key, _as_float64(value), dtype)


def _reason(err: BaseException) -> str:
    if isinstance(err, pickle.UnpicklingError):  # torch.load(weights_only=True) said no
        return "it holds objects other than tensors, arrays, numbers and containers of them"
    text = str(err).strip().splitlines()
    first = text[0] if text else ""
    first = first if len(first) <= 120 else first[:117] + "..."
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _load_npy(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        shape, _, dtype = (
            np.lib.format.read_array_header_1_0(f)
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0(f)
        )
        need_bytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        have = path.stat().st_size - f.tell()
    if dtype.hasobject:
        raise PosencError(f"FILE {path.name!r} holds Python objects, not numbers")
    if have < need_bytes:
        raise PosencError(
            f"FILE {path.name!r} is truncated: its header says {shape} {dtype} "
            f"({need_bytes} bytes), the file holds {have}"
        )
    return {"": np.load(path, allow_pickle=False)}


def _load_npz(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:  # ours to close, also when the archive is damaged
        archive = np.load(f, allow_pickle=False)
        if isinstance(archive, np.ndarray):  # a .npy under another name
            return {"": archive}
        with archive:
            return {k: archive[k] for k in archive.files}


def _load_pt(path: Path) -> dict[str, Any]:
    need("torch", "torch", "reading .pt")
    from posenc.torch.files import load_pt

    return load_pt(path)


def _load_st(path: Path) -> dict[str, Any]:
    need("safetensors", "io", "reading .safetensors")
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    except TypeError:  # bfloat16 needs torch
        need("torch", "torch", "reading bfloat16 .safetensors")
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118


def _real_dtype(value: Any, where: str) -> str:
    """The dtype's name, if it holds real numbers (floating or integer) in a dense layout."""
    if isinstance(value, np.ndarray):
        ok, name = value.dtype.kind in "fiu", str(value.dtype)
    else:  # only a .pt or a bfloat16 .safetensors made this value: torch is loaded
        from posenc.torch.files import real_dtype

        ok, name = real_dtype(value)
    if not ok:
        raise PosencError(f"the table {where} must hold real numbers, got {name}")
    return name


def _pick(tensors: dict[str, Any], name: str | None, path: Path) -> str:
    held = ", ".join(k or "(one unnamed table)" for k in tensors) or "nothing"
    if name is not None:
        if name not in tensors:
            raise PosencError(f"`--name` {name!r} is not in {path.name}; it holds: {held}")
        return name
    tables = {k: v for k, v in tensors.items() if len([s for s in v.shape if s != 1]) == 2}
    if len(tables) == 1:
        return next(iter(tables))
    hinted = [k for k in tables if "pos" in k.lower() or k.lower().split(".")[-1] == "pe"]
    if len(hinted) == 1:
        return hinted[0]
    if not tables:
        raise PosencError(f"{path.name} holds no 2-D table; it holds: {held}")
    raise PosencError(
        f"{path.name} holds several tables; pick one with --name: {', '.join(tables)}"
    )
