"""Every example in a public docstring runs, and prints what it says (doctest); every Python
block of the site's tutorial pages runs too.

The examples are what a user copies first, and what the API reference shows; this keeps them
from rotting. Each module's examples see the names a user would have imported: ``posenc``,
``np``, ``math``, ``torch``, ``transformers`` and the module's own public names.
"""

from __future__ import annotations

import doctest
import importlib
import math
import pathlib
import re

import numpy as np
import pytest

import posenc


def _public_modules() -> list[str]:
    """``posenc``, ``posenc.torch`` and every module that defines one of their public names
    (doctest finds only what a module defines itself, not what it re-exports)."""
    names = ["posenc"]
    try:
        import posenc.torch as pt
    except ImportError:  # no torch: the torch modules are skipped by the test anyway
        return names
    names.append("posenc.torch")
    for mod in (posenc, pt):
        names += sorted({getattr(mod, n).__module__ for n in mod.__all__} - set(names))
    return names


MODULES = _public_modules()


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    module = importlib.import_module(name)
    globs = {"posenc": posenc, "np": np, "math": math, "torch": torch}
    globs["transformers"] = transformers
    globs.update({k: v for k, v in vars(module).items() if not k.startswith("_")})
    torch.manual_seed(0)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in finder.find(module, name, globs=globs):
        runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)
    if name in ("posenc", "posenc.api.sinusoidal", "posenc.api.rope", "posenc.torch.rotary"):
        assert result.attempted > 0  # these modules' public functions carry examples


def test_every_public_name_has_an_example():
    """Every name in ``posenc.__all__`` and ``posenc.torch.__all__`` carries a runnable
    example (run by the test above), and every module documents its own ``forward``."""
    torch = pytest.importorskip("torch")
    import posenc.torch as pt

    lacking = [
        f"{mod.__name__}.{n}"
        for mod in (posenc, pt)
        for n in mod.__all__
        if ">>>" not in (getattr(mod, n).__doc__ or "")
    ]
    assert not lacking, f"no example in the docstring of {lacking}"
    generic = torch.nn.Module.forward.__doc__
    modules = [getattr(pt, n) for n in pt.__all__ if isinstance(getattr(pt, n), type)]
    undocumented = [
        m.__name__
        for m in modules
        if issubclass(m, torch.nn.Module) and m.forward.__doc__ in (None, generic)
    ]
    assert not undocumented, f"forward without its own docstring: {undocumented}"


DOCS = pathlib.Path(__file__).parent.parent / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md") if "```python" in p.read_text())
NOT_RUN = {"jax.md": 1}  # the Flax module: flax is not in the test extra


def test_every_page_with_code_is_run():
    assert {"index.md", "presets.md", "torch.md", "rope.md", "jax.md", "sharding.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_site_page_code_runs(page):
    """Each ```python block of a page runs as written, in a fresh namespace (the blocks assert
    what they claim); a block fenced with a title saying why is not run, and only those
    listed in NOT_RUN may be."""
    pytest.importorskip("torch")
    text = (DOCS / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    titled = re.findall(r"```python title=\"needs ([^\"]*)\"", text)
    assert len(titled) == NOT_RUN.get(page, 0), titled
    assert blocks, f"no python block in docs/{page}"
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/{page} block {i + 1}", "exec"), {"__name__": "__doc__"})


def test_readme_tour_runs():
    """The README's tour (its first python block) runs as written: every name it uses is
    defined in it."""
    pytest.importorskip("torch")
    text = (DOCS.parent / "README.md").read_text()
    tour = re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]
    assert "posenc.table(" in tour
    exec(compile(tour, "README.md tour", "exec"), {"__name__": "__doc__"})


def test_readme_counts_the_families_from_hf_reads():
    """The README's count of the transformers families ``from_hf`` reads (each tested against
    its own module: tests/test_rotary_module.py, tests/test_from_hf.py) is the registry's."""
    pytest.importorskip("torch")
    from posenc.compat.transformers import FAMILIES

    text = (DOCS.parent / "README.md").read_text()
    counts = re.findall(r"(\d+) (?:HF|model) families", text)
    assert counts, text
    assert {int(n) for n in counts} == {len(FAMILIES)}, counts
