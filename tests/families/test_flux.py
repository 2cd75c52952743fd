"""The FLUX record's id families (FLUX, FLUX.2, Flux3, Krea2, HiDream, PRX, Ernie-Image, Bria,
Bria-FIBO): posenc.rope of the ids the pipelines build within one float32 rounding of a float64
reference written here, and against diffusers' own tables; the compat replays of HiDream's and
PRX's matrices and Ernie-Image's angles bit for bit; the float32-only evaluator within 1e-6 at
the largest sizes; posenc.torch.patch on small random-weight transformers (configs, no download)
and their modules: compat="original" leaves every output identical, the exact patch moves them
by float32 noise and its stand-ins hold the float64 values rounded once, the checkpoint loads
with strict=True, patching twice is a no-op."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.families.models import _err

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers import (  # noqa: E402
    transformer_bria,
    transformer_ernie_image,
    transformer_flux2,
    transformer_flux3,
    transformer_hidream_image,
    transformer_krea2,
    transformer_prx,
)

from posenc.compat import diffusers_ids  # noqa: E402
from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


# ---------------------------------------------------------------------------------------------
# the tables: posenc.rope_grid and posenc.rope against the originals


def angles64(ids, theta, axes):
    """float64 angles ``[N, sum(axes) / 2]``: column ``k`` of the ids times ``theta ** (-2j /
    d_k)``, block after block."""
    ids = np.asarray(ids, dtype=np.float64)
    return np.concatenate([np.outer(ids[:, k], theta ** (-np.arange(0, d, 2) / d))
                           for k, d in enumerate(axes)], axis=1)  # fmt: skip


def tables64(ids, theta, axes):
    """The float64 interleaved ``(cos, sin)`` ``[N, sum(axes)]``."""
    a = np.repeat(angles64(ids, theta, axes), 2, axis=1)
    return np.cos(a), np.sin(a)


def assert_exact(got, want):
    """Within one float32 rounding of the float64 value."""
    got = np.asarray(got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-12)


def image_ids(h, w, lead=0.0, columns=3, at=(1, 2)):
    """A pipeline's ``[h * w, columns]`` image ids: rows and columns at ``at``, ``lead`` in the
    first column."""
    ids = np.zeros((h * w, columns))
    ids[:, 0] = lead
    ids[:, at[0]] = np.repeat(np.arange(h), w)
    ids[:, at[1]] = np.tile(np.arange(w), h)
    return ids


def flux2_ids(h, w, text):
    """FLUX.2's ids: text ``(0, 0, 0, l)``, image ``(0, row, col, 0)``, a reference image at
    ``t = 10``."""
    words = np.zeros((text, 4))
    words[:, 3] = np.arange(text)
    return np.concatenate([words, image_ids(h, w, 0.0, 4), image_ids(h, w, 10.0, 4)])


def ernie_ids(h, w, text):
    """Ernie-Image's ids: image ``(text, row, col)``, text ``(i, 0, 0)``."""
    words = np.zeros((text, 3))
    words[:, 0] = np.arange(text)
    return np.concatenate([image_ids(h, w, float(text)), words])


# (preset, the module diffusers builds, ids, head width, theta, axes)
FAMILIES = {
    "flux2": (lambda: transformer_flux2.Flux2PosEmbed(2000, [32, 32, 32, 32]),
              flux2_ids(64, 48, 512), 2000.0, (32, 32, 32, 32)),
    "flux3": (lambda: transformer_flux3.Flux3PosEmbed(10000, [32, 32, 32, 32]),
              flux2_ids(37, 64, 300), 1e4, (32, 32, 32, 32)),
    "krea2": (lambda: transformer_krea2.Krea2RotaryPosEmbed(1000, [32, 48, 48]),
              np.concatenate([np.zeros((77, 3)), image_ids(64, 64)]), 1e3, (32, 48, 48)),
    "hidream": (lambda: transformer_hidream_image.HiDreamImageEmbedND(10000, [64, 32, 32]),
                np.concatenate([image_ids(64, 96), np.zeros((128, 3))]), 1e4, (64, 32, 32)),
    "prx": (lambda: transformer_prx.PRXEmbedND(64, 10000, [32, 32]),
            image_ids(64, 64, columns=2, at=(0, 1)), 1e4, (32, 32)),
    "ernie-image": (lambda: transformer_ernie_image.ErnieImageEmbedND3(128, 256, (32, 48, 48)),
                    ernie_ids(64, 64, 256), 256.0, (32, 48, 48)),
}  # fmt: skip


def original_tables(name, module, ids):
    """The installed module's float32 ``(cos, sin)`` ``[N, d]`` at ``ids`` ``[N, n]``."""
    if name in ("hidream", "prx"):
        m = module(ids[None]).reshape(ids.shape[0], -1, 2, 2)  # [N, d/2, 2, 2]
        return m[..., 0, 0].repeat_interleave(2, -1), m[..., 1, 0].repeat_interleave(2, -1)
    if name == "ernie-image":
        angles = module(ids[None])[0, :, 0]
        return angles.cos(), angles.sin()
    return module(ids)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_exact_tables_against_float64_and_diffusers(name):
    build, ids, theta, axes = FAMILIES[name]
    want = tables64(ids, theta, axes)
    cos, sin = posenc.rope(ids, sum(axes), preset=name)
    for got, w in zip((cos, sin), want, strict=True):
        assert got.dtype == np.float32
        assert got.shape == w.shape
        assert_exact(got, w)
    t = torch.from_numpy(ids).float()
    theirs = original_tables(name, build(), t)
    for o, w, ours in zip(theirs, want, (cos, sin), strict=True):
        err = np.abs(o.double().numpy() - w).max()
        if name == "ernie-image":  # float32 angles: its error grows with the ids
            assert err > 10 * np.abs(ours - w).max()
        else:  # float64 in diffusers: its tables are the exact ones
            assert err <= 2**-24
    assert np.array_equal(cos[:, 0::2], cos[:, 1::2])  # interleaved pairs


def test_preset_keywords():
    for name, (_, _, theta, axes) in FAMILIES.items():
        p = posenc.preset(name)
        assert p.rotary == {"base": theta, "layout": "interleaved", "axes_dim": axes}
        assert p.dim == sum(axes)
        assert p.originals == ()


@pytest.mark.parametrize("cls", [transformer_bria.BriaEmbedND, transformer_bria.BriaPosEmbed])
def test_bria_is_flux(cls):
    ids = torch.from_numpy(np.concatenate([np.zeros((9, 3)), image_ids(32, 40)])).float()
    for got, want in zip(cls(10000, [16, 56, 56])(ids), posenc.rope(ids, 128, preset="flux"),
                         strict=True):  # fmt: skip
        assert (got - want).abs().max() <= 2**-24


@pytest.mark.parametrize("name", ["hidream", "prx"])
@pytest.mark.parametrize("batch", [1, 2])
def test_matrix_rope_replays_diffusers(name, batch):
    build, ids, theta, axes = FAMILIES[name]
    t = torch.from_numpy(ids).float()[None].expand(batch, -1, -1)
    want = build()(t)
    got = diffusers_ids.matrix_rope(t, theta, axes).unsqueeze(2 if name == "hidream" else 1)
    assert want.dtype == got.dtype == torch.float32
    assert torch.equal(got, want)
    if name == "hidream":  # ids with two of the three columns read the first two blocks
        want = transformer_hidream_image.HiDreamImageEmbedND(10000, list(axes))(t[..., :2])
        assert torch.equal(diffusers_ids.matrix_rope(t[..., :2], theta, axes).unsqueeze(2), want)


@pytest.mark.filterwarnings("ignore:In CPU autocast")
@pytest.mark.parametrize("autocast", [False, True])
def test_ernie_angles_replay_diffusers(autocast):
    build, ids, theta, axes = FAMILIES["ernie-image"]
    t = torch.from_numpy(ids).float()[None].expand(2, -1, -1)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        want = build()(t)
        got = diffusers_ids.ernie_angles(t, theta, axes)
    assert got.dtype == want.dtype == torch.float32
    assert got.shape == (2, ids.shape[0], 1, 128)
    assert torch.equal(got, want)


def test_grid_compat_is_refused_for_id_families():
    with pytest.raises(PosencError, match="compat"):
        posenc.rope_grid((4, 4), 64, preset="prx", compat="diffusers")


LARGEST = {  # 4096 x 4096 px FLUX.2 (a reference image too); HiDream at max_resolution 128
    "flux2": flux2_ids(256, 256, 512),
    "flux3": flux2_ids(256, 256, 512),
    "krea2": np.concatenate([np.zeros((512, 3)), image_ids(256, 256)]),
    "hidream": np.concatenate([image_ids(128, 128), np.zeros((512, 3))]),
    "prx": image_ids(256, 256, columns=2, at=(0, 1)),
    "ernie-image": ernie_ids(256, 256, 1024),
}


@pytest.mark.parametrize("name", sorted(LARGEST))
def test_float32_only_path(float32_only, name):
    _, _, theta, axes = FAMILIES[name]
    ids = LARGEST[name]
    cos, sin = posenc.rope(torch.from_numpy(ids).float(), sum(axes), preset=name)
    for got, want in zip((cos, sin), tables64(ids, theta, axes), strict=True):
        assert np.abs(got.double().numpy() - want).max() < 1e-6


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: posenc.rope(np.zeros((4, 3)), 128, preset="flux2"), "positions"),
        (lambda: posenc.rope(np.zeros((4, 3)), 120, preset="krea2"), "axes_dim"),
        (lambda: diffusers_ids.ernie_angles(torch.zeros(1, 4, 2), 256.0, (32, 48, 48)),
         "3 columns"),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(call, fragment):
    with pytest.raises(PosencError, match=fragment):
        call()


# ---------------------------------------------------------------------------------------------
# posenc.torch.patch on the models and their rotary modules


def _flux64(ids, theta, axes):
    out = []
    for i, d in enumerate(axes):
        freqs = 1.0 / theta ** (np.arange(0, d, 2) / d)
        out.append(np.repeat(np.outer(ids[:, i], freqs), 2, axis=1))
    angles = np.concatenate(out, axis=1)
    return np.cos(angles), np.sin(angles)


@pytest.mark.parametrize("cls", ["transformer_flux.FluxPosEmbed",
                                 "transformer_flux2.Flux2PosEmbed"])  # fmt: skip
def test_flux_axial_rope(cls):
    module_name, name = cls.split(".")
    module = getattr(getattr(diffusers.models.transformers, module_name), name)
    axes = [16, 56, 56]
    holder = torch.nn.ModuleDict({"pos_embed": module(theta=10000, axes_dim=axes)})
    ids = torch.cat([torch.zeros(7, 3), torch.randint(0, 4096, (500, 3)).float()])

    def outputs(m, dtype):
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            return m.pos_embed(ids)

    def exact(original, patched):
        want = _flux64(ids.double().numpy(), 10000, axes)
        for b, c, w in zip(patched.pos_embed(ids), original.pos_embed(ids), want, strict=True):
            assert b.dtype == c.dtype == torch.float32
            assert _err(b, w) <= 2**-24
        cos = patched.pos_embed(ids)[0]
        assert torch.equal(cos[:, 0], cos[:, 1])  # pairs

    done = check_patch_contract(holder, {"pos_embed": name}, outputs, exact)
    assert len(done.compat) == 1
    (row,) = done.exact
    assert row.max_diff < 2**-23  # diffusers computes in float64: its tables are exact


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


TIME = {"t_embedder.time_proj": "Timesteps"}  # HiDream's timestep sinusoid

MODELS = {  # build, inputs of a patch grid (h, w), every module patch replaces: its class
    "hidream": (_hidream, _hidream_inputs, {"pe_embedder": "HiDreamImageEmbedND", **TIME}),
    "prx": (_prx, _prx_inputs, {"pe_embedder": "PRXEmbedND"}),
    "ernie-image": (_ernie, _ernie_inputs,
                    {"pos_embed": "ErnieImageEmbedND3", "time_proj": "Timesteps"}),
    "krea2": (_krea2, _krea2_inputs, {"rotary_emb": "Krea2RotaryPosEmbed"}),
    "bria": (_bria(diffusers.BriaTransformer2DModel), _bria_inputs, {"pos_embed": "BriaEmbedND"}),
    "bria-fibo": (_bria(diffusers.BriaFiboTransformer2DModel, text_encoder_dim=16),
                  lambda h, w: _bria_inputs(h, w, fibo=True), {"pos_embed": "BriaFiboEmbedND"}),
}  # fmt: skip


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.filterwarnings("ignore:In CPU autocast")
@pytest.mark.parametrize("family", sorted(MODELS))
def test_compat_is_identical_and_exact_is_close(family):
    build, inputs_of, paths = MODELS[family]
    torch.manual_seed(0)
    model = build().eval()
    torch.manual_seed(1)
    inputs = inputs_of(4, 6)  # a non-square grid (HiDream pads its ids)
    other = inputs_of(3, 3)  # another grid

    def outputs(m, dtype):
        for x in (inputs, other):
            yield from forward(m, x, dtype)

    def exact(original, patched):
        before = forward(original, inputs, torch.float32)
        for got, want in zip(forward(patched, inputs, torch.float32), before, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-4)

    check_patch_contract(model, paths, outputs, exact)


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
