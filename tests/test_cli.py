"""The posenc command, run as a user would: a subprocess, exit codes, files read back."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import posenc
from tests import reference as ref
from tests.helpers import whisper_float32


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "posenc", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def test_help_is_light():
    code = (
        "import sys, posenc.app.cli; print(sorted(m for m in ('torch', 'matplotlib', "
        "'safetensors') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    proc = run("--help")
    assert proc.returncode == 0
    assert "identify" in proc.stdout


def test_presets_lists_every_preset_with_origin():
    proc = run("presets", "-v")
    assert proc.returncode == 0
    for name in posenc.presets():
        assert f"\n{name} " in "\n" + proc.stdout
        assert posenc.preset(name).origin in proc.stdout


@pytest.mark.parametrize("fmt", ["npy", "csv", "json", "pt", "safetensors"])
def test_table_formats_read_back(tmp_path, fmt):
    path = tmp_path / f"pe.{fmt}"
    proc = run("table", "whisper", "--length", "300", "--dim", "64", "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # quiet when not a terminal
    want = posenc.table(300, 64, preset="whisper")
    if fmt == "npy":
        got = np.load(path)
    elif fmt == "csv":
        got = np.loadtxt(path, delimiter=",", dtype=np.float32)
    elif fmt == "json":
        doc = json.loads(path.read_text())
        assert doc["shape"] == [300, 64]
        assert doc["preset"] == "whisper"
        got = np.array(doc["data"], dtype=np.float32)
    elif fmt == "pt":
        torch = pytest.importorskip("torch")
        got = torch.load(path, weights_only=True).numpy()
    else:
        st = pytest.importorskip("safetensors.numpy")
        got = st.load_file(str(path))["pe"]
    assert np.array_equal(got, want)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_large_npy_is_streamed_and_identical(tmp_path):
    path = tmp_path / "big.npy"
    rows = (1 << 26) // (256 * 4) + 777  # just over the streaming threshold
    proc = run(
        "table",
        "fairseq",
        "--length",
        str(rows),
        "--dim",
        "256",
        "--offset",
        "3",
        "--set",
        "padding_idx=5",
        "-o",
        str(path),
    )
    assert proc.returncode == 0, proc.stderr
    assert "in slices" in proc.stdout
    got = np.load(path, mmap_mode="r")
    want = posenc.table(rows, 256, preset="fairseq", offset=3, padding_idx=5)
    assert np.array_equal(got, want)
    assert not want[2].any()


def test_table_grid_offset_dtype_and_options(tmp_path):
    path = tmp_path / "g.npy"
    proc = run(
        "table",
        "mae",
        "--grid",
        "6,7",
        "--dim",
        "32",
        "--dtype",
        "float64",
        "--set",
        "cls_token=true",
        "-o",
        str(path),
    )
    assert proc.returncode == 0, proc.stderr
    assert np.abs(np.load(path) - ref.mae(32, (6, 7), True)).max() < 1e-10
    path = tmp_path / "t.npy"
    proc = run(
        "table",
        "tensor2tensor",
        "--length",
        "50",
        "--dim",
        "17",
        "--offset",
        "3",
        "--set",
        "max_timescale=500",
        "--dtype",
        "float16",
        "-o",
        str(path),
    )
    assert proc.returncode == 0, proc.stderr
    got = np.load(path)
    assert got.dtype == np.float16
    assert np.array_equal(got, ref.t2t_1d(50, 17, 1.0, 500.0, 3).astype(np.float16))


def test_table_bfloat16_safetensors(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    path = tmp_path / "pe.safetensors"
    proc = run(
        "table",
        "vaswani",
        "--length",
        "64",
        "--dim",
        "32",
        "--dtype",
        "bfloat16",
        "--name",
        "encoder.pe",
        "-o",
        str(path),
    )
    assert proc.returncode == 0, proc.stderr
    got = st.load_file(str(path))["encoder.pe"]
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, posenc.table(64, 32, dtype=torch.bfloat16))


def test_never_overwrites_without_force(tmp_path):
    path = tmp_path / "pe.npy"
    path.write_bytes(b"precious")
    proc = run("table", "vaswani", "-o", str(path))
    assert_one_line_error(proc, "exists", "--force")
    assert path.read_bytes() == b"precious"
    proc = run("table", "vaswani", "-o", str(path), "--force")
    assert proc.returncode == 0
    assert np.load(path).shape == (128, 128)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["table", "vasvani", "-o", "x.npy"], ["`preset`", "unknown", "'vaswani'"]),
        (["table", "vaswani", "--dim", "7", "-o", "x.npy"], ["`dim`", "multiple of 2", "7"]),
        (["table", "vaswani", "--set", "bse=3", "-o", "x.npy"], ["`bse`", "'base'"]),
        (["table", "vaswani", "--set", "nokey", "-o", "x.npy"], ["key=value"]),
        (["table", "vaswani", "-o", "x.txt"], ["`--format`", "npy"]),
        (["table", "vaswani", "--dim", "x", "-o", "x.npy"], ["--dim", "integer >= 1", "'x'"]),
        (["table", "vaswani"], ["-o/--output"]),
        (["table", "mae", "--grid", "a,b", "-o", "x.npy"], ["--grid", "'a,b'"]),
        (["plot", "vaswani", "-o", "x.gif"], ["`--output`", ".png or .svg"]),
        (["plot", "vaswani", "--kind", "patch", "-o", "x.png"], ["--kind patch", "2D"]),
        (["plot", "vaswani", "--dims", "4,999", "-o", "x.png"], ["`--dims`", "999"]),
        (["identify", "missing.npy"], ["does not exist"]),
        (["frobnicate"], ["invalid choice"]),
    ],
)
def test_bad_arguments_one_line_exit_2(tmp_path, args, fragments):
    proc = run(*args, cwd=tmp_path)
    assert_one_line_error(proc, *fragments)
    assert not list(tmp_path.iterdir())  # nothing written


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG that decodes, with more than one colour in it."""
    image = pytest.importorskip("matplotlib.image").imread(path)
    assert image.ndim == 3
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 10
    return image.shape[1], image.shape[0]


@pytest.mark.parametrize(
    ("args", "labels"),
    [
        (["vaswani", "--kind", "curves", "--dims", "0,1,6"], ["position", "channel 6"]),
        (["whisper", "--kind", "heatmap"], ["position", "channel"]),
        (["fairseq", "--kind", "similarity"], ["distance k between positions"]),
        (["mae", "--kind", "patch", "--grid", "8,10", "--dim", "64"], ["column", "row"]),
    ],
)
def test_plot_png_and_svg(tmp_path, args, labels):
    pytest.importorskip("matplotlib")
    png, svg = tmp_path / "f.png", tmp_path / "f.svg"
    assert run("plot", *args, "-o", str(png)).returncode == 0
    w, h = _png_size(png)
    assert w > 300
    assert h > 200
    proc = run("plot", *args, "-o", str(svg))
    assert proc.returncode == 0, proc.stderr
    text = svg.read_text()
    for label in labels:
        assert label in text, label
    assert args[0] in text  # the title names the preset


def test_demo_writes_figures_and_summary(tmp_path):
    pytest.importorskip("matplotlib")
    proc = run("demo", "--out", str(tmp_path / "d"))
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert names == sorted(
        ["curves.png", "heatmap.png", "similarity.png", "patch.png", "accuracy.png"]
    )
    for name in names:
        _png_size(tmp_path / "d" / name)
    assert "accuracy.png" in proc.stdout
    assert "posenc by" in proc.stdout
    again = run("demo", "--out", str(tmp_path / "d"))
    assert_one_line_error(again, "exists", "--force")


# identify: tables as the originals write them (float32 arithmetic, checkpoint dtypes)


def test_identify_whisper_buffer_in_pt(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "encoder.pt"
    state = {
        "encoder.positional_embedding": whisper_float32(1500, 384),
        "encoder.conv1.weight": torch.randn(384, 80, 3),
    }
    torch.save(state, path)
    proc = run("identify", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "'whisper'" in proc.stdout
    assert "fairseq" in proc.stdout  # the same numbers
    assert "posenc.table(1500, 384, preset='whisper')" in proc.stdout


def test_identify_fairseq_with_pad_row_safetensors(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    table = ref.fairseq(130, 64, padding_idx=1).astype(np.float32)
    path = tmp_path / "m.safetensors"
    st.save_file({"decoder.embed_positions.weights": table}, str(path))
    proc = run("identify", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "padding_idx=1" in proc.stdout


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_identify_mae_with_class_row_in_16_bits(tmp_path, dtype):
    torch = pytest.importorskip("torch")
    table = torch.from_numpy(ref.mae(192, 14, cls_token=True)).to(getattr(torch, dtype))
    path = tmp_path / "vit.pt"
    torch.save({"pos_embed": table[None]}, path)
    proc = run("identify", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "'mae'" in proc.stdout
    assert "cls_token=True" in proc.stdout
    assert dtype in proc.stdout


def test_identify_timm_reverse_coord_npy(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, ref.timm_2d((6, 8), 64, reverse_coord=True).astype(np.float32))
    proc = run("identify", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "reverse_coord=True" in proc.stdout


def test_identify_says_plainly_a_learned_table_is_not_sinusoidal(tmp_path):
    rng = np.random.default_rng(0)
    learned = ref.vaswani(197, 64) + rng.normal(0, 0.2, (197, 64))
    path = tmp_path / "learned.npy"
    np.save(path, learned.astype(np.float32))
    proc = run("identify", str(path))
    assert proc.returncode == 1
    assert "not a known sinusoidal encoding" in proc.stdout
    assert "closest: posenc.table(197, 64, preset='vaswani')" in proc.stdout


def test_identify_names_no_closest_preset_for_an_unrelated_table(tmp_path):
    """A table off from every preset by the whole range has no closest preset."""
    learned = np.random.default_rng(1).uniform(-1, 1, (197, 64))
    path = tmp_path / "unrelated.npy"
    np.save(path, learned.astype(np.float32))
    proc = run("identify", str(path))
    assert proc.returncode == 1
    assert "not a known sinusoidal encoding" in proc.stdout
    assert "closest:" not in proc.stdout


def test_identify_needs_name_when_ambiguous(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "two.safetensors"
    st.save_file({"a": np.zeros((4, 8), np.float32), "b": np.ones((5, 8), np.float32)}, str(path))
    assert_one_line_error(run("identify", str(path)), "--name", "a, b")
    assert_one_line_error(run("identify", str(path), "--name", "c"), "'c'", "a, b")


def test_progress_bar_only_on_a_terminal_after_a_second(monkeypatch, capsys):
    from posenc.app import commands

    clock = iter([0.0, 0.5, 2.0, 3.0])
    monkeypatch.setattr(commands.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    bar = commands._Bar("job")
    bar(10, 100)  # 0.5 s: nothing yet
    assert capsys.readouterr().err == ""
    bar(50, 100)
    bar.close()
    err = capsys.readouterr().err
    assert "50.0%" in err
    assert err.endswith("\n")
    assert math.isclose(err.count("#"), 15)


# the command line never shows a traceback: bad files, options that do not apply, signals


def _bad_files(tmp: Path) -> dict[str, Path]:
    """Files `identify` must refuse in one line: garbage, empty, truncated, wrong contents."""
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.numpy")
    good = posenc.table(20, 16)
    np.save(tmp / "ok.npy", good)
    torch.save({"pe": torch.from_numpy(good)}, tmp / "ok.pt")
    st.save_file({"pe": good}, str(tmp / "ok.safetensors"))
    np.savez(tmp / "ok.npz", pe=good)
    files = {}
    rng = np.random.default_rng(0)
    for ext in ("npy", "pt", "safetensors", "npz"):
        data = (tmp / f"ok.{ext}").read_bytes()
        for kind, body in (
            ("garbage", rng.bytes(300)),
            ("empty", b""),
            ("truncated", data[: len(data) // 2]),
        ):
            files[f"{kind}.{ext}"] = tmp / f"{kind}.{ext}"
            files[f"{kind}.{ext}"].write_bytes(body)
    np.save(tmp / "complex.npy", good.astype(np.complex64))
    np.save(tmp / "objects.npy", np.array([object()] * 4), allow_pickle=True)
    np.save(tmp / "no_rows.npy", np.zeros((0, 16), np.float32))
    np.save(tmp / "vector.npy", np.zeros(16, np.float32))
    np.save(tmp / "nan.npy", np.full((4, 8), np.nan, np.float32))
    torch.save(torch.nn.Linear(2, 2), tmp / "module.pt")
    torch.save({"pe": torch.from_numpy(good).to(torch.complex64)}, tmp / "complex.pt")
    torch.save({"pe": torch.ones(4, 8, dtype=torch.bool)}, tmp / "bool.pt")
    (tmp / "wrong.txt").write_text("1,2\n")
    (tmp / "dir.npy").mkdir()
    for name in ("complex.npy", "objects.npy", "no_rows.npy", "vector.npy", "nan.npy"):
        files[name] = tmp / name
    for name in ("module.pt", "complex.pt", "bool.pt", "wrong.txt", "dir.npy"):
        files[name] = tmp / name
    return files


BAD_FILE_MESSAGES = {
    "truncated.npy": "truncated",
    "complex.npy": "real numbers",
    "complex.pt": "real numbers",
    "bool.pt": "real numbers",
    "objects.npy": "objects",
    "no_rows.npy": "empty",
    "vector.npy": "2-D",
    "nan.npy": "NaN",
    "module.pt": "objects other than tensors",
    "wrong.txt": "FILE must be one of",
    "dir.npy": "not a regular file",
}


def test_identify_refuses_every_bad_file_in_one_line(tmp_path):
    files = _bad_files(tmp_path)
    assert len(files) == 22
    for name, path in files.items():
        proc = run("identify", str(path))
        assert_one_line_error(proc, BAD_FILE_MESSAGES.get(name, path.name))


def test_identify_reads_numpy_arrays_inside_pt_and_npz(tmp_path):
    torch = pytest.importorskip("torch")
    table = ref.t2t_1d(40, 32, 1.0, 1e4, 0).astype(np.float32)
    torch.save({"model": {"encoder.pe": table, "w": [np.ones((3, 3))]}}, tmp_path / "n.pt")
    np.savez(tmp_path / "n.npz", positional=table, bias=np.zeros(8))
    for name in ("n.pt", "n.npz"):
        proc = run("identify", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr
        assert "'whisper'" in proc.stdout or "'tensor2tensor'" in proc.stdout, proc.stdout


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["table", "mae", "--grid", "0,4"], ["--grid", ">= 1", "'0,4'"]),
        (["table", "mae", "--offset", "3"], ["`--offset`", "1-D", "grid", "3"]),
        (["table", "vaswani", "--grid", "4,4", "--offset", "3"], ["`--offset`", "1-D"]),
        (["table", "mae", "--length", "9"], ["`--length`", "1-D", "--grid", "9"]),
        (["plot", "vaswani", "--length", "0"], ["--length", ">= 1", "'0'"]),
        (["plot", "vaswani", "--kind", "heatmap", "--dims", "1"], ["`--dims`", "curves"]),
        (["plot", "vaswani", "--dims", "a,b"], ["--dims", "'a,b'"]),
        (["table", "vaswani", "--length", "10**30"], ["--length", "'10**30'"]),
        (["table", "vaswani", "--length", "1" + "0" * 30], ["--output", "GiB", "free"]),
        (["table", "vaswani", "--offset", "1e400"], ["`offset`", "finite", "inf"]),
        (["table", "vaswani", "--offset", "9007199254740993"], ["`offset`", "9.0072e+15"]),
        (["table", "vaswani", "--set", "base=1e400"], ["`base`", "finite"]),
        (["table", "vaswani", "--set", "base=1" + "0" * 5000], ["`base`", "real number"]),
        (["table", "vaswani", "--set", "base=" + "[" * 500], ["`base`", "real number"]),
        (["table", "vaswani", "--set", "base=1j"], ["`base`", "real number", "1j"]),
        (["table", "timestep", "--set", "max_period=1e-320"], ["max_period"]),
        # refused before computing: this table would need 2 TB
        (["table", "vaswani", "--length", str(10**9), "--dtype", "bfloat16"], ["bfloat16", ".npy"]),
    ],
)
def test_options_are_checked_before_computing(tmp_path, args, fragments):
    proc = run(*args, "-o", str(tmp_path / ("x.png" if args[0] == "plot" else "x.npy")))
    assert_one_line_error(proc, *fragments)
    assert list(tmp_path.iterdir()) == []


def test_large_offsets_stay_exact(tmp_path):
    path = tmp_path / "o.npy"
    offset = 2**24 + 1  # a float32 --offset would round this to 2**24
    proc = run("table", "vaswani", "--length", "3", "--dim", "8", "--offset", str(offset))
    proc = run(
        "table",
        "vaswani",
        "--length",
        "3",
        "--dim",
        "8",
        "--offset",
        str(offset),
        "-o",
        str(path),
        "--dtype",
        "float64",
    )
    assert proc.returncode == 0, proc.stderr
    assert np.abs(np.load(path) - ref.vaswani(3, 8, offset=offset)).max() < 1e-9


def _umask_run(mask: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "posenc", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        umask=mask,
    )


@pytest.mark.parametrize("ext", ["npy", "safetensors", "json"])
def test_new_files_follow_the_umask_and_force_keeps_the_mode(tmp_path, ext):
    path = tmp_path / f"pe.{ext}"
    for mask, mode in ((0o022, 0o644), (0o027, 0o640), (0o077, 0o600)):
        path.unlink(missing_ok=True)
        proc = _umask_run(mask, "table", "vaswani", "--length", "4", "-o", str(path))
        assert proc.returncode == 0, proc.stderr
        assert path.stat().st_mode & 0o777 == mode, (oct(mask), oct(path.stat().st_mode))
    path.chmod(0o604)
    proc = _umask_run(0o077, "table", "vaswani", "--length", "4", "-o", str(path), "--force")
    assert proc.returncode == 0, proc.stderr
    assert path.stat().st_mode & 0o777 == 0o604


@pytest.mark.parametrize(
    ("signame", "name", "length", "dim"),
    [
        ("SIGINT", "big.csv", "400000", "64"),  # a text table, written at the end
        ("SIGINT", "big.npy", "3000000", "256"),  # a streamed .npy, written in slices
        ("SIGTERM", "big.npy", "3000000", "256"),
    ],
)
def test_signals_remove_the_partial_file(tmp_path, signame, name, length, dim):
    import signal
    import time

    path = tmp_path / name
    proc = subprocess.Popen(
        [sys.executable, "-m", "posenc", "table", "vaswani", "--length", length, "--dim", dim,
         "-o", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(f".{name}.*")) and time.monotonic() < deadline:
        time.sleep(0.02)  # wait until the write has begun
    signum = getattr(signal, signame)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    assert err.strip() == f"posenc: interrupted ({signame})"
    assert list(tmp_path.iterdir()) == []


def test_a_signal_as_the_partial_file_is_made_leaves_nothing(tmp_path, monkeypatch):
    """A signal the instant the temporary file exists (the race the test above hit under load:
    a `.part` file left behind) removes it too."""
    import os

    from posenc.app import files

    made = os.open

    def interrupted(*args, **kwargs):
        os.close(made(*args, **kwargs))
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "open", interrupted)
    with pytest.raises(KeyboardInterrupt), files.atomic(tmp_path / "t.npy"):
        pass
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_missing_extra_is_a_failure_not_exit_1(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None; from posenc.app.cli import main; "
        f"sys.exit(main(['plot', 'vaswani', '-o', {str(tmp_path / 'x.png')!r}]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert_one_line_error(proc, "matplotlib", "pip install 'posenc[plot]'")


def test_an_internal_error_is_one_line_exit_2(monkeypatch, capsys):
    from posenc.app import cli

    def broken(args):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(cli, "cmd_presets", broken)
    monkeypatch.delenv("POSENC_TRACEBACK", raising=False)
    assert cli.main(["presets"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "internal error" in err
    assert "ZeroDivisionError: boom" in err
    monkeypatch.setenv("POSENC_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        cli.main(["presets"])


def test_python_m_posenc_is_the_command():
    proc = subprocess.run(
        [sys.executable, "-m", "posenc", "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0
    assert "identify" in proc.stdout


# fuzz: random arguments and random or damaged files never give a traceback


def _main(argv: list[str]) -> tuple[int, str, str]:
    """The command in this process: (exit status, stdout, stderr)."""
    import contextlib
    import io

    from posenc.app import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as stop:  # argparse: usage errors and --help
            code = int(stop.code or 0)
    return code, out.getvalue(), err.getvalue()


def _assert_clean(code: int, err: str, command: str) -> None:
    assert code in ((0, 1, 2) if command == "identify" else (0, 2)), (code, err)
    if code == 2:
        assert err.count("\n") == 1, err
        assert err.startswith("posenc"), err
    else:
        assert err == "", err
    assert "Traceback" not in err
    assert "internal error" not in err, err


VALUES = [
    "0", "1", "3", "-1", "8", "1e3", "nan", "inf", "1e400", "10**30", "1" + "0" * 30,
    "", "abc", "2,3", "0,4", "4x4", "1.5", "9007199254740993", "[[[", "True", "None", "1j",
]  # fmt: skip
FLAGS = ["--dim", "--length", "--offset", "--grid", "--dtype", "--format", "--name", "--kind",
         "--dims", "--set"]  # fmt: skip
SET_KEYS = ["base", "scale", "max_period", "padding_idx", "cls_token", "flip_sin_to_cos",
            "min_timescale", "max_timescale", "normalize", "bogus", ""]  # fmt: skip
EXTS = ["npy", "csv", "json", "pt", "safetensors", "svg", "txt", ""]


def _argv(data, out_dir: Path) -> list[str]:
    from hypothesis import strategies as st

    command = data.draw(st.sampled_from(["table", "plot", "identify", "presets", "frob"]))
    argv = [command]
    if command in ("table", "plot"):
        argv.append(data.draw(st.sampled_from([*posenc.presets(), "nope"])))
    for _ in range(data.draw(st.integers(0, 4))):
        flag = data.draw(st.sampled_from(FLAGS))
        if flag == "--set":
            value = f"{data.draw(st.sampled_from(SET_KEYS))}={data.draw(st.sampled_from(VALUES))}"
        elif flag == "--dtype":
            value = data.draw(st.sampled_from(["float32", "bfloat16", "float16", "int8"]))
        elif flag == "--kind":
            value = data.draw(st.sampled_from(["curves", "heatmap", "patch", "bars"]))
        else:
            value = data.draw(st.sampled_from(VALUES))
        argv += [flag, value]
    if command == "identify":
        argv.append(str(out_dir / f"missing.{data.draw(st.sampled_from(EXTS))}"))
    elif command in ("table", "plot"):
        argv += ["-o", str(out_dir / f"out.{data.draw(st.sampled_from(EXTS))}")]
    return argv


def test_fuzz_arguments_never_show_a_traceback():
    import tempfile

    from hypothesis import given
    from hypothesis import strategies as st

    pytest.importorskip("matplotlib")

    @given(data=st.data())
    def check(data):
        with tempfile.TemporaryDirectory() as tmp:
            argv = _argv(data, Path(tmp))
            code, _, err = _main(argv)
            _assert_clean(code, err, argv[0])

    check()


def test_fuzz_identify_on_random_and_damaged_files(tmp_path):
    import tempfile

    from hypothesis import given
    from hypothesis import strategies as st

    originals = {p.suffix: p.read_bytes() for p in _bad_files(tmp_path).values() if p.is_file()}
    for ext in ("npy", "pt", "safetensors", "npz"):
        originals[f".{ext}"] = (tmp_path / f"ok.{ext}").read_bytes()

    @given(
        ext=st.sampled_from(sorted(originals)),
        how=st.sampled_from(["random", "truncate", "flip"]),
        cut=st.floats(0, 1),
        noise=st.binary(min_size=1, max_size=64),
    )
    def check(ext, how, cut, noise):
        data = originals[ext]
        at = int(cut * len(data))
        if how == "random":
            body = noise * 8
        elif how == "truncate":
            body = data[:at]
        else:
            body = data[:at] + noise + data[at + len(noise) :]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"f{ext}"
            path.write_bytes(body)
            code, _, err = _main(["identify", str(path)])
            _assert_clean(code, err, "identify")

    check()


def test_version_and_bare_usage():
    proc = run("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"posenc {posenc.__version__}"
    proc = run()
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: posenc")
    for command in ("demo", "presets", "table", "plot", "identify"):
        assert command in proc.stderr  # the full help: every subcommand with its summary
    assert "Traceback" not in proc.stderr


def test_every_option_has_help_with_its_default():
    import argparse

    from posenc.app import cli

    top = cli.parser()
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    seen = 0
    for name, sub in subs.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or not action.option_strings:
                continue
            seen += 1
            assert action.help, (name, action.option_strings)
            if not action.required:
                assert "default" in action.help, (name, action.option_strings, action.help)
    assert seen >= 20


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_table_to_stdout(fmt):
    extra = [] if fmt == "csv" else ["--format", "json"]
    proc = run("table", "vaswani", "--length", "5", "--dim", "6", "--offset", "1000", "-o", "-",
               *extra)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    if fmt == "csv":
        got = np.array([[float(v) for v in line.split(",")] for line in proc.stdout.splitlines()])
    else:
        doc = json.loads(proc.stdout)
        assert doc["shape"] == [5, 6]
        got = np.array(doc["data"])
    want = ref.vaswani(5, 6, offset=1000)
    assert got.shape == (5, 6)
    np.testing.assert_allclose(got, want, rtol=0, atol=6e-8)  # float32, printed to 9 digits


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["table", "vaswani", "-o", "-", "--format", "npy"], ["`--output -`", "csv or json"]),
        (["table", "vaswani", "--name", "x", "-o", "x.npy"], ["`--name`", ".pt", "npy"]),
        (["table", "vaswani", "--name", "x", "-o", "-"], ["`--name`", "csv"]),
        (["plot", "mae", "--kind", "curves", "-o", "x.png"], ["--kind curves", "grid", "patch"]),
        (["plot", "diffusers-3d", "--kind", "patch", "-o", "x.png"], ["--kind patch", "2D"]),
        (["plot", "mae", "--dims", "1,2", "-o", "x.png"], ["`--dims`", "--kind patch"]),
        (["plot", "vaswani", "--length", "4", "--kind", "bars", "-o", "x.png"], ["--kind"]),
    ],
)
def test_options_that_do_not_apply_are_errors(tmp_path, args, fragments):
    proc = run(*args, cwd=tmp_path)
    assert_one_line_error(proc, *fragments)
    assert not list(tmp_path.iterdir())


def test_grid_presets_default_to_the_patch_view(tmp_path):
    pytest.importorskip("matplotlib")
    svg = tmp_path / "g.svg"
    proc = run("plot", "mae", "--dim", "64", "--grid", "6,8", "-o", str(svg))
    assert proc.returncode == 0, proc.stderr
    text = svg.read_text()
    assert "cell (3, 4)" in text  # the centre cell, marked on the grid
    assert "mae, d=64, grid 6x8" in text


def test_heatmap_marks_the_sin_cos_blocks(tmp_path):
    pytest.importorskip("matplotlib")
    svg = tmp_path / "h.svg"
    proc = run("plot", "mae", "--dim", "32", "--grid", "4,4", "--kind", "heatmap", "-o", str(svg))
    assert proc.returncode == 0, proc.stderr
    text = svg.read_text()
    # MAE: [sin w | cos w | sin h | cos h], the column axis first
    for label in ("sin, column", "cos, column", "sin, row", "cos, row"):
        assert label in text, label
    assert "d=32" in text


def test_the_typed_user_script_runs():
    """tests/typed/user_script.py is what mypy --strict checks in CI (its assert_type lines);
    here it runs, so every call it types is a real call."""
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "typed" / "user_script.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_package_is_typed():
    from importlib import resources

    assert resources.files("posenc").joinpath("py.typed").is_file()


# the figures' arithmetic, against tables written from the formula


def test_channel_map_and_spread_follow_the_layout():
    from posenc.app import plots

    ch = plots.channels("whisper", 64, 1, {}, grid=False)
    assert ch.kind == ("sin",) * 32 + ("cos",) * 32
    # whisper: timescales 10000^(i / 31), so channel i has period 2 pi 10000^(i / 31)
    np.testing.assert_allclose(ch.period[:32], 2 * np.pi * 1e4 ** (np.arange(32) / 31))
    assert ch.segments() == [(0, 32, "sin"), (32, 64, "cos")]
    picks = plots.spread(ch, 128)
    assert len(picks) == 4
    assert picks[0] == 0  # the fastest
    periods = [ch.period[j] for j in picks]
    assert periods == sorted(periods)
    assert periods[-1] <= 4 * 128 < 2 * np.pi * 1e4 ** (1 / 31) * 1e3  # far from the slowest
    assert periods[-1] > 100  # and spread to the slow ones a table of 128 shows
    # an odd-width interleaved table: channels 2i, 2i+1, and the padding zero at the end
    ch = plots.channels("tensor2tensor", 7, 1, {}, grid=False)
    assert ch.kind[-1] == "zero"


@pytest.mark.parametrize("reverse", [False, True])
def test_axis_similarity_reads_the_grid_in_its_token_order(reverse):
    from posenc.app import plots

    shape = (5, 7)
    pe = posenc.grid(shape, 64, preset="timm-2d", reverse_coord=reverse, dtype=np.float64)
    want = ref.timm_2d(shape, 64, reverse_coord=reverse)
    np.testing.assert_allclose(pe, want, atol=1e-12)
    tokens = plots.channels("timm-2d", 64, 2, {"reverse_coord": reverse}, grid=True).tokens
    cells = plots.cells(pe, shape, tokens)
    # cell (r, c) holds sin/cos of r in its row block whatever the token order: check the
    # row-axis sines against the formula
    omega = 1e4 ** (-np.arange(16) / 16)
    rows = np.arange(5)[:, None] * omega
    row_block = slice(16, 32) if reverse else slice(0, 16)  # sin h first unless reversed
    for c in range(7):
        np.testing.assert_allclose(cells[:, c, row_block], np.sin(rows), atol=1e-12)


def test_the_cli_page_runs_as_written(tmp_path):
    """Every command of docs/cli.md, in order, in an empty folder: exit 0, or the status its
    comment says ("exits N"), with every file it names written."""
    import re
    import shlex

    pytest.importorskip("matplotlib")
    page = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    lines = [
        line
        for block in re.findall(r"```bash\n(.*?)```", page, flags=re.S)
        for line in block.splitlines()
        if line.strip()
    ]
    assert len(lines) >= 15
    for line in lines:
        command, _, comment = line.partition("#")
        argv = shlex.split(command)
        assert argv[0] == "posenc", line
        proc = run(*argv[1:], cwd=tmp_path)
        found = re.search(r"exits (\d)", comment)
        want = int(found.group(1)) if found else 0
        assert proc.returncode == want, (line, proc.stderr)
        if want == 2:
            assert_one_line_error(proc)
        if "-o" in argv and argv[argv.index("-o") + 1] != "-" and want == 0:
            assert (tmp_path / argv[argv.index("-o") + 1]).stat().st_size > 0, line
