"""``posenc.rope_grid`` for timm's rotary models (EVA-02, RoPE-ViT, Perception Encoder, DINOv3),
each test over the four, against timm itself: ``compat="timm"`` equal bit for bit to the tables
timm's models build, at the models' sizes and odd ones; the exact tables within float32 rounding
of a float64 reference written from the formulas (tests/families/models.py), and closer to it
than timm's float32 tables; the float32-only evaluator within 1e-6; the positions timm cannot
produce refused by name. (timm's modules at the settings the models do not use:
tests/families/test_eva.py and test_dinov3.py.)"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.families.models import HEAD, assert_exact
from tests.families.models import TIMM_GRID_MODELS as MODELS
from tests.families.models import timm_grid_reference as reference

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")


def grid_kwargs(family: str, dims) -> dict:
    """The ``start`` / ``step`` a caller passes for the model at this grid (the presets'
    defaults are the integers, or DINOv3's centred coordinates)."""
    if family == "eva02":
        return {"step": tuple(16 / n for n in dims)}
    if family == "perception-encoder":
        return {"start": tuple(24 / n for n in dims), "step": tuple(24 / n for n in dims)}
    return {}


@functools.cache
def rope_module(family: str, dims: tuple[int, int]):
    """The rotary module of the timm model (one block, untrained), built for this grid."""
    name, patch, dynamic, *_ = MODELS[family]
    size = {} if dynamic else {"img_size": (dims[0] * patch, dims[1] * patch)}
    return timm.create_model(name, pretrained=False, depth=1, **size).rope


def timm_tables(family: str, dims) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own ``(cos, sin)`` (its ``get_embed`` is ``cat(sin, cos)``)."""
    _, _, dynamic, *_ = MODELS[family]
    module = rope_module(family, tuple(dims))
    embed = module.get_embed(shape=list(dims)) if dynamic else module.get_embed()
    sin, cos = embed.chunk(2, dim=-1)
    return cos, sin


def max_error(got, want) -> float:
    return float(np.abs(np.asarray(got, dtype=np.float64) - want).max())


SIZES = [(family, dims) for family, model in MODELS.items()
         for dims in (model[3], (17, 23), (1, 5))]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the models: compat bit for bit, exact within one rounding


@pytest.mark.parametrize(("family", "dims"), SIZES)
def test_compat_equals_the_timm_model(family, dims):
    want_cos, want_sin = timm_tables(family, dims)
    cos, sin = posenc.rope_grid(dims, HEAD, preset=family, compat="timm", dtype=torch.float32,
                                **grid_kwargs(family, dims))  # fmt: skip
    assert cos.dtype == sin.dtype == torch.float32
    assert torch.equal(cos, want_cos)
    assert torch.equal(sin, want_sin)


@pytest.mark.parametrize(("family", "dims"), SIZES)
def test_exact_is_closer_than_timm(family, dims):
    ref = reference(family, dims)
    timm_cos, timm_sin = timm_tables(family, dims)
    exact = posenc.rope_grid(dims, HEAD, preset=family, **grid_kwargs(family, dims))
    for got, from_timm, want in zip(exact, (timm_cos, timm_sin), ref, strict=True):
        assert got.dtype == np.float32
        assert_exact(got, want)
        theirs = max_error(from_timm.double().numpy(), want)
        if theirs > 2**-24:  # timm's float32 error is measurable: posenc's must be smaller
            assert max_error(got, want) < theirs


def test_the_references_follow_the_models_positions():
    """The reference's coordinates are the models' own: timm's tables agree with it to float32
    noise, so a wrong ref, offset or axis order here could not pass."""
    for family, model in MODELS.items():
        dims = (model[3][0], model[3][1] - 3)
        timm_cos, timm_sin = timm_tables(family, dims)
        ref = reference(family, dims)
        assert max_error(timm_cos.double().numpy(), ref[0]) < 1e-5
        assert max_error(timm_sin.double().numpy(), ref[1]) < 1e-5
        swapped = reference(family, dims, columns_first=not model[6])
        assert max_error(timm_cos.double().numpy(), swapped[0]) > 1e-2


# ---------------------------------------------------------------------------------------------
# the float32-only evaluator (MPS, exported graphs), forced here on the CPU


@pytest.mark.parametrize("family", list(MODELS))
def test_float32_only_path(float32_only, family):
    dims = MODELS[family][3]
    cos, sin = posenc.rope_grid(dims, HEAD, preset=family, dtype=torch.float32,
                                **grid_kwargs(family, dims))  # fmt: skip
    assert cos.dtype == torch.float32
    for got, want in zip((cos, sin), reference(family, dims), strict=True):
        assert max_error(got.double().numpy(), want) < 1e-6


# ---------------------------------------------------------------------------------------------
# what timm cannot produce


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        (lambda: posenc.rope_grid((4, 4), 66, preset="eva02"), ["`dim` = 66", "multiple of 4"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="vit-rope", step=0.5, compat="timm"),
         ["`step`", "step must be 1", "0.5"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="vit-rope", start=(0, 1), compat="timm"),
         ["`start`", "one grid_offset", "(0.0, 1.0)"]),
        (lambda: posenc.rope_grid((4, 5), 64, preset="eva02", step=0.3, compat="timm"),
         ["`step`", "positive integer", "step[0] = 0.3"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="eva02", start=(1, 2), step=1,
                                  compat="timm"), ["`start`", "one grid_offset", "(1.0, 2.0)"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="eva02", step=-2, compat="timm"),
         ["`step`", "positive integer", "-2"]),
        (lambda: posenc.rope_grid((4, 6), 64, preset="dinov3", step=0.1, compat="timm"),
         ["`step`", "2 / d", "(0.1, 0.1)"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="dinov3", start=(-0.75, 0), step=0.5,
                                  compat="timm"), ["`start`", "one grid_offset"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="dinov3", axes_scale=(1.0, 2.0),
                                  compat="timm"), ["`axes_scale`", "(2 pi, 2 pi)", "(1.0, 2.0)"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="eva02", axes_scale=(2.0, 2.0),
                                  compat="timm"), ["`axes_scale`", "none", "(2.0, 2.0)"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="eva02", layout="compact", compat="timm"),
         ["`layout`", "'compact'"]),
        (lambda: posenc.rope_grid((4, 4), 64, preset="eva02", axes_dim=(16, 48), compat="timm"),
         ["`axes_dim`", "dim / 2 channels per axis", "(16, 48)"]),
        (lambda: posenc.rope_grid((2, 4, 4), 64, preset="eva02", axes_dim=(16, 16, 32),
                                  compat="timm"), ["`axes_dim`", "two grid axes", "(16, 16, 32)"]),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(call, fragments):
    with pytest.raises(PosencError) as err:
        call()
    for fragment in fragments:
        assert fragment in str(err.value)
