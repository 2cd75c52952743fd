"""What this machine's torch needs before the tests (tests/conftest.py) and the benchmarks
(benchmarks/__init__.py) run: torchvision made importable (both import transformers and timm,
which import torchvision when it is installed).

No warm-up op is needed: the first parallel ``torch.sin`` of a fresh process, once said to be
wrong in one process in twelve here, was right in every one of 120 fresh processes
(benchmarks/torch_sin_first_call.py)."""

from __future__ import annotations

import importlib.util
import sys


def torchvision_importable() -> None:
    """Make torchvision import beside this machine's CPU torch, before anything imports it.

    The torchvision wheel on the package index for this torch is a CUDA build: its compiled
    ops fail to load here, and its Python code then registers fake kernels for
    ``torchvision::nms`` and ``qnms``, which do not exist, so ``import torchvision`` raises, and
    with it ``import timm`` and every transformers model module (they import torchvision when
    it is installed). Where that happens, the two op schemas are defined (no kernels: nothing
    here calls them) and torchvision imported again. A torchvision that imports is untouched."""
    if importlib.util.find_spec("torchvision") is None or importlib.util.find_spec("torch") is None:
        return
    try:
        import torchvision
    except RuntimeError as err:
        if "torchvision::nms" not in str(err):
            raise
        import torch

        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        ops = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            ops.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        torchvision_importable.ops = ops  # type: ignore[attr-defined]  # kept alive
        import torchvision  # noqa: F401


def prepare() -> None:
    """Call before anything imports torchvision, transformers or timm."""
    torchvision_importable()
