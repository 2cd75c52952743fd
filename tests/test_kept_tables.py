"""The kept rows of posenc.torch modules (posenc.torch._kept.KeptRows): compiled calls read
them instead of computing their sin/cos, the decode window serves the steps past them, and
a move forgets them all."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests import reference as ref
from tests.helpers import within_float32

torch = pytest.importorskip("torch")
from posenc.torch import (  # noqa: E402
    PositionalEncoding,
    RotaryEmbedding,
    SinusoidalEmbedding,
)
from posenc.torch.rotary import WINDOW  # noqa: E402

DIM = 64
KEPT = 64  # cached_length


def rope_reference(positions, dim: int = DIM, base: float = 10000.0) -> np.ndarray:
    """``[cos | sin]`` of ``p * base ** (-2i / dim)``, float64: one column per frequency,
    as ``RotaryEmbedding.tables`` lays them out."""
    p = np.asarray(positions, dtype=np.float64)[..., None]
    angles = p * base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    return np.concatenate([np.cos(angles), np.sin(angles)], axis=-1)


class SinCosCounter:
    """A ``torch.compile`` backend (AOT autograd, graphs run op by op) that counts the graphs
    it compiles (``frame_count``, as ``CompileCounter``'s) and, per call, the
    ``aten.sin``/``aten.cos`` the graph runs and the elements they compute."""

    def __init__(self) -> None:
        from torch._dynamo.backends.common import aot_autograd

        self.frame_count = 0
        self.ops = 0
        self.elements = 0
        self._aot = aot_autograd(fw_compiler=self._compile)

    def __call__(self, gm, example_inputs):
        compiled = self._aot(gm, example_inputs)  # may restart Dynamo's analysis: count after
        self.frame_count += 1
        return compiled

    def _compile(self, gm, example_inputs):
        counter = self
        trig = (torch.ops.aten.sin.default, torch.ops.aten.cos.default)

        class Run(torch.fx.Interpreter):
            def call_function(self, target, args, kwargs):
                out = super().call_function(target, args, kwargs)
                if target in trig:
                    counter.ops += 1
                    counter.elements += out.numel()
                return out

        def run(*args):
            return Run(gm).run(*args)

        run._boxed_call = False
        return run

    def reset(self) -> None:
        self.ops = self.elements = 0


def _zeros(length: int, dtype=torch.float32):
    return torch.zeros(1, 2, length, DIM, dtype=dtype)


# (a) compiled RotaryEmbedding reads its kept rows


def test_compiled_rope_reads_its_kept_rows_and_computes_the_rest():
    """One graph for lengths inside the kept rows, at their end and past it: inside, the
    graph computes no sin/cos for the kept rows (only the 2 rows past them that every call
    computes and cuts, so that no symbolic size is 0 or 1), the rows are the eager module's
    bits and the float64 reference rounded once; past them, the tail is computed, correct."""
    torch._dynamo.reset()
    m = RotaryEmbedding(DIM, cached_length=KEPT)
    counter = SinCosCounter()
    tables = torch.compile(lambda x: m.tables(x), fullgraph=True, dynamic=True, backend=counter)
    per_row = DIM  # DIM / 2 frequencies, a sin and a cos each
    with torch.no_grad():
        for length in (10, 63, 64, 65, 100):
            counter.reset()
            got = tables(_zeros(length))
            eager = m.tables(_zeros(length))
            assert (
                (got.shape, got.dtype)
                == (eager.shape, eager.dtype)
                == (
                    (1, length, DIM),
                    torch.float32,
                )
            )
            computed = max(length - KEPT, 0) + 2
            assert counter.elements == computed * per_row, (length, counter.elements)
            kept = min(length, KEPT)
            assert torch.equal(got[:, :kept], eager[:, :kept])  # the kept rows themselves
            within_float32(got[0], rope_reference(np.arange(length)))
            within_float32(eager[0], rope_reference(np.arange(length)))
    assert counter.frame_count == 1


def test_compiled_rope_forward_reads_the_kept_rows_at_any_offset():
    """The rotation itself, at offsets inside the kept rows: no sin/cos computed for them,
    and q and k as the eager module's (the traced rotation is the same arithmetic out of
    place, which may round differently: within a float32 ulp of the largest value)."""
    torch._dynamo.reset()
    m = RotaryEmbedding(DIM, cached_length=KEPT)
    counter = SinCosCounter()
    compiled = torch.compile(m, fullgraph=True, dynamic=True, backend=counter)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for length, offset in ((10, 0), (63, 0), (64, 0), (5, 30), (20, 40)):
            q = torch.randn(1, 4, length, DIM, generator=gen)
            k = torch.randn(1, 2, length, DIM, generator=gen)
            counter.reset()
            got = compiled(q, k, offset=offset)
            want = m(q, k, offset=offset)
            assert counter.elements == 2 * DIM  # the cut tail alone
            for a, b in zip(got, want, strict=True):
                assert (a - b).abs().max() <= 2.0**-23 * b.abs().max()
    assert counter.frame_count <= 2  # a zero and a non-zero offset at most


def test_compiled_rope_reads_the_kept_rows_of_its_own_plan_only():
    """Rules that read the length: with ``seq_len`` the plan is the kept one (kept rows
    read); traced ``longrope`` without it computes both of its tables for every row."""
    dynamic = {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 64}
    longrope = {"rope_type": "longrope", "short_factor": [1.0] * 16, "long_factor": [4.0] * 16,
                "original_max_position_embeddings": 64, "max_position_embeddings": 256}  # fmt: skip
    length = 30
    for scaling, seq_len, elements in (
        (dynamic, 100, 2 * 32),  # the cut tail alone
        (longrope, None, 2 * length * 32),  # two tables, every row
    ):
        torch._dynamo.reset()
        m = RotaryEmbedding(32, scaling=scaling, seq_len=seq_len, cached_length=KEPT)
        counter = SinCosCounter()
        tables = torch.compile(lambda x, m=m: m.tables(x), fullgraph=True, backend=counter)
        with torch.no_grad():
            x = torch.zeros(1, 1, length, 32)
            got = tables(x)
            assert counter.elements == elements, scaling["rope_type"]
            assert (got - m.tables(x)).abs().max() <= 2.0**-23


# (b) the decode window


def test_decoding_steps_past_the_kept_rows_come_from_the_window():
    """Eager steps past the kept rows are slices of the window (no rows computed per step),
    refilled once per WINDOW / 2 steps, and equal the rows a full-length call computes."""
    m = RotaryEmbedding(DIM, cached_length=KEPT)
    full = m.tables(_zeros(KEPT + 3 * WINDOW))[0]  # computed: longer than the window
    within_float32(full, rope_reference(np.arange(KEPT + 3 * WINDOW)))
    starts = set()
    for step in range(KEPT, KEPT + 2 * WINDOW):
        got = m.tables(_zeros(1), offset=step)
        first, window = m._kept._windows[torch.float32]
        assert first <= step < first + WINDOW
        assert got.untyped_storage().data_ptr() == window.untyped_storage().data_ptr()
        assert torch.equal(got[0, 0], full[step])
        starts.add(first)
    assert len(starts) <= 2 * WINDOW // (WINDOW // 2) + 1
    # explicit positions just past the kept rows: gathered from the window too
    positions = torch.tensor([KEPT, KEPT + 5, KEPT + 2])
    got = m.tables(_zeros(3), positions)
    assert torch.equal(got.reshape(3, DIM), full[positions])
    assert m._kept._windows[torch.float32][0] <= KEPT


def test_modules_without_a_window_compute_past_their_kept_rows():
    pe = PositionalEncoding(DIM, cached_length=KEPT)
    assert pe._kept.window == 0
    got = pe.encoding(torch.zeros(1, 1, DIM), offset=KEPT + 1)
    assert not pe._kept._windows
    within_float32(got[0], ref.vaswani(1, DIM, offset=KEPT + 1))


# (c) a move forgets the kept rows


def _poison(module) -> None:
    """NaN in every kept row: a table kept through a move would show."""
    for table in module._kept.tables.values():
        table.fill_(math.nan)
    for _, window in module._kept._windows.values():
        window.fill_(math.nan)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_positional_encoding_forgets_its_kept_rows_on_a_move(dtype):
    m = PositionalEncoding(DIM, cached_length=KEPT)
    m(torch.zeros(1, 10, DIM, dtype=torch.bfloat16))  # a table for bf16 activations too
    assert set(m._kept.tables) == {torch.float32, torch.bfloat16}
    _poison(m)
    m.to(dtype)
    assert set(m._kept.tables) == {dtype}
    got = m(torch.zeros(1, 50, DIM, dtype=dtype))[0]
    assert got.dtype == dtype
    _close(got, ref.vaswani(50, DIM), dtype)
    _close(m(torch.zeros(1, 5, DIM, dtype=dtype), offset=40)[0], ref.vaswani(45, DIM)[40:], dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_sinusoidal_embedding_forgets_its_kept_rows_on_a_move(dtype):
    m = SinusoidalEmbedding(DIM, cached_length=KEPT)
    ids = torch.tensor([[3, 0, 63], [7, 8, 9]])
    m(ids)
    _poison(m)
    m.to(dtype)
    assert set(m._kept.tables) == {dtype}
    got = m(ids)
    assert got.dtype == dtype
    _close(got.reshape(-1, DIM), ref.vaswani(KEPT, DIM)[ids.reshape(-1).numpy()], dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_rotary_embedding_forgets_its_kept_rows_on_a_move(dtype):
    """The tables follow the activations (float64 for float64, float32 for 16-bit ones);
    a move rebuilds the one for the module's new dtype and forgets the rest."""
    m = RotaryEmbedding(DIM, cached_length=KEPT)
    m.tables(_zeros(10))
    m.tables(_zeros(1), offset=KEPT + 3)  # the window
    m.tables(_zeros(10, torch.float64))  # a float64 table beside the float32 one
    assert set(m._kept.tables) == {torch.float32, torch.float64}
    _poison(m)
    m.to(dtype)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    assert set(m._kept.tables) == {work}
    assert not m._kept._windows
    for length, offset in ((50, 0), (5, 40), (1, KEPT + 3)):
        got = m.tables(_zeros(length, dtype), offset=offset)[0]
        assert got.dtype == work
        _close(got, rope_reference(np.arange(offset, offset + length)), work)
    q = torch.randn(1, 2, 8, DIM, dtype=dtype)
    assert not torch.isnan(m(q, q)[0]).any()


def test_reset_parameters_rebuilds_the_kept_rows():
    for m in (
        PositionalEncoding(DIM, cached_length=KEPT),
        RotaryEmbedding(DIM, cached_length=KEPT),
    ):
        before = m._kept.tables[torch.float32]
        _poison(m)
        m.reset_parameters()
        assert m._kept.tables[torch.float32] is not before
        assert not torch.isnan(m._kept.tables[torch.float32]).any()
        assert dict(m.state_dict()) == {}


def _close(got, want: np.ndarray, dtype) -> None:
    """``got`` is ``want`` rounded once to ``dtype``."""
    if dtype == torch.float64:
        assert np.abs(got.numpy() - want).max() <= 1e-13
    elif dtype == torch.float32:
        within_float32(got, want)
    else:  # bfloat16: within half an ulp (2^-8 relative, values below 1)
        assert np.abs(got.double().numpy() - want).max() <= 2.0**-9
