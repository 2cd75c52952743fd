"""What this machine's torch needs before the tests (tests/conftest.py) and the benchmarks
(benchmarks/__init__.py) run: torchvision made importable (both import transformers and timm,
which import torchvision when it is installed), and torch's worker threads started."""

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


def torch_threads_started() -> None:
    """Start torch's intra-op worker threads with one parallel op, before transformers or timm
    compute a table.

    With torch 2.13.0+cpu on an AVX-512 CPU, the first parallel ``torch.sin`` of a fresh process
    is sometimes wrong when the machine is busy (benchmarks/torch_sin_first_call.py: 1 of 160
    processes beside three busy ones). A test comparing an original's table with a reference
    would fail on whichever ran first. posenc's torch backend starts the threads as it is
    imported (``posenc.evaluate.libs.torch._start_threads``): imported here, first."""
    if importlib.util.find_spec("torch") is None:
        return
    import posenc.evaluate.libs.torch  # noqa: F401  (its import starts the threads)


def prepare() -> None:
    """Both: call before anything imports torchvision, transformers or timm."""
    torchvision_importable()
    torch_threads_started()
