"""posenc.torch modules: numbers, behaviour (state_dict, meta, dtypes, compile), diffusers' and
Hugging Face's conventions, and errors. (Export and ONNX: test_export.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from posenc import PosencError
from tests import reference as ref
from tests.helpers import assert_correctly_rounded, compile_counter, raises, within_ulps

torch = pytest.importorskip("torch")
from posenc.torch import (  # noqa: E402
    DetrSineEncoding,
    GridEncoding,
    PositionalEncoding,
    SinusoidalEmbedding,
    Timesteps,
    packed_positions,
)


def exact(length: int, d: int, preset: str = "vaswani", offset: int = 0, **kw) -> np.ndarray:
    """float64 reference table of a 1D preset."""
    if preset == "vaswani":
        return ref.vaswani(length, d, offset=offset)
    if preset == "whisper":
        return ref.whisper(length + offset, d)[offset:]
    raise AssertionError(preset)


def rounded_to_float32(got, want: np.ndarray) -> None:
    """A float32 output is the float64 reference rounded once (1e-12: the reference's own
    float64 error)."""
    assert got.dtype == torch.float32
    assert_correctly_rounded(got, want, slack=1e-12)


# -- the add-to-activations module -------------------------------------------------------


@pytest.mark.parametrize("preset", ["vaswani", "whisper"])
@pytest.mark.parametrize("length", [1, 100, 2048, 3000])
def test_adds_the_exact_encoding(preset, length):
    m = PositionalEncoding(64, preset=preset)
    x = torch.zeros(2, length, 64)
    y = m(x)
    assert y.shape == x.shape
    rounded_to_float32(y[1], exact(length, 64, preset))


def test_seq_first_input_scale_and_offset():
    m = PositionalEncoding(32, batch_first=False, input_scale=math.sqrt(32))
    x = torch.randn(10, 3, 32)
    y = m(x, offset=5)
    pe = torch.from_numpy(exact(10, 32, offset=5)).float()
    assert torch.allclose(y, x * math.sqrt(32) + pe[:, None], atol=1e-6)


def test_explicit_positions_and_per_batch_offsets():
    m = PositionalEncoding(16)
    x = torch.zeros(2, 4, 16)
    pos = torch.tensor([[0, 5, 9, 100_000], [7, 7, 1, 2]])
    y = m(x, pos)
    table = exact(100_001, 16)
    rounded_to_float32(y, table[pos.numpy()])
    rounded_to_float32(m(x, torch.tensor([3, 1, 4, 1])), table[[3, 1, 4, 1]][None].repeat(2, 0))
    y = m(x, offset=torch.tensor([10, 4000]))
    rounded_to_float32(y[0], table[10:14])
    rounded_to_float32(y[1], table[4000:4004])
    reals = m(x, torch.tensor([0.5, 1.25, 2.0, 1e6 + 0.5], dtype=torch.float64))
    theta = np.array([0.5, 1.25, 2.0, 1e6 + 0.5])[:, None] * 10000.0 ** (-np.arange(8) / 8)
    want = np.stack([np.sin(theta), np.cos(theta)], -1).reshape(4, 16)
    rounded_to_float32(reals[0], want)


def test_packed_sequences_restart_positions():
    assert packed_positions(torch.tensor([0, 3, 5, 9])).tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    m = PositionalEncoding(16)
    x = torch.zeros(9, 16)
    y = m(x, cu_seqlens=torch.tensor([0, 3, 5, 9]))
    table = exact(4, 16)
    rounded_to_float32(y, table[[0, 1, 2, 0, 1, 0, 1, 2, 3]])
    assert m(x[None], cu_seqlens=torch.tensor([0, 9])).shape == (1, 9, 16)


def test_dropout_train_and_eval():
    m = PositionalEncoding(64, dropout=0.5)
    x = torch.randn(4, 50, 64)
    m.eval()
    assert torch.equal(m(x), x + m.cache[:50])
    m.train()
    torch.manual_seed(0)
    y = m(x)
    kept = y != 0
    assert 0.4 < kept.float().mean() < 0.6
    assert torch.allclose(y[kept], ((x + m.cache[:50]) * 2)[kept])


def test_no_table_in_state_dict_and_no_buffers():
    m = PositionalEncoding(32)
    assert m.state_dict() == {}
    assert list(m.parameters()) == []
    assert list(m.buffers()) == []


@pytest.mark.parametrize("cast", ["bfloat16", "half", "double"])
def test_dtype_changes_never_degrade(cast):
    m = PositionalEncoding(64)
    m = getattr(m, cast)() if cast != "bfloat16" else m.to(torch.bfloat16)
    dtype = {"bfloat16": torch.bfloat16, "half": torch.float16, "double": torch.float64}[cast]
    y = m(torch.zeros(1, 300, 64, dtype=dtype))[0]
    assert y.dtype == dtype
    want = posenc.table(300, 64, dtype=dtype)  # the core's correctly rounded table
    if dtype == torch.float64:
        assert (y - torch.from_numpy(exact(300, 64))).abs().max() < 1e-12
    else:
        assert torch.equal(y, want)


def test_autocast_keeps_the_encoding():
    m = PositionalEncoding(64)
    x = torch.randn(2, 20, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x)
    assert torch.equal(y, m(x))


def test_input_dtype_follows_and_float64_is_exact():
    m = PositionalEncoding(64)  # float32 cache
    y = m(torch.zeros(1, 100, 64, dtype=torch.float64))
    assert y.dtype == torch.float64
    assert (y[0] - torch.from_numpy(exact(100, 64))).abs().max() < 1e-12


def test_meta_device_then_reset_equals_eager():
    eager = PositionalEncoding(64, preset="whisper", cached_length=512)
    meta = PositionalEncoding(64, preset="whisper", cached_length=512, device="meta")
    assert meta.cache.is_meta
    meta.to_empty(device="cpu")
    meta.reset_parameters()
    assert torch.equal(meta.cache, eager.cache)
    x = torch.randn(2, 600, 64)
    assert torch.equal(meta(x), eager(x))


def test_gradients_flow_to_x_only():
    m = PositionalEncoding(16, input_scale=2.0)
    x = torch.randn(2, 5, 16, requires_grad=True)
    m(x).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 2.0))


@pytest.mark.parametrize("dynamic", [True, False])
def test_compile_fullgraph_matches_eager(dynamic):
    torch._dynamo.reset()
    m = PositionalEncoding(32, cached_length=64).eval()
    cm = torch.compile(m, fullgraph=True, dynamic=dynamic)
    for length in (5, 9):  # cached rows: identical
        x = torch.randn(2, length, 32)
        assert torch.equal(cm(x), m(x))
    x = torch.randn(2, 7, 32)
    assert torch.equal(cm(x, offset=11), m(x, offset=11))
    # computed rows: eager takes the core's path, traced code the same float64 formula in
    # torch ops; both round the float64 value once, so they agree to one float32 ulp
    within_ulps(cm(torch.zeros(2, 100, 32)), m(torch.zeros(2, 100, 32)))
    for kw in (
        {"offset": torch.tensor([3, 50])},
        {"positions": torch.arange(7) * 3},
        {"positions": torch.arange(7) + 1_000_000},
    ):
        within_ulps(cm(x, **kw) - x, m(x, **kw) - x)
    cu = torch.tensor([0, 2, 7])
    within_ulps(cm(x[0], cu_seqlens=cu), m(x[0], cu_seqlens=cu))


def test_compile_dynamic_does_not_recompile_for_new_lengths():
    torch._dynamo.reset()
    m = PositionalEncoding(32, cached_length=64).eval()
    counter = compile_counter()
    cm = torch.compile(m, fullgraph=True, dynamic=True, backend=counter)
    # within the cache, across its end and far past it: one graph (kept rows, then the
    # computed rest), every row the paper's table written from the formula
    for length in (3, 5, 17, 40, 63, 64, 65, 66, 100, 1000, 2):
        x = torch.randn(2, length, 32)
        got = (cm(x) - x).double().numpy()
        np.testing.assert_allclose(got[1], ref.vaswani(length, 32), rtol=0, atol=3e-7)
    assert counter.frame_count == 1
    positions = torch.compile(
        lambda x, p: m(x, p), fullgraph=True, dynamic=True, backend=(c2 := compile_counter())
    )
    for length in (3, 9, 33, 500):
        positions(torch.randn(1, length, 32), torch.arange(length))
    assert c2.frame_count == 1


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        (lambda m: m(torch.zeros(5, 64)), ["`x`", "[batch, seq, dim]", "(5, 64)"]),
        (lambda m: m(torch.zeros(2, 5, 63)), ["64 channels", "63"]),
        (lambda m: m(torch.zeros(2, 5, 64), torch.arange(4)), ["`positions`", "[2, 5]", "(4,)"]),
        (lambda m: m(torch.zeros(2, 5, 64), offset=-1), ["`offset`", ">= 0", "-1"]),
        (lambda m: m(torch.zeros(2, 5, 64), offset=torch.tensor([1, -2])), ["`offset`", "[1, -2]"]),
        (
            lambda m: m(torch.zeros(2, 5, 64), offset=torch.tensor([1.0, 2.0])),
            ["`offset`", "float"],
        ),
        (lambda m: m(torch.zeros(2, 5, 64), torch.arange(5), offset=2), ["not both"]),
        (lambda m: m(torch.zeros(7, 64), cu_seqlens=torch.tensor([0, 3, 6])), ["end at", "7"]),
        (lambda m: m(torch.zeros(2, 7, 64), cu_seqlens=torch.tensor([0, 7])), ["[tokens, dim]"]),
    ],
)
def test_add_module_errors(call, fragments):
    m = PositionalEncoding(64)
    with pytest.raises(PosencError) as info:
        call(m)
    for f in fragments:
        assert f in str(info.value), (f, str(info.value))


def test_construction_errors():
    with pytest.raises(PosencError, match="`dim` must be a positive multiple of 2"):
        PositionalEncoding(63)
    with pytest.raises(PosencError, match="encodes 2 axes"):
        PositionalEncoding(64, preset="mae")
    with pytest.raises(PosencError, match="`dropout` must be in"):
        PositionalEncoding(64, dropout=1.5)
    with pytest.raises(PosencError, match="unknown option `bse`"):
        PositionalEncoding(64, bse=3)
    with pytest.raises(PosencError, match="multiple of 4"):
        GridEncoding(30)


# -- embedding lookup --------------------------------------------------------------------


def test_embedding_of_position_ids():
    emb = SinusoidalEmbedding(32, cached_length=100)
    ids = torch.tensor([[0, 99, 100, 5000]])
    out = emb(ids)
    assert out.shape == (1, 4, 32)
    rounded_to_float32(out[0], exact(5001, 32)[[0, 99, 100, 5000]])
    assert emb.state_dict() == {}


def test_embedding_fairseq_semantics():
    emb = SinusoidalEmbedding(16, preset="fairseq", padding_idx=1, from_tokens=True)
    tokens = torch.tensor([[5, 6, 7, 1], [1, 1, 8, 9]])
    out = emb(tokens)
    table = ref.fairseq(10, 16, padding_idx=1)
    positions = [[2, 3, 4, 1], [1, 1, 2, 3]]
    rounded_to_float32(out, table[positions])
    assert not out[1, :2].any()
    step = emb(tokens, step=6)
    assert step.shape == (2, 1, 16)
    rounded_to_float32(step[:, 0], table[[8, 8]])


def test_embedding_dtype_follows_module():
    emb = SinusoidalEmbedding(32).to(torch.bfloat16)
    out = emb(torch.arange(300))
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, posenc.table(300, 32, dtype=torch.bfloat16))


def test_embedding_errors():
    with pytest.raises(PosencError, match="needs `padding_idx`"):
        SinusoidalEmbedding(16, preset="fairseq", from_tokens=True)
    with pytest.raises(PosencError, match="integer ids"):
        SinusoidalEmbedding(16)(torch.tensor([0.5]))


# -- grids, DETR, timesteps --------------------------------------------------------------


@pytest.mark.parametrize(
    ("preset", "grid", "dim", "kw"),
    [
        ("mae", (14, 14), 64, {"cls_token": True}),
        ("diffusers-2d", (8, 12), 32, {"interpolation_scale": 2.0}),
        ("diffusers-3d", (3, 4, 5), 64, {}),
        ("timm-2d", (5, 7), 32, {"reverse_coord": True}),
        ("hf-2d", (6, 6), 32, {}),
        ("detr", (5, 9), 32, {"normalize": True}),
        ("t2t-nd", (3, 4, 5), 24, {}),
    ],
)
def test_grid_module_matches_core(preset, grid, dim, kw):
    m = GridEncoding(dim, preset=preset, **kw)
    want = posenc.grid(grid, dim, preset=preset, dtype=np.float64, **kw)
    got = m.encoding(grid, dtype=torch.float64)
    assert (got - torch.from_numpy(want)).abs().max() < 1e-12
    x = torch.randn(2, want.shape[0], dim)
    assert torch.allclose(m(x, grid), x + torch.from_numpy(want).float(), atol=1e-6)
    assert m.state_dict() == {}


@pytest.mark.parametrize(
    ("preset", "grid", "dim", "kw"),
    [
        ("mae", (5, 7), 64, {}),
        ("diffusers-3d", (3, 4, 5), 64, {}),
        ("timm-2d", (5, 7), 32, {"reverse_coord": True, "interleave_sin_cos": True}),
        ("t2t-nd", (3, 4, 5), 26, {}),
        ("tatp22", (3, 4, 5), 22, {}),
        ("nerf", (4, 3), 2 + 2 * 2 * 5, {}),
    ],
)
@pytest.mark.parametrize("channels", [None, slice(3, 17)])
def test_grid_module_traced_formula_matches_core(monkeypatch, preset, grid, dim, kw, channels):
    # what torch.compile and export run: each axis evaluates its own frequencies only
    m = GridEncoding(dim, preset=preset, channels=channels, **kw)
    want = posenc.grid(grid, dim, preset=preset, dtype=np.float64, channels=channels, **kw)
    assert torch.equal(m.encoding(grid, dtype=torch.float64), torch.from_numpy(want))  # eager
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    got = m.encoding(grid, dtype=torch.float64)
    assert got.shape == want.shape
    assert (got - torch.from_numpy(want)).abs().max() < 1e-12


def test_grid_module_register_tokens():
    m = GridEncoding(64, preset="hf-2d", num_prefix_tokens=5)
    pe = m.encoding((4, 6), dtype=torch.float64)
    assert pe.shape == (5 + 24, 64)
    assert not pe[:5].any()
    want = posenc.grid((4, 6), 64, preset="hf-2d", dtype=np.float64)
    assert (pe[5:] - torch.from_numpy(want)).abs().max() < 1e-12
    with pytest.raises(PosencError, match="`num_prefix_tokens` must be >= 0"):
        GridEncoding(64, num_prefix_tokens=-1)


def test_grid_module_any_size_per_call_and_errors():
    m = GridEncoding(64, preset="mae", cls_token=True)
    for grid in [(14, 14), (16, 8)]:
        x = torch.zeros(1, 1 + grid[0] * grid[1], 64)
        assert m(x, grid).shape == x.shape
    with pytest.raises(PosencError, match="must have 197 tokens"):
        m(torch.zeros(1, 196, 64), (14, 14))
    compiled = torch.compile(m, fullgraph=True)
    x = torch.randn(1, 1 + 6 * 4, 64)
    assert torch.equal(compiled(x, (6, 4)), m(x, (6, 4)))


def test_detr_module_matches_reference_and_compiles():
    rng = np.random.default_rng(0)
    mask = np.zeros((2, 7, 9), dtype=bool)
    mask[0, 5:, :] = True
    mask[1, :, rng.integers(2, 9) :] = True
    for normalize in (False, True):
        m = DetrSineEncoding(64, normalize=normalize).double()
        got = m(torch.from_numpy(mask))
        assert got.shape == (2, 128, 7, 9)
        assert (got - torch.from_numpy(ref.detr(mask, 64, normalize=normalize))).abs().max() < 1e-9
    m = DetrSineEncoding(16, normalize=True)
    compiled = torch.compile(m, fullgraph=True)
    assert torch.equal(compiled(torch.from_numpy(mask)), m(torch.from_numpy(mask)))
    with pytest.raises(PosencError, match="`mask`"):
        m(torch.zeros(7, 9, dtype=torch.bool))


def test_timesteps_module():
    t = torch.tensor([0.0, 1.0, 250.5, 999.0])
    m = Timesteps(320, flip_sin_to_cos=True, downscale_freq_shift=0)
    got = m(t)
    assert got.dtype == torch.float32
    rounded_to_float32(
        got, ref.timestep(t.numpy(), 320, flip_sin_to_cos=True, downscale_freq_shift=0)
    )
    compiled = torch.compile(m, fullgraph=True, dynamic=True)
    assert torch.equal(compiled(t), got)
    with pytest.raises(PosencError, match="too small"):
        Timesteps(2)


# -- diffusers' and Hugging Face's conventions (issue 13, item 7) ---------------------------


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
