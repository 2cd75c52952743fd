"""The ``posenc`` command: export tables, draw the pictures, identify stored tables.

Exit status: 0 done; 1 only from ``identify``, for "not a known encoding"; 2 any failure
(bad arguments, bad files, missing extras, errors of the file system), always one line on
stderr and never a traceback; 128 + n after signal n (SIGINT 130, SIGTERM 143), with any
partial file removed. Checks that can fail (arguments, format, dtype, installed extras, free
disk space) run before anything is computed. Files that exist are never overwritten without
``--force``, and every write is atomic. Heavy libraries (torch, matplotlib, safetensors) are
imported only by the subcommands that need them.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

import posenc
from posenc import __version__
from posenc.app.files import (
    FORMATS,
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
from posenc.errors import MAX_AXES, PosencError
from posenc.evaluate.engine import PROGRESS
from posenc.spec.presets import RotaryPreset, get_preset

EXIT_UNKNOWN = 1  # `identify`: the table is not a known encoding
EXIT_FAILURE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage block
        self.exit(EXIT_FAILURE, f"{self.prog}: error: {message}\n")


# --- argument types: each refuses bad text with a message naming the rule and the value ------


def _count(text: str) -> int:
    """An integer >= 1 (``--dim``, ``--length``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _number(text: str) -> int | float:
    """An int when the text is one (so large offsets stay exact), else a float."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def _shape(text: str) -> tuple[int, ...]:
    """Grid sizes: ``14,14`` or ``8x30x45``, each >= 1."""
    parts = text.replace("x", ",").split(",")
    try:
        dims = tuple(int(s) for s in parts)
    except ValueError:
        dims = ()
    if not dims or min(dims) < 1 or len(dims) > MAX_AXES:
        raise argparse.ArgumentTypeError(
            f"takes 1 to {MAX_AXES} sizes >= 1, like 14,14 or 8x30x45, got {text!r}"
        )
    return dims


def _channels(text: str) -> list[int]:
    """Channel numbers for ``--dims``: ``4,5,6,7``, each >= 0."""
    try:
        dims = [int(s) for s in text.split(",")]
    except ValueError:
        dims = [-1]
    if min(dims) < 0:
        raise argparse.ArgumentTypeError(f"takes channels >= 0 like 4,5,6,7, got {text!r}")
    return dims


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
            out = posenc.grid(self.shape, self.dim, preset=self.preset, dtype=dtype, **opts)
            call = f"posenc.grid({self.shape}, {self.dim}, preset={self.preset!r}"
        else:
            out = posenc.table(
                self.length, self.dim, preset=self.preset, offset=self.offset, dtype=dtype, **opts
            )
            call = f"posenc.table({self.length}, {self.dim}, preset={self.preset!r}"
            call += f", offset={self.offset!r}" if self.offset else ""
        return out, call + "".join(f", {k}={v!r}" for k, v in opts.items()) + ")"


def _request(args: argparse.Namespace) -> Request:
    p = get_preset(args.preset)
    is_grid = args.grid is not None or p.encoding.ndim not in (1, None)
    if is_grid:
        for flag, given in (("--length", args.length), ("--offset", args.offset)):
            if given is not None:
                raise PosencError(
                    f"`{flag}` applies to 1-D tables, but this asks for a grid (preset "
                    f"{args.preset!r}); "
                    f"use --grid to give its sizes, got {flag} {given}"
                )
    shape = (args.grid or (14,) * (p.encoding.ndim or 1)) if is_grid else None
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


def _stream_npy(req: Request, dtype: str, path: Path) -> bool:
    """Write a large 1D table to .npy slice by slice, in bounded memory. Each slice is
    computed with its own offset; integer positions make it the same bits as one call."""
    rows, dim, item = req.length, req.dim, np.dtype(dtype).itemsize
    if (
        req.shape is not None
        or not float(req.offset).is_integer()
        or rows * dim * item <= (STREAM_BYTES)
    ):
        return False
    step = max(1, STREAM_BYTES // (dim * item))

    def part(lo: int, n: int) -> np.ndarray:
        off = req.offset + lo
        out: np.ndarray = posenc.table(
            n, dim, preset=req.preset, offset=off, dtype=dtype, **req.options
        )
        return out

    part(rows - 1, 1)  # the far end passes every check (range, accuracy) before the file
    bar = _Bar(f"posenc table {req.preset}")
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


# --- subcommands -------------------------------------------------------------------------------


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
    req = _request(args)
    values = req.rows * req.dim
    check_writer(fmt, args.dtype, values)
    item = 2 if args.dtype == "bfloat16" else np.dtype(args.dtype).itemsize
    if not to_stdout:
        size = text_bytes(values, args.dtype) if fmt in ("csv", "json") else values * item
        check_room(path, size)
    if fmt == "npy" and _stream_npy(req, args.dtype, path):
        print(f"wrote {path} (npy, {req.length}x{req.dim} {args.dtype}, in slices)")
        return 0
    bar = _Bar(f"posenc table {req.preset}")
    token = PROGRESS.set(bar)
    try:
        out, call = req.compute(_torch_dtype(args.dtype))
    finally:
        PROGRESS.reset(token)
        bar.close()
    meta = {"preset": req.preset, "call": call, "dtype": args.dtype}
    if to_stdout:
        write_text(sys.stdout, out, fmt, meta)
        return 0
    write(path, out, fmt, args.name or "", meta)
    print(f"wrote {path} ({fmt}, {'x'.join(map(str, out.shape))} {args.dtype}): {call}")
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    names = posenc.presets()
    width = max(len(n) for n in names)
    for kind, heading in (
        ("sinusoidal", "added to activations (posenc.table, encode, grid; posenc.torch)"),
        ("rotary", "rotary embeddings (posenc.rope, posenc.torch.RotaryEmbedding)"),
    ):
        print(f"# {kind}: {heading}")
        for name in posenc.presets(kind):
            p = posenc.preset(name)
            print(f"{name:<{width}}  {p.summary}")
            if not args.verbose:
                continue
            print(f"{'':<{width}}  origin: {p.origin}")
            print(f"{'':<{width}}  quirks: {p.quirks}")
            if isinstance(p, RotaryPreset):
                print(f"{'':<{width}}  rope keywords: {p.settings()} (rotary width {p.dim})")
            else:
                opts = ", ".join(f"{k}: {o.doc}" for k, o in p.options.items()) or "none"
                print(f"{'':<{width}}  options: {opts}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    path = Path(args.output)
    if path.suffix.lower() not in (".png", ".svg"):
        raise PosencError(f"`--output` must end in .png or .svg, got {path.name!r}")
    check_writable(path, args.force)
    req = _request(args)
    grid = req.shape
    kind = args.kind or ("curves" if grid is None else "patch" if len(grid) == 2 else "heatmap")
    if args.dims is not None and kind != "curves":
        raise PosencError(f"`--dims` applies to --kind curves, got --kind {kind}")
    if kind == "curves" and grid is not None:
        raise PosencError(
            f"`--kind curves` draws channels along a 1-D sequence, but this asks for a grid "
            f"(preset {args.preset!r}, {'x'.join(map(str, grid))}); use --kind patch, heatmap "
            "or similarity"
        )
    if kind == "patch" and (grid is None or len(grid) != 2):
        raise PosencError(
            f"`--kind patch` needs a 2D grid preset or --grid H,W, got preset {args.preset!r}"
            + (f" with grid {'x'.join(map(str, grid))}" if grid else "")
        )
    if args.dims is not None and max(args.dims) >= req.dim:
        raise PosencError(f"`--dims` must be channels below --dim {req.dim}, got {args.dims}")
    need("matplotlib", "plot", "posenc plot")
    from posenc.app import plots

    ch = req.channels()
    out, call = req.compute("float64")
    pe = np.asarray(out, dtype=np.float64)
    if kind == "curves":
        dims = args.dims or plots.spread(ch, req.length)
        fig = plots.curves(pe, dims, req.title, call, offset=req.offset, ch=ch)
    elif kind == "heatmap":
        xlabel = "position" if grid is None else f"token (grid cells, {ch.tokens})"
        fig = plots.heatmap(pe, req.title, call, xlabel=xlabel, ch=ch)
    elif grid is None:  # similarity, 1-D
        fig = plots.similarity({args.preset: pe}, req.title, call)
    elif kind == "similarity":
        fig = plots.axis_similarity(pe, grid, req.title, call, ch.tokens)
    else:
        h, w = grid[0], grid[1]
        fig = plots.patch_similarity(pe, (h, w), (h // 2, w // 2), req.title, call, ch.tokens)
    with atomic(path) as tmp:
        plots.save(fig, tmp, path.suffix.lstrip(".").lower())
    print(f"wrote {path}")
    return 0


def cmd_identify(args: argparse.Namespace) -> int:
    from posenc.app.identify import MATCH, identify

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
    print(f"  closest: {best.call}, max error {best.error:.3g}")
    return EXIT_UNKNOWN


def cmd_demo(args: argparse.Namespace) -> int:
    from posenc.app.demo import run

    return run(Path(args.out), force=args.force)


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="posenc",
        description="Sinusoidal positional encodings: every convention, exact.",
    )
    top.add_argument("--version", action="version", version=f"posenc {__version__}")
    sub = top.add_subparsers(dest="command", parser_class=_Parser)

    demo = sub.add_parser("demo", help="write a few figures and print what they show")
    demo.add_argument("--out", default="posenc-demo", help="directory (default posenc-demo)")
    demo.add_argument(
        "--force", action="store_true", help="overwrite existing figures (default: refuse)"
    )
    demo.set_defaults(run=cmd_demo)

    pre = sub.add_parser("presets", help="list the presets")
    pre.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="origin, quirks and options of each (default: one line each)",
    )
    pre.set_defaults(run=cmd_presets)

    def common(p: argparse.ArgumentParser, output: str) -> None:
        p.add_argument("preset", help="a preset name (the list: posenc presets)")
        p.add_argument("--dim", type=_count, default=128, help="channels (default 128)")
        p.add_argument(
            "--length", type=_count, help="positions of a 1-D table (default 128; not for grids)"
        )
        p.add_argument(
            "--offset",
            type=_number,
            help="first position of a 1-D table, e.g. a KV-cache length (default 0; not for grids)",
        )
        p.add_argument(
            "--grid",
            type=_shape,
            help="grid sizes, e.g. 14,14 or 8x30x45 (default 14 per axis of a grid preset)",
        )
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a preset option, repeatable, e.g. --set flip_sin_to_cos=true (default none; "
            "each preset's options: posenc presets -v)",
        )
        p.add_argument("-o", "--output", required=True, help=output)
        p.add_argument(
            "--force", action="store_true", help="overwrite an existing file (default: refuse)"
        )

    tab = sub.add_parser("table", help="write a table to .npy/.pt/.safetensors/.csv/.json")
    common(tab, "file to write, its extension naming the format; - writes text to stdout")
    tab.add_argument(
        "--dtype",
        default="float32",
        choices=["float16", "bfloat16", "float32", "float64"],
        help="value type of the table, each value the exact one rounded once (default float32)",
    )
    tab.add_argument(
        "--format",
        choices=FORMATS,
        help="file format (default: the extension of --output; csv for -o -)",
    )
    tab.add_argument(
        "--name",
        help="tensor name inside .pt/.safetensors (default: a bare tensor in .pt, "
        "'pe' in .safetensors)",
    )
    tab.set_defaults(run=cmd_table)

    plot = sub.add_parser("plot", help="draw a figure (.png or .svg)")
    common(plot, "file to write, .png or .svg")
    plot.add_argument(
        "--kind",
        choices=["curves", "heatmap", "similarity", "patch"],
        help="curves: chosen channels against position (1-D); heatmap: every channel of every "
        "position or cell; similarity: cosine similarity by distance (per axis on grids); "
        "patch: one cell against the whole 2-D grid (default: curves for 1-D presets, patch "
        "for 2-D grids, heatmap for other grids)",
    )
    plot.add_argument(
        "--dims",
        type=_channels,
        help="channels for --kind curves, e.g. 0,1,6 (default: 4 sine channels from the "
        "fastest frequency to a period of 4 x --length)",
    )
    plot.set_defaults(run=cmd_plot)

    ident = sub.add_parser("identify", help="say which preset reproduces a stored table")
    ident.add_argument("file", help=".npy, .npz, .pt or .safetensors")
    ident.add_argument(
        "--name",
        help="tensor name inside the file (default: its only 2-D table, or the only one "
        "named like pos* or pe)",
    )
    ident.set_defaults(run=cmd_identify)
    return top


# --- signals and the top level -----------------------------------------------------------------


class Interrupted(BaseException):
    """A signal asked the command to stop; ``atomic`` removes the partial file on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise `Interrupted` in the main thread while a command runs."""
    names = ("SIGINT", "SIGTERM", "SIGHUP")
    sigs = [getattr(signal, n) for n in names if hasattr(signal, n)]
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise) for s in sigs}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _fail(message: str) -> int:
    line = " ".join(str(message).split())
    print(f"posenc: error: {line}", file=sys.stderr)
    return EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    with _signals():
        try:
            top = parser()
            args = top.parse_args(argv)
            if args.command is None:  # bare `posenc`: the usage, as a failure
                top.print_help(sys.stderr)
                return EXIT_FAILURE
            return int(args.run(args))
        except PosencError as err:
            return _fail(str(err))
        except Interrupted as sig:
            print(f"posenc: interrupted ({signal.Signals(sig.signum).name})", file=sys.stderr)
            return 128 + sig.signum
        except KeyboardInterrupt:  # SIGINT outside the main thread's handler
            print("posenc: interrupted (SIGINT)", file=sys.stderr)
            return 128 + signal.SIGINT
        except BrokenPipeError:  # the reader went away (`posenc presets | head -1`)
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 128 + 13
        except OSError as err:
            return _fail(f"{err.strerror or err}" + (f": {err.filename!r}" if err.filename else ""))
        except MemoryError:
            return _fail("out of memory")
        except Exception as err:
            if os.environ.get("POSENC_TRACEBACK"):
                raise
            return _fail(
                f"internal error, please report it: {type(err).__name__}: {err} "
                "(POSENC_TRACEBACK=1 shows where)"
            )


if __name__ == "__main__":
    sys.exit(main())
