"""posenc.torch.patch on small random-weight diffusers transformers of the families that share
Wan's, HunyuanVideo's, CogVideoX's or Qwen-Image's formula (HunyuanImage-2.1, ChronoEdit,
EasyAnimate, Sana-Video, Qwen-Image-Layered, NucleusMoE-Image; configs, no download), one test
over all of them: compat="original" leaves every output identical (float32, bfloat16
activations, a bfloat16 model, other sizes), the exact patch moves the outputs by float32 noise,
the original checkpoint loads with strict=True, the report names the rotary module (and the
Timesteps), and patching twice is a no-op (tests/contract.py); and what the stand-ins do not
cover is said (AnyFlow FAR's pools of 8 rows, Qwen-Image 2.1's rows past 8191, the text length
Qwen-Image-Layered's stand-in needs). Each family's own tests are in
tests/families/test_<record>.py."""

from __future__ import annotations

import pytest

from tests.families.models import VIDEO_MODELS as MODELS
from tests.families.models import _m, _patched, _root

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from posenc.errors import PosencError  # noqa: E402
from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


TIMESTEPS = {  # the Timesteps the patch replaces besides each family's rotary module
    "hunyuan-image": ["time_guidance_embed.time_proj",
                      "context_embedder.time_text_embed.time_proj"],
    "chronoedit": ["condition_embedder.timesteps_proj"],
    "easyanimate": ["time_proj"],
    "sana-video": ["time_embed.emb.time_proj"],
    "qwen-image-layered": ["time_text_embed.time_proj"],
    "nucleusmoe-image": ["time_text_embed.time_proj"],
}  # fmt: skip


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.parametrize("family", sorted(MODELS))
def test_compat_is_identical_and_exact_is_close(family):
    build, inputs_of, others, path, name = MODELS[family]
    torch.manual_seed(0)
    model, inputs = build().eval(), inputs_of()

    def outputs(m, dtype):
        yield from forward(m, inputs, dtype)
        for other in others:  # other sizes, odd ones
            yield from forward(m, inputs_of(other), dtype)

    def exact(original, patched):
        want = forward(original, inputs, torch.float32)
        torch.testing.assert_close(forward(patched, inputs, torch.float32), want, rtol=0, atol=1e-4)

    paths = {path: name, **dict.fromkeys(TIMESTEPS[family], "Timesteps")}
    check_patch_contract(model, paths, outputs, exact)


def test_what_is_not_covered_is_said():
    """A pool of 8 rows is no rotation at their centre; Qwen-Image 2.1's table ends at 8191;
    the Layered and NucleusMoE stand-ins need the text length, as the originals do."""
    far = _m("transformer_anyflow_far").AnyFlowCausalRotaryPosEmbed(48, (1, 2, 2), (1, 16, 16), 64)
    (row,) = patch(_root(far))
    assert not row.replaced
    assert "compressed_patch_size" in row.note
    assert "(1, 8, 8)" in row.note
    q21 = _patched(_m("transformer_qwenimage21").QwenImage21Rope(10000, [16, 56, 56]), "original")
    mask = torch.arange(8300) >= 8299  # 8299 text tokens, then a 1 x 1 image
    with pytest.raises(PosencError, match=r"-1024 … 8191.*8299"):
        q21([(1, 1, 1)], mask, torch.device("cpu"))
    exact = _patched(_m("transformer_qwenimage21").QwenImage21Rope(10000, [16, 56, 56]), None)
    assert torch.isfinite(torch.view_as_real(exact([(1, 1, 1)], mask, "cpu"))).all()
    layered = _m("transformer_qwenimage").QwenEmbedLayer3DRope(10000, [16, 56, 56], True)
    with pytest.raises(PosencError, match="`max_txt_seq_len`"):
        _patched(layered, None)([(1, 4, 4)], device=torch.device("cpu"))
