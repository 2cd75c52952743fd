"""Qwen2-VL's vision tower (``preset="qwen2-vl-vision"``): posenc.rope of the model's own ids,
in its 2 x 2 merge-block order; posenc.torch.patch leaves a module whose inv_freq is not the
ladder posenc knows alone."""

from __future__ import annotations

import pytest

import posenc
from tests.families.models import TOWER_GRIDS as FAMILIES
from tests.families.models import _qwen2_vl, _within_half_ulp
from tests.families.models import build_tower as build
from tests.families.models import tower_module as get
from tests.reference import vision_tower_rope as reference

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


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


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def test_a_wrong_form_is_left_alone():
    """A Qwen2-VL-form module whose inv_freq is not the ladder posenc knows is left alone."""
    model, path, cls, _ = build("qwen2-vl-vision")
    get(model, path).inv_freq.mul_(1.5)
    report = patch(model)
    row = next(r for r in report if r.path == path)
    assert not row.replaced
    assert "inv_freq" in row.note
    assert type(get(model, path)).__name__ == cls
