"""``posenc.rope_grid`` and ``posenc.apply_rope`` across diffusers' video and image families:
the float32-only evaluator within 1e-6 at the largest catalogued sizes (Wan, HunyuanVideo, FLUX,
CogVideoX); the grid's arguments (start, step, layouts, axes_scale, axes_base) against a float64
reference written from the formula; the originals' rotations bit for bit under ``compat=``;
every compat replay refuses a keyword its original has not and honours one it has; what
``compat=`` returns, and an empty axis. One family's own tests are in
tests/families/test_<record>.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.families.models import assert_exact
from tests.reference import axial_rope
from tests.reference import numpy_crop as _numpy_crop

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models import embeddings  # noqa: E402


def _pairs(out):
    return [np.asarray(t.double().numpy() if hasattr(t, "numpy") else t) for t in out]


# ---------------------------------------------------------------------------------------------
# the float32-only evaluator (MPS, exported graphs), forced here on the CPU


@pytest.mark.parametrize(
    ("preset", "dims", "head", "kw", "axes", "base", "positions"),
    [
        ("wan", (21, 45, 80), 128, {}, (44, 42, 42), 1e4, None),
        ("hunyuan-video", (33, 45, 80), 128, {}, (16, 56, 56), 256.0, None),
        ("flux", (1, 256, 256), 128, {}, (16, 56, 56), 1e4, None),  # 4096 x 4096 px
        ("cogvideox", (13, 60, 90), 64, {"crop": ((0, 0), (30, 45))}, (16, 24, 24), 1e4,
         [np.arange(13), _numpy_crop(0, 30, 60), _numpy_crop(0, 45, 90)]),
    ],
)  # fmt: skip
def test_float32_only_path(float32_only, preset, dims, head, kw, axes, base, positions):
    cos, sin = posenc.rope_grid(dims, head, preset=preset, dtype=torch.float32, **kw)
    ref = axial_rope(dims, axes, base, (0, 1, 2), positions or [np.arange(n) for n in dims])
    for got, want in zip((cos, sin), ref, strict=True):
        assert np.abs(got.double().numpy() - want).max() < 1e-6


# ---------------------------------------------------------------------------------------------
# the arguments


def test_grid_positions_follow_start_and_step():
    cos, sin = posenc.rope_grid((4, 6), 32, axes_dim=(16, 16), start=(2.5, -3), step=(0.5, 2))
    ref = axial_rope((4, 6), (16, 16), 1e4, (0, 1), [2.5 + 0.5 * np.arange(4),
                    -3 + 2 * np.arange(6)], layout="halves")  # fmt: skip
    assert_exact(cos, ref[0])
    assert_exact(sin, ref[1])
    ids = np.stack(np.meshgrid(2.5 + 0.5 * np.arange(4), -3 + 2 * np.arange(6), indexing="ij"), -1)
    by_ids = posenc.rope(ids.reshape(-1, 2), 32, axes_dim=(16, 16))  # the same tables
    assert all(np.array_equal(a, b) for a, b in zip(by_ids, (cos, sin), strict=True))


def test_halves_hold_every_block_in_both_halves():
    cos, _ = posenc.rope_grid((3, 5), 16, axes_dim=(8, 8), layout="halves")
    np.testing.assert_array_equal(cos[:, :8], cos[:, 8:])
    ref, _ = axial_rope((3, 5), (8, 8), 1e4, (0, 1), [np.arange(3), np.arange(5)], "halves")
    assert_exact(cos, ref)


def test_axes_scale_multiplies_each_block():
    cos, sin = posenc.rope_grid((5, 4), 32, axes_dim=(16, 16), axes_scale=(2 * math.pi, 0.25))
    plain = axial_rope((5, 4), (16, 16), 1e4, (0, 1), [2 * math.pi * np.arange(5),
                      0.25 * np.arange(4)], layout="halves")  # fmt: skip
    assert_exact(cos, plain[0])
    assert_exact(sin, plain[1])


def test_torch_output_follows_dtype_and_like():
    cos, _ = posenc.rope_grid((2, 3, 4), 128, preset="wan", dtype=torch.bfloat16)
    assert cos.dtype == torch.bfloat16
    assert cos.shape == (24, 128)
    like = torch.zeros(1, dtype=torch.float64)
    cos64, _ = posenc.rope_grid((2, 3, 4), 128, preset="wan", like=like, dtype=torch.float64)
    ref, _ = axial_rope((2, 3, 4), (44, 42, 42), 1e4, (0, 1, 2), [np.arange(2), np.arange(3),
                       np.arange(4)])  # fmt: skip
    np.testing.assert_allclose(cos64.numpy(), ref, rtol=0, atol=1e-15)
    assert cos.float().sub(cos64.float()).abs().max() <= 2**-8


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: posenc.rope_grid((4, 4), 64), "needs one block per grid axis"),
        (lambda: posenc.rope_grid((4, 4), 64, preset="wan"), "must have 3 axes"),
        (lambda: posenc.rope_grid((4, 4, 4), 4, preset="wan"), "wan's even blocks"),
        (lambda: posenc.rope_grid((4, 4), 64, axes_dim=(32, 32), block_axes=(0, 0)),
         "`block_axes` must order"),
        (lambda: posenc.rope_grid((4, 4), 64, axes_dim=(32, 32), start=(1, 2, 3)), "`start`"),
        (lambda: posenc.rope_grid((4, 4), 64, axes_dim=(32, 32), crop=((0,), (1, 2))), "`crop`"),
        (lambda: posenc.rope_grid((4, 4), 64, axes_dim=(32, 32), crop=((0, 0), (4, 4)), step=2),
         "without `start` and `step`"),
        (lambda: posenc.rope_grid((4, 4), 64, axes_dim=(32, 32), compat="diffusers"),
         "pass a preset that has one"),
        (lambda: posenc.rope_grid((4, 4, 4), 128, preset="wan", compat="timm"), "`compat`"),
        (lambda: posenc.rope_grid((4, 4, 4), 128, preset="wan", start=1, compat="diffusers"),
         "positions 0, 1, 2"),
        (lambda: posenc.rope_grid((1025, 1, 1), 128, preset="wan", compat="diffusers"),
         "rows 0 … 1023"),
        (lambda: posenc.rope_grid((4, 4), 64, axes_dim=(32, 32), step=1e300), "within +-2^53"),
        (lambda: posenc.rope_grid((4, 4), 64, axes_dim=(32, 32), axes_scale=(1.0,)),
         "`axes_scale` must be a tuple of 2"),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(call, fragment):
    with pytest.raises(PosencError, match=None) as err:
        call()
    assert fragment in str(err.value)


# ---------------------------------------------------------------------------------------------
# apply_rope: the originals' rotations, bit for bit


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize(("layout", "unbind"), [("interleaved", -1), ("halves", -2)])
@pytest.mark.parametrize("sequence_dim", [1, 2])
def test_apply_rope_compat_diffusers(dtype, layout, unbind, sequence_dim):
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    x = torch.randn(2, 3, 35, 64).to(dt)  # [B, H, S, D], or [B, S, H, D] for sequence_dim 1
    if sequence_dim == 1:
        x = x.transpose(1, 2).contiguous()
    cos, sin = posenc.rope_grid((5, 7), 64, axes_dim=(32, 32), layout=layout, dtype=torch.float32)
    want = embeddings.apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=unbind,
                                       sequence_dim=sequence_dim)  # fmt: skip
    c, s = (cos[:, None], sin[:, None]) if sequence_dim == 1 else (cos, sin)
    got = posenc.apply_rope(x, c, s, layout, compat="diffusers")
    assert got.dtype == dt
    assert torch.equal(got, want)
    exact = posenc.apply_rope(x, c, s, layout)  # rounded once: at least as close to float64
    truth = posenc.apply_rope(x.double(), c.double(), s.double(), layout)
    assert (exact.double() - truth).abs().max() <= (want.double() - truth).abs().max()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_apply_rope_compat_transformers(dtype, quiet_transformers):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    q = torch.randn(2, 4, 16, 96).to(dt)
    cos, sin = posenc.rope(torch.arange(16)[None], 64, dtype=dt)  # partial: 64 of 96 rotate
    want, _ = apply_rotary_pos_emb(q[..., :64], q[..., :64], cos, sin)
    got = posenc.apply_rope(q, cos[:, None], sin[:, None], compat="transformers")
    assert torch.equal(got[..., :64], want)
    assert torch.equal(got[..., 64:], q[..., 64:])


def test_apply_rope_compat_arguments():
    x = np.zeros((2, 8), dtype=np.float32)
    cos, sin = np.ones((2, 8), np.float32), np.zeros((2, 8), np.float32)
    with pytest.raises(PosencError, match="torch `x`"):
        posenc.apply_rope(x, cos, sin, compat="diffusers")
    with pytest.raises(PosencError, match="`compat` must be one of"):
        posenc.apply_rope(torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin),
                          compat="timm")  # fmt: skip
    with pytest.raises(PosencError, match="'compact'"):
        posenc.apply_rope(torch.zeros(2, 8), torch.ones(2, 4), torch.zeros(2, 4), "compact",
                          compat="diffusers")  # fmt: skip


def test_axes_base_gives_each_block_its_own_base():
    cos, sin = posenc.rope_grid((3, 5), 32, axes_dim=(16, 16), axes_base=(2e4, 300.0),
                                layout="interleaved")  # fmt: skip
    ref_t = axial_rope((3, 5), (16,), 2e4, (0,), [np.arange(3), np.arange(5)])
    ref_w = axial_rope((3, 5), (16,), 300.0, (1,), [np.arange(3), np.arange(5)])
    assert_exact(cos, np.concatenate([ref_t[0], ref_w[0]], axis=1))
    assert_exact(sin, np.concatenate([ref_t[1], ref_w[1]], axis=1))
    from posenc.torch import AxialRotaryEmbedding

    module = AxialRotaryEmbedding(32, axes_dim=(16, 16), axes_base=(2e4, 300.0),
                                               layout="interleaved")  # fmt: skip
    assert np.array_equal(module((3, 5))[0].numpy(), cos)
    with pytest.raises(PosencError, match="`axes_base` must be a tuple of 2 bases"):
        posenc.rope_grid((3, 5), 32, axes_dim=(16, 16), axes_base=(1e4,))


@pytest.mark.parametrize(
    ("preset", "shape", "dim", "kw", "named"),
    [("wan", (2, 3, 4), 24, {"layout": "compact"}, "`layout`"),
     ("wan", (2, 3, 4), 24, {"layout": "halves"}, "`layout`"),
     ("wan", (2, 3, 4), 24, {"axes_scale": (2, 1, 1)}, "`axes_scale`"),
     ("wan", (2, 3, 4), 24, {"axes_base": (2, 1, 1)}, "`axes_base`"),
     ("ltx-video", (2, 3, 4), 96, {"layout": "halves"}, "`layout`"),
     ("cosmos", (2, 3, 4), 128, {"layout": "interleaved"}, "`layout`"),
     ("qwen-image", (2, 3, 4), 128, {"axes_scale": (2, 1, 1)}, "`axes_scale`"),
     ("cogview4", (2, 3), 128, {"block_axes": (1, 0)}, "`block_axes`"),
     ("hunyuan-dit", (2, 3), 88, {"block_axes": (0, 1)}, "`block_axes`")],
)  # fmt: skip
def test_compat_refuses_a_form_the_original_does_not_have(preset, shape, dim, kw, named):
    """A layout, factor, base or block order of the call's own is not the family's arithmetic:
    an error naming it, never the family's own table under another name."""
    with pytest.raises(PosencError, match=named):
        posenc.rope_grid(shape, dim, preset=preset, compat="diffusers", **kw)


def test_module_keeps_the_preset_coordinates_a_call_leaves_out():
    from posenc.torch import AxialRotaryEmbedding, RotaryEmbedding

    for kw, shape in (({"preset": "dinov3", "start": 0.0}, (3, 5)),
                      ({"preset": "qwen-image", "step": 1.0}, (1, 4, 6)),
                      ({"preset": "qwen-image", "block_axes": (0, 2, 1)}, (1, 4, 6))):  # fmt: skip
        dim = 64 if kw["preset"] == "dinov3" else 128
        got = AxialRotaryEmbedding(dim, **kw)(shape)
        want = posenc.rope_grid(shape, dim, dtype=torch.float32, **kw)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    with pytest.raises(PosencError, match="rope_grid"):
        RotaryEmbedding(24, preset="ltx-video")
    with pytest.raises(PosencError, match="no axial rule"):
        posenc.rope(torch.zeros(2, 3), 24, preset="ltx-video", compat="transformers")


def test_compat_follows_the_default_dtype_as_exact_does():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        exact, _ = posenc.rope_grid((2, 3, 4), 128, preset="wan", device="cpu")
        compat, _ = posenc.rope_grid((2, 3, 4), 128, preset="wan", device="cpu",
                                     compat="diffusers")  # fmt: skip
        hunyuan, _ = posenc.rope_grid((2, 3, 4), 128, preset="hunyuan-video", device="cpu",
                                      compat="diffusers")  # fmt: skip
    finally:
        torch.set_default_dtype(before)
    assert exact.dtype == compat.dtype == hunyuan.dtype == torch.float64
    assert torch.equal(compat, exact.float().double())  # Wan's float64 tables, rounded once
    numpy_out, _ = posenc.rope_grid((2, 3, 4), 128, preset="wan", compat="diffusers")
    assert numpy_out.dtype == np.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_apply_rope_compat_diffusers_is_the_complex_product_too(dtype):
    """diffusers' complex path (``use_real=False``: Lumina, and Qwen-Image's own
    ``apply_rotary_emb_qwen``): pairs as complex64 times the complex table, then x's dtype;
    the same bits as the interleaved real rotation of compat='diffusers'."""
    from diffusers.models.embeddings import apply_rotary_emb
    from diffusers.models.transformers.transformer_qwenimage import apply_rotary_emb_qwen

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 300, 4, 64, generator=gen).to(dtype)  # [B, S, H, D]
    cos, sin = posenc.rope_grid((3, 10, 10), 64, axes_dim=(16, 24, 24), layout="interleaved",
                                start=(0, -5, -5), dtype=torch.float32)  # fmt: skip
    table = torch.complex(cos[:, 0::2].contiguous(), sin[:, 0::2].contiguous())  # [S, D / 2]
    ours = posenc.apply_rope(x, cos[:, None], sin[:, None], "interleaved", compat="diffusers")
    assert torch.equal(apply_rotary_emb(x, table[None], use_real=False), ours)
    assert torch.equal(apply_rotary_emb_qwen(x, table, use_real=False), ours)


# ---------------------------------------------------------------------------------------------
# every compat replay: a keyword its original has not is refused, one it has is honoured


def _originals():
    from posenc.spec.presets import get_rotary_preset

    return [(name, mode) for name in posenc.presets("rotary")
            for mode in get_rotary_preset(name).originals]  # fmt: skip


def _grid_of(name):
    """The preset's width, a small grid of its axes (square for Llama 4's n x n), its base."""
    from posenc.spec.presets import get_rotary_preset
    from posenc.spec.rotary import rotary

    dim = get_rotary_preset(name).dim
    r = rotary(dim, preset=name)
    k = r.ndim
    shape = {1: (5,), 2: (4, 4) if name == "llama4-vision" else (3, 4), 3: (2, 3, 4)}[k]
    return dim, shape, r.base


FOREIGN = {
    "block-halves": lambda k, base: {"layout": "block-halves", "blocks": 2},
    "halves": lambda k, base: {"layout": "halves"},
    "interleaved": lambda k, base: {"layout": "interleaved"},
    "compact": lambda k, base: {"layout": "compact"},
    "axes_base": lambda k, base: {"axes_base": tuple(2.0 * base * (a + 1) for a in range(k))},
    "axes_scale": lambda k, base: {"axes_scale": (0.5,) * k},
    "block_axes": lambda k, base: {"block_axes": tuple(reversed(range(k)))},
}
"""Keywords beside a preset that change its table (each a form some original has)."""

HONOURED = {("qwen-image", "diffusers", "compact"), ("qwen-image", "diffusers", "halves"),
            ("cosmos", "diffusers", "axes_base"), ("eva02", "timm", "halves"),
            ("eva02", "timm", "block_axes"), ("dinov3", "timm", "block_axes"),
            ("timm-pixel", "timm", "halves"), ("lumina-next", "diffusers", "axes_scale"),
            ("lumina2", "diffusers", "halves"), ("z-image", "diffusers", "compact"),
            ("kandinsky5", "diffusers", "axes_scale"), ("kandinsky6", "diffusers", "compact"),
            ("gemma4-vision", "timm", "block-halves"),
            ("gemma4-vision", "transformers", "block-halves")}  # fmt: skip
"""Forms the originals have (the test must not pass by refusing everything)."""


@pytest.mark.parametrize("foreign", list(FOREIGN))
@pytest.mark.parametrize(("name", "mode"), _originals())
def test_compat_refuses_or_honours_every_keyword(name, mode, foreign):
    """Every ``compat=`` replay compares the call's form (layout, blocks, widths, factors,
    bases, block order) with its family's own: a keyword the original does not have is an
    error naming it; one it has gives the table the keyword asks for (the exact table of the
    same call, within the original's float32 error), never the family's own table under
    another name (timm's eva02 with ``layout="block-halves"`` was interleaved, 1.99 off;
    ``axes_base`` was ignored; qwen-image's block-halves came back half as wide)."""
    dim, shape, base = _grid_of(name)
    kw = FOREIGN[foreign](len(shape), base)
    refused = None
    try:
        got = posenc.rope_grid(shape, dim, preset=name, compat=mode, dtype=torch.float64, **kw)
    except PosencError as err:
        refused = str(err)
    if refused is not None:
        assert (name, mode, foreign) not in HONOURED
        assert any(f"`{k}`" in refused for k in kw), refused
        return
    want = posenc.rope_grid(shape, dim, preset=name, dtype=np.float64, **kw)
    for g, w in zip(got, want, strict=True):
        assert tuple(g.shape) == w.shape
        assert np.abs(g.numpy() - w).max() < 1e-2  # LTX's float32 angles reach 1.6e4 rad


def test_the_honoured_forms_are_the_originals():
    """Forms a replay takes from the call, bit for bit with the original: Cosmos's module with
    another ``rope_scale`` is its per-axis bases (``axes_base``); Qwen-Image's complex rows
    placed as halves; the forms no original has stay refused."""
    from diffusers.models.transformers.transformer_cosmos import CosmosRotaryPosEmbed
    from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope

    dims, scale = (3, 5, 6), (1.5, 3.0, 2.0)
    d_s = 128 // 6 * 2
    widths = (128 - 2 * d_s, d_s, d_s)
    bases = tuple(1e4 * s ** (d / (d - 2)) for s, d in zip(scale, widths, strict=True))
    want = CosmosRotaryPosEmbed(128, rope_scale=scale)(torch.zeros(1, 1, 3, 10, 12))
    got = posenc.rope_grid(dims, 128, preset="cosmos", axes_base=bases, compat="diffusers",
                           dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    module = QwenEmbedRope(10000, [16, 56, 56], scale_rope=True)
    video, _ = module([(1, 4, 6)], device=torch.device("cpu"), max_txt_seq_len=4)
    cos, sin = posenc.rope_grid((1, 4, 6), 128, preset="qwen-image", layout="halves",
                                compat="diffusers", dtype=torch.float32)  # fmt: skip
    assert torch.equal(cos, torch.cat([video.real] * 2, -1))
    assert torch.equal(sin, torch.cat([video.imag] * 2, -1))
    for call in (
        lambda: posenc.rope_grid((4, 5), 64, preset="eva02", compat="timm",
                                 layout="block-halves", blocks=2),
        lambda: posenc.rope_grid((4, 5), 64, preset="timm-pixel", compat="timm",
                                 axes_base=(224.0, 448.0)),
        lambda: posenc.rope_grid((4, 5), 64, preset="dinov3", compat="transformers",
                                 axes_base=(100.0, 200.0)),
        lambda: posenc.rope_grid((1, 4, 5), 128, preset="qwen-image", layout="block-halves",
                                 blocks=2, compat="diffusers"),
    ):  # fmt: skip
        with pytest.raises(PosencError, match="drop"):
            call()


def test_a_preset_default_gives_way_to_the_calls_keywords():
    """A preset's ``per_block`` (Cosmos's bases from its widths) is not asked when the call
    gives ``axes_base``; its block count is a default under the call's ``blocks`` or layout
    (LTX-2's 32 heads of a 96-wide table: ``blocks=4`` or ``layout="halves"``)."""
    bases = (1e4, 2e4, 5e3)
    cos, sin = posenc.rope_grid((3, 4, 5), 64, preset="cosmos", axes_dim=(2, 30, 32),
                                axes_base=bases)  # fmt: skip
    positions = [np.arange(n) for n in (3, 4, 5)]
    parts = [axial_rope((3, 4, 5), (d,), b, (a,), positions)
             for a, (d, b) in enumerate(zip((2, 30, 32), bases, strict=True))]  # fmt: skip
    half = [np.concatenate([p[j][:, : p[j].shape[1] : 2] for p in parts], axis=1)
            for j in (0, 1)]  # fmt: skip
    for got, h in zip((cos, sin), half, strict=True):  # cosmos: halves over the whole head
        assert_exact(got, np.concatenate([h, h], axis=1))
    ids = np.stack(np.meshgrid(*[np.linspace(-1, 1, n) for n in (2, 3, 4)], indexing="ij"), -1)
    ids = ids.reshape(-1, 3)
    for kw in ({"blocks": 4}, {"layout": "halves"}):
        split = posenc.rope(ids, 96, preset="ltx2-video-split", **kw)
        whole = posenc.rope(ids, 96, preset="ltx2-video", layout="block-halves",
                            blocks=kw.get("blocks", 1))  # fmt: skip
        assert all(np.array_equal(a, b) for a, b in zip(split, whole, strict=True))
    with pytest.raises(PosencError, match=r"`blocks` = 32 must cut `dim` = 96"):
        posenc.rope(ids, 96, preset="ltx2-video-split")


# ---------------------------------------------------------------------------------------------
# what compat= returns, and what it reaches (docs/rope-vision.md, "What compat= reaches")


def test_compat_returns_numpy_unless_torch_is_asked_for():
    """The replay computes with torch, but returns NumPy (float32) unless a torch dtype, a
    device or a torch ``like`` is given; ``like`` gives the library and device, not the
    dtype; a NumPy dtype holds the original's float32 values, widened."""
    grid = {"shape": (2, 3, 4), "dim": 128, "preset": "hunyuan-video", "compat": "diffusers"}
    plain, _ = posenc.rope_grid(**grid)
    assert isinstance(plain, np.ndarray)
    assert plain.dtype == np.float32
    asked = [{"dtype": torch.float32}, {"device": "cpu"},
             {"like": torch.zeros(1, dtype=torch.float16)}]  # fmt: skip
    for kw in asked:
        out, _ = posenc.rope_grid(**grid, **kw)
        assert isinstance(out, torch.Tensor), kw
        assert out.dtype == torch.float32, kw  # torch's default dtype, not like's
        assert out.device.type == "cpu"
        assert np.array_equal(out.numpy(), plain)
    numpy_like, _ = posenc.rope_grid(**grid, like=np.zeros(1, dtype=np.float64))
    assert isinstance(numpy_like, np.ndarray)
    assert numpy_like.dtype == np.float32
    wide, _ = posenc.rope_grid(**grid, dtype=np.float64)
    assert isinstance(wide, np.ndarray)
    assert wide.dtype == np.float64
    assert np.array_equal(wide, plain.astype(np.float64))
    with pytest.raises(PosencError, match="bfloat16"):
        posenc.rope_grid(**grid, dtype="bfloat16")


def _compat_families():
    from posenc.spec.presets import ROTARY_PRESETS, get_rotary_preset

    return [(n, c) for n in ROTARY_PRESETS for c in get_rotary_preset(n).originals or ()]


@pytest.mark.parametrize(("preset", "compat"), _compat_families())
def test_compat_gives_an_empty_table_for_an_empty_axis(preset, compat):
    """Every replay, as the exact mode: an axis of 0 gives tables of no rows and the full
    width, in the library and dtype a grid of rows would have (before: reshape errors inside
    the replays, or a refusal of positions that do not exist)."""
    for shape in ((2, 3, 4), (4, 4), (2, 3, 4, 2)):  # llama4-vision: square grids only
        served = None
        for dim in (128, 96, 64, 120, 256, 48):
            try:
                served = posenc.rope_grid(shape, dim, preset=preset, compat=compat)
                break
            except PosencError:
                continue
        if served is None:
            continue
        empty = (shape[0], 0, *shape[2:])
        for kw in ({}, {"dtype": torch.float32}):
            full = posenc.rope_grid(shape, dim, preset=preset, compat=compat, **kw)
            got = posenc.rope_grid(empty, dim, preset=preset, compat=compat, **kw)
            exact = posenc.rope_grid(empty, dim, preset=preset, **kw)
            for g, f, e in zip(got, full, exact, strict=True):
                assert type(g) is type(f)
                assert g.shape == (0, f.shape[1]) == e.shape
                assert g.dtype == f.dtype
        return
    pytest.fail(f"no grid served by {preset} compat={compat!r}")
