"""``posenc.rope_grid`` / ``posenc.rope`` with the ``gemma4-vision`` preset (Gemma 4's vision
encoder), against transformers' ``Gemma4VisionRotaryEmbedding`` and timm's
``Gemma4RotaryEmbedding2D``: ``compat="transformers"`` and ``compat="timm"`` equal bit for bit at
the processor's grids (280 and 1120 soft tokens, the longest strip) and odd ones, in every dtype
the modules cast to; the exact tables within one float32 rounding of a float64 reference
written here from the formula (padding ids included); the float32-only evaluator within 1e-6;
the rotation (``"block-halves"``, ``blocks=2``) equal to ``apply_multidimensional_rope``."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")
from timm.models import gemma4_vit  # noqa: E402
from transformers.models.gemma4 import modeling_gemma4  # noqa: E402

GRIDS = [(48, 51), (96, 105), (3, 3360), (5, 7), (1, 1)]
"""(rows, columns): 272 and 1120 soft tokens (3 x 3 pooling), the longest strip the processor
makes (max_soft_tokens 1120), odd grids."""


def reference(ids, dim, base=100.0):
    """float64 ``(cos, sin)`` of ``[..., 2]`` (x, y) ids: block ``a`` (x, then y) of ``dim / 2``
    channels holds the angles ``p_a * base ** (-2j / (dim / 2))``, ``j < dim / 4``, twice
    (halves inside the block)."""
    ids = np.asarray(ids, dtype=np.float64)
    j = np.arange(dim // 4, dtype=np.float64)
    omega = base ** (-2.0 * j / (dim // 2))
    blocks = []
    for a in (0, 1):
        angles = ids[..., a : a + 1] * omega
        blocks += [angles, angles]
    angles = np.concatenate(blocks, axis=-1)
    return np.cos(angles), np.sin(angles)


def xy_ids(h, w):
    """Row-major (x, y) ids of an ``h x w`` grid, as Gemma 4's processor makes them."""
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    return np.stack([cols.ravel(), rows.ravel()], axis=-1)


def assert_exact(got, want):
    """Within one float32 rounding of the float64 value."""
    got = np.asarray(got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-12)


def _originals(dim, quiet):
    config = quiet.Gemma4VisionConfig(head_dim=dim)
    return (modeling_gemma4.Gemma4VisionRotaryEmbedding(config),
            gemma4_vit.Gemma4RotaryEmbedding2D(dim))  # fmt: skip


@pytest.mark.parametrize("dim", [64, 72])
def test_compat_is_transformers_and_timm_bit_for_bit(dim, quiet_transformers):
    hf, tm = _originals(dim, quiet_transformers)
    for h, w in GRIDS:
        ids = torch.from_numpy(xy_ids(h, w))[None]
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            x = torch.zeros(1, dtype=dtype)
            want_hf, want_tm = hf(x, ids), tm(x, ids)
            for mode in ("transformers", "timm"):
                got = posenc.rope_grid((h, w), dim, preset="gemma4-vision", compat=mode,
                                       dtype=dtype)  # fmt: skip
                for g, a, b in zip(got, want_hf, want_tm, strict=True):
                    assert g.dtype == dtype
                    assert torch.equal(g, a[0]), (h, w, dtype, mode)
                    assert torch.equal(g, b[0]), (h, w, dtype, mode)


@pytest.mark.parametrize("dim", [64, 72])
@pytest.mark.parametrize("shape", GRIDS[:4])
def test_exact_grid_against_float64(dim, shape):
    cos, sin = posenc.rope_grid(shape, dim, preset="gemma4-vision")
    want = reference(xy_ids(*shape), dim)
    assert cos.shape == (shape[0] * shape[1], dim)
    assert cos.dtype == np.float32
    assert_exact(cos, want[0])
    assert_exact(sin, want[1])


def test_exact_ids_with_padding_and_a_batch():
    """``posenc.rope`` of the model's ``[B, N, 2]`` ids, the processor's ``(-1, -1)`` padding
    rows included (the model rotates them too)."""
    ids = np.concatenate([xy_ids(6, 9), np.full((4, 2), -1)])
    batch = np.stack([ids, ids[::-1]])
    cos, sin = posenc.rope(torch.from_numpy(batch), 72, preset="gemma4-vision")
    want = reference(batch, 72)
    assert tuple(cos.shape) == (2, 58, 72)
    assert_exact(cos.numpy(), want[0])
    assert_exact(sin.numpy(), want[1])


def test_original_float32_is_further_off_than_exact(quiet_transformers):
    """At 1120 soft tokens transformers' float32 angles drift past one rounding; posenc's do
    not."""
    hf, _ = _originals(72, quiet_transformers)
    ids = xy_ids(96, 105)
    cos, _ = hf(torch.zeros(1), torch.from_numpy(ids)[None])
    want = reference(ids, 72)[0]
    assert np.abs(cos[0].double().numpy() - want).max() > 1e-6
    exact, _ = posenc.rope_grid((96, 105), 72, preset="gemma4-vision")
    assert np.abs(exact - want).max() < 1e-7


@pytest.mark.parametrize("shape", [(96, 105), (3, 3360)])
def test_float32_only_path(float32_only, shape):
    cos, sin = posenc.rope_grid(shape, 72, preset="gemma4-vision", dtype=torch.float32)
    want = reference(xy_ids(*shape), 72)
    for got, w in zip((cos, sin), want, strict=True):
        assert np.abs(got.double().numpy() - w).max() < 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotation_is_apply_multidimensional_rope(dtype, quiet_transformers):
    """``apply_rope(q, cos, sin, 'block-halves', blocks=2, compat='transformers')`` is
    transformers' (and timm's) per-axis rotate_half, bit for bit; posenc's own rotation is
    within float32 rounding of float64."""
    torch.manual_seed(0)
    q = torch.randn(2, 30, 3, 72).to(dtype)  # [batch, tokens, heads, head_dim]
    cos, sin = posenc.rope_grid((5, 6), 72, preset="gemma4-vision", compat="transformers",
                                dtype=dtype)  # fmt: skip
    ids = torch.from_numpy(xy_ids(5, 6))[None]
    c, s = cos[None], sin[None]
    want = modeling_gemma4.apply_multidimensional_rope(q, c, s, ids, unsqueeze_dim=2)
    got = posenc.apply_rope(q, c[:, :, None], s[:, :, None], "block-halves", blocks=2,
                            compat="transformers")  # fmt: skip
    assert torch.equal(got, want)
    assert torch.equal(gemma4_vit.apply_multidimensional_rope(q, c, s, ndim=2), want)
    if dtype == torch.float32:
        qd = q.double().numpy()
        cd, sd = reference(xy_ids(5, 6), 72)
        half = 18
        blocks = qd.reshape(2, 30, 3, 2, 2, half)  # [.., axis block, half, j]
        x1, x2 = blocks[..., 0, :], blocks[..., 1, :]
        cb = cd.reshape(30, 2, 2, half)[None, :, None, :, 0]
        sb = sd.reshape(30, 2, 2, half)[None, :, None, :, 0]
        rotated = np.stack([x1 * cb - x2 * sb, x2 * cb + x1 * sb], axis=-2).reshape(qd.shape)
        ec, es = posenc.rope_grid((5, 6), 72, preset="gemma4-vision", dtype=torch.float32)
        exact = posenc.apply_rope(q, ec[:, None], es[:, None], "block-halves", blocks=2)
        assert np.abs(exact.double().numpy() - rotated).max() < 2e-6


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"compat": "transformers", "layout": "halves"}, "`layout`"),
        ({"compat": "timm", "block_axes": (0, 1)}, "`block_axes`"),
        ({"compat": "transformers", "start": 1}, "`start`"),
        ({"compat": "timm", "crop": ((0, 0), (4, 4))}, "`crop`"),
        ({"compat": "transformers", "base": 100.0, "axes_dim": (16, 16)}, "`axes_dim`"),
        ({"compat": "diffusers"}, "`compat`"),
    ],
)
def test_compat_refuses_what_the_modules_cannot_compute(kw, named):
    dim = 32 if "axes_dim" not in kw else 40
    with pytest.raises(PosencError, match=named):
        posenc.rope_grid((4, 4), dim, preset="gemma4-vision", **kw)


def test_width_must_split_into_two_blocks_of_halves():
    with pytest.raises(PosencError, match=r"`dim`.*70|70.*multiple of 4"):
        posenc.rope_grid((2, 2), 70, preset="gemma4-vision")
