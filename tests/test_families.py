"""The family records (:mod:`posenc.spec.families`), walked: each record is the one place its
facts live, and every view reads it: the presets, ``compat=``'s replays and the rows they
refuse past, the classes ``posenc.torch.patch`` indexes, what ``posenc audit`` measures."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pathlib

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from posenc.spec.families import FAMILIES, Family, check, family_of
from posenc.spec.families.base import Audit, Classes, TimmAudit
from posenc.spec.presets import ROTARY_PRESETS

SOURCE = pathlib.Path(posenc.__file__).parent
IMPORTED = {"torch"} if importlib.util.find_spec("torch") else set()


def _small(preset):
    """A small grid of the preset's axes that its original's positions reach."""
    from posenc.spec.rotary import rotary

    k = rotary(preset.dim, preset=preset.name).ndim
    square = {"llama4-vision"}  # its table is the square image_size / patch_size grid
    return (3,) * k if preset.name in square else (2, 3, 4)[-k:] if k <= 3 else (2,) * k


RECORDS = sorted(FAMILIES)


@pytest.mark.parametrize("name", RECORDS)
def test_a_record_is_what_the_views_read(name):
    """Its presets are the ones ``posenc.preset`` gives, each replay it names is a function
    that runs on a small grid, its audit entries measure its own presets, and a preset with
    none is named in the record's reason (a record with no entry at all says why)."""
    record = FAMILIES[name]
    assert record.presets, name
    for p in record.presets:
        assert posenc.preset(p.name) is p
        assert family_of(p.name) is record
        for mode, target in p.replays.items():
            module, function = target.split(":")
            assert callable(getattr(importlib.import_module(module), function)), target
            if "torch" in IMPORTED:  # the replay runs, on a small grid of the family's form
                cos, _ = posenc.rope_grid(_small(p), p.dim, preset=p.name, compat=mode)
                assert cos.shape[-1] in (p.dim, p.dim // 2), (p.name, mode)
    audited = {a.preset.name for a in record.audits}
    for p in record.presets:  # each preset: audited, or the reason names it (or all)
        reason = record.unaudited and (not record.audits or p.name in record.unaudited)
        assert p.name in audited or reason, f"{name}: {p.name} has no audit entry, no reason"
    for audit in record.audits:
        assert audit.preset in record.presets
    for trained in record.trained:  # one extent per grid axis of the preset at its own width
        assert trained.preset in record.presets
        ones = (1,) * len(trained.grid)
        cos, _ = posenc.rope_grid(ones, trained.preset.dim, preset=trained.preset.name)
        assert cos.shape == (1, trained.preset.dim)


def test_every_image_and_video_preset_has_a_record():
    """The rotary presets past the language models' are exactly the records' presets."""
    own = [p.name for f in FAMILIES.values() for p in f.presets]
    assert sorted(own) == sorted(set(own))
    assert set(own) <= set(ROTARY_PRESETS)
    language = set(ROTARY_PRESETS) - set(own)
    assert all(not ROTARY_PRESETS[n].replays for n in language)  # replays are the records'


def test_a_preset_or_a_class_in_two_records_is_refused():
    one = FAMILIES["wan"]
    other = Family("Copy", one.presets)
    with pytest.raises(PosencError, match="preset 'wan' is in two family records: a, b"):
        check({"a": one, "b": other})
    twice = Family("Copy", FAMILIES["cosmos"].presets[:0], classes=(Classes("diffusers", "X"),))
    with pytest.raises(PosencError, match="diffusers's X is in two family records: a, b"):
        check({"a": twice, "b": twice})


def test_a_model_audited_by_two_records_is_refused():
    wan = FAMILIES["wan"]
    with pytest.raises(PosencError, match="WanTransformer3DModel is audited by two family"):
        check({"a": wan, "b": Family("Copy", (), audits=wan.audits)})


def test_patch_indexes_each_class_group_to_one_recogniser():
    """Each group of classes a record names is one recogniser's claim in ``patch``'s index,
    exactly: the recogniser takes no class the record does not name."""
    patching = importlib.import_module("posenc.torch.patch")
    for name, record in FAMILIES.items():
        for group in record.classes:
            found = {patching.INDEX.get((group.library, c)) for c in group.names}
            assert None not in found, f"{name}: {group.names} not indexed"
            assert len(found) == 1, f"{name}: {group.names} split over recognisers"
            (recogniser,) = found
            assert (recogniser.library, recogniser.classes) == (group.library, group.names)


def test_audit_reads_every_model_the_records_name():
    from posenc.app import audit_vision

    for record in FAMILIES.values():
        for audit in record.audits:
            if isinstance(audit, TimmAudit):
                assert audit_vision.TIMM[audit.fragment] is audit
            else:
                assert isinstance(audit, Audit)
                for model in audit.models:
                    assert audit_vision.VISION[model] is audit


def test_a_family_preset_is_named_in_its_record_only():
    """No module outside a family's record spells one of its preset names as a string: the
    others refer to the record's preset (a rename is one edit)."""
    home = {
        p.name: f"spec/families/{module}.py"
        for module, record in FAMILIES.items()
        for p in record.presets
    }
    stray = []
    for path in sorted(SOURCE.rglob("*.py")):
        rel = path.relative_to(SOURCE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in home and home[node.value] != rel:
                stray.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not stray, stray


# The other strings equal to a preset's name outside the file that defines it: the public
# defaults, and words of other namespaces that happen to be spelt as one.
ELSEWHERE = {
    ("vaswani", "api/sinusoidal.py"): "the default of table and encode",
    ("vaswani", "torch/sequence.py"): "the default of the sequence modules",
    ("mae", "api/sinusoidal.py"): "the default of grid",
    ("mae", "torch/vision.py"): "the default of GridEncoding",
    ("llama", "spec/presets/transformers.py"): "a transformers model_type",
    ("qwen2", "spec/presets/transformers.py"): "a transformers model_type",
    ("cohere", "spec/presets/transformers.py"): "a transformers model_type",
    ("llama", "app/audit_models.py"): "a transformers model_type",
    ("whisper", "app/audit_models.py"): "a transformers model_type",
    ("marian", "app/audit_models.py"): "a transformers model_type",
    ("llama3", "spec/scaling.py"): "a transformers rope_type",
    ("timestep", "torch/_scaled.py"): "the argument of a diffusers forward",
    ("detr", "__init__.py"): "the function posenc.detr, in __all__",
}


def test_every_preset_is_named_in_its_own_file():
    """Every preset's name is spelt as a string in the one file that defines it (and the
    demo); the few other strings equal to one are listed with what they are."""
    from posenc.spec.presets.sinusoidal import PRESETS

    home = dict.fromkeys(PRESETS, "spec/presets/sinusoidal.py")
    home |= dict.fromkeys(ROTARY_PRESETS, "spec/presets/rotary.py")
    home |= {p.name: f"spec/families/{m}.py" for m, r in FAMILIES.items() for p in r.presets}
    assert sorted(home) == sorted(posenc.presets())
    found = set()
    for path in sorted(SOURCE.rglob("*.py")):
        rel = path.relative_to(SOURCE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in home and home[node.value] != rel:
                found.add((node.value, rel))
    assert {pair for pair in found if pair[1] != "app/demo.py"} == set(ELSEWHERE)


@pytest.mark.parametrize(
    ("preset", "shape"), [("wan", (2, 1025, 1)), ("cosmos", (1, 129, 2)), ("z-image", (1, 513, 1))]
)
def test_the_rows_a_record_keeps_bound_its_replay(preset, shape):
    """A grid past the rows the record says the original keeps is refused, naming them."""
    pytest.importorskip("torch")
    table = posenc.preset(preset).rows[0]
    with pytest.raises(PosencError, match="which the original does not hold"):
        posenc.rope_grid(shape, 128, preset=preset, compat="diffusers")
    assert table.origin in _refusal(preset, shape)
    inside = tuple(min(n, high - 1) for n, (low, high) in zip(shape, table.rows, strict=False))
    cos, _ = posenc.rope_grid(inside, 128, preset=preset, compat="diffusers")
    assert cos.shape == (int(np.prod(inside)), 128)


def _refusal(preset, shape):
    try:
        posenc.rope_grid(shape, 128, preset=preset, compat="diffusers")
    except PosencError as err:
        return str(err)
    raise AssertionError("not refused")
