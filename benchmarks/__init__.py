"""The benchmarks (``python -m benchmarks.<name>``; BENCHMARKS.md has the commands and figures).
They import transformers and timm beside the test extra's torchvision: the machine is
prepared first (tests/environment.py)."""

from tests.environment import prepare

prepare()
