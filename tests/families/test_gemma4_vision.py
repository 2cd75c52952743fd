"""Gemma 4's vision encoder (``preset="gemma4-vision"``): ``compat="transformers"`` and
``compat="timm"`` against ``Gemma4VisionRotaryEmbedding`` and ``Gemma4RotaryEmbedding2D`` bit
for bit in every dtype the modules cast to, the exact tables within one float32 rounding of a
float64 reference (padding ids included), the float32-only evaluator, the rotation equal to
``apply_multidimensional_rope``; posenc.torch.patch on transformers' vision encoder and timm's
``gemma4_vit`` (small random-weight models, no download): compat="original" leaves every output
identical, the exact stand-in holds float64 tables rounded once, bad input is named."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.families.models import assert_rounded_once

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")
from timm.models import gemma4_vit  # noqa: E402
from transformers.models.gemma4 import modeling_gemma4  # noqa: E402

from tests.contract import check_patch_contract  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


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


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def padded_xy_ids(h, w, padding=0):
    """``[h * w + padding, 2]`` (x, y) ids, row-major, then ``(-1, -1)`` padding rows."""
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    ids = torch.stack([cols.flatten(), rows.flatten()], dim=-1)
    return torch.cat([ids, torch.full((padding, 2), -1)])


def vision_reference(ids, dim, base=100.0):
    """float64 ``(cos, sin)``: per axis block (x, then y) ``p * base ** (-2j / (dim / 2))``,
    twice (halves inside the block)."""
    ids = ids.double().numpy()
    omega = base ** (-2.0 * np.arange(dim // 4) / (dim // 2))
    parts = [ids[..., a : a + 1] * omega for a in (0, 0, 1, 1)]
    angles = np.concatenate(parts, axis=-1)
    return np.cos(angles), np.sin(angles)


def _hf_vision():
    torch.manual_seed(0)
    config = transformers.Gemma4VisionConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, head_dim=32, position_embedding_size=128, patch_size=4)  # fmt: skip
    return transformers.Gemma4VisionModel(config).eval()


def _hf_inputs(grids=((6, 9), (3, 12)), dtype=torch.float32):
    """A batch of images of ``grids`` patches, padded to the largest (as the processor does)."""
    n = max(h * w for h, w in grids)
    ids = torch.stack([padded_xy_ids(h, w, n - h * w) for h, w in grids])
    torch.manual_seed(1)
    return torch.rand(len(grids), n, 3 * 16).to(dtype), ids


def _hf_out(model, inputs):
    with torch.no_grad():
        return model(*inputs).last_hidden_state


def _timm_vision():
    torch.manual_seed(0)
    return timm.create_model("gemma4_vit_167m", pretrained=False, depth=1, embed_dim=64,
                             num_heads=2, head_dim=32, intermediate_size=96,
                             num_classes=5).eval()  # fmt: skip


def _timm_inputs(size=(96, 144), dtype=torch.float32):
    torch.manual_seed(1)
    return (torch.rand(1, 3, *size).to(dtype),)


def _timm_out(model, inputs):
    with torch.no_grad():
        return model.forward_features(*inputs)


VISION = {
    "transformers": (_hf_vision, _hf_inputs, _hf_out, "encoder.rotary_emb",
                     "Gemma4VisionRotaryEmbedding", [((3, 6), (3, 3)), ((9, 3), (3, 15))]),
    "timm": (_timm_vision, _timm_inputs, _timm_out, "encoder.rotary_emb",
             "Gemma4RotaryEmbedding2D", [(48, 240), (144, 48)]),
}  # fmt: skip
"""name: (model, inputs, output, rotary path, its class, other input sizes)."""


def _vision_outputs(model, name, dtype):
    """The model's outputs at each input size of ``VISION[name]`` (the default first), as the
    contract compares them (``tests.contract.forward`` for positional inputs): bfloat16 under
    CPU autocast on a float32 model, the pixels cast on a bfloat16 one."""
    _, inputs_of, out, _, _, others = VISION[name]
    sizes = [(), *((o,) for o in others)]
    if dtype == torch.float32:
        return [out(model, inputs_of(*size)) for size in sizes]
    if next(model.parameters()).dtype == torch.float32:
        with torch.autocast("cpu", dtype=dtype):
            return [out(model, inputs_of(*size)) for size in sizes]
    return [out(model, inputs_of(*size, dtype=dtype)) for size in sizes]


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # timm's RmsNorm
@pytest.mark.parametrize("name", sorted(VISION))
def test_vision_compat_is_identical_and_exact_is_close(name):
    """Under CPU autocast timm's ``inv_freq @ positions`` runs in bfloat16 (its tables 1e-2 off
    the float32 ones): the compat stand-in repeats that matmul, transformers' product not."""
    build, inputs_of, out, path, cls, _ = VISION[name]
    inputs = inputs_of()

    def exact(original, patched):
        got = out(patched, inputs)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, out(original, inputs), rtol=0, atol=1e-4)

    contract = check_patch_contract(
        build(), {path: cls}, lambda m, dtype: _vision_outputs(m, name, dtype), exact
    )
    (row,) = contract.compat.replaced
    assert "gemma4-vision" in row.replacement
    assert 1e-7 < row.max_diff < 1e-5  # the original's float32 drift over 96 x 105


@pytest.mark.parametrize("name", sorted(VISION))
def test_vision_tables_exact_and_replayed(name):
    """The stand-in at the model's ``[B, N, 2]`` ids with padding: exact = float64 rounded
    once (in float32 and bf16); compat = the original module's output, bit for bit."""
    build, _, _, path, cls, _ = VISION[name]
    ids = torch.stack([padded_xy_ids(7, 5, 3), padded_xy_ids(2, 19)])

    def tables(model, dtype):
        return model.get_submodule(path)(torch.zeros(1, dtype=dtype), ids)

    def exact(_, patched):
        want = vision_reference(ids, 32)
        for dtype in (torch.float32, torch.bfloat16):
            for g, w in zip(tables(patched, dtype), want, strict=True):
                assert g.dtype == dtype
                assert g.shape == (2, 38, 32)
                if dtype == torch.float32:
                    assert_rounded_once(g, w)
                else:
                    assert torch.equal(g, torch.from_numpy(w).to(dtype))

    check_patch_contract(build(), {path: cls}, tables, exact)


def test_stand_in_names_bad_input():
    from posenc.errors import PosencError
    from posenc.torch._gemma4_rope import Gemma4VisionRope

    rope = Gemma4VisionRope(32, 100.0, compat=False, dtype=torch.float32, device="cpu")
    with pytest.raises(PosencError, match=r"`position_ids`.*\[\.\.\., 2\].*\(4, 3\)"):
        rope(torch.zeros(1), torch.zeros(4, 3, dtype=torch.long))
    with pytest.raises(PosencError, match="70"):
        Gemma4VisionRope(70, 100.0, compat=True, dtype=torch.float32, device="cpu")
