"""The scripts in examples/ run as a user runs them (``python examples/x.py``), in this
process so the test setup applies (tests/conftest.py makes torchvision importable here), and
finish: each asserts its own claims (identical compat outputs, checkpoints loading)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NEEDS = {"patch_transformers.py": "transformers", "patch_diffusers.py": "diffusers",
         "patch_timm.py": "timm", "hf_llama_rope.py": "transformers"}  # fmt: skip


@pytest.mark.parametrize("script", sorted(NEEDS))
def test_example_runs(script, capsys):
    pytest.importorskip("torch")
    pytest.importorskip(NEEDS[script])
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    assert capsys.readouterr().out  # it printed its report
