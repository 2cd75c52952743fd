"""``posenc.float32_only()`` (issue 33): on the CPU, the numbers an exported graph (and MPS)
computes. Inside the block, every call gives bit for bit what the graph of
``torch.export.export`` of the same call computes, and differs from the default float64-based
path; the switch nests, is restored after the block (also on an exception), belongs to the
thread that entered it, and takes True or False alone."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import posenc
from posenc.evaluate import FLOAT32_ONLY
from tests.helpers import raises

torch = pytest.importorskip("torch")

from posenc.torch import RotaryEmbedding, SinusoidalEmbedding  # noqa: E402


class _Call(torch.nn.Module):
    """A posenc call on one tensor, as a module ``torch.export`` takes."""

    def __init__(self, call) -> None:
        super().__init__()
        self.call = call

    def forward(self, x):
        return self.call(x)


def _exported(module: torch.nn.Module, *args, **kwargs):
    """What the graph of ``torch.export.export(module, args, kwargs)`` computes for them."""
    program = torch.export.export(module, args, kwargs)
    return program.module()(*args, **kwargs)


def _tensors(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


IDS = torch.from_numpy(np.random.default_rng(0).integers(0, 2**24, 300))
REALS = torch.from_numpy(np.random.default_rng(1).uniform(-1e5, 1e5, 300))
MASK = torch.zeros(2, 12, 17, dtype=torch.bool)
MASK[0, 9:, :] = MASK[1, :, 13:] = True

CALLS = {
    "table": (lambda x: posenc.table(x.shape[0], 96, dtype=torch.float32), torch.zeros(3000)),
    "table, offset": (
        lambda x: posenc.table(x.shape[0], 64, offset=70_000, dtype=torch.bfloat16),
        torch.zeros(500),
    ),
    "encode, ids": (lambda x: posenc.encode(x, 64, dtype=torch.float32), IDS),
    "encode, reals": (lambda x: posenc.encode(x, 64, dtype=torch.float32), REALS),
    "grid": (
        lambda x: posenc.grid((14, 14), 768, preset="mae", cls_token=True, like=x),
        torch.zeros(0),
    ),
    "detr": (lambda x: posenc.detr(x, 128, normalize=True), MASK),
    "rope": (lambda x: posenc.rope(x, 128, preset="llama3"), IDS),
    "rope_grid": (
        lambda x: posenc.rope_grid((24, 24), 64, preset="eva02", like=x),
        torch.zeros(0),
    ),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_calls_equal_their_exported_graphs(name):
    call, x = CALLS[name]
    with posenc.float32_only():
        got = _tensors(call(x))
    want = _tensors(_exported(_Call(call), x))
    default = _tensors(call(x))
    assert [t.dtype for t in got] == [t.dtype for t in want] == [t.dtype for t in default]
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert not all(torch.equal(g, d) for g, d in zip(got, default, strict=True))


class _Tables(torch.nn.Module):
    """A rotary module's ``[cos | sin]`` tables for ``q``, as a module to export."""

    def __init__(self, rope: RotaryEmbedding) -> None:
        super().__init__()
        self.rope = rope

    def forward(self, q, **kwargs):
        return self.rope.tables(q, **kwargs)


def test_rotary_embedding_equals_its_exported_graph():
    # past the kept rows (64) and longer than half the decoding window: computed rows
    rope = RotaryEmbedding(128, preset="llama3", cached_length=64)
    q, k = torch.randn(1, 4, 300, 128), torch.randn(1, 2, 300, 128)
    positions = IDS[:300].sort().values
    for kwargs in ({"offset": 1000}, {"positions": positions}):
        with posenc.float32_only():
            tables = rope.tables(q, **kwargs)
        assert torch.equal(tables, _exported(_Tables(rope), q, **kwargs))
        assert not torch.equal(tables, rope.tables(q, **kwargs))
        # the rotation: eager without autograd it runs in place (fused multiply-adds, an
        # ulp apart); with autograd, it is the out-of-place arithmetic the graph records
        qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
        with posenc.float32_only():
            got = rope(qg, kg, **kwargs)
        want = _exported(rope, q, k, **kwargs)
        assert all(torch.equal(g.detach(), w) for g, w in zip(got, want, strict=True))


def test_sinusoidal_embedding_equals_its_exported_graph():
    emb = SinusoidalEmbedding(256, cached_length=16)
    ids = IDS.reshape(3, 100)  # past the 16 kept rows: computed
    with posenc.float32_only():
        got = emb(ids)
    assert torch.equal(got, _exported(emb, ids))
    assert not torch.equal(got, emb(ids))


def test_restored_after_the_block_and_on_an_exception():
    call, x = CALLS["table"]
    default = call(x)
    with posenc.float32_only():
        assert FLOAT32_ONLY.get()
        f32 = call(x)
    assert not FLOAT32_ONLY.get()
    assert torch.equal(call(x), default)
    with pytest.raises(KeyError), posenc.float32_only():
        raise KeyError("inside")
    assert not FLOAT32_ONLY.get()
    assert torch.equal(call(x), default)
    assert not torch.equal(f32, default)


def test_nests():
    call, x = CALLS["table"]
    default = call(x)
    with posenc.float32_only():
        f32 = call(x)
        with posenc.float32_only(enabled=False):
            assert torch.equal(call(x), default)
            with posenc.float32_only():
                assert torch.equal(call(x), f32)
            assert torch.equal(call(x), default)
        assert torch.equal(call(x), f32)
    assert torch.equal(call(x), default)


def test_belongs_to_the_thread_that_entered_it():
    call, x = CALLS["table"]
    default = call(x)
    entered, done = threading.Event(), threading.Event()

    def other() -> None:
        with posenc.float32_only():
            entered.set()
            done.wait(60)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert entered.wait(60)
        assert torch.equal(call(x), default)  # this thread's calls: the default path
    finally:
        done.set()
        thread.join()


def test_numpy_calls_too():
    with posenc.float32_only():
        f32 = posenc.table(3000, 96)
    exact = posenc.table(3000, 96)
    assert f32.dtype == exact.dtype == np.float32
    assert np.abs(f32.astype(np.float64) - exact).max() < 1e-6
    assert not np.array_equal(f32, exact)


def test_enabled_is_true_or_false():
    with raises("`enabled` must be True or False", "1"), posenc.float32_only(enabled=1):
        pass
    assert not FLOAT32_ONLY.get()


def test_modules_read_no_kept_row_in_the_block():
    """Inside the block a module computes every row, as its exported graph does, whenever
    its kept rows were built: the kept rows, the decoding window, gathered ids."""
    rope = RotaryEmbedding(128, preset="llama3")  # 4096 kept rows, built before the block
    q = torch.randn(1, 4, 40, 128)
    for kwargs in ({}, {"offset": 5000}, {"positions": torch.arange(7, 47)}):
        with posenc.float32_only():
            tables = rope.tables(q, **kwargs)
        assert torch.equal(tables, _exported(_Tables(rope), q, **kwargs))
        assert not torch.equal(tables, rope.tables(q, **kwargs))
    emb = SinusoidalEmbedding(256)
    ids = torch.arange(300).reshape(3, 100)
    with posenc.float32_only():
        got = emb(ids)
    assert torch.equal(got, _exported(emb, ids))
    assert not torch.equal(got, emb(ids))


def test_a_module_built_in_the_block_keeps_the_default_rows():
    ids = torch.arange(300).reshape(3, 100)
    with posenc.float32_only():
        emb = SinusoidalEmbedding(256)
        rope = RotaryEmbedding(128, preset="llama3")
    q = torch.randn(1, 4, 40, 128)
    assert torch.equal(emb(ids), SinusoidalEmbedding(256)(ids))
    assert torch.equal(rope.tables(q), RotaryEmbedding(128, preset="llama3").tables(q))
