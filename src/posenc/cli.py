"""The ``posenc`` command: export tables, draw the pictures, identify stored tables.

Bad arguments: one line on stderr and exit status 2, never a traceback. Files that exist are
never overwritten without ``--force``, and every write is atomic. Heavy libraries (torch,
matplotlib, safetensors) are imported only by the subcommands that need them.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from . import _api
from ._engine import PROGRESS
from ._io import MissingDependency, atomic, check_writable, file_format, need, read, write
from ._validate import PosencError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


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
        except (ValueError, SyntaxError):
            out[key] = text
    return out


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(s) for s in text.replace("x", ",").split(","))
    except ValueError:
        raise PosencError(f"`--grid` takes sizes like 14,14 or 8x30x45, got {text!r}") from None
    return dims


def _torch_dtype(name: str) -> Any:
    if name == "bfloat16":
        return need("torch", "torch", "bfloat16 output").bfloat16
    return name


def _compute(args: argparse.Namespace) -> tuple[Any, str]:
    """The table the arguments ask for, and the posenc call that makes it."""
    opts = _options(args.set)
    dtype = _torch_dtype(args.dtype)
    p = _api.preset(args.preset)
    if args.grid is not None or p.encoding.ndim not in (1, None):
        shape = _shape(args.grid) if args.grid is not None else (14,) * (p.encoding.ndim or 1)
        out = _api.grid(shape, args.dim, preset=args.preset, dtype=dtype, **opts)
        call = f"posenc.grid({shape}, {args.dim}, preset={args.preset!r}"
    else:
        out = _api.table(
            args.length, args.dim, preset=args.preset, offset=args.offset, dtype=dtype, **opts
        )
        call = f"posenc.table({args.length}, {args.dim}, preset={args.preset!r}"
        if args.offset:
            call += f", offset={args.offset!r}"
    call += "".join(f", {k}={v!r}" for k, v in opts.items()) + ")"
    return out, call


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


def _stream_npy(args: argparse.Namespace, path: Path) -> bool:
    """Write a large 1D table to .npy slice by slice, in bounded memory. Each slice is
    computed with its own offset; integer positions make it the same bits as one call."""
    p = _api.preset(args.preset)
    rows, dim = args.length, args.dim
    if (
        args.grid is not None
        or p.encoding.ndim not in (1, None)
        or args.dtype == "bfloat16"
        or not float(args.offset).is_integer()
        or rows * dim * np.dtype(args.dtype).itemsize <= STREAM_BYTES
    ):
        return False
    opts = _options(args.set)
    step = max(1, STREAM_BYTES // (dim * np.dtype(args.dtype).itemsize))
    first = _api.table(
        min(rows, step), dim, preset=args.preset, offset=args.offset, dtype=args.dtype, **opts
    )  # checks every argument before the file
    bar = _Bar(f"posenc table {args.preset}")
    with atomic(path) as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=args.dtype, shape=(rows, dim))
        for lo in range(0, rows, step):
            n = min(step, rows - lo)
            out[lo : lo + n] = (
                first
                if lo == 0
                else _api.table(
                    n, dim, preset=args.preset, offset=args.offset + lo, dtype=args.dtype, **opts
                )
            )
            bar(lo + n, rows)
        out.flush()
        del out
    bar.close()
    return True


def cmd_table(args: argparse.Namespace) -> int:
    path = Path(args.output)
    fmt = file_format(path, args.format)
    check_writable(path, args.force)
    if fmt == "npy" and _stream_npy(args, path):
        print(f"wrote {path} (npy, {args.length}x{args.dim} {args.dtype}, in slices)")
        return 0
    bar = _Bar(f"posenc table {args.preset}")
    token = PROGRESS.set(bar)
    try:
        out, call = _compute(args)
    finally:
        PROGRESS.reset(token)
        bar.close()
    meta = {"preset": args.preset, "call": call, "dtype": args.dtype}
    write(path, out, fmt, args.name, meta)
    print(f"wrote {path} ({fmt}, {'x'.join(map(str, out.shape))} {args.dtype}): {call}")
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    width = max(len(n) for n in _api.presets())
    for name in _api.presets():
        p = _api.preset(name)
        print(f"{name:<{width}}  {p.summary}")
        if args.verbose:
            print(f"{'':<{width}}  origin: {p.origin}")
            print(f"{'':<{width}}  quirks: {p.quirks}")
            opts = ", ".join(f"{k}: {o.doc}" for k, o in p.options.items()) or "none"
            print(f"{'':<{width}}  options: {opts}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from . import _plots

    path = Path(args.output)
    if path.suffix.lower() not in (".png", ".svg"):
        raise PosencError(f"`--output` must end in .png or .svg, got {path.name!r}")
    check_writable(path, args.force)
    need("matplotlib", "plot", "posenc plot")
    args.dtype = "float64"
    out, call = _compute(args)
    pe = np.asarray(out, dtype=np.float64)
    p = _api.preset(args.preset)
    grid_shape = (
        _shape(args.grid)
        if args.grid
        else (14,) * (p.encoding.ndim or 1)
        if p.encoding.ndim not in (1, None)
        else None
    )
    title = f"{args.preset}: {call}"
    if args.kind == "curves":
        dims = args.dims or [d for d in (4, 5, 6, 7) if d < pe.shape[1]] or [0]
        bad = [d for d in dims if not 0 <= d < pe.shape[1]]
        if bad:
            raise PosencError(f"`--dims` must be channels below {pe.shape[1]}, got {bad}")
        fig = _plots.curves(pe, dims, title, offset=args.offset if grid_shape is None else 0)
    elif args.kind == "heatmap":
        fig = _plots.heatmap(pe, title, "position" if grid_shape is None else "token")
    elif args.kind == "similarity":
        fig = _plots.similarity({args.preset: pe}, title)
    else:
        if grid_shape is None or len(grid_shape) != 2:
            raise PosencError(
                f"`--kind patch` needs a 2D grid preset or --grid H,W, got preset {args.preset!r}"
            )
        cell = (grid_shape[0] // 2, grid_shape[1] // 2)
        fig = _plots.patch_similarity(pe, (grid_shape[0], grid_shape[1]), cell, title)
    _save(fig, path)
    print(f"wrote {path}")
    return 0


def _save(fig: Any, path: Path) -> None:
    with atomic(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".").lower(), dpi=110)


def cmd_identify(args: argparse.Namespace) -> int:
    from ._identify import MATCH, identify

    key, values, dtype = read(Path(args.file), args.name)
    where = f"{args.file}" + (f" [{key}]" if key else "")
    found = identify(values)
    shape = "x".join(map(str, values.shape))
    if not found:
        print(f"{where}: {shape} {dtype}: no preset takes this width; not a known encoding")
        return 1
    best = found[0]
    also = f" (the same numbers: {', '.join(best.also)})" if best.also else ""
    if best.error < MATCH:
        print(f"{where}: {shape} {dtype} is preset {best.preset!r}{also}")
        print(f"  reproduce with: {best.call}")
        print(f"  max error: {best.error:.3g}")
        return 0
    print(f"{where}: {shape} {dtype} is not a known sinusoidal encoding (e.g. a learned table)")
    print(f"  closest: {best.call}, max error {best.error:.3g}")
    return 1


def cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import run

    return run(Path(args.out), force=args.force)


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="posenc",
        description="Sinusoidal positional encodings: every convention, exact.",
    )
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="write a few figures and print what they show")
    demo.add_argument("--out", default="posenc-demo", help="directory (default posenc-demo)")
    demo.add_argument("--force", action="store_true", help="overwrite existing figures")
    demo.set_defaults(run=cmd_demo)

    pre = sub.add_parser("presets", help="list the presets")
    pre.add_argument("-v", "--verbose", action="store_true", help="origin, quirks, options")
    pre.set_defaults(run=cmd_presets)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("preset", help="a preset name (see `posenc presets`)")
        p.add_argument("--dim", type=int, default=128, help="channels (default 128)")
        p.add_argument("--length", type=int, default=128, help="positions, 1D (default 128)")
        p.add_argument("--offset", type=float, default=0, help="first position, 1D")
        p.add_argument("--grid", help="grid sizes, e.g. 14,14 or 8x30x45")
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a preset option, e.g. --set flip_sin_to_cos=true",
        )
        p.add_argument("-o", "--output", required=True, help="file to write")
        p.add_argument("--force", action="store_true", help="overwrite an existing file")

    tab = sub.add_parser("table", help="write a table to .npy/.pt/.safetensors/.csv/.json")
    common(tab)
    tab.add_argument(
        "--dtype", default="float32", choices=["float16", "bfloat16", "float32", "float64"]
    )
    tab.add_argument("--format", help="npy, pt, safetensors, csv or json (default: extension)")
    tab.add_argument("--name", default="", help="tensor name inside .pt/.safetensors")
    tab.set_defaults(run=cmd_table)

    plot = sub.add_parser("plot", help="draw a figure (.png or .svg)")
    common(plot)
    plot.add_argument(
        "--kind", default="curves", choices=["curves", "heatmap", "similarity", "patch"]
    )
    plot.add_argument(
        "--dims",
        type=lambda s: [int(x) for x in s.split(",")],
        help="channels for --kind curves, e.g. 4,5,6,7",
    )
    plot.set_defaults(run=cmd_plot)

    ident = sub.add_parser("identify", help="say which preset reproduces a stored table")
    ident.add_argument("file", help=".npy, .pt or .safetensors")
    ident.add_argument("--name", help="tensor name inside the file")
    ident.set_defaults(run=cmd_identify)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except MissingDependency as err:
        print(f"posenc: error: {err}", file=sys.stderr)
        return 1
    except PosencError as err:
        print(f"posenc: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("posenc: interrupted", file=sys.stderr)
        return 130
    except OSError as err:
        print(f"posenc: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
