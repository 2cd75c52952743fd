"""Pixtral (``preset="pixtral"``): ``compat="transformers"`` returns NumPy by default, and the
module's cast to the activations' dtype when a torch dtype is asked for."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.families.models import _pixtral, _pixtral_model

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("quiet_transformers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


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
