"""posenc.torch.patch on small random-weight diffusers transformers with grid rotary modules
(Wan, HunyuanVideo, Cosmos; configs, no download), one test over the three: compat="original"
leaves every output identical (float32, bf16 autocast, a bf16 model, other grid sizes), the
exact patch moves the outputs by float32 noise, the original checkpoint loads with strict=True,
the report names the rotary module (and the Timesteps), and patching twice is a no-op
(tests/contract.py). Each family's own tests are in tests/families/test_<record>.py."""

from __future__ import annotations

import pytest

from tests.families.models import _cosmos, _cosmos_inputs, _hunyuan, _wan, _wan_inputs

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


def _hunyuan_inputs(size=(3, 10, 6)):
    torch.manual_seed(1)
    f, h, w = size
    return {"hidden_states": torch.randn(1, 4, f, h, w), "timestep": torch.tensor([500]),
            "encoder_hidden_states": torch.randn(1, 5, 16),
            "encoder_attention_mask": torch.ones(1, 5),
            "pooled_projections": torch.randn(1, 8)}  # fmt: skip


MODELS = {  # build, inputs, the rotary module's path and class, the Timesteps' paths
    "wan": (_wan, _wan_inputs, "rope", "WanRotaryPosEmbed", ["condition_embedder.timesteps_proj"]),
    "hunyuan-video": (_hunyuan, _hunyuan_inputs, "rope", "HunyuanVideoRotaryPosEmbed",
                      ["time_text_embed.time_proj", "context_embedder.time_text_embed.time_proj"]),
    "cosmos": (_cosmos, _cosmos_inputs, "rope", "CosmosRotaryPosEmbed", ["time_embed.time_proj"]),
}  # fmt: skip


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.parametrize("family", sorted(MODELS))
def test_compat_is_identical_and_exact_is_close(family):
    build, inputs_of, path, name, timesteps = MODELS[family]
    model, inputs = build(), inputs_of()

    def outputs(m, dtype):
        yield from forward(m, inputs, dtype)
        for other in [(3, 6, 4), (1, 2, 14)]:  # other latent sizes, odd ones
            yield from forward(m, inputs_of(other), dtype)

    def exact(original, patched):
        want = forward(original, inputs, torch.float32)
        torch.testing.assert_close(forward(patched, inputs, torch.float32), want, rtol=0, atol=1e-4)

    paths = {path: name, **dict.fromkeys(timesteps, "Timesteps")}
    check_patch_contract(model, paths, outputs, exact)
