"""The families of image and video models: one module each (or one per small group of close
families), each holding its record, :data:`FAMILY` (:class:`~posenc.spec.families.base.Family`):
its presets, the rows its original keeps and its ``compat=`` replays, its module classes, what
``posenc audit`` measures, and its docs row.

Everything else is a view of this registry: the image and video presets of
``posenc.presets()``, ``compat=``'s dispatch, the classes ``posenc.torch.patch`` indexes,
``posenc audit``'s config reading and the docs tables. A new family is one module here (found
by walking this package) and one test file, plus, where it has a module class of its own, the
recogniser of that class's form (``docs/architecture.md``: How to add …).

Examples:
    >>> from posenc.spec.families import FAMILIES, family_of
    >>> family_of("hunyuan-image").name
    'HunyuanVideo'
    >>> "wan" in FAMILIES
    True
"""

from __future__ import annotations

import importlib
import pkgutil

from posenc.errors import PosencError
from posenc.spec.families.base import Audit, Classes, Family, TimmAudit, Trained
from posenc.spec.presets.base import RotaryPreset

__all__ = [
    "FAMILIES",
    "PRESETS",
    "Audit",
    "Classes",
    "Family",
    "TimmAudit",
    "Trained",
    "check",
    "family_of",
    "trained_of",
]


def check(records: dict[str, Family]) -> dict[str, Family]:
    """``records``, or the error naming a preset, a module class or an audited model (a
    ``_class_name``, a timm fragment) two of them claim (no order decides between two
    records)."""
    presets: dict[str, str] = {}
    classes: dict[tuple[str, str], str] = {}
    audited: dict[str, str] = {}
    for name, record in records.items():
        for audit in record.audits:
            for model in audit.models if isinstance(audit, Audit) else (audit.fragment,):
                if model in audited:
                    raise PosencError(
                        f"{model} is audited by two family records: {audited[model]}, {name}"
                    )
                audited[model] = name
        for p in record.presets:
            if p.name in presets:
                raise PosencError(
                    f"preset {p.name!r} is in two family records: {presets[p.name]}, {name}"
                )
            presets[p.name] = name
        for group in record.classes:
            for cls in group.names:
                key = (group.library, cls)
                if key in classes:
                    raise PosencError(
                        f"{group.library}'s {cls} is in two family records: {classes[key]}, {name}"
                    )
                classes[key] = name
    return records


def _walk() -> dict[str, Family]:
    """Every module of this package but ``base``, by name, and its ``FAMILY``."""
    return {
        info.name: importlib.import_module(f"{__name__}.{info.name}").FAMILY
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name)
        if info.name != "base"
    }


FAMILIES: dict[str, Family] = check(_walk())
"""Every family record, by its module's name."""

PRESETS: dict[str, RotaryPreset] = {p.name: p for f in FAMILIES.values() for p in f.presets}
"""Every family's rotary presets, by name (:data:`posenc.spec.presets.ROTARY_PRESETS` holds
them after the language models')."""


def family_of(preset: str | RotaryPreset) -> Family:
    """The record that holds ``preset`` (a name or the preset)."""
    name = preset.name if isinstance(preset, RotaryPreset) else preset
    for record in FAMILIES.values():
        if any(p.name == name for p in record.presets):
            return record
    raise PosencError(f"`preset` {name!r} is not an image or video family's")


def trained_of(preset: str | RotaryPreset | None) -> Trained | None:
    """The size ``preset``'s models were trained at (its record's :class:`Trained` entry), or
    None: no preset, not a family's, or a family that records none."""
    name = preset.name if isinstance(preset, RotaryPreset) else preset
    for record in FAMILIES.values():
        for entry in record.trained:
            if entry.preset.name == name:
                return entry
    return None
