"""posenc.torch.patch on timm's NaFlexViT (rope_type 'axial', 'dinov3' and 'mrope'; image
batches at two sizes and a NaFlex batch of two grids), SAM's ViT with RoPE (with and without
ref_feat_shape) and Qwen3's and DeepSeek's towers, small random-weight models (no download),
each test over several of them: ``compat="original"`` gives identical outputs, the report names
the rotary module; the exact patch holds float64 tables written from timm's formulas rounded
once and moves the outputs by float32 noise; the checkpoint loads strictly; patching twice is a
no-op. NaFlexViT's 'mixed' (learned) is left alone, saying why. (SAM's two tables and the
pixel-band modules: tests/families/test_eva.py; ``RotaryEmbeddingMRope``:
tests/families/test_timm_mrope.py; Gemma 4: tests/families/test_gemma4_vision.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from tests.families.models import SMALL, _module, _rows
from tests.families.models import TIMM_FORMS as MODELS
from tests.families.models import _timm_form_features as _features
from tests.families.models import _timm_form_images as _images
from tests.families.models import _timm_form_model as _model
from tests.families.models import assert_rounded_once as assert_exact
from tests.reference import timm_axial_embed as axial_reference
from tests.reference import timm_mrope_embed as mrope_reference

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

from posenc.torch import patch  # noqa: E402
from posenc.torch._patching import LEARNED  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402


def _naflex_batch(grids, p=16):
    """A NaFlex batch: each image's patches (row-major, (ph, pw, C) flattened), their (y, x)
    coordinates and the valid mask, zero-padded to the longest."""
    torch.manual_seed(2)
    n = max(h * w for h, w in grids)
    patches = torch.zeros(len(grids), n, p * p * 3)
    coord = torch.zeros(len(grids), n, 2, dtype=torch.long)
    valid = torch.zeros(len(grids), n, dtype=torch.bool)
    for b, (h, w) in enumerate(grids):
        patches[b, : h * w] = torch.randn(h * w, p * p * 3)
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        coord[b, : h * w] = torch.stack([ys.reshape(-1), xs.reshape(-1)], -1)
        valid[b, : h * w] = True
    return {"patches": patches, "patch_coord": coord, "patch_valid": valid}


# ---------------------------------------------------------------------------------------------
# float64 references from timm's formulas


REFERENCES = {  # the tables of each model's rope at a grid
    "naflex-axial": lambda g: axial_reference(g),
    "naflex-axial-ref": lambda g: axial_reference(g, ref=(16, 16), halves=True,
                                                  columns_first=True),
    "naflex-dinov3": lambda g: axial_reference(g, base=100.0, halves=True, centred=True),
    "naflex-mrope": lambda g: mrope_reference(g),
    "qwen3": lambda g: axial_reference(g, halves=True),
    "deepseek": lambda g: axial_reference(g, halves=True),
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the models


def _features_as(model, x, dtype):
    return forward(model, x, dtype, method="forward_features")


TRAINED = {  # the models' learned tables, left alone
    "naflex-axial-ref": ["embeds.pos_embed"],
    "naflex-dinov3": ["embeds.pos_embed"],
    "naflex-mrope": ["embeds.pos_embed"],
    "sam": ["pos_embed"],
    "sam-ref": ["pos_embed"],
    "qwen3": ["encoder.pos_embed"],
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_patch_contract(name):
    """compat's outputs identical, the exact tables the float64 ones rounded once and the
    outputs moved by float32 noise, the checkpoint loaded strictly, twice a no-op (for compat
    too)."""
    model = _model(name)
    paths = MODELS[name][2]
    inputs = _images(name)
    if name.startswith("naflex"):  # two grids in one batch: per-size tables, padded
        inputs.append(_naflex_batch([(9, 13), (12, 5)]))

    def outputs(m, dtype):
        for x in inputs:
            yield from _features_as(m, x, dtype)

    def exact(original, patched):
        if name in REFERENCES:
            rope, theirs = _module(patched, paths[0]), _module(original, paths[0])
            for grid in [(14, 14), (9, 13)]:
                want = REFERENCES[name](grid)
                table = rope.get_embed(shape=grid)
                assert table.dtype == torch.float32
                assert_exact(table, want)
                assert np.abs(theirs.get_embed(shape=grid).double().numpy() - want).max() < 1e-5
        for x in inputs:
            before, after = _features(original, x), _features(patched, x)
            assert torch.isfinite(after).all()
            assert float((after - before).abs().max()) <= 1e-4 * float(before.abs().max())

    classes = dict.fromkeys(paths, MODELS[name][3])
    contract = check_patch_contract(
        model, classes, outputs, exact, left_alone=TRAINED.get(name, ())
    )
    rows = _rows(contract.compat)
    for path in paths:
        assert f"preset={MODELS[name][4]!r}" in rows[path].replacement
        assert type(_module(contract.model, path)).__name__ in ("TimmRotaryEmbedding",
                                                                "TimmMRopeEmbedding")  # fmt: skip


def test_naflex_mixed_is_left_alone():
    """(Gemma 4's ``Gemma4RotaryEmbedding2D`` is covered: tests/families/test_gemma4_vision.py.)"""
    torch.manual_seed(0)
    mixed = timm.create_model("naflexvit_base_patch16_gap", pretrained=False, rope_type="mixed",
                              **SMALL).eval()  # fmt: skip
    row = _rows(patch(mixed, compat="original"))["rope"]
    assert (row.original, row.mode, row.note) == ("RotaryEmbeddingMixed", None, LEARNED)
