"""``posenc.rope_grid(..., compat="diffusers")`` of the families whose originals keep a fixed
table of rows (Wan, Lumina-Image-2.0, Z-Image / Bria-FIBO2, Kandinsky 5 and 6, Qwen-Image,
Cosmos): the last row inside the table is the original's, bit for bit (the real module built
here); the first row past it, where the original raises, is refused with a PosencError naming
``shape``, ``start``, ``step``, the table's rows and the rows asked for; the exact mode (no
``compat``) takes the same call."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
from diffusers.models.transformers import (  # noqa: E402
    transformer_bria_fibo2,
    transformer_cosmos,
    transformer_kandinsky,
    transformer_kandinsky6,
    transformer_lumina2,
    transformer_qwenimage,
    transformer_wan,
    transformer_z_image,
)

IndexLike = (IndexError, RuntimeError)
"""What the originals raise past their tables (indexing, ``gather``, or a short slice's shape)."""


def grid(dims, start, step):
    """The grid's positions ``[N, k]`` (int64), first axis outermost."""
    axes = [s0 + st * torch.arange(n) for n, s0, st in zip(dims, start, step, strict=True)]
    return torch.stack([g.reshape(-1) for g in torch.meshgrid(*axes, indexing="ij")], dim=-1)


def wan(dims, start, step):
    assert start == (0, 0, 0)
    assert step == (1, 1, 1)
    module = transformer_wan.WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    cos, sin = module(torch.zeros(1, 1, dims[0], 2 * dims[1], 2 * dims[2]))
    return cos.reshape(-1, 128), sin.reshape(-1, 128)


def lumina2(dims, start, step):
    module = transformer_lumina2.Lumina2RotaryPosEmbed(10000, [32, 32, 32])
    table = module._get_freqs_cis(grid(dims, start, step)[None].to(torch.int32))[0]
    return table.real, table.imag


def rope_embedder(module):
    def original(dims, start, step):
        table = module(grid(dims, start, step))
        return table.real, table.imag

    return original


def kandinsky(version):
    def original(dims, start, step):
        pos = [s0 + st * torch.arange(n) for n, s0, st in zip(dims, start, step, strict=True)]
        if version == 5:
            module = transformer_kandinsky.Kandinsky5RoPE3D((16, 24, 24))
            rope = module((1, *dims), pos, (1, 2, 2))[0]
        else:
            rope = transformer_kandinsky6.Kandinsky6RoPE3D((32, 48, 48))(pos, (1, 2, 2))
        return rope[..., 0, :, 0, 0].reshape(-1, rope.shape[-3]), rope[..., 0, :, 1, 0].reshape(
            -1, rope.shape[-3]
        )

    return original


def kandinsky_1d(version, dim):
    def original(dims, start, step):
        pos = start[0] + step[0] * torch.arange(dims[0])
        if version == 5:
            rope = transformer_kandinsky.Kandinsky5RoPE1D(dim)(pos)
        else:
            rope = transformer_kandinsky6.Kandinsky6RoPE1D(dim)(pos)
        return rope[..., 0, :, 0, 0].reshape(dims[0], -1), rope[..., 0, :, 1, 0].reshape(
            dims[0], -1
        )

    return original


def qwen_image(dims, start, step):
    """``QwenEmbedRope(scale_rope=True)._compute_video_freqs(frame, height, width, idx)``:
    frames from ``idx``, rows and columns centred (from ``-(n - n // 2)``)."""
    assert step == (1, 1, 1)
    assert all(s0 == -(n - n // 2) for n, s0 in zip(dims[1:], start[1:], strict=True))
    module = transformer_qwenimage.QwenEmbedRope(10000, [16, 56, 56], scale_rope=True)
    table = module._compute_video_freqs(*dims, idx=start[0])
    return table.real, table.imag


def cosmos(dims, start, step):
    assert start == (0, 0, 0)
    assert step[1:] == (1, 1)
    fps = None if step[0] == 1 else round(24 / step[0])
    module = transformer_cosmos.CosmosRotaryPosEmbed(128)
    return module(torch.zeros(1, 1, dims[0], 2 * dims[1], 2 * dims[2]), fps=fps)


Z_IMAGE = transformer_z_image.RopeEmbedder(256.0, [32, 48, 48], [1024, 512, 512])
FIBO2 = transformer_bria_fibo2.RopeEmbedder(256.0, [32, 48, 48], [2048, 512, 512])
HALF = (1.0, 0.5, 0.5)  # Kandinsky's rows and columns at half speed (scale_factor (1, 2, 2))

# family, dim, keywords, the original, the last rows inside, the first row outside, its words
CASES = [
    ("wan", 128, {}, wan, ((1024, 1, 1), (0, 0, 0), (1, 1, 1)),
     ((1025, 1, 1), (0, 0, 0), (1, 1, 1)), ("rows 0 … 1023 on axis 0", "rows 0 … 1024")),
    ("wan", 128, {}, wan, ((1, 3, 1024), (0, 0, 0), (1, 1, 1)),
     ((1, 3, 1025), (0, 0, 0), (1, 1, 1)), ("on axis 2", "shape[2] = 1025")),
    ("lumina2", 96, {"dtype": torch.float64}, lumina2, ((2, 3, 2), (298, 509, 510), (1, 1, 1)),
     ((2, 1, 1), (299, 0, 0), (1, 1, 1)), ("rows 0 … 299 on axis 0", "rows 299 … 300")),
    ("lumina2", 96, {"dtype": torch.float64}, lumina2, ((2, 3, 2), (298, 509, 510), (1, 1, 1)),
     ((1, 1, 2), (0, 0, 511), (1, 1, 1)), ("rows 0 … 511 on axis 2", "start 511")),
    ("z-image", 128, {}, rope_embedder(Z_IMAGE), ((2, 2, 3), (1022, 510, 509), (1, 1, 1)),
     ((1, 2, 1), (0, 511, 0), (1, 1, 1)), ("rows 0 … 511 on axis 1", "rows 511 … 512")),
    ("z-image", 128, {}, rope_embedder(FIBO2), ((2, 2, 3), (2046, 510, 509), (1, 1, 1)),
     ((2, 1, 1), (2047, 0, 0), (1, 1, 1)), ("rows 0 … 2047 on axis 0", "Bria-FIBO2")),
    ("kandinsky5", 64, {"axes_scale": HALF}, kandinsky(5), ((2, 3, 2), (126, 125, 126), (1, 1, 1)),
     ((2, 1, 1), (127, 0, 0), (1, 1, 1)), ("rows 0 … 127 on axis 0", "rows 127 … 128")),
    ("kandinsky5", 64, {"axes_scale": HALF}, kandinsky(5), ((1, 2, 64), (0, 0, 1), (1, 1, 2)),
     ((1, 2, 64), (0, 0, 2), (1, 1, 2)), ("on axis 2", "step 2")),
    ("kandinsky6", 128, {"axes_scale": HALF}, kandinsky(6), ((2, 3, 2), (126, 125, 126), (1, 1, 1)),
     ((1, 2, 1), (0, 127, 0), (1, 1, 1)), ("rows 0 … 127 on axis 1", "Kandinsky6RoPE3D")),
    ("kandinsky5", 64, {"axes_dim": (64,)}, kandinsky_1d(5, 64), ((3,), (1021,), (1,)),
     ((3,), (2046,), (1,)), ("rows 0 … 2047 on axis 0", "Kandinsky5RoPE1D's 1024")),
    ("kandinsky5", 64, {"axes_dim": (64,)}, kandinsky_1d(6, 64), ((3,), (2045,), (1,)),
     ((3,), (2046,), (1,)), ("rows 2046 … 2048", "Kandinsky6RoPE1D")),
    ("kandinsky6", 128, {"axes_dim": (128,)}, kandinsky_1d(6, 128), ((3,), (2045,), (1,)),
     ((3,), (2046,), (1,)), ("rows 0 … 2047 on axis 0", "Kandinsky6RoPE1D")),
    ("qwen-image", 128, {}, qwen_image, ((2, 8192, 3), (4094, -4096, -2), (1, 1, 1)),
     ((1, 1, 1), (4096, -1, -1), (1, 1, 1)), ("rows -4096 … 4095 on axis 0", "rows 4096 … 4096")),
    ("qwen-image", 128, {}, qwen_image, ((1, 3, 8192), (0, -2, -4096), (1, 1, 1)),
     ((1, 8193, 1), (0, -4097, -1), (1, 1, 1)), ("on axis 1", "rows -4097 … 4095")),
    ("cosmos", 128, {}, cosmos, ((128, 1, 2), (0, 0, 0), (0.8, 1, 1)),  # 30 fps
     ((129, 1, 2), (0, 0, 0), (0.8, 1, 1)), ("rows 0 … 127 on axis 0", "rows 0 … 128")),
    ("cosmos", 128, {}, cosmos, ((2, 128, 3), (0, 0, 0), (1, 1, 1)),
     ((2, 1, 129), (0, 0, 0), (1, 1, 1)), ("on axis 2", "max_size // patch_size")),
]  # fmt: skip
IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


def call(family, dim, kw, dims, start, step, **more):
    return posenc.rope_grid(dims, dim, preset=family, start=start, step=step, **kw, **more)


@pytest.mark.parametrize(("family", "dim", "kw", "original", "inside", "outside", "words"), CASES,
                         ids=IDS)  # fmt: skip
def test_last_rows_inside_are_the_originals(family, dim, kw, original, inside, outside, words):
    want = original(*inside)
    layout = "halves" if family in ("wan", "cosmos") else "compact"
    layout = "interleaved" if family == "wan" else layout
    kw = {"dtype": torch.float32, **kw}
    got = call(family, dim, kw, *inside, layout=layout, compat="diffusers")
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize(("family", "dim", "kw", "original", "inside", "outside", "words"), CASES,
                         ids=IDS)  # fmt: skip
def test_first_row_outside_is_refused(family, dim, kw, original, inside, outside, words):
    try:  # the original cannot give these rows: it raises, or (Qwen-Image's frames) returns
        got = original(*outside)  # a table of another width, a short slice's few numbers
    except IndexLike:
        pass
    else:
        assert got[0].shape[-1] != original(*inside)[0].shape[-1]
    with pytest.raises(PosencError) as err:
        call(family, dim, kw, *outside, compat="diffusers")
    for fragment in ("`shape`, `start`, `step`", "compat='diffusers'", family, *words):
        assert fragment in str(err.value)
    exact = call(family, dim, {k: v for k, v in kw.items() if k != "dtype"}, *outside,
                 layout="compact")  # fmt: skip
    cos, sin = (np.asarray(t, dtype=np.float64) for t in exact)
    assert cos.shape == (int(np.prod(outside[0])), dim // 2)
    np.testing.assert_allclose(cos**2 + sin**2, 1.0, atol=1e-6)


def test_families_that_compute_their_positions_have_no_limit():
    """HunyuanVideo, HunyuanImage, CogView4's GLM-Image grid, MiniMax-H3: computed positions,
    no table; a grid past every table above is theirs."""
    for family, dims in [("hunyuan-video", (1, 1, 5000)), ("hunyuan-image", (1, 5000)),
                         ("cogview4", (5000, 1)), ("minimax-h3", (1, 1, 5000))]:  # fmt: skip
        preset = posenc.preset(family)
        cos, _ = posenc.rope_grid(dims, preset.dim, preset=family, compat="diffusers")
        assert cos.shape[0] == 5000
