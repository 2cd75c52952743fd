"""posenc.torch.patch covers a transformers model type it does not list when its rotary module
follows transformers' standard machinery (``inv_freq`` from ``config.rope_parameters``,
``attention_scaling``, ``[freqs | freqs]`` tables): it replaces the module only after a replay
repeated the module's own tables bit for bit. Falcon, ERNIE 4.5, GLM-4, Helium and EXAONE 4 were
"not covered yet". compat="original" leaves every output identical, the exact tables are the
float64 formula rounded once (written here), the original checkpoint loads with strict=True,
and a module whose tables are not the standard ones is left alone, saying so."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")

LENGTH = 2048
TYPES = ("falcon", "ernie4_5", "glm4", "helium", "exaone4")


def _config(model_type, **extra):
    config = T.AutoConfig.for_model(
        model_type,
        num_hidden_layers=1,
        num_attention_heads=4,
        hidden_size=64,
        intermediate_size=128,
        vocab_size=128,
        max_position_embeddings=LENGTH,
        pad_token_id=0,
        **extra,
    )
    if hasattr(config, "num_key_value_heads"):
        config.num_key_value_heads = 2
    if getattr(config, "head_dim", 16) != 16:  # a field of its own (Helium: 128)
        config.head_dim = 16
    return config


def _model(model_type):
    torch.manual_seed(0)
    return T.AutoModel.from_config(_config(model_type)).eval()


def _out(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state


def _cos64(config, positions):
    """cos of transformers' default rule from the formula, in float64: ``[freqs | freqs]``."""
    params = config.rope_parameters
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head * params.get("partial_rotary_factor", 1.0))
    inv = params["rope_theta"] ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv[None]
    return np.cos(np.concatenate([angles, angles], axis=1))


@pytest.mark.parametrize("model_type", TYPES)
def test_the_standard_machinery_is_covered(model_type):
    model = _model(model_type)
    ids = torch.randint(0, 128, (1, 40), generator=torch.Generator().manual_seed(1))
    before = _out(model, ids)
    positions = torch.arange(LENGTH - 512, LENGTH)[None]
    x = torch.zeros(1)

    def outputs(m, dtype):
        return forward(m, {"input_ids": ids}, dtype)

    def exact(original, patched):
        want = _cos64(patched.config, positions[0].numpy())
        theirs = original.rotary_emb(x, positions)[0][0].double().numpy()
        ours = patched.rotary_emb(x, positions)[0][0].double().numpy()
        assert np.abs(ours - want).max() <= np.abs(theirs - want).max()
        assert np.abs(ours - want).max() < 2**-24  # float32 rounding of values within [-1, 1]
        assert torch.allclose(_out(patched, ids), before, atol=1e-4)

    name = type(model.rotary_emb).__name__
    contract = check_patch_contract(model, {"rotary_emb": name}, outputs, exact)
    assert "standard rotary" in contract.compat.replaced[0].replacement


class _Shifted(torch.nn.Module):
    """A module that looks like transformers' standard one but computes other tables."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config
        self.register_buffer("inv_freq", inner.inv_freq * 1.0001, persistent=False)
        self.attention_scaling = inner.attention_scaling

    def forward(self, x, position_ids):
        angles = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat([angles, angles], dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


_Shifted.__module__ = "transformers.models.falcon.modeling_falcon"
_Shifted.__name__ = _Shifted.__qualname__ = "FalconRotaryEmbedding"


def test_other_tables_are_left_alone_saying_so():
    model = _model("falcon")
    model.rotary_emb = _Shifted(model.rotary_emb)
    report = patch(model, dry_run=True)
    row = next(r for r in report if r.path == "rotary_emb")
    assert row.mode is None
    assert "not covered yet" in row.note
    assert "not those of transformers' standard rotary arithmetic" in row.note


def test_on_the_meta_device_a_fresh_module_is_checked():
    """Built before its weights (accelerate, ``device_map``): the module's tables come from its
    config, so a fresh one built on the CPU is checked, and the stand-in goes in."""
    with torch.device("meta"):
        model = T.AutoModel.from_config(_config("falcon"))
    row = next(r for r in patch(model) if r.path == "rotary_emb")
    assert row.mode == "exact"
    assert "standard rotary" in row.replacement
    model.to_empty(device="cpu")
    want = _cos64(model.config, np.arange(LENGTH - 64, LENGTH))
    cos = model.rotary_emb(torch.zeros(1), torch.arange(LENGTH - 64, LENGTH)[None])[0][0]
    assert np.abs(cos.double().numpy() - want).max() < 2**-24


def test_a_multimodal_module_is_not_the_standard_one():
    """Qwen3-VL's text module takes three axes of positions; with a head too narrow for its
    default sections, from_hf refuses it, and so does every multimodal form of the standard
    machinery: left alone, saying why (the plain form gave its tables on one axis of positions
    and was put in; the model's forward, on three, then failed)."""
    config = T.AutoConfig.for_model(
        "qwen3_vl_text",
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    model = T.AutoModel.from_config(config).eval()
    (row,) = patch(model, dry_run=True)
    assert row.mode is None
    assert row.note == (
        "not covered yet: `sections` must add up to dim / 2 = 8 (one entry per frequency), "
        "got (24, 20, 20) (sum 64)"
    )


# ---------------------------------------------------------------------------------------------
# the other forms of the standard machinery: interleaved, compact, float32 tables, rotary sets
# named apart from the layer types, a layer type without RoPE, multimodal interleaved

FORMS = {  # model type: the form of its tables
    "cohere2_moe": "interleaved",  # repeat_interleave, in x's dtype
    "blt": "interleaved",
    "openai_privacy_filter": "compact",  # one angle per pair
    "lfm3": "halves",  # float32 tables; rotary sets named by _rope_type_labels
    "deepseek_v4": "compact",  # per rotary set ('main', 'compress'), partial width
    "beam": "halves",  # its full-attention layer type has no RoPE (None)
    "glm_ocr_text": "interleaved",  # multimodal sections, interleaved
}


def _small(model_type):
    """The census' small model of this type (with the default rule: the scaled rules' own
    numbers are tested in test_rope*)."""
    from benchmarks.census import _overrides

    base = T.AutoConfig.for_model(model_type)
    options = _overrides(base, small=True, keep_head=model_type == "glm_ocr_text")
    if model_type == "openai_privacy_filter":  # yarn by default
        options["rope_parameters"] = {"rope_type": "default", "rope_theta": 150000.0}
    torch.manual_seed(0)
    return T.AutoModel.from_config(T.AutoConfig.for_model(model_type, **options)).eval()


def _sets(module):
    """The layer types a module holds tables for (``[None]``: one set)."""
    types = [
        t for t in getattr(module, "layer_types", None) or () if hasattr(module, f"{t}_inv_freq")
    ]
    return types or [None]


def _reference(module, config, layer_type, ids, form):
    """cos of the module's tables from the formula, in float64: ``ids`` ``[3, n]`` (one row per
    multimodal axis; the plain forms read the first)."""
    rp = config.rope_parameters if layer_type is None else config.rope_parameters[layer_type]
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head * rp.get("partial_rotary_factor", 1.0))
    inv = rp["rope_theta"] ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    if rp["rope_type"] == "proportional":  # the head's ladder, its first part rotated
        inv = rp["rope_theta"] ** (-np.arange(0, head, 2, dtype=np.float64) / head)
        inv[int(rp.get("partial_rotary_factor", 1.0) * head // 2) :] = 0.0
        inv /= rp.get("factor", 1.0)
    else:
        assert rp["rope_type"] == "default", rp  # the scaled rules are tested in test_rope*
    sections = getattr(module, "mrope_section", None)
    axis = np.zeros(len(inv), dtype=int)
    if sections is not None:  # blocks of frequencies, each from one axis in turn
        axis = np.concatenate([np.full(n, i % 3) for i, n in enumerate(sections)])
    angles = np.asarray(ids, dtype=np.float64)[axis, :].T * inv[None]
    if form == "halves":
        angles = np.concatenate([angles, angles], axis=1)
    elif form == "interleaved":
        angles = np.repeat(angles, 2, axis=1)
    return np.cos(angles)


def _call(module, ids, layer_type, multimodal, dtype=torch.float32):
    x = torch.zeros(1, dtype=dtype)
    positions = ids[:, None] if multimodal else ids[:1]
    args = (x, positions) if layer_type is None else (x, positions, layer_type)
    with torch.no_grad():
        return module(*args)


@pytest.mark.parametrize("model_type", FORMS)
def test_every_form_of_the_standard_machinery(model_type):
    model = _small(model_type)
    modules = {  # path: (its layer types, multimodal)
        p: (_sets(m), getattr(m, "mrope_section", None) is not None)
        for p, m in model.named_modules()
        if type(m).__name__.endswith("RotaryEmbedding")
    }
    ids = torch.stack([torch.arange(1000, 1300) * k for k in (1, 2, 3)])

    def outputs(m, dtype):
        for path, (sets, multimodal) in modules.items():
            for layer_type in sets:
                yield from _call(m.get_submodule(path), ids, layer_type, multimodal, dtype)

    def exact(original, patched):
        for path, (sets, multimodal) in modules.items():
            theirs, ours = original.get_submodule(path), patched.get_submodule(path)
            for layer_type in sets:
                want = _reference(theirs, theirs.config, layer_type, ids.numpy(), FORMS[model_type])
                cos = _call(ours, ids, layer_type, multimodal)[0].reshape(want.shape)
                old = _call(theirs, ids, layer_type, multimodal)[0].reshape(want.shape)
                err = np.abs(cos.double().numpy() - want).max()
                assert err < 2**-24  # float32 rounding of values in [-1, 1]
                assert err <= np.abs(old.double().numpy() - want).max()

    check_patch_contract(model, list(modules), outputs, exact)
