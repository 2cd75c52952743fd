"""posenc.torch.RotaryEmbedding and RotaryEmbedding.from_hf: numbers against a float64
rotation written from the formula (`helpers.rotated`), every way of giving positions,
production behaviour (state_dict, meta, compile), the rotary presets against their upstreams,
and the transformers adapter bit for bit with every covered family's own module. (Export and
ONNX: test_export.py.)"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import posenc
from tests.helpers import compile_counter, hf_rotary_module, qk, raises, rotated

torch = pytest.importorskip("torch")
from posenc.torch import RotaryEmbedding  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


def check(got, want, x):
    """Float32 rotation against the float64 one: a few float32 ulps of the inputs' size."""
    assert got.dtype == x.dtype
    assert got.shape == x.shape
    err = np.abs(got.double().numpy() - want).max()
    assert err <= 8 * 2.0**-24 * max(1.0, float(x.abs().max())), err


@pytest.mark.parametrize("pairing", ["halves", "interleaved"])
@pytest.mark.parametrize("heads_first", [True, False])
def test_default_positions_offsets_and_partial_rotary(pairing, heads_first):
    m = RotaryEmbedding(64, layout=pairing, heads_first=heads_first, cached_length=128)
    shape = (2, 4, 40, 96) if heads_first else (2, 40, 4, 96)  # 64 of 96 channels rotate
    q, k = qk(*shape, heads_first=heads_first)
    for offset in (0, 100, 5000, 3_000_000):  # kept rows, the window, computed rows
        gq, gk = m(q, k, offset=offset)
        pos = np.arange(offset, offset + 40)
        check(gq, rotated(q, pos, 64, layout=pairing, heads_first=heads_first), q)
        check(gk, rotated(k, pos, 64, layout=pairing, heads_first=heads_first), k)
        assert torch.equal(gq[..., 64:], q[..., 64:])  # the rest passes through


def test_tensor_offsets_positions_and_packed_documents():
    m = RotaryEmbedding(32, cached_length=64)
    q, k = qk(2, 3, 9, 32)
    offset = torch.tensor([5, 70_000])  # one row inside the kept table, one far past it
    gq, _ = m(q, k, offset=offset)
    check(gq, rotated(q, offset[:, None].numpy() + np.arange(9), 32), q)
    for positions in (torch.arange(9) * 7, torch.randint(0, 2**24, (2, 9)),
                      torch.rand(2, 9, dtype=torch.float64) * 1000):  # fmt: skip
        gq, _ = m(q, k, positions)
        check(gq, rotated(q, positions.numpy(), 32), q)
    cu = torch.tensor([0, 4, 4, 11])  # three documents, one empty
    tq, tk = qk(11, 3, 32)
    gq, gk = m(tq, tk, cu_seqlens=cu)
    pos = np.concatenate([np.arange(4), np.arange(7)])
    check(gq, rotated(tq, pos, 32), tq)
    check(gk, rotated(tk, pos, 32), tk)


def test_decoding_loop_through_the_window_matches_the_prefill():
    """Steps past the kept rows read a window refilled every 128 steps: each step equals
    rotating by the positions of a full-length call."""
    m = RotaryEmbedding(64, cached_length=16)
    q, k = qk(1, 2, 400, 64)
    full_q, full_k = m(q, k)
    for step in range(400):
        sq, sk = m(q[:, :, step : step + 1], k[:, :, step : step + 1], offset=step)
        assert torch.equal(sq, full_q[:, :, step : step + 1])
        assert torch.equal(sk, full_k[:, :, step : step + 1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_other_dtypes_round_the_float32_rotation_once(dtype):
    m = RotaryEmbedding(64)
    q, k = qk(1, 2, 50, 64, dtype=dtype)
    gq, _ = m(q, k, offset=90_000)
    want = rotated(q, np.arange(90_000, 90_050), 64)
    assert gq.dtype == dtype
    if dtype == torch.float64:
        assert np.abs(gq.numpy() - want).max() < 1e-10  # the reference's own float64 error
    else:  # one rounding of a value within a few float32 ulps: at most one ulp of dtype
        ulp = 2.0 ** -(7 if dtype == torch.bfloat16 else 10)
        err = np.abs(gq.double().numpy() - want) / np.maximum(np.abs(want), 2.0**-14)
        assert err.max() <= ulp * 1.01


def test_no_state_meta_init_and_moves():
    m = RotaryEmbedding(64, preset="llama3", device="meta")
    assert dict(m.state_dict()) == {}
    assert list(m.buffers()) == []
    assert list(m.parameters()) == []
    q, k = qk(1, 2, 8, 64)
    out = m(q.to("meta"), k.to("meta"))
    assert out[0].is_meta
    assert out[0].shape == q.shape
    m.to_empty(device="cpu")
    direct = RotaryEmbedding(64, preset="llama3")
    assert torch.equal(m(q, k)[0], direct(q, k)[0])
    m.load_state_dict({}, strict=True)
    m.half()  # module dtype moves change nothing: the tables follow the activations
    assert torch.equal(m(q, k)[0], direct(q, k)[0])


def test_autograd_flows_through_the_rotation():
    m = RotaryEmbedding(32)
    q = torch.randn(1, 2, 5, 32, requires_grad=True)
    out, _ = m(q, None, offset=3)
    (out * out).sum().backward()  # a rotation keeps norms: d|Rq|^2/dq = 2q
    assert torch.allclose(q.grad, 2 * q.detach(), atol=1e-5)


def test_compile_fullgraph_dynamic_one_graph_per_input_kind():
    """No graph break (fullgraph: no host read in forward) and no recompile across lengths,
    offsets or positions; traced rows are the float64 formula, within the float32 tolerance
    of the reference."""
    torch._dynamo.reset()
    m = RotaryEmbedding(64, cached_length=32)
    counter = compile_counter()
    cm = torch.compile(m, fullgraph=True, dynamic=True, backend=counter)
    for length in (3, 17, 33, 300):
        q, k = qk(2, 4, length, 64)
        check(cm(q, k)[0], rotated(q, np.arange(length), 64), q)
    assert counter.frame_count == 1
    for start in (5, 100_000, 7_000_000):  # a decoding loop's tensor offsets
        q, k = qk(2, 4, 1, 64)
        off = torch.tensor([start, start + 9])
        check(cm(q, k, offset=off)[0], rotated(q, off[:, None].numpy(), 64), q)
    assert counter.frame_count == 2
    for length in (5, 50):  # (not 4: duck sizing would tie it to the 4 heads)
        q, k = qk(1, 4, length, 64)
        pos = torch.randint(0, 1 << 20, (1, length))
        check(cm(q, k, pos)[1], rotated(k, pos.numpy(), 64), k)
    cu = torch.tensor([0, 3, 10])
    tq, tk = qk(10, 4, 64)
    check(cm(tq, tk, cu_seqlens=cu)[0], rotated(tq, [0, 1, 2, *range(7)], 64), tq)
    assert counter.frame_count == 4


def test_rules_that_read_the_length_need_it_when_traced():
    scaling = {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 64}
    m = RotaryEmbedding(32, scaling=scaling)
    q, k = qk(1, 2, 100, 32)
    eager = m(q, k)[0]  # eager: the largest position + 1 = 100 > 64, a rescaled base
    cos, sin = posenc.rope(torch.arange(100), 32, scaling=scaling)
    assert torch.equal(eager, posenc.apply_rope(q, cos, sin))
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"'dynamic' reads the sequence length.*pass seq_len="):
        torch.compile(m, fullgraph=True)(q, k)  # dynamo wraps the PosencError it met
    fixed = RotaryEmbedding(32, scaling=scaling, seq_len=100)
    torch._dynamo.reset()
    got = torch.compile(fixed, fullgraph=True, dynamic=True)(q, k)[0]
    assert (got - eager).abs().max() <= 8 * 2.0**-24 * float(q.abs().max())


def test_traced_longrope_chooses_its_factors_on_the_device():
    """longrope switches factors past the original length; traced, both tables are computed
    and the largest position chooses (no host read, one graph on both sides)."""
    from torch._dynamo.testing import CompileCounter

    scaling = {"rope_type": "longrope", "short_factor": [1.0] * 16, "long_factor": [4.0] * 16,
               "original_max_position_embeddings": 64, "max_position_embeddings": 256}  # fmt: skip
    m = RotaryEmbedding(32, scaling=scaling)
    torch._dynamo.reset()
    counter = CompileCounter()
    cm = torch.compile(m, fullgraph=True, dynamic=True, backend=counter)
    for length in (10, 50, 100, 300):  # short factors, then long ones
        q, k = qk(1, 2, length, 32)
        cos, sin = posenc.rope(torch.arange(length), 32, scaling=scaling)
        want = posenc.apply_rope(q, cos, sin)
        assert (cm(q, k)[0] - want).abs().max() <= 8 * 2.0**-24 * float(q.abs().max())
    assert counter.frame_count == 1


def test_sections_and_axes_rotate_by_their_tables():
    """Multimodal and axial modules rotate by posenc.rope's tables (tested against
    transformers and diffusers in test_rope*.py)."""
    m = RotaryEmbedding(128, preset="qwen2-vl")
    q, k = qk(2, 4, 12, 128)
    ids = torch.randint(0, 500, (3, 2, 12))
    cos, sin = posenc.rope(ids, 128, preset="qwen2-vl")
    assert torch.equal(m(q, k, ids)[0], posenc.apply_rope(q, cos[:, None], sin[:, None]))
    text = torch.arange(12)  # 1-D ids serve all three axes, as transformers' module does
    cos, sin = posenc.rope(text.expand(3, 12), 128, preset="qwen2-vl")
    assert torch.equal(m(q, k)[0], posenc.apply_rope(q, cos, sin))
    assert torch.equal(m(q, k, text)[0], m(q, k)[0])
    flux = RotaryEmbedding(128, preset="flux", heads_first=False)
    q, k = qk(1, 24, 4, 128, heads_first=False)
    ids = torch.rand(1, 24, 3) * 64
    cos, sin = posenc.rope(ids, 128, preset="flux")
    want = posenc.apply_rope(q, cos[:, :, None], sin[:, :, None], layout="interleaved")
    assert torch.equal(flux(q, k, ids)[0], want)


def test_module_errors_name_the_argument():
    m = RotaryEmbedding(64)
    q, k = qk(1, 2, 8, 96)
    with raises("`q` must be a floating tensor [batch, heads, seq, head_dim]", "(2, 8, 96)"):
        m(q[0], k)
    with raises("`k` has head_dim 32, less than the rotary width 64"):
        m(q, k[..., :32])
    with raises("`q` and `k` must share batch and sequence"):
        m(q, k[:, :, :5])
    with raises("`positions` must have shape [1, 8] or [8]", "[8, 1]"):
        m(q, k, torch.zeros(8, 1, dtype=torch.long))
    with raises("`offset` must be >= 0", "-3"):
        m(q, k, offset=torch.tensor([-3]))
    with raises("`offset` must be an int or an integer tensor [batch] = [1]", "float32"):
        m(q, k, offset=torch.tensor([1.5]))
    with raises("give `positions` or `offset`, not both"):
        m(q, k, torch.arange(8), offset=3)
    with raises("`cu_seqlens` takes neither"):
        m(q[0].transpose(0, 1), k[0].transpose(0, 1), offset=2, cu_seqlens=torch.tensor([0, 8]))
    with raises("`positions` must be finite"):
        m(q, k, torch.full((8,), float("nan")))
    with raises("axial RoPE", "needs `positions`"):
        RotaryEmbedding(128, preset="flux")(*qk(1, 2, 8, 128))
    with raises("`dim` (the rotary width) must be even", "63"):
        RotaryEmbedding(63)
    with raises("`sections` must add up to dim / 2 = 64", "(16, 24, 20)"):
        RotaryEmbedding(128, sections=(16, 24, 20))
    with raises("`preset` 'whisper' is a sinusoidal preset"):
        RotaryEmbedding(64, preset="whisper")


# ---------------------------------------------------------------------------------------------
# the rotary presets against their upstreams

T = pytest.importorskip("transformers")


# preset -> the transformers config whose rotary module it reproduces
PRESET_CONFIGS = {
    "llama": lambda: T.LlamaConfig(),
    "llama3": lambda: T.LlamaConfig(max_position_embeddings=131072, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "qwen2": lambda: T.Qwen2Config(rope_theta=1e6),
    "neox": lambda: T.GPTNeoXConfig(),  # hidden 6144 / 64 heads = 96, rotary_pct 0.25: 24
    "cohere": lambda: T.CohereConfig(),
    "qwen2-vl": lambda: T.Qwen2VLTextConfig(),
    "qwen3-vl": lambda: T.Qwen3VLTextConfig(),
    "deepseek-v3": lambda: T.DeepseekV3Config(max_position_embeddings=163840, rope_scaling={
        "type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
    "gpt-oss": lambda: T.GptOssConfig(),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PRESET_CONFIGS))
def test_rotary_presets_are_their_upstream_modules(name):
    """Each preset's keywords, in compat mode, give transformers' module bit for bit (the
    exact tables are tested against mpmath in test_rope.py). DeepSeek-V3 rotates pairs
    (2i, 2i+1) but transformers' module returns halves tables: compared in halves."""
    config = PRESET_CONFIGS[name]()
    module = hf_rotary_module(config)
    dim = {"neox": 24}.get(name, posenc.preset(name).dim)
    ids = torch.arange(3000)[None] + 40_000
    if name in ("qwen2-vl", "qwen3-vl"):
        ids = torch.stack([ids, ids // 7, ids % 13])
    layout = {"deepseek-v3": "halves"}.get(name)
    got = posenc.rope(ids, dim, preset=name, layout=layout, compat="transformers")
    want = module(torch.zeros(1), ids)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_flux_preset_is_diffusers_flux_pos_embed():
    flux = pytest.importorskip("diffusers.models.transformers.transformer_flux")
    ids = torch.cat([torch.zeros(16, 3), torch.rand(200, 3) * 128])
    want = flux.FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])(ids)
    got = posenc.rope(ids, 128, preset="flux")
    for g, w in zip(got, want, strict=True):
        assert (g.double() - w.double()).abs().max() <= 2.0**-24


def test_gptj_preset_pairs_every_two_as_gptj():
    gptj = importlib.import_module("transformers.models.gptj.modeling_gptj")
    q = torch.randn(1, 40, 2, 256)  # GPT-J: [batch, seq, heads, head_dim], rotary_dim 64
    table = gptj.create_sinusoidal_positions(40, 64)  # [sin | cos] rows, float32
    sin, cos = torch.split(table[None], 32, dim=-1)  # apply_rotary_pos_emb repeats them
    want = torch.cat([gptj.apply_rotary_pos_emb(q[..., :64], sin, cos), q[..., 64:]], dim=-1)
    m = RotaryEmbedding(64, preset="gptj", heads_first=False)
    # the pairing is what is tested: GPT-J's float32 angles and table differ by ~1e-6
    assert (m(q)[0] - want).abs().max() <= 1e-5 * float(q.abs().max())


# ---------------------------------------------------------------------------------------------
# from_hf: the adapter against every covered family's own module

from posenc.compat.transformers import FAMILIES  # noqa: E402


def _family_config(model_type):
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]()


@pytest.mark.parametrize(
    "model_type", sorted(t for t, family in FAMILIES.items() if not family.per_layer)
)  # the per-layer-type families (Gemma-3, OLMo-3) take a layer type: tests/test_from_hf.py
def test_from_hf_is_every_family_module(model_type):
    """Compat: transformers' own output bit for bit (its form, shape and dtype). Exact: the
    same form, shape and dtype, holding posenc.rope's exact tables."""
    config = _family_config(model_type)
    module = hf_rotary_module(config)
    ids = torch.stack([torch.arange(2000), torch.arange(2000) + 60_000])
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.zeros(1, dtype=dtype)
        want = module(x, ids)
        got = RotaryEmbedding.from_hf(config, compat="transformers")(x, ids)
        exact = RotaryEmbedding.from_hf(config)(x, ids)
        if isinstance(want, tuple):
            assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
            assert [(e.shape, e.dtype) for e in exact] == [(w.shape, w.dtype) for w in want]
            assert not torch.equal(exact[0], want[0])  # float32 angles drift at 60000
        else:  # complex64: Llama 4, DeepSeek-V2
            assert torch.equal(got, want)
            assert exact.shape == want.shape
            assert exact.dtype == want.dtype == torch.complex64
            r = posenc.rope(ids, 2 * want.shape[-1], layout="compact",
                            base=config.rope_parameters["rope_theta"])  # fmt: skip
            assert torch.equal(exact.real, r[0])
            assert torch.equal(exact.imag, r[1])


def test_from_hf_exact_tables_are_posenc_rope():
    config = T.Phi3Config(hidden_size=256, num_attention_heads=4, max_position_embeddings=131072,
                          partial_rotary_factor=0.75, original_max_position_embeddings=4096,
                          rope_scaling={"type": "longrope", "short_factor": [1.0] * 24,
                                        "long_factor": [4.0] * 24})  # fmt: skip
    adapter = RotaryEmbedding.from_hf(config)
    scaling = {
        "rope_type": "longrope",
        "short_factor": [1.0] * 24,
        "long_factor": [4.0] * 24,
        "original_max_position_embeddings": 4096,
        "max_position_embeddings": 131072,
    }
    for n in (100, 9000):  # short, then long factors
        ids = torch.arange(n)[None]
        got = adapter(torch.zeros(1), ids)
        want = posenc.rope(ids, 48, scaling=scaling)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_from_hf_compat_remembers_dynamic_history_as_transformers():
    """transformers' dynamic module keeps the longest length seen until a call shorter than
    the original length: compat reproduces that call by call; exact answers each call alone."""
    config = T.LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=2048,
                           rope_parameters={"rope_type": "dynamic", "factor": 4.0,
                                            "rope_theta": 10000.0})  # fmt: skip
    module = hf_rotary_module(config)
    compat = RotaryEmbedding.from_hf(config, compat="transformers")
    exact = RotaryEmbedding.from_hf(config)
    x = torch.zeros(1)
    for n in (1000, 5000, 3000, 6000, 2500, 1000, 3000):
        ids = torch.arange(n)[None]
        want = module(x, ids)
        assert all(torch.equal(g, w) for g, w in zip(compat(x, ids), want, strict=True)), n
        fresh = posenc.rope(ids, 64, scaling={"rope_type": "dynamic", "factor": 4.0,
                                              "max_position_embeddings": 2048})  # fmt: skip
        assert all(torch.equal(g, w) for g, w in zip(exact(x, ids), fresh, strict=True))


def test_from_hf_errors_name_the_family_or_field():
    with raises("model_type 'gptj' is not a family from_hf covers", "llama"):
        RotaryEmbedding.from_hf(T.GPTJConfig())
    with raises("model_type 'modernbert' is not a family"):
        RotaryEmbedding.from_hf(T.ModernBertConfig())
    config = T.LlamaConfig()
    config.rope_parameters = {"sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}
    with raises("holds one set per layer type", "sliding_attention"):
        RotaryEmbedding.from_hf(config)
    config = T.LlamaConfig()
    del config.rope_parameters["rope_theta"]
    with raises("`config.rope_parameters['rope_theta']` is missing"):
        RotaryEmbedding.from_hf(config)
    config = T.LlamaConfig(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4,
                                            "factor": 4.0})  # fmt: skip
    config.rope_parameters.pop("original_max_position_embeddings", None)
    with raises("original_max_position_embeddings"):
        RotaryEmbedding.from_hf(config)
    with raises("`compat` must be one of", "'hf'"):
        RotaryEmbedding.from_hf(T.LlamaConfig(), compat="hf")


def test_example_swapped_llama_keeps_logits_in_compat_and_gains_in_exact():
    """examples/hf_llama_rope.py: compat changes no logit; exact stays at the float32 noise
    floor where transformers' own tables drift (measured against the float64 model)."""
    import runpy
    from pathlib import Path

    path = Path(__file__).parent.parent / "examples" / "hf_llama_rope.py"
    example = runpy.run_path(str(path))
    rows = example["compare"](starts=(0, 131072 - 32), tokens=32)
    assert all(r["compat_identical"] for r in rows)
    floor = rows[0]["transformers_error"]  # at positions 0 … 31 both tables are exact enough
    assert all(r["posenc_error"] < 3 * floor for r in rows)
    assert rows[1]["transformers_error"] > 10 * rows[1]["posenc_error"]


def test_from_hf_compiles_and_compat_stays_transformers_when_both_are_compiled():
    """Compiled models compile their rotary module: compat, compiled, equals transformers'
    module compiled the same way (inductor's code for one graph); exact, compiled, is the
    float64 formula, within a float32 ulp of eager."""
    config = T.LlamaConfig(hidden_size=256, num_attention_heads=4)
    torch._dynamo.reset()
    counter = compile_counter()
    compat = torch.compile(RotaryEmbedding.from_hf(config, compat="transformers"),
                           fullgraph=True, dynamic=True)  # fmt: skip
    theirs = torch.compile(hf_rotary_module(config), fullgraph=True, dynamic=True)
    exact = RotaryEmbedding.from_hf(config)
    compiled = torch.compile(exact, fullgraph=True, dynamic=True, backend=counter)
    x = torch.zeros(1)
    for n in (10, 300):
        ids = torch.arange(n)[None] + 5000
        assert all(torch.equal(g, w) for g, w in zip(compat(x, ids), theirs(x, ids), strict=True))
        for g, w in zip(compiled(x, ids), exact(x, ids), strict=True):
            assert (g - w).abs().max() <= 2.0**-24
    assert counter.frame_count == 1
