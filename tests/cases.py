"""The catalogue of inputs and what each gets: the source of docs/errors.md.

Each case is code a user writes (Python, or a ``posenc`` command line) and what it must get:
a `PosencError` (or, for the command, exit status 2 and one line) whose message holds every
fragment (the argument, the rule, the value), or, for a valid call, a property of the result
(``out``) checked against an independent reference. `tests/test_errors.py` runs every case;
``python -m tests.cases`` writes docs/errors.md from the catalogue and the messages the cases
actually produce, and a test checks the file lists every case with its fragments.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import posenc


@dataclass(frozen=True)
class Case:
    area: str
    code: str  # Python, or a command line starting with "posenc "
    expect: tuple[str, ...] = ()  # fragments of the error message (a rejection)
    holds: str = ""  # a valid call: a property of its result `out`
    varies: str = ""  # a pattern for the part of the message that depends on the machine

    @property
    def command(self) -> bool:
        return self.code.startswith("posenc ")


def _area(title: str, *rows: tuple[Any, ...]) -> list[Case]:
    out = []
    for code, want, *varies in rows:
        if isinstance(want, str):
            out.append(Case(title, code, holds=want))
        else:
            out.append(Case(title, code, expect=tuple(want), varies="".join(varies)))
    return out


# The memory a machine has: the docs show it as "…".
MEMORY = r"(?<=more than the )[0-9.e+]+(?= GiB of memory here)"


CASES: list[Case] = [
    # Sizes, widths, presets and options
    *_area(
        "Sizes, widths, presets and options",
        ("posenc.table(-1, 8)", ("`length`", ">= 0", "-1")),
        ("posenc.table(2.5, 8)", ("`length`", "integer", "2.5")),
        ("posenc.table(True, 8)", ("`length`", "integer", "True")),
        ("posenc.table(10, 0)", ("`dim`", ">= 1", "0")),
        ("posenc.table(10, 7)", ("`dim`", "multiple of 2", "'vaswani'", "got 7")),
        ('posenc.table(10, 7, preset="whisper")', ("`dim`", "multiple of 2", "got 7")),
        ('posenc.table(10, 8, preset="vasvani")', ("`preset`", "unknown", "'vaswani'")),
        ("posenc.table(10, 8, bse=3)", ("unknown option `bse`", "'base'")),
        ('posenc.table(10, 8, preset="whisper", max_timescal=3)', ("'max_timescale'",)),
        ('posenc.table(10, 8, preset="mae")', ("encodes 2 axes", "posenc.grid")),
        ('posenc.table(10, 2, preset="whisper")', ("too small", "smallest width it takes is 4")),
        ('posenc.table(10, 3, preset="fairseq")', ("too small", "dim=3", "is 4")),
        ("posenc.table(10, 8, offset=math.nan)", ("`offset`", "finite")),
        ("posenc.table(10, 8, base=-1.0)", ("`base`", "> 0", "-1")),
        ("posenc.table(10, 8, dtype=np.int32)", ("`dtype`", "float16", "int32")),
        (
            'posenc.table(10, 8, preset="timestep", flip_sin_to_cos=1)',
            ("`flip_sin_to_cos`", "True or False"),
        ),
        ("posenc.grid((14, 14), 30)", ("`dim`", "multiple of 4", "'mae'", "got 30")),
        ('posenc.grid((2, 4, 4), 24, preset="diffusers-3d")', ("multiple of 16", "got 24")),
        ('posenc.grid((3, 3), 4, preset="t2t-nd")', ("too small", "n=1")),
        (
            'posenc.grid((3, 3), 3, preset="tatp22", cls_token=True)',
            ("unknown option `cls_token`",),
        ),
        ('posenc.grid((3, 3, 3), 8, preset="mae")', ("`shape`", "2 axes")),
        ("posenc.grid((3, -3), 8)", ("`shape[1]`", ">= 0")),
        ('posenc.grid("3x3", 8)', ("`shape`", "'3x3'")),
        ('posenc.grid((4, 4), 8, preset="nerf")', ("multiple of 4", "included inputs", "got 8")),
        ("posenc.encode([1.0, math.nan], 8)", ("`positions`", "finite", "nan")),
        ("posenc.encode([1.0, math.inf], 8)", ("`positions`", "finite", "inf")),
        ('posenc.encode(["a"], 8)', ("`positions`", "numbers")),
        ("posenc.encode([True, False], 8)", ("`positions`", "bool")),
        ("posenc.encode([1 + 2j], 8)", ("`positions`", "complex")),
        (
            'posenc.encode([[0, 1]], 8, preset="mae", cls_token=True)',
            ("`cls_token`", "grid() only"),
        ),
        ('posenc.encode([0, 1, 2], 8, preset="mae")', ("last axis of 2", "(3,)")),
        ('posenc.encode([0, 1], 8, preset="mae", ndim=3)', ("`ndim`", "must be 2", "3")),
        ("posenc.detr(np.zeros((1, 4, 4), bool), 64, scale=3.0)", ("`scale`", "normalize=True")),
        ("posenc.detr(np.zeros((4, 4), bool), 64)", ("`mask`", "[batch, H, W]", "(4, 4)")),
        ("posenc.detr(np.zeros((1, 4, 4)), 64)", ("`mask`", "boolean", "float64")),
        ("posenc.detr(np.zeros((1, 4, 4), bool), 30)", ("`dim`", "multiple of 4", "30")),
        ('posenc.preset("nope")', ("`preset` 'nope' is unknown", "presets are")),
    ),
    # Flags, module inputs and custom encodings
    *_area(
        "Flags, module inputs and custom encodings",
        ('PositionalEncoding(8, batch_first="no")', ("`batch_first`", "True or False")),
        (
            'SinusoidalEmbedding(8, preset="fairseq", padding_idx=1, from_tokens="no")',
            ("`from_tokens`", "'no'"),
        ),
        (
            "PositionalEncoding(8)(torch.zeros(1, 2, 8), offset=torch.tensor([True]))",
            ("`offset`", "torch.bool"),
        ),
        ("posenc.fairseq_positions([[1, 2]], padding_idx=1.5)", ("`padding_idx`", "1.5")),
        ('posenc.Encoding(widths="bogus")', ("`widths`", "'exact'", "'bogus'")),
        ('posenc.Encoding(layout="halfs")', ("`layout`", "'halves'")),
        ("posenc.Encoding(base=-1.0)", ("`base`", "> 0", "-1.0")),
        ("posenc.Encoding(base=math.nan)", ("`base`", "finite")),
        ('posenc.Encoding(base="1e4")', ("`base`", "real number", "'1e4'")),
        ("posenc.Encoding(min_timescale=0.0)", ("`min_timescale`", "> 0")),
        ("posenc.Encoding(axis_order=(0, 0))", ("`axis_order`", "permutation")),
        ("posenc.Encoding(fractions=(0.5, 0.6))", ("`fractions`", "add up to 1")),
        ("posenc.Encoding(ndim=0)", ("`ndim`", ">= 1")),
    ),
    # Options and positions that would give NaN or inf
    *_area(
        "Options and positions that would give NaN or inf",
        (
            'posenc.table(4, 8, preset="tensor2tensor", min_timescale=1e-320)',
            ("frequencies", "overflow", "min_timescale"),
        ),
        ('posenc.table(4, 8, preset="timestep", max_period=1e-320)', ("frequencies", "overflow")),
        (
            'posenc.table(4, 8, preset="timestep", scale=1e308)',
            ("`offset` and `length`", "2^27", "`scale`=1e+308", "1e+308"),
        ),
        (
            'posenc.grid((4, 4), 16, preset="diffusers-2d", interpolation_scale=1e-310)',
            ("`interpolation_scale`", "finite"),
        ),
        ('posenc.table(4, 2049, preset="nerf")', ("finite angles",)),
        (
            'posenc.table(4, 8, preset="tensor2tensor", min_timescale=1e3, offset=1e6)',
            ("`offset` and `length`", "2^27", "`min_timescale`=1000.0", "is 1000"),
        ),
        (
            "posenc.table(4, 8, preset=custom(base=1.0, min_timescale=1e300))",
            ("frequencies", "overflow", "min_timescale=1e+300"),
        ),
        ("posenc.encode([2.0**30], 8)", ("`positions`", "2^27", "1.07374e+09")),
        (
            "posenc.table(10**30, 8)",
            ("`length`", "<= 9223372036854775807", "1000000000000000000000000000000"),
        ),
        (
            'posenc.encode(np.array([1e6]), 3, preset="nerf", dtype=np.float16)',
            ("fit the output dtype", "65504"),
        ),
    ),
    # Sizes, memory and types
    *_area(
        "Sizes, memory and types",
        ("posenc.table(4, 8, offset=10**400)", ("`offset`", "finite")),
        ("posenc.table(4, 10**30)", ("`dim`", "<= 1048576")),
        (
            "posenc.grid((10**6, 10**6), 16)",
            ("the output needs", "GiB", "memory here"),
            MEMORY,
        ),
        (
            "posenc.table(2**26, 1024, dtype=np.float64)",
            ("the output needs", "512 GiB", "memory here"),
            MEMORY,
        ),
        ('posenc.grid((3, 3), 16, preset="mae", dtype="int8")', ("`dtype`", "int8")),
        ('posenc.encode(np.array(["a"]), 8)', ("`positions`", "<U1")),
        ("posenc.encode([[1, 2], [3]], 8)", ("`positions`", "one shape")),
    ),
    *_area(
        "Non-finite positions, in every entry point",
        ("posenc.encode(np.array([1.0, np.nan]), 8)", ("`positions`", "finite", "nan")),
        ("posenc.torch.encode(torch.tensor([1.0, math.inf]), 8)", ("`positions`", "finite")),
        ("Timesteps(8)(torch.tensor([1.0, math.inf]))", ("finite", "inf")),
        ("Timesteps(8)(torch.tensor([math.nan]))", ("finite", "nan")),
        (
            "PositionalEncoding(8)(torch.zeros(1, 2, 8), torch.tensor([0.0, math.nan]))",
            ("finite", "nan"),
        ),
        ("posenc.encode(np.array([2**64 - 1], dtype=np.uint64), 8)", ("`positions`", "2^53")),
        ("posenc.context_parallel_positions(4, 0, 1, offset=2**63 - 1)", ("`offset`", "<=")),
    ),
    *_area(
        "Valid calls at the edges",
        (
            "PositionalEncoding(64).half().float()(torch.zeros(1, 100, 64))",
            "same(out[0], posenc.table(100, 64, dtype=torch.float32))",
        ),
        (
            "PositionalEncoding(8, cached_length=4)(torch.zeros(1, 4, 8), "
            "torch.tensor([0, 0, 0, 1], dtype=torch.uint8))",
            "same(out[0], posenc.encode(np.array([0, 0, 0, 1]), 8))",
        ),
        (
            "posenc.encode(np.array([7, 2**20], dtype=np.uint64), 8)",
            "same(out, posenc.encode(np.array([7, 2**20]), 8))",
        ),
        (
            'posenc.table(64, 21, preset="nerf", dtype=torch.float32)',
            'same(out, posenc.table(64, 21, preset="nerf"))',
        ),
        (
            'posenc.encode(torch.tensor([[1, 2], [300, 4000]]), 63, preset="tatp22", ndim=2)',
            "same(out, posenc.encode(np.array([[1, 2], [300, 4000]]), 63, "
            'preset="tatp22", ndim=2))',
        ),
        (
            "posenc.detr(np.zeros((1, 4, 4), bool), 64, dtype=torch.float32)",
            "same(out, posenc.detr(np.zeros((1, 4, 4), bool), 64))",
        ),
        (
            'PositionalEncoding(3, preset="nerf")(torch.zeros(1, 5, 3))',
            'same(out[0], posenc.table(5, 3, preset="nerf"))',
        ),
        ('posenc.table(4, 8, device="meta")', "out.is_meta and tuple(out.shape) == (4, 8)"),
        (
            'posenc.grid((0, 4), 16, preset="diffusers-2d")',
            "out.shape == (0, 16)",
        ),
        (
            'posenc.encode(np.float32([12345.678]), 320, preset="timestep")',
            "np.abs(out - ref.timestep(np.float32([12345.678]), 320)).max() < 2**-24",
        ),
    ),
    *_area(
        "Rotary embeddings",
        ("posenc.rope(np.arange(8), 63)", ("`dim`", "even", "63")),
        (
            'posenc.rope(np.arange(8), 64, scaling={"rope_type": "ntk-by-parts"})',
            ("scaling['rope_type']", "'ntk-by-parts'", "'dynamic'"),
        ),
        (
            'posenc.rope(np.arange(8), 64, scaling={"rope_type": "yarn", "factor": 4.0})',
            ("scaling['original_max_position_embeddings']", "required", "yarn"),
        ),
        (
            'posenc.rope(np.arange(8), 64, scaling={"rope_type": "linear", "factor": 0})',
            ("scaling['factor']", "> 0", "0"),
        ),
        (
            'posenc.rope(np.arange(8), 8, scaling={"rope_type": "linear", "factor": 2, "beta": 1})',
            ("scaling['beta']", "not a key", "linear"),
        ),
        (
            'posenc.rope(np.arange(8), 8, scaling={"rope_type": "longrope", "short_factor": [1.0], '
            '"long_factor": [1.0], "original_max_position_embeddings": 4, "factor": 2.0})',
            ("scaling['short_factor']", "4 factors", "got 1"),
        ),
        (
            'posenc.rope(np.arange(8), 64, scaling={"rope_theta": 5e5})',
            ("scaling['rope_theta']", "`base`", "10000"),
        ),
        (
            "posenc.rope(np.zeros((3, 4), int), 64, sections=(16, 8, 4))",
            ("`sections`", "dim / 2 = 32", "28"),
        ),
        (
            "posenc.rope(np.zeros((2, 4), int), 64, sections=(16, 8, 8))",
            ("`positions`", "leading axis of 3", "(2, 4)"),
        ),
        ("posenc.rope(np.array([1.0, np.nan]), 64)", ("`positions`", "finite", "nan")),
        (
            "posenc.apply_rope(torch.zeros(2, 8, 32), *posenc.rope(torch.arange(8), 64))",
            ("rotary width", "64", "at most", "32"),
        ),
        (
            'posenc.rope(torch.arange(8), 64, compat="vllm")',
            ("`compat`", "'transformers'", "'vllm'"),
        ),
        (
            "posenc.rope(torch.arange(100_000, 100_064), 64, base=5e5)[0]",
            "np.abs(to_numpy(out).astype(np.float64) - np.cos(np.arange(100_000, 100_064)[:, None]"
            " * np.tile(5e5 ** (-np.arange(0, 64, 2) / 64), 2))).max() < 3.5e-8",
        ),
        ('posenc.rope(np.arange(8), 128, preset="whisper")', ("'whisper'", "sinusoidal", "rotary")),
        ('posenc.table(8, 128, preset="llama3")', ("'llama3'", "rotary preset", "posenc.rope")),
        (
            "RotaryEmbedding(64)(torch.zeros(8, 64), torch.zeros(8, 64))",
            ("`q`", "[batch, heads, seq, head_dim]", "(8, 64)"),
        ),
        (
            "RotaryEmbedding(64)(torch.zeros(1, 2, 8, 64), offset=torch.tensor([-1]))",
            ("`offset`", ">= 0", "-1"),
        ),
        (
            "RotaryEmbedding.from_hf(transformers.BertConfig())",
            ("model_type 'bert'", "not a family from_hf covers", "llama"),
        ),
        (
            "posenc.apply_rope(torch.zeros(8, 64), *posenc.rope(torch.arange(8), 64), "
            'compat="vllm")',
            ("`compat`", "'diffusers'", "'ltx2'", "'vllm'"),
        ),
        (
            "posenc.apply_rope(np.zeros((8, 64)), *posenc.rope(np.arange(8), 64), "
            'compat="diffusers")',
            ("`compat='diffusers'`", "torch code", "torch `x`"),
        ),
        (
            "posenc.apply_rope(torch.zeros(8, 64), "
            '*posenc.rope(torch.arange(8), 64, layout="compact"), "compact", compat="diffusers")',
            ("`compat='diffusers'`", "full-width tables", "'compact'"),
        ),
        (
            "posenc.apply_rope(torch.zeros(8, 64), "
            '*posenc.rope(torch.arange(8), 64, layout="interleaved"), "interleaved", '
            'compat="ltx2")',
            ("`compat='ltx2'`", "'halves' or 'block-halves'", "'interleaved'"),
        ),
    ),
    *_area(
        "Rotary embeddings of grids",
        ('posenc.rope_grid((21, -45, 3), 128, preset="wan")', ("`shape[1]`", ">= 0", "-45")),
        ('posenc.rope_grid((21, 45.5, 3), 128, preset="wan")', ("`shape[1]`", "integer", "45.5")),
        ('posenc.rope_grid((21, True, 3), 128, preset="wan")', ("`shape[1]`", "integer", "True")),
        (
            'posenc.rope_grid((21, 45), 128, preset="wan")',
            ("`shape`", "3 axes", "axes_dim (44, 42, 42)", "(21, 45)"),
        ),
        ('posenc.rope_grid((21, 0, 3), 128, preset="wan")[0]', "out.shape == (0, 128)"),
        ("posenc.rope_grid((8, 8), 64)", ("`rope_grid`", "one block per grid axis", "`axes_dim`")),
        (
            'posenc.rope_grid((4, 4), 64, axes_dim=(32, 32), compat="diffusers")',
            ("`compat`", "a preset that has one", "preset=None"),
        ),
        (
            'posenc.rope_grid((4, 4, 4), 128, preset="wan", compat="timm")',
            ("`compat`", "'diffusers'", "'timm'"),
        ),
        (
            "posenc.rope_grid((4, 4), 64, axes_dim=(32, 32), step=(1, 2, 3))",
            ("`step`", "one per axis", "(1, 2, 3)"),
        ),
        (
            'posenc.rope_grid((4, 4), 88, preset="hunyuan-dit", crop=((0, 4), (32, 28)), start=1)',
            ("`crop`", "without `start` and `step`"),
        ),
        (
            'AxialRotaryEmbedding(128, preset="wan")((21, -45, 3))',
            ("`shape[1]`", ">= 0", "-45"),
        ),
        (
            'AxialRotaryEmbedding(128, preset="wan")((21, 45.5, 3))',
            ("`shape[1]`", "integer", "45.5"),
        ),
        (
            'AxialRotaryEmbedding(128, preset="wan")((21, True, 3))',
            ("`shape[1]`", "integer", "True"),
        ),
        (
            'AxialRotaryEmbedding(128, preset="wan")((21, 45))',
            ("`shape`", "3 axes", "axes_dim (44, 42, 42)", "(21, 45)"),
        ),
        (
            'AxialRotaryEmbedding(128, preset="wan")((21, 0, 3))[0]',
            "tuple(out.shape) == (0, 128)",
        ),
        ("AxialRotaryEmbedding(64)", ("`AxialRotaryEmbedding`", "one block per grid axis")),
        (
            'AxialRotaryEmbedding(2048, preset="ltx-video")',
            ("take turns per frequency", "posenc.rope_grid", "'ltx-video'"),
        ),
        (
            'AxialRotaryEmbedding(128, preset="wan", cached_length=-1)',
            ("`cached_length`", ">= 0", "-1"),
        ),
    ),
    *_area(
        "The command line",
        ("posenc table mae --grid 0,4 -o x.npy", ("--grid", ">= 1", "'0,4'")),
        ("posenc table mae --offset 3 -o x.npy", ("`--offset`", "1-D", "3")),
        ("posenc table mae --length 9 -o x.npy", ("`--length`", "1-D", "9")),
        ("posenc plot vaswani --length 0 -o x.png", ("--length", ">= 1", "'0'")),
        ("posenc table vaswani --length 10**30 -o x.npy", ("--length", "'10**30'")),
        ("posenc table vaswani --set base=1e400 -o x.npy", ("`base`", "finite")),
        ("posenc table vaswani --offset 1e400 -o x.npy", ("`offset`", "finite")),
        ("posenc table vaswani --dtype bfloat16 -o x.npy", ("bfloat16", ".npy")),
        ("posenc plot vaswani --kind heatmap --dims 1 -o x.png", ("`--dims`", "curves")),
        ("posenc table vasvani -o x.npy", ("`preset`", "unknown", "'vaswani'")),
        ("posenc identify missing.npy", ("does not exist",)),
        ("posenc identify table.txt", ("FILE must be one of",)),
    ),
]


# -- running a case ---------------------------------------------------------------------------


def namespace() -> dict[str, Any]:
    """What the code of a case may use."""
    import torch
    import transformers

    import posenc.torch
    from posenc.torch import (
        AxialRotaryEmbedding,
        PositionalEncoding,
        RotaryEmbedding,
        SinusoidalEmbedding,
        Timesteps,
    )
    from tests import reference as ref
    from tests.helpers import to_numpy

    def custom(**fields: Any) -> posenc.Preset:
        return posenc.Preset("custom", "a test", "a test", posenc.Encoding(**fields))

    def same(a: Any, b: Any) -> bool:
        return bool(np.array_equal(to_numpy(a), to_numpy(b)))

    return {
        "posenc": posenc,
        "np": np,
        "math": math,
        "torch": torch,
        "ref": ref,
        "custom": custom,
        "same": same,
        "to_numpy": to_numpy,
        "PositionalEncoding": PositionalEncoding,
        "AxialRotaryEmbedding": AxialRotaryEmbedding,
        "RotaryEmbedding": RotaryEmbedding,
        "transformers": transformers,
        "SinusoidalEmbedding": SinusoidalEmbedding,
        "Timesteps": Timesteps,
    }


def run(case: Case) -> tuple[str, Any]:
    """``("error", message)``, ``("value", out)`` or, for a command, ``(exit status, stderr)``."""
    if case.command:
        return _command(case.code.split()[1:])
    try:
        return "value", eval(case.code, namespace())
    except posenc.PosencError as err:
        return "error", str(err)


def _command(argv: list[str]) -> tuple[str, Any]:
    from posenc.app import cli

    err = io.StringIO()
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        Path("table.txt").write_text("1,2\n")
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    code = cli.main(argv)
                except SystemExit as stop:
                    code = int(stop.code or 0)
        finally:
            os.chdir(here)
    return str(code), err.getvalue()


# -- docs/errors.md ---------------------------------------------------------------------------

DOC = Path(__file__).resolve().parent.parent / "docs" / "errors.md"
INTRO = """# Every input and what it gets

posenc either returns the exact value or raises `posenc.PosencError` (a `ValueError`) naming
the argument, the rule and the value, before any work is done. The command line prints that
message as one line and exits with status 2. This page lists inputs at and past the edges
of posenc's entry points, class by class, with the message each one gets, and valid calls at
the edges with what their result satisfies.

Generated by `python -m tests.cases` from `tests/cases.py`; `tests/test_errors.py` runs every
case and checks that this page lists each one with its message. Where a message quotes the
memory of the machine it runs on, the page shows that number as "…".
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render() -> str:
    out = [INTRO]
    area = None
    for case in CASES:
        if case.area != area:
            area = case.area
            out += [f"\n## {area}\n", "| input | what it gets |", "|---|---|"]
        kind, got = run(case)
        if case.command:
            what = f"exit {kind}: {_cell(got)}"
        elif kind == "error":
            shown, hits = re.subn(case.varies, "…", got) if case.varies else (got, 1)
            assert hits, f"{case.code}: no {case.varies!r} in {got!r}"
            what = f"`PosencError`: {_cell(shown)}"
        else:
            what = f"the value: `{_cell(case.holds)}`"
        out.append(f"| `{_cell(case.code)}` | {what} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if DOC.read_text() == text else 1)
    DOC.write_text(text)
    print(f"wrote {DOC} ({len(CASES)} cases)")
