"""posenc.torch.patch finds the recogniser of a module by an index of (library, class name),
not by a first-answer-wins order: no class is claimed by two recognisers, every claimed class
is indexed to its recogniser and exists in the installed library, and the recognisers by form
(what a module holds, not its name) are asked only after the one its class names."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from posenc.errors import PosencError  # noqa: E402

patch_module = importlib.import_module("posenc.torch.patch")  # the module, not the function
from posenc.torch._patching import ByClass, by_class, index, left_alone, library_of  # noqa: E402

CLAIMS = [r for r in patch_module.RECOGNISERS if isinstance(r, ByClass)]
SOURCES = {  # where each library defines the classes the recognisers name
    "transformers": ("models/*/modeling_*.py",),
    "diffusers": ("models/**/*.py",),
    "timm": ("layers/*.py", "models/*.py"),
}


def _defined(library):
    """Every class name defined in the installed library's sources."""
    spec = importlib.util.find_spec(library)
    if spec is None or spec.origin is None:
        pytest.skip(f"{library} is not installed")
    root = Path(spec.origin).parent
    text = "".join(p.read_text() for pattern in SOURCES[library] for p in root.glob(pattern))
    return set(re.findall(r"^class (\w+)\(", text, re.M))


def test_a_class_claimed_twice_is_refused():
    def first(path, module, root):
        return left_alone("A", "first")

    def second(path, module, root):
        return left_alone("A", "second")

    with pytest.raises(PosencError, match="diffusers's Wan is claimed by two recognisers"):
        index([by_class("diffusers", "Wan")(first), by_class("diffusers", "Wan")(second)])
    assert len(index([by_class("diffusers", "Wan")(first), by_class("timm", "Wan")(second)])) == 2


def test_every_claimed_class_is_indexed_to_its_recogniser():
    pairs = [(c.library, name) for c in CLAIMS for name in c.classes]
    assert len(pairs) == len(set(pairs)) == len(patch_module.INDEX)
    for claim in CLAIMS:
        for name in claim.classes:
            assert patch_module.INDEX[(claim.library, name)] is claim


@pytest.mark.parametrize("library", sorted(SOURCES))
def test_every_claimed_class_exists_in_the_library(library):
    defined = _defined(library)
    claimed = {name for c in CLAIMS if c.library == library for name in c.classes}
    assert claimed, library
    assert sorted(claimed - defined) == []


def test_a_module_is_found_by_its_library_and_class():
    for claim in CLAIMS:
        for name in claim.classes:
            fake = type(name, (torch.nn.Module,), {"__module__": f"{claim.library}.models.x"})
            assert patch_module.INDEX[(library_of(fake()), name)] is claim
    other = type("Timesteps", (torch.nn.Module,), {"__module__": "mylib.layers"})
    assert (library_of(other()), "Timesteps") not in patch_module.INDEX  # another library's


def test_the_claimed_recogniser_is_asked_first_and_checks_its_class():
    """A recogniser by class, called on a module of another class or library, says nothing;
    the index's answer comes before the recognisers by form."""
    (timesteps,) = [c for c in CLAIMS if "Timesteps" in c.classes]
    mine = type("Timesteps", (torch.nn.Module,), {"__module__": "mylib.layers"})
    assert timesteps("t", mine(), mine()) is None
    found = patch_module._recognise("t", _diffusers_timesteps(), torch.nn.Module())
    assert found is not None
    assert found.description.startswith("Timesteps")


def _diffusers_timesteps():
    diffusers = pytest.importorskip("diffusers")
    return diffusers.models.embeddings.Timesteps(32, True, 0)


def test_a_claimed_class_of_another_form_falls_through_to_the_forms():
    """diffusers' ``PatchEmbed`` is claimed, but one defined in another diffusers module is a
    copy of another form: its recogniser says nothing and the catch-all reports its table."""
    copy_class = type("PatchEmbed", (torch.nn.Module,), {"__module__": "diffusers.models.copies"})
    module = copy_class()
    module.register_buffer("pos_embed", torch.zeros(1, 16, 8))
    assert (library_of(module), "PatchEmbed") in patch_module.INDEX
    found = patch_module._recognise("x", module, torch.nn.Module())
    assert found is not None
    assert found.note.startswith("not covered yet: PatchEmbed's fixed table")
    assert found.attribute == "pos_embed"
