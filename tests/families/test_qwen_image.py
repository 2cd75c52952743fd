"""Qwen-Image and the models on its formula (Qwen-Image-Layered, NucleusMoE-Image, Qwen-Image
2.1): ``compat="diffusers"`` against ``QwenEmbedRope`` bit for bit (complex tables, rows and
columns centred), its text rows as posenc.rope of their ids; posenc.torch.patch on a small
random-weight transformer (config, no download) and on the rotary modules: compat="original"
leaves every output identical, the exact tables are the float64 ones rounded once (an edit's
second image, Qwen-Image 2.1's joint sequence, Layered's and NucleusMoE's positions)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.families.models import _m, _root, assert_exact
from tests.families.models import assert_rounded_once as _exact
from tests.reference import axial_rope

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from tests.contract import assert_outputs_close, check_patch_contract, forwards  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize("fhw", [(1, 83, 83), (1, 64, 48), (1, 7, 5), (3, 4, 6)])
def test_qwen_image(fhw):
    """Qwen-Image: complex64 tables (the compact layout as torch.complex), rows and columns
    centred on 0 (1328 x 1328: 83 x 83 patches)."""
    from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope

    module = QwenEmbedRope(10000, [16, 56, 56], scale_rope=True)
    video, _ = module([fhw], device=torch.device("cpu"), max_txt_seq_len=4)
    cos, sin = posenc.rope_grid(fhw, 128, preset="qwen-image", layout="compact",
                                compat="diffusers", dtype=torch.float32)  # fmt: skip
    assert torch.equal(torch.complex(cos, sin), video)
    f, h, w = fhw
    positions = [np.arange(f), np.arange(h) - (h - h // 2), np.arange(w) - (w - w // 2)]
    ref = axial_rope(fhw, (16, 56, 56), 1e4, (0, 1, 2), positions)
    for got, want in zip(posenc.rope_grid(fhw, 128, preset="qwen-image"), ref, strict=True):
        assert_exact(got, want)


def test_qwen_image_text_rows_are_a_diagonal():
    """Qwen-Image's text token k sits at m + k on all three axes (m: the largest half side of
    the images), a diagonal that no grid holds: posenc.rope of those ids gives the rows
    exactly; diffusers' are float32 angles (patch's stand-in repeats them)."""
    from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope

    module = QwenEmbedRope(10000, [16, 56, 56], scale_rope=True)
    _, text = module([(1, 12, 20)], device=torch.device("cpu"), max_txt_seq_len=7)
    ids = np.repeat(10 + np.arange(7)[:, None], 3, axis=1)  # m = max(12 // 2, 20 // 2)
    cos, sin = posenc.rope(ids, 128, preset="qwen-image", layout="compact")
    ref = axial_rope((7,), (16, 56, 56), 1e4, (0, 0, 0), [10 + np.arange(7)])
    for got, want in zip((cos, sin), ref, strict=True):
        assert_exact(got, want[:, ::2])
    assert np.abs(text.real.double().numpy() - cos).max() < 1e-6  # float32 angles


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def test_qwen_image_model():
    torch.manual_seed(0)
    model = diffusers.QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=1, attention_head_dim=128,
        num_attention_heads=1, joint_attention_dim=16,
        axes_dims_rope=(16, 56, 56)).eval()  # fmt: skip

    def inputs(shapes, text=7):
        torch.manual_seed(1)
        tokens = sum(f * h * w for f, h, w in shapes)
        return {"hidden_states": torch.randn(1, tokens, 16),
                "encoder_hidden_states": torch.randn(1, text, 16),
                "encoder_hidden_states_mask": torch.ones(1, text),
                "timestep": torch.tensor([0.5]), "img_shapes": [list(shapes)]}  # fmt: skip

    images = ([(1, 6, 10)], [(1, 5, 7), (1, 4, 4)])  # an edit: a second image at t = 1
    calls = [inputs(shapes) for shapes in images]

    def exact(original, patched):
        assert_outputs_close(original, patched, calls, atol=1e-4)
        video, text = patched.pos_embed([(1, 83, 83)], device=torch.device("cpu"),
                                        max_txt_seq_len=9)  # fmt: skip
        m = 83 // 2
        side = np.arange(83) - 42  # centred: -42 … 40
        image = np.stack(np.meshgrid([0], side, side, indexing="ij"), -1).reshape(-1, 3)
        ids = np.concatenate([image, np.repeat(np.arange(m, m + 9)[:, None], 3, 1)])
        theta = np.concatenate([ids[:, [a]] * 1e4 ** (-np.arange(0, d, 2) / d)
                                for a, d in enumerate((16, 56, 56))], axis=1)  # fmt: skip
        got = torch.cat([video, text]).numpy()
        for part, want in ((got.real, np.cos(theta)), (got.imag, np.sin(theta))):
            np.testing.assert_array_less(np.abs(part - want), 6e-8 * np.abs(want) + 1e-38)

    paths = {"pos_embed": "QwenEmbedRope", "time_text_embed.time_proj": "Timesteps"}
    done = check_patch_contract(model, paths, forwards(calls), exact)
    rows = {r.path: r for r in done.compat.replaced}
    assert rows["pos_embed"].max_diff > 1e-5  # float32 angles at text rows near 1065


def _centred(h, w):
    """Qwen-Image's centred rows and columns, row by row: -(n - n // 2) … n // 2 - 1."""
    return [(r, c) for r in range(-(h - h // 2), h // 2) for c in range(-(w - w // 2), w // 2)]


def _qwen21_ids(shapes, mask):
    """Each token's (t, h, w) from QwenImage21Rope's rule, in NumPy: text advances one
    position on all axes, an image block sits at the position reached (rows and columns
    centred) and moves it on by max(H, W)."""
    ids, pos, i = [], 0, 0
    for _, h, w in shapes:
        while not mask[i]:
            ids.append((pos, pos, pos))
            pos, i = pos + 1, i + 1
        ids += [(pos, r, c) for r, c in _centred(h, w)]
        pos, i = pos + max(h, w), i + h * w
    ids += [(pos + j, pos + j, pos + j) for j in range(len(mask) - i)]
    return np.array(ids, dtype=np.float64)


def _complex_reference(ids, axes, base=1e4):
    theta = np.concatenate([ids[:, [a]] * base ** (-np.arange(0, d, 2) / d)
                            for a, d in enumerate(axes)], axis=1)  # fmt: skip
    return np.cos(theta), np.sin(theta)


def _tables(rope, dtype, *args, **kwargs):
    """A rotary module's tables, ``rope(*args, **kwargs)``, under CPU autocast for bfloat16."""
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        return rope(*args, **kwargs)


def test_qwen_image_21_joint_sequence():
    module = _m("transformer_qwenimage21").QwenImage21Rope(10000, [16, 56, 56])
    blocks = [(1, 5, 6), (1, 3, 4)]
    mask = torch.zeros(5 + 30 + 4 + 12 + 3, dtype=torch.bool)
    mask[5:35], mask[39:51] = True, True
    cases = [(blocks, mask), ([(1, 83, 83)], torch.arange(6889 + 40) >= 40)]

    def outputs(m, dtype):
        for shapes, mask in cases:
            yield _tables(m.rope, dtype, shapes, mask, torch.device("cpu"))

    def exact(original, patched):
        for shapes, mask in cases:
            got = patched.rope(shapes, mask, torch.device("cpu"))
            want = _complex_reference(_qwen21_ids(shapes, mask.tolist()), (16, 56, 56))
            _exact(got.real, want[0])
            _exact(got.imag, want[1])

    done = check_patch_contract(_root(module), {"rope": "QwenImage21Rope"}, outputs, exact)
    (row,) = done.compat
    assert row.max_diff > 1e-6  # float32 angles


@pytest.mark.parametrize("variant", ["layered", "nucleus"])
def test_qwen_variants_positions(variant):
    """Layered: layers at frames 0, 1, …, the condition image at -1, the text after
    max(H // 2, W // 2, layers); NucleusMoE: the text after the last image's half-side."""
    if variant == "layered":
        module = _m("transformer_qwenimage").QwenEmbedLayer3DRope(10000, [16, 56, 56], True)
        shapes, frames = [(1, 6, 10), (1, 6, 10), (1, 6, 10)], [0, 1, -1]
        text_start = 5
    else:
        module = _m("transformer_nucleusmoe_image").NucleusMoEEmbedRope(10000, [16, 56, 56], True)
        shapes, frames = [(1, 12, 10), (1, 4, 6)], [0, 1]
        text_start = 3  # the last image's, not the largest

    def outputs(m, dtype):
        return _tables(m.rope, dtype, [shapes], max_txt_seq_len=9, device=torch.device("cpu"))

    def exact(original, patched):
        video, text = patched.rope([shapes], max_txt_seq_len=9, device=torch.device("cpu"))
        ids = []
        for t, (_, h, w) in zip(frames, shapes, strict=True):
            ids += [(t, r, c) for r, c in _centred(h, w)]
        ids += [(p, p, p) for p in range(text_start, text_start + 9)]
        want = _complex_reference(np.array(ids, dtype=np.float64), (16, 56, 56))
        got = torch.cat([video, text])
        _exact(got.real, want[0])
        _exact(got.imag, want[1])

    check_patch_contract(_root(module), {"rope": type(module).__name__}, outputs, exact)
