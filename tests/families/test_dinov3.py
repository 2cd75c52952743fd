"""DINOv3 (``preset="dinov3"``): posenc.rope_grid against timm's ``RotaryEmbeddingDinoV3`` at
its other settings (the coordinates' denominators, an offset, 'xy'), bit for bit under
``compat="timm"`` and within float32 rounding of a float64 reference; the preset's default
centred grid, the zero at an odd axis's middle; posenc.torch.patch on transformers' DINOv3 in
training mode (the random rescale drawn as the original draws it) and on the timm modules it
leaves alone, saying why (coordinate augmentation, min / max periods)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.families.models import HEAD, _Holder, assert_exact
from tests.families.models import build_tower as build
from tests.families.models import timm_grid_reference as reference
from tests.families.models import tower_module as get
from tests.families.models import tower_outputs as outputs

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")
from timm.layers.pos_embed_sincos import (  # noqa: E402
    RotaryEmbeddingDinoV3,
)

from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


def test_dinov3_odd_grid_middle_is_zero():
    """An odd axis's middle patch is at 0 (the original's coordinate): sin is 0 there."""
    for n in (3, 7, 11, 19):
        cos, sin = posenc.rope_grid((1, n), 64, preset="dinov3")
        assert np.array_equal(sin[n // 2], np.zeros(64)), n  # y and x both at 0
        assert np.array_equal(cos[n // 2], np.ones(64)), n


@pytest.mark.parametrize("dims", [(17, 23), (64, 64), (1, 5)])
@pytest.mark.parametrize("normalize", ["separate", "max", "min"])
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_dinov3_module_settings(dims, normalize, indexing):
    """RotaryEmbeddingDinoV3's 'max' and 'min' denominators, grid_offset, 'xy': posenc's start
    and step map back to each. (The offset 0.3 keeps every coordinate off the multiples of
    1/4, where the float64 reference's sin(pi) = 1.2e-16 would stand for an exact 0.)"""
    module = RotaryEmbeddingDinoV3(HEAD, temperature=100.0, normalize_coords=normalize,
                                   grid_offset=0.3, grid_indexing=indexing)  # fmt: skip
    sin_want, cos_want = module.get_embed(list(dims)).chunk(2, dim=-1)
    d = {"separate": dims, "max": (max(dims),) * 2, "min": (min(dims),) * 2}[normalize]
    start = tuple((0.5 + 0.3) / a * 2 - 1 for a in d)
    step = tuple(2 / a for a in d)
    blocks = (0, 1) if indexing == "ij" else (1, 0)
    kw = {"start": start, "step": step, "block_axes": blocks}
    cos, sin = posenc.rope_grid(dims, HEAD, preset="dinov3", compat="timm",
                                dtype=torch.float32, **kw)  # fmt: skip
    assert torch.equal(cos, cos_want)
    assert torch.equal(sin, sin_want)
    positions = [(np.arange(n) + 0.8) / a * 2 - 1 for n, a in zip(dims, d, strict=True)]
    ref = reference("dinov3", dims, HEAD, positions, columns_first=indexing == "xy")
    for got, want in zip(posenc.rope_grid(dims, HEAD, preset="dinov3", **kw), ref,
                         strict=True):  # fmt: skip
        assert_exact(got, want)


def test_dinov3_defaults_are_the_centred_grid():
    """Without start and step the preset's positions are DINOv3's: the same numbers as the
    explicit coordinates."""
    dims = (5, 8)
    default = posenc.rope_grid(dims, HEAD, preset="dinov3")
    explicit = posenc.rope_grid(dims, HEAD, preset="dinov3",
                                start=(1 / 5 - 1, 1 / 8 - 1), step=(2 / 5, 2 / 8))  # fmt: skip
    for a, b in zip(default, explicit, strict=True):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def test_dinov3_training_draws_as_the_original():
    """In training mode DINOv3 draws a random rescale: the stand-in draws the same (compat:
    the same bits; exact: close), and leaves the generator where the original does."""
    model, path, cls, runs = build("dinov3")
    model.train()

    def drawn(m, dtype):  # the outputs from seed 5, then the generator's next draw
        assert get(m, path).training
        torch.manual_seed(5)
        if dtype == torch.float32:
            got = outputs(m, runs)
        elif next(m.parameters()).dtype == torch.float32:
            with torch.autocast("cpu", dtype=dtype):
                got = outputs(m, runs)
        else:
            got = outputs(m, runs, dtype)
        return [*got, torch.rand(1)]

    def exact(original, patched):
        got, before = drawn(patched, torch.float32), drawn(original, torch.float32)
        for a, b in zip(got[:-1], before[:-1], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)

    check_patch_contract(model, {path: cls}, drawn, exact)


def test_what_is_left_alone():
    holder = _Holder(
        shifted=RotaryEmbeddingDinoV3(64, shift_coords=0.1),
        periods=RotaryEmbeddingDinoV3(64, min_period=0.5, max_period=50.0),
    )
    before = dict(holder.named_children())
    rows = {r.path: r for r in patch(holder, compat="original")}
    assert set(rows) == set(before)
    assert all(r.mode is None for r in rows.values())
    assert "augmentation" in rows["shifted"].note
    assert "min_period" in rows["periods"].note
    assert dict(holder.named_children()) == before
