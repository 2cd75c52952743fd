"""RotaryEmbedding.from_hf takes what transformers takes, and Timesteps' compat mode.

Against the real transformers modules built from small configs (no download): bit for bit in
compat mode (``torch.equal``), and within float32 rounding of a float64 NumPy reference
written from the formula (``cos``/``sin`` of ``p * base ** (-2i / d) / factor``) in exact mode.
Covered here: keys a rope_type does not take (dropped with a warning, as transformers ignores
them), the per-layer-type families (Gemma 3: one module, one set of tables per layer type), a
rotary width past the head (refused), the 16-bit buffers of a model moved to bf16 or fp16
(reproduced in compat), the warning past 2^24, and ``Timesteps(compat="original")`` against
diffusers' own module.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import posenc
from tests.helpers import hf_rotary_module, raises

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from posenc.compat.transformers import FAMILIES  # noqa: E402
from posenc.torch import RotaryEmbedding, Timesteps  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")

SMALL = {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 512,
         "num_hidden_layers": 2, "vocab_size": 1000}  # fmt: skip
FAR = torch.stack([torch.arange(2000), torch.arange(2000) + 60_000])  # [2, 2000] ids


def reference(ids, dim, base, factor=1.0):
    """float64 ``(cos, sin)`` ``[*, dim]`` in halves: angles ``p * base ** (-2i / d) / factor``."""
    omega = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim) / factor
    angles = np.asarray(ids, dtype=np.float64)[..., None] * omega
    return [np.concatenate([f(angles)] * 2, axis=-1) for f in (np.cos, np.sin)]


def near(got, want, x_dtype):
    """Exact mode: the float64 truth rounded once to the activations' dtype (half an ulp)."""
    tol = 2.0**-24 if x_dtype == torch.float32 else 2.0**-8
    for g, w in zip(got, want, strict=True):
        assert g.dtype == x_dtype
        err = np.abs(g.double().numpy() - w).max()
        assert err <= tol, err


def same(got, want):
    return all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def llama(**rope):
    return T.LlamaConfig(**SMALL, max_position_embeddings=2048, rope_parameters=rope)


# ---------------------------------------------------------------------------------------------
# 1. keys a rope_type does not take: transformers logs and ignores them; so does from_hf


def test_a_key_the_rule_does_not_take_is_dropped_with_one_warning_as_transformers_does():
    rope = {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 1e4,
            "original_max_position_embeddings": 2048}  # fmt: skip
    config = llama(**rope)
    theirs = hf_rotary_module(config)  # transformers only logs the key
    with pytest.warns(UserWarning, match=r"'original_max_position_embeddings'.*'dynamic'") as w:
        compat = RotaryEmbedding.from_hf(config, compat="transformers")
    assert len(w) == 1
    with pytest.warns(UserWarning, match="original_max_position_embeddings"):
        exact = RotaryEmbedding.from_hf(config)
    x = torch.zeros(1)
    for n in (1000, 5000, 1500):
        ids = torch.arange(n)[None]
        assert same(compat(x, ids), theirs(x, ids)), n
        want = posenc.rope(ids, 64, scaling={"rope_type": "dynamic", "factor": 4.0,
                                             "max_position_embeddings": 2048})  # fmt: skip
        assert same(exact(x, ids), want), n
    with raises("`scaling['original_max_position_embeddings']` is not a key of rope_type"):
        posenc.rope(torch.arange(8), 64, scaling={**rope, "max_position_embeddings": 2048})


@pytest.mark.parametrize(
    ("rope", "dropped"),
    [
        ({"rope_type": "default", "rope_theta": 1e4, "factor": 8.0}, "factor"),
        ({"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0, "fcator": 2.0}, "fcator"),
        ({"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0, "attention_factor": 2.0},
         "attention_factor"),
        # the rules read the config's length, never the dict's: transformers ignores this one
        ({"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0,
          "max_position_embeddings": 4096}, "max_position_embeddings"),
        ({"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 512, "beta_fast": 3.0},
         "beta_fast"),
    ],
)  # fmt: skip
def test_ignored_keys_are_dropped_and_the_taken_ones_honoured(rope, dropped):
    """Whatever transformers ignores is dropped (bit for bit its numbers, which the dropped
    key would have changed); every key it reads (`factor`) still counts."""
    config = llama(**rope)
    theirs = hf_rotary_module(config)
    with pytest.warns(UserWarning, match=f"'{dropped}'.*rope_type '{rope['rope_type']}'"):
        compat = RotaryEmbedding.from_hf(config, compat="transformers")
    ids = torch.arange(3000)[None] + 100
    assert same(compat(torch.zeros(1), ids), theirs(torch.zeros(1), ids))


def test_a_model_own_key_is_refused_not_dropped():
    """Keys a model declares its own (transformers does not warn about them) may be read by
    the model: one posenc does not reproduce is an error, never silently dropped."""
    config = llama(rope_type="linear", rope_theta=1e4, factor=2.0, llama_4_scaling_beta=0.1)
    config.ignore_keys_at_rope_validation = {"llama_4_scaling_beta"}
    with raises("`config.rope_parameters['llama_4_scaling_beta']`", "posenc does not reproduce"):
        RotaryEmbedding.from_hf(config)


# ---------------------------------------------------------------------------------------------
# 2. per-layer-type families: one module, one set of tables per layer type


def gemma3(**kw):
    """A small Gemma-3 text config with the released models' RoPE: sliding layers base 1e4,
    full layers base 1e6 with linear x8."""
    rope = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
    }
    shape = {**SMALL, "num_hidden_layers": 6, "head_dim": 64, "num_key_value_heads": 1}
    return T.Gemma3TextConfig(**{**shape, "rope_parameters": rope, **kw})


def test_gemma3_one_module_holds_a_table_set_per_layer_type():
    config = gemma3()
    theirs = hf_rotary_module(config)
    compat = RotaryEmbedding.from_hf(config, compat="transformers")
    exact = RotaryEmbedding.from_hf(config)
    assert exact.layer_types == tuple(theirs.layer_types) == ("full_attention", "sliding_attention")
    truth = {
        "sliding_attention": reference(FAR, 64, 1e4),
        "full_attention": reference(FAR, 64, 1e6, 8),
    }
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.zeros(1, dtype=dtype)
        for layer_type, want in truth.items():
            assert same(compat(x, FAR, layer_type), theirs(x, FAR, layer_type)), layer_type
            got = exact(x, FAR, layer_type)
            near(got, want, dtype)
            assert not torch.equal(got[0], theirs(x, FAR, layer_type)[0])  # float32 angles drift
    assert "sliding_attention: dim=64, base=10000, rope_type='default'" in repr(exact)
    assert "full_attention: dim=64, base=1e+06, rope_type='linear'" in repr(exact)
    assert exact.state_dict() == {}


def test_gemma3_model_with_the_swapped_module_keeps_its_outputs_in_compat():
    """The model calls `rotary_emb(hidden_states, position_ids, layer_type)` once per layer
    type: the swapped module serves every layer, and compat changes no output."""
    torch.manual_seed(0)
    model = T.Gemma3ForCausalLM(gemma3(sliding_window=16)).eval()
    ids = torch.randint(0, 1000, (1, 40))
    with torch.no_grad():
        before = model(ids).logits
        model.model.rotary_emb = RotaryEmbedding.from_hf(model.config, compat="transformers")
        assert torch.equal(model(ids).logits, before)
        model.model.rotary_emb = RotaryEmbedding.from_hf(model.config)
        assert (model(ids).logits - before).abs().max() < 1e-4


PER_LAYER = ("gemma3_text", "gemma3n_text", "olmo3")


@pytest.mark.parametrize("model_type", PER_LAYER)
def test_every_per_layer_family_is_its_module(model_type):
    from transformers import CONFIG_MAPPING

    assert FAMILIES[model_type].per_layer
    config = CONFIG_MAPPING[model_type]()
    theirs = hf_rotary_module(config)
    compat = RotaryEmbedding.from_hf(config, compat="transformers")
    exact = RotaryEmbedding.from_hf(config)
    assert compat.layer_types == tuple(theirs.layer_types)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.zeros(1, dtype=dtype)
        for layer_type in compat.layer_types:
            want = theirs(x, FAR, layer_type)
            assert same(compat(x, FAR, layer_type), want), (layer_type, dtype)
            got = exact(x, FAR, layer_type)
            assert [(g.shape, g.dtype) for g in got] == [(w.shape, w.dtype) for w in want]


def test_wrapped_gemma3_config_and_layer_type_errors():
    config = T.Gemma3Config(text_config=gemma3().to_dict())
    module = RotaryEmbedding.from_hf(config)
    assert module.model_type == "gemma3_text"
    x, ids = torch.zeros(1), torch.arange(4)[None]
    with raises("`layer_type` must be one of", "'full_attention'", "None"):
        module(x, ids)
    with raises("`layer_type` must be one of", "'chunked_attention'"):
        module(x, ids, "chunked_attention")
    with raises("holds one set of tables: `layer_type` must be None", "'full_attention'"):
        RotaryEmbedding.from_hf(llama(rope_type="default", rope_theta=1e4))(
            x, ids, "full_attention"
        )
    flat = llama(rope_type="default", rope_theta=1e4)
    flat.rope_parameters = {"sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}
    with raises("holds one set per layer type", "sliding_attention", "'llama'"):
        RotaryEmbedding.from_hf(flat)


# ---------------------------------------------------------------------------------------------
# 3. a rotary width past the head


def test_a_rotary_width_past_the_head_is_refused_at_construction():
    config = T.GPTNeoXConfig(hidden_size=256, num_attention_heads=4, rotary_pct=1.5)
    with raises("partial_rotary_factor", "rotary_pct", "1.5", "head dim 64", "96"):
        RotaryEmbedding.from_hf(config)
    config = T.GPTNeoXConfig(hidden_size=256, num_attention_heads=4, rotary_pct=0.25)
    assert RotaryEmbedding.from_hf(config).rotary.dim == 16


# ---------------------------------------------------------------------------------------------
# 4. 16-bit models: transformers rounds its inv_freq buffer; compat does the same


@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
def test_compat_moved_to_16_bits_is_transformers_moved_to_16_bits(half):
    config = llama(rope_type="default", rope_theta=5e5)
    theirs = hf_rotary_module(config).to(half)
    compat = RotaryEmbedding.from_hf(config, compat="transformers").to(half)
    exact = RotaryEmbedding.from_hf(config)
    fresh = hf_rotary_module(config)
    for dtype in (torch.float32, half):
        x = torch.zeros(1, dtype=dtype)
        want = theirs(x, FAR)
        assert same(compat(x, FAR), want), dtype
        assert not torch.equal(want[0], fresh(x, FAR)[0])  # the rounded buffer shows
        assert same(exact.to(half)(x, FAR), RotaryEmbedding.from_hf(config)(x, FAR))
    x = torch.zeros(1)
    assert (theirs(x, FAR)[0] - fresh(x, FAR)[0]).abs().max() > 1e-3
    theirs, compat = theirs.float(), compat.float()  # back to float32: still rounded
    assert same(compat(x, FAR), theirs(x, FAR))


def test_compat_16_bit_buffers_of_the_length_dependent_rules():
    """dynamic: a grown buffer is fresh float32 until the next cast, a reset one the rounded
    original; longrope: either table copied into the bf16 buffer."""
    bf16, x = torch.bfloat16, torch.zeros(1)
    config = llama(rope_type="dynamic", factor=4.0, rope_theta=1e4)
    theirs = hf_rotary_module(config).to(bf16)
    compat = RotaryEmbedding.from_hf(config, compat="transformers").to(bf16)
    for step, n in enumerate((1000, 5000, 3000, 6000, 2500, 1000, 3000)):
        if step == 3:  # the grown buffer is cast too
            theirs, compat = theirs.half().bfloat16(), compat.half().bfloat16()
        ids = torch.arange(n)[None]
        assert same(compat(x, ids), theirs(x, ids)), n
    config = T.Phi3Config(**SMALL, max_position_embeddings=16384,
                          original_max_position_embeddings=4096,
                          rope_scaling={"type": "longrope", "short_factor": [1.0] * 32,
                                        "long_factor": [4.0] * 32})  # fmt: skip
    theirs = hf_rotary_module(config).to(bf16)
    compat = RotaryEmbedding.from_hf(config, compat="transformers").to(bf16)
    for n in (100, 9000, 100):
        ids = torch.arange(n)[None]
        assert same(compat(x, ids), theirs(x, ids)), n


def test_bf16_llama_and_its_compat_replacement_give_the_same_logits(tmp_path):
    """`model.to(bf16)` rounds the rotary buffer; `from_pretrained(dtype=bf16)` recomputes it
    in float32 (transformers 5.23): the swap takes the replaced buffer's dtype, and later moves
    reach both modules alike."""
    bf16 = torch.bfloat16
    torch.manual_seed(0)
    T.LlamaForCausalLM(T.LlamaConfig(**SMALL)).save_pretrained(tmp_path)
    ids, position_ids = torch.randint(0, 1000, (1, 64)), torch.arange(64)[None] + 40_000

    def logits(model):
        with torch.no_grad():
            return model(ids, position_ids=position_ids).logits

    theirs, ours = (T.LlamaForCausalLM.from_pretrained(tmp_path, dtype=bf16) for _ in "ab")
    assert theirs.model.rotary_emb.inv_freq.dtype == torch.float32
    ours.model.rotary_emb = RotaryEmbedding.from_hf(ours.config, compat="transformers")
    loaded = logits(theirs)
    assert torch.equal(logits(ours), loaded)
    theirs, ours = theirs.to(bf16), ours.to(bf16)  # now the buffer is cast, and rounded
    assert theirs.model.rotary_emb.inv_freq.dtype == bf16
    assert torch.equal(logits(ours), logits(theirs))
    assert not torch.equal(logits(theirs), loaded)
    moved = T.LlamaForCausalLM.from_pretrained(tmp_path).to(bf16)
    before = logits(moved)
    old = moved.model.rotary_emb
    swap = RotaryEmbedding.from_hf(moved.config, compat="transformers")
    moved.model.rotary_emb = swap.to(old.inv_freq.dtype)
    assert torch.equal(logits(moved), before)


# ---------------------------------------------------------------------------------------------
# 5. compat past 2^24: transformers' float32 garbage, bit for bit, with one warning


def test_compat_warns_once_per_module_past_2_to_the_24():
    config = llama(rope_type="default", rope_theta=1e4)
    theirs = hf_rotary_module(config)
    compat = RotaryEmbedding.from_hf(config, compat="transformers")
    exact = RotaryEmbedding.from_hf(config)
    x, below = torch.zeros(1), torch.arange(2**24 - 8, 2**24 + 1)[None]
    past = torch.arange(2**24 - 4, 2**24 + 4)[None]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert same(compat(x, below), theirs(x, below))  # 2^24 itself is a float32
        exact(x, past)
    with pytest.warns(UserWarning, match=r"past 2\^24.*float32.*compat=None is exact") as w:
        got = compat(x, past)
    assert len(w) == 1
    assert same(got, theirs(x, past))  # the original's numbers, as promised
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compat(x, past)  # once per module
        compat(x, past + 10)
    with pytest.warns(UserWarning, match=r"past 2\^24"):
        RotaryEmbedding.from_hf(config, compat="transformers")(x, past)  # another module
    gemma = RotaryEmbedding.from_hf(gemma3(), compat="transformers")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for layer_type in gemma.layer_types:
            gemma(x, past, layer_type)
    assert [str(m.message)[:38] for m in w] == ["position_ids reach 16777219, past 2^24"]


def test_compat_reads_no_device_value_to_warn():
    """Positions not read on the host (meta here, as on an accelerator) are not checked."""
    compat = RotaryEmbedding.from_hf(llama(rope_type="default", rope_theta=1e4),
                                     compat="transformers")  # fmt: skip
    ids = (torch.arange(8)[None] + 2**25).to("meta")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cos, _ = compat(torch.zeros(1, device="meta"), ids)
    assert cos.shape == (1, 8, 64)


def _count_float32(monkeypatch, kind):
    """Count the calls of rope_type ``kind``'s float32 arithmetic (its inverse frequencies)."""
    from dataclasses import replace

    from posenc.spec import scaling

    rule, calls = scaling.RULES[kind], []

    def counted(*args):
        calls.append(args[4])  # seq_len
        return rule.float32(*args)

    monkeypatch.setitem(scaling.RULES, kind, replace(rule, float32=counted))
    return calls


def test_compat_keeps_its_inverse_frequencies_as_transformers_keeps_its_buffer(monkeypatch):
    """The rule's float32 arithmetic runs once per module (and move), not once per forward,
    as transformers' module computes its ``inv_freq`` buffer once; same bits."""
    calls = _count_float32(monkeypatch, "llama3")
    config = llama(rope_type="llama3", rope_theta=5e5, factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=1024)  # fmt: skip
    theirs = hf_rotary_module(config)
    compat = RotaryEmbedding.from_hf(config, compat="transformers")
    kept = compat._tables[None].inv_freq
    x = torch.zeros(1)
    for ids in (FAR, FAR[:, :7], FAR):
        assert same(compat(x, ids), theirs(x, ids))
    assert len(calls) == 1
    assert compat._tables[None].inv_freq is kept
    assert compat.state_dict() == {}
    theirs, compat = theirs.to(torch.bfloat16), compat.to(torch.bfloat16)  # rebuilt, rounded
    assert len(calls) == 2
    for _ in range(2):
        assert same(compat(x, FAR), theirs(x, FAR))
    assert len(calls) == 2


def test_compat_computes_the_length_dependent_phases_per_call(monkeypatch):
    """dynamic: its default phase is kept; a grown length is computed per call, as now."""
    calls = _count_float32(monkeypatch, "dynamic")
    config = llama(rope_type="dynamic", rope_theta=1e4, factor=4.0)
    theirs = hf_rotary_module(config)
    compat = RotaryEmbedding.from_hf(config, compat="transformers")
    assert len(calls) == 1
    x = torch.zeros(1)
    for n, more in ((1000, 0), (1000, 0), (5000, 1), (3000, 1), (1500, 0), (2048, 0)):
        before = len(calls)
        ids = torch.arange(n)[None]
        assert same(compat(x, ids), theirs(x, ids)), n
        assert len(calls) - before == more, n


# ---------------------------------------------------------------------------------------------
# 6. Timesteps(compat="original") is diffusers' own module


@pytest.mark.parametrize("flip", [True, False])
@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("dim", [320, 33])
def test_timesteps_compat_is_diffusers_timesteps(flip, shift, dim):
    embeddings = pytest.importorskip("diffusers.models.embeddings")
    theirs = embeddings.Timesteps(dim, flip_sin_to_cos=flip, downscale_freq_shift=shift)
    ours = Timesteps(dim, flip, shift, compat="original")
    exact = Timesteps(dim, flip, shift)
    for t in (torch.tensor([0, 1, 250, 999, 4321]),
              torch.tensor([0.5, 999.25, 12_345.678, 1e5 + 1 / 3])):  # fmt: skip
        want = theirs(t)
        got = ours(t)
        assert got.dtype == want.dtype == torch.float32
        assert torch.equal(got, want), t
        assert got.shape == exact(t).shape
    assert not torch.equal(exact(t), want)  # float32 angles at 1e5
    assert "compat='original'" in repr(ours)
    assert "compat" not in repr(exact)


def test_timesteps_compat_choices_are_encode_s():
    with raises("`compat` must be one of", "'original'", "'diffusers'"):
        Timesteps(8, compat="diffusers")
    t = torch.tensor([3.0, 77.5])
    want = posenc.encode(t, 64, preset="timestep", compat="original", flip_sin_to_cos=True,
                         downscale_freq_shift=0, scale=2)  # fmt: skip
    got = Timesteps(64, True, 0, scale=2, compat="original")(t)
    assert torch.equal(got, want)


def test_the_module_keeps_transformers_max_seq_len_cached():
    """``max_seq_len_cached`` reads as transformers' module's attribute does, including the
    dynamic rule's memory in compat mode."""
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, max_position_embeddings=2048,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0},
    )  # fmt: skip
    theirs = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(config)
    ours = RotaryEmbedding.from_hf(config, compat="transformers")
    assert ours.max_seq_len_cached == theirs.max_seq_len_cached == 2048
    x, ids = torch.zeros(1), torch.arange(3000)[None]
    theirs(x, ids)
    ours(x, ids)
    assert ours.max_seq_len_cached == theirs.max_seq_len_cached == 3000


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_familys_default_theta_is_its_config_classs(model_type):
    """``Family.theta``, which ``posenc audit`` reads a config.json without ``rope_theta``
    with where transformers is not installed, is the default of transformers' config class
    (None where the class's default is one set per layer type)."""
    config = T.AutoConfig.for_model(model_type)
    params = config.rope_parameters
    per_layer = all(isinstance(v, dict) for v in params.values())
    want = None if per_layer else params["rope_theta"]
    assert FAMILIES[model_type].theta == want
