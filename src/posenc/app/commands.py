"""The ``posenc`` subcommands: ``table``, ``presets``, ``plot``, ``identify``, ``audit``, ``demo``.

Each takes the parsed arguments (:mod:`posenc.app.cli` parses them) and returns an exit
status. A table or plot request is resolved and checked (:class:`Request`) before anything is
computed; files are written atomically (:mod:`posenc.app.files`).
"""

from __future__ import annotations

import argparse
import ast
import math
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from posenc.api.presets import preset, presets
from posenc.api.sinusoidal import grid, table
from posenc.app.files import (
    atomic,
    check_room,
    check_writable,
    check_writer,
    file_format,
    need,
    read,
    text_bytes,
    write,
    write_text,
)
from posenc.errors import PosencError
from posenc.evaluate.engine import PROGRESS
from posenc.spec.presets import RotaryPreset, get_preset

EXIT_UNKNOWN = 1  # `identify`: the table is not a known encoding


def _options(pairs: Sequence[str]) -> dict[str, Any]:
    """``--set key=value`` pairs; values are Python literals (1e4, True, None) or strings."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise PosencError(f"`--set` takes key=value, got {pair!r}")
        low = text.lower()
        if low in ("true", "false", "none"):
            text = {"true": "True", "false": "False", "none": "None"}[low]
        try:
            out[key] = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            out[key] = text  # not a literal (or too deep, or too many digits): the text
    return out


# --- what a table or plot command asks for ----------------------------------------------------


@dataclass(frozen=True)
class Request:
    """A table the arguments ask for, resolved and checked before anything is computed."""

    preset: str
    dim: int
    length: int  # 1D tables
    offset: int | float  # 1D tables
    shape: tuple[int, ...] | None  # grids
    options: dict[str, Any]

    @property
    def ndim(self) -> int:
        return 1 if self.shape is None else len(self.shape)

    @property
    def title(self) -> str:
        """The preset and the table's size, for a figure's title."""
        if self.shape is None:
            start = f" from {self.offset}" if self.offset else ""
            return f"{self.preset}, d={self.dim}, {self.length} positions{start}"
        return f"{self.preset}, d={self.dim}, grid {'x'.join(map(str, self.shape))}"

    def channels(self) -> Any:
        from posenc.app.plots import channels

        return channels(self.preset, self.dim, self.ndim, self.options, grid=self.shape is not None)

    @property
    def rows(self) -> int:  # an upper bound: grids may add a few extra tokens
        return self.length if self.shape is None else math.prod(self.shape) + 8

    def compute(self, dtype: Any) -> tuple[Any, str]:
        """The table, and the posenc call that makes it."""
        opts = self.options
        if self.shape is not None:
            out = grid(self.shape, self.dim, preset=self.preset, dtype=dtype, **opts)
            call = f"posenc.grid({self.shape}, {self.dim}, preset={self.preset!r}"
        else:
            out = table(
                self.length, self.dim, preset=self.preset, offset=self.offset, dtype=dtype, **opts
            )
            call = f"posenc.table({self.length}, {self.dim}, preset={self.preset!r}"
            call += f", offset={self.offset!r}" if self.offset else ""
        return out, call + "".join(f", {k}={v!r}" for k, v in opts.items()) + ")"


def _resolve(args: argparse.Namespace) -> Request:
    """The table or plot the arguments ask for, checked."""
    preset_ = get_preset(args.preset)
    is_grid = args.grid is not None or preset_.encoding.ndim not in (1, None)
    if is_grid:
        for flag, given in (("--length", args.length), ("--offset", args.offset)):
            if given is not None:
                raise PosencError(
                    f"`{flag}` applies to 1-D tables, but this asks for a grid (preset "
                    f"{args.preset!r}); "
                    f"use --grid to give its sizes, got {flag} {given}"
                )
    shape = (args.grid or (14,) * (preset_.encoding.ndim or 1)) if is_grid else None
    return Request(
        args.preset,
        args.dim,
        128 if args.length is None else args.length,
        0 if args.offset is None else args.offset,
        shape,
        _options(args.set),
    )


def _torch_dtype(name: str) -> Any:
    if name == "bfloat16":
        return need("torch", "torch", "bfloat16 output").bfloat16
    return name


class _Bar:
    """A progress bar on stderr, shown only on a terminal and only after about a second."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.start = time.monotonic()
        self.live = sys.stderr.isatty()
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.live or time.monotonic() - self.start < 1.0:
            return
        frac = done / max(total, 1)
        bar = "#" * int(30 * frac)
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}%")
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")


STREAM_BYTES = 1 << 26  # 1D .npy tables larger than this are computed and written in slices


def _stream_npy(request: Request, dtype: str, path: Path) -> bool:
    """Write a large 1D table to .npy slice by slice, in bounded memory. Each slice is
    computed with its own offset; integer positions make it the same bits as one call."""
    rows, dim, item = request.length, request.dim, np.dtype(dtype).itemsize
    if (
        request.shape is not None
        or not float(request.offset).is_integer()
        or rows * dim * item <= (STREAM_BYTES)
    ):
        return False
    step = max(1, STREAM_BYTES // (dim * item))

    def part(lo: int, n: int) -> np.ndarray:
        offset = request.offset + lo
        out: np.ndarray = table(
            n, dim, preset=request.preset, offset=offset, dtype=dtype, **request.options
        )
        return out

    part(rows - 1, 1)  # the far end passes every check (range, accuracy) before the file
    bar = _Bar(f"posenc table {request.preset}")
    with atomic(path) as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(rows, dim))
        for lo in range(0, rows, step):
            n = min(step, rows - lo)
            out[lo : lo + n] = part(lo, n)
            bar(lo + n, rows)
        out.flush()
        del out
    bar.close()
    return True


# --- the subcommands ---------------------------------------------------------------------------


def cmd_table(args: argparse.Namespace) -> int:
    to_stdout = args.output == "-"
    path = Path(args.output)
    fmt = (args.format or "csv") if to_stdout else file_format(path, args.format)
    if to_stdout and fmt not in ("csv", "json"):
        raise PosencError(f"`--output -` (stdout) writes text: --format csv or json, got {fmt!r}")
    if args.name is not None and fmt not in ("pt", "safetensors"):
        raise PosencError(f"`--name` applies to .pt and .safetensors files, got format {fmt}")
    if not to_stdout:
        check_writable(path, args.force)
    request = _resolve(args)
    values = request.rows * request.dim
    check_writer(fmt, args.dtype, values)
    item = 2 if args.dtype == "bfloat16" else np.dtype(args.dtype).itemsize
    if not to_stdout:
        size = text_bytes(values, args.dtype) if fmt in ("csv", "json") else values * item
        check_room(path, size)
    if fmt == "npy" and _stream_npy(request, args.dtype, path):
        print(f"wrote {path} (npy, {request.length}x{request.dim} {args.dtype}, in slices)")
        return 0
    bar = _Bar(f"posenc table {request.preset}")
    token = PROGRESS.set(bar)
    try:
        out, call = request.compute(_torch_dtype(args.dtype))
    finally:
        PROGRESS.reset(token)
        bar.close()
    meta = {"preset": request.preset, "call": call, "dtype": args.dtype}
    if to_stdout:
        write_text(sys.stdout, out, fmt, meta)
        return 0
    write(path, out, fmt, args.name or "", meta)
    print(f"wrote {path} ({fmt}, {'x'.join(map(str, out.shape))} {args.dtype}): {call}")
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    names = presets()
    width = max(len(n) for n in names)
    for kind, heading in (
        ("sinusoidal", "added to activations (posenc.table, encode, grid; posenc.torch)"),
        ("rotary", "rotary embeddings (posenc.rope, posenc.torch.RotaryEmbedding)"),
    ):
        print(f"# {kind}: {heading}")
        for name in presets(kind):
            preset_ = preset(name)
            print(f"{name:<{width}}  {preset_.summary}")
            if not args.verbose:
                continue
            print(f"{'':<{width}}  origin: {preset_.origin}")
            print(f"{'':<{width}}  quirks: {preset_.quirks}")
            if isinstance(preset_, RotaryPreset):
                settings, dim = preset_.settings(), preset_.dim
                print(f"{'':<{width}}  rope keywords: {settings} (rotary width {dim})")
            else:
                opts = ", ".join(f"{k}: {o.doc}" for k, o in preset_.options.items()) or "none"
                print(f"{'':<{width}}  options: {opts}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    path = Path(args.output)
    if path.suffix.lower() not in (".png", ".svg"):
        raise PosencError(f"`--output` must end in .png or .svg, got {path.name!r}")
    check_writable(path, args.force)
    request = _resolve(args)
    shape = request.shape
    kind = args.kind or ("curves" if shape is None else "patch" if len(shape) == 2 else "heatmap")
    if args.dims is not None and kind != "curves":
        raise PosencError(f"`--dims` applies to --kind curves, got --kind {kind}")
    if kind == "curves" and shape is not None:
        raise PosencError(
            f"`--kind curves` draws channels along a 1-D sequence, but this asks for a grid "
            f"(preset {args.preset!r}, {'x'.join(map(str, shape))}); use --kind patch, heatmap "
            "or similarity"
        )
    if kind == "patch" and (shape is None or len(shape) != 2):
        raise PosencError(
            f"`--kind patch` needs a 2D grid preset or --grid H,W, got preset {args.preset!r}"
            + (f" with grid {'x'.join(map(str, shape))}" if shape else "")
        )
    if args.dims is not None and max(args.dims) >= request.dim:
        raise PosencError(f"`--dims` must be channels below --dim {request.dim}, got {args.dims}")
    need("matplotlib", "plot", "posenc plot")
    from posenc.app import plots

    ch = request.channels()
    out, call = request.compute("float64")
    pe = np.asarray(out, dtype=np.float64)
    if kind == "curves":
        dims = args.dims or plots.spread(ch, request.length)
        fig = plots.curves(pe, dims, request.title, call, offset=request.offset, ch=ch)
    elif kind == "heatmap":
        xlabel = "position" if shape is None else f"token (grid cells, {ch.tokens})"
        fig = plots.heatmap(pe, request.title, call, xlabel=xlabel, ch=ch)
    elif shape is None:  # similarity, 1-D
        fig = plots.similarity({args.preset: pe}, request.title, call)
    elif kind == "similarity":
        fig = plots.axis_similarity(pe, shape, request.title, call, ch.tokens)
    else:
        h, w = shape[0], shape[1]
        fig = plots.patch_similarity(pe, (h, w), (h // 2, w // 2), request.title, call, ch.tokens)
    with atomic(path) as tmp:
        plots.save(fig, tmp, path.suffix.lstrip(".").lower())
    print(f"wrote {path}")
    return 0


def cmd_identify(args: argparse.Namespace) -> int:
    from posenc.api.identify import MATCH, NEAR, identify

    stored = read(Path(args.file), args.name)
    where = f"{args.file}" + (f" [{stored.key}]" if stored.key else "")
    found = identify(stored.values)
    shape = "x".join(map(str, stored.values.shape))
    if not found:
        print(f"{where}: {shape} {stored.dtype}: no preset takes this width; not a known encoding")
        return EXIT_UNKNOWN
    best = found[0]
    also = f" (the same numbers: {', '.join(best.also)})" if best.also else ""
    if best.error < MATCH:
        print(f"{where}: {shape} {stored.dtype} is preset {best.preset!r}{also}")
        print(f"  reproduce with: {best.call}")
        print(f"  max error: {best.error:.3g}")
        return 0
    print(
        f"{where}: {shape} {stored.dtype} is not a known sinusoidal encoding (e.g. a learned table)"
    )
    if best.rms < NEAR:  # a modified copy (fine-tuned, noisy); an unrelated table names none
        print(f"  closest: {best.call}, max error {best.error:.3g}")
    return EXIT_UNKNOWN


def cmd_audit(args: argparse.Namespace) -> int:
    from posenc.app.audit import run

    if not args.path.strip():
        raise PosencError(
            "PATH must name a model folder, a pipeline folder or a config.json, got ''"
        )
    return run(Path(args.path), as_json=args.json, size=_size(args.size, args.frames))


def _size(size: str | None, frames: int | None) -> Any:
    """``--size WIDTHxHEIGHT`` and ``--frames N``, checked: positive integers."""
    from posenc.app.audit_vision import Size

    if size is None:
        if frames is not None:
            raise PosencError(f"--frames {frames} needs --size WIDTHxHEIGHT (the frames' size)")
        return None
    found = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", size)
    if found is None or min(int(found.group(1)), int(found.group(2))) <= 0:
        raise PosencError(
            f"--size must be WIDTHxHEIGHT in pixels, two positive integers (e.g. 4096x4096), "
            f"got {size!r}"
        )
    if frames is not None and frames <= 0:
        raise PosencError(f"--frames must be a positive number of frames, got {frames}")
    return Size(int(found.group(1)), int(found.group(2)), frames)


def cmd_demo(args: argparse.Namespace) -> int:
    from posenc.app.demo import run

    return run(Path(args.out), force=args.force)
