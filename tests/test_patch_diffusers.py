"""posenc.torch.patch on small random-weight diffusers models built from configs (no
download): per family (UNet, DiT, PixArt, SD3, FLUX), compat="original" leaves every output
identical (other image sizes, bf16 included), the exact patch stays close and moves the
positional modules' numbers toward a float64 reference, the original checkpoint loads with
strict=True, the report names exactly what was replaced, and patching twice is a no-op."""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest

from posenc.errors import PosencError
from tests import reference
from tests.families.models import _err

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


def _unet():
    return diffusers.UNet2DModel(
        sample_size=8, block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"))  # fmt: skip


def _dit():  # interpolation_scale 0.3: positions i / 0.3, which diffusers rounds to float32
    return diffusers.Transformer2DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=1,
        sample_size=16, patch_size=2, norm_type="ada_norm_zero", num_embeds_ada_norm=1000,
        interpolation_scale=0.3)  # fmt: skip


def _pixart():
    return diffusers.PixArtTransformer2DModel(
        num_attention_heads=2, attention_head_dim=12, in_channels=4, out_channels=8, num_layers=1,
        sample_size=8, patch_size=2, cross_attention_dim=24, caption_channels=16,
        use_additional_conditions=True)  # fmt: skip


def _sd3():  # a 12 x 12 table, base_size 4: positions i / 3, cropped per image size
    return diffusers.SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=8,
        num_attention_heads=2, joint_attention_dim=16, caption_projection_dim=16,
        pooled_projection_dim=16, out_channels=4, pos_embed_max_size=12)  # fmt: skip


def _flux():
    return diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
        axes_dims_rope=(4, 6, 6))  # fmt: skip


def _flux_ids(h, w, text):
    ids = torch.zeros(h, w, 3)
    ids[..., 1], ids[..., 2] = torch.arange(h)[:, None], torch.arange(w)[None]
    return ids.reshape(-1, 3), torch.zeros(text, 3)


def _call(name, model, h, w):
    """The model's output on fixed inputs of an h x w latent (FLUX: h x w ids)."""
    g = torch.Generator().manual_seed(1)
    dtype = next(model.parameters()).dtype
    x = torch.randn(1, 4, h, w, generator=g).to(dtype)
    text = torch.randn(1, 5, 16, generator=g).to(dtype)
    t = torch.tensor([637.25])
    with torch.no_grad():
        if name == "unet":
            return model(torch.randn(1, 3, h, w, generator=g).to(dtype), t).sample
        if name == "dit":
            # return_dict=False: diffusers' Transformer2DModelOutput warns that it is deprecated
            return model(x, timestep=t, class_labels=torch.tensor([3]), return_dict=False)[0]
        if name == "pixart":
            cond = {"resolution": torch.tensor([[64.0, 96.0]]),
                    "aspect_ratio": torch.tensor([[1.5]])}  # fmt: skip
            return model(x, encoder_hidden_states=text, timestep=t,
                         added_cond_kwargs=cond).sample  # fmt: skip
        if name == "sd3":
            pooled = torch.randn(1, 16, generator=g).to(dtype)
            return model(x, encoder_hidden_states=text, pooled_projections=pooled,
                         timestep=t).sample  # fmt: skip
        img_ids, txt_ids = _flux_ids(h, w, 3)
        return model(
            torch.randn(1, h * w, 4, generator=g).to(dtype),
            encoder_hidden_states=torch.randn(1, 3, 32, generator=g).to(dtype),
            pooled_projections=torch.randn(1, 32, generator=g).to(dtype),
            timestep=torch.tensor([0.63725]),
            img_ids=img_ids,
            txt_ids=txt_ids,
        ).sample


FAMILIES = {  # name: (model, the paths replaced, image sizes: the model's own and others)
    "unet": (_unet, ["time_proj"], [(8, 8), (16, 8)]),
    "dit": (_dit, ["pos_embed", "transformer_blocks.0.norm1.emb.time_proj"],
            [(16, 16), (8, 8), (24, 24)]),  # square: DiT unpatchifies a square
    "pixart": (_pixart, ["adaln_single.emb.additional_condition_proj",
                         "adaln_single.emb.time_proj", "pos_embed"], [(8, 8), (12, 16)]),
    "sd3": (_sd3, ["pos_embed", "time_text_embed.time_proj"], [(8, 8), (16, 24), (24, 24)]),
    "flux": (_flux, ["pos_embed", "time_text_embed.time_proj"], [(4, 4), (6, 9)]),
}  # fmt: skip


def _model(make, seed=0):
    torch.manual_seed(seed)
    return make().eval()


def _paths(rows):
    return sorted(r.path for r in rows)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # autocast, torch
@pytest.mark.filterwarnings("ignore:In CPU autocast")
@pytest.mark.parametrize("name", FAMILIES)
def test_families(name):
    """The patch contract at each size, every module replaced (nothing left alone); exact
    within 1e-4 of the largest output."""
    make, paths, sizes = FAMILIES[name]
    model = _model(make)
    before = {size: _call(name, model, *size) for size in sizes}

    def outputs(m, dtype):
        autocast = dtype != next(m.parameters()).dtype
        with torch.autocast("cpu", dtype=dtype, enabled=autocast):
            return [_call(name, m, *size) for size in sizes]

    def exact(_, patched):
        for size in sizes:
            out, want = _call(name, patched, *size), before[size]
            assert torch.isfinite(out).all()
            assert (out - want).abs().max() <= 1e-4 * want.abs().max(), size

    classes = {p: type(model.get_submodule(p)).__name__ for p in paths}
    contract = check_patch_contract(copy.deepcopy(model), classes, outputs, exact)
    assert not contract.compat.left_alone
    assert not contract.exact.left_alone
    compat = copy.deepcopy(model)
    patch(compat, compat="original")
    saved = io.BytesIO()  # a patched model pickles whole, and comes back the same
    torch.save(compat, saved)
    saved.seek(0)
    again = torch.load(saved, weights_only=False)
    assert torch.equal(_call(name, again, *sizes[-1]), before[sizes[-1]])


@pytest.mark.parametrize("name", ["dit", "sd3", "flux"])
def test_bf16_autocast_and_models_compat_is_identical(name):
    make, _, sizes = FAMILIES[name]
    model = _model(make)
    moved_after = copy.deepcopy(model)
    patch(moved_after, compat="original")
    if name != "flux":  # (FLUX's RMSNorm under autocast: torch warns about its dtypes)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for size in sizes:
                assert torch.equal(_call(name, moved_after, *size), _call(name, model, *size))
    moved_after, model = moved_after.to(torch.bfloat16), model.to(torch.bfloat16)
    moved_before = copy.deepcopy(model)
    assert patch(moved_before, compat="original").replaced
    for size in sizes:
        want = _call(name, model, *size)
        assert torch.equal(_call(name, moved_after, *size), want)
        assert torch.equal(_call(name, moved_before, *size), want)
    exact = copy.deepcopy(model)  # exact: the exact table rounded once to bf16
    patch(exact)
    table = exact.pos_embed.pos_embed if name != "flux" else None
    if table is not None:
        assert table.dtype == torch.bfloat16
        side = exact.pos_embed.side
        want = exact.pos_embed.grid.encoding((side, side), dtype=torch.float64)
        assert torch.equal(table.table, want.to(torch.bfloat16)[None])


def test_timesteps_move_toward_float64():
    model = _model(_unet)
    t = torch.arange(8000, dtype=torch.float32) / 8
    want = reference.timestep(t.double().numpy(), 8, flip_sin_to_cos=True, downscale_freq_shift=0)
    old = model.time_proj(t)
    patch(model)
    new = model.time_proj(t)
    assert type(model.time_proj).__name__ == "DiffusersTimesteps"
    assert new.dtype == old.dtype == torch.float32
    assert _err(new, want) <= 2**-24 < _err(old, want)
    model.to(torch.float64)  # diffusers' Timesteps holds no tensor: float32 whatever
    assert model.time_proj(t).dtype == torch.float32


def _positions(patch_embed, h, w):
    """PatchEmbed's positional rows for an h x w latent (its projection zeroed)."""
    pe = copy.deepcopy(patch_embed)
    torch.nn.init.zeros_(pe.proj.weight)
    torch.nn.init.zeros_(pe.proj.bias)
    with torch.no_grad():
        return pe(torch.zeros(1, pe.proj.in_channels, h, w))[0]


@pytest.mark.parametrize(("name", "size", "options"), [
    ("dit", (16, 16), {"base_size": 8, "interpolation_scale": 0.3}),  # the stored table
    ("dit", (8, 24), {"base_size": 8, "interpolation_scale": 0.3}),   # recomputed
    ("sd3", (24, 24), {"base_size": 4}),                              # the whole stored table
])  # fmt: skip
def test_patch_embed_moves_toward_float64(name, size, options):
    model = _model(FAMILIES[name][0])
    original = model.pos_embed
    patch(model)
    assert type(model.pos_embed).__name__ == "SinCosPatchEmbed"
    h, w = size[0] // 2, size[1] // 2
    want = reference.diffusers_2d(16, (h, w), **options)
    old, new = _positions(original, *size), _positions(model.pos_embed, *size)
    assert _err(new, want) <= 2**-24 < _err(old, want)
    if name == "sd3":  # the crops of SD3's table are rows of it
        want = reference.diffusers_2d(16, 12, **options).reshape(12, 12, 16)[2:10, 3:9]
        assert _err(_positions(model.pos_embed, 16, 12), want.reshape(-1, 16)) <= 2**-24


def test_learned_and_foreign_tables_are_left_alone():
    model = _model(_dit)
    model.pos_embed.pos_embed = torch.nn.Parameter(model.pos_embed.pos_embed.clone())
    report = patch(model)
    assert _paths(report.replaced) == ["transformer_blocks.0.norm1.emb.time_proj"]
    assert [(r.path, r.original, r.note) for r in report.left_alone] == [
        ("pos_embed.pos_embed", "Parameter", "learned, left alone")
    ]
    model = _model(_sd3)
    with torch.no_grad():
        model.pos_embed.pos_embed.normal_()  # a fixed table, but not the sinusoid
    (row,) = patch(model).left_alone
    assert row.path == "pos_embed"
    assert "not the diffusers-2d sinusoid" in row.note
    aura = diffusers.models.transformers.auraflow_transformer_2d.AuraFlowPatchEmbed
    holder = torch.nn.ModuleDict({"x": aura(height=8, width=8, patch_size=2, in_channels=4,
                                            embed_dim=16, pos_embed_max_size=16)})  # fmt: skip
    (row,) = patch(holder.requires_grad_(False))  # frozen for inference: still learned
    assert (row.path, row.note) == ("x.pos_embed", "learned, left alone")
    embeddings = diffusers.models.embeddings
    holder = torch.nn.ModuleDict({  # no table (HunyuanDiT's), a fixed table not the sinusoid
        "pos_embed": embeddings.PatchEmbed(8, 8, 2, 4, 16, pos_embed_type=None),
        "motion": embeddings.SinusoidalPositionalEmbedding(16, 32)})  # fmt: skip
    holder.motion.pe[0, 3, 5] += 0.01
    rows = patch(holder)
    assert not rows.replaced
    assert [(r.path, r.note.split(":")[0]) for r in rows] == [
        ("pos_embed", "no positional table (pos_embed_type=None)"),
        ("motion", "a fixed table that is not the vaswani sinusoid")]  # fmt: skip


def test_sd3_checkpoint_table_is_checked():
    model = _model(_sd3)
    state = model.state_dict()
    patch(model)
    model.load_state_dict(state, strict=True)  # the sinusoid: checked, dropped
    saved = model.state_dict()["pos_embed.pos_embed"]  # written from the exact table
    assert torch.equal(saved, model.pos_embed.pos_embed.table)
    assert saved.shape == state["pos_embed.pos_embed"].shape
    state["pos_embed.pos_embed"] = torch.randn_like(state["pos_embed.pos_embed"])
    with pytest.raises(PosencError, match=r"pos_embed\.pos_embed"):
        model.load_state_dict(state, strict=True)


def test_dry_run_changes_nothing():
    model = _model(_flux)
    original = model.pos_embed
    report = patch(model, dry_run=True)
    assert model.pos_embed is original
    assert _paths(report.replaced) == ["pos_embed", "time_text_embed.time_proj"]
    assert "FluxPosEmbed" in str(report)


def test_animatediff_motion_table():
    """AnimateDiff's motion modules add a fixed [1, 32, d] buffer ``pe`` (the interleaved
    vaswani sinusoid, float32 in diffusers) to their frames: replaced by a stand-in that saves
    the same key, compat bit for bit, exact within float32 rounding of the formula."""
    torch.manual_seed(0)
    model = diffusers.MotionAdapter(
        block_out_channels=(8, 16), motion_layers_per_block=1, motion_num_attention_heads=2,
        motion_norm_num_groups=4, motion_max_seq_length=32, use_motion_mid_block=False,
    ).eval()  # fmt: skip
    paths = [
        p for p, m in model.named_modules() if type(m).__name__ == "SinusoidalPositionalEmbedding"
    ]
    assert paths
    frames = torch.randn(2, 24, 256, generator=torch.Generator().manual_seed(1))

    def outputs(m, dtype):
        for path in paths:
            module = m.get_submodule(path)
            yield module(frames[..., : module.pe.shape[-1]].to(dtype))
            yield module.pe

    def exact(original, patched):
        for path in paths:
            pe = patched.get_submodule(path).pe
            rows, d = pe.shape[1:]
            angles = np.arange(rows)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
            want = np.empty((rows, d))
            want[:, 0::2], want[:, 1::2] = np.sin(angles), np.cos(angles)
            assert np.abs(pe[0].double().numpy() - want).max() < 2**-24

    check_patch_contract(model, paths, outputs, exact)
