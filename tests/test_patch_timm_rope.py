"""posenc.torch.patch on small random-weight timm models with rotary embeddings (no download):
EVA-02, naver's RoPE-ViT, Perception Encoder, DINOv3 (its size set per call), RoPE-ViT and
EVA-02 with ``dynamic_img_size``, each test over several of them. Per model:
``compat="original"`` leaves the outputs and the tables identical (float32, bf16 autocast, a
bf16 model, two image sizes where the size is dynamic); the report names the rotary module; the
exact patch holds the float64 tables (tests/reference.py) rounded once (float32 and bf16) and
moves the outputs by float32 noise; the original checkpoint loads with strict=True; patching
twice changes nothing; the module's other calls repeat timm's; RoPE-Mixed (learned) is left
alone, saying why. (One family's own tests: tests/families/test_eva.py and test_dinov3.py;
NaFlexViT, SAM and the Qwen3 / DeepSeek towers: tests/test_patch_timm_more.py.)"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.families.models import ROPE_VIT_FAMILIES as FAMILIES
from tests.families.models import ROPE_VITS as MODELS
from tests.families.models import _rope_vit_embed as _embed
from tests.families.models import _rope_vit_features as _features
from tests.families.models import _rope_vit_images as _images
from tests.families.models import _rope_vit_model as _model
from tests.families.models import _rope_vit_row as _row
from tests.families.models import assert_exact
from tests.reference import timm_axial_rope as reference

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

from posenc.torch import patch  # noqa: E402
from posenc.torch._patching import LEARNED  # noqa: E402
from posenc.torch._timm_rope import TimmRotaryEmbedding  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402

# DINOv3's grids are 16 x 16 and 9 x 11: no centred coordinate is a multiple of 1/4, where the
# float64 reference's sin(pi) = 1.2e-16 would stand for an exact 0 (14 x 14 has c = +-1/2)


def _grids(name):
    _, _, sizes, p, *_ = MODELS[name]
    return [(h // p, w // p) for h, w in sizes]


def _learned(name):
    """The model's learned ``pos_embed``, left alone (EVA-02's and the Perception Encoder's)."""
    return ["pos_embed"] if MODELS[name][5] in ("eva02", "perception-encoder") else []


# ---------------------------------------------------------------------------------------------
# the contract: compat identical, exact the float64 tables rounded once, checkpoints, twice


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_patch_contract(name):
    """compat leaves the outputs and the tables identical (float32, bf16 autocast, a bf16
    model); the exact tables are the float64 ones rounded once (float32 and bf16) and the
    outputs are finite and close; the checkpoint loads strictly; twice is a no-op."""
    family = FAMILIES[MODELS[name][5]]
    model = _model(name)
    assert not [k for k in model.state_dict() if k.startswith("rope.")]  # non-persistent
    for grid in _grids(name):  # compat's: the same dtype (the contract)
        assert _embed(model.rope, grid).dtype == torch.float32
    largest = []

    def outputs(m, dtype):
        # on a bf16 model a kept table follows .to(); computed ones: float32
        for x, grid in zip(_images(name), _grids(name), strict=True):
            yield _embed(m.rope, grid)
            yield from forward(m, x, dtype, method="forward_features")

    def exact(original, patched):
        low = copy.deepcopy(patched).to(torch.bfloat16)
        for grid in _grids(name):
            sin, cos = reference(grid, **family)
            table = _embed(patched.rope, grid)
            assert table.dtype == torch.float32
            assert table.shape == (grid[0] * grid[1], 128)
            assert_exact(table[:, :64], sin)
            assert_exact(table[:, 64:], cos)
            # the reference is the model's own convention: timm's float32 table is near it, and
            # a table with the two axes' blocks swapped is not
            theirs = _embed(original.rope, grid).double().numpy()
            assert np.abs(theirs - np.concatenate([sin, cos], 1)).max() < 1e-5
            swapped = reference(
                grid, **{**family, "columns_first": not family.get("columns_first")}
            )
            assert np.abs(theirs - np.concatenate(swapped, 1)).max() > 1e-2
            largest.append(float((table.double() - _embed(original.rope, grid)).abs().max()))
            # a bf16 model: a kept table is rounded once from float64 to bf16
            bf16 = _embed(low.rope, grid)
            want = torch.from_numpy(np.concatenate([sin, cos], 1))
            assert torch.equal(bf16, want.to(bf16.dtype))
        if MODELS[name][1].get("dynamic_img_size") or MODELS[name][5] == "dinov3":
            assert _embed(low.rope, _grids(name)[0]).dtype == torch.float32  # as timm's
        for x in _images(name):
            before, after = _features(original, x), _features(patched, x)
            assert torch.isfinite(after).all()
            # the tables move by under 1e-5 (above); one block turns that into a relative
            # change of the features of the same order times its logit scale (O(1) at random
            # init): 1e-4 of the largest feature leaves that margin, while a wrong table (blocks
            # swapped, another offset) moves them by O(1)
            assert float((after - before).abs().max()) <= 1e-4 * float(before.abs().max())

    contract = check_patch_contract(
        model, {"rope": MODELS[name][4]}, outputs, exact, left_alone=_learned(name)
    )
    row = _row(contract.compat)
    assert row.replacement.startswith("TimmRotaryEmbedding(")
    assert f"preset={MODELS[name][5]!r}" in row.replacement
    assert type(contract.model.rope) is TimmRotaryEmbedding
    # the report's figure is the largest |timm - exact| over the grid it names; timm's float32
    # angles (positions up to 25, frequencies up to 2 pi) err by at most ~25 * 2 pi * 2^-24
    row = _row(contract.exact)
    assert row.max_diff is not None
    assert row.max_diff < 1e-5
    assert f"{_grids(name)[0][0]} x {_grids(name)[0][1]}" in row.note
    if len(_grids(name)) == 1:
        assert row.max_diff == pytest.approx(max(largest), rel=0, abs=0)


# ---------------------------------------------------------------------------------------------
# the module's other calls, and the forms the models do not use


@pytest.mark.parametrize("name", ["dinov3", "vit-rope-dynamic", "eva02-dynamic"])
def test_module_calls_repeat_timm(name):
    model = _model(name)
    shapes = [(9, 11), (16, 16), (5, 3)]
    torch.manual_seed(3)
    x = torch.randn(2, 64, 9, 11)

    def outputs(m, dtype):
        rope = m.rope
        batch = rope.get_batch_embeds(shapes)
        yield from batch if isinstance(batch, (tuple, list)) else [batch]
        yield rope.get_batch_embeds(shapes, seq_len=300)
        yield rope.get_embed((9, 11), torch.bfloat16)
        yield rope(x.to(dtype))

    def exact(original, patched):  # compat's: the same (the contract)
        assert original.rope.get_batch_embeds(shapes, 300).shape == (3, 300, 128)
        assert original.rope.get_embed((9, 11), torch.bfloat16).dtype == torch.bfloat16
        sin, cos = reference((9, 11), **FAMILIES[MODELS[name][5]])
        want = torch.from_numpy(np.concatenate([sin, cos], 1)).to(torch.bfloat16)
        assert torch.equal(patched.rope.get_embed((9, 11), dtype=torch.bfloat16), want)  # once

    check_patch_contract(
        model, {"rope": MODELS[name][4]}, outputs, exact, left_alone=_learned(name)
    )


@pytest.mark.parametrize("compat", [None, "original"])
def test_rope_mixed_is_learned_and_left_alone(compat):
    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_rope_mixed_224", pretrained=False,
                              depth=1).eval()  # fmt: skip
    rope = model.rope
    row = _row(patch(model, compat=compat))
    assert (row.original, row.mode, row.note) == ("RotaryEmbeddingMixed", None, LEARNED)
    assert model.rope is rope
    assert "rope.freqs" in model.state_dict()
