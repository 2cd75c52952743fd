"""Census: every positional module of transformers and diffusers, covered by
``posenc.torch.patch`` or left alone with a reason.

    python -m benchmarks.census [--library transformers|diffusers] [--only NAME ...]
                                [--write docs/coverage.md] [--json FILE]

transformers: every model type with a base model (``AutoModel``) whose modeling files define a
rotary or a sinusoidal position module (a ``*Rotary*``, ``*Sinusoidal*``, ``*SinePosition*`` or
``*PositionalEncoding`` class, or a sinusoid function). Each is built from its default config
with one layer of each layer type (and, for a forward, small widths: hidden 64, 4 heads of 16,
vocabulary 256, its own head widths where mrope sections are cut from the head or the small
head would make the rotary width odd) on the CPU, else with its default widths on the meta
device; ``patch(model, dry_run=True)`` says what it finds, and where a tiny model takes
``input_ids``, ``patch(model, compat="original")`` is run and its outputs compared with
``torch.equal``. diffusers: every ``ModelMixin`` class,
built from its defaults with one layer per stack, on the meta device (on the CPU where a
fixed table decides: a table's values are read), dry run only.

A model's status: **covered** (every positional module found is replaced, learned tables
aside), **partly** (some are), **left alone** (none is: the first reason is shown),
**learned only**, **missed** (a module whose class or attribute says it holds positions that
the report does not name: a defect), **patch failed** (``patch`` raised: a defect), **no
positional module** (the base model builds none: not counted), **could not build** or **does
not run** (its positional module fails on its own default config; the reason: not counted). A
compat forward is ``equal``, ``differs`` or ``failed`` (the last two are defects), or ``not
run`` with why.

No download; about 5 minutes on two cores for both libraries.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import io
import json
import re
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.environment import prepare  # noqa: E402  (this machine's torchvision shim)

prepare()

import torch  # noqa: E402

from posenc.torch import patch  # noqa: E402
from posenc.torch._patch_transformers import OWN_FAILS  # noqa: E402

ROTARY_SOURCE = re.compile(r"^class \w*(Rotary|RoPE|Rope)\w*\(", re.M)
SINUSOID_SOURCE = re.compile(
    r"^class \w*(Sinusoid|SinePosition|PositionalEncoding)\w*\("
    r"|^def (create_sinusoidal_positions|sinusoids|positional_encoding|get_timestep_embedding)\(",
    re.M,
)
POSITIONAL_CLASS = re.compile(
    r"^(?!.*Attention$).*(Rotary|RoPE|Rope|Sinusoid|SinePosition|PositionalEncoding"
    r"|Pos(ition(al)?)?Embed|EmbedND|TimeEmbedding$|^Timesteps$)"
)
"""A module holding positions, by its class name (an attention module that applies a rotary
embedding is not one: its tables come from a module of their own, or from inside it)."""
POSITIONAL_TENSOR = re.compile(
    r"^(embed_positions|pos_encoding|pos_embed|pos_embedding|position_embeddings?|"
    r"positional_embedding|temp_pos_embed|decoder_pos_embed|inv_freq)$"
)
LAYERS = (
    "num_hidden_layers",
    "num_layers",
    "n_layer",
    "n_layers",
    "encoder_layers",
    "decoder_layers",
    "num_encoder_layers",
    "num_decoder_layers",
    "depth",
    "num_single_layers",
    "num_refiner_layers",
    "num_mmdit_layers",
    "num_single_dit_layers",
    "num_noise_refiner_layers",
    "num_context_refiner_layers",
)
SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "d_model": 64,
    "n_embd": 64,
    "n_head": 4,
    "ffn_dim": 128,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "moe_intermediate_size": 32,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
}
CPU_BYTES = 4 << 30
"""The largest diffusers model built again on the CPU (its parameters, in bytes)."""
NOT_POSITIONAL = "no positional table"  # diffusers' PatchEmbed built without one
ODD_WIDTH = "must be even: channels rotate in pairs"
"""A rotary width the small widths made odd (``int(16 * partial_rotary_factor)``; no released
checkpoint has one): such a model is built again with its own head widths."""
DOES_NOT_RUN = OWN_FAILS
"""Its positional module fails on its default config (GLM-4V's text model: mrope sections for a
partial rotary factor the default config does not set): not counted, as a model not built."""
NOT_BUILT = ("could not build", "does not run")
"""The statuses of models not counted as built."""
HEAD = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "d_model")
"""The widths that fix a head's size: kept where mrope sections are cut from the head."""
TOKENS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


@dataclass
class Row:
    """One model type's (or diffusers class's) census line."""

    library: str
    name: str
    kinds: list[str] = field(default_factory=list)
    built: str = ""  # "cpu", "meta", or why it could not be built
    status: str = ""
    reason: str = ""
    modules: list[str] = field(default_factory=list)  # "path (Class): replaced | left alone"
    missed: list[str] = field(default_factory=list)
    compat: str = ""  # "equal", "differs", or why it was not run

    @property
    def counted(self) -> bool:
        return self.status not in (*NOT_BUILT, "no positional module")


# ---------------------------------------------------------------------------------------------
# what a patch report says about a model


def judge(row: Row, model: Any, report: Any, library: str) -> None:
    """Fill ``row``'s status from ``report``, and the positional modules it does not name."""
    rows = list(report)
    row.modules = [
        f"{r.path} ({r.original}): {'replaced' if r.replaced else 'left alone'}" for r in rows
    ]
    named = {r.path for r in rows}
    row.missed = [p for p in _positional(model, library) if not _covers(named, p)]
    rows = [r for r in rows if not r.note.startswith(NOT_POSITIONAL)]
    learned = [r for r in rows if not r.replaced and r.note.startswith("learned")]
    alone = [r for r in rows if not r.replaced and r not in learned]
    replaced = [r for r in rows if r.replaced]
    broken = next((r for r in alone if DOES_NOT_RUN in r.note), None)
    if row.missed:
        row.status, row.reason = "missed", "; ".join(row.missed[:3])
    elif broken is not None:
        row.status, row.reason = "does not run", f"{broken.path}: {broken.note}"
    elif not rows:
        row.status = "no positional module"
    elif replaced and not alone:
        row.status = "covered"
    elif replaced:
        row.status, row.reason = "partly", f"{alone[0].path}: {alone[0].note}"
    elif alone:
        row.status, row.reason = "left alone", f"{alone[0].path}: {alone[0].note}"
    else:
        row.status, row.reason = "learned only", f"{learned[0].path}: learned"


def _covers(named: set[str], path: str) -> bool:
    """A report row names ``path``, a module above it, or a tensor of it."""
    return any(
        path == n or path.startswith(n + ".") or n.startswith(path + ".") or not n for n in named
    )


def _positional(model: Any, library: str) -> Iterator[str]:
    """The paths of the modules of ``library`` whose class says they hold positions, and of the
    floating tensors whose attribute name does (an ``inv_freq`` only outside a rotary module)."""
    for path, module in model.named_modules():
        own = type(module).__module__.startswith(library + ".")
        if own and POSITIONAL_CLASS.search(type(module).__name__):
            yield path
            continue
        if not own:
            continue
        for name, t in [*module._parameters.items(), *module._buffers.items()]:
            if t is not None and t.is_floating_point() and POSITIONAL_TENSOR.match(name):
                yield f"{path}.{name}" if path else name


# ---------------------------------------------------------------------------------------------
# transformers


def transformers_types() -> Iterator[tuple[str, list[str], bool]]:
    """``(model type, kinds, multimodal)`` of the model types with a base model whose modeling
    files define a rotary or sinusoidal module (``multimodal``: they cut mrope sections from
    the head, whose widths a small build then keeps)."""
    import transformers
    from transformers.models.auto.configuration_auto import (
        CONFIG_MAPPING_NAMES,
        model_type_to_module_name,
    )
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    models = Path(transformers.__file__).parent / "models"
    for model_type in sorted(MODEL_MAPPING_NAMES):
        if model_type not in CONFIG_MAPPING_NAMES:
            continue
        folder = models / model_type_to_module_name(model_type)
        text = "".join(p.read_text() for p in sorted(folder.glob("modeling_*.py")))
        kinds = [
            k
            for k, rx in (("rotary", ROTARY_SOURCE), ("sinusoidal", SINUSOID_SOURCE))
            if rx.search(text)
        ]
        if kinds:
            yield model_type, kinds, "mrope_section" in text


def _overrides(config: Any, small: bool, keep_head: bool = False) -> dict[str, Any]:
    """The keys to change in ``config`` (and, as dicts, in its sub-configs): one layer, and
    with ``small`` small widths (with ``keep_head``, those of the head kept)."""
    out: dict[str, Any] = {}
    small_keys = {k: v for k, v in SMALL.items() if not (keep_head and k in HEAD)}
    for key, value in config.to_dict().items():
        sub = getattr(config, key, None)
        if hasattr(sub, "to_dict") and hasattr(sub, "model_type"):
            out[key] = {**sub.to_dict(), **_overrides(sub, small, keep_head)}
        elif key in LAYERS and isinstance(value, int) and value > 1:
            out[key] = 1
        elif small and key in small_keys and isinstance(value, int) and value > small_keys[key]:
            out[key] = small_keys[key]
        elif small and key in TOKENS and isinstance(value, int) and value >= SMALL["vocab_size"]:
            out[key] = 1
    out.update(_one_of_each(config.to_dict()))
    return out


def _one_of_each(config: dict[str, Any]) -> dict[str, Any]:
    """One layer of each of ``config``'s layer types: its ``layer_types`` (and the per-layer
    lists alongside, ``mlp_layer_types``, …) cut to the first layer of each type, and its
    layer count to as many."""
    types = config.get("layer_types")
    if not (isinstance(types, list) and types):
        return {}
    keep = [types.index(t) for t in dict.fromkeys(types)]
    out: dict[str, Any] = {
        key: [value[i] for i in keep]
        for key, value in config.items()
        if key.endswith("layer_types") and isinstance(value, list) and len(value) == len(types)
    }
    out.update({k: len(keep) for k in LAYERS if config.get(k) == len(types)})
    return out


def build_transformers(model_type: str, small: bool, keep_head: bool = False) -> Any:
    import transformers

    base = transformers.AutoConfig.for_model(model_type)
    config = transformers.AutoConfig.for_model(model_type, **_overrides(base, small, keep_head))
    with contextlib.ExitStack() as stack:
        if not small:
            stack.enter_context(torch.device("meta"))
        torch.manual_seed(0)
        return transformers.AutoModel.from_config(config).eval()


def _forward(model: Any) -> Any:
    ids = torch.randint(3, 200, (1, 24), generator=torch.Generator().manual_seed(0))
    kwargs: dict[str, Any] = {"input_ids": ids}
    params = inspect.signature(model.forward).parameters
    if "decoder_input_ids" in params:
        kwargs["decoder_input_ids"] = ids[:, :8]
    with torch.no_grad():
        out = model(**kwargs)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def _build_small_or_meta(row: Row, keep_head: bool) -> Any:
    """The model of ``row``'s type with small widths on the CPU, else with its own on the meta
    device (``row.built`` says which); None, with ``row``'s status and reason, if neither."""
    why = ""
    for small in (True, False):
        try:
            with _quiet():
                model = build_transformers(row.name, small, keep_head)
        except Exception as err:  # a census line says why
            why = why or _first_line(err)
            continue
        row.built = "cpu" if small else "meta"
        return model
    row.status, row.reason = "could not build", why
    return None


def census_transformers(only: list[str]) -> Iterator[Row]:
    for model_type, kinds, multimodal in transformers_types():
        if only and model_type not in only:
            continue
        row = Row("transformers", model_type, kinds)
        try:
            for keep_head in dict.fromkeys((multimodal, True)):
                model = _build_small_or_meta(row, keep_head)
                if model is None:
                    break
                with _quiet():
                    report = patch(model, dry_run=True)
                if not any(ODD_WIDTH in r.note for r in report):
                    break  # else the small widths made an odd rotary width: keep the head's
        except Exception as err:  # patch must not raise: a defect the census shows
            row.status, row.reason = "patch failed", _first_line(err)
            yield row
            continue
        if model is None:
            yield row
            continue
        judge(row, model, report, "transformers")
        counted = row.built == "cpu" and row.status in ("covered", "partly")
        row.compat = _compat(model) if counted else "not run"
        yield row


def _compat(model: Any) -> str:
    """``patch(compat="original")`` on a copy: its outputs ``torch.equal`` to the model's?"""
    try:
        with _quiet():
            before = _forward(model)
    except Exception as err:
        return f"not run: no forward from input_ids ({_first_line(err)[:80]})"
    twin = copy.deepcopy(model)
    try:
        with _quiet():
            patch(twin, compat="original")
            after = _forward(twin)
    except Exception as err:  # the patched model's forward fails: a defect the census shows
        return f"failed: {_first_line(err)[:120]}"
    return "equal" if torch.equal(before, after) else "differs"


# ---------------------------------------------------------------------------------------------
# diffusers


def diffusers_classes() -> Iterator[str]:
    import diffusers

    for name in sorted(dir(diffusers)):
        if name.startswith("_"):
            continue
        try:
            obj = getattr(diffusers, name)
        except Exception:
            continue
        if (
            isinstance(obj, type)
            and issubclass(obj, diffusers.ModelMixin)
            and obj is not diffusers.ModelMixin
        ):
            yield name


def build_diffusers(name: str, meta: bool) -> Any:
    import diffusers

    cls = getattr(diffusers, name)
    params = inspect.signature(cls.__init__).parameters
    kwargs = {
        k: 1
        for k in LAYERS
        if k in params and isinstance(params[k].default, int) and params[k].default > 1
    }
    with contextlib.ExitStack() as stack:
        if meta:
            stack.enter_context(torch.device("meta"))
        return cls(**kwargs).eval()


def census_diffusers(only: list[str]) -> Iterator[Row]:
    for name in diffusers_classes():
        if only and name not in only:
            continue
        row = Row("diffusers", name)
        try:
            with _quiet():
                model = build_diffusers(name, meta=True)
                report = patch(model, dry_run=True)
            alone = any(not r.replaced and not r.note.startswith("learned") for r in report)
            size = sum(p.numel() * p.element_size() for p in model.parameters())
            if alone and size <= CPU_BYTES:
                # values may decide (a table, an inv_freq): built again on the CPU
                with _quiet():
                    model = build_diffusers(name, meta=False)
                    report = patch(model, dry_run=True)
                row.built = "cpu"
            else:
                row.built = "meta"
        except Exception as err:
            row.status, row.reason = "could not build", _first_line(err)
            yield row
            continue
        judge(row, model, report, "diffusers")
        row.kinds = sorted({_kind(m) for m in row.modules})
        row.compat = "not run"
        yield row


def _kind(module: str) -> str:
    return (
        "timestep"
        if "Timestep" in module
        else "rotary"
        if re.search(r"Rotary|RoPE|Rope|EmbedND|PosEmbed\)", module)
        else "table"
    )


# ---------------------------------------------------------------------------------------------
# the table


STATUSES = ("covered", "partly", "left alone", "learned only", "missed", "patch failed")


def summary(rows: list[Row], library: str, kind: str | None = None) -> str:
    mine = [r for r in rows if r.library == library and (kind is None or kind in r.kinds)]
    counted = [r for r in mine if r.counted]
    counts = {s: sum(r.status == s for r in counted) for s in STATUSES}
    unbuilt = sum(r.status in NOT_BUILT for r in mine)
    share = 100.0 * counts["covered"] / max(1, len(counted))
    what = f"{library}{'' if kind is None else f' ({kind})'}"
    rest = ", ".join(f"{n} {s}" for s, n in counts.items() if n and s != "covered")
    return (
        f"{what}: {counts['covered']} of {len(counted)} built with a positional module "
        f"covered ({share:.0f} %){'; ' + rest if rest else ''}; {unbuilt} could not be "
        "built or run"
    )


def markdown(rows: list[Row], seconds: float) -> str:
    import diffusers
    import transformers

    lines = [
        "# Coverage: every positional module of transformers and diffusers",
        "",
        "What `posenc.torch.patch` does with each model type of transformers "
        f"{transformers.__version__} that has a rotary or sinusoidal position module, and each "
        f"model class of diffusers {diffusers.__version__}, built from its default config (no "
        "download). Made by `python -m benchmarks.census --write docs/coverage.md` "
        f"({seconds / 60:.0f} minutes here); the method is in that script's docstring.",
        "",
        "A model type counts once it builds and holds a positional module; its status is that "
        "of all its positional modules together (learned tables aside: they are never "
        "replaced). An attention module that applies a rotary embedding is not counted as one "
        "(its tables come from a module of their own, or, as in V-JEPA 2, are computed inside "
        "the attention, where no module can stand in). *compat forward*: `equal` is "
        '`patch(model, compat="original")` leaving the tiny model\'s outputs `torch.equal`.',
        "",
    ]
    for library, kinds in (("transformers", ("rotary", "sinusoidal")), ("diffusers", (None,))):
        lines += [f"- {summary(rows, library)}"]
        lines += [f"- {summary(rows, library, k)}" for k in kinds if k]
    for library in ("transformers", "diffusers"):
        mine = [r for r in rows if r.library == library]
        if not mine:
            continue
        lines += [
            "",
            f"## {library}",
            "",
            "| model | kinds | built | status | modules | reason | compat forward |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in mine:
            cells = [
                r.name,
                ", ".join(r.kinds),
                r.built if r.counted else "",
                r.status,
                "<br>".join(r.modules),
                r.reason,
                r.compat,
            ]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= 300 else text[:297] + "..."


def _first_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip()
    return text.splitlines()[0][:200]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import logging

    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", choices=("transformers", "diffusers"))
    parser.add_argument("--only", nargs="*", default=[], help="model types or class names")
    parser.add_argument("--write", type=Path, help="the markdown table (docs/coverage.md)")
    parser.add_argument("--json", type=Path, help="the rows as JSON")
    parser.add_argument("--rows", type=Path, help="render the rows of an earlier --json")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows: list[Row] = []
    if args.rows:
        saved = json.loads(args.rows.read_text())
        rows = [Row(**r) for r in saved["rows"]]
        if args.write:
            args.write.write_text(markdown(rows, saved["seconds"]))
        return 0
    if args.library in (None, "transformers"):
        for row in census_transformers(args.only):
            rows.append(row)
            print(
                f"{row.library:12} {row.name:40} {row.status:22} {row.compat[:40]:40} "
                f"{row.reason[:100]}",
                flush=True,
            )
    if args.library in (None, "diffusers"):
        for row in census_diffusers(args.only):
            rows.append(row)
            print(f"{row.library:12} {row.name:40} {row.status:22} {row.reason[:120]}", flush=True)
    seconds = time.perf_counter() - start
    for library in ("transformers", "diffusers"):
        if any(r.library == library for r in rows):
            print(summary(rows, library))
    if args.write:
        args.write.write_text(markdown(rows, seconds))
    if args.json:
        saved = {"seconds": seconds, "rows": [asdict(r) for r in rows]}
        args.json.write_text(json.dumps(saved, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
