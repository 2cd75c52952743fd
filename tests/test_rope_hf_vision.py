"""The rotary tables of transformers' vision towers (``posenc.rope_grid`` with the presets
``qwen2-vl-vision``, ``pixtral``, ``dinov3``, ``sam2``, ``llama4-vision``).

Each family's original is the real transformers module, built from a small config (no
downloads) and run as the model runs it (the vision model's own position ids where it builds
them), its output brought to posenc's form: tokens row-major, the class token left out. Then:
``compat="transformers"`` is ``torch.equal`` to it; the exact default is within float32's
half ulp of a float64 NumPy restatement of the formula written here, and closer to it than the
original; the float32-only formula is within 1e-6 of it.

The tests here run over several towers; a tower's own tests are in
tests/families/test_<record>.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from tests.families.models import TOWER_GRIDS as FAMILIES
from tests.families.models import _hooked, _llama4_freqs, _pixtral, _qwen2_vl, _within_half_ulp
from tests.helpers import raises
from tests.reference import vision_tower_rope as reference

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("quiet_transformers")

CASES = [(f, FAMILIES[f][1]) for f in FAMILIES] + [
    (f, size) for f in FAMILIES for size in FAMILIES[f][2]
]


def _ids(case):
    family, (h, w) = case
    return f"{family}-{h}x{w}"


# ---------------------------------------------------------------------------------------------
# the originals: the transformers modules, run as their models run them


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
