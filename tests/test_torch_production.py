"""posenc.torch in production (issue 13): checks that survive tracing, a kept table per
activation dtype, no host synchronisation and no copy from the host in any forward, one graph
under torch.compile for every module and input kind, and offsets and boundaries checked when
compiled. (Checkpoints: test_checkpoints.py; TorchScript, torch.export and ONNX:
test_export.py; 16-bit rounding: test_rounding.py.)"""

from __future__ import annotations

import math

import pytest

import posenc

torch = pytest.importorskip("torch")

from posenc.torch import PositionalEncoding, Timesteps  # noqa: E402

# checks that survive tracing (issue 13, item 4)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 2.0**28])
def test_traced_positions_are_checked_in_the_graph(bad):
    """Under torch.compile the eager checks cannot read values; the graph carries them
    (torch._assert_async: no host read), so NaN, inf and angles past 2^27 rad still fail."""
    torch._dynamo.reset()
    m = PositionalEncoding(16)
    cm = torch.compile(m, fullgraph=True, backend="eager")
    x = torch.zeros(1, 3, 16)
    good = torch.tensor([0.5, 1.0, 2.0])
    assert torch.equal(cm(x, good), m(x, good))
    with pytest.raises(RuntimeError, match="`positions` must"):
        cm(x, torch.tensor([0.5, bad, 2.0]))
    steps = torch.compile(Timesteps(16), fullgraph=True, backend="eager")
    with pytest.raises(RuntimeError, match=r"`(timesteps|positions)` must"):
        steps(torch.tensor([1.0, bad]))


# mixed precision (issue 13, item 2)


def test_activations_in_another_dtype_get_their_own_kept_table():
    """A float32 module before a bf16 block, or under autocast: the bf16 table is correctly
    rounded (not the float32 table cast again) and built once, then gathered like the float32
    one."""
    import posenc

    m = PositionalEncoding(64, cached_length=256)
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.zeros(2, 100, 64, dtype=dtype)
        y = m(x)
        assert y.dtype == dtype
        want = posenc.table(100, 64, dtype=dtype)
        assert torch.equal(y[0], want)
        kept = m._tables[dtype]
        assert torch.equal(m(x, offset=7)[0], posenc.table(107, 64, dtype=dtype)[7:])
        assert m._tables[dtype] is kept  # built once
    assert torch.equal(m._tables[torch.bfloat16], posenc.table(256, 64, dtype=torch.bfloat16))
    m.float()  # a move forgets them
    m.to(torch.float64)
    assert set(m._tables) == {torch.float64}


# no host synchronisation, no copy from the host (issue 13, item 4)

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from tests.module_calls import NAMES, call  # noqa: E402


class _HostTraffic(TorchDispatchMode):
    """Records what would make an accelerator wait or break a CUDA graph: a value read on
    the host (``.item()``, ``int(t)``, ``bool(t)``: ``_local_scalar_dense``) and a tensor with
    data on the CPU entering an operation (a copy from the host)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if func is torch.ops.aten._local_scalar_dense.default:
            self.seen.append("a value read on the host")
        elif any(t.device.type == "cpu" and t.ndim for t in leaves):
            self.seen.append(f"{func} of a CPU tensor")
        return func(*args, **kwargs)


@pytest.fixture
def host_made(monkeypatch):
    """Tensors made from host data on another device (torch.tensor and torch.as_tensor do
    not pass through dispatch modes)."""
    made: list[str] = []
    for name in ("tensor", "as_tensor"):
        original = getattr(torch, name)

        def wrapper(*args, _original=original, _name=name, **kwargs):
            out = _original(*args, **kwargs)
            if out.device.type != "cpu":
                made.append(f"torch.{_name} on {out.device}")
            return out

        monkeypatch.setattr(torch, name, wrapper)
    return made


@pytest.mark.parametrize("name", NAMES)
def test_forwards_read_nothing_on_the_host_and_copy_nothing_to_the_device(name, host_made):
    """Every module with every input kind, on a device other than the CPU (meta here, which
    has no values to read: every module takes its accelerator path there): after a first
    call, a forward reads no value on the host and copies nothing from it (constants are
    kept on the device), so it neither waits for the device nor breaks a CUDA graph. The
    same checks still run: on the device, in the stream."""
    _, module, args, kwargs = call(name, "meta")
    first = module(*args, **kwargs)
    host_made.clear()
    with _HostTraffic() as mode:
        again = module(*args, **kwargs)
    assert mode.seen == []
    assert host_made == []
    for a, b in zip(tree_leaves(first), tree_leaves(again), strict=True):
        assert (a.shape, a.dtype, a.is_meta) == (b.shape, b.dtype, True)


@pytest.mark.parametrize("name", NAMES)
def test_every_module_and_input_kind_compiles_to_one_graph(name):
    """torch.compile(fullgraph=True), capture_scalar_outputs off (the default): no graph
    break, no host read, for every module and input kind; values as eager's."""
    torch._dynamo.reset()
    assert not torch._dynamo.config.capture_scalar_outputs
    _, module, args, kwargs = call(name, "cpu")
    want = module(*args, **kwargs)
    got = torch.compile(module, fullgraph=True, backend="aot_eager")(*args, **kwargs)
    for a, b in zip(tree_leaves(want), tree_leaves(got), strict=True):
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
        assert (a.double() - b.double()).abs().max() <= 2 * torch.finfo(a.dtype).eps


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"offset": torch.tensor([3, -1])}, "`offset` must be >= 0"),
        ({"cu_seqlens": torch.tensor([1, 3, 8])}, "`cu_seqlens` must start at 0"),
        ({"cu_seqlens": torch.tensor([0, 5, 3, 8])}, "never decrease"),
        ({"cu_seqlens": torch.tensor([0, 3, 7])}, "end at the number of tokens 8"),
    ],
)
@pytest.mark.parametrize("compiled", [False, True])
def test_offsets_and_boundaries_are_checked_compiled_too(kwargs, message, compiled):
    """The checks that eager mode makes on the host are made in the graph when compiled:
    a negative offset and cu_seqlens that do not start at 0, decrease or do not end at the
    token count are errors either way, never accepted silently."""
    torch._dynamo.reset()
    m = PositionalEncoding(16)
    packed = "cu_seqlens" in kwargs
    x = torch.zeros(8, 16) if packed else torch.zeros(2, 4, 16)
    run = torch.compile(m, fullgraph=True, backend="aot_eager") if compiled else m
    error = RuntimeError if compiled else posenc.PosencError
    with pytest.raises(error, match=message):
        run(x, **kwargs)


@pytest.mark.parametrize("compat", [None, "diffusers", "transformers"])
@pytest.mark.parametrize("layout", ["halves", "interleaved"])
def test_apply_rope_compiles_to_one_graph(layout, compat):
    """posenc.apply_rope inside a compiled function: no graph break, the eager numbers."""
    import posenc

    cos, sin = posenc.rope(torch.arange(16), 32, layout=layout, dtype=torch.float32)
    x = torch.randn(2, 3, 16, 32, dtype=torch.bfloat16)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        return posenc.apply_rope(x, cos, sin, layout, compat=compat)

    compiled = torch.compile(rotate, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), rotate(x))
