"""The ``posenc`` command line: the argument parser, exit statuses, signals and ``main``.

The subcommands themselves are in :mod:`posenc.app.commands`.

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
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from posenc import __version__
from posenc.app.commands import (
    cmd_audit,
    cmd_demo,
    cmd_identify,
    cmd_plot,
    cmd_presets,
    cmd_table,
)
from posenc.app.files import FORMATS
from posenc.errors import MAX_AXES, PosencError

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


# --- the parser --------------------------------------------------------------------------------


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

    def common(command: argparse.ArgumentParser, output: str) -> None:
        command.add_argument("preset", help="a preset name (the list: posenc presets)")
        command.add_argument("--dim", type=_count, default=128, help="channels (default 128)")
        command.add_argument(
            "--length", type=_count, help="positions of a 1-D table (default 128; not for grids)"
        )
        command.add_argument(
            "--offset",
            type=_number,
            help="first position of a 1-D table, e.g. a KV-cache length (default 0; not for grids)",
        )
        command.add_argument(
            "--grid",
            type=_shape,
            help="grid sizes, e.g. 14,14 or 8x30x45 (default 14 per axis of a grid preset)",
        )
        command.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a preset option, repeatable, e.g. --set flip_sin_to_cos=true (default none; "
            "each preset's options: posenc presets -v)",
        )
        command.add_argument("-o", "--output", required=True, help=output)
        command.add_argument(
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

    aud = sub.add_parser(
        "audit",
        help="a local model's positional encodings: the float32 error of its original "
        "arithmetic, the bf16 hazard, the fix",
    )
    aud.add_argument(
        "path",
        help="a model directory (config.json, or a pipeline's model_index.json) or a config.json",
    )
    aud.add_argument(
        "--json", action="store_true", help="a JSON list of records (default: a table)"
    )
    aud.add_argument(
        "--size",
        metavar="WIDTHxHEIGHT",
        help="measure the image and video families at this size in pixels (e.g. 4096x4096): "
        "what the original computes there, and the rule that extends it past its trained size "
        "(default: each family at the size it is run at)",
    )
    aud.add_argument(
        "--frames",
        type=int,
        metavar="N",
        help="with --size: the video's frames, e.g. 261 (default: the family's own)",
    )
    aud.set_defaults(run=cmd_audit)
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
