"""posenc.torch.patch on small random-weight diffusers transformers with grid rotary modules
(Wan, HunyuanVideo, Cosmos; configs, no download), one test over the three: compat="original"
leaves every output identical (float32, bf16 autocast, a bf16 model, other grid sizes), the
exact patch moves the outputs by float32 noise, the original checkpoint loads with strict=True,
the report names the rotary module, and patching twice is a no-op. Each family's own tests are
in tests/families/test_<record>.py."""

from __future__ import annotations

import copy

import pytest

from tests.families.models import _cosmos, _cosmos_inputs, _hunyuan, _out, _wan, _wan_inputs

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


def _hunyuan_inputs(size=(3, 10, 6)):
    torch.manual_seed(1)
    f, h, w = size
    return {"hidden_states": torch.randn(1, 4, f, h, w), "timestep": torch.tensor([500]),
            "encoder_hidden_states": torch.randn(1, 5, 16),
            "encoder_attention_mask": torch.ones(1, 5),
            "pooled_projections": torch.randn(1, 8)}  # fmt: skip


MODELS = {
    "wan": (_wan, _wan_inputs, "rope", "WanRotaryPosEmbed"),
    "hunyuan-video": (_hunyuan, _hunyuan_inputs, "rope", "HunyuanVideoRotaryPosEmbed"),
    "cosmos": (_cosmos, _cosmos_inputs, "rope", "CosmosRotaryPosEmbed"),
}


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.parametrize("family", sorted(MODELS))
def test_compat_is_identical_and_exact_is_close(family):
    build, inputs_of, path, name = MODELS[family]
    model, inputs = build(), inputs_of()
    before = _out(model, inputs)
    compat = copy.deepcopy(model)
    report = patch(compat, compat="original")
    rows = {r.path: r for r in report.replaced}
    assert rows[path].original == name
    assert rows[path].mode == "compat"
    assert torch.equal(_out(compat, inputs), before)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(_out(compat, inputs), _out(model, inputs))
    bf16, compat16 = copy.deepcopy(model).to(torch.bfloat16), copy.deepcopy(compat)
    compat16.to(torch.bfloat16)
    assert torch.equal(_out(compat16, inputs, torch.bfloat16), _out(bf16, inputs, torch.bfloat16))
    for other in [(3, 6, 4), (1, 2, 14)]:  # other latent sizes, odd ones
        assert torch.equal(_out(compat, inputs_of(other)), _out(model, inputs_of(other)))

    exact = copy.deepcopy(model)
    report = patch(exact)
    assert {r.path: r.mode for r in report.replaced}[path] == "exact"
    torch.testing.assert_close(_out(exact, inputs), before, rtol=0, atol=1e-4)
    exact.load_state_dict(model.state_dict(), strict=True)
    assert not exact.state_dict().keys() - model.state_dict().keys()
    assert len(patch(exact)) == 0
    assert len(patch(compat, compat="original")) == 0
