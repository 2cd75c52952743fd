"""MkDocs hook: pages that quote the library itself, so they cannot drift from it.

``<!-- presets:sinusoidal -->`` and ``<!-- presets:rotary -->`` in a page become tables of
every preset of that kind, read from ``posenc.preset(name)`` at build time.
"""

from __future__ import annotations

from typing import Any

import posenc


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


def on_page_markdown(markdown: str, **_: Any) -> str:
    for kind in ("sinusoidal", "rotary"):
        markdown = markdown.replace(f"<!-- presets:{kind} -->", _table(kind))
    return markdown
