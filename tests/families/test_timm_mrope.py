"""timm's MRoPE (``RotaryEmbeddingMRope``, ``preset="timm-mrope"``): its interleaved sections
through posenc.rope, bit for bit with timm's tables under compat and within one float32 rounding
of float64 references from timm's formulas; the float32-only evaluator; posenc.torch.patch on the
module: compat repeats it (bfloat16 and float64 too), the exact tables are the float64 ones
rounded once, augmented or sectionless modules are left alone, saying why."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import posenc
from tests.families.models import HEAD, _Holder, _rows, max_error
from tests.families.models import _mrope_ids as _ids
from tests.families.models import assert_rounded_once as assert_exact
from tests.reference import timm_mrope_embed

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
from timm.layers.pos_embed_sincos import (  # noqa: E402
    RotaryEmbeddingMRope,
)

from posenc.compat.timm import mrope_tables  # noqa: E402
from posenc.spec.families.timm_mrope import mrope_sections  # noqa: E402
from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract  # noqa: E402

# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


def mrope_reference(dims, dim=HEAD, section=(8, 12, 12), base=1e4):
    """float64 ``(cos, sin)`` of timm's MRoPE: ``omega_j = base ** (-2j / dim)``, ``j < dim /
    2``; frequency ``j`` at the row if ``j % 3 == 1 and j < 3 * section[1]``, the column if
    ``j % 3 == 2 and j < 3 * section[2]``, else 0; halves."""
    j = np.arange(dim // 2)
    omega = base ** (-2.0 * j / dim)
    mesh = np.meshgrid(np.arange(dims[0]), np.arange(dims[1]), indexing="ij")
    rows, cols = (g.reshape(-1).astype(np.float64) for g in mesh)
    pos = np.zeros((rows.size, j.size))
    on_row = (j % 3 == 1) & (j < 3 * section[1])
    on_col = (j % 3 == 2) & (j < 3 * section[2])
    pos[:, on_row] = rows[:, None]
    pos[:, on_col] = cols[:, None]
    theta = pos * omega
    theta = np.concatenate([theta, theta], 1)
    return np.cos(theta), np.sin(theta)


@pytest.mark.parametrize("dims", [(14, 14), (7, 9), (1, 5)])
@pytest.mark.parametrize(("dim", "section"),
                         [(64, (8, 12, 12)), (72, (8, 12, 12)), (64, (12, 12, 12)),
                          (40, (4, 4, 4)), (48, (2, 3, 5))])  # fmt: skip
def test_mrope_compat_and_exact(dims, dim, section):
    module = RotaryEmbeddingMRope(dim, mrope_section=section)
    want = module.get_embed(list(dims))
    sin, cos = mrope_tables(dims, dim, section[1:], 1e4, "cpu")
    assert torch.equal(torch.cat([sin, cos], -1), want)
    sections = mrope_sections(dim, section)
    assert sum(sections) == dim // 2
    ref = mrope_reference(dims, dim, section)
    got = posenc.rope(_ids(dims), dim, preset="timm-mrope", sections=sections)
    for g, w, theirs in zip(got, ref, (want[:, dim:], want[:, :dim]), strict=True):
        assert g.dtype == np.float32
        assert_exact(g, w)
        assert max_error(theirs.double().numpy(), w) < 1e-5
    # the same assignment as posenc's Qwen3-VL interleaving: the preset's default sections
    if section == (8, 12, 12):
        default = posenc.rope(_ids(dims), dim, preset="timm-mrope")
        for a, b in zip(default, got, strict=True):
            np.testing.assert_array_equal(a, b)


def test_mrope_reference_is_timms_assignment():
    """The row and column frequencies are where timm puts them: with the two swapped the
    tables move by O(1)."""
    dims = (9, 4)
    want = RotaryEmbeddingMRope(HEAD).get_embed(list(dims))
    cos = want[:, HEAD:].double().numpy()
    assert max_error(cos, mrope_reference(dims)[0]) < 1e-5
    swapped = mrope_reference(dims[::-1])[0].reshape(dims[1], dims[0], -1)
    assert max_error(cos, swapped.transpose(1, 0, 2).reshape(-1, HEAD)) > 1e-2


def test_mrope_float32_only_path(float32_only):
    dims = (64, 64)
    ids = torch.from_numpy(_ids(dims))
    cos, sin = posenc.rope(ids, HEAD, preset="timm-mrope", dtype=torch.float32)
    for got, want in zip((cos, sin), mrope_reference(dims), strict=True):
        assert max_error(got.double().numpy(), want) < 1e-6


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


@pytest.mark.parametrize(("dim", "section"), [(64, (8, 12, 12)), (72, (8, 12, 12)),
                                              (48, (2, 3, 5))])  # fmt: skip
def test_mrope_module(dim, section):
    holder = _Holder(rope=RotaryEmbeddingMRope(dim, mrope_section=section))
    shapes = [(14, 14), (7, 9)]

    def outputs(m, dtype):
        for shape in shapes:  # timm's own callers pass a list; a tuple too
            for form in (shape, list(shape)):
                yield m.rope.get_embed(form)
                yield m.rope.get_embed(form, dtype=torch.bfloat16)
        # a float64 module: timm widens its float32 ladder, the angles are float64
        wide = copy.deepcopy(m).double()
        yield wide.rope.get_embed((5, 6))
        yield wide.rope.get_embed([5, 6])

    def exact(original, patched):
        for shape in shapes:
            assert torch.equal(original.rope.get_embed(shape), original.rope.get_embed(list(shape)))
            ref = timm_mrope_embed(shape, dim, section=section)
            assert_exact(patched.rope.get_embed(shape), ref)
            once = patched.rope.get_embed(shape, dtype=torch.bfloat16)
            assert torch.equal(once, torch.from_numpy(ref).to(torch.bfloat16))
        # compat's the same dtype (the contract)
        assert copy.deepcopy(original).double().rope.get_embed([5, 6]).dtype == torch.float64

    check_patch_contract(holder, {"rope": "RotaryEmbeddingMRope"}, outputs, exact)


def test_mrope_left_alone_when_augmented_or_sectionless():
    holder = _Holder(shift=RotaryEmbeddingMRope(64, shift_coords=0.5),
                     empty=RotaryEmbeddingMRope(64, mrope_section=(8, 0, 12)))  # fmt: skip
    rows = _rows(patch(holder, compat="original"))
    assert rows["shift"].mode is None
    assert "augmentation" in rows["shift"].note
    assert rows["empty"].mode is None
    assert "(8, 0, 12)" in rows["empty"].note
