"""posenc.torch.patch on small random-weight diffusers transformers with id rotary modules
(HiDream, PRX, Ernie-Image, Krea2, Bria, Bria-FIBO; configs, no download): compat="original"
leaves every output identical (float32, bf16 autocast, a bf16 model, other image sizes), the
exact patch moves the outputs by float32 noise, the original checkpoint loads with
strict=True, the report names the rotary module, and patching twice is a no-op; the exact
stand-ins hold the float64 values rounded once (HiDream's and PRX's rotation matrices,
Ernie-Image's angles)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers import (  # noqa: E402
    transformer_bria,
    transformer_ernie_image,
    transformer_hidream_image,
    transformer_prx,
)

from posenc.errors import PosencError  # noqa: E402
from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


def _ids(h, w, text=0):
    """``[text + h * w, 3]`` float32 ids: text all zero, then ``(0, row, col)``."""
    img = torch.zeros(h * w, 3)
    img[:, 1] = torch.arange(h).repeat_interleave(w)
    img[:, 2] = torch.arange(w).repeat(h)
    return torch.cat([torch.zeros(text, 3), img])


def _hidream():
    return diffusers.HiDreamImageTransformer2DModel(
        patch_size=2, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, caption_channels=[8, 8], text_emb_dim=8, num_routed_experts=2,
        num_activated_experts=1, axes_dims_rope=(4, 6, 6), max_resolution=(16, 16),
        llama_layers=[0, 1])  # fmt: skip


def _hidream_inputs(h, w):
    return {"hidden_states": torch.randn(1, 4, 2 * h, 2 * w), "timesteps": torch.tensor([500]),
            "encoder_hidden_states_t5": torch.randn(1, 5, 8),
            "encoder_hidden_states_llama3": torch.randn(2, 1, 4, 8),
            "pooled_embeds": torch.randn(1, 8)}  # fmt: skip


def _prx():
    return diffusers.PRXTransformer2DModel(
        in_channels=4, patch_size=2, context_in_dim=16, hidden_size=64, mlp_ratio=2.0,
        num_heads=2, depth=1, axes_dim=[16, 16])  # fmt: skip


def _prx_inputs(h, w):
    return {"hidden_states": torch.randn(1, 4, 2 * h, 2 * w), "timestep": torch.tensor([500.0]),
            "encoder_hidden_states": torch.randn(1, 5, 16)}  # fmt: skip


def _ernie():
    return diffusers.ErnieImageTransformer2DModel(
        hidden_size=64, num_attention_heads=2, num_layers=1, ffn_hidden_size=64, in_channels=4,
        out_channels=4, patch_size=1, text_in_dim=16, rope_axes_dim=(8, 12, 12))  # fmt: skip


def _ernie_inputs(h, w):
    return {"hidden_states": torch.randn(2, 4, h, w), "timestep": torch.tensor([500.0, 300.0]),
            "text_bth": torch.randn(2, 6, 16), "text_lens": torch.tensor([6, 4])}  # fmt: skip


def _krea2():
    return diffusers.Krea2Transformer2DModel(
        in_channels=8, num_layers=1, attention_head_dim=32, num_attention_heads=2,
        num_key_value_heads=1, intermediate_size=32, timestep_embed_dim=16, text_hidden_dim=16,
        num_text_layers=2, text_num_attention_heads=2, text_num_key_value_heads=2,
        text_intermediate_size=32, num_layerwise_text_blocks=1, num_refiner_text_blocks=1,
        axes_dims_rope=(8, 12, 12))  # fmt: skip


def _krea2_inputs(h, w):
    return {
        "hidden_states": torch.randn(1, h * w, 8),
        "timestep": torch.tensor([0.5]),
        "encoder_hidden_states": torch.randn(1, 5, 2, 16),
        "position_ids": _ids(h, w, 5),
    }


def _bria(cls, **kw):
    def build():
        return cls(patch_size=1, in_channels=8, num_layers=1, num_single_layers=1,
                   attention_head_dim=16, num_attention_heads=2, joint_attention_dim=16,
                   axes_dims_rope=[4, 6, 6], **kw)  # fmt: skip

    return build


def _bria_inputs(h, w, fibo=False):
    out = {"hidden_states": torch.randn(1, h * w, 8), "timestep": torch.tensor([500.0]),
           "encoder_hidden_states": torch.randn(1, 5, 16), "img_ids": _ids(h, w),
           "txt_ids": torch.zeros(5, 3)}  # fmt: skip
    if fibo:
        out["text_encoder_layers"] = [torch.randn(1, 5, 16), torch.randn(1, 5, 16)]
    return out


MODELS = {  # build, inputs of a patch grid (h, w), the rotary module's path and class
    "hidream": (_hidream, _hidream_inputs, "pe_embedder", "HiDreamImageEmbedND"),
    "prx": (_prx, _prx_inputs, "pe_embedder", "PRXEmbedND"),
    "ernie-image": (_ernie, _ernie_inputs, "pos_embed", "ErnieImageEmbedND3"),
    "krea2": (_krea2, _krea2_inputs, "rotary_emb", "Krea2RotaryPosEmbed"),
    "bria": (_bria(diffusers.BriaTransformer2DModel), _bria_inputs, "pos_embed", "BriaEmbedND"),
    "bria-fibo": (_bria(diffusers.BriaFiboTransformer2DModel, text_encoder_dim=16),
                  lambda h, w: _bria_inputs(h, w, fibo=True), "pos_embed", "BriaFiboEmbedND"),
}  # fmt: skip


def _out(model, inputs, dtype=None):
    with torch.no_grad():
        if dtype is not None:
            inputs = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
                      and not k.endswith("ids") else v for k, v in inputs.items()}  # fmt: skip
        return model(**inputs, return_dict=False)[0]


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.filterwarnings("ignore:In CPU autocast")
@pytest.mark.parametrize("family", sorted(MODELS))
def test_compat_is_identical_and_exact_is_close(family):
    build, inputs_of, path, name = MODELS[family]
    torch.manual_seed(0)
    model = build().eval()
    torch.manual_seed(1)
    inputs = inputs_of(4, 6)  # a non-square grid (HiDream pads its ids)
    before = _out(model, inputs)
    compat = copy.deepcopy(model)
    report = patch(compat, compat="original")
    rows = {r.path: r for r in report.replaced}
    assert (rows[path].original, rows[path].mode) == (name, "compat")
    assert torch.equal(_out(compat, inputs), before)
    other = inputs_of(3, 3)  # another grid
    assert torch.equal(_out(compat, other), _out(model, other))
    if family in ("prx", "ernie-image", "bria"):  # the lighter ones: autocast, bf16 weights
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(_out(compat, inputs), _out(model, inputs))
        bf16, compat16 = copy.deepcopy(model).to(torch.bfloat16), copy.deepcopy(compat)
        compat16.to(torch.bfloat16)
        assert torch.equal(_out(compat16, inputs, torch.bfloat16),
                           _out(bf16, inputs, torch.bfloat16))  # fmt: skip

    exact = copy.deepcopy(model)
    report = patch(exact)
    assert {r.path: r.mode for r in report.replaced}[path] == "exact"
    torch.testing.assert_close(_out(exact, inputs), before, rtol=0, atol=1e-4)
    exact.load_state_dict(model.state_dict(), strict=True)
    assert not exact.state_dict().keys() - model.state_dict().keys()
    assert len(patch(exact)) == 0
    assert len(patch(compat, compat="original")) == 0


# ---------------------------------------------------------------------------------------------
# the stand-ins alone, at the models' real sizes


def _angles64(ids, theta, axes):
    """float64 angles ``[..., sum(axes) / 2]`` from the formula: column ``k`` of the ids times
    ``theta ** (-2j / d_k)``."""
    ids = np.asarray(ids, dtype=np.float64)
    return np.concatenate([ids[..., k, None] * theta ** (-np.arange(0, d, 2) / d)
                           for k, d in enumerate(axes)], axis=-1)  # fmt: skip


@pytest.mark.parametrize(
    ("cls", "axes", "head_axis"),
    [(transformer_hidream_image.HiDreamImageEmbedND, (64, 32, 32), 2),
     (transformer_prx.PRXEmbedND, (32, 32), 1)],
)  # fmt: skip
def test_rotation_matrices_are_exact(cls, axes, head_axis):
    """HiDream at its max_resolution (128 x 128 patches) and 512 text tokens; PRX at 2048 x
    2048 px (128 x 128 patches)."""
    side = 128
    ids = _ids(side, side, 512 if len(axes) == 3 else 0)[:, 3 - len(axes) :][None]
    original = cls(10000, list(axes)) if len(axes) == 3 else cls(sum(axes), 10000, list(axes))
    holder = torch.nn.ModuleDict({"pe": original})
    before = original(ids)
    (row,) = patch(holder)
    got = holder.pe(ids)
    two = holder.pe(ids.expand(2, -1, -1))  # a batch: each row the same matrices
    assert torch.equal(two[:1], got)
    assert torch.equal(two[1:], got)
    assert got.shape == before.shape
    assert got.dtype == torch.float32
    assert got.shape[head_axis] == 1
    assert got.shape[-3:] == (sum(axes) // 2, 2, 2)
    a = _angles64(ids.squeeze(0).numpy(), 1e4, axes)
    want = np.stack([np.cos(a), -np.sin(a), np.sin(a), np.cos(a)], axis=-1).reshape(*a.shape, 2, 2)
    err = np.abs(got.squeeze(head_axis).squeeze(0).double().numpy() - want)
    assert (err <= 6e-8 * np.abs(want) + 1e-12).all()
    assert row.max_diff <= 2**-24  # diffusers computes in float64 too


def test_ernie_angles_are_the_float64_ones_rounded_once():
    """Ernie-Image at 2048 x 2048 px (128 x 128 patches) after 1024 text tokens."""
    text = 1024
    img = _ids(128, 128)
    img[:, 0] = text
    words = torch.zeros(text, 3)
    words[:, 0] = torch.arange(text)
    ids = torch.cat([img, words])[None]
    original = transformer_ernie_image.ErnieImageEmbedND3(128, 256, (32, 48, 48))
    holder = torch.nn.ModuleDict({"pe": original})
    (row,) = patch(holder)
    assert row.mode == "exact"
    assert row.max_diff > 0
    got, theirs = holder.pe(ids)[0, :, 0], original(ids)[0, :, 0]
    want = np.repeat(_angles64(ids[0].numpy(), 256.0, (32, 48, 48)), 2, axis=-1)
    ours = np.abs(got.double().numpy() - want)
    assert (ours <= np.spacing(np.abs(want).astype(np.float32)) / 2).all()  # nearest float32
    theirs = np.abs(theirs.double().numpy() - want)  # float32 ladder and products: not
    assert (theirs > np.spacing(np.abs(want).astype(np.float32)) / 2).any()  # always nearest
    assert theirs.max() > ours.max()


@pytest.mark.parametrize("name", ["BriaPosEmbed", "BriaEmbedND"])
def test_bria_modules_are_flux_forms(name):
    original = getattr(transformer_bria, name)(10000, [16, 56, 56])
    ids = _ids(32, 48, 100)
    holder = torch.nn.ModuleDict({"pe": original})
    before = original(ids)
    (row,) = patch(holder, compat="original")
    assert (row.original, row.mode) == (name, "compat")
    for a, b in zip(holder.pe(ids), before, strict=True):
        assert torch.equal(a, b)


def test_stand_ins_name_bad_ids():
    holder = torch.nn.ModuleDict({
        "pe": transformer_prx.PRXEmbedND(64, 10000, [32, 32]),
        "ernie": transformer_ernie_image.ErnieImageEmbedND3(128, 256, (32, 48, 48))})  # fmt: skip
    patch(holder)
    with pytest.raises(PosencError, match=r"`ids` of shape \(1, 4, 3\)"):
        holder.pe(torch.zeros(1, 4, 3))
    with pytest.raises(PosencError, match=r"`ids` of shape \(1, 4, 2\)"):
        holder.ernie(torch.zeros(1, 4, 2))
