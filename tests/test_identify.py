"""``posenc.api.identify``: its candidates come from the presets' data, not from a list of its own.

The tables identified for correctness are independent float64 references (tests/reference.py),
never posenc's output.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import posenc
from posenc.api import identify as identify_module
from posenc.api.identify import MATCH, identify
from posenc.spec.encoding import Encoding
from posenc.spec.presets import PRESETS, ZERO_ROW, Preset
from posenc.spec.presets.sinusoidal import MAE_CLS, MAX_TIMESCALE, TEMPERATURE
from tests import reference as ref


def _names(c: identify_module.Candidate) -> list[str]:
    return [c.preset, *c.also]


def test_a_preset_only_in_the_registry_is_identified(monkeypatch):
    custom = Preset(
        "test-whisper-777",
        "a test",
        "whisper's table with largest timescale 777",
        Encoding(shift=1.0, layout="halves", widths="exact", base=777.0),
        {"max_timescale": MAX_TIMESCALE},
        identify=({},),
    )
    monkeypatch.setitem(PRESETS, custom.name, custom)
    found = identify(ref.whisper(50, 32, max_timescale=777.0))
    assert found[0].preset == "test-whisper-777"
    assert found[0].call == "posenc.table(50, 32, preset='test-whisper-777')"
    assert found[0].error < 1e-6
    # float32, as a checkpoint stores it
    found = identify(ref.whisper(50, 32, max_timescale=777.0).astype(np.float32))
    assert found[0].preset == "test-whisper-777"
    assert found[0].error < 1e-6


def test_a_new_2d_preset_with_a_class_row_is_identified(monkeypatch):
    custom = Preset(
        "test-hf-2d-777",
        "a test",
        "hf-2d with temperature 777",
        Encoding(ndim=2, layout="halves", widths="exact", base=777.0),
        {"temperature": TEMPERATURE, "cls_token": MAE_CLS},
        identify=({}, {"cls_token": True}),
    )
    monkeypatch.setitem(PRESETS, custom.name, custom)
    found = identify(ref.hf_2d(6, 10, 64, temperature=777.0, cls_token=True))
    assert found[0].preset == "test-hf-2d-777"
    assert found[0].call == "posenc.grid((6, 10), 64, preset='test-hf-2d-777', cls_token=True)"
    assert found[0].error < 1e-6


def test_no_preset_name_is_written_in_identify():
    source = Path(identify_module.__file__).read_text(encoding="utf-8")
    literals = set(re.findall(r"""(?:'([^'\n]*)'|"([^"\n]*)")""", source))
    strings = {s for pair in literals for s in pair if s}
    for name in posenc.presets():
        assert name not in strings, name
        assert f"'{name}'" not in source, name
        assert f'"{name}"' not in source, name


def test_the_same_numbers_are_named_once():
    # hf-2d equals timm-2d with interleave_sin_cos; on a square grid reverse_coord=True is the
    # same table again: timm-2d once in `also`, not twice
    found = identify(ref.timm_2d((8, 8), 64, interleave_sin_cos=True))
    best = found[0]
    assert best.preset == "hf-2d"
    assert best.error < 1e-12
    assert best.also.count("timm-2d") == 1
    for c in found:
        assert len(set(_names(c))) == len(_names(c)), c


def test_whisper_table_is_named_whisper_with_its_equals():
    found = identify(ref.whisper(60, 64))
    assert found[0].preset == "whisper"
    assert {"fairseq", "tensor2tensor", "timestep"} <= set(found[0].also)
    assert len(set(found[0].also)) == len(found[0].also)


def test_tables_that_do_not_match_are_never_folded():
    rng = np.random.default_rng(0)
    learned = ref.vaswani(197, 64) + rng.normal(0, 0.2, (197, 64))
    found = identify(learned)
    assert found[0].error > MATCH
    assert found[0].call == "posenc.table(197, 64, preset='vaswani')"
    assert all(c.also == () for c in found if c.error >= MATCH)
    # a zero table is equally far from every candidate: still none folded
    assert all(c.also == () for c in identify(np.zeros((48, 64))))


def test_hf_2d_with_a_class_row():
    # transformers' build_2d_sinusoidal_position_embedding layout, a zero class row first
    table = ref.hf_2d(6, 10, 64, cls_token=True)
    found = identify(table)
    assert found[0].preset == "hf-2d"
    assert found[0].call == "posenc.grid((6, 10), 64, preset='hf-2d', cls_token=True)"
    assert found[0].error < 1e-12
    found = identify(table.astype(np.float32))
    assert found[0].preset == "hf-2d"
    assert found[0].error < 1e-6


@pytest.mark.parametrize(
    ("table", "call"),
    [
        (ref.fairseq(130, 64, padding_idx=1), "preset='fairseq', padding_idx=1"),
        (ref.mae(192, 14, cls_token=True), "(14, 14), 192, preset='mae', cls_token=True"),
        (
            ref.diffusers_2d(64, (6, 8), cls_token=True, extra_tokens=1),
            "preset='diffusers-2d', cls_token=True, extra_tokens=1",
        ),
        (
            ref.timm_2d((6, 8), 64, reverse_coord=True),
            "(6, 8), 64, preset='timm-2d', reverse_coord=True, interleave_sin_cos=False",
        ),
        (
            ref.timestep(np.arange(30.0), 64, flip_sin_to_cos=True, downscale_freq_shift=0),
            "preset='timestep', flip_sin_to_cos=True, downscale_freq_shift=0",
        ),
        (ref.t2t_nd((6, 8), 64), "(6, 8), 64, preset='t2t-nd'"),
        (ref.tatp22((6, 8), 64), "(6, 8), 64, preset='tatp22'"),
    ],
)
def test_references_are_identified(table, call):
    found = identify(table)
    assert call in found[0].call, found[0]
    assert found[0].error < 1e-9


def test_every_identify_option_set_finds_its_own_table():
    # coverage of the data: each option set of each preset is reached (posenc's own output is
    # the input here; the numbers are checked against references above and in test_presets)
    tried = 0
    for p in PRESETS.values():
        for opts in p.identify:
            kw = {k: 1 if v is ZERO_ROW else v for k, v in opts.items()}
            if p.encoding.ndim in (1, None):
                tab = posenc.table(40, 64, preset=p.name, dtype=np.float64, **kw)
                assert p.name in _names(identify(tab)[0]), (p.name, kw)
                tried += 1
            if p.encoding.ndim in (2, None):
                tab = posenc.grid((6, 8), 64, preset=p.name, dtype=np.float64, **kw)
                assert p.name in _names(identify(tab)[0]), (p.name, kw)
                tried += 1
    assert tried >= 17


def test_presets_left_out_of_identify_are_never_candidates():
    skipped = {p.name for p in PRESETS.values() if not p.identify}
    assert "nerf" in skipped
    found = identify(ref.whisper(60, 64))
    assert not skipped & {n for c in found for n in _names(c)}
