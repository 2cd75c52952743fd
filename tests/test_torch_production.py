"""posenc.torch in production (issue 13): checkpoints, TorchScript, tracing.

Tables saved by the modules posenc replaces (transcribed from their code, in float32 as they
compute) load quietly; learned, fine-tuned, other-convention or other-width tables are an
error that says what they are, and ``strict=False`` drops them with a warning.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from tests import reference as ref
from tests.helpers import raises

torch = pytest.importorskip("torch")
nn = torch.nn

from posenc.torch import (  # noqa: E402
    DetrSineEncoding,
    GridEncoding,
    PositionalEncoding,
    SinusoidalEmbedding,
    Timesteps,
)


class TutorialPositionalEncoding(nn.Module):
    """The PyTorch tutorial's module (``pe`` buffer ``[max_len, 1, d_model]``, float32)."""

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)


def _fairseq_float32(num_embeddings: int, dim: int, padding_idx: int) -> torch.Tensor:
    """fairseq's ``SinusoidalPositionalEmbedding.get_embedding``, in float32 as it runs."""
    half = dim // 2
    emb = math.log(10000) / (half - 1)
    emb = torch.exp(torch.arange(half, dtype=torch.float) * -emb)
    emb = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)
    emb[padding_idx, :] = 0
    return emb


def _whisper_float32(length: int, channels: int) -> torch.Tensor:
    """Whisper's ``sinusoids``."""
    inc = np.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2))
    scaled = torch.arange(length)[:, np.newaxis] * inv[np.newaxis, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


@pytest.mark.parametrize("stored", [torch.float32, torch.bfloat16, torch.float16])
def test_the_tutorials_table_loads_quietly(stored, recwarn):
    saved = TutorialPositionalEncoding(64).to(stored).state_dict()
    outer = nn.Sequential(PositionalEncoding(64))
    result = outer.load_state_dict({f"0.{k}": v for k, v in saved.items()}, strict=True)
    assert not result.missing_keys
    assert not result.unexpected_keys
    assert not recwarn.list
    assert torch.equal(outer[0].cache, PositionalEncoding(64).cache)  # ours, not the copy


def test_fairseq_and_whisper_tables_load_quietly():
    emb = SinusoidalEmbedding(64, preset="fairseq", padding_idx=1)
    emb.load_state_dict({"weights": _fairseq_float32(1026, 64, 1), "_float_tensor": torch.ones(1)})
    whisper = PositionalEncoding(384, preset="whisper")
    whisper.load_state_dict({"positional_embedding": _whisper_float32(1500, 384)})


def test_an_mae_grid_with_its_class_row_loads_quietly():
    enc = GridEncoding(192, preset="mae", cls_token=True)
    saved = torch.from_numpy(ref.mae(192, 14, cls_token=True)).float()[None]
    enc.load_state_dict({"pos_embed": saved})


def test_a_fine_tuned_vit_table_is_an_error_that_says_so():
    enc = GridEncoding(192, preset="mae", cls_token=True)
    tuned = torch.from_numpy(ref.mae(192, 14, cls_token=True)).float()[None]
    tuned = tuned + 0.05 * torch.randn(tuned.shape, generator=torch.Generator().manual_seed(0))
    with raises("'pos_embed'", "not this module's encoding", "max difference", "looks learned",
                "strict=False"):  # fmt: skip
        enc.load_state_dict({"pos_embed": tuned})


def test_a_learned_table_is_refused_and_strict_false_warns():
    learned = torch.randn(2048, 64, generator=torch.Generator().manual_seed(1))
    m = PositionalEncoding(64)
    with raises("'pe'", "[2048x64] float32", "looks learned", "nn.Parameter"):
        m.load_state_dict({"pe": learned})
    with pytest.warns(UserWarning, match="dropped"):
        result = m.load_state_dict({"pe": learned}, strict=False)
    assert not result.unexpected_keys
    assert torch.equal(m.cache, PositionalEncoding(64).cache)


def test_another_convention_is_named():
    m = PositionalEncoding(64)  # the paper's interleaved table
    with raises("'positional_embedding'", "it is preset 'whisper'", "posenc.table(1500, 64"):
        m.load_state_dict({"positional_embedding": _whisper_float32(1500, 64)})


def test_another_width_is_refused():
    m = PositionalEncoding(768)
    with raises("'pe'", "[5000x512]", "768 channels wide"):
        m.load_state_dict(TutorialPositionalEncoding(512).state_dict())


def test_modules_without_a_table_refuse_one():
    with raises("'pe'", "is not a table this module has"):
        Timesteps(32).load_state_dict({"pe": torch.zeros(10, 32)})
    with raises("'pos_embed'", "square grid"):
        GridEncoding(64).load_state_dict({"pos_embed": torch.zeros(1, 15, 64)})
    DetrSineEncoding(16).load_state_dict({})


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
    import posenc

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


# diffusers' and Hugging Face's conventions (issue 13, item 7)


@pytest.mark.parametrize(("h", "w"), [(64, 64), (40, 96), (192, 192), (1, 7)])
def test_sd3_cropped_grid(h, w):
    """diffusers' PatchEmbed with pos_embed_max_size (SD3: 192, base_size 64): the centred crop
    of the 192 x 192 table."""
    enc = GridEncoding(64, preset="diffusers-2d", base_size=64, pos_embed_max_size=192)
    full = ref.diffusers_2d(64, 192, base_size=64).reshape(192, 192, 64)
    top, left = (192 - h) // 2, (192 - w) // 2
    want = full[top : top + h, left : left + w].reshape(-1, 64)
    got = enc.encoding((h, w), dtype=torch.float64)
    assert np.abs(got.numpy() - want).max() < 1e-9
    assert torch.equal(enc(torch.zeros(1, h * w, 64), (h, w))[0], got.float())
    with raises("fit the grid it is cropped from", "193 > 192"):
        enc.encoding((193, 4))


def test_hf_pixel_mask_is_the_inverse_of_detrs_mask():
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(2, 7, 9, generator=g) > 0.7  # True = padding
    enc = DetrSineEncoding(16, normalize=True)
    want = ref.detr(mask.numpy(), 16, normalize=True)
    assert np.abs(enc(mask).double().numpy() - want).max() < 1e-6
    for pixel_mask in ((~mask).long(), ~mask):
        assert torch.equal(enc(pixel_mask=pixel_mask), enc(mask))
    with raises("exactly one"):
        enc(mask, pixel_mask=~mask)
    with raises("`pixel_mask`", "float32"):
        enc(pixel_mask=(~mask).float())


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


# float32-only evaluation (issue 13, item 5)


def _float64_nodes(ep) -> list[str]:
    out = []
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        if any(getattr(v, "dtype", None) == torch.float64 for v in vals):
            out.append(str(node.target))
    return out


@pytest.mark.parametrize("length", [5, 3000])
def test_exported_graphs_have_no_float64_and_stay_within_1e_6(length):
    import posenc

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
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import posenc

    m = PositionalEncoding(64).eval()
    seq = torch.export.Dim("seq", min=2, max=1 << 20)
    program = torch.onnx.export(
        m,
        (torch.zeros(1, 8, 64), torch.arange(8)),
        dynamic_shapes=({1: seq}, {0: seq}),
        dynamo=True,
        verbose=False,
    )
    path = tmp_path / "pe.onnx"
    program.save(str(path))
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
    session = ort.InferenceSession(str(path))
    names = [i.name for i in session.get_inputs()]
    for length, start in ((16, 0), (4096, 16_000_000)):
        positions = np.arange(start, start + length, dtype=np.int64)
        (got,) = session.run(
            None, {names[0]: np.zeros((1, length, 64), np.float32), names[1]: positions}
        )
        want = posenc.encode(positions, 64, dtype=np.float64)
        assert np.abs(got[0].astype(np.float64) - want).max() < 1e-6


@pytest.mark.parametrize("length", [80_000, 80_017])  # whole blocks of 64, and a tail
def test_bfloat16_rounding_is_correct_at_midpoints(length):
    """torch casts float64 to bfloat16 through float32, which is wrong only on bfloat16
    midpoints. The backend's rounding (float32 ties stepped off the midpoint, found block by
    block) against the float64 value rounded once (the nearer bfloat16 neighbour, ties to
    even), on values planted exactly at, just above and just below midpoints, and on exact
    midpoints of float64; in any order and length (the last block may be partial)."""
    from posenc.evaluate.libs.torch import TorchBackend

    rng = np.random.default_rng(3)
    grid = torch.from_numpy(rng.uniform(-1, 1, 20_000)).to(torch.bfloat16).double()
    half = torch.from_numpy(np.spacing(grid.float().numpy()).astype(np.float64)) * 2**15
    x = torch.cat([grid + half, grid + half + 2**-40, grid + half - 2**-40, grid - half])
    x = torch.cat([x, torch.from_numpy(rng.uniform(-1, 1, length - x.numel()))])
    x = x[torch.from_numpy(rng.permutation(length))]
    x = x.view(-1, 7) if length % 7 == 0 else x
    got = TorchBackend(torch.bfloat16, torch.device("cpu")).rounded(x)
    got = got.to(torch.bfloat16).double()
    # the reference: the two bfloat16 neighbours of x, and the nearer one (ties to even)
    lo = x.to(torch.float32).to(torch.bfloat16).double()  # some neighbour; find both
    below = torch.where(
        lo <= x,
        lo,
        torch.nextafter(
            lo.to(torch.bfloat16), torch.tensor(-np.inf, dtype=torch.bfloat16)
        ).double(),
    )
    above = torch.nextafter(
        below.to(torch.bfloat16), torch.tensor(np.inf, dtype=torch.bfloat16)
    ).double()
    pick_above = (above - x < x - below) | (
        (above - x == x - below) & ((above.to(torch.bfloat16).view(torch.int16) & 1) == 0)
    )
    want = torch.where(pick_above, above, below)
    assert torch.equal(got, want)
    naive = x.to(torch.float32).to(torch.bfloat16).double()
    assert not torch.equal(naive, want)  # the planted values do catch double rounding


@pytest.mark.parametrize("factor", [1.0, 1.7, 2.0**-50, 2.0**-130, 2.0**120, 2.0**1000])
def test_bfloat16_tables_correctly_rounded_at_any_amplitude(factor):
    """A RoPE table in bfloat16, scaled by an attention factor inside and outside the range
    where the engine rounds by Veltkamp's split: every value is the float64 truth rounded
    once (checked by its bfloat16 neighbours), never NaN."""
    scaling = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "attention_factor": factor,
    }
    ids = torch.arange(0, 40_000, 7)
    cos, sin = posenc.rope(ids, 64, scaling=scaling, dtype=torch.bfloat16)
    cos64, sin64 = posenc.rope(ids, 64, scaling=scaling, dtype=torch.float64)
    for got, truth in ((cos, cos64), (sin, sin64)):
        near = got.double()
        assert not near.isnan().any()
        if factor > 2.0**128:  # beyond bfloat16's range: rounding overflows to infinity
            assert torch.equal(got, truth.to(torch.bfloat16))
            continue
        err = (near - truth).abs()
        toward = torch.where(truth > near, np.inf, -np.inf).to(torch.bfloat16)
        step = (torch.nextafter(got, toward).double() - near).abs()  # on the truth's side
        assert bool((err <= step / 2 * (1 + 2**-20)).all()), float((err / step).max())


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


def test_float16_rounding_is_numpys_one_rounding():
    """torch's float16 tables: the float64 basis cast through float32, with the float32 values
    that land on a float16 midpoint stepped toward the exact value. Against NumPy's float64 ->
    float16 cast (one rounding, computed from the double's bits), bit for bit, signed zeros
    included: random values of every scale, values planted at, just above and below float16
    midpoints (normal and subnormal), the edges of the subnormal and overflow ranges, in two
    shapes (whole blocks of 64 values, and a partial last block)."""
    from posenc.evaluate.libs.torch import TorchBackend

    rng = np.random.default_rng(5)
    normal = rng.uniform(-1, 1, 20_000).astype(np.float16).astype(np.float64)
    sub = rng.integers(-1023, 1024, 20_000) * 2.0**-24
    x = [rng.uniform(-1, 1, 50_000), rng.uniform(-2e-4, 2e-4, 50_000), rng.normal(0, 1e-7, 5000)]
    x += [rng.uniform(-6e4, 6e4, 5000), rng.uniform(-3e-8, 3e-8, 5000)]
    for grid in (normal, sub):
        half = np.spacing(grid.astype(np.float16)).astype(np.float64) / 2
        x += [grid + half, grid - half, grid + half * (1 + 2**-30), grid + half * (1 - 2**-30)]
    edges = [0.0, -0.0, 2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 65504.0, 65519.9, 65520.0]
    x = np.concatenate([*x, edges, np.negative(edges)])
    with np.errstate(over="ignore"):  # 65520 and past: inf, as it should
        want = x.astype(np.float16)
    for size in (x.size // 64 * 64, x.size):
        xt = torch.from_numpy(x[:size].copy())
        got = TorchBackend(torch.float16, torch.device("cpu")).rounded(xt)
        got16 = got.to(torch.float16).numpy()
        assert np.array_equal(got16.view(np.int16), want[:size].view(np.int16))
    naive = torch.from_numpy(x).to(torch.float16).numpy()
    assert not np.array_equal(naive.view(np.int16), want.view(np.int16))  # double rounding


TABLES16 = [(4096, 256, "vaswani"), (300, 64, "whisper"), (60000, 21, "nerf")]
TABLES16 += [(1000, 96, "tensor2tensor")]


def test_torch_float16_tables_are_numpys_bit_for_bit():
    """Two independent roundings agree bit for bit: torch's (through float32, midpoints
    stepped) and NumPy's cast."""
    for rows, dim, preset in TABLES16:
        got = posenc.table(rows, dim, preset=preset, dtype=torch.float16)
        want = posenc.table(rows, dim, preset=preset, dtype=np.float16)
        assert np.array_equal(got.numpy().view(np.int16), want.view(np.int16))
