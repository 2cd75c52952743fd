"""The rotary tables of transformers' vision towers (``posenc.rope_grid`` with the presets
``qwen2-vl-vision``, ``pixtral``, ``dinov3``, ``sam2``, ``llama4-vision``).

Each family's original is the real transformers module, built from a small config (no
downloads) and run as the model runs it (the vision model's own position ids where it builds
them), its output brought to posenc's form: tokens row-major, the class token left out. Then:
``compat="transformers"`` is ``torch.equal`` to it; the exact default is within float32's
half ulp of a float64 NumPy restatement of the formula written here, and closer to it than the
original; the float32-only formula is within 1e-6 of it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from tests.helpers import raises

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("quiet_transformers")

# family -> (head dim, the model's real grid, the grids the original builds at odd sizes)
FAMILIES = {
    "pixtral": (64, (64, 64), [(17, 23), (1, 7)]),  # 1024 px / 16
    "qwen2-vl-vision": (80, (32, 48), [(17, 23), (1, 7)]),  # 448 x 672 px / 14
    "dinov3": (64, (64, 64), [(17, 23), (1, 7), (7, 3)]),  # 1024 px / 16
    "sam2": (256, (64, 64), [(17, 23), (1, 7)]),  # the memory feature grid
    "sam3-vit": (64, (72, 72), [(24, 24), (17, 23), (1, 7)]),  # global; (24, 24) a window
    "llama4-vision": (88, (24, 24), [(17, 17), (7, 7), (1, 1)]),  # 336 px / 14; square only
}
CASES = [(f, FAMILIES[f][1]) for f in FAMILIES] + [
    (f, size) for f in FAMILIES for size in FAMILIES[f][2]
]


def _ids(case):
    family, (h, w) = case
    return f"{family}-{h}x{w}"


# ---------------------------------------------------------------------------------------------
# the float64 reference: the formula, from the model code, in NumPy


def reference(family, h, w, dim):
    """``(cos, sin)`` float64 ``[h * w, dim]``: tokens row-major, in the family's layout."""
    rows = np.repeat(np.arange(h, dtype=np.float64), w)
    cols = np.tile(np.arange(w, dtype=np.float64), h)
    quarter = np.arange(dim // 4, dtype=np.float64)
    if family == "pixtral":  # one ladder over dim; the row takes the even j, the column the odd
        ladder = 10000.0 ** (-2 * np.arange(dim // 2, dtype=np.float64) / dim)
        half = np.concatenate([np.outer(rows, ladder[0::2]), np.outer(cols, ladder[1::2])], 1)
        angles = np.concatenate([half, half], 1)
    elif family == "qwen2-vl-vision":
        omega = 10000.0 ** (-2 * quarter / (dim // 2))
        half = np.concatenate([np.outer(rows, omega), np.outer(cols, omega)], 1)
        angles = np.concatenate([half, half], 1)
    elif family == "dinov3":
        omega = 100.0 ** (-4 * quarter / dim)
        y = (rows + 0.5) / h * 2 - 1
        x = (cols + 0.5) / w * 2 - 1
        half = 2 * np.pi * np.concatenate([np.outer(y, omega), np.outer(x, omega)], 1)
        angles = np.concatenate([half, half], 1)
    elif family in ("sam2", "sam3-vit"):  # SAM 3: at the 24-wide window's scale
        omega = 10000.0 ** (-2 * quarter / (dim // 2))
        scale = 1.0 if family == "sam2" else 24 / w
        block = np.concatenate([np.outer(cols * scale, omega), np.outer(rows * scale, omega)], 1)
        angles = np.repeat(block, 2, axis=1)
    else:  # llama4-vision: 1-based (x, y)
        omega = 10000.0 ** (-2 * quarter / (dim // 2))
        block = np.concatenate([np.outer(cols + 1, omega), np.outer(rows + 1, omega)], 1)
        angles = np.repeat(block, 2, axis=1)
    return np.cos(angles), np.sin(angles)


# ---------------------------------------------------------------------------------------------
# the originals: the transformers modules, run as their models run them


def _hooked(module):
    """A forward hook on ``module`` keeping its inputs and output."""
    seen = {}

    def hook(mod, args, out):
        seen["args"], seen["out"] = args, out

    module.register_forward_hook(hook)
    return seen


def _row_major(ids, h, w, table):
    """A table whose rows are the tokens of ``ids`` ([N, 2] (row, column)), in row-major
    order; every patch appears once."""
    flat = ids[:, 0] * w + ids[:, 1]
    assert torch.equal(torch.sort(flat).values, torch.arange(h * w))
    out = torch.empty_like(table)
    out[flat] = table
    return out


def _pixtral_model():
    config = T.PixtralVisionConfig(hidden_size=64, num_attention_heads=1, head_dim=64,
                                   intermediate_size=8, num_hidden_layers=0)  # fmt: skip
    return T.PixtralVisionModel(config).eval()


def _pixtral(h, w):
    model = _pixtral_model()
    seen = _hooked(model.patch_positional_embedding)
    with torch.no_grad():
        model(torch.zeros(1, 3, h * 16, w * 16), image_sizes=[(h * 16, w * 16)])
    ids = seen["args"][1]
    assert torch.equal(ids[:, 0] * w + ids[:, 1], torch.arange(h * w))  # row-major already
    return seen["out"]


def _qwen2_vl(h, w):
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VisionTransformerPretrainedModel,
    )

    merge = 2 if h % 2 == 0 and w % 2 == 0 else 1  # the odd grids: no 2 x 2 merge
    config = Qwen2VLVisionConfig(depth=0, embed_dim=80, num_heads=1, hidden_size=16,
                                 spatial_merge_size=merge)  # fmt: skip
    model = Qwen2VisionTransformerPretrainedModel(config).eval()
    seen = _hooked(model.rotary_pos_emb)
    patches = torch.zeros(h * w, 3 * 2 * 14 * 14)
    with torch.no_grad():
        model(patches, grid_thw=torch.tensor([[1, h, w]]))
    ids = seen["args"][1]
    if merge == 2:  # the 2 x 2 block order, not row-major
        assert not torch.equal(ids[:, 0] * w + ids[:, 1], torch.arange(h * w))
    cos, sin = seen["out"]
    return _row_major(ids, h, w, cos), _row_major(ids, h, w, sin), ids


def _dinov3(h, w):
    config = T.DINOv3ViTConfig(hidden_size=64, num_attention_heads=1, intermediate_size=8,
                               num_hidden_layers=0, patch_size=16)  # fmt: skip
    model = T.DINOv3ViTModel(config).eval()
    seen = _hooked(model.rope_embeddings)
    with torch.no_grad():
        model(torch.zeros(1, 3, h * 16, w * 16))
    return seen["out"]


def _sam2(h, w):
    from transformers.models.sam2_video.modeling_sam2_video import Sam2VideoMemoryAttention

    config = T.Sam2VideoConfig(memory_attention_rope_feat_sizes=[w, h],
                               memory_attention_num_layers=1)  # fmt: skip
    attention = Sam2VideoMemoryAttention(config).eval()
    ids = attention.position_ids
    assert torch.equal(ids[:, 1] * w + ids[:, 0], torch.arange(h * w))  # (column, row)
    with torch.no_grad():
        cos, sin = attention.rotary_emb(torch.zeros(1), ids)
    return cos[0], sin[0]


def _sam3(h, w):
    from transformers.models.sam3.configuration_sam3 import Sam3ViTConfig
    from transformers.models.sam3.modeling_sam3 import Sam3ViTLayer

    # transformers reads its global grid as (image_size[1], image_size[0]) // patch_size
    config = Sam3ViTConfig(hidden_size=64, num_attention_heads=1, intermediate_size=8,
                           image_size=(w * 14, h * 14), patch_size=14, window_size=24)  # fmt: skip
    layer = Sam3ViTLayer(config, window_size=24 if (h, w) == (24, 24) else 0).eval()
    ids = layer.position_ids
    assert ids.dtype == torch.float32
    rows, cols = np.divmod(np.arange(h * w), w)  # (column, row), times 24 / columns
    expected = np.stack([cols, rows], 1) * (24 / w)
    assert np.allclose(ids.numpy(), expected, rtol=1e-7, atol=0)
    with torch.no_grad():
        cos, sin = layer.rotary_emb(torch.zeros(1), ids)
    return cos[0], sin[0]


def _llama4_freqs(n):
    from transformers.models.llama4.modeling_llama4 import Llama4VisionRotaryEmbedding

    config = T.Llama4VisionConfig(hidden_size=1408, num_attention_heads=16,
                                  image_size=n * 14, patch_size=14)  # fmt: skip
    return Llama4VisionRotaryEmbedding(config).freqs_ci[:, 0]  # [n * n + 1, 44] complex64


def _llama4(h, w):
    assert h == w
    freqs = _llama4_freqs(h)[:-1]  # the class token comes last
    return (freqs.real.repeat_interleave(2, dim=-1), freqs.imag.repeat_interleave(2, dim=-1))


def original(family, h, w):
    """The module's float32 ``(cos, sin)`` in posenc's form ``[h * w, dim]``."""
    if family == "pixtral":
        return _pixtral(h, w)
    if family == "qwen2-vl-vision":
        return _qwen2_vl(h, w)[:2]
    if family == "dinov3":
        return _dinov3(h, w)
    if family == "sam2":
        return _sam2(h, w)
    if family == "sam3-vit":
        return _sam3(h, w)
    return _llama4(h, w)


def _err(got, ref):
    return float(np.max(np.abs(np.asarray(got, dtype=np.float64) - ref)))


def _within_half_ulp(got, ref):
    got = np.asarray(got, dtype=np.float64)
    bound = 6e-8 * np.abs(ref) + 1e-38
    worst = float(np.max(np.abs(got - ref) - bound))
    assert worst <= 0, worst


# ---------------------------------------------------------------------------------------------
# (1) compat="transformers": the module's bits


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_compat_is_the_module(case):
    family, (h, w) = case
    dim = FAMILIES[family][0]
    cos, sin = original(family, h, w)
    assert cos.shape == (h * w, dim)
    assert cos.dtype == torch.float32
    pc, ps = posenc.rope_grid((h, w), dim, preset=family, compat="transformers",
                              dtype=torch.float32)  # fmt: skip
    assert torch.equal(pc, cos)
    assert torch.equal(ps, sin)


def test_compat_numpy_and_dtype():
    """NumPy out by default; Pixtral's cast to the activations' dtype is the module's."""
    pc, ps = posenc.rope_grid((5, 6), 64, preset="pixtral", compat="transformers")
    assert isinstance(pc, np.ndarray)
    assert pc.dtype == np.float32
    cos, sin = _pixtral(5, 6)
    assert np.array_equal(pc, cos.numpy())
    assert np.array_equal(ps, sin.numpy())
    bc, bs = posenc.rope_grid((5, 6), 64, preset="pixtral", compat="transformers",
                              dtype=torch.bfloat16)  # fmt: skip
    rows, cols = np.divmod(np.arange(30), 6)
    ids = torch.from_numpy(np.stack([rows, cols], 1))
    with torch.no_grad():  # the module casts its float32 tables to the activations' dtype
        half = _pixtral_model().patch_positional_embedding(torch.zeros(1, dtype=torch.bfloat16),
                                                           ids)  # fmt: skip
    assert half[0].dtype == torch.bfloat16
    assert torch.equal(bc, half[0])
    assert torch.equal(bs, half[1])


# ---------------------------------------------------------------------------------------------
# (2) exact: float32's half ulp of the float64 reference, closer than the original


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_exact_against_float64(case):
    family, (h, w) = case
    dim = FAMILIES[family][0]
    rc, rs = reference(family, h, w, dim)
    cos, sin = posenc.rope_grid((h, w), dim, preset=family)
    assert cos.dtype == np.float32
    assert cos.shape == (h * w, dim)
    _within_half_ulp(cos, rc)
    _within_half_ulp(sin, rs)
    oc, os_ = original(family, h, w)
    mine, theirs = max(_err(cos, rc), _err(sin, rs)), max(_err(oc, rc), _err(os_, rs))
    assert mine <= theirs
    if (h, w) == FAMILIES[family][1]:  # at the model's size float32's error shows
        assert theirs > 2 * mine, (mine, theirs)


def test_qwen2_vl_merge_order_through_rope():
    """The 2 x 2 merge-block order: posenc.rope of the model's own ids is the exact path,
    the rows of rope_grid at row * W + column."""
    h, w = FAMILIES["qwen2-vl-vision"][1]
    ids = _qwen2_vl(h, w)[2]
    cos, sin = posenc.rope(ids, 80, preset="qwen2-vl-vision", dtype=torch.float32)
    rc, rs = reference("qwen2-vl-vision", h, w, 80)
    flat = (ids[:, 0] * w + ids[:, 1]).numpy()
    _within_half_ulp(cos, rc[flat])
    _within_half_ulp(sin, rs[flat])
    gc, gs = posenc.rope_grid((h, w), 80, preset="qwen2-vl-vision", dtype=torch.float32)
    assert torch.equal(gc[flat], cos)
    assert torch.equal(gs[flat], sin)


def test_llama4_class_token_through_rope():
    """The class token last at angle 0: posenc.rope of the ids (x + 1, y + 1) and (0, 0)."""
    n = FAMILIES["llama4-vision"][1][0]
    freqs = _llama4_freqs(n)
    assert torch.equal(freqs[-1].real, torch.ones(44))
    assert torch.equal(freqs[-1].imag, torch.zeros(44))
    y, x = np.divmod(np.arange(n * n), n)
    ids = np.concatenate([np.stack([x + 1, y + 1], 1), [[0, 0]]])
    cos, sin = posenc.rope(ids, 88, preset="llama4-vision")
    rc, rs = reference("llama4-vision", n, n, 88)
    _within_half_ulp(cos[:-1], rc)
    _within_half_ulp(sin[:-1], rs)
    assert np.array_equal(cos[-1], np.ones(88))
    assert np.array_equal(sin[-1], np.zeros(88))


def test_dinov3_odd_grid_middle_is_zero():
    """An odd axis's middle patch is at 0 (the original's coordinate): sin is 0 there."""
    for n in (3, 7, 11, 19):
        cos, sin = posenc.rope_grid((1, n), 64, preset="dinov3")
        assert np.array_equal(sin[n // 2], np.zeros(64)), n  # y and x both at 0
        assert np.array_equal(cos[n // 2], np.ones(64)), n


# ---------------------------------------------------------------------------------------------
# (3) the float32-only formula (traced, exported, MPS): within 1e-6


@pytest.mark.parametrize("family", list(FAMILIES))
def test_float32_only(family, monkeypatch):
    from posenc.evaluate.libs.torch import TorchBackend

    calls = []

    def direct(self, on_device):
        calls.append(on_device)
        return True

    monkeypatch.setattr(TorchBackend, "direct", direct)
    monkeypatch.setattr(TorchBackend, "float32_only", lambda self: True)
    dim, (h, w), _ = FAMILIES[family]
    cos, sin = posenc.rope_grid((h, w), dim, preset=family, dtype=torch.float32)
    assert calls  # the direct formula ran
    assert cos.dtype == torch.float32
    assert cos.shape == (h * w, dim)
    rc, rs = reference(family, h, w, dim)
    assert max(_err(cos, rc), _err(sin, rs)) < 1e-6


# ---------------------------------------------------------------------------------------------
# (4) what the originals cannot produce


@pytest.mark.parametrize(
    ("family", "kwargs", "fragments"),
    [
        ("pixtral", {"start": 1}, ["`start`", "(0.0, 0.0)"]),
        ("sam2", {"step": 0.5}, ["`step`", "(1.0, 1.0)"]),
        ("qwen2-vl-vision", {"crop": ((0, 0), (4, 4))}, ["`crop`"]),
        ("dinov3", {"start": -1.0, "step": 0.5}, ["`start`", "dinov3"]),
        ("llama4-vision", {"start": 0}, ["`start`", "(1.0, 1.0)"]),
        ("sam3-vit", {"step": (1.0, 0.5)}, ["`step`", "one positive factor"]),
        ("sam3-vit", {"start": 2}, ["`start`", "(0.0, 0.0)"]),
        ("llama4-vision", {"shape": (4, 5)}, ["`shape`", "(4, 5)"]),
        ("pixtral", {"layout": "interleaved"}, ["`layout`", "'halves'"]),
        ("sam2", {"block_axes": (0, 1)}, ["`block_axes`", "(1, 0)"]),
        ("dinov3", {"axes_scale": (1.0, 1.0)}, ["`axes_scale`"]),
        ("qwen2-vl-vision", {"axes_dim": (16, 64)}, ["`axes_dim`", "(16, 64)"]),
    ],
)
def test_compat_refuses(family, kwargs, fragments):
    kwargs = {"shape": (4, 4), **kwargs}
    shape = kwargs.pop("shape")
    dim = FAMILIES[family][0]
    with raises(*fragments):
        posenc.rope_grid(shape, dim, preset=family, compat="transformers", **kwargs)


@pytest.mark.parametrize("family", ["pixtral", "dinov3", "sam2", "qwen2-vl-vision"])
def test_dim_must_split_in_two_blocks(family):
    with raises("`dim`", "70", family, "multiple of 4"):
        posenc.rope_grid((4, 4), 70, preset=family)


def test_presets_are_listed():
    names = posenc.presets("rotary")
    for family in FAMILIES:
        assert family in names
        p = posenc.preset(family)
        assert "transformers" in p.originals
    assert posenc.preset("pixtral").axial(64, 10000.0)["axes_scale"] == (
        1.0,
        10000.0 ** (-2 / 64),
    )
    assert math.isclose(posenc.preset("dinov3").rotary["axes_scale"][0], 2 * math.pi)


@pytest.mark.parametrize("family", ["pixtral", "sam2"])
def test_rope_of_the_module_ids(family):
    """posenc.rope of the ids the module takes (one coordinate per block, its order) is
    rope_grid's table: the preset's blocks and frequency scales reach posenc.rope too."""
    dim, (h, w), _ = FAMILIES[family]
    rows, cols = np.divmod(np.arange(h * w), w)
    ids = np.stack([rows, cols] if family == "pixtral" else [cols, rows], 1)
    cos, sin = posenc.rope(ids, dim, preset=family)
    gc, gs = posenc.rope_grid((h, w), dim, preset=family)
    assert np.array_equal(cos, gc)
    assert np.array_equal(sin, gs)
