"""posenc.torch.patch's report misses nothing that holds positions: a fixed table a model reads
as a plain tensor (GPT-J's and CodeGen's ``embed_positions``, CTRL's ``pos_encoding``), a
learned table that still holds a sinusoid (FSMT's, DistilBERT's and XLM's), and DETR's sine
embedding wherever transformers copied it (Conditional DETR, Table Transformer), each either
replaced or left alone with a reason that names what it holds. The sinusoids are checked
against float64 tables written here from the formulas (tests/reference.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests import reference

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")

NEW = {"n_layer": 1, "n_head": 2, "n_embd": 32, "vocab_size": 100, "n_positions": 96}


def _row(report, path):
    rows = {r.path: r for r in report}
    assert path in rows, f"{path} not in the report:\n{report}"
    return rows[path]


def _stated_error(note):
    """The difference the note states (``... to 3e-08``)."""
    found = re.search(r" to ([0-9.e+-]+)", note)
    assert found, note
    return float(found.group(1))


# ---------------------------------------------------------------------------------------------
# fixed tables read as plain tensors: reported with the sinusoid they hold


FIXED = {  # name: (model, path of the table, its reference)
    "gptj": (lambda: T.GPTJModel(T.GPTJConfig(**NEW, rotary_dim=8)), "h.0.attn.embed_positions",
             lambda: reference.marian(96, 8)),
    "codegen": (lambda: T.CodeGenModel(T.CodeGenConfig(**NEW, rotary_dim=8)),
                "h.0.attn.embed_positions", lambda: reference.marian(96, 8)),
    "ctrl": (lambda: T.CTRLModel(T.CTRLConfig(**NEW, dff=64)), "pos_encoding",
             lambda: reference.marian(96, 32)),
}  # fmt: skip


@pytest.mark.parametrize("name", FIXED)
def test_a_fixed_buffer_is_reported_with_what_it_holds(name):
    make, path, want = FIXED[name]
    model = make()
    saved = model.get_buffer(path).detach().double().numpy()
    report = patch(model, dry_run=True)
    row = _row(report, path)
    assert (row.original, row.mode) == ("buffer", None)
    assert "holds the marian sinusoid" in row.note, row.note
    assert "no stand-in" in row.note, row.note
    error = float(np.abs(saved - want()).max())
    assert error < 1e-5  # it is the sinusoid (float32 arithmetic)
    assert _stated_error(row.note) == pytest.approx(error, rel=0.05, abs=1e-12)
    assert not patch(model).replaced  # the exact patch leaves it too


def test_lattes_frame_table_is_reported_with_what_it_holds():
    """Latte's ``temp_pos_embed``, a fixed [1, frames, d] buffer its forward adds to the frame
    tokens, was missing from the report: now listed with the sinusoid it holds."""
    diffusers = pytest.importorskip("diffusers")
    model = diffusers.LatteTransformer3DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4, num_layers=1,
        sample_size=8, patch_size=2, cross_attention_dim=16, caption_channels=16, video_length=6,
    )  # fmt: skip
    saved = model.temp_pos_embed[0].double().numpy()
    row = _row(patch(model, dry_run=True), "temp_pos_embed")
    assert (row.original, row.mode) == ("buffer", None)
    assert "LatteTransformer3DModel's fixed table (holds the marian sinusoid" in row.note, row.note
    error = float(np.abs(saved - reference.marian(6, 16)).max())
    assert _stated_error(row.note) == pytest.approx(error, rel=0.05, abs=1e-12)


def _timm(name):
    return pytest.importorskip("timm").create_model(name, num_classes=0)


def _hiera_video():
    Hiera = pytest.importorskip("timm.models.hiera").Hiera

    return Hiera(img_size=(8, 32, 32), embed_dim=16, num_heads=1, stages=(1, 1, 1, 1),
                 sep_pos_embed=True, patch_kernel=(3, 7, 7), patch_stride=(2, 4, 4),
                 patch_padding=(1, 3, 3), q_stride=(1, 2, 2), mask_unit_size=(1, 2, 2),
                 num_classes=0)  # fmt: skip


TIMM_LEARNED = {  # name: (model, its learned tables)
    "hiera": (lambda: _timm("hiera_tiny_224"), ["pos_embed"]),
    "hiera-abswin": (lambda: _timm("hiera_small_abswin_256"), ["pos_embed", "pos_embed_win"]),
    "hiera-video": (_hiera_video, ["pos_embed_spatial", "pos_embed_temporal"]),
    "naflexvit": (lambda: _timm("naflexvit_base_patch16_gap"), ["embeds.pos_embed"]),
}  # fmt: skip


@pytest.mark.parametrize("name", TIMM_LEARNED)
def test_timms_learned_tables_are_reported(name):
    """Hiera's and NaFlexViT's learned tables were missing from the report (ViTs list
    theirs): now each is a row, learned, left alone; Hiera's window and video tables too."""
    make, paths = TIMM_LEARNED[name]
    report = patch(make(), dry_run=True)
    assert [r.path for r in report] == paths, str(report)
    for row in report:
        assert (row.original, row.mode, row.note) == ("Parameter", None, "learned, left alone")


# ---------------------------------------------------------------------------------------------
# learned tables that hold a sinusoid say which


def _fsmt():
    config = T.FSMTConfig(
        langs=["en", "de"],
        src_vocab_size=100,
        tgt_vocab_size=100,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=1,
    )
    return T.FSMTModel(config)


LEARNED = {  # name: (model, path, preset words, its reference)
    "fsmt": (_fsmt, "encoder.embed_positions", "fairseq sinusoid padding_idx=1",
             lambda: reference.fairseq(66, 32, padding_idx=1)),
    "distilbert": (lambda: T.DistilBertModel(T.DistilBertConfig(
        n_layers=1, n_heads=2, dim=32, hidden_dim=64, vocab_size=100, max_position_embeddings=64,
        sinusoidal_pos_embds=True)), "embeddings.position_embeddings", "vaswani sinusoid",
        lambda: reference.vaswani(64, 32)),
    "xlm": (lambda: T.XLMModel(T.XLMConfig(
        n_layers=1, n_heads=2, emb_dim=32, vocab_size=100, max_position_embeddings=64,
        sinusoidal_embeddings=True)), "position_embeddings", "vaswani sinusoid",
        lambda: reference.vaswani(64, 32)),
}  # fmt: skip


@pytest.mark.parametrize("name", LEARNED)
def test_a_learned_table_says_which_sinusoid_it_holds(name):
    make, path, words, want = LEARNED[name]
    model = make()
    saved = model.get_submodule(path).weight.detach().double().numpy()
    row = _row(patch(model, dry_run=True), path)
    assert row.mode is None
    assert row.note.startswith("learned (a trainable table; holds the " + words + " to ")
    assert row.note.endswith("left alone")
    assert _stated_error(row.note) == pytest.approx(
        np.abs(saved - want()).max(), rel=0.05, abs=1e-12
    )
    with torch.no_grad():  # trained away from it: plain "learned"
        model.get_submodule(path).weight.normal_()
    assert _row(patch(model, dry_run=True), path).note == "learned, left alone"


# ---------------------------------------------------------------------------------------------
# DETR's sine embedding wherever transformers copied it


def _backbone():
    return T.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 8, 8, 8],
                          depths=[1, 1, 1, 1])  # fmt: skip


def _detr_like(config_class, model_class):
    config = config_class(
        use_timm_backbone=False, backbone_config=_backbone(), d_model=32, encoder_layers=1,
        decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=4)  # fmt: skip
    torch.manual_seed(0)
    return model_class(config).eval()


DETR_LIKE = {  # name: (model, path of the sine embedding, its output from a pixel mask)
    "conditional-detr": (lambda: _detr_like(T.ConditionalDetrConfig, T.ConditionalDetrModel),
                         "position_embedding",
                         lambda m, mask: m(torch.Size([*mask.shape[:1], 32, *mask.shape[1:]]),
                                           torch.device("cpu"), torch.float32, mask)),
    "table-transformer": (lambda: _detr_like(T.TableTransformerConfig, T.TableTransformerModel),
                          "backbone.position_embedding",
                          lambda m, mask: m(torch.zeros(mask.shape[0], 3, *mask.shape[1:]),
                                            mask)),
}  # fmt: skip


@pytest.mark.parametrize("name", DETR_LIKE)
def test_detr_sine_copies_are_replaced_exactly(name):
    make, path, run = DETR_LIKE[name]
    model = make()
    original = model.get_submodule(path)
    mask = torch.ones(2, 12, 20, dtype=torch.long)
    mask[1, :, 15:] = mask[1, 9:, :] = 0
    want = reference.detr((mask == 0).numpy(), 16, normalize=True)
    pixels = torch.randn(2, 3, 48, 80, generator=torch.Generator().manual_seed(1))
    pixel_mask = torch.ones(2, 48, 80, dtype=torch.long)
    with torch.no_grad():
        before = model(pixels, pixel_mask=pixel_mask).last_hidden_state

    compat = patch(model, compat="original")
    assert not compat.replaced
    assert "no replay" in _row(compat, path).note
    report = patch(model)
    assert [r.path for r in report.replaced] == [path]
    new = model.get_submodule(path)
    assert new is not original
    error_before = np.abs(run(original, mask).numpy() - want).max()
    error_after = np.abs(run(new, mask).numpy() - want).max()
    assert error_after <= error_before
    assert error_after < 1e-6
    with torch.no_grad():
        after = model(pixels, pixel_mask=pixel_mask).last_hidden_state
    assert torch.allclose(after, before, atol=1e-4)  # float32 noise through the layers
    assert not patch(model).replaced  # twice: a no-op


def test_another_sine_embedding_is_left_alone_with_its_difference():
    """Deformable DETR's sine embedding offsets its coordinates by 0.5: not DETR's numbers."""
    deformable = pytest.importorskip("transformers.models.deformable_detr.modeling_deformable_detr")
    holder = torch.nn.Module()
    holder.sine = deformable.DeformableDetrSinePositionEmbedding(16, normalize=True)
    row = _row(patch(holder, dry_run=True), "sine")
    assert row.mode is None
    assert re.search(r"differ from DETR's sine embedding by [0-9.e-]+", row.note), row.note


# ---------------------------------------------------------------------------------------------
# on the meta device: modules that keep their tables outside their buffers


META = {  # diffusers class: (keyword of one layer, path, replaced on meta)
    "QwenImageTransformer2DModel": ("num_layers", "pos_embed", True),
    "Lumina2Transformer2DModel": ("num_layers", "rope_embedder", True),
    "MiniMaxH3Transformer3DModel": ("num_layers", "rope", False),
}


@pytest.mark.parametrize("name", META)
def test_the_meta_device_never_makes_patch_raise(name):
    """They read values (torch.equal, .cpu()) no meta tensor has; patch raised
    NotImplementedError. Now: replaced unmeasured, or left alone until the model is loaded."""
    diffusers = pytest.importorskip("diffusers")
    key, path, replaced = META[name]
    with torch.device("meta"):
        model = getattr(diffusers, name)(**{key: 1})
    row = _row(patch(model, dry_run=True), path)
    assert row.replaced == replaced, row
    assert row.max_diff is None
    assert ("not measured" if replaced else "load the model first") in row.note


# ---------------------------------------------------------------------------------------------
# the Qwen audio towers' copy of Whisper's sinusoids (a buffer read by ``forward(seqlen)``)


@pytest.mark.parametrize("family", ["qwen3_asr", "qwen2_5_omni", "qwen3_omni_moe"])
def test_the_audio_towers_sinusoids_are_replaced(family):
    """Left alone as "not covered" before; now Whisper's preset, compat bit for bit, exact
    within float32 rounding of the float64 table (tests/reference.whisper)."""
    import importlib

    original_cls = importlib.import_module(
        f"transformers.models.{family}.modeling_{family}"
    ).SinusoidsPositionEmbedding
    holder = torch.nn.Module()
    holder.pe = original_cls(1500, 64)
    original = holder.pe
    want = reference.whisper(1500, 64)

    compat = patch(holder, compat="original")
    assert [r.path for r in compat.replaced] == ["pe"], str(compat)
    assert torch.equal(holder.pe(750), original(750))
    assert torch.equal(holder.pe.positional_embedding, original.positional_embedding)

    assert [r.path for r in patch(holder).replaced] == ["pe"]  # switched to exact
    ours = holder.pe(1500).double().numpy()
    theirs = original(1500).double().numpy()
    assert np.abs(ours - want).max() <= np.abs(theirs - want).max()
    assert np.abs(ours - want).max() <= 2**-24
    assert holder.pe(10).shape == (10, 64)
    assert not holder.state_dict()  # the original's buffer was not persistent either
