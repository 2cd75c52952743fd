"""MkDocs hooks: pages that quote the library itself, so they cannot drift from it.

- ``<!-- presets:sinusoidal -->`` and ``<!-- presets:rotary -->`` in a page become tables of
  every preset of that kind, read from ``posenc.preset(name)`` at build time.
- ``<!-- families:SECTION -->`` becomes the table of the image and video families' presets
  in that section (``diffusers grids``, ``diffusers ids``, ``transformers``, ``timm``), read
  from their records (:mod:`posenc.spec.families`, each record's ``docs`` rows);
  ``<!-- families:patch -->`` what ``patch`` replaces of each family (its classes, its
  presets), ``<!-- families:audit -->`` what ``posenc audit`` measures of each,
  ``<!-- families:trained -->`` the size each was trained at and the ``timestep`` its
  transformer receives at pure noise (what the rules past the trained size read).
- ``<!-- count:from_hf -->`` becomes the number of transformers model families
  ``RotaryEmbedding.from_hf`` reads (``posenc.compat.transformers.FAMILIES``).
- ``<!-- gallery -->`` becomes the figure gallery: every script in ``docs/gallery/`` is run at
  build time; its docstring gives the section's title and text, its ``figures()`` yields
  ``(group, stem, caption, figure)``, each figure is written as ``gallery/<stem>.png``, and
  the script's source follows its figures. Figures of one non-empty group sit side by side
  under the group's heading.
"""

from __future__ import annotations

import importlib.util
import io
import math
import re
import textwrap
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

import posenc
from posenc.app import plots
from posenc.spec.families import FAMILIES, TimmAudit

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


def _base(value: float) -> str:
    exponent = math.log10(value)
    return f"1e{exponent:.0f}" if value >= 1000 and exponent == round(exponent) else f"{value:g}"


def _families(section: str) -> str:
    """The family table of one section, a row per preset, from the records."""
    rows = [
        "| preset | models | blocks (head d) | base | layout | coordinates | `compat=` |",
        "|---|---|---|---|---|---|---|",
    ]
    found = [r for f in FAMILIES.values() for r in f.docs if r.section == section]
    if not found:
        raise ValueError(f"no family record has a docs row in section {section!r}")
    for r in found:
        p = r.preset
        modes = ", ".join(f"`{m}`" for m in p.replays) or "see [patch](patch.md)"
        cells = (
            f"`{p.name}`",
            r.models,
            r.blocks,
            r.base or _base(float(p.rotary.get("base", 10000.0))),
            r.layout or str(p.rotary.get("layout", "halves")),
            r.coordinates,
            r.compat or modes,
        )
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows)


def _patched() -> str:
    """What ``patch`` replaces of each family: its module classes by library, its presets."""
    rows = ["| family | its modules (library) | presets |", "|---|---|---|"]
    for f in FAMILIES.values():
        groups = [(g.library, n) for g in f.classes for n in g.names]
        libraries = sorted({lib for lib, _ in groups})
        modules = "; ".join(
            ", ".join(f"`{n}`" for lib, n in groups if lib == library) + f" ({library})"
            for library in libraries
        )
        presets = ", ".join(f"`{p.name}`" for p in f.presets)
        rows.append(
            f"| {f.name} | {modules or 'none: the pipeline computes the tables'} | {presets} |"
        )
    return "\n".join(rows)


def _trained() -> str:
    """The size each preset's models were trained at, and its ``timestep`` at pure noise."""
    rows = [
        "| preset | trained at (tokens per axis) | its videos repeat at | `timestep` at pure "
        "noise (time 1) | source |",
        "|---|---|---|---|---|",
    ]
    for f in FAMILIES.values():
        for t in f.trained:
            grid = " x ".join("any" if n is None else str(n) for n in t.grid)
            repeats = "" if t.repeats_at is None else f"{t.repeats_at} latent frames"
            noise = (
                "not read: give the rule its `time`"
                if t.noise_timestep is None
                else f"{t.noise_timestep:g} (time = `timestep / {t.noise_timestep:g}`)"
            )
            cells = (f"`{t.preset.name}`", grid, repeats, noise, t.source)
            rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows)


def _audited() -> str:
    """What ``posenc audit`` measures of each family from a config alone."""
    rows = [
        "| models (config) | module | preset | measured at | the original |",
        "|---|---|---|---|---|",
    ]
    for f in FAMILIES.values():
        for a in f.audits:
            if isinstance(a, TimmAudit):
                models = f"timm `*{a.fragment}*` architectures"
                where, at, original = "rope", "its `pretrained_cfg` size", "timm, float32 angles"
            else:
                models = ", ".join(f"`{m}`" for m in a.models)
                side = f"ids below {a.grid[0]}" if a.ids else " x ".join(map(str, a.grid))
                where, at, original = a.where, f"{side} ({a.grid_words})", a.original
            cells = (models, where, f"`{a.preset.name}`", at, original)
            rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        if f.unaudited:
            presets = ", ".join(f"`{p.name}`" for p in f.presets)
            rows.append(f"| {f.name} | | {presets} | not from a config: {_cell(f.unaudited)} | |")
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
    if "<!-- count:from_hf -->" in markdown:
        from posenc.compat.transformers import FAMILIES as FROM_HF

        markdown = markdown.replace("<!-- count:from_hf -->", str(len(FROM_HF)))
    markdown = markdown.replace("<!-- families:patch -->", _patched())
    markdown = markdown.replace("<!-- families:audit -->", _audited())
    markdown = markdown.replace("<!-- families:trained -->", _trained())
    markdown = re.sub(r"<!-- families:([a-z ]+) -->", lambda m: _families(m.group(1)), markdown)
    return markdown.replace("<!-- gallery -->", "\n\n".join(SECTIONS))
