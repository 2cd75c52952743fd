"""The package's structure, checked: the layers import downward only, no import cycle, array
libraries are known only in their own files, modules stay small and say what they own, and no
private name crosses a package boundary.

The layers, lowest first (a module may import from its own layer and the ones below):

    errors, cache, _types       the exception, the scalar checks, bounded caches, type names
    spec                        what an encoding is (no array library)
    evaluate                    how it is computed (evaluate.libs: one file per array library)
    compat                      the originals' own float32 arithmetic (torch code)
    api                         the public functions
    torch                       the PyTorch modules
    app                         the command line, files, plots, identify
"""

from __future__ import annotations

import ast
import pathlib
import re
from collections import defaultdict

import pytest

import posenc

PACKAGE = pathlib.Path(posenc.__file__).parent
LAYERS = ["errors", "cache", "_types", "spec", "evaluate", "compat", "api", "torch", "app"]
LEVEL = {
    "errors": 0,
    "cache": 0,
    "_types": 0,
    "__init__": 9,
    "__main__": 9,
    "spec": 1,
    "evaluate": 2,
    "compat": 3,
    "api": 4,
    "torch": 5,
    "app": 6,
}
LIBRARY_FILES = ("evaluate/libs/", "torch/", "compat/")
"""Where torch and JAX may be imported and their attributes touched: the per-library files,
the PyTorch modules, and the originals' torch arithmetic."""
MAX_LINES = 500
"""The longest a module may be, as ``ruff format`` writes it (CI checks the formatting)."""
MAX_FORMAT_SKIPS = 20


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Line numbers of statements inside ``if TYPE_CHECKING:`` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def _imports(name: str) -> list[tuple[str, int, list[str]]]:
    """``(module imported, line, names)`` for every runtime import of module ``name``, at any
    depth (functions included), resolved to posenc modules where they are ones."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [a.name for a in node.names]
            for n in names:
                sub = f"{base}.{n}"
                found.append((sub if sub in MODULES else base, node.lineno, [n]))
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for name in MODULES:
        for target, _, _ in _imports(name):
            if target in MODULES and target != name:
                graph[name].add(target)
    return graph


def _layer(name: str) -> int:
    parts = name.split(".")
    return LEVEL[parts[1]] if len(parts) > 1 else LEVEL["__init__"]


def _upward(name: str, target: str) -> bool:
    """``name`` importing ``target`` reaches above its own layer. The package root is the
    public API (the front-ends' layer): the torch modules and the app may use it."""
    if _layer(name) == LEVEL["__init__"]:
        return False
    level = LEVEL["api"] if target == "posenc" else _layer(target)
    return level > _layer(name)


def test_no_import_cycle():
    """No module imports one that imports it back, directly or through others, at any depth
    (imports inside functions included)."""
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(MODULES):
        if name not in state:
            visit(name)


def test_layers_import_downward():
    """Lower layers never call upper ones: spec imports no evaluation, evaluation no
    front-end, front-ends no torch module or app."""
    upward = [
        f"{name} imports {target} (line {line})"
        for name in MODULES
        for target, line, _ in _imports(name)
        if target in MODULES and _upward(name, target)
    ]
    assert not upward, "\n".join(upward)


def _touches(tree: ast.AST, library: str, skip: set[int]) -> list[int]:
    """Lines where ``library`` is imported or one of its attributes is read (annotations and
    ``TYPE_CHECKING`` blocks aside)."""
    annotations: set[int] = set()
    for node in ast.walk(tree):
        for ann in (
            getattr(node, "annotation", None),
            getattr(node, "returns", None),
        ):
            if ann is not None:
                annotations.update(id(n) for n in ast.walk(ann))
    lines = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip or id(node) in annotations:
            continue
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == library for a in node.names
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == library:
            if not node.level:
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == library
        ):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("library", ["torch", "jax"])
def test_array_libraries_are_known_only_in_their_files(library):
    """Outside ``evaluate/libs/``, ``torch/`` and ``compat/``, no module imports torch or JAX
    or reads one of their attributes: everything else asks a backend."""
    found = []
    for path in MODULES.values():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(LIBRARY_FILES) or rel == "_types.py":
            continue
        tree = ast.parse(path.read_text())
        found += [f"{rel}:{line}" for line in _touches(tree, library, _type_checking_only(tree))]
    assert not found, f"{library} touched outside its files: {found}"


def test_modules_are_small_and_say_what_they_own():
    """No library module over 500 lines as ruff formats it, and each starts with a docstring
    saying what it owns."""
    long, silent = [], []
    for path in MODULES.values():
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text()
        if len(text.splitlines()) > MAX_LINES:
            long.append(f"{rel} ({len(text.splitlines())} lines)")
        doc = ast.get_docstring(ast.parse(text))
        if not doc or len(doc.splitlines()[0]) < 20:
            silent.append(rel)
    assert not long, f"modules over {MAX_LINES} lines: {long}"
    assert not silent, f"modules without a first line saying what they own: {silent}"


def test_formatting_is_left_to_ruff():
    """``# fmt: skip`` only on a numeric table whose columns matter (a line of numbers), at
    most 20 in all: no line is packed by hand to keep a module short."""
    marked = [
        (path.relative_to(PACKAGE).as_posix(), i, line)
        for path in MODULES.values()
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "# fmt: skip" in line
    ]
    assert len(marked) <= MAX_FORMAT_SKIPS, f"{len(marked)} `# fmt: skip` markers"
    numeric = re.compile(r"^[\s\d.eE+\-,()\[\]]*$")
    packed = [f"{rel}:{i}" for rel, i, line in marked if not numeric.match(line.split("#")[0])]
    assert not packed, f"`# fmt: skip` on lines that are not numbers: {packed}"


def test_no_private_name_crosses_a_package():
    """A private name (``_x``) is imported only within its own package: what another package
    needs is public there, or lives where it is needed."""
    crossing = []
    for name in MODULES:
        home = name.rpartition(".")[0] if MODULES[name].name != "__init__.py" else name
        for target, line, names in _imports(name):
            if not target.startswith("posenc"):
                continue
            there = (
                target
                if MODULES.get(target, PACKAGE).name == "__init__.py"
                else (target.rpartition(".")[0])
            )
            for n in names:
                private = n.startswith("_") and not n.startswith("__")
                if private and there != home:
                    crossing.append(f"{name}:{line} imports {n} from {target}")
    assert not crossing, "\n".join(crossing)


def test_architecture_page_names_real_code():
    """Every ``posenc.…`` path that docs/architecture.md names (its life of a call) is a
    module, or a name in one, that imports: the story cannot drift from the code."""
    import importlib
    import re

    page = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text()
    paths = sorted(set(re.findall(r"`(posenc(?:\.\w+)+)`", page)))
    assert len(paths) >= 15
    missing = []
    for path in paths:
        parts = path.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(path)
            break
        else:
            missing.append(path)
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"
