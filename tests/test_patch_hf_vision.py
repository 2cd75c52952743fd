"""``posenc.torch.patch`` on transformers' vision towers (:mod:`posenc.torch._patch_hf_vision`).

Each family is a small random-weight model built from a config (no download), run as its
users run it: ``compat="original"`` leaves its outputs ``torch.equal`` (float32, under bf16
autocast, after ``model.to(torch.bfloat16)``); the exact patch keeps them finite and close, and
the tables the stand-in hands the model are within float32's half ulp of a float64 restatement
of the formula written here; the original state dict loads strictly; patching twice does
nothing more.

The tests here run over several towers; a tower's own tests are in
tests/families/test_<record>.py, and the towers are built in tests/families/models.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.families.models import TOWERS as BUILD
from tests.families.models import build_tower as build
from tests.families.models import tower_module as get
from tests.families.models import tower_outputs as outputs

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


# ---------------------------------------------------------------------------------------------
# the families (their models: TOWERS and build_tower, in tests/families/models.py)


FAMILIES = list(BUILD)
RANGE_NOTE = {"qwen2-vl-vision": "128 x 128", "pixtral": "16 x 16", "dinov3": "8 x 8",
              "sam2": "position_ids", "sam3-vit": "36 x 36", "llama4-vision": "8 x 8"}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# (1) the float64 reference of the tables the stand-ins hand the model


def _omega(base, n, denom):
    return base ** (-2.0 * np.arange(n, dtype=np.float64) / denom)


def reference(family, stand_in, args, out):
    """The float64 angles of the tokens the stand-in was asked for (its inputs ``args``)."""
    d, base = stand_in.dim, stand_in.base
    if family in ("qwen2-vl-vision", "pixtral", "sam2", "sam3-vit"):
        ids = args[1].double().numpy()
        if family == "sam3-vit":  # the layer's ids: integers times window / columns, exactly
            (_, w), scale = stand_in.grid
            ids = np.round(ids / (12 / w)) * (12 / w)
            assert scale == 12 / w
        a, b = ids[:, 0], ids[:, 1]
        if family == "pixtral":
            ladder = _omega(base, d // 2, d)
            half = np.concatenate([np.outer(a, ladder[0::2]), np.outer(b, ladder[1::2])], 1)
        else:
            omega = _omega(base, d // 4, d // 2)
            half = np.concatenate([np.outer(a, omega), np.outer(b, omega)], 1)
        if family in ("sam2", "sam3-vit"):
            return np.repeat(half, 2, axis=1)[None]
        return np.concatenate([half, half], 1)
    if family == "dinov3":
        h, w = args[0].shape[-2] // 16, args[0].shape[-1] // 16
        y = np.repeat((np.arange(h) + 0.5) / h * 2 - 1, w)
        x = np.tile((np.arange(w) + 0.5) / w * 2 - 1, h)
        omega = base ** (-4.0 * np.arange(d // 4) / d)
        half = 2 * np.pi * np.concatenate([np.outer(y, omega), np.outer(x, omega)], 1)
        return np.concatenate([half, half], 1)
    n = stand_in.grid  # llama4-vision: 1-based (x, y), the class token last at angle 0
    y, x = np.divmod(np.arange(n * n), n)
    omega = _omega(base, d // 4, d // 2)
    angles = np.concatenate([np.outer(x + 1, omega), np.outer(y + 1, omega)], 1)
    return np.concatenate([angles, np.zeros((1, d // 2))])[:, None]


def _within_half_ulp(got, ref):
    got = got.double().numpy()
    worst = float(np.max(np.abs(got - ref) - (6e-8 * np.abs(ref) + 1e-38)))
    assert worst <= 0, worst


# ---------------------------------------------------------------------------------------------
# (2) the patch contract: compat identical, exact within float32's half ulp and close, the
# state dict, patching twice


def _check_report(report, path, cls, mode, family):
    row = next(r for r in report if r.path == path)
    assert (row.original, row.mode) == (cls, mode)
    assert row.replacement.startswith("VisionRope(")
    assert row.max_diff is not None
    assert 0 < row.max_diff < 1e-4  # float32's error, no more
    assert RANGE_NOTE[family] in row.note
    for r in report.left_alone:  # only learned tables besides
        assert r.note == "learned, left alone", r


def _outputs(model, runs, dtype):
    """The tower's outputs on ``runs`` as the contract compares them (``tests.contract.forward``
    for positional inputs): bfloat16 under CPU autocast on a float32 model, the inputs cast on a
    bfloat16 one."""
    if dtype == torch.float32:
        return outputs(model, runs)
    if next(model.parameters()).dtype == torch.float32:
        with torch.autocast("cpu", dtype=dtype):
            return outputs(model, runs)
    return outputs(model, runs, dtype)


PATHS = {"qwen2-vl-vision": ["rotary_pos_emb"], "pixtral": ["patch_positional_embedding"],
         "dinov3": ["rope_embeddings"], "sam2": ["attention.rotary_emb"],
         "sam3-vit": ["layers.0.rotary_emb", "layers.1.rotary_emb"],
         "llama4-vision": ["rotary_embedding"]}  # fmt: skip
"""family: every module the patch replaces (all of the family's class)."""
LEARNED = {"sam3-vit": ["embeddings.position_embeddings"]}
"""family: the learned tables its tower holds, left alone."""


@pytest.mark.parametrize("family", FAMILIES)
def test_the_patch_contract(family):
    """compat leaves the outputs identical; exact keeps them finite and close, its tables
    within float32's half ulp of float64; the state dict; patching twice does nothing more."""
    model, path, cls, runs = build(family)

    def exact(original, patched):
        before = outputs(original, runs)
        stand_in = get(patched, path)
        assert type(stand_in).__name__ == "VisionRope"
        assert type(stand_in).__module__.startswith("posenc.")
        seen = []
        hook = stand_in.register_forward_hook(lambda mod, args, out: seen.append((args, out)))
        after = outputs(patched, runs)
        hook.remove()
        assert seen
        for args, out in seen:
            angles = reference(family, stand_in, args, out)
            if family == "llama4-vision":
                assert out.dtype == torch.complex64
                cos, sin = out.real, out.imag
            else:
                cos, sin = out
                assert cos.dtype == torch.float32
            assert cos.shape == angles.shape
            _within_half_ulp(cos, np.cos(angles))
            _within_half_ulp(sin, np.sin(angles))
        # the model's outputs move by float32's table error (< 1e-5 at these positions) carried
        # through a few random layers: far below 1e-4, and nowhere near a wrong table's O(1)
        for a, b in zip(after, before, strict=True):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))  # replaced

    with warnings.catch_warnings():  # Llama 4's .to(bfloat16): its complex buffer cast to real
        warnings.filterwarnings("ignore", "Casting complex values to real", UserWarning)
        paths = dict.fromkeys(PATHS[family], cls)
        contract = check_patch_contract(
            model,
            paths,
            lambda m, d: _outputs(m, runs, d),
            exact,
            left_alone=LEARNED.get(family, ()),
            # cast first, Llama 4's complex table is real (.to() keeps the cosines) and SAM 3's
            # second layer's bfloat16 position_ids are no longer its grid: left alone, saying so
            # (test_sam3_cast_first_leaves_its_off_grid_layer_alone)
            cast_first=family not in ("llama4-vision", "sam3-vit"),
        )
    _check_report(contract.compat, path, cls, "compat", family)
    _check_report(contract.exact, path, cls, "exact", family)
    assert not any(k.startswith(path + ".") for k in contract.model.state_dict())
    again = patch(contract.model)  # the same mode: nothing to do (the other one switches)
    assert not again.replaced
    assert all(r.note == "learned, left alone" for r in again)  # SAM 3's learned table
    assert len(again) == (1 if family == "sam3-vit" else 0)


# ---------------------------------------------------------------------------------------------
# (3) bf16: a model cast before patching, the exact patch's outputs


@pytest.mark.parametrize("family", ["qwen2-vl-vision", "pixtral", "dinov3", "sam2"])
def test_compat_after_bf16_cast(family):
    """A model already in bfloat16 when patched: its rounded inv_freq is repeated too."""
    model, path, _, runs = build(family)
    model.to(torch.bfloat16)
    before = outputs(model, runs, torch.bfloat16)
    report = patch(model, compat="original")
    assert [r.path for r in report.replaced] == [path]
    assert report.replaced[0].mode == "compat"
    for a, b in zip(outputs(model, runs, torch.bfloat16), before, strict=True):
        assert torch.equal(a, b)


def test_sam3_cast_first_leaves_its_off_grid_layer_alone():
    """SAM 3 cast to bfloat16 before patching: its windowed layer's position_ids are the grid
    at 1 per patch and replaced; the global layer's, 1/3 per patch, are rounded off that grid
    in bfloat16, so that module is left alone, saying why; the outputs stay the model's."""
    model, _, _, runs = build("sam3-vit")
    model.to(torch.bfloat16)
    before = outputs(model, runs, torch.bfloat16)
    report = patch(model, compat="original")
    assert [r.path for r in report.replaced] == ["layers.0.rotary_emb"]
    (off,) = [r for r in report.left_alone if r.path == "layers.1.rotary_emb"]
    assert "are not the grid" in off.note
    for a, b in zip(outputs(model, runs, torch.bfloat16), before, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("family", ["qwen2-vl-vision", "pixtral", "dinov3"])
def test_exact_bf16(family):
    """bf16: after model.to(bfloat16) and under autocast the exact tables stay finite and the
    outputs close (bf16's own rounding, 2^-8, is the bound)."""
    model, _, _, runs = build(family)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        before = outputs(model, runs)
    patch(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for a, b in zip(outputs(model, runs), before, strict=True):
            torch.testing.assert_close(a.float(), b.float(), rtol=0.05, atol=0.05)
    reference_model, _, _, _ = build(family)
    reference_model.to(torch.bfloat16)
    model.to(torch.bfloat16)
    for a, b in zip(outputs(model, runs, torch.bfloat16),
                    outputs(reference_model, runs, torch.bfloat16), strict=True):  # fmt: skip
        assert a.dtype == torch.bfloat16
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a.float(), b.float(), rtol=0.05, atol=0.05)
