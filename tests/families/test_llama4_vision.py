"""Llama 4's vision encoder (``preset="llama4-vision"``): posenc.rope of its 1-based ids with
the class token last, at angle 0; posenc.torch.patch leaves a model cast to bfloat16 before
patching alone (its complex table kept only the real part)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import posenc
from tests.families.models import TOWER_GRIDS as FAMILIES
from tests.families.models import _llama4_freqs, _within_half_ulp
from tests.families.models import build_tower as build
from tests.families.models import tower_module as get
from tests.reference import vision_tower_rope as reference

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


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


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def test_llama4_bf16_cast_before_patching_is_left_alone():
    """model.to(bfloat16) keeps only the real part of Llama 4's complex table: not repeated."""
    model, path, cls, _ = build("llama4-vision")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.to(torch.bfloat16)
    report = patch(model)
    row = next(r for r in report if r.path == path)
    assert not row.replaced
    assert "real dtype" in row.note
    assert type(get(model, path)).__name__ == cls
