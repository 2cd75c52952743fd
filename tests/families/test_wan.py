"""Wan and the models on its rotary module (ChronoEdit, Sana-Video, Wan-Animate, Helios,
SANA-WM, AnyFlow): ``compat="diffusers"`` and ``"diffusers-mps"`` against ``WanRotaryPosEmbed``
bit for bit within the rows it keeps, the exact tables within float32 rounding of a float64
reference; posenc.torch.patch on a small random-weight Wan transformer on an MPS host and on the
rotary modules: compat="original" leaves every output identical (bfloat16 too), the exact tables
are the float64 ones rounded once (ChronoEdit's edit rows and theta, Helios's frame indices, the
complex tables, FAR's pooled rows); the forms left alone, saying why."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests import reference
from tests.families.models import VIDEO_MODELS as MODELS
from tests.families.models import _chronoedit, _m, _out, _patched, _root, _wan_inputs, assert_exact
from tests.families.models import assert_rounded_once as _exact
from tests.reference import axial_rope

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers import (  # noqa: E402
    transformer_wan,
)

from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize(
    ("frames", "height", "width"),
    [(21, 45, 80), (1, 7, 5), (3, 30, 52)],  # 720p x 81 frames; an image; odd sizes
)
@pytest.mark.parametrize("head", [128, 64, 40])
def test_wan(frames, height, width, head):
    module = transformer_wan.WanRotaryPosEmbed(head, (1, 2, 2), 1024)
    hidden = torch.zeros(1, 1, frames, 2 * height, 2 * width)
    want_cos, want_sin = (t[0, :, 0] for t in module(hidden))  # [1, S, 1, D]
    cos, sin = posenc.rope_grid((frames, height, width), head, preset="wan", compat="diffusers",
                                dtype=torch.float32)  # fmt: skip
    assert torch.equal(cos, want_cos)
    assert torch.equal(sin, want_sin)
    side = 2 * (head // 6)
    axes = (head - 2 * side, side, side)
    ref = axial_rope((frames, height, width), axes, 1e4, (0, 1, 2),
                    [np.arange(n) for n in (frames, height, width)])  # fmt: skip
    for got, want in zip(posenc.rope_grid((frames, height, width), head, preset="wan"), ref,
                         strict=True):  # fmt: skip
        assert_exact(got, want)


def test_wan_on_a_host_with_mps(monkeypatch):
    """Wan's tables are float32 on a host with MPS, on the CPU too: compat 'diffusers-mps'."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    module = transformer_wan.WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    hidden = torch.zeros(1, 1, 21, 90, 160)
    want = [t[0, :, 0] for t in module(hidden)]
    got = posenc.rope_grid((21, 45, 80), 128, preset="wan", compat="diffusers-mps",
                           dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    ref = axial_rope((21, 45, 80), (44, 42, 42), 1e4, (0, 1, 2), [np.arange(21),
                    np.arange(45), np.arange(80)])  # fmt: skip
    mps_error = max(np.abs(w.double().numpy() - r).max() for w, r in zip(want, ref, strict=True))
    assert mps_error > 1e-6  # the float32 angles' error (2.6e-6 in the catalogue)
    for g, r in zip(posenc.rope_grid((21, 45, 80), 128, preset="wan"), ref, strict=True):
        assert_exact(g, r)


def test_wan_on_a_host_with_mps_keeps_the_same_rows():
    with pytest.raises(PosencError, match="rows 0 … 1023"):
        posenc.rope_grid((1, 1025, 1), 128, preset="wan", compat="diffusers-mps")
    cos, _ = posenc.rope_grid((1, 1024, 1), 128, preset="wan", compat="diffusers-mps")
    assert cos.shape == (1024, 128)


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
def test_wan_model_on_a_host_with_mps(monkeypatch):
    """On an Apple machine diffusers builds Wan's tables in float32 even on the CPU: compat
    repeats that; the exact patch replaces them by the float64 ones."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    model = diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=48, in_channels=4,
        out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=1).eval()  # fmt: skip
    inputs = _wan_inputs((3, 8, 8))

    def outputs(m, dtype):
        return forward(m, inputs, dtype)

    def exact(original, patched):
        cos = patched.rope(torch.zeros(1, 4, 21, 90, 160))[0][0, :, 0]
        want, _ = posenc.rope_grid((21, 45, 80), 48, preset="wan", dtype=np.float64)
        np.testing.assert_array_less(
            np.abs(cos.double().numpy() - want), 6e-8 * np.abs(want) + 1e-38
        )

    paths = {"rope": "WanRotaryPosEmbed", "condition_embedder.timesteps_proj": "Timesteps"}
    contract = check_patch_contract(model, paths, outputs, exact)
    (row,) = [r for r in contract.compat if r.path == "rope"]
    assert row.max_diff > 1e-6  # float32 angles over rows 0 … 1023


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.parametrize("family", ["chronoedit", "sana-video"])
def test_wan_form_in_bfloat16(family):
    """Wan's float32 buffers follow .to(bfloat16): so do the stand-ins' tables."""
    build, inputs_of, _, _, _ = MODELS[family]
    torch.manual_seed(0)
    model = build().eval()
    compat = copy.deepcopy(model)
    patch(compat, compat="original")
    inputs = inputs_of()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(_out(compat, inputs), _out(model, inputs))
    bf16 = {k: v.to(torch.bfloat16) if k == "hidden_states" else v for k, v in inputs.items()}
    bf16["encoder_hidden_states"] = bf16["encoder_hidden_states"].to(torch.bfloat16)
    model.to(torch.bfloat16)
    compat.to(torch.bfloat16)
    assert torch.equal(_out(compat, bf16), _out(model, bf16))


def test_chronoedit_edits_read_frame_rows_0_and_skip():
    """2 latent frames (input and edit) take the frame rows 0 and temporal_skip_len - 1 = 7."""
    torch.manual_seed(0)
    model = _chronoedit().eval()
    patch(model)
    cos, sin = model.rope(torch.zeros(1, 4, 2, 90, 160))  # 2 frames of 720p: 2 x 45 x 80
    want = reference.axial_rope((2, 45, 80), (8, 8, 8), 1e4, (0, 1, 2),
                                [np.array([0, 7]), np.arange(45), np.arange(80)])  # fmt: skip
    _exact(cos[0, :, 0], want[0])
    _exact(sin[0, :, 0], want[1])


def test_chronoedit_whose_split_differs_is_left_alone():
    """d % 6 = 4: ChronoEdit's forward splits its tables at d // 3, not at their blocks."""
    root = torch.nn.Module()
    root.rope = _m("transformer_chronoedit").ChronoEditRotaryPosEmbed(64, (1, 2, 2), 32)
    (row,) = patch(root, compat="original")
    assert not row.replaced
    assert "splits the head 64 at 21" in row.note


def test_wan_animate_rope_is_wans():
    module = _m("transformer_wan_animate").WanRotaryPosEmbed(48, (1, 2, 2), 1024)
    sizes = [(21, 90, 160), (3, 6, 10)]  # 720p, 81 frames

    def outputs(m, dtype):
        for size in sizes:
            yield from m.rope(torch.zeros(1, 4, *size, dtype=dtype))

    def exact(original, patched):
        for size in sizes:
            got = patched.rope(torch.zeros(1, 4, *size))[0][0, :, 0]
            f, h, w = size[0], size[1] // 2, size[2] // 2
            want = reference.axial_rope((f, h, w), (16, 16, 16), 1e4, (0, 1, 2),
                                        [np.arange(n) for n in (f, h, w)])  # fmt: skip
            _exact(got, want[0])

    contract = check_patch_contract(_root(module), {"rope": "WanRotaryPosEmbed"}, outputs, exact)
    (row,) = contract.compat
    assert (row.original, row.mode, row.max_diff) == ("WanRotaryPosEmbed", "compat", 0.0)


def test_helios_frames_at_their_indices_per_batch_item():
    module = _m("transformer_helios").HeliosRotaryPosEmbed((16, 56, 56), 10000.0)
    frames = torch.tensor([[0, 1, 2, 9], [3, 4, 5, 40]])
    args = (frames, 6, 10, torch.device("cpu"))

    def outputs(m, dtype):  # frame indices and sizes: no activations to cast
        yield m.rope(*args)

    def exact(original, patched):
        got = patched.rope(*args)
        assert got.shape == (2, 256, 4, 6, 10)
        for b in range(2):
            positions = [frames[b].numpy(), np.arange(6), np.arange(10)]
            cos, sin = reference.axial_rope((4, 6, 10), (16, 56, 56), 1e4, (0, 1, 2), positions)
            want = np.concatenate([cos, sin], axis=1).reshape(4, 6, 10, -1).transpose(3, 0, 1, 2)
            _exact(got[b], want)

    check_patch_contract(_root(module), {"rope": "HeliosRotaryPosEmbed"}, outputs, exact)


@pytest.mark.parametrize("family", ["sana-wm", "anyflow"])
def test_complex_wan_tables(family):
    """SANA-WM: complex64 rows of float32 angles; AnyFlow: complex128 of float64 ones."""
    if family == "sana-wm":
        module = _m("transformer_sana_wm").SanaWMRotaryPosEmbed(48, (1, 2, 2), 1024)

        def call(mod, fhw):
            return mod(fhw, device=torch.device("cpu"))[0, 0]
    else:
        module = _m("transformer_anyflow").AnyFlowRotaryPosEmbed(48, (1, 2, 2), 1024)

        def call(mod, fhw):
            cfg = {"total_frames": fhw[0], "full_frame_shape": fhw[1:]}
            return mod(layout_cfg=cfg, device=torch.device("cpu"))["query"][0, 0]

    sizes = [(21, 30, 52), (3, 5, 1)]

    def outputs(m, dtype):  # grid sizes: no activations to cast
        for fhw in sizes:
            yield call(m.rope, fhw)

    def exact(original, patched):
        for fhw in sizes:
            got = call(patched.rope, fhw)
            cos, sin = reference.axial_rope(fhw, (16, 16, 16), 1e4, (0, 1, 2),
                                            [np.arange(n) for n in fhw])  # fmt: skip
            if family == "sana-wm":
                assert got.dtype == torch.complex64
                _exact(got.real, cos[:, ::2])
                _exact(got.imag, sin[:, ::2])
            else:  # float64 tables: the reference's own float64 angles (up to 51 rad) err by 1e-14
                assert got.dtype == torch.complex128
                np.testing.assert_allclose(got.real.numpy(), cos[:, ::2], rtol=0, atol=2e-14)
                np.testing.assert_allclose(got.imag.numpy(), sin[:, ::2], rtol=0, atol=2e-14)

    check_patch_contract(_root(module), {"rope": type(module).__name__}, outputs, exact)


def test_sana_wm_with_another_split_is_left_alone():
    module = _m("transformer_sana_wm").SanaWMRotaryPosEmbed(48, (1, 2, 2), 64, fhw_dim=(8, 20, 20))
    (row,) = patch(_root(module), compat="original")
    assert not row.replaced
    assert "fhw_dim (8, 20, 20)" in row.note
    assert "Wan's split (16, 16, 16)" in row.note


@pytest.mark.parametrize("compressed", [(1, 4, 4), (4, 8, 8)])
def test_anyflow_far_pooled_rows_are_rotations_at_their_centres(compressed):
    """FAR's context frames average k rows of complex rotations and scale the mean back to
    modulus 1: the rotation at the rows' centre j k + (k - 1) / 2, checked in float64."""
    far = _m("transformer_anyflow_far")
    module = far.AnyFlowCausalRotaryPosEmbed(48, (1, 2, 2), compressed, 1024)
    cfg = {"total_frames": 7, "num_compressed_frames": 3, "full_frame_shape": (6, 10),
           "compressed_frame_shape": (3, 5)}  # fmt: skip

    def outputs(m, dtype):
        for clean in (None, torch.zeros(1, dtype=dtype)):
            yield m.rope(cfg, torch.device("cpu"), clean)["query"]

    def exact(original, patched):
        got = patched.rope(cfg, torch.device("cpu"))["key"][0, 0]
        k = [c // p for c, p in zip(compressed, (1, 2, 2), strict=True)]
        small = [(kk - 1) / 2 + kk * np.arange(n) for kk, n in zip(k, (3, 3, 5), strict=True)]
        parts = [
            reference.axial_rope((3, 3, 5), (16, 16, 16), 1e4, (0, 1, 2), small),
            reference.axial_rope((4, 6, 10), (16, 16, 16), 1e4, (0, 1, 2),
                                 [np.arange(3, 7), np.arange(6), np.arange(10)]),
        ]  # fmt: skip
        for part, want in zip((got.real, got.imag), zip(*parts, strict=True), strict=True):
            want = np.concatenate([w[:, ::2] for w in want])
            np.testing.assert_allclose(part.numpy(), want, rtol=0, atol=2e-14)

    check_patch_contract(_root(module), {"rope": "AnyFlowCausalRotaryPosEmbed"}, outputs, exact)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chronoedit_theta_is_read_from_its_buffers(dtype):
    """ChronoEdit keeps no theta: the one its buffers hold (500 here) is read back from them,
    float32 or cast to bfloat16, not replaced by 10000's tables."""
    chrono = _m("transformer_chronoedit")
    module = chrono.ChronoEditRotaryPosEmbed(24, (1, 2, 2), 64, theta=500.0).to(dtype)
    (row,) = patch(_root(copy.deepcopy(module)))
    assert "base=500" in row.replacement
    every = (2, 5)  # an edit (frame rows 0 and 7), and a video

    def outputs(m, activations):
        for frames in every:
            yield from m.rope(torch.zeros(1, 4, frames, 6, 10, dtype=activations))

    def exact(original, patched):
        for frames in every:
            x = torch.zeros(1, 4, frames, 6, 10)
            rows = np.array([0, 7]) if frames == 2 else np.arange(frames)
            want = reference.axial_rope((frames, 3, 5), (8, 8, 8), 500.0, (0, 1, 2),
                                        [rows, np.arange(3), np.arange(5)])  # fmt: skip
            for got, w in zip(patched.rope(x), want, strict=True):
                assert got.dtype == dtype
                if dtype == torch.float32:
                    _exact(got[0, :, 0], w)
                else:  # rounded once to bfloat16: within half its ulp
                    err = np.abs(got[0, :, 0].double().numpy() - w)
                    np.testing.assert_array_less(err, 2.0**-8 * np.abs(w) + 1e-12)

    check_patch_contract(_root(module), {"rope": "ChronoEditRotaryPosEmbed"}, outputs, exact)


def test_chronoedit_of_no_readable_theta_is_left_alone():
    chrono = _m("transformer_chronoedit")
    module = chrono.ChronoEditRotaryPosEmbed(24, (1, 2, 2), 64, theta=1234.56)
    (row,) = patch(_root(module), compat="original")
    assert not row.replaced
    assert "keeps no theta" in row.note


def test_sana_wm_theta_is_read_from_its_table():
    module = _m("transformer_sana_wm").SanaWMRotaryPosEmbed(48, (1, 2, 2), 64, theta=500.0)
    sizes = [(3, 5, 7), (1, 6, 2)]

    def outputs(m, dtype):  # grid sizes: no activations to cast
        for fhw in sizes:
            yield m.rope(fhw, torch.device("cpu"))
            yield m.rope(fhw, device=torch.device("cpu"))  # the keyword form too

    def exact(original, patched):
        for fhw in sizes:
            got = patched.rope(fhw, device=torch.device("cpu"))[0, 0]
            cos, sin = reference.axial_rope(fhw, (16, 16, 16), 500.0, (0, 1, 2),
                                            [np.arange(n) for n in fhw])  # fmt: skip
            _exact(got.real, cos[:, ::2])
            _exact(got.imag, sin[:, ::2])

    check_patch_contract(_root(module), {"rope": "SanaWMRotaryPosEmbed"}, outputs, exact)


@pytest.mark.parametrize("cast_first", [False, True])
def test_helios_buffers_follow_bfloat16(cast_first):
    """Helios's frequency buffers follow .to(bfloat16), before or after the patch: so do the
    compat stand-in's."""
    module = _m("transformer_helios").HeliosRotaryPosEmbed((44, 42, 42), 10000.0)
    cast = copy.deepcopy(module).to(torch.bfloat16)
    compat = _patched(cast if cast_first else module, "original").to(torch.bfloat16)
    args = (torch.tensor([[0, 3, 7, 300]]), 5, 7, torch.device("cpu"))
    assert torch.equal(compat(*args), cast(*args))
    assert not torch.equal(cast(*args), module(*args))  # the rounded ladders show
