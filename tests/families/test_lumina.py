"""Lumina-Next, Lumina-Image-2.0, Z-Image and Bria-FIBO2 (complex tables gathered by ids):
``compat="diffusers"`` and ``"diffusers-mps"`` against diffusers bit for bit at the models'
sizes and odd ones, the exact tables within float32 rounding of a float64 reference, the
float32-only evaluator, the refusals; posenc.torch.patch on small random-weight Lumina-Image-2.0
and Z-Image transformers (configs, no download) and on the ``RopeEmbedder`` copies:
compat="original" leaves every output identical, the exact patch moves them by float32 noise,
the checkpoint loads with strict=True, patching twice is a no-op."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.controlnets import controlnet_z_image  # noqa: E402
from diffusers.models.embeddings import get_2d_rotary_pos_embed_lumina  # noqa: E402
from diffusers.models.transformers import (  # noqa: E402
    transformer_bria_fibo2,
    transformer_lumina2,
    transformer_z_image,
)

from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize(("cap", "image", "pad"), [(64, (1, 6, 8), 16), (32, (2, 3, 5), 2)])
def test_z_image_caption_image_and_padding_as_grids(cap, image, pad):
    """Z-Image's ids, cut into grids: the caption (1 … Lc, 0, 0) is the grid (Lc, 1, 1) at
    start (1, 0, 0), the image starts at (Lc + 1, 0, 0), the padding (0, 0, 0) is the grid
    (1, 1, 1): each bit for bit the module's rows."""
    from diffusers.models.transformers import transformer_z_image

    own = transformer_z_image.RopeEmbedder(256.0, (32, 48, 48), (1024, 512, 512))
    grid = transformer_z_image.ZImageTransformer2DModel.create_coordinate_grid
    ids = torch.cat([grid((cap, 1, 1), (1, 0, 0)).flatten(0, 2),
                     grid(image, (cap + 1, 0, 0)).flatten(0, 2),
                     torch.zeros(pad, 3, dtype=torch.int32)])  # fmt: skip
    want = own(ids)
    parts = [((cap, 1, 1), (1, 0, 0)), (image, (cap + 1, 0, 0)), ((1, 1, 1), (0, 0, 0))]
    got = []
    for shape, start in parts:
        cos, sin = posenc.rope_grid(shape, 128, preset="z-image", start=start, layout="compact",
                                    compat="diffusers", dtype=torch.float32)  # fmt: skip
        got.append(torch.complex(cos, sin))
    got[-1] = got[-1].expand(pad, -1)
    assert torch.equal(torch.cat(got), want)


def reference(ids, axes_dim, base, *, scale=1.0, in_turn=False, compact=False):
    """cos, sin of ids ``[N, k]`` in float64: axis ``a``'s frequencies ``base ** (-2j / d_a) *
    scale``, blocks one after the other (or taken in turn per frequency), pairs interleaved."""
    ids = np.asarray(ids, dtype=np.float64)
    angles = []
    for a, d in enumerate(axes_dim):
        omega = base ** (-2.0 * np.arange(d // 2) / d) * scale
        angles.append(ids[:, a, None] * omega)
    angle = np.stack(angles, -1).reshape(len(ids), -1) if in_turn else np.concatenate(angles, -1)
    if not compact:
        angle = np.repeat(angle, 2, axis=-1)
    return np.cos(angle), np.sin(angle)


def grid_ids(dims, start=None):
    """The ids ``[prod(dims), k]`` of a grid, first axis outermost, from ``start``."""
    start = start or (0,) * len(dims)
    axes = [np.arange(s, s + n) for s, n in zip(start, dims, strict=True)]
    return np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(dims))


def assert_exact(got, want):
    """Within one float32 rounding of the float64 value."""
    got = np.asarray(got.double() if hasattr(got, "double") else got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-12)


def as_complex(cos, sin):
    return torch.complex(cos, sin)


def _lumina_factors(width, height, after_watershed):
    """The pipeline's factors: s = sqrt(W H) / 1024 px; linear before the watershed, NTK
    after."""
    s = math.sqrt(width * height / 1024**2)
    return (1.0, s) if after_watershed else (s, 1.0)


@pytest.mark.parametrize(
    ("h", "w", "head", "factors"),
    [
        (384, 384, 72, (1.0, 1.0)),  # the pipeline's whole table, Lumina-Next-SFT's head
        (128, 128, 72, _lumina_factors(2048, 2048, False)),  # 2048 px: linear 2
        (128, 128, 72, _lumina_factors(2048, 2048, True)),  # ... NTK 2
        (96, 168, 72, _lumina_factors(1344, 768, False)),  # odd factor sqrt(0.984)
        (37, 53, 64, (1.7, 1.0)),
        (5, 3, 8, (1.0, 3.3)),
    ],
)
@pytest.mark.parametrize("layout", ["interleaved", "compact"])
def test_lumina_next(h, w, head, factors, layout):
    linear, ntk = factors
    want = get_2d_rotary_pos_embed_lumina(head, h, w, linear_factor=linear, ntk_factor=ntk)
    want = want.reshape(h * w, head // 2)
    kw = {"base": 10000.0 * ntk, "axes_scale": (1 / linear, 1 / linear), "layout": layout}
    cos, sin = posenc.rope_grid((h, w), head, preset="lumina-next", compat="diffusers",
                                dtype=torch.float32, **kw)  # fmt: skip
    if layout == "interleaved":
        assert torch.equal(cos[:, ::2], cos[:, 1::2])
        cos, sin = cos[:, ::2], sin[:, ::2]
    assert torch.equal(as_complex(cos, sin), want)
    ref = reference(grid_ids((h, w)), (head // 2, head // 2), 1e4 * ntk, scale=1 / linear,
                    in_turn=True, compact=layout == "compact")  # fmt: skip
    for got, r in zip(posenc.rope_grid((h, w), head, preset="lumina-next", **kw), ref,
                      strict=True):  # fmt: skip
        assert_exact(got, r)


def test_lumina_next_ids_are_the_grid():
    """posenc.rope of the (row, column) ids is rope_grid's table, row by row."""
    ids = grid_ids((6, 9))
    by_ids = posenc.rope(ids, 72, preset="lumina-next")
    by_grid = posenc.rope_grid((6, 9), 72, preset="lumina-next")
    assert all(np.array_equal(a, b) for a, b in zip(by_ids, by_grid, strict=True))


def _lumina2_axes(module):
    """Each axis's table as ``rope_grid`` gives it (float64, compact), as complex."""
    out = []
    for a, n in enumerate(module.axes_lens):
        dims = [1, 1, 1]
        dims[a] = n
        cos, sin = posenc.rope_grid(tuple(dims), 96, preset="lumina2", compat="diffusers",
                                    layout="compact", dtype=torch.float64)  # fmt: skip
        out.append(as_complex(cos, sin)[:, 16 * a : 16 * (a + 1)])
    return out


def test_lumina2_tables_are_complex128():
    module = transformer_lumina2.Lumina2RotaryPosEmbed(10000, [32, 32, 32])
    assert [t.dtype for t in module.freqs_cis] == [torch.complex128] * 3
    for got, want in zip(_lumina2_axes(module), module.freqs_cis, strict=True):
        assert got.dtype == torch.complex128
        assert torch.equal(got, want)
    # float64 tables: posenc's and diffusers' both within 5e-14 of an extended-precision value
    wide = np.longdouble
    for table, n in zip(module.freqs_cis, module.axes_lens, strict=True):
        angle = np.arange(n).astype(wide)[:, None] * wide(1e4) ** (-np.arange(0, 32, 2) / wide(32))
        cos, sin = posenc.rope(np.arange(n), 32, base=1e4, layout="compact", dtype=np.float64)
        for got in (cos, table.real.numpy()):
            assert np.abs(got.astype(wide) - np.cos(angle)).max() < 5e-14
        for got in (sin, table.imag.numpy()):
            assert np.abs(got.astype(wide) - np.sin(angle)).max() < 5e-14


@pytest.mark.parametrize(
    ("caps", "rows", "cols"), [((256, 256), 64, 64), ((7, 5), 12, 10), ((1, 30), 3, 17)]
)
def test_lumina2_forward(caps, rows, cols):
    """The module's caption and image tables: caption i at (i, 0, 0), the image at (L, row,
    column); posenc's at those ids."""
    module = transformer_lumina2.Lumina2RotaryPosEmbed(10000, [32, 32, 32])
    mask = torch.zeros(len(caps), max(caps), dtype=torch.int64)
    for i, cap in enumerate(caps):
        mask[i, :cap] = 1
    hidden = torch.zeros(len(caps), 4, 2 * rows, 2 * cols)
    _, caption, image, _, _, _ = module(hidden, mask)
    for i, cap in enumerate(caps):
        cos, sin = posenc.rope_grid((1, rows, cols), 96, preset="lumina2", start=(cap, 0, 0),
                                    compat="diffusers", layout="compact",
                                    dtype=torch.float64)  # fmt: skip
        assert torch.equal(as_complex(cos, sin), image[i])
        cos, sin = posenc.rope_grid((cap, 1, 1), 96, preset="lumina2", compat="diffusers",
                                    layout="compact", dtype=torch.float64)  # fmt: skip
        assert torch.equal(as_complex(cos, sin), caption[i, :cap])
        assert not caption[i, cap:].any()
        ids = np.concatenate([grid_ids((cap, 1, 1)), grid_ids((1, rows, cols), (cap, 0, 0))])
        ref = reference(ids, (32, 32, 32), 1e4)
        for got, r in zip(posenc.rope(ids, 96, preset="lumina2"), ref, strict=True):
            assert_exact(got, r)


def test_lumina2_on_a_host_with_mps(monkeypatch):
    """On a host with MPS (its CPU too) the tables are complex64 from float32 angles:
    ``compat='diffusers-mps'``."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    module = transformer_lumina2.Lumina2RotaryPosEmbed(10000, [32, 32, 32])
    worst = 0.0
    for a, (table, n) in enumerate(zip(module.freqs_cis, module.axes_lens, strict=True)):
        assert table.dtype == torch.complex64
        dims = [1, 1, 1]
        dims[a] = n
        cos, sin = posenc.rope_grid(tuple(dims), 96, preset="lumina2", compat="diffusers-mps",
                                    layout="compact", dtype=torch.float32)  # fmt: skip
        assert torch.equal(as_complex(cos, sin)[:, 16 * a : 16 * (a + 1)], table)
        ref = reference(grid_ids((n, 1, 1)), (32,), 1e4, compact=True)
        worst = max(worst, np.abs(table.real.double().numpy() - ref[0]).max())
    assert worst > 1e-6  # float32 angles (1.6e-5 at row 511)


def _coordinates(size, start):
    return transformer_z_image.ZImageTransformer2DModel.create_coordinate_grid(size, start)


@pytest.mark.parametrize(
    ("embedder", "axes", "lens"),
    [
        (transformer_z_image.RopeEmbedder, (32, 48, 48), (1024, 512, 512)),
        (transformer_bria_fibo2.RopeEmbedder, (32, 48, 48), (2048, 512, 512)),
        (transformer_z_image.RopeEmbedder, (16, 56, 56), (64, 128, 128)),  # the class's own
    ],
)
def test_z_image_tables(embedder, axes, lens):
    own = embedder(256.0, axes, lens)
    worst = 0.0
    for a, n in enumerate(lens):
        dims = [1, 1, 1]
        dims[a] = n
        ids = torch.from_numpy(grid_ids(tuple(dims)))
        want = own(ids)
        cos, sin = posenc.rope_grid(tuple(dims), sum(axes), preset="z-image", axes_dim=axes,
                                    compat="diffusers", layout="compact",
                                    dtype=torch.float32)  # fmt: skip
        assert torch.equal(as_complex(cos, sin), want)
        ref = reference(ids.numpy(), axes, 256.0, compact=True)
        worst = max(worst, np.abs(want.real.double().numpy() - ref[0]).max())
        for got, r in zip(posenc.rope(ids.numpy(), sum(axes), preset="z-image", axes_dim=axes,
                                      layout="compact"), ref, strict=True):  # fmt: skip
            assert_exact(got, r)
    assert worst > 1e-6  # the float32 angles (3.0e-5 at row 1023)


@pytest.mark.parametrize(("cap", "frames", "rows", "cols"), [(512, 1, 64, 64), (40, 2, 7, 9)])
def test_z_image_ids(cap, frames, rows, cols):
    """Z-Image's ids: the caption padded to a multiple of 32 at (1 … Lc, 0, 0), the image at
    (Lc + 1 + f, row, column), its padding at (0, 0, 0)."""
    own = transformer_z_image.RopeEmbedder(256.0, (32, 48, 48), (1024, 512, 512))
    lc = cap + (-cap) % 32
    image = frames * rows * cols
    ids = torch.cat([_coordinates((lc, 1, 1), (1, 0, 0)).flatten(0, 2),
                     _coordinates((frames, rows, cols), (lc + 1, 0, 0)).flatten(0, 2),
                     torch.zeros((-image) % 32, 3, dtype=torch.int32)])  # fmt: skip
    want = own(ids)
    cos, sin = posenc.rope_grid((frames, rows, cols), 128, preset="z-image", compat="diffusers",
                                start=(lc + 1, 0, 0), dtype=torch.float32)  # fmt: skip
    assert torch.equal(cos[:, ::2], want[lc : lc + image].real)
    assert torch.equal(sin[:, 1::2], want[lc : lc + image].imag)
    ref = reference(ids.numpy(), (32, 48, 48), 256.0)
    for got, r in zip(posenc.rope(ids, 128, preset="z-image"), ref, strict=True):
        assert_exact(got, r)


@pytest.mark.parametrize(
    ("preset", "head", "axes", "base", "dims", "in_turn"),
    [
        ("lumina-next", 72, (36, 36), 1e4, [(384, 384)], True),
        ("lumina2", 96, (32, 32, 32), 1e4, [(300, 1, 1), (1, 512, 1), (1, 1, 512)], False),
        ("z-image", 128, (32, 48, 48), 256.0, [(1024, 1, 1), (1, 512, 1), (1, 1, 512)], False),
    ],
)
def test_float32_only_path(float32_only, preset, head, axes, base, dims, in_turn):
    for shape in dims:
        cos, sin = posenc.rope_grid(shape, head, preset=preset, dtype=torch.float32)
        ref = reference(grid_ids(shape), axes, base, in_turn=in_turn)
        for got, want in zip((cos, sin), ref, strict=True):
            assert np.abs(got.double().numpy() - want).max() < 1e-6


def test_interleave_axes_needs_blocks():
    from posenc.spec.rotary import _rotary

    with pytest.raises(PosencError, match="`interleave_axes` needs `axes_dim`"):
        _rotary(8, base=1e4, layout="halves", interleave_sections=False, interleave_axes=True)
    with pytest.raises(PosencError, match="interleave_axes"):
        _rotary(8, base=1e4, layout="halves", interleave_sections=False, axes_dim=(4, 4),
                interleave_axes="yes")  # fmt: skip


def test_lumina_next_width():
    with pytest.raises(PosencError, match=r"`dim` = 70 .*lumina-next.*multiple of 4"):
        posenc.rope_grid((4, 4), 70, preset="lumina-next")


@pytest.mark.parametrize(
    ("preset", "dims", "kw", "match"),
    [
        ("lumina2", (1, 4, 4), {"start": (0.5, 0, 0)}, "integer rows"),
        ("z-image", (2, 4, 4), {"step": 2}, "integer rows"),
        ("lumina-next", (4, 4), {"start": (1, 0)}, "integer rows"),
        ("lumina-next", (4, 4), {"axes_scale": (1.0, 0.5)}, "scales both axes alike"),
        ("z-image", (2, 4, 4), {"axes_scale": (1.0, 2.0, 1.0)}, "drop `axes_scale`"),
        ("lumina2", (2, 4, 4), {"block_axes": (0, 2, 1)}, "block_axes"),
        ("lumina2", (2, 4, 4), {"crop": ((0, 0), (4, 4))}, "no crop"),
        ("z-image", (2, 4, 4), {"compat": "diffusers-mps"}, "compat"),
    ],
)
def test_compat_refuses_another_form(preset, dims, kw, match):
    kw = {"compat": "diffusers", **kw}
    with pytest.raises(PosencError, match=match):
        posenc.rope_grid(dims, posenc.preset(preset).dim, preset=preset, **kw)


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def _lumina2():
    torch.manual_seed(0)
    return diffusers.Lumina2Transformer2DModel(
        sample_size=16, patch_size=2, in_channels=4, hidden_size=96, num_layers=1,
        num_refiner_layers=1, num_attention_heads=2, num_kv_heads=1, multiple_of=16,
        cap_feat_dim=32, axes_dim_rope=(16, 16, 16)).eval()  # fmt: skip


def _lumina2_inputs(caps, rows, cols):
    torch.manual_seed(1)
    mask = torch.zeros(len(caps), max(caps), dtype=torch.int64)
    for i, cap in enumerate(caps):
        mask[i, :cap] = 1
    return {"hidden_states": torch.randn(len(caps), 4, 2 * rows, 2 * cols),
            "timestep": torch.tensor([0.3, 0.7][: len(caps)]),
            "encoder_hidden_states": torch.randn(len(caps), max(caps), 32),
            "encoder_attention_mask": mask}  # fmt: skip


LUMINA2_PATHS = {"rope_embedder": "Lumina2RotaryPosEmbed",
                 "time_caption_embed.time_proj": "Timesteps"}  # fmt: skip


def _lumina2_contract(model, sizes, atol, tables):
    """The contract on the small Lumina-Image-2.0 ``model`` at ``sizes`` (captions, rows,
    columns): the exact model within ``atol`` of the original's outputs, its tables checked by
    ``tables``; the compat report's row of ``rope_embedder``."""

    def outputs(m, dtype):
        return [t for caps, h, w in sizes for t in forward(m, _lumina2_inputs(caps, h, w), dtype)]

    def exact(original, patched):
        for caps, h, w in sizes:
            x = _lumina2_inputs(caps, h, w)
            torch.testing.assert_close(forward(patched, x, torch.float32),
                                       forward(original, x, torch.float32), rtol=0,
                                       atol=atol)  # fmt: skip
        tables(patched.rope_embedder.freqs_cis)

    contract = check_patch_contract(model, LUMINA2_PATHS, outputs, exact)
    return {r.path: r for r in contract.compat.replaced}["rope_embedder"]


def test_lumina2():
    def tables(freqs_cis):
        assert [t.dtype for t in freqs_cis] == [torch.complex128] * 3
        angle = np.arange(512)[:, None] * 1e4 ** (-np.arange(0, 16, 2) / 16)
        assert np.abs(freqs_cis[1].numpy() - np.exp(1j * angle)).max() < 1e-13

    sizes = (((7, 5), 6, 5), ((3,), 8, 8), ((1, 12), 3, 7))
    row = _lumina2_contract(_lumina2(), sizes, 1e-5, tables)
    assert 0 < row.max_diff < 1e-13  # both complex128


def test_lumina2_model_on_a_host_with_mps(monkeypatch):
    """Built on a host with MPS, the module keeps complex64 tables of float32 angles: the
    compat stand-in repeats them, the exact one rounds the float64 values to complex64."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    model = _lumina2()
    assert model.rope_embedder.freqs_cis[0].dtype == torch.complex64

    def tables(freqs_cis):
        table = freqs_cis[1]
        assert table.dtype == torch.complex64
        angle = np.arange(512)[:, None] * 1e4 ** (-np.arange(0, 16, 2) / 16)
        want = np.exp(1j * angle)
        for got, ref in ((table.real, want.real), (table.imag, want.imag)):
            np.testing.assert_array_less(np.abs(got.double().numpy() - ref),
                                         6e-8 * np.abs(ref) + 1e-12)  # fmt: skip

    row = _lumina2_contract(model, (((7, 5), 6, 5),), 1e-4, tables)
    assert row.max_diff > 1e-6  # float32 angles


def _z_image():
    torch.manual_seed(0)
    return diffusers.ZImageTransformer2DModel(
        all_patch_size=(2,), all_f_patch_size=(1,), in_channels=4, dim=64, n_layers=1,
        n_refiner_layers=1, n_heads=2, n_kv_heads=2, cap_feat_dim=32, axes_dims=[8, 12, 12],
        axes_lens=[256, 64, 64]).eval()  # fmt: skip


def _z_image_out(model, images, captions, dtype=torch.float32):
    torch.manual_seed(1)
    xs = [torch.randn(4, f, 2 * h, 2 * w, dtype=dtype) for f, h, w in images]
    caps = [torch.randn(n, 32, dtype=dtype) for n in captions]
    with torch.no_grad():
        return model(xs, torch.tensor([0.3, 0.6][: len(xs)], dtype=dtype), caps).sample


def test_z_image():
    model = _z_image()
    sizes = (([(1, 6, 5)], [7]), ([(1, 4, 4), (2, 3, 5)], [40, 3]))
    compat = copy.deepcopy(model)
    patch(compat, compat="original")
    assert "rope_embedder" in dict(compat.named_modules())  # a module there now

    def outputs(m, dtype):  # bfloat16: autocast on the float32 model, its inputs on a bfloat16 one
        own = next(m.parameters()).dtype
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != own):
            return [t for images, captions in sizes for t in _z_image_out(m, images, captions, own)]

    def exact(original, patched):
        for images, captions in sizes:
            want = _z_image_out(original, images, captions)
            for a, b in zip(_z_image_out(patched, images, captions), want, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-4)
        table = patched.rope_embedder.freqs_cis[0]  # exact: float64 values rounded once
        angle = np.arange(256)[:, None] * 256.0 ** (-np.arange(0, 8, 2) / 8)
        for part, ref in ((table.real, np.cos(angle)), (table.imag, np.sin(angle))):
            np.testing.assert_array_less(
                np.abs(part.double().numpy() - ref), 6e-8 * np.abs(ref) + 1e-12
            )

    contract = check_patch_contract(model, {"rope_embedder": "RopeEmbedder"}, outputs, exact)
    assert contract.compat.replaced[0].max_diff > 1e-7  # float32 angles


class Holder(torch.nn.Module):
    """A module keeping a ``RopeEmbedder`` as Z-Image's ControlNet and Bria-FIBO2 do."""

    def __init__(self, embedder):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.rope_embedder = embedder


@pytest.mark.parametrize(
    "make",
    [
        lambda: controlnet_z_image.RopeEmbedder(256.0, [32, 48, 48], [1024, 512, 512]),
        lambda: transformer_bria_fibo2.RopeEmbedder(256.0, [32, 48, 48], [2048, 512, 512]),
    ],
)
def test_copies_of_the_rope_embedder(make):
    """ZImageControlNetModel's and Bria-FIBO2's copies, at their models' sizes."""
    ids = torch.cat([torch.stack([torch.arange(1, 513), torch.zeros(512, dtype=torch.int64),
                                  torch.zeros(512, dtype=torch.int64)], -1),
                     torch.stack(torch.meshgrid(torch.tensor([513]), torch.arange(64),
                                                torch.arange(64), indexing="ij"), -1
                                 ).reshape(-1, 3)])  # fmt: skip

    def outputs(m, dtype):  # the tables of integer ids: no activations to lower
        return [m.rope_embedder(ids)]

    def exact(original, patched):
        want = original.rope_embedder(ids)
        torch.testing.assert_close(patched.rope_embedder(ids), want, rtol=0, atol=1e-4)

    contract = check_patch_contract(Holder(make()), {"rope_embedder": "RopeEmbedder"}, outputs,
                                    exact)  # fmt: skip
    assert contract.compat.replaced[0].max_diff > 1e-5  # float32 angles at row 1023 (3.0e-5)


def test_dry_run_changes_nothing():
    model = _z_image()
    report = patch(model, dry_run=True)
    assert [r.path for r in report.replaced] == ["rope_embedder"]
    assert type(model.rope_embedder).__name__ == "RopeEmbedder"
    assert "rope_embedder" not in dict(model.named_modules())
