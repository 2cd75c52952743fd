"""What timm's pixel bands (``preset="timm-pixel"``, ``"timm-pixel-linear"``) and
``RotaryEmbeddingMRope`` (``preset="timm-mrope"``) cannot produce, refused by name. (Their
tables against timm's: tests/families/test_eva.py and test_timm_mrope.py.)"""

from __future__ import annotations

import pytest

import posenc
from posenc.errors import PosencError
from tests.families.models import _mrope_ids as _ids

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

from posenc.spec.families.timm_mrope import mrope_sections  # noqa: E402

# ---------------------------------------------------------------------------------------------
# refused


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        (lambda: posenc.rope_grid((4, 4), 66, preset="timm-pixel"),
         ["`dim` = 66", "multiple of 4"]),
        (lambda: posenc.rope_grid((4, 5), 64, preset="timm-pixel", start=0, compat="timm"),
         ["`start`, `step`", "linspace(-1, 1, n)", "start[0] = 0"]),
        (lambda: posenc.rope_grid((4, 5), 64, preset="timm-pixel-linear", step=0.5,
                                  compat="timm"), ["`start`, `step`", "step[0] = 0.5", "n = 4"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="timm-pixel", axes_scale=(2.0, 2.0),
                                  compat="timm"), ["`axes_scale`", "(2.0, 2.0)"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="timm-pixel", base=-3),
         ["`base`", "-3"]),
        (lambda: posenc.rope(_ids((2, 2)), 4, preset="timm-mrope"), ["`dim`", "dim >= 6", "4"]),
        (lambda: mrope_sections(64, (8, 0, 12)), ["`sections`", "(8, 0, 12)"]),
        (lambda: posenc.rope(_ids((2, 2)), 64, preset="timm-mrope", sections=(8, 12, 12, 0)),
         ["`sections"]),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(call, fragments):
    with pytest.raises(PosencError) as err:
        call()
    for fragment in fragments:
        assert fragment in str(err.value)
