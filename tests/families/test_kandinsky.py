"""Kandinsky 5 and 6 (``preset="kandinsky5"``, ``"kandinsky6"``): ``compat="diffusers"`` against
diffusers' 3-D and 1-D text modules bit for bit at the models' sizes and odd ones, both scale
factors; exact mode against a float64 reference written from the formula; the float32-only
evaluator; the pipelines' scale factor; bad input refused; posenc.torch.patch on a small
random-weight Kandinsky 5 transformer and on Kandinsky 6's rotary modules: compat="original"
leaves every output identical, the exact patch holds the float64 tables rounded once, the
checkpoint loads with strict=True, patching twice is a no-op."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.families.models import _out
from tests.families.models import assert_rounded_once as assert_exact

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers import transformer_kandinsky6 as k6  # noqa: E402
from diffusers.models.transformers import transformer_kandinsky6_sr as k6sr  # noqa: E402
from diffusers.models.transformers.transformer_kandinsky import (  # noqa: E402
    Kandinsky5RoPE1D,
    Kandinsky5RoPE3D,
)
from diffusers.models.transformers.transformer_kandinsky6 import (  # noqa: E402
    Kandinsky6RoPE1D,
    Kandinsky6RoPE3D,
)
from diffusers.models.transformers.transformer_kandinsky6_sr import Kandinsky6SRRoPE3D  # noqa: E402

from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


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


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def _kandinsky5():
    torch.manual_seed(0)
    return diffusers.Kandinsky5Transformer3DModel(
        in_visual_dim=4, in_text_dim=16, in_text_dim2=8, time_dim=16, out_visual_dim=4,
        model_dim=64, ff_dim=64, num_text_blocks=1, num_visual_blocks=1,
        axes_dims=(16, 24, 24)).eval()  # fmt: skip


def _inputs(size=(3, 4, 6), scale=(1, 2, 2), text=5, dtype=torch.float32):
    torch.manual_seed(1)
    f, h, w = size
    return {"hidden_states": torch.randn(1, f, 2 * h, 2 * w, 4, dtype=dtype),
            "encoder_hidden_states": torch.randn(text, 16, dtype=dtype),
            "timestep": torch.tensor([500.0], dtype=dtype),
            "pooled_projections": torch.randn(1, 8, dtype=dtype),
            "visual_rope_pos": [torch.arange(f), torch.arange(h), torch.arange(w)],
            "text_rope_pos": torch.arange(text), "scale_factor": scale}  # fmt: skip


def _bf16(model):
    """The model in bfloat16 as from_pretrained(torch_dtype=bfloat16) loads it (its
    _keep_in_fp32_modules in float32); the rotary buffers turn bfloat16."""
    model.to(torch.bfloat16)
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in model._keep_in_fp32_modules:
            module.float()
    return model


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # its own norms
def test_kandinsky5_compat_is_identical_and_exact_is_close():
    sizes = [((3, 4, 6), (1, 2, 2), 5), ((1, 7, 3), (1, 3.16, 3.16), 9), ((5, 2, 9), (1, 2, 2), 1)]

    def outputs(m, dtype):
        if next(m.parameters()).dtype == torch.bfloat16:  # cast with .to(), it does not run:
            m = _bf16(copy.deepcopy(m))  # its float32 modules back, as from_pretrained keeps them
            return [_out(m, _inputs(*x, dtype=dtype)) for x in sizes]
        out = [t for x in sizes for t in forward(m, _inputs(*x), dtype)]
        if dtype == torch.bfloat16:  # and in bfloat16 as from_pretrained loads it
            out.append(_out(_bf16(copy.deepcopy(m)), _inputs(dtype=dtype)))
        return out

    def exact(original, patched):
        out = _out(patched, _inputs())
        assert torch.isfinite(out).all()
        want = _out(original, _inputs())
        torch.testing.assert_close(out, want, rtol=0, atol=5e-2)  # q, k rounded to bfloat16

    paths = {"text_rope_embeddings": "Kandinsky5RoPE1D",
             "visual_rope_embeddings": "Kandinsky5RoPE3D"}  # fmt: skip
    contract = check_patch_contract(_kandinsky5(), paths, outputs, exact)
    rows = {r.path: r for r in contract.compat.replaced}
    assert rows["text_rope_embeddings"].max_diff > 1e-5  # float32 angles at row 1023


def test_kandinsky5_exact_tables_are_the_float64_ones_rounded_once():
    model = _kandinsky5()
    patch(model)
    pos = [torch.arange(31), torch.arange(64), torch.arange(64)]  # 1024 x 1024, 121 frames
    rope = model.visual_rope_embeddings((2, 31, 64, 64), pos, (1, 3.16, 3.16))
    assert rope.shape == (2, 31, 64, 64, 1, 32, 2, 2)
    grids = np.meshgrid(np.arange(31), np.arange(64) / 3.16, np.arange(64) / 3.16, indexing="ij")
    theta = np.concatenate([g.reshape(-1)[:, None] * np.exp(-np.log(1e4) * np.arange(d // 2)
                                                            / (d // 2))
                            for g, d in zip(grids, (16, 24, 24), strict=True)], axis=1)  # fmt: skip
    cos = rope[1, ..., 0, :, 0, 0].reshape(len(theta), -1).double().numpy()
    sin = rope[1, ..., 0, :, 1, 0].reshape(len(theta), -1).double().numpy()
    for got, want in ((cos, np.cos(theta)), (sin, np.sin(theta))):
        np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-38)
    np.testing.assert_array_equal(rope[..., 0, 1].numpy(), -rope[..., 1, 0].numpy())  # -sin


class _Kandinsky6Rotary(torch.nn.Module):
    """Kandinsky 6's rotary modules and its apply, as the model holds and calls them."""

    def __init__(self):
        super().__init__()
        self.video_text_rope_embeddings = k6.Kandinsky6RoPE1D(128)
        self.audio_rope_embeddings = k6.Kandinsky6RoPE1D(64, freqs_scaling=0.37)
        self.visual_rope_embeddings = k6.Kandinsky6RoPE3D((32, 48, 48))
        self.sr_rope = k6sr.Kandinsky6SRRoPE3D((8, 12, 12))
        self.proj = torch.nn.Linear(128, 128)

    def forward(self, size, scale, text):
        torch.manual_seed(2)
        dtype = self.proj.weight.dtype
        pos = [torch.arange(n) for n in size]
        q = self.proj(torch.randn(*size, 2, 128, dtype=dtype))
        out = [k6.apply_rotary(q, self.visual_rope_embeddings(pos, scale))]
        small = torch.randn(*size, 2, 32, dtype=dtype)
        out.append(k6sr.apply_rotary(small, self.sr_rope(pos, scale)))
        t = torch.arange(text)
        out.append(k6.apply_rotary(q[0, 0, :text], self.video_text_rope_embeddings(t)))
        out.append(k6.apply_rotary(q[0, 0, :text, :, :64], self.audio_rope_embeddings(t)))
        return out


def test_kandinsky6_modules_compat_is_identical_and_exact_is_close():
    sizes = [((3, 5, 4), (1.0, 2.0, 2.0), 4), ((1, 9, 2), (1, 3.16, 3.16), 1),
             ((2, 3, 4), (1, 2, 2), 3)]  # fmt: skip

    def outputs(m, dtype):
        calls = [{"size": size, "scale": scale, "text": text} for size, scale, text in sizes]
        out = [t for x in calls for t in forward(m, x, dtype)]
        if m.proj.weight.dtype == torch.bfloat16:  # the buffers of the original turn bfloat16 too
            assert all(t.dtype == torch.bfloat16 for t in out)
        return out

    def exact(original, patched):
        with torch.no_grad():
            for size, scale, text in sizes[:2]:
                want = original(size, scale, text)
                for a, b in zip(patched(size, scale, text), want, strict=True):
                    torch.testing.assert_close(a, b, rtol=0, atol=1e-4)
        audio = patched.audio_rope_embeddings(torch.arange(2048))  # the scaled frequencies
        theta = np.arange(2048)[:, None] * np.exp(-np.log(1e4) * np.arange(32) / 32) * 0.37
        got = audio[:, 0, :, 1, 0].double().numpy()
        np.testing.assert_array_less(np.abs(got - np.sin(theta)),
                                     6e-8 * np.abs(np.sin(theta)) + 1e-38)  # fmt: skip

    paths = {"video_text_rope_embeddings": "Kandinsky6RoPE1D",
             "audio_rope_embeddings": "Kandinsky6RoPE1D",
             "visual_rope_embeddings": "Kandinsky6RoPE3D",
             "sr_rope": "Kandinsky6SRRoPE3D"}  # fmt: skip
    contract = check_patch_contract(_Kandinsky6Rotary().eval(), paths, outputs, exact)
    audio = {r.path: r for r in contract.compat.replaced}["audio_rope_embeddings"]
    assert "preset='kandinsky6'" in audio.replacement
    assert "freqs_scaling=0.37" in audio.replacement
