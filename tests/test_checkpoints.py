"""Checkpoints (issue 13): the tables saved by the modules posenc replaces (written out from
their code, in float32 as they compute) load quietly; learned, fine-tuned, other-convention or
other-width tables are an error that says what they are, and ``strict=False`` drops them with
a warning."""

from __future__ import annotations

import pytest

from tests import reference as ref
from tests.helpers import fairseq_float32, raises, tutorial_table, whisper_float32

torch = pytest.importorskip("torch")
nn = torch.nn

from posenc.torch import (  # noqa: E402
    DetrSineEncoding,
    GridEncoding,
    PositionalEncoding,
    SinusoidalEmbedding,
    Timesteps,
)


class _Tutorial(nn.Module):
    """The PyTorch tutorial's module (``pe`` buffer ``[max_len, 1, d_model]``, float32)."""

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        self.register_buffer("pe", tutorial_table(max_len, d_model))


@pytest.mark.parametrize("stored", [torch.float32, torch.bfloat16, torch.float16])
def test_the_tutorials_table_loads_quietly(stored, recwarn):
    saved = _Tutorial(64).to(stored).state_dict()
    outer = nn.Sequential(PositionalEncoding(64))
    result = outer.load_state_dict({f"0.{k}": v for k, v in saved.items()}, strict=True)
    assert not result.missing_keys
    assert not result.unexpected_keys
    assert not recwarn.list
    assert torch.equal(outer[0].cache, PositionalEncoding(64).cache)  # ours, not the copy


def test_fairseq_and_whisper_tables_load_quietly():
    emb = SinusoidalEmbedding(64, preset="fairseq", padding_idx=1)
    emb.load_state_dict({"weights": fairseq_float32(1026, 64, 1), "_float_tensor": torch.ones(1)})
    whisper = PositionalEncoding(384, preset="whisper")
    whisper.load_state_dict({"positional_embedding": whisper_float32(1500, 384)})


def test_an_mae_grid_with_its_class_row_loads_quietly():
    enc = GridEncoding(192, preset="mae", cls_token=True)
    saved = torch.from_numpy(ref.mae(192, 14, cls_token=True)).float()[None]
    enc.load_state_dict({"pos_embed": saved})


def test_a_fine_tuned_vit_table_is_an_error_that_says_so():
    enc = GridEncoding(192, preset="mae", cls_token=True)
    tuned = torch.from_numpy(ref.mae(192, 14, cls_token=True)).float()[None]
    tuned = tuned + 0.05 * torch.randn(tuned.shape, generator=torch.Generator().manual_seed(0))
    with raises("'pos_embed'", "not this module's encoding", "max difference", "looks learned",
                "strict=False"):  # fmt: skip
        enc.load_state_dict({"pos_embed": tuned})


def test_a_learned_table_is_refused_and_strict_false_warns():
    learned = torch.randn(2048, 64, generator=torch.Generator().manual_seed(1))
    m = PositionalEncoding(64)
    with raises("'pe'", "[2048x64] float32", "looks learned", "nn.Parameter"):
        m.load_state_dict({"pe": learned})
    with pytest.warns(UserWarning, match="dropped"):
        result = m.load_state_dict({"pe": learned}, strict=False)
    assert not result.unexpected_keys
    assert torch.equal(m.cache, PositionalEncoding(64).cache)


def test_another_convention_is_named():
    m = PositionalEncoding(64)  # the paper's interleaved table
    with raises("'positional_embedding'", "it is preset 'whisper'", "posenc.table(1500, 64"):
        m.load_state_dict({"positional_embedding": whisper_float32(1500, 64)})


def test_another_width_is_refused():
    m = PositionalEncoding(768)
    with raises("'pe'", "[5000x512]", "768 channels wide"):
        m.load_state_dict(_Tutorial(512).state_dict())


def test_modules_without_a_table_refuse_one():
    with raises("'pe'", "is not a table this module has"):
        Timesteps(32).load_state_dict({"pe": torch.zeros(10, 32)})
    with raises("'pos_embed'", "square grid"):
        GridEncoding(64).load_state_dict({"pos_embed": torch.zeros(1, 15, 64)})
    DetrSineEncoding(16).load_state_dict({})
