"""On a CUDA machine: every module with every input kind (tests/module_calls.py) runs with
no synchronisation (``torch.cuda.set_sync_debug_mode("error")``), is captured by a CUDA graph
and replayed, and gives the CPU's numbers. These tests need a GPU; without one there is
nothing they could check (the same paths run on the meta device in
test_torch_production.py, and compiled on the CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from torch.utils._pytree import tree_leaves  # noqa: E402

from tests.module_calls import NAMES, call  # noqa: E402


def _close(a, b):
    assert (a.shape, a.dtype) == (b.shape, b.dtype)
    assert (a.double().cpu() - b.double().cpu()).abs().max() <= 2 * torch.finfo(a.dtype).eps


@pytest.mark.parametrize("name", NAMES)
def test_no_synchronisation_and_cpu_numbers(name):
    torch.manual_seed(0)
    _, cpu, args, kwargs = call(name, "cpu")
    torch.manual_seed(0)
    _, gpu, gargs, gkwargs = call(name, "cuda")
    gpu(*gargs, **gkwargs)  # first call: tables kept for another dtype, constants
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = gpu(*gargs, **gkwargs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for a, b in zip(tree_leaves(cpu(*args, **kwargs)), tree_leaves(got), strict=True):
        _close(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_cuda_graph_capture_and_replay(name):
    torch.manual_seed(0)
    _, module, args, kwargs = call(name, "cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            want = module(*args, **kwargs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = module(*args, **kwargs)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(tree_leaves(want), tree_leaves(out), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_compiled_on_cuda(name):
    torch._dynamo.reset()
    _, module, args, kwargs = call(name, "cuda")
    want = module(*args, **kwargs)
    got = torch.compile(module, fullgraph=True)(*args, **kwargs)
    for a, b in zip(tree_leaves(want), tree_leaves(got), strict=True):
        _close(a, b)
