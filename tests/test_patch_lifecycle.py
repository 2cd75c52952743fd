"""What a user does with a patched model next: save it and load the checkpoint into the plain
library's class strictly (every key there, the same outputs, no NaN), build it on the meta
device and load weights into it, take the patch back (``unpatch``), switch modes, and read
the report of a rotary module whose state is not what its config gives. Small random-weight
models built from configs (no download)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")
timm = pytest.importorskip("timm")
safetensors_torch = pytest.importorskip("safetensors.torch")
from posenc.torch import patch, unpatch  # noqa: E402
from tests.test_patch import SEQ2SEQ, _whisper  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers", "quiet_diffusers")


def _whisper_out(m):
    feats = torch.randn(1, 8, 3000, generator=torch.Generator().manual_seed(1))
    out = m(input_features=feats, decoder_input_ids=torch.tensor([[1, 5, 6, 7]]))
    return out.encoder_last_hidden_state, out.last_hidden_state


def _pegasus():
    return T.PegasusModel(T.PegasusConfig(**SEQ2SEQ, max_position_embeddings=256))


def _seq2seq_out(m):
    ids = torch.arange(3, 15)[None] % 128
    return (m(input_ids=ids, decoder_input_ids=ids[:, :5]).last_hidden_state,)


MAE = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
       "intermediate_size": 128, "image_size": 32, "patch_size": 4, "decoder_hidden_size": 32,
       "decoder_num_hidden_layers": 1, "decoder_num_attention_heads": 4,
       "decoder_intermediate_size": 64}  # fmt: skip


def _mae_table(side, dim):
    """MAE's 2D sin-cos with a zero class row, in float64 from its formula."""
    omega = 1.0 / 10000 ** (np.arange(dim // 4) / (dim / 4))
    h, w = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    parts = [f(a.reshape(-1)[:, None] * omega) for a in (w, h) for f in (np.sin, np.cos)]
    return np.concatenate([np.zeros((1, dim)), np.concatenate(parts, 1)])[None]


def _vit_mae():
    """ViT-MAE holding its sin-cos tables as a checkpoint does (a config builds them zero)."""
    model = T.ViTMAEForPreTraining(T.ViTMAEConfig(**MAE))
    with torch.no_grad():
        model.vit.embeddings.position_embeddings.copy_(torch.from_numpy(_mae_table(8, 64)))
        model.decoder.decoder_pos_embed.copy_(torch.from_numpy(_mae_table(8, 32)))
    return model


def _mae_out(m):
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    noise = torch.rand(2, 64, generator=torch.Generator().manual_seed(2))
    return (m(pixel_values=pixels, noise=noise).logits,)


class _SD3Embed(torch.nn.Module):
    """An SD3-style PatchEmbed (its cropped, persistent table) under a model."""

    def __init__(self):
        super().__init__()
        self.pos_embed = diffusers.models.embeddings.PatchEmbed(
            height=16, width=16, patch_size=2, in_channels=4, embed_dim=32, pos_embed_max_size=16
        )


def _sd3_out(m):
    return (m.pos_embed(torch.randn(2, 4, 12, 8, generator=torch.Generator().manual_seed(1))),)


def _timm_vit():
    """A timm ViT with a frozen sin-cos ``pos_embed`` (timm's own float32 builder)."""
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=64, patch_size=8, embed_dim=64, depth=1, num_heads=4, num_classes=5
    )
    body = timm.layers.build_sincos2d_pos_embed([8, 8], 64)
    with torch.no_grad():
        model.pos_embed.copy_(torch.cat([torch.zeros(1, 64), body])[None])
    model.pos_embed.requires_grad_(False)
    return model


def _timm_out(m):
    return (m(torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))),)


LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
         "num_attention_heads": 4, "vocab_size": 128, "max_position_embeddings": 2048}  # fmt: skip


def _llama(**rope):
    return T.LlamaForCausalLM(T.LlamaConfig(**LLAMA, **rope))


def _llama_out(m):
    return (m(torch.arange(40)[None] % 128, position_ids=torch.arange(1900, 1940)[None]).logits,)


def _wan():
    return diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=4,
        out_channels=4, text_dim=16, freq_dim=16, ffn_dim=32, num_layers=1, rope_max_seq_len=64,
    )  # fmt: skip


def _wan_out(m):
    g = torch.Generator().manual_seed(1)
    latents, text = torch.randn(1, 4, 3, 8, 8, generator=g), torch.randn(1, 5, 16, generator=g)
    return (m(latents, torch.tensor([500]), text).sample,)


MODELS = {  # name: (make, outputs, whether every positional module keeps its table in a key)
    "whisper": (_whisper, _whisper_out, True),
    "pegasus": (_pegasus, _seq2seq_out, True),
    "vit-mae": (_vit_mae, _mae_out, True),
    "sd3-patch-embed": (_SD3Embed, _sd3_out, True),
    "timm-vit": (_timm_vit, _timm_out, True),
    "llama": (_llama, _llama_out, False),
    "wan": (_wan, _wan_out, False),
}
SAVED = {  # the keys whose tables a patch used to drop
    "whisper": ["encoder.embed_positions.weight"],
    "pegasus": ["encoder.embed_positions.weight", "decoder.embed_positions.weight"],
    "vit-mae": ["vit.embeddings.position_embeddings", "decoder.decoder_pos_embed"],
    "sd3-patch-embed": ["pos_embed.pos_embed"],
    "timm-vit": ["pos_embed"],
    "llama": [],
    "wan": [],
}
MODES = {"exact": None, "compat": "original"}


def _build(name, seed=0):
    torch.manual_seed(seed)
    return MODELS[name][0]().eval()


def _outputs(name, model):
    with torch.no_grad():
        return MODELS[name][1](model)


def _equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _finite(outs):
    return all(bool(torch.isfinite(x).all()) for x in outs)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", MODELS)
def test_a_patched_checkpoint_loads_into_the_plain_class(name, mode, tmp_path):
    model = _build(name)
    patched = copy.deepcopy(model)
    report = patch(patched, compat=MODES[mode])
    assert report.replaced
    paths = {r.path for r in report.replaced}
    assert all(k in paths or k.rpartition(".")[0] in paths for k in SAVED[name])
    state, want = patched.state_dict(), model.state_dict()
    assert list(state) == list(want)  # every key, in the original's order
    for key, value in want.items():
        assert (state[key].shape, state[key].dtype) == (value.shape, value.dtype), key
    for key in SAVED[name]:
        if mode == "compat":  # the original's numbers, bit for bit
            assert torch.equal(state[key], want[key]), key
    if name == "whisper" and mode == "exact":  # the exact table, not the float32 one
        d = 64
        inv = np.exp(-math.log(10000) / (d // 2 - 1) * np.arange(d // 2))
        angles = np.arange(1500)[:, None] * inv
        exact = np.concatenate([np.sin(angles), np.cos(angles)], 1)
        table = state["encoder.embed_positions.weight"].double().numpy()
        assert (
            np.abs(table - exact).max()
            < 2**-24
            < np.abs(want[SAVED[name][0]].double().numpy() - exact).max()
        )
    patched.load_state_dict(state, strict=True)  # its own checkpoint, checked as it loads

    torch.save(state, tmp_path / "state.pt")
    safetensors_torch.save_file({k: v.clone() for k, v in state.items()},  # tied ones too
                                tmp_path / "state.safetensors")  # fmt: skip
    expected = _outputs(name, patched if MODELS[name][2] or mode == "compat" else model)
    assert _finite(expected)
    for loaded in (torch.load(tmp_path / "state.pt"),
                   safetensors_torch.load_file(tmp_path / "state.safetensors")):  # fmt: skip
        plain = _build(name, seed=1)
        plain.load_state_dict(loaded, strict=True)
        assert _equal(_outputs(name, plain), expected)
    if hasattr(patched, "save_pretrained") and name != "wan":  # diffusers': accelerate
        patched.save_pretrained(tmp_path / "saved")
        plain = type(model).from_pretrained(tmp_path / "saved").eval()
        assert _finite(_outputs(name, plain))
        assert _equal(_outputs(name, plain), expected)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["whisper", "pegasus", "llama"])
def test_patched_on_the_meta_device_then_loaded(name, mode):
    model = _build(name)
    with torch.device("meta"):
        empty = MODELS[name][0]().eval()
    dry = patch(empty, compat=MODES[mode], dry_run=True)
    assert dry.replaced
    assert all(r.max_diff is None and "not measured" in r.note for r in dry.replaced)
    report = patch(empty, compat=MODES[mode])
    assert [r.path for r in report.replaced] == [r.path for r in dry.replaced]
    assert all(v.is_meta for v in empty.state_dict().values())  # written on meta too
    assert list(empty.state_dict()) == list(model.state_dict())
    empty.to_empty(device="cpu")
    empty.load_state_dict(model.state_dict(), strict=True)
    loaded = empty
    if mode == "compat":  # the original's outputs, bit for bit
        assert _equal(_outputs(name, loaded), _outputs(name, model))
    else:  # the same as patching the loaded model
        patch(model)
        assert _equal(_outputs(name, loaded), _outputs(name, model))


def test_a_learned_checkpoint_is_still_refused_after_a_meta_patch():
    model = _build("whisper")
    with torch.device("meta"):
        empty = _whisper().eval()
    patch(empty)
    empty.to_empty(device="cpu")
    state = model.state_dict()
    state["encoder.embed_positions.weight"] = torch.randn(1500, 64)
    with pytest.raises(ValueError, match=r"encoder\.embed_positions\.weight"):
        empty.load_state_dict(state, strict=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", MODELS)
def test_unpatch_gives_back_the_original(name, mode):
    model = _build(name)
    patched = copy.deepcopy(model)
    rows = patch(patched, compat=MODES[mode]).replaced
    report = unpatch(patched)
    assert report.action == "unpatch"
    assert sorted(r.path for r in report.replaced) == sorted(r.path for r in rows)
    assert all(r.mode == "original" and r.note == f"was {mode}" for r in report)
    assert _equal(_outputs(name, patched), _outputs(name, model))
    state, want = patched.state_dict(), model.state_dict()
    assert list(state) == list(want)
    assert all(torch.equal(state[k], want[k]) for k in want)
    assert [type(m).__name__ for m in patched.modules()] == [
        type(m).__name__ for m in model.modules()
    ]
    assert not unpatch(patched)  # nothing left to take back
    assert "no module patched" in str(unpatch(patched))
    again = patch(patched, compat=MODES[mode])  # and it patches again as the first time
    assert [r.path for r in again.replaced] == [r.path for r in rows]


def test_unpatch_follows_the_moves_made_since():
    model = _build("whisper")
    patched = copy.deepcopy(model)
    patch(patched, compat="original")
    patched, model = patched.to(torch.bfloat16), model.to(torch.bfloat16)
    unpatch(patched)
    table = patched.encoder.embed_positions.weight
    assert table.dtype == torch.bfloat16
    assert torch.equal(table, model.encoder.embed_positions.weight)


def test_unpatch_after_a_meta_patch_restores_tables_not_rotary_buffers():
    with torch.device("meta"):
        empty = _llama().eval()
    patch(empty)
    empty.to_empty(device="cpu")
    report = unpatch(empty)
    (row,) = report
    assert not row.replaced
    assert "built on the meta device" in row.note
    assert "'inv_freq'" in row.note
    assert "kept" in str(report)
    model = _build("whisper")
    with torch.device("meta"):
        empty = _whisper().eval()
    patch(empty, compat="original")
    empty.to_empty(device="cpu")
    empty.load_state_dict(model.state_dict(), strict=True)
    assert unpatch(empty).replaced
    assert type(empty.encoder.embed_positions) is torch.nn.Embedding
    assert _equal(_outputs("whisper", empty), _outputs("whisper", model))


@pytest.mark.parametrize("name", ["whisper", "llama", "timm-vit", "sd3-patch-embed"])
def test_patch_switches_modes(name):
    model = _build(name)
    patched = copy.deepcopy(model)
    first = patch(patched, compat="original")
    paths = [r.path for r in first.replaced]
    dry = patch(patched, dry_run=True)  # would switch; changes nothing
    assert [r.path for r in dry.replaced] == paths
    assert all(r.note.startswith("switched from compat") for r in dry.replaced)
    assert _equal(_outputs(name, patched), _outputs(name, model))
    assert not patch(patched, compat="original").replaced  # the same mode: nothing to do
    switched = patch(patched)
    assert [r.path for r in switched.replaced] == paths
    assert all(r.mode == "exact" and r.note.startswith("switched from compat")
               for r in switched.replaced)  # fmt: skip
    fresh = copy.deepcopy(model)
    patch(fresh)
    assert _equal(_outputs(name, patched), _outputs(name, fresh))  # as if patched exact
    back = patch(patched, compat="original")
    assert [r.path for r in back.replaced] == paths
    assert _equal(_outputs(name, patched), _outputs(name, model))
    assert len(unpatch(patched)) == len(paths)


def _grown_dynamic():
    model = _llama(rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})
    with torch.no_grad():
        model(torch.arange(3000)[None] % 128)  # past max_position_embeddings: inv_freq grows
    return model.eval()


def test_a_grown_dynamic_rope_is_reported_as_such():
    torch.manual_seed(0)
    model = _grown_dynamic()
    assert int(model.model.rotary_emb.max_seq_len_cached) == 3000
    (row,) = patch(copy.deepcopy(model), dry_run=True)
    assert row.mode == "exact"
    assert "had grown inv_freq to 3000 positions" in row.note
    assert "max_position_embeddings=2048" in row.note
    assert row.max_diff < 1e-3  # float32's error, not the grown state's (about 1)
    (row,) = patch(copy.deepcopy(model), compat="original", dry_run=True)
    assert not row.replaced
    assert "had grown inv_freq to 3000 positions" in row.note
    assert "compat='original' repeats the module its config builds" in row.note


def test_an_edited_inv_freq_is_left_alone_saying_so():
    torch.manual_seed(0)
    model = _llama()
    with torch.no_grad():
        model.model.rotary_emb.inv_freq *= 0.5
    for mode in MODES.values():
        (row,) = patch(model, compat=mode)
        assert not row.replaced
        assert "inv_freq is not what its config gives" in row.note
        assert "channel 0 holds 0.5, the config 1" in row.note
        assert type(model.model.rotary_emb).__name__ == "LlamaRotaryEmbedding"


# ---------------------------------------------------------------------------------------------
# every stand-in patch puts in place, from the models of the other patch tests


def _every_model():
    """``name -> build()`` for each model the patch tests build (their own builders)."""
    from tests import (
        test_patch,
        test_patch_diffusers,
        test_patch_diffusers_models,
        test_patch_diffusers_rope,
        test_patch_diffusers_video,
        test_patch_hf_vision,
        test_patch_timm_rope,
    )
    from tests.families import test_flux, test_kandinsky, test_ltx2, test_lumina, test_omnigen

    found = {f"transformers-{k}": v[0] for k, v in test_patch.ROTARY.items()}
    found |= {f"transformers-{k}": v[0] for k, v in test_patch.TABLES.items()}
    found |= {f"diffusers-{k}": v[0] for k, v in test_patch_diffusers.FAMILIES.items()}
    for module in (test_flux, test_patch_diffusers_rope, test_patch_diffusers_video):
        found |= {f"diffusers-{k}": v[0] for k, v in module.MODELS.items()}
    found |= {
        f"diffusers-{k}": (lambda k=k: test_patch_diffusers_models._build(k))
        for k in test_patch_diffusers_models.MODELS
    }
    found |= {
        "diffusers-lumina2": test_lumina._lumina2,
        "diffusers-z-image": test_lumina._z_image,
        "diffusers-kandinsky5": test_kandinsky._kandinsky5,
        "diffusers-omnigen": test_omnigen._omnigen,
        "diffusers-ltx2": lambda: test_ltx2._model("interleaved"),
    }
    found |= {
        f"transformers-{k}": (lambda k=k: test_patch_hf_vision.build(k)[0])
        for k in test_patch_hf_vision.FAMILIES
    }
    found |= {
        f"timm-{k}": (lambda k=k: test_patch_timm_rope._model(k)) for k in ("eva02", "vit-rope")
    }
    found["timm-sincos"] = _timm_vit
    found["transformers-pegasus"] = _pegasus
    found["transformers-roformer"] = lambda: T.RoFormerModel(T.RoFormerConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=256))  # fmt: skip
    found["transformers-time-series"] = lambda: T.TimeSeriesTransformerModel(
        T.TimeSeriesTransformerConfig(
            prediction_length=8, context_length=16, d_model=32, encoder_layers=1,
            decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=32, decoder_ffn_dim=32, lags_sequence=[1, 2]))  # fmt: skip
    return found


EVERY = _every_model()


def _types(model):
    return [type(m).__name__ for m in model.modules()]


@pytest.mark.parametrize("name", EVERY)
def test_every_stand_in_saves_loads_and_gives_back(name):
    """Each stand-in writes its original's keys (compat: their very values), loads its own
    checkpoint strictly, switches mode, and unpatch gives back the state dict and modules."""
    torch.manual_seed(0)
    model = EVERY[name]().eval()
    want, types = model.state_dict(), _types(model)
    patched = copy.deepcopy(model)
    report = patch(patched, compat="original")
    state = patched.state_dict()
    assert list(state) == list(want)
    assert all(torch.equal(state[k], want[k]) for k in want)  # the original's numbers
    patched.load_state_dict(state, strict=True)
    patched.load_state_dict(want, strict=True)
    switched = patch(patched)  # to exact: the keys and their shapes stay
    assert all(r.note.startswith("switched from compat") for r in switched.replaced)
    exact = patched.state_dict()
    assert [(k, v.shape, v.dtype) for k, v in exact.items()] == [
        (k, v.shape, v.dtype) for k, v in want.items()
    ]
    patched.load_state_dict(exact, strict=True)
    back = unpatch(patched)
    assert len(back.replaced) >= len(report.replaced)
    assert not back.left_alone
    after = patched.state_dict()
    assert list(after) == list(want)
    assert all(torch.equal(after[k], want[k]) for k in want)
    assert _types(patched) == types
