"""The benchmarks (``python -m benchmarks.<name>``; BENCHMARKS.md has the commands and figures).
They import transformers and timm beside the test extra's torchvision: made importable first."""

from tests.torchvision_shim import torchvision_importable

torchvision_importable()
