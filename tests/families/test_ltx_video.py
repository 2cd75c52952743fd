"""LTX-Video (``preset="ltx-video"``): ``compat="diffusers"`` against ``LTXVideoRotaryPosEmbed``
bit for bit, the exact tables within float32 rounding of a float64 reference, the float32-only
evaluator; posenc.torch.patch on a small random-weight LTX-Video transformer (config, no
download): compat="original" leaves the outputs identical, the exact patch moves them by the
original's float32 error only, the checkpoint loads with strict=True, patching twice is a no-op."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests import reference
from tests.families.models import _out, assert_exact
from tests.reference import ltx_rope

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


@pytest.mark.parametrize(
    ("dim", "dims", "fps"),
    [(2048, (16, 22, 40), 25), (2048, (3, 5, 7), 24), (100, (2, 3, 4), 25), (96, (5, 1, 3), 30)],
)
def test_ltx_video(dim, dims, fps):
    """LTX-Video (704 x 1280, 121 frames: 16 x 22 x 40 latents): its one ladder read by three
    axes, coordinates 2c - 1; diffusers' float32 errs by 3.6e-3 (its largest angles sit at
    c = 0), posenc's exact table by one rounding."""
    from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed

    scale = (8 / fps, 32, 32)
    want = LTXVideoRotaryPosEmbed(dim)(torch.zeros(1, 1, 1), *dims,
                                       rope_interpolation_scale=scale)  # fmt: skip
    steps = tuple(2 * s / b for s, b in zip(scale, (20, 2048, 2048), strict=True))
    got = posenc.rope_grid(dims, dim, preset="ltx-video", step=steps, compat="diffusers",
                           dtype=torch.float32)  # fmt: skip
    assert all(torch.equal(g, w[0]) for g, w in zip(got, want, strict=True))
    ref = ltx_rope(dims, dim, steps)
    exact = posenc.rope_grid(dims, dim, preset="ltx-video", step=steps)
    for g, r in zip(exact, ref, strict=True):
        assert_exact(g, r)
    if fps == 25:  # the preset's own coordinates are 25 fps
        default = posenc.rope_grid(dims, dim, preset="ltx-video")
        assert all(np.array_equal(a, b) for a, b in zip(default, exact, strict=True))
    original = max(np.abs(w[0].double().numpy() - r).max() for w, r in zip(want, ref, strict=True))
    assert original > 1e-4  # the float32 angles near pi / 2 * 1e4


def test_ltx_video_float32_only(float32_only):
    steps = (0.032, 0.03125, 0.03125)
    cos, sin = posenc.rope_grid((16, 22, 40), 2048, preset="ltx-video", dtype=torch.float32)
    for got, want in zip((cos, sin), ltx_rope((16, 22, 40), 2048, steps), strict=True):
        assert np.abs(got.double().numpy() - want).max() < 1e-6


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
def test_ltx_video_model():
    torch.manual_seed(0)
    model = diffusers.LTXVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=48,
        cross_attention_dim=96, num_layers=1, caption_channels=16).eval()  # fmt: skip
    f, h, w = 3, 4, 5

    def inputs(**kw):
        torch.manual_seed(1)
        return {"hidden_states": torch.randn(1, f * h * w, 4),
                "encoder_hidden_states": torch.randn(1, 6, 16), "timestep": torch.tensor([500]),
                "encoder_attention_mask": torch.ones(1, 6), "num_frames": f, "height": h,
                "width": w, **kw}  # fmt: skip

    axes = (torch.arange(f) * 8.0, torch.arange(h) * 32.0, torch.arange(w) * 32.0)
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij")).flatten(1)[None]  # [1, 3, N]
    calls = [inputs(**kw) for kw in (
        {"rope_interpolation_scale": (8 / 25, 32, 32)},
        {"rope_interpolation_scale": (8 / 24, 32, 32)},
        {"video_coords": coords},
    )]  # fmt: skip

    def outputs(m, dtype):
        for x in calls:
            yield from forward(m, x, dtype)
        # no rope_interpolation_scale: diffusers leaves the grid unscaled (c = i)
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            yield from m.rope(torch.zeros(1, dtype=dtype), 3, 4, 5, rope_interpolation_scale=None)

    def exact(original, patched):
        for x in calls:
            assert torch.isfinite(_out(patched, x)).all()
            # the original's tables are 1e-3 off (its float32 angles reach 15708 rad): the
            # outputs move by about that much, far from a wrong table's O(1)
            torch.testing.assert_close(_out(patched, x), _out(original, x), rtol=0, atol=5e-2)
        cos, sin = patched.rope(torch.zeros(1), 16, 22, 40,
                                rope_interpolation_scale=(8 / 25, 32, 32))  # fmt: skip
        want = reference.ltx_rope((16, 22, 40), 96, (0.032, 0.03125, 0.03125))
        for g, w64 in zip((cos[0], sin[0]), want, strict=True):
            np.testing.assert_array_less(np.abs(g.double().numpy() - w64),
                                         6e-8 * np.abs(w64) + 1e-38)  # fmt: skip
        cos, sin = patched.rope(torch.zeros(1), 3, 4, 5, rope_interpolation_scale=None)
        want = reference.ltx_rope((3, 4, 5), 96, (2.0, 2.0, 2.0))  # 2c - 1 = -1 + 2i
        for g, w64 in zip((cos[0], sin[0]), want, strict=True):
            np.testing.assert_array_less(np.abs(g.double().numpy() - w64),
                                         6e-8 * np.abs(w64) + 1e-38)  # fmt: skip

    paths = {"rope": "LTXVideoRotaryPosEmbed", "time_embed.emb.time_proj": "Timesteps"}
    done = check_patch_contract(model, paths, outputs, exact)
    rows = {r.path: r for r in done.compat.replaced}
    assert rows["rope"].max_diff > 1e-4  # float32 angles near pi / 2 * 1e4 at c = 0
