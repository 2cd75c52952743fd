"""Export (issue 13): torch.jit.script says what to use instead, torch.jit.trace works past
the kept rows, and torch.export and ONNX (run in onnxruntime) give graphs with a dynamic
length, no float64 (the float32-only formula, within 1e-6) and the positions' checks; for
the add-to-activations module, a block holding it, and a rotary attention block."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from tests import reference as ref
from tests.helpers import onnx_session, qk, raises, rotated

torch = pytest.importorskip("torch")

from posenc.torch import (  # noqa: E402
    DetrSineEncoding,
    GridEncoding,
    PositionalEncoding,
    RotaryEmbedding,
    SinusoidalEmbedding,
    Timesteps,
)


def _float64_nodes(program) -> list[str]:
    """The nodes of an exported program that hold a float64 value (or one of several)."""
    out = []
    for node in program.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        if any(getattr(v, "dtype", None) == torch.float64 for v in vals):
            out.append(str(node.target))
    return out


# TorchScript (issue 13, item 6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: PositionalEncoding(16),
        lambda: SinusoidalEmbedding(16),
        lambda: GridEncoding(16),
        lambda: DetrSineEncoding(8),
        lambda: Timesteps(16),
    ],
)
def test_jit_script_says_what_to_use_instead(make):
    with raises("cannot be compiled by torch.jit.script", "torch.compile", "torch.jit.trace"):
        torch.jit.script(make())


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_jit_trace_works_past_the_cache():

    traced = torch.jit.trace(PositionalEncoding(16, cached_length=64), torch.zeros(1, 10, 16))
    for length in (10, 64, 100, 3000):  # inside and past the 64 cached rows
        got = traced(torch.zeros(1, length, 16))[0]
        assert torch.equal(got, posenc.table(length, 16, dtype=torch.float32))
    emb = torch.jit.trace(SinusoidalEmbedding(16, cached_length=8), torch.tensor([[1, 2, 3]]))
    ids = torch.tensor([5, 90, 3000, 7])
    assert torch.equal(emb(ids[None])[0], posenc.encode(ids, 16, dtype=torch.float32))
    steps = torch.jit.trace(Timesteps(16), torch.tensor([1.0, 2.0]))
    t = torch.tensor([3.0, 500.5, 999.0])
    assert torch.equal(steps(t), posenc.encode(t, 16, preset="timestep", dtype=torch.float32))


# torch.export and ONNX


def test_exported_modules_carry_the_checks():
    m = PositionalEncoding(16)
    pos = torch.export.Dim("pos", min=2, max=4096)
    ep = torch.export.export(
        m, (torch.zeros(1, 8, 16), torch.arange(8.0)), dynamic_shapes=({1: pos}, {0: pos})
    )
    x = torch.zeros(1, 5, 16)
    p = torch.tensor([0.0, 1.5, 2.0, 3.0, 4.0])
    assert (ep.module()(x, p) - m(x, p)).abs().max() < 1e-6  # float32-only: see below
    with pytest.raises(RuntimeError, match="`positions` must"):
        ep.module()(x, torch.tensor([0.0, math.nan, 2.0, 3.0, 4.0]))


# float32-only evaluation (issue 13, item 5)


@pytest.mark.parametrize("length", [5, 3000])
def test_exported_graphs_have_no_float64_and_stay_within_1e_6(length):

    m = PositionalEncoding(64)
    seq = torch.export.Dim("seq", min=2, max=1 << 20)
    offset = 1_000_000  # plain float32 errs by 6e-2 here
    ep = torch.export.export(
        m, (torch.zeros(1, 8, 64), torch.arange(8) + offset), dynamic_shapes=({1: seq}, {0: seq})
    )
    assert _float64_nodes(ep) == []
    positions = torch.arange(length) + offset
    got = ep.module()(torch.zeros(1, length, 64), positions)[0].double()
    want = torch.from_numpy(posenc.encode(positions.numpy(), 64, dtype=np.float64))
    assert (got - want).abs().max() < 1e-6
    grid = GridEncoding(64, preset="diffusers-2d", interpolation_scale=0.7, base_size=13)
    gp = torch.export.export(grid, (torch.zeros(1, 30, 64), (5, 6)))
    assert _float64_nodes(gp) == []
    want = torch.from_numpy(ref.diffusers_2d(64, (5, 6), interpolation_scale=0.7, base_size=13))
    assert (gp.module()(torch.zeros(1, 30, 64), (5, 6))[0].double() - want).abs().max() < 1e-6


@pytest.mark.filterwarnings("ignore:# The axis name:UserWarning")
def test_onnx_graph_has_no_double_and_runs_within_1e_6(tmp_path):
    m = PositionalEncoding(64).eval()
    seq = torch.export.Dim("seq", min=2, max=1 << 20)
    path = tmp_path / "pe.onnx"
    session, names = onnx_session(
        m, (torch.zeros(1, 8, 64), torch.arange(8)), ({1: seq}, {0: seq}), path
    )
    import onnx

    model = onnx.load(str(path))
    inferred = onnx.shape_inference.infer_shapes(model)
    types = [v.type.tensor_type.elem_type for v in inferred.graph.value_info]
    types += [v.type.tensor_type.elem_type for v in inferred.graph.output]
    assert onnx.TensorProto.DOUBLE not in types
    assert not [
        n.op_type
        for n in model.graph.node
        if n.op_type == "Cast"
        and any(a.name == "to" and a.i == onnx.TensorProto.DOUBLE for a in n.attribute)
    ]
    for length, start in ((16, 0), (4096, 16_000_000)):
        positions = np.arange(start, start + length, dtype=np.int64)
        (got,) = session.run(
            None, {names[0]: np.zeros((1, length, 64), np.float32), names[1]: positions}
        )
        want = posenc.encode(positions, 64, dtype=np.float64)
        assert np.abs(got[0].astype(np.float64) - want).max() < 1e-6


# a block holding the add-to-activations module


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pe = PositionalEncoding(32, preset="whisper")
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x):
        return self.proj(self.pe(x))


def test_torch_export_dynamic_length():
    model = _Block().eval()
    seq = torch.export.Dim("seq", min=2, max=100_000)
    ep = torch.export.export(model, (torch.randn(2, 16, 32),), dynamic_shapes=({1: seq},))
    for length in (16, 3000):
        x = torch.randn(2, length, 32)
        assert torch.allclose(ep.module()(x), model(x), atol=1e-6)


def test_onnx_export_runs_in_onnxruntime_at_two_lengths(tmp_path):
    model = _Block().eval()
    seq = torch.export.Dim("seq", min=2, max=100_000)
    session, (name,) = onnx_session(
        model, (torch.randn(2, 16, 32),), ({1: seq},), tmp_path / "b.onnx"
    )
    for length in (16, 2500):
        x = torch.randn(2, length, 32)
        (got,) = session.run(None, {name: x.numpy()})
        assert np.abs(got - model(x).detach().numpy()).max() < 1e-5


# a rotary attention block


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rope = RotaryEmbedding(64, preset="llama")

    def forward(self, q, k):
        return self.rope(q, k)


def test_torch_export_dynamic_length_without_float64():
    seq = torch.export.Dim("seq", min=2, max=1 << 20)
    q, k = qk(1, 4, 16, 96)
    program = torch.export.export(_Attention(), (q, k), dynamic_shapes=({2: seq}, {2: seq}))
    assert _float64_nodes(program) == []
    for length in (16, 700):
        q, k = qk(1, 4, length, 96)
        gq, _gk = program.module()(q, k)
        # the float32-only formula (runtimes without float64): within 1e-6 of the truth
        assert np.abs(gq.double().numpy() - rotated(q, np.arange(length), 64)).max() < 1e-5


@pytest.mark.filterwarnings("ignore:# The axis name:UserWarning")
def test_onnx_runs_in_onnxruntime_at_two_lengths(tmp_path):
    seq = torch.export.Dim("seq", min=2, max=1 << 20)
    q, k = qk(1, 4, 16, 96)
    session, names = onnx_session(
        _Attention().eval(), (q, k), ({2: seq}, {2: seq}), tmp_path / "r.onnx"
    )
    for length in (16, 1000):
        q, k = qk(1, 4, length, 96)
        gq, gk = session.run(None, {names[0]: q.numpy(), names[1]: k.numpy()})
        assert np.abs(gq - rotated(q, np.arange(length), 64)).max() < 1e-5
        assert np.abs(gk - rotated(k, np.arange(length), 64)).max() < 1e-5
