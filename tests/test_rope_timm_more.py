"""timm's remaining rotary forms against timm itself: the pixel bands of ``RotaryEmbeddingCat``
/ ``RotaryEmbedding`` with ``in_pixels=True`` (``posenc.rope_grid(..., preset="timm-pixel")``,
``"timm-pixel-linear"``) and ``RotaryEmbeddingMRope``'s interleaved sections (``posenc.rope(ids,
dim, preset="timm-mrope")``). compat bit for bit with timm's modules at the default 224 (14 x
14) and odd sizes; exact within one float32 rounding of float64 references written here from
timm's formulas, and closer to them than timm; the float32-only evaluator within 1e-6; what
timm cannot produce refused by name."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
from timm.layers.pos_embed_sincos import (  # noqa: E402
    RotaryEmbedding,
    RotaryEmbeddingCat,
    RotaryEmbeddingMRope,
)

from posenc.compat.timm import mrope_tables  # noqa: E402
from posenc.spec.families.timm_mrope import mrope_sections  # noqa: E402

HEAD = 64
SIZES = [(14, 14), (17, 23), (1, 5), (6, 1)]


def pixel_reference(dims, dim=HEAD, *, max_res=224.0, linear=False, columns_first=False,
                    halves=False):  # fmt: skip
    """float64 ``(cos, sin)`` ``[H * W, dim]`` of timm's pixel bands: per axis ``n = dim / 4``
    frequencies ``pi * 2 ** (k (log2 R - 1) / (n - 1))`` (or ``pi * (1 + k (R / 2 - 1) / (n -
    1))``) at positions ``-1 + 2 i / (s - 1)`` (``linspace(-1, 1, s)``)."""
    n = dim // 4
    k = np.arange(n, dtype=np.float64)
    u = k / (n - 1) if n > 1 else k
    omega = (
        math.pi * (1.0 + u * (max_res / 2 - 1.0))
        if linear
        else math.pi * 2.0 ** (u * (math.log2(max_res) - 1.0))
    )
    axes = [-1.0 + 2.0 * np.arange(s) / (s - 1) if s > 1 else np.array([-1.0]) for s in dims]
    rows, cols = (g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij"))
    first, second = (cols, rows) if columns_first else (rows, cols)
    theta = np.concatenate([first[:, None] * omega, second[:, None] * omega], axis=1)
    theta = np.concatenate([theta, theta], 1) if halves else np.repeat(theta, 2, axis=1)
    return np.cos(theta), np.sin(theta)


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


def assert_exact(got, want):
    """Within one float32 rounding of the float64 value."""
    got = np.asarray(got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-12)


def max_error(got, want) -> float:
    return float(np.abs(np.asarray(got, dtype=np.float64) - want).max())


def _ids(dims):
    rows, cols = np.meshgrid(np.arange(dims[0]), np.arange(dims[1]), indexing="ij")
    return np.stack([np.zeros(rows.size), rows.reshape(-1), cols.reshape(-1)])


# ---------------------------------------------------------------------------------------------
# pixel bands


@pytest.mark.parametrize("dims", SIZES)
@pytest.mark.parametrize("linear", [False, True])
@pytest.mark.parametrize("indexing", ["ij", "xy"])
@pytest.mark.parametrize("rotate_half", [False, True])
def test_pixel_compat_equals_timm(dims, linear, indexing, rotate_half):
    module = RotaryEmbeddingCat(HEAD, in_pixels=True, linear_bands=linear, feat_shape=list(dims),
                                grid_indexing=indexing, rotate_half=rotate_half)  # fmt: skip
    sin_want, cos_want = module.get_embed().chunk(2, dim=-1)
    preset = "timm-pixel-linear" if linear else "timm-pixel"
    kw = {"block_axes": (0, 1) if indexing == "ij" else (1, 0),
          "layout": "halves" if rotate_half else "interleaved"}  # fmt: skip
    cos, sin = posenc.rope_grid(dims, HEAD, preset=preset, compat="timm", dtype=torch.float32,
                                **kw)  # fmt: skip
    assert torch.equal(cos, cos_want)
    assert torch.equal(sin, sin_want)
    ref = pixel_reference(dims, linear=linear, columns_first=indexing == "xy",
                          halves=rotate_half)  # fmt: skip
    for got, theirs, want in zip(posenc.rope_grid(dims, HEAD, preset=preset, **kw),
                                 (cos_want, sin_want), ref, strict=True):  # fmt: skip
        assert got.dtype == np.float32
        assert_exact(got, want)
        assert max_error(theirs.double().numpy(), want) < 1e-4  # the same convention
        if max_error(theirs.double().numpy(), want) > 1e-6:
            assert max_error(got, want) < max_error(theirs.double().numpy(), want)


@pytest.mark.parametrize("max_res", [96, 512, 1000])
@pytest.mark.parametrize("dim", [16, 40, 128])
def test_pixel_other_resolutions_and_widths(max_res, dim):
    """``RotaryEmbedding`` (the ``(sin, cos)`` pair, in_pixels by default) at other max_res and
    widths: the max resolution is posenc's ``base``."""
    dims = (9, 12)
    for linear in (False, True):
        module = RotaryEmbedding(dim, max_res=max_res, linear_bands=linear, feat_shape=list(dims))
        sin_want, cos_want = module.get_embed()
        preset = "timm-pixel-linear" if linear else "timm-pixel"
        cos, sin = posenc.rope_grid(dims, dim, preset=preset, base=max_res, compat="timm",
                                    dtype=torch.float32)  # fmt: skip
        assert torch.equal(cos, cos_want)
        assert torch.equal(sin, sin_want)
        ref = pixel_reference(dims, dim, max_res=float(max_res), linear=linear)
        for got, want in zip(posenc.rope_grid(dims, dim, preset=preset, base=max_res), ref,
                             strict=True):  # fmt: skip
            assert_exact(got, want)


def test_the_pixel_reference_is_timms_convention():
    """timm's float32 tables are near the reference, and far from it with the axes swapped or
    the other band spacing: the reference could not pass with a wrong formula."""
    dims = (14, 10)
    sin, cos = RotaryEmbedding(HEAD, feat_shape=list(dims)).get_embed()
    ref = pixel_reference(dims)
    assert max_error(cos.double().numpy(), ref[0]) < 1e-4
    assert max_error(cos.double().numpy(), pixel_reference(dims, columns_first=True)[0]) > 1e-2
    assert max_error(sin.double().numpy(), pixel_reference(dims, linear=True)[1]) > 1e-2


@pytest.mark.parametrize("linear", [False, True])
def test_pixel_float32_only_path(float32_only, linear):
    dims = (64, 64)  # 1024 px at patch 16; bands up to pi * 112
    preset = "timm-pixel-linear" if linear else "timm-pixel"
    cos, sin = posenc.rope_grid(dims, 128, preset=preset, dtype=torch.float32)
    for got, want in zip((cos, sin), pixel_reference(dims, 128, linear=linear), strict=True):
        assert max_error(got.double().numpy(), want) < 1e-6


# ---------------------------------------------------------------------------------------------
# MRoPE


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


def test_pixel_spacing_needs_blocks():
    from posenc.spec.rotary import _rotary

    with pytest.raises(PosencError, match=r"`spacing='pixel'`.*needs `axes_dim`"):
        _rotary(64, base=224.0, layout="halves", interleave_sections=False, spacing="pixel")
