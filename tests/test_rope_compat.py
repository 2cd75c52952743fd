"""``compat="transformers"``: bit for bit what transformers' own rotary modules return, and
``apply_rope`` against transformers' and Meta's rotations.

Each case builds the model family's rotary module from a small config (no downloads) and
calls posenc with the values read off that config by hand here: the rotary width, base,
scaling dict, layout and sections.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.helpers import hf_rotary_module, raises

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

HIDDEN = {"hidden_size": 256, "num_attention_heads": 4}  # head_dim 64


def _longrope_lists(n, seed):
    rng = np.random.default_rng(seed)
    return (1 + rng.random(n) * 0.2).tolist(), (1 + rng.random(n) * 40).tolist()


SHORT, LONG = _longrope_lists(32, 0)
SHORT24, LONG24 = _longrope_lists(24, 1)

# config (its model_type names the family), posenc kwargs (read off the config by hand)
CASES = {
    "llama": (lambda: T.LlamaConfig(**HIDDEN), {"dim": 64}),
    "llama3": (
        lambda: T.LlamaConfig(**HIDDEN, max_position_embeddings=131072, rope_parameters={
            "rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
        {"dim": 64, "base": 5e5, "scaling": {"rope_type": "llama3", "factor": 8.0,
             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 8192}},
    ),
    "mistral": (lambda: T.MistralConfig(**HIDDEN, rope_theta=1e6),
                {"dim": 64, "base": 1e6}),
    "qwen2": (lambda: T.Qwen2Config(**HIDDEN, rope_theta=1e6), {"dim": 64, "base": 1e6}),
    "gemma": (lambda: T.GemmaConfig(hidden_size=192, num_attention_heads=2,
                                             head_dim=128), {"dim": 128}),
    "gpt-neox-partial": (lambda: T.GPTNeoXConfig(**HIDDEN, rotary_pct=0.25),
                         {"dim": 16}),
    "phi3-longrope": (
        lambda: T.Phi3Config(**HIDDEN, max_position_embeddings=131072,
                             original_max_position_embeddings=4096,
                             rope_scaling={"type": "longrope", "short_factor": SHORT,
                                           "long_factor": LONG}),
        {"dim": 64, "scaling": {"rope_type": "longrope", "short_factor": SHORT,
             "long_factor": LONG, "original_max_position_embeddings": 4096,
             "max_position_embeddings": 131072}},
    ),
    "phi4-mini-longrope-partial": (
        lambda: T.Phi3Config(**HIDDEN, max_position_embeddings=131072, partial_rotary_factor=0.75,
                             original_max_position_embeddings=4096,
                             rope_scaling={"type": "longrope", "short_factor": SHORT24,
                                           "long_factor": LONG24}),
        {"dim": 48, "scaling": {"rope_type": "longrope", "short_factor": SHORT24,
             "long_factor": LONG24, "original_max_position_embeddings": 4096,
             "max_position_embeddings": 131072}},
    ),
    "deepseek-v3-yarn": (
        lambda: T.DeepseekV3Config(max_position_embeddings=163840, rope_scaling={
            "type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
            "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
        {"dim": 64, "scaling": {"rope_type": "yarn", "factor": 40.0,
             "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
             "mscale": 1.0, "mscale_all_dim": 1.0}},
    ),
    "gpt-oss-yarn": (
        lambda: T.GptOssConfig(),
        {"dim": 64, "base": 150000.0, "layout": "compact", "scaling": {
            "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": False, "original_max_position_embeddings": 4096}},
    ),
    "cohere-interleaved": (lambda: T.CohereConfig(**HIDDEN),
                           {"dim": 64, "base": 5e5, "layout": "interleaved"}),
    "dynamic": (
        lambda: T.LlamaConfig(**HIDDEN, max_position_embeddings=2048,
                              rope_parameters={"rope_type": "dynamic", "factor": 4.0,
                                               "rope_theta": 10000.0}),
        {"dim": 64, "scaling": {"rope_type": "dynamic", "factor": 4.0,
             "max_position_embeddings": 2048}},
    ),
    "linear": (
        lambda: T.LlamaConfig(**HIDDEN, rope_parameters={"rope_type": "linear", "factor": 3.0,
                                                         "rope_theta": 10000.0}),
        {"dim": 64, "scaling": {"rope_type": "linear", "factor": 3.0}},
    ),
}  # fmt: skip

LENGTHS = {"short": 1500, "original": 4096, "long": 70_000}


@pytest.fixture(autouse=True)
def _quiet_transformers():
    T.logging.set_verbosity_error()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("length", sorted(LENGTHS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_bit_for_bit_with_transformers(case, length, dtype):
    """A fresh transformers module and posenc give the same bits, below, at and above the
    original length (longrope switches factors, dynamic rescales its base)."""
    config, kwargs = CASES[case]
    module = hf_rotary_module(config())
    n = LENGTHS[length]
    ids = torch.stack([torch.arange(n), torch.arange(n) + 3 * n // 4])  # two rows, one offset
    x = torch.zeros(1, dtype=getattr(torch, dtype))
    want = module(x, ids)
    got = posenc.rope(ids, compat="transformers", dtype=x.dtype, **kwargs)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        assert g.shape == w.shape
        assert torch.equal(g, w), (g.float() - w.float()).abs().max()


def test_exact_mode_is_closer_to_the_truth_than_transformers():
    """The point of exact mode: at 1e5 transformers' float32 cos is off by ~1e-3."""
    module = hf_rotary_module(T.LlamaConfig(**HIDDEN))
    ids = torch.arange(100_000, 100_512)[None]
    hf_cos, _ = module(torch.zeros(1), ids)
    cos, _ = posenc.rope(ids, 64)
    w = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    truth = np.cos(ids[0].numpy()[:, None].astype(np.float64) * w)
    truth = np.concatenate([truth, truth], -1)
    assert np.abs(cos[0].double().numpy() - truth).max() < 3.5e-8
    assert np.abs(hf_cos[0].double().numpy() - truth).max() > 1e-4


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_mrope_end_to_end(family):
    """Qwen2-VL (chunks) and Qwen3-VL (interleaved) text rotary modules, [3, batch, seq] ids
    with distinct t/h/w rows (an image's grid), bit for bit."""
    mod = __import__(f"transformers.models.{family}.modeling_{family}", fromlist=["x"])
    if family == "qwen2_vl":
        cfg = T.Qwen2VLTextConfig(hidden_size=512, num_attention_heads=4)
        module = mod.Qwen2VLRotaryEmbedding(cfg)
        kwargs = {"sections": (16, 24, 24), "base": 1e6}
    else:
        cfg = T.Qwen3VLTextConfig(hidden_size=512, num_attention_heads=4, head_dim=128)
        module = mod.Qwen3VLTextRotaryEmbedding(cfg)
        kwargs = {"sections": (24, 20, 20), "interleave_sections": True, "base": 5e5}
    g = torch.arange(40)
    t = torch.cat([torch.arange(10), torch.full((40,), 10), torch.arange(11, 61)])
    h = torch.cat([torch.arange(10), 10 + g // 8, torch.arange(11, 61)])
    w = torch.cat([torch.arange(10), 10 + g % 8, torch.arange(11, 61)])
    ids = torch.stack([t, h, w])[:, None].expand(3, 2, -1) + torch.tensor([0, 5000])[:, None]
    for dtype in (torch.float32, torch.bfloat16):
        want = module(torch.zeros(1, dtype=dtype), ids)
        got = posenc.rope(ids, 128, compat="transformers", dtype=dtype, **kwargs)
        exact = posenc.rope(ids, 128, dtype=dtype, **kwargs)
        for a, b, e in zip(got, want, exact, strict=True):
            assert torch.equal(a, b)
            assert (e.double() - b.double()).abs().max() < 2e-2  # same tables, exact


def test_dynamic_is_a_fresh_module():
    """transformers' dynamic module keeps its largest base (sticky); rope() is stateless and
    answers as a freshly built module does, which is documented."""
    config, kwargs = CASES["dynamic"]
    short = torch.arange(1000)[None]
    fresh = hf_rotary_module(config())(torch.zeros(1), short)
    module = hf_rotary_module(config())
    module(torch.zeros(1), torch.arange(5000)[None])  # grows past 2048
    sticky = module(torch.zeros(1), torch.arange(3000)[None])
    got = posenc.rope(short, compat="transformers", **kwargs)
    assert torch.equal(got[0], fresh[0])
    got_3000 = posenc.rope(torch.arange(3000)[None], compat="transformers", **kwargs)
    assert not torch.equal(got_3000[0], sticky[0])  # HF used the 5000-length base


def test_numpy_positions_in_compat_mode():
    module = hf_rotary_module(T.LlamaConfig(**HIDDEN))
    ids = np.arange(300)[None]
    cos, _sin = posenc.rope(ids, 64, compat="transformers")
    want = module(torch.zeros(1), torch.from_numpy(ids))
    assert isinstance(cos, np.ndarray)
    assert np.array_equal(cos, want[0].numpy())


def test_compat_refuses_axial():
    with raises("compat", "axial"):
        posenc.rope(np.zeros((4, 3)), 64, axes_dim=(16, 24, 24), compat="transformers")


# apply_rope ---------------------------------------------------------------------------


def _hf_apply(q, cos, sin):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=1)[0]


def _meta_apply(x, cos_half, sin_half):
    """Meta Llama: view pairs as complex, multiply by cis, back to real."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    cis = torch.complex(cos_half, sin_half)  # Meta's freqs_cis = polar(1, angles)
    return torch.view_as_real(xc * cis).flatten(-2).type_as(x)


def _truth(x, pos, d, layout, base=10000.0):
    """The rotation in float64 from the formula."""
    x = x.double().numpy()
    w = base ** (-np.arange(0, d, 2) / d)
    theta = pos[:, None].astype(np.float64) * w
    c, s = np.cos(theta), np.sin(theta)
    out = x.copy()
    if layout == "halves":
        a, b = x[..., : d // 2], x[..., d // 2 : d]
        out[..., : d // 2] = a * c - b * s
        out[..., d // 2 : d] = b * c + a * s
    else:
        a, b = x[..., 0:d:2], x[..., 1:d:2]
        out[..., 0:d:2] = a * c - b * s
        out[..., 1:d:2] = b * c + a * s
    return out


def test_apply_matches_transformers_halves():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 33, 64, generator=gen)
    pos = torch.arange(100, 133)
    cos, sin = posenc.rope(pos[None].expand(2, -1), 64)
    got = posenc.apply_rope(q, cos[:, None], sin[:, None])
    want = _hf_apply(q, cos, sin)
    assert (got - want).abs().max() <= 4 * 2.0**-24 * q.abs().max()


def test_apply_matches_meta_interleaved():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 33, 4, 64, generator=gen)  # Meta: [batch, seq, heads, head_dim]
    pos = torch.arange(33)
    cos, sin = posenc.rope(pos, 64, layout="interleaved")
    got = posenc.apply_rope(x, cos[:, None], sin[:, None], layout="interleaved")
    want = _meta_apply(x, cos[:, None, 0::2], sin[:, None, 0::2])
    assert (got - want).abs().max() <= 4 * 2.0**-24 * x.abs().max()


@pytest.mark.parametrize("layout", ["halves", "interleaved", "compact"])
def test_apply_bf16_within_one_ulp_of_the_truth(layout):
    """posenc rounds the float32 rotation once to bf16: within 1 bf16 ulp of the float64
    rotation. transformers' bf16 path (bf16 tables, bf16 products and sum) is measured."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 256, 128, generator=gen).bfloat16()
    pos = np.arange(90_000, 90_256)
    cos, sin = posenc.rope(torch.from_numpy(pos), 64, layout=layout)
    got = posenc.apply_rope(x, cos, sin, layout=layout)
    pair = "halves" if layout == "compact" else layout
    truth = _truth(x, pos, 64, pair)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(truth), 2.0**-126))) - 7)
    err = np.abs(got.double().numpy() - truth)
    assert (err <= ulp).all(), (err / ulp).max()
    assert torch.equal(got[..., 64:], x[..., 64:])  # partial rotary: the rest passes through
    if layout == "halves":
        hf = _hf_apply(x[..., :64], cos.bfloat16()[None], sin.bfloat16()[None])
        hf_err = np.abs(hf.double().numpy() - truth[..., :64]) / ulp[..., :64]
        assert hf_err.max() > 1  # transformers' bf16 path: measured in docs/rope.md


@pytest.mark.parametrize("layout", ["halves", "interleaved"])
def test_apply_has_gradients(layout):
    """Training: gradients flow to x (and to learned tables), matching the in-place path."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 16, 24, generator=gen, requires_grad=True)
    cos, sin = posenc.rope(torch.arange(16), 16, layout=layout)
    y = posenc.apply_rope(x, cos, sin, layout=layout)
    with torch.no_grad():  # the in-place path may fuse a multiply-add: within float32 rounding
        assert torch.allclose(y, posenc.apply_rope(x, cos, sin, layout=layout), atol=5e-7)
    y.square().sum().backward()
    # the rotation is orthogonal: d/dx sum(R x)^2 = 2 R^T R x = 2 x
    assert torch.allclose(x.grad, 2 * x.detach(), atol=1e-5)


def test_apply_float64_and_numpy():
    pos = np.arange(10)
    cos, sin = posenc.rope(pos, 8, dtype=np.float64)
    x = np.random.default_rng(3).standard_normal((3, 10, 12))
    got = posenc.apply_rope(x, cos, sin)
    assert got.dtype == np.float64
    assert np.abs(got - _truth(torch.from_numpy(x), pos, 8, "halves")).max() < 1e-14


APPLY_ERRORS = [
    (lambda: posenc.apply_rope(torch.zeros(2, 8, 32), torch.zeros(8, 64), torch.zeros(8, 64)),
     ("rotary width", "64", "32")),
    (lambda: posenc.apply_rope(torch.zeros(2, 8, 32), torch.zeros(8, 7), torch.zeros(8, 7)),
     ("rotary width", "even")),
    (lambda: posenc.apply_rope(torch.zeros(8, 32), torch.zeros(8, 8), torch.zeros(8, 6)),
     ("`cos` and `sin`", "(8, 8)", "(8, 6)")),
    (lambda: posenc.apply_rope(torch.zeros(8, 32), torch.zeros(2, 8, 8), torch.zeros(2, 8, 8)),
     ("`cos`", "broadcast", "head axis")),
    (lambda: posenc.apply_rope(torch.zeros(8, 32), torch.zeros(8, 8), torch.zeros(8, 8),
                               layout="pairs"), ("`layout`", "'pairs'")),
]  # fmt: skip


@pytest.mark.parametrize(("call", "fragments"), APPLY_ERRORS)
def test_apply_errors(call, fragments):
    with raises(*fragments):
        call()
