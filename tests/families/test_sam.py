"""SAM 3's ViT: posenc.torch.patch measures each layer's stand-in at its own grid (the 12 x 12
window, the 36 x 36 global grid)."""

from __future__ import annotations

import pytest

from tests.families.models import build_tower as build

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def test_sam3_window_and_global_layers():
    """Each SAM 3 layer's stand-in is measured at its own grid (12 x 12 window, 36 x 36 global
    at a third per patch)."""
    model, _, _, _ = build("sam3-vit")
    report = patch(model, dry_run=True)
    notes = {r.path: r.note for r in report.replaced}
    assert set(notes) == {"layers.0.rotary_emb", "layers.1.rotary_emb"}
    assert "12 x 12" in notes["layers.0.rotary_emb"]
    assert "36 x 36" in notes["layers.1.rotary_emb"]
