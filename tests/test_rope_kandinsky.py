"""The Kandinsky 5 and 6 presets (posenc.rope_grid): compat="diffusers" against diffusers'
own Kandinsky5RoPE3D / Kandinsky6RoPE3D / Kandinsky6SRRoPE3D / the 1-D text modules, bit for
bit at the models' sizes and odd ones, both scale factors; exact mode against a float64 NumPy
reference written from the formula (exp(-ln(1e4) j / (d_a / 2)) * p / s); the float32-only
evaluator within 1e-6; bad input refused."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
from diffusers.models.transformers.transformer_kandinsky import (  # noqa: E402
    Kandinsky5RoPE1D,
    Kandinsky5RoPE3D,
)
from diffusers.models.transformers.transformer_kandinsky6 import (  # noqa: E402
    Kandinsky6RoPE1D,
    Kandinsky6RoPE3D,
)
from diffusers.models.transformers.transformer_kandinsky6_sr import (  # noqa: E402
    Kandinsky6SRRoPE3D,
)

SMALL, LARGE = (1, 2, 2), (1, 3.16, 3.16)


def reference(dims, axes, scale, positions=None):
    """float64 (cos, sin) ``[prod(dims), sum(axes) / 2]`` (one column per frequency): block
    ``a``'s angles ``p * exp(-ln(1e4) j / (d_a / 2)) / s_a``, ``[t | h | w]``."""
    positions = positions or [np.arange(n) for n in dims]
    grids = np.meshgrid(*[np.asarray(p, dtype=np.float64) for p in positions], indexing="ij")
    parts = []
    for g, d, s in zip(grids, axes, scale, strict=True):
        n = d // 2
        omega = np.exp(-np.log(1e4) * np.arange(n) / n)
        parts.append(g.reshape(-1)[:, None] * omega[None] / s)
    theta = np.concatenate(parts, axis=1)
    return np.cos(theta), np.sin(theta)


def assert_exact(got, want):
    got = got.double().numpy() if isinstance(got, torch.Tensor) else np.asarray(got, np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-12)


def unpack(rope, n):
    """The cos and sin ``[n, D / 2]`` of diffusers' 2 x 2 matrices ``[..., 1, D / 2, 2, 2]``."""
    return rope[..., 0, :, 0, 0].reshape(n, -1), rope[..., 0, :, 1, 0].reshape(n, -1)


def original_3d(family, dims, scale):
    f, h, w = dims
    pos = [torch.arange(n) for n in dims]
    if family == "kandinsky5":
        rope = Kandinsky5RoPE3D((16, 24, 24))((1, f, h, w), pos, scale)[0]
    elif family == "kandinsky6":
        rope = Kandinsky6RoPE3D((32, 48, 48))(pos, scale)
    else:
        rope = Kandinsky6SRRoPE3D((32, 48, 48))(pos, scale)
    return unpack(rope, f * h * w)


CASES = [
    ("kandinsky5", 64, (31, 32, 48), SMALL),  # 512 x 768, 121 frames
    ("kandinsky5", 64, (7, 64, 64), LARGE),  # 1024 x 1024
    ("kandinsky5", 64, (5, 7, 3), SMALL),  # odd
    ("kandinsky6", 128, (3, 33, 17), SMALL),
    ("kandinsky6", 128, (2, 9, 128), LARGE),
    ("kandinsky6-sr", 128, (1, 60, 45), SMALL),
]


@pytest.mark.parametrize(("family", "head", "dims", "scale"), CASES)
def test_compat_is_diffusers_bit_for_bit(family, head, dims, scale):
    preset = family.removesuffix("-sr")
    axes_scale = tuple(1 / s for s in scale)
    want = original_3d(family, dims, scale)
    got = posenc.rope_grid(dims, head, preset=preset, axes_scale=axes_scale, layout="compact",
                           compat="diffusers", dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    paired = posenc.rope_grid(dims, head, preset=preset, axes_scale=axes_scale,
                              compat="diffusers", dtype=torch.float32)  # fmt: skip
    for g, w in zip(paired, want, strict=True):  # the 2 x 2 matrices' pairs: interleaved
        assert torch.equal(g, w.repeat_interleave(2, dim=-1))


@pytest.mark.parametrize(("family", "head", "dims", "scale"), CASES)
def test_exact_is_the_float64_table_rounded_once(family, head, dims, scale):
    preset = family.removesuffix("-sr")
    axes = (head // 4, 3 * head // 8, 3 * head // 8)
    ref = reference(dims, axes, scale)
    kw = {} if scale == SMALL else {"axes_scale": tuple(1 / s for s in scale)}  # the default
    got = posenc.rope_grid(dims, head, preset=preset, layout="compact", **kw)
    for g, w in zip(got, ref, strict=True):
        assert_exact(g, w)
    paired, _ = posenc.rope_grid(dims, head, preset=preset, **kw)
    np.testing.assert_array_equal(paired, np.repeat(got[0], 2, axis=1))
    original = original_3d(family, dims, scale)
    theirs = max(np.abs(o.double().numpy() - w).max() for o, w in zip(original, ref, strict=True))
    ours = max(np.abs(g - w).max() for g, w in zip(got, ref, strict=True))
    assert theirs > 2 * ours  # float32 angles


@pytest.mark.parametrize("scale", [SMALL, LARGE])
def test_float32_only_path(float32_only, scale):
    """Rows 0 … 127 on every axis (the tables' last rows), Kandinsky 6's head of 128."""
    dims = (128, 128, 4)
    axes_scale = tuple(1 / s for s in scale)
    cos, sin = posenc.rope_grid(dims, 128, preset="kandinsky6", layout="compact",
                                axes_scale=axes_scale, dtype=torch.float32)  # fmt: skip
    for got, want in zip((cos, sin), reference(dims, (32, 48, 48), scale), strict=True):
        assert np.abs(got.double().numpy() - want).max() < 1e-6


@pytest.mark.parametrize(("module", "dim"), [(Kandinsky5RoPE1D, 64), (Kandinsky6RoPE1D, 128)])
def test_text_rope_is_one_block_over_the_head(module, dim):
    pos = torch.arange(module(dim).max_pos)
    want = unpack(module(dim)(pos), len(pos))
    got = posenc.rope_grid((len(pos),), dim, preset="kandinsky5", axes_dim=(dim,),
                           layout="compact", compat="diffusers", dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    ref = reference((len(pos),), (dim,), (1,))
    for g, w in zip(posenc.rope(pos.numpy(), dim, layout="compact"), ref, strict=True):
        assert_exact(g, w)


def test_the_pipelines_scale_factor():
    from diffusers.pipelines.kandinsky5.pipeline_kandinsky import Kandinsky5T2VPipeline

    from posenc.spec.families.kandinsky import axes_scale_of, kandinsky_scale

    for h, w in [(512, 768), (480, 854), (1024, 1024), (512, 1024), (479, 600)]:
        assert kandinsky_scale(h, w) == tuple(Kandinsky5T2VPipeline._get_scale_factor(None, h, w))
    assert axes_scale_of(LARGE) == (1.0, 1 / 3.16, 1 / 3.16)
    assert posenc.preset("kandinsky5").originals == ("diffusers",)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: posenc.rope_grid((2, 3, 4), 72, preset="kandinsky5"), "`dim` = 72"),
        (lambda: posenc.rope_grid((2, 3, 4), 64, preset="kandinsky5", start=(0, 0.5, 0),
                                  compat="diffusers"), "axis 1 asks for 0.5"),
        (lambda: posenc.rope_grid((2, 3, 4), 64, preset="kandinsky5", start=(0, -1, 0),
                                  compat="diffusers"), "integers"),
        (lambda: posenc.rope_grid((2, 3, 4), 64, preset="kandinsky5", block_axes=(0, 2, 1),
                                  compat="diffusers"), "`block_axes`"),
        (lambda: posenc.rope_grid((2, 3, 4), 64, preset="kandinsky6", crop=((0, 0), (1, 2)),
                                  compat="diffusers"), "rows of its tables"),
        (lambda: posenc.rope_grid((2, 3, 4), 64, preset="kandinsky6",
                                  axes_base=(1e4, 1e4, 2e4), compat="diffusers"), "`axes_base`"),
    ],
)  # fmt: skip
def test_bad_input_is_refused(call, words):
    with pytest.raises(PosencError, match=words):
        call()


def test_axial_module_serves_the_presets():
    from posenc.torch import AxialRotaryEmbedding

    rope = AxialRotaryEmbedding(128, preset="kandinsky6")
    for dims in [(3, 5, 7), (2, 128, 1)]:
        got = rope(dims)
        want = posenc.rope_grid(dims, 128, preset="kandinsky6", dtype=torch.float32)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("n", [500, 5000])  # short factors, then long (past 4096)
def test_omnigen_preset(n):
    from diffusers.models.transformers.transformer_omnigen import (
        OmniGenSuScaledRotaryEmbedding,
    )

    rng = np.random.default_rng(0)
    short, long = (1 + rng.random(48) * 0.1).tolist(), (1 + rng.random(48) * 30).tolist()
    module = OmniGenSuScaledRotaryEmbedding(96, rope_scaling={"short_factor": short,
                                                              "long_factor": long})  # fmt: skip
    scaling = {"rope_type": "longrope", "short_factor": short, "long_factor": long,
               "original_max_position_embeddings": 4096,
               "max_position_embeddings": 131072}  # fmt: skip
    pos = torch.arange(n)[None].repeat(2, 1)
    want = module(torch.zeros(1), pos)
    got = posenc.rope(pos[0], 96, preset="omnigen", scaling=scaling, compat="transformers",
                      dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    ext = np.asarray(long if n > 4096 else short)
    theta = np.arange(n)[:, None] * np.tile(1e4 ** (-np.arange(0, 96, 2) / 96) / ext, 2)
    factor = np.sqrt(1 + np.log(32) / np.log(4096))
    assert abs(factor - 1.1902) < 1e-4
    exact = posenc.rope(pos[0].numpy(), 96, preset="omnigen", scaling=scaling)
    for g, w in zip(exact, (factor * np.cos(theta), factor * np.sin(theta)), strict=True):
        assert_exact(g, w)
