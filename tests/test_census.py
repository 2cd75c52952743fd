"""The census (benchmarks/census.py) on a few model types of each kind: what it says matches
what patch does to each model, nothing that holds positions is missed, and compat is proven
(``torch.equal`` outputs) where it is claimed. The whole census is one command
(``python -m benchmarks.census --write docs/coverage.md``, about 10 minutes); its table is in
docs/coverage.md."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")
from benchmarks import census

pytestmark = pytest.mark.usefixtures("quiet_transformers")

TRANSFORMERS = {  # model type: (status, compat forward, a word of the reason)
    "llama": ("covered", "equal", ""),
    "falcon": ("covered", "equal", ""),  # transformers' standard machinery, not a listed family
    "gptj": ("left alone", "not run", "holds the marian sinusoid"),
    "conditional_detr": ("covered", "not run: no forward from input_ids", ""),
    "fsmt": ("learned only", "not run", "learned"),
    "moonshine": ("covered", "not run", ""),  # built again with its own head: 16 * 0.9 is odd
    "lfm3": ("covered", "equal", ""),  # one layer of each type: its attention layers too
    "mlcd_vision_model": ("covered", "not run", ""),  # the standard axial machinery
    "glm4v_text": ("does not run", "not run", "its own forward fails"),  # its default config
}


@pytest.fixture(scope="module")
def rows():
    found = {r.name: r for r in census.census_transformers(list(TRANSFORMERS))}
    found.update({r.name: r for r in census.census_diffusers(["FluxTransformer2DModel"])})
    return found


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_transformers_rows(rows, name):
    status, compat, word = TRANSFORMERS[name]
    row = rows[name]
    assert row.status == status, row
    assert row.compat.startswith(compat), row
    assert word in row.reason, row
    assert not row.missed
    assert row.built == "cpu"


def test_a_diffusers_row(rows):
    row = rows["FluxTransformer2DModel"]
    assert row.status == "covered", row
    assert not row.missed
    assert any(m.startswith("pos_embed (FluxPosEmbed): replaced") for m in row.modules), row


def test_a_missed_module_is_a_missed_row():
    """A module whose class says it holds positions, and that the report does not name."""
    import torch

    class MysteryRotaryEmbedding(torch.nn.Module):
        pass

    MysteryRotaryEmbedding.__module__ = "transformers.models.mystery.modeling_mystery"
    model = torch.nn.Module()
    model.rope = MysteryRotaryEmbedding()
    row = census.Row("transformers", "mystery")
    census.judge(row, model, [], "transformers")
    assert (row.status, row.missed) == ("missed", ["rope"])


def test_the_summary_counts_what_was_built():
    rows = [
        census.Row("transformers", "a", ["rotary"], "cpu", "covered"),
        census.Row("transformers", "b", ["rotary"], "meta", "left alone"),
        census.Row("transformers", "c", ["rotary"], "", "could not build"),
        census.Row("transformers", "d", ["sinusoidal"], "cpu", "no positional module"),
        census.Row("transformers", "e", ["rotary"], "cpu", "does not run"),
    ]
    line = census.summary(rows, "transformers", "rotary")
    assert line.startswith("transformers (rotary): 1 of 2 built with a positional module")
    assert "(50 %)" in line
    assert "1 left alone" in line
    assert line.endswith("2 could not be built or run")
