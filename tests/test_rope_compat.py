"""``compat="transformers"``: bit for bit what transformers' own rotary modules return.
(``apply_rope`` against transformers' and Meta's rotations: test_apply.py.)

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

pytestmark = pytest.mark.usefixtures("quiet_transformers")

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
