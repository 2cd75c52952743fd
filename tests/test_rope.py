"""posenc.rope in exact mode: every scaling rule against mpmath, every dtype rounded once,
and the layouts, sections and axial blocks as specified. (The same bits in every array
library: test_backends.py; apply_rope: test_apply.py.)

The reference frequencies and attention factors are written here from each rule's formula
(`ref_omega`: default, linear, dynamic NTK, YaRN, LongRoPE, Llama 3), in mpmath at 40 digits;
nothing is taken from the code under test.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import posenc
from tests.helpers import as_float64, assert_correctly_rounded, raises

mpmath.mp.dps = 40
PI = mpmath.pi

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}  # fmt: skip
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
DEEPSEEK = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
            "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}  # fmt: skip
GPT_OSS = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
           "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}  # fmt: skip


def _longrope(n: int) -> dict:
    rng = np.random.default_rng(3)
    return {"rope_type": "longrope", "original_max_position_embeddings": 4096,
            "max_position_embeddings": 131072,
            "short_factor": (1 + rng.random(n) * 0.1).tolist(),
            "long_factor": (1 + rng.random(n) * 30).tolist()}  # fmt: skip


def ref_omega(rule: dict | None, d: int, base: float, seq_len: int) -> tuple[list, object]:
    """The rule's frequencies and attention factor in mpmath, from the formulas."""
    rule = rule or {}
    kind = rule.get("rope_type", "default")
    b = mpmath.mpf(base)
    w = [b ** (-mpmath.mpf(2 * i) / d) for i in range(d // 2)]
    one = mpmath.mpf(1)
    if kind == "default":
        return w, one
    if kind == "linear":
        return [x / rule["factor"] for x in w], one
    if kind == "dynamic":
        f, length = mpmath.mpf(rule["factor"]), rule["max_position_embeddings"]
        s = max(seq_len, length)
        b2 = b * (f * s / length - (f - 1)) ** (mpmath.mpf(d) / (d - 2))
        return [b2 ** (-mpmath.mpf(2 * i) / d) for i in range(d // 2)], one
    if kind == "yarn":
        f = mpmath.mpf(rule["factor"])
        length = rule["original_max_position_embeddings"]

        def pair(turns):
            return d * mpmath.log(length / (turns * 2 * PI)) / (2 * mpmath.log(b))

        lo, hi = pair(rule.get("beta_fast", 32)), pair(rule.get("beta_slow", 1))
        if rule.get("truncate", True):
            lo, hi = mpmath.floor(lo), mpmath.ceil(hi)
        lo, hi = max(lo, 0), min(hi, d - 1)
        if lo == hi:
            hi += mpmath.mpf("0.001")
        out = []
        for i, x in enumerate(w):
            r = min(max((i - lo) / (hi - lo), 0), 1)
            out.append(x / f * r + x * (1 - r))

        def m(s, k):
            return one if s <= 1 else mpmath.mpf("0.1") * k * mpmath.log(s) + 1

        if rule.get("mscale") and rule.get("mscale_all_dim"):
            af = m(f, mpmath.mpf(rule["mscale"])) / m(f, mpmath.mpf(rule["mscale_all_dim"]))
        else:
            af = m(f, 1)
        return out, af
    if kind == "longrope":
        length = rule["original_max_position_embeddings"]
        key = "long_factor" if seq_len > length else "short_factor"
        f = mpmath.mpf(rule["max_position_embeddings"]) / length
        af = mpmath.sqrt(1 + mpmath.log(f) / mpmath.log(length))
        return [x / mpmath.mpf(e) for x, e in zip(w, rule[key], strict=True)], af
    if kind == "llama3":
        keys = ("factor", "low_freq_factor", "high_freq_factor")
        f, low, high = (mpmath.mpf(rule[k]) for k in keys)
        length = rule["original_max_position_embeddings"]
        out = []
        for x in w:
            lam = 2 * PI / x
            if lam < length / high:
                out.append(x)
            elif lam > length / low:
                out.append(x / f)
            else:
                s = (length / lam - low) / (high - low)
                out.append((1 - s) * x / f + s * x)
        return out, one
    raise AssertionError(kind)


def ref_tables(pos, rule, d, base, layout="halves", seq_len=None):
    """cos, sin ``[len(pos), width]`` in float64 from mpmath."""
    seq_len = seq_len or int(max(pos)) + 1
    w, af = ref_omega(rule, d, base, seq_len)
    n = d // 2
    cols = {"halves": list(range(n)) * 2, "interleaved": [i for i in range(n) for _ in "ab"],
            "compact": list(range(n))}[layout]  # fmt: skip
    c = np.array([[float(af * mpmath.cos(mpmath.mpf(p) * w[i])) for i in cols] for p in pos])
    s = np.array([[float(af * mpmath.sin(mpmath.mpf(p) * w[i])) for i in cols] for p in pos])
    return c, s, float(af)


POSITIONS = [0, 1, 2, 1000, 4095, 4096, 4097, 65537, 100_000, 999_983, 2**24 - 1]

RULES = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic-short": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 2**24},
    "dynamic-long": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4096},
    "yarn": YARN,
    "yarn-deepseek": DEEPSEEK,
    "yarn-gpt-oss": GPT_OSS,
    "longrope": _longrope(32),
    "llama3": LLAMA3,
}


@pytest.mark.parametrize("base", [10000.0, 500000.0])
@pytest.mark.parametrize("name", sorted(RULES))
def test_every_rule_within_6e8_of_mpmath(name, base):
    """The issue's bound: 6e-8 x max(1, attention factor) at any position below 2^24."""
    rule = RULES[name]
    pos = np.array(POSITIONS)
    cos, sin = posenc.rope(pos, 64, base=base, scaling=rule)
    c, s, af = ref_tables(POSITIONS, rule, 64, base)
    assert cos.dtype == np.float32
    assert cos.shape == (len(pos), 64)
    bound = 6e-8 * max(1.0, af)
    assert np.abs(cos - c).max() <= bound, np.abs(cos - c).max()
    assert np.abs(sin - s).max() <= bound, np.abs(sin - s).max()
    # in fact one rounding of the truth, give or take the float64 evaluation's own error
    # (the phasor products' (|p| + 2^16) 2^-52, times the attention factor)
    slack = (2**24 + 2**16) * 2.0**-52 * max(1.0, af)
    assert_correctly_rounded(cos, c, slack=slack)
    assert_correctly_rounded(sin, s, slack=slack)


def test_longrope_short_below_and_long_above_the_original_length():
    rule = _longrope(32)
    short = ref_tables([5, 4095], rule, 64, 1e4, seq_len=4096)
    long = ref_tables([5, 4095], rule, 64, 1e4, seq_len=4097)
    got_short = posenc.rope(np.array([5, 4095]), 64, scaling=rule)  # seq_len 4096: short
    got_long = posenc.rope(np.array([5, 4095]), 64, scaling=rule, seq_len=4097)
    assert_correctly_rounded(got_short[0], short[0], slack=1e-9)
    assert_correctly_rounded(got_long[0], long[0], slack=1e-9)
    assert not np.array_equal(got_short[0], got_long[0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("name", ["default", "yarn", "llama3"])
def test_every_dtype_is_the_truth_rounded_once(name, dtype):
    torch = pytest.importorskip("torch")
    rule = RULES[name]
    pos = torch.tensor(POSITIONS)
    cos, sin = posenc.rope(pos, 32, scaling=rule, dtype=getattr(torch, dtype))
    c, s, _ = ref_tables(POSITIONS, rule, 32, 1e4)
    assert cos.dtype == getattr(torch, dtype)
    slack = 1e-15 * (2**24) if dtype == "float64" else 1e-9
    assert_correctly_rounded(cos, c, slack=slack)
    assert_correctly_rounded(sin, s, slack=slack)


@pytest.mark.parametrize("layout", ["halves", "interleaved", "compact"])
def test_layouts(layout):
    pos = np.arange(0, 70_000, 997)
    cos, sin = posenc.rope(pos, 16, layout=layout, scaling=YARN)
    c, s, _ = ref_tables(pos.tolist(), YARN, 16, 1e4, layout)
    assert_correctly_rounded(cos, c, slack=1e-9)
    assert_correctly_rounded(sin, s, slack=1e-9)
    if layout == "halves":
        assert np.array_equal(cos[:, :8], cos[:, 8:])
    elif layout == "interleaved":
        assert np.array_equal(cos[:, 0::2], cos[:, 1::2])
    else:
        assert cos.shape == (len(pos), 8)


def test_real_positions_are_exact():
    pos = [0.5, 123.25, 1e5 + 0.125, 3.0e6 + 0.75]
    cos, sin = posenc.rope(np.array(pos), 16, scaling=RULES["linear"])
    c, s, _ = ref_tables(pos, RULES["linear"], 16, 1e4)
    assert_correctly_rounded(cos, c, slack=1e-9)
    assert_correctly_rounded(sin, s, slack=1e-9)


def test_sections_in_chunks_and_interleaved():
    """Qwen2-VL: frequency j takes axis k by consecutive chunks; Qwen3-VL: round robin."""
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 5000, size=(3, 2, 7))  # [t/h/w, batch, seq]
    sections = (2, 3, 3)
    w = 10000.0 ** (-np.arange(8) / 8)
    for interleave, axis in [
        (False, [0, 0, 1, 1, 1, 2, 2, 2]),
        (True, [0, 1, 2, 0, 1, 2, 0, 1]),  # j%3==1 and j<9 -> h; j%3==2 and j<9 -> w
    ]:
        cos, sin = posenc.rope(ids, 16, sections=sections, interleave_sections=interleave)
        assert cos.shape == (2, 7, 16)
        theta = np.stack([ids[a] for a in axis], axis=-1) * w
        want = np.concatenate([np.cos(theta), np.cos(theta)], axis=-1)
        assert np.abs(cos - want).max() <= 2.0**-24 + 1e-12
        want = np.concatenate([np.sin(theta), np.sin(theta)], axis=-1)
        assert np.abs(sin - want).max() <= 2.0**-24 + 1e-12


def test_axial_blocks_match_flux_formula():
    """FLUX: per axis k, theta ** (-2j / d_k), interleaved, axes concatenated."""
    ids = np.array([[0, 3, 7], [0, 63, 0], [1.5, 2.25, 31.0]])
    cos, sin = posenc.rope(ids, 16, axes_dim=(4, 6, 6), layout="interleaved")
    parts_c, parts_s = [], []
    for k, dk in enumerate((4, 6, 6)):
        theta = ids[:, k : k + 1] * 10000.0 ** (-np.arange(0, dk, 2) / dk)
        parts_c.append(np.repeat(np.cos(theta), 2, axis=-1))
        parts_s.append(np.repeat(np.sin(theta), 2, axis=-1))
    assert np.abs(cos - np.concatenate(parts_c, -1)).max() <= 2.0**-24 + 1e-12
    assert np.abs(sin - np.concatenate(parts_s, -1)).max() <= 2.0**-24 + 1e-12


def test_flux_pos_embed_matches_diffusers():
    torch = pytest.importorskip("torch")
    embeddings = pytest.importorskip("diffusers.models.embeddings")
    flux = pytest.importorskip("diffusers.models.transformers.transformer_flux")
    ids = torch.cat(
        [torch.zeros(5, 3), torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(8.0),
                                                       torch.arange(12.0), indexing="ij"), -1)
         .reshape(-1, 3)]
    )  # fmt: skip
    want_cos, want_sin = flux.FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])(ids)
    cos, sin = posenc.rope(ids, 128, axes_dim=(16, 56, 56), layout="interleaved")
    assert embeddings is not None
    assert cos.dtype == want_cos.dtype == torch.float32
    assert (cos - want_cos).abs().max() <= 2.0**-24
    assert (sin - want_sin).abs().max() <= 2.0**-24


def test_proportional_rule():
    """Gemma-style proportional: the first int(prf * D // 2) pairs rotate at b^(-2i/D)."""
    rule = {"rope_type": "proportional", "partial_rotary_factor": 0.25}
    cos, sin = posenc.rope(np.array([0, 7, 1000]), 32, scaling=rule)
    w = np.zeros(16)
    w[:4] = 10000.0 ** (-np.arange(0, 8, 2) / 32)
    theta = np.array([0, 7, 1000])[:, None] * w
    assert np.abs(cos - np.concatenate([np.cos(theta)] * 2, -1)).max() <= 2.0**-24
    assert np.abs(sin - np.concatenate([np.sin(theta)] * 2, -1)).max() <= 2.0**-24


def test_torch_meta_device():
    torch = pytest.importorskip("torch")
    cos, sin = posenc.rope(torch.zeros(2, 9, dtype=torch.int64, device="meta"), 64, scaling=YARN)
    assert cos.device.type == sin.device.type == "meta"
    assert cos.shape == (2, 9, 64)
    with raises("`seq_len`", "dynamic"):
        posenc.rope(torch.zeros(2, 9, dtype=torch.int64, device="meta"), 64,
                    scaling=RULES["dynamic-long"])  # fmt: skip


def test_softmax_scale_deepseek():
    """DeepSeek-V3: head_dim ** -0.5 * mscale(factor, mscale_all_dim) ** 2."""
    cfg = {"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
           "mscale": 1.0, "mscale_all_dim": 1.0}  # fmt: skip
    m = 0.1 * 1.0 * np.log(40) + 1.0
    assert posenc.softmax_scale(cfg, head_dim=192) == pytest.approx(192**-0.5 * m * m, rel=1e-15)
    assert posenc.softmax_scale({"rope_type": "linear", "factor": 2.0}, head_dim=64) == 64**-0.5


ERRORS = [
    ({"dim": 63}, ("`dim`", "even", "63")),
    ({"dim": 0}, ("`dim`", "0")),
    ({"scaling": {"rope_type": "ntk-by-parts"}}, ("scaling['rope_type']", "'ntk-by-parts'")),
    ({"scaling": {"rope_type": "linear"}}, ("scaling['factor']", "required", "linear")),
    ({"scaling": {"rope_type": "linear", "factor": -2.0}}, ("scaling['factor']", "-2.0")),
    ({"scaling": {"rope_type": "linear", "factor": 0}}, ("scaling['factor']", "0")),
    ({"scaling": {"rope_type": "linear", "factor": float("nan")}}, ("scaling['factor']",)),
    (
        {"scaling": {"rope_type": "dynamic", "factor": 2.0}},
        ("scaling['max_position_embeddings']", "required"),
    ),
    (
        {"scaling": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 0}},
        ("scaling['max_position_embeddings']", "0"),
    ),
    (
        {"scaling": {"rope_type": "yarn", "factor": 4.0}},
        ("scaling['original_max_position_embeddings']", "required"),
    ),
    (
        {"scaling": {"rope_type": "yarn", "original_max_position_embeddings": 4096}},
        ("scaling['factor']", "max_position_embeddings"),
    ),
    ({"scaling": {**YARN, "truncate": "no"}}, ("scaling['truncate']", "'no'")),
    ({"scaling": {**YARN, "beta_fast": -1}}, ("scaling['beta_fast']", "-1")),
    ({"scaling": {**YARN, "low_freq_factor": 1.0}}, ("scaling['low_freq_factor']", "yarn")),
    (
        {"scaling": {**_longrope(32), "long_factor": [1.0] * 3}},
        ("scaling['long_factor']", "32", "3"),
    ),
    (
        {"scaling": {**_longrope(32), "short_factor": [1.0] * 31 + [0.0]}},
        ("scaling['short_factor'][31]", "0.0"),
    ),
    (
        {"scaling": {**LLAMA3, "low_freq_factor": 4.0, "high_freq_factor": 1.0}},
        ("scaling['low_freq_factor']", "high_freq_factor"),
    ),
    ({"scaling": {"rope_theta": 5e5}}, ("scaling['rope_theta']", "`base`")),
    ({"scaling": {"partial_rotary_factor": 0.5}}, ("scaling['partial_rotary_factor']", "`dim`")),
    ({"scaling": "linear"}, ("`scaling`", "'linear'")),
    ({"layout": "rotate_half"}, ("`layout`", "'rotate_half'")),
    ({"base": -1.0}, ("`base`", "-1.0")),
    ({"sections": (16, 24, 23)}, ("`sections`", "32", "63")),
    ({"sections": (16, 0, 16)}, ("sections[1]", "0")),
    ({"axes_dim": (16, 16, 31)}, ("`axes_dim`", "64")),
    ({"interleave_sections": True}, ("`interleave_sections`", "`sections`")),
    (
        {
            "seq_len": 0,
            "scaling": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4},
        },
        ("`seq_len`", "0"),
    ),
    ({"compat": "vllm"}, ("`compat`", "'vllm'")),
    (
        {"compat": "timm"},
        (
            "`compat` of posenc.rope",
            "got 'timm'",
            "rope_grid(shape, dim, preset=..., compat='timm')",
            "posenc.torch.patch(model, compat='original')",
        ),
    ),
]


@pytest.mark.parametrize(("kwargs", "fragments"), ERRORS, ids=[str(e[1][0]) for e in ERRORS])
def test_bad_arguments_name_themselves(kwargs, fragments):
    kwargs = {"dim": 64, **kwargs}
    with raises(*fragments):
        posenc.rope(np.arange(4), **kwargs)


def test_compat_of_a_grid_family_says_where_its_tables_are():
    """diffusers' and timm's modes are rope_grid's (grids) and patch's (ids): the refusal
    names both, with the family."""
    ids = np.zeros((4, 3), dtype=int)
    with raises("`compat` of posenc.rope must be 'transformers'", "got 'diffusers'",
                "posenc.rope_grid(shape, dim, preset='lumina2', compat='diffusers')",
                "Qwen-Image's text rows, CogView4's canvas rows",
                "posenc.torch.patch(model, compat='original')"):  # fmt: skip
        posenc.rope(ids, 96, preset="lumina2", compat="diffusers")


@pytest.mark.parametrize("bad", [np.array([0.0, np.nan]), np.array([1.0, np.inf]), [1, "a"]])
def test_bad_positions(bad):
    with raises("`positions`"):
        posenc.rope(bad, 64)


def test_positions_with_the_wrong_axes():
    with raises("`positions`", "leading axis of 3", "(2, 5)"):
        posenc.rope(np.zeros((2, 5), dtype=int), 64, sections=(8, 12, 12))
    with raises("`positions`", "last axis of 3"):
        posenc.rope(np.zeros((5, 2)), 64, axes_dim=(16, 24, 24))


def test_exact_tables_are_views_of_one_array():
    cos, sin = posenc.rope(np.arange(10), 8)
    assert cos.base is not None
    assert cos.base is sin.base
    assert as_float64(cos).shape == (10, 8)


def test_block_halves_through_rope():
    """``posenc.rope(..., layout="block-halves", blocks=B)``: the d/2 frequencies cut into B
    runs, each run laid out as halves of its own block (LTX-2's per-head split)."""
    p = np.arange(7, dtype=np.float64)
    cos, sin = posenc.rope(p, 24, layout="block-halves", blocks=3, dtype=np.float64)
    omega = 1e4 ** (-np.arange(12) * 2 / 24)
    angles = p[:, None] * omega  # [7, 12]
    want = np.concatenate([np.concatenate([angles[:, 4 * b : 4 * b + 4]] * 2, axis=1)
                           for b in range(3)], axis=1)  # fmt: skip
    np.testing.assert_allclose(cos, np.cos(want), rtol=0, atol=1e-15)
    np.testing.assert_allclose(sin, np.sin(want), rtol=0, atol=1e-15)
    with raises("`blocks`", "5", "blocks of an even width"):
        posenc.rope(p, 24, layout="block-halves", blocks=5)


@pytest.mark.parametrize("layout", ["halves", "interleaved", "compact", "block-halves"])
def test_one_block_is_every_layout_in_rope_and_apply_rope(layout):
    """``blocks=1`` (one block: the layout itself) is taken by ``rope`` and ``apply_rope``
    alike, with any layout; another count cuts only ``"block-halves"``, in both."""
    p = np.arange(5, dtype=np.float64)
    cos, sin = posenc.rope(p, 8, layout=layout, blocks=1)
    want = posenc.rope(p, 8, layout=layout)
    assert all(np.array_equal(a, b) for a, b in zip((cos, sin), want, strict=True))
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    given = posenc.apply_rope(x, cos, sin, layout, blocks=1)
    assert np.array_equal(given, posenc.apply_rope(x, cos, sin, layout))
    if layout != "block-halves":
        with raises("`blocks`", "'block-halves'"):
            posenc.rope(p, 8, layout=layout, blocks=2)
        with raises("`blocks`", "'block-halves'"):
            posenc.apply_rope(x, cos, sin, layout, blocks=2)
