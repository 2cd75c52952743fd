"""What ``posenc.torch.patch`` does to the model a config builds, for ``posenc audit``.

The audit's figures come from the config (:mod:`posenc.app.audit_models`), but what it says
about fixing a model comes from ``patch`` itself, so the two cannot disagree: where the
config's library (transformers, diffusers) and torch are installed, the model is built from
the config on the meta device (no weights, no memory) and ``patch(model, dry_run=True)`` says
which modules it would replace, at their real paths, and which it leaves alone, and why. Each
finding then gets its fix from the row of its module; a finding whose module the model does
not have is dropped; the report's other rows are listed as they are. Elsewhere the audit reads
the config alone and says so.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.util
import io
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from posenc.app.audit_models import Finding

NO_FIX = "none: posenc.torch.patch leaves it alone"
META = "on the meta device"  # a recogniser's note where it needs the values (a table's)
LEARNED_NOTE = "learned"  # patch's note for a trainable table (posenc.torch._patching.LEARNED)


@dataclass(frozen=True)
class PatchView:
    """``patch(model, dry_run=True)`` of the model a config builds.

    Attributes:
        how: how the model was read, in words (its class, the library and its version).
        rows: the report's rows (``posenc.torch._patching.Replacement``).
        paths: every module path and tensor name of the model (to tell a finding whose
            module the model does not have).
    """

    how: str
    rows: tuple[Any, ...]
    paths: frozenset[str]


def patch_view(cfg: dict[str, Any]) -> PatchView | str:
    """The model ``cfg`` builds, patched in a dry run; or why it was not built (the audit
    then reads the config alone)."""
    library = "diffusers" if ("_class_name" in cfg or "_diffusers_version" in cfg) else None
    if library is None and cfg.get("model_type"):
        library = "transformers"
    if library is None:
        return "not a transformers or diffusers config"
    for needed in ("torch", library):
        if not _importable(needed):
            return f"{needed} is not installed"
    try:
        with _quiet(library):
            model, how = _build(library, cfg)
    except Exception as err:  # a config its library cannot build: read the config alone
        first = " ".join(str(err).split())[:200]
        return f"{library} could not build it from the config ({type(err).__name__}: {first})"
    from posenc.torch import patch

    try:
        with _quiet(library):
            report = patch(model, dry_run=True)
    except Exception as err:  # posenc's own limits on a model built without values
        first = " ".join(str(err).split())[:200]
        return f"posenc.torch.patch could not read it on the meta device ({first})"
    paths = {p for p, _ in model.named_modules()}
    paths |= {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    return PatchView(how, tuple(report), frozenset(paths))


def _hf_config(cfg: dict[str, Any]) -> Any:
    """transformers' config object of a ``config.json`` dict (its defaults filled in)."""
    import transformers

    fields = {k: v for k, v in cfg.items() if k != "model_type"}
    return transformers.AutoConfig.for_model(cfg["model_type"], **fields)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # sys.modules[name] is None: made unimportable
        return False


def _build(library: str, cfg: dict[str, Any]) -> tuple[Any, str]:
    from posenc.torch._placing import on_meta

    module = importlib.import_module(library)
    version = getattr(module, "__version__", "?")
    if library == "diffusers":
        cls = getattr(module, str(cfg.get("_class_name")), None)
        if cls is None:
            raise LookupError(f"diffusers has no class {cfg.get('_class_name')!r}")
        model = on_meta(lambda: cls.from_config(cfg))
    else:
        config = _hf_config(cfg)
        names = [a for a in cfg.get("architectures") or () if hasattr(module, a)]
        if names:
            model = on_meta(lambda: getattr(module, names[0])(config))
        else:
            model = on_meta(lambda: module.AutoModel.from_config(config))
    how = f"{type(model).__name__} built from the config on the meta device ({library} {version})"
    return model, how


@contextlib.contextmanager
def _quiet(library: str) -> Iterator[None]:
    """The library's warnings, logs and prints kept out of the audit's output (imported
    first: its import sets its logger's level)."""
    importlib.import_module(library)
    logger = logging.getLogger(library)
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _modules_of(where: str) -> list[str]:
    """A finding's module paths: its ``where`` without the words in parentheses, and
    ``encoder/decoder embed_positions`` as both paths."""
    where = re.sub(r"\s*\(.*\)$", "", where)
    owners, _, rest = where.partition(" ")
    if rest and "/" in owners:
        return [f"{owner}.{rest}" for owner in owners.split("/")]
    return [where]


def _matches(path: str, wheres: list[str]) -> bool:
    """A path of the model is one of a finding's modules (a ``where`` may hold ``*`` for a
    layer number, and name it from any depth), or the module holding its table."""
    for where in wheres:
        for pattern in (where, f"*.{where}"):
            if fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern + ".*"):
                return True
        parent = where.rpartition(".")[0]  # the module keeping the table, at that very path
        if parent and fnmatch.fnmatchcase(path, parent):
            return True
    return False


def apply_view(findings: list[Finding], view: PatchView) -> tuple[list[Finding], list[str]]:
    """The findings with their fixes from ``patch``'s rows (and the real path of their
    module), those the model has no module for dropped; and what else the report says, one
    line a row, and the dropped findings, for the audit's notes."""
    kept: list[Finding] = []
    said: set[int] = set()
    dropped = []
    for f in findings:
        if f.where.startswith("pipeline"):  # computed by the pipeline: no module to patch
            kept.append(f)
            continue
        where = _modules_of(f.where)
        named = re.search(r"\((\w+)\)$", f.where)  # the module's class, where it says one
        cls = named.group(1) if named else None
        rows = [i for i, r in enumerate(view.rows) if _matches(r.path, where) or r.original == cls]
        if not rows:
            if not any(_matches(p, where) for p in view.paths):
                dropped.append(f"{f.component} / {f.where}: the model has no such module")
                continue
            kept.append(
                replace(
                    f, fix=f"{NO_FIX}: it recognises no positional module there", alternative=None
                )
            )
            continue
        said.update(rows)
        if all(r.note.startswith(LEARNED_NOTE) for r in (view.rows[i] for i in rows)):
            dropped.append(
                f"{f.component} / {f.where}: a learned table (its model trains it), "
                "not a fixed encoding"
            )
            continue
        kept.append(_fixed(f, [view.rows[i] for i in rows]))
    others = [_line(r) for i, r in enumerate(view.rows) if i not in said]
    return kept, dropped + others


def _fixed(f: Finding, rows: list[Any]) -> Finding:
    replaced = [r for r in rows if r.replaced]
    waiting = [r for r in rows if not r.replaced and META in r.note]  # its values decide
    if not replaced and waiting:
        paths = ", ".join(f"model.{r.path}" for r in waiting)
        return replace(
            f,
            fix=f"{f.fix} (replaces {paths} once the model is loaded: on the "
            "meta device it cannot read the table it decides by)",
            alternative=None,
        )
    if not replaced:
        notes = "; ".join(dict.fromkeys(r.note for r in rows if r.note))
        return replace(f, fix=f"{NO_FIX}: {notes}" if notes else NO_FIX, alternative=None)
    paths = ", ".join(f"model.{r.path}" for r in replaced)
    alternative = f.alternative
    if alternative is not None and ".rotary_emb = " in alternative:  # the module's own path
        rest = alternative.split(" = ", 1)[1]
        alternative = "; ".join(f"model.{r.path} = {rest}" for r in replaced)
    fix = f"{f.fix} (replaces {paths})" if "posenc.torch.patch" in f.fix else f.fix
    return replace(f, fix=fix, alternative=alternative)


def unbuilt(findings: list[Finding]) -> list[Finding]:
    """The findings of a config read alone: where a module sits is not known there
    (``model.model.rotary_emb`` is Llama's, ``model.gpt_neox.rotary_emb`` GPT-NeoX's;
    Whisper's encoder table is ``model.encoder`` in ``WhisperModel``), so no assignment to
    one is offered: ``posenc.torch.patch`` finds them."""
    return [replace(f, alternative=None) for f in findings]


def _line(row: Any) -> str:
    what = f"replaced ({row.mode})" if row.replaced else "left alone"
    unmeasured = row.replaced and row.max_diff is None  # the meta device's note: no values
    note = f": {row.note}" if row.note and not unmeasured else ""
    return f"patch: {row.path} ({row.original}) {what}{note}"


def as_read(cfg: dict[str, Any]) -> dict[str, Any]:
    """A transformers config as transformers reads it, where it is installed (its defaults
    filled in: a Llama-2 config without ``rope_theta`` has base 10000); else as it is."""
    if "_class_name" in cfg or not cfg.get("model_type"):
        return cfg
    if not _importable("transformers"):
        return cfg
    try:
        with _quiet("transformers"):
            read: dict[str, Any] = _hf_config(cfg).to_dict()
    except Exception:  # a config transformers cannot read: the audit reads it as it is
        return cfg
    return {**cfg, **read}
