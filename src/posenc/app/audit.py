"""``posenc audit PATH``: the positional encodings a local model uses, the float32 error of
their original arithmetic, the bf16 ``.to()`` hazard, and the line that fixes them.

PATH is a model directory (``config.json``), a pipeline directory (``model_index.json`` and
one folder per component) or a ``config.json`` file, of a transformers or diffusers model.
Only the JSON is read: nothing is downloaded, and neither library needs to be installed.
What each config holds is recognised in :mod:`posenc.app.audit_models`; the figures are
computed in :mod:`posenc.app.audit_figures`. A config that cannot be read, or in which
nothing is recognised, is a :class:`~posenc.errors.PosencError` (one line, exit 2).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from posenc.app.audit_diffusers import diffusers_findings
from posenc.app.audit_fields import check_fields
from posenc.app.audit_figures import torch_missing
from posenc.app.audit_models import Finding, is_timm, timm_findings, transformers_findings
from posenc.app.audit_patch import (
    LEARNED_NOTE,
    PatchView,
    apply_view,
    as_read,
    patch_view,
    unbuilt,
)
from posenc.app.audit_vision import Size, timm_vision_findings, vision_findings
from posenc.errors import PosencError

RECORD = (
    "component",
    "where",
    "encoding",
    "equivalent",
    "max_position",
    "positions",
    "original",
    "float32_error",
    "bf16_error",
    "fix",
    "alternative",
    "note",
)
"""The fields of a measured :class:`Finding` that a row of the table and a ``--json`` record
hold, in order."""


# --- reading the configs -----------------------------------------------------------------------


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; anything else is a one-line error naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PosencError(f"no such file: {str(path)!r}") from None
    except UnicodeDecodeError:
        raise PosencError(f"{str(path)!r} is not a JSON text file (not UTF-8)") from None
    except OSError as err:
        raise PosencError(f"cannot read {str(path)!r}: {err.strerror or err}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise PosencError(
            f"{str(path)!r} is not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})"
        ) from None
    except RecursionError:
        raise PosencError(f"{str(path)!r} is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise PosencError(f"{str(path)!r} must hold a JSON object, got a {type(data).__name__}")
    return data


def configs(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(component, config)`` for every config under ``path``: one for a model, one per
    component folder with a ``config.json`` for a pipeline."""
    if not path.exists():
        raise PosencError(f"no such file or directory: {str(path)!r}")
    index = None
    if path.is_dir():
        if (path / "model_index.json").is_file():
            index = path / "model_index.json"
        elif (path / "config.json").is_file():
            path = path / "config.json"
        else:
            raise PosencError(f"{str(path)!r} holds no config.json or model_index.json")
    elif path.name == "model_index.json":
        index = path
    if index is None:
        cfg = read_json(path)
        return [
            (
                str(
                    cfg.get("_class_name")
                    or cfg.get("model_type")
                    or cfg.get("architecture")
                    or "model"
                ),
                cfg,
            )
        ]
    listed = read_json(index)
    root = index.parent
    names = [k for k, v in listed.items() if not k.startswith("_") and isinstance(v, list)]
    names = names or sorted(p.name for p in root.iterdir() if p.is_dir())
    found = [
        (n, read_json(root / n / "config.json"))
        for n in names
        if (root / n / "config.json").is_file()
    ]
    if not found:
        raise PosencError(f"{str(index)!r} names no component folder with a config.json")
    return found


UNKNOWN = "no positional encoding posenc recognises"


def _what(cfg: dict[str, Any]) -> str:
    return str(
        cfg.get("_class_name") or cfg.get("model_type") or cfg.get("architecture") or "unknown"
    )


# --- the audit ---------------------------------------------------------------------------------


def audit(path: Path, size: Size | None = None) -> tuple[list[Finding], list[str], list[str]]:
    """The records of every encoding found under ``path``; the components in which none was
    (with why); and per component how it was read and what else ``posenc.torch.patch`` says
    about its model (:mod:`posenc.app.audit_patch`). Nothing found at all is an error. The
    image and video families are measured at ``size`` when one is asked."""
    findings: list[Finding] = []
    skipped: list[str] = []
    notes: list[str] = []
    read_configs = configs(path)
    for component, cfg in read_configs:
        try:
            check_fields(cfg)
        except PosencError as err:
            raise PosencError(f"{str(path)!r} ({component}): {err}") from None
    for component, cfg in read_configs:
        view = None if is_timm(cfg) else patch_view(cfg)
        diffusers = "_class_name" in cfg or "_diffusers_version" in cfg
        read = _timm if is_timm(cfg) else _diffusers if diffusers else transformers_findings
        try:
            found = (
                _diffusers(as_read(cfg), component, size)
                if read is _diffusers
                else read(as_read(cfg), component)
            )
        except PosencError as err:
            skipped.append(f"{component} ({_what(cfg)}): {err}")
            continue
        reported = False  # patch's report has a row for this model besides learned tables
        if isinstance(view, PatchView):
            reported = any(r.replaced or not r.note.startswith(LEARNED_NOTE) for r in view.rows)
            found, said = apply_view(found, view)
            notes += [f"{component}: read as {view.how}", *(f"{component}: {s}" for s in said)]
        elif view is not None:
            found = unbuilt(found)
            notes.append(f"{component}: the config alone ({view})")
        if not found:
            why = "none measured from its config: patch's report below" if reported else UNKNOWN
            if isinstance(view, str) and not reported:
                why += f" in its config alone ({view})"
            skipped.append(f"{component} ({_what(cfg)}): {why}")
        findings += found
    if not findings and not any("patch's report below" in s for s in skipped):
        known = all(UNKNOWN in s for s in skipped)
        raise PosencError(
            f"{str(path)!r}: {'not recognised' if known else 'not audited'}: {'; '.join(skipped)}"
        )
    missing = torch_missing()
    return [_measure(f, missing) for f in findings], skipped, notes


def _diffusers(cfg: dict[str, Any], component: str, size: Size | None = None) -> list[Finding]:
    return vision_findings(cfg, component, size) or diffusers_findings(cfg, component)


def _timm(cfg: dict[str, Any], component: str) -> list[Finding]:
    return timm_vision_findings(cfg, component) or timm_findings(cfg, component)


def _measure(f: Finding, missing: str | None) -> Finding:
    a: float | None = None
    b: float | None = None
    note = f.note
    if f.measure is not None and not (f.needs_torch and missing):
        try:
            a, b, extra = f.measure()
        except PosencError as err:
            extra = f"not measured: {err}"
        if extra:
            note = extra if note is None else f"{note}; {extra}"
    elif missing:
        note = f"float32 figures not computed: {missing}" + (f"; {note}" if note else "")
    return replace(f, max_position=float(f.max_position), float32_error=a, bf16_error=b, note=note)


# --- the output --------------------------------------------------------------------------------


def number(x: float | None) -> str:
    """A figure as the table prints it."""
    return "n/a" if x is None else f"{x:.2e}"


def _position(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


def render(path: Path, records: list[Finding], skipped: list[str], notes: list[str]) -> str:
    """The table, then one paragraph per row: its posenc call, what was measured, the fix."""
    head = ("#", "where", "encoding", "largest position", "float32 error", "bf16 .to() error")
    rows = [
        (
            str(i),
            f"{r.component} / {r.where}",
            r.encoding,
            _position(r.max_position),
            number(r.float32_error),
            number(r.bf16_error),
        )
        for i, r in enumerate(records, 1)
    ]
    widths = [max(len(row[c]) for row in [head, *rows]) for c in range(len(head))]
    lines = [f"posenc audit {path}: {len(records)} positional encoding(s) measured", ""]
    for row in [head, *rows] if rows else []:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for i, r in enumerate(records, 1):
        lines += ["", f"[{i}] {r.component} / {r.where}"]
        lines.append(f"    posenc:   {r.equivalent}")
        lines.append(f"    original: {r.original}")
        lines.append(f"    measured: {r.positions}")
        fix = r.fix + (f"   (today: {r.alternative})" if r.alternative else "")
        lines.append(f"    fix:      {fix}")
        if r.note:
            lines.append(f"    note:     {r.note}")
    if skipped:
        lines += ["", "not audited:", *(f"  {s}" for s in skipped)]
    if notes:
        lines += ["", "how each component was read, and the rest of patch's report:"]
        lines += [f"  {s}" for s in notes]
    return "\n".join(lines)


def run(path: Path, *, as_json: bool = False, size: Size | None = None) -> int:
    """``posenc audit``: print the table (or the JSON records); 0, or a PosencError."""
    records, skipped, notes = audit(path, size)
    if size is not None and not any(size.words() in r.positions for r in records):
        raise PosencError(
            f"--size: {str(path)!r} has no image or video rotary embedding posenc measures at a "
            "size (the diffusers families of `posenc presets`)"
        )
    if as_json:
        out: list[dict[str, Any]] = [{k: getattr(r, k) for k in RECORD} for r in records]
        out += [{**dict.fromkeys(RECORD), "note": s} for s in [*skipped, *notes]]
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render(path, records, skipped, notes))
    return 0
