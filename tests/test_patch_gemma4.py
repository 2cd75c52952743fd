"""posenc.torch.patch on Gemma 4, small random-weight models from configs (no download):
transformers' vision encoder (``Gemma4VisionRotaryEmbedding``), timm's ``gemma4_vit``
(``Gemma4RotaryEmbedding2D``) and transformers' text model (``Gemma4TextRotaryEmbedding``: a
table per layer type, the full-attention layers' ``proportional`` rule on their own head dim).
Per model: ``compat="original"`` leaves every output identical (float32, a bf16 model, other
image sizes, the processor's padding ids), the report names the rotary module, the exact patch
holds float64 tables (written here from the formulas) rounded once and moves the outputs by
float32 noise, the original checkpoint loads with strict=True, and patching twice is a no-op."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")
from posenc.torch import RotaryEmbedding, patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


def xy_ids(h, w, padding=0):
    """``[h * w + padding, 2]`` (x, y) ids, row-major, then ``(-1, -1)`` padding rows."""
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    ids = torch.stack([cols.flatten(), rows.flatten()], dim=-1)
    return torch.cat([ids, torch.full((padding, 2), -1)])


def vision_reference(ids, dim, base=100.0):
    """float64 ``(cos, sin)``: per axis block (x, then y) ``p * base ** (-2j / (dim / 2))``,
    twice (halves inside the block)."""
    ids = ids.double().numpy()
    omega = base ** (-2.0 * np.arange(dim // 4) / (dim // 2))
    parts = [ids[..., a : a + 1] * omega for a in (0, 0, 1, 1)]
    angles = np.concatenate(parts, axis=-1)
    return np.cos(angles), np.sin(angles)


def assert_rounded_once(got, want):
    got = got.double().numpy()
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-12)


# ---------------------------------------------------------------------------------------------
# the models and their inputs


def _hf_vision():
    torch.manual_seed(0)
    config = transformers.Gemma4VisionConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, head_dim=32, position_embedding_size=128, patch_size=4)  # fmt: skip
    return transformers.Gemma4VisionModel(config).eval()


def _hf_inputs(grids=((6, 9), (3, 12)), dtype=torch.float32):
    """A batch of images of ``grids`` patches, padded to the largest (as the processor does)."""
    n = max(h * w for h, w in grids)
    ids = torch.stack([xy_ids(h, w, n - h * w) for h, w in grids])
    torch.manual_seed(1)
    return torch.rand(len(grids), n, 3 * 16).to(dtype), ids


def _hf_out(model, inputs):
    with torch.no_grad():
        return model(*inputs).last_hidden_state


def _timm_vision():
    torch.manual_seed(0)
    return timm.create_model("gemma4_vit_167m", pretrained=False, depth=1, embed_dim=64,
                             num_heads=2, head_dim=32, intermediate_size=96,
                             num_classes=5).eval()  # fmt: skip


def _timm_inputs(size=(96, 144), dtype=torch.float32):
    torch.manual_seed(1)
    return (torch.rand(1, 3, *size).to(dtype),)


def _timm_out(model, inputs):
    with torch.no_grad():
        return model.forward_features(*inputs)


VISION = {
    "transformers": (_hf_vision, _hf_inputs, _hf_out, "encoder.rotary_emb",
                     "Gemma4VisionRotaryEmbedding", [((3, 6), (3, 3)), ((9, 3), (3, 15))]),
    "timm": (_timm_vision, _timm_inputs, _timm_out, "encoder.rotary_emb",
             "Gemma4RotaryEmbedding2D", [(48, 240), (144, 48)]),
}  # fmt: skip
"""name: (model, inputs, output, rotary path, its class, other input sizes)."""


@pytest.mark.parametrize("name", sorted(VISION))
def test_vision_compat_is_identical_and_exact_is_close(name):
    build, inputs_of, out, path, original, others = VISION[name]
    model, inputs = build(), inputs_of()
    before = out(model, inputs)
    compat = copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert (rows[path].original, rows[path].mode) == (original, "compat")
    assert "gemma4-vision" in rows[path].replacement
    assert 1e-7 < rows[path].max_diff < 1e-5  # the original's float32 drift over 96 x 105
    assert torch.equal(out(compat, inputs), before)
    for other in others:
        assert torch.equal(out(compat, inputs_of(other)), out(model, inputs_of(other)))
    bf16, compat16 = copy.deepcopy(model).to(torch.bfloat16), copy.deepcopy(compat)
    compat16.to(torch.bfloat16)
    half = inputs_of(dtype=torch.bfloat16)
    assert torch.equal(out(compat16, half), out(bf16, half))

    exact = copy.deepcopy(model)
    assert {r.path: r.mode for r in patch(exact).replaced}[path] == "exact"
    got = out(exact, inputs)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, before, rtol=0, atol=1e-4)
    exact.load_state_dict(model.state_dict(), strict=True)
    assert not exact.state_dict().keys() - model.state_dict().keys()
    assert len(patch(exact)) == 0
    assert len(patch(compat, compat="original")) == 0


@pytest.mark.parametrize("name", sorted(VISION))
def test_vision_tables_exact_and_replayed(name):
    """The stand-in at the model's ``[B, N, 2]`` ids with padding: exact = float64 rounded
    once (in float32 and bf16); compat = the original module's output, bit for bit."""
    model = VISION[name][0]()
    original = copy.deepcopy(model.get_submodule(VISION[name][3]))
    exact, compat = copy.deepcopy(model), copy.deepcopy(model)
    patch(exact)
    patch(compat, compat="original")
    ids = torch.stack([xy_ids(7, 5, 3), xy_ids(2, 19)])
    want = vision_reference(ids, 32)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.zeros(1, dtype=dtype)
        got = exact.get_submodule(VISION[name][3])(x, ids)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == dtype
            assert g.shape == (2, 38, 32)
            if dtype == torch.float32:
                assert_rounded_once(g, w)
            else:
                assert torch.equal(g, torch.from_numpy(w).to(dtype))
        replayed = compat.get_submodule(VISION[name][3])(x, ids)
        assert all(torch.equal(a, b) for a, b in zip(replayed, original(x, ids), strict=True))


# ---------------------------------------------------------------------------------------------
# the text model: one table per layer type


def _text():
    torch.manual_seed(0)
    config = transformers.Gemma4TextConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, global_head_dim=64, vocab_size=128,
        vocab_size_per_layer_input=128, hidden_size_per_layer_input=16,
        max_position_embeddings=2048,
        layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    return transformers.Gemma4TextModel(config).eval()


def _text_out(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).last_hidden_state


def test_text_compat_is_identical_and_exact_is_close():
    model = _text()
    ids = torch.randint(0, 128, (2, 37), generator=torch.Generator().manual_seed(1))
    before = _text_out(model, ids)
    compat = copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert (rows["rotary_emb"].original, rows["rotary_emb"].mode) == (
        "Gemma4TextRotaryEmbedding", "compat")  # fmt: skip
    assert "proportional" in rows["rotary_emb"].replacement
    assert torch.equal(_text_out(compat, ids), before)
    bf16, compat16 = copy.deepcopy(model).to(torch.bfloat16), copy.deepcopy(compat)
    compat16.to(torch.bfloat16)
    assert torch.equal(_text_out(compat16, ids), _text_out(bf16, ids))

    exact = copy.deepcopy(model)
    assert {r.path: r.mode for r in patch(exact).replaced}["rotary_emb"] == "exact"
    got = _text_out(exact, ids)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, before, rtol=0, atol=1e-4)
    exact.load_state_dict(model.state_dict(), strict=True)
    assert len(patch(exact)) == 0
    assert len(patch(compat, compat="original")) == 0


def test_text_tables_per_layer_type():
    """Sliding layers: the default rule on head_dim 32, base 1e4; full-attention layers:
    ``proportional`` on global_head_dim 64, base 1e6, the first int(0.25 * 64 // 2) = 8
    frequencies ``base ** (-2i / 64)`` and 24 zeros. Exact: float64 rounded once; compat:
    the module's, bit for bit, also read through the multimodal ``Gemma4Config``."""
    model = _text()
    original = copy.deepcopy(model.rotary_emb)
    exact = RotaryEmbedding.from_hf(model.config)
    wrapper = transformers.Gemma4Config(text_config=model.config.to_dict())
    compat = RotaryEmbedding.from_hf(wrapper, "transformers")
    pos = torch.arange(2048)[None]
    x = torch.zeros(1)
    for lt, d, base, rotated in (("sliding_attention", 32, 1e4, 16),
                                 ("full_attention", 64, 1e6, 8)):  # fmt: skip
        omega = np.zeros(d // 2)
        omega[:rotated] = base ** (-2.0 * np.arange(rotated) / d)
        angles = np.arange(2048.0)[:, None] * np.concatenate([omega, omega])
        got = exact(x, pos, lt)
        assert got[0].shape == (1, 2048, d)
        assert_rounded_once(got[0][0], np.cos(angles))
        assert_rounded_once(got[1][0], np.sin(angles))
        want = original(x, pos, lt)
        assert all(torch.equal(a, b) for a, b in zip(compat(x, pos, lt), want, strict=True))


def test_stand_in_names_bad_input():
    from posenc.errors import PosencError
    from posenc.torch._gemma4_rope import Gemma4VisionRope

    rope = Gemma4VisionRope(32, 100.0, compat=False, dtype=torch.float32, device="cpu")
    with pytest.raises(PosencError, match=r"`position_ids`.*\[\.\.\., 2\].*\(4, 3\)"):
        rope(torch.zeros(1), torch.zeros(4, 3, dtype=torch.long))
    with pytest.raises(PosencError, match="70"):
        Gemma4VisionRope(70, 100.0, compat=True, dtype=torch.float32, device="cpu")
