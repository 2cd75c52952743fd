"""MkDocs hooks: pages that quote the library itself, so they cannot drift from it.

- ``<!-- presets:sinusoidal -->`` and ``<!-- presets:rotary -->`` in a page become tables of
  every preset of that kind, read from ``posenc.preset(name)`` at build time.
- ``<!-- gallery -->`` becomes the figure gallery: every script in ``docs/gallery/`` is run at
  build time; its docstring gives the section's title and text, its ``figures()`` yields
  ``(group, stem, caption, figure)``, each figure is written as ``gallery/<stem>.png``, and
  the script's source follows its figures. Figures of one non-empty group sit side by side
  under the group's heading.
"""

from __future__ import annotations

import importlib.util
import io
import textwrap
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

import posenc
from posenc.app import plots

GALLERY = Path(__file__).parent / "gallery"
SECTIONS: list[str] = []


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(kind: str) -> str:
    rows = ["| preset | reproduces | what it is | quirks |", "|---|---|---|---|"]
    for name in posenc.presets(kind):
        p = posenc.preset(name)
        rows.append(
            f"| `{name}` | {_cell(p.origin)} | {_cell(p.summary)} | {_cell(p.quirks or '')} |"
        )
    return "\n".join(rows)


def _load(script: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"gallery_{script.stem}", script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _section(script: Path, config: Any, files: Files) -> str:
    module = _load(script)
    title, _, text = (module.__doc__ or script.stem).strip().partition("\n")
    out = [f"## {title.strip()}", "", textwrap.dedent(text).strip(), ""]
    group, shots = None, []

    def flush() -> None:
        if not shots:
            return
        if group:
            out.extend([f"### {group}", ""])
        width = ' width="49%"' if len(shots) > 1 else ""
        images = [
            f"![{c.replace('`', '')}](gallery/{s}.png){{ loading=lazy{width} }}" for s, c in shots
        ]
        out.extend([" ".join(images), ""])
        out.extend([f"- {c}" for _, c in shots] if len(shots) > 1 else [shots[0][1]])
        out.append("")
        shots.clear()

    for grp, stem, caption, fig in module.figures():
        if grp != group or not grp:
            flush()
            group = grp
        buffer = io.BytesIO()
        plots.save(fig, buffer)
        files.append(File.generated(config, f"gallery/{stem}.png", content=buffer.getvalue()))
        shots.append((stem, caption))
    flush()
    source = textwrap.indent(script.read_text().rstrip(), "    ")
    out += [f'??? example "Source: docs/gallery/{script.name}"', "", "    ```python", source,
            "    ```", ""]  # fmt: skip
    return "\n".join(out)


def on_files(files: Files, config: Any) -> Files:
    SECTIONS.clear()
    for script in sorted(GALLERY.glob("*.py")):
        SECTIONS.append(_section(script, config, files))
    return files


def on_page_markdown(markdown: str, **_: Any) -> str:
    for kind in ("sinusoidal", "rotary"):
        markdown = markdown.replace(f"<!-- presets:{kind} -->", _table(kind))
    return markdown.replace("<!-- gallery -->", "\n\n".join(SECTIONS))
