"""Smoke test of an installed posenc wheel, run from outside the source tree.

Checks that the installed package is the wheel (not the checkout), that its data files
shipped (py.typed), that the core works with NumPy alone, and that the command line runs
both as `posenc` and `python -m posenc`. Exits non-zero with a message on the first failure.
"""

from __future__ import annotations

import importlib.util
import math
import pathlib
import subprocess
import sys

import numpy as np

import posenc


def check(ok: bool, what: str) -> None:
    if not ok:
        sys.exit(f"smoke: FAILED: {what}")
    print(f"smoke: ok: {what}")


where = pathlib.Path(posenc.__file__).resolve()
check("site-packages" in where.parts, f"posenc imported from the installed wheel ({where})")
check((where.parent / "py.typed").is_file(), "py.typed shipped")
check(importlib.util.find_spec("torch") is None, "torch is not needed (not installed)")

pe = posenc.table(64, 16)
p, i = 37, 3
want = math.sin(p / 10000 ** (2 * i / 16))
check(
    pe.dtype == np.float32 and abs(float(pe[p, 2 * i]) - want) < 6e-8, "table matches the formula"
)
check(len(posenc.presets()) > 20, f"{len(posenc.presets())} presets listed")
cos, sin = posenc.rope(np.arange(8), 16)
check(
    cos.shape == (8, 16) and abs(float(sin[5, 1]) - math.sin(5 * 10000 ** (-2 / 16))) < 6e-8,
    "rope matches the formula",
)

for cmd in (["posenc", "--version"], [sys.executable, "-m", "posenc", "--version"]):
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    check(out.returncode == 0 and posenc.__version__ in out.stdout, f"{' '.join(cmd[-3:])}")
out = subprocess.run(["posenc", "presets"], capture_output=True, text=True, check=False)
check(out.returncode == 0 and "whisper" in out.stdout and "llama" in out.stdout, "posenc presets")
print("smoke: passed")
