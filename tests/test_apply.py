"""``apply_rope``: against transformers' and Meta's rotations and the float64 rotation from
the formula (`helpers.rotated`), bf16 rounded once, gradients, float64 and NumPy inputs,
block-by-block rotation of large inputs, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from tests.helpers import raises, rotated

torch = pytest.importorskip("torch")


def _hf_apply(q, cos, sin):
    """transformers' rotation (Llama's ``apply_rotary_pos_emb``); its tests ask for the
    ``quiet_transformers`` fixture."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=1)[0]


def _meta_apply(x, cos_half, sin_half):
    """Meta Llama: view pairs as complex, multiply by cis, back to real."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    cis = torch.complex(cos_half, sin_half)  # Meta's freqs_cis = polar(1, angles)
    return torch.view_as_real(xc * cis).flatten(-2).type_as(x)


@pytest.mark.usefixtures("quiet_transformers")
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


@pytest.mark.usefixtures("quiet_transformers")
@pytest.mark.parametrize("layout", ["halves", "interleaved", "compact"])
def test_apply_bf16_within_one_ulp_of_the_truth(layout):
    """posenc rounds the float32 rotation once to bf16: within half a bf16 ulp of the float64
    rotation plus twice the float32 rotation's error, 3 * 2^-24 of the pair's magnitude (the
    table, both products and the sum each rounded once), as docs/rope.md states it; where a
    pair's two products cancel, a value's own ulp is no bound. transformers' bf16 path (bf16
    tables, bf16 products and sum) is measured."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 256, 128, generator=gen).bfloat16()
    pos = np.arange(90_000, 90_256)
    cos, sin = posenc.rope(torch.from_numpy(pos), 64, layout=layout)
    got = posenc.apply_rope(x, cos, sin, layout=layout)
    pair = "halves" if layout == "compact" else layout
    truth = rotated(x, pos, 64, layout=pair)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(truth), 2.0**-126))) - 7)
    err = np.abs(got.double().numpy() - truth)
    v = x.double().numpy()[..., :64]
    if pair == "halves":  # each channel's pair partner: i and i + 32
        partner = np.concatenate([v[..., 32:], v[..., :32]], axis=-1)
    else:  # 2i and 2i + 1
        partner = v.reshape(*v.shape[:-1], 32, 2)[..., ::-1].reshape(v.shape)
    norm = np.zeros_like(truth)
    norm[..., :64] = np.hypot(v, partner)  # a rotation keeps each pair's magnitude
    assert (err <= 0.5 * ulp + 6 * 2.0**-24 * norm).all()
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
    want = rotated(torch.from_numpy(x)[:, None], pos, 8)[:, 0]  # [3, 1, 10, 12]: no head axis
    assert np.abs(got - want).max() < 1e-14


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


@pytest.mark.parametrize("layout", ["halves", "interleaved", "compact"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_apply_rope_in_blocks_is_the_same_as_in_one(monkeypatch, layout, dtype):
    """Large inputs rotate block by block (cache-sized float32 temporaries): the same bits as
    one pass, for tables that broadcast over any leading axes and blocks that cut any axis."""
    import posenc.evaluate.libs.torch_rotation as core

    x = torch.randn(2, 3, 50, 40, generator=torch.Generator().manual_seed(1))
    x = x.to(getattr(torch, dtype))
    tables = [
        posenc.rope(torch.arange(50), 32, layout=layout),  # [50, w]
        posenc.rope(torch.arange(100).reshape(2, 1, 50), 32, layout=layout),  # per batch
        posenc.rope(torch.arange(300).reshape(2, 3, 50) % 77, 32, layout=layout),  # per head
    ]
    for cos, sin in tables:
        monkeypatch.setattr(core, "BLOCK", 1 << 30)
        whole = posenc.apply_rope(x, cos, sin, layout=layout)
        for block in (40, 700, 2000, 4000):  # a row; rows of axis 2; whole axes; axis 1 cut
            monkeypatch.setattr(core, "BLOCK", block)
            assert torch.equal(posenc.apply_rope(x, cos, sin, layout=layout), whole), block


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_apply_rope_refuses_integer_inputs(library):
    """A rotation of integers would be truncated ([3, 0, -3, -4] -> [3, 0, -3, -4] where the
    rotation is [3.73, -0.75, -3.81, -4.11]): refused, naming the argument."""
    if library == "torch":
        torch = pytest.importorskip("torch")
        x, ids = torch.tensor([[3, 0, -3, -4]]), torch.arange(1) + 1
    else:
        x, ids = np.array([[3, 0, -3, -4]]), np.arange(1) + 1
    cos, sin = posenc.rope(ids, 4)
    with pytest.raises(posenc.PosencError, match=r"`x` must hold floating-point values"):
        posenc.apply_rope(x, cos, sin)
    with pytest.raises(posenc.PosencError, match=r"`cos` must hold floating-point values"):
        posenc.apply_rope(x * 1.0, cos.astype(np.int64) if library == "numpy" else cos.long(), sin)


def test_apply_rope_names_tables_that_cannot_broadcast():
    cos, sin = posenc.rope(np.arange(5), 4)
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(posenc.PosencError, match=r"`cos` of shape \(5, 4\) must broadcast"):
        posenc.apply_rope(x, cos, sin)
