"""``posenc.torch.patch``: make a loaded model's positional modules exact, in place, and say
what changed (:class:`PatchReport`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from torch import nn

from posenc.errors import PosencError, check_bool, check_choice
from posenc.spec.families import FAMILIES
from posenc.spec.families.base import Audit
from posenc.torch import (
    _patch_diffusers,
    _patch_hf_axial,
    _patch_hf_vision,
    _patch_timm,
    _patch_timm_rope,
    _patch_transformers,
)
from posenc.torch._patching import (
    COMPAT,
    EXACT,
    ByClass,
    Found,
    Recogniser,
    Replacement,
    compare,
    has_meta,
    index,
    is_posenc,
    library_of,
)
from posenc.torch._placing import placed, put, take_back, unwritable
from posenc.torch._scaled import Scaled, check_scaling

RECOGNISERS: tuple[Recogniser, ...] = (
    *_patch_timm.RECOGNISERS,
    *_patch_timm_rope.RECOGNISERS,
    *_patch_diffusers.RECOGNISERS,  # before transformers' `others`: any `pos_embed` path
    *_patch_hf_vision.RECOGNISERS,
    *_patch_hf_axial.RECOGNISERS,  # the standard axial machinery, before `rotary`'s
    *_patch_transformers.RECOGNISERS,
)
"""Every recogniser. A module whose ``(library, class name)`` one of them claims
(:class:`~posenc.torch._patching.ByClass`) is asked of that one first, by :data:`INDEX`, where
no order decides; then the recognisers by form (what a module holds or where it sits: timm's
``pos_embed``, transformers' standard rotary machinery, the catch-alls that report everything
else), in this order."""
INDEX = index(RECOGNISERS)
BY_FORM = tuple(r for r in RECOGNISERS if not isinstance(r, ByClass))
COLUMNS = ("path", "original", "replacement", "mode", "max diff")
ORIGINAL = "original"  # unpatch's mode: the original is back
ON_META = (
    "its tables are on the meta device, and posenc reads their values to know it: load the "
    "model first"
)
NOT_MEASURED = (
    "not measured: the model is on the meta device (no values); a checkpoint loaded into it "
    "is checked as it loads"
)


class PatchReport(list[Replacement]):
    """What :func:`patch` replaced and left alone: a list of
    :class:`~posenc.torch._patching.Replacement` rows (``path``, ``original``,
    ``replacement``, ``mode``, ``max_diff``, ``note``); ``print(report)`` shows them as a
    table.

    Attributes:
        compat: the mode asked for (None: exact; ``"original"``).
        dry_run: nothing was changed.
        action: ``"patch"``, or ``"unpatch"`` for :func:`unpatch`'s report (its rows' mode
            ``"original"``: the original is back).

    Examples:
        >>> config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
        ...     num_hidden_layers=1, num_attention_heads=4, vocab_size=128,
        ...     max_position_embeddings=1024)
        >>> report = patch(transformers.LlamaForCausalLM(config), dry_run=True)
        >>> [r.path for r in report.replaced], report.left_alone
        (['model.rotary_emb'], [])
    """

    def __init__(
        self,
        rows: Iterable[Replacement] = (),
        *,
        compat: str | None = None,
        dry_run: bool = False,
        action: str = "patch",
    ) -> None:
        super().__init__(rows)
        self.compat = compat
        self.dry_run = dry_run
        self.action = action

    @property
    def replaced(self) -> list[Replacement]:
        """The rows of modules replaced (or, with ``dry_run``, that would be; for
        :func:`unpatch`, put back)."""
        return [r for r in self if r.replaced]

    @property
    def left_alone(self) -> list[Replacement]:
        """The rows of positional modules left in place, each with its reason (``note``)."""
        return [r for r in self if not r.replaced]

    def __str__(self) -> str:
        if not self:
            found = "positional module found" if self.action == "patch" else "module patched"
            return f"posenc.torch.{self.action}: no {found}"
        rows = [COLUMNS, *(_cells(r, self.action) for r in self)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        lines = [
            " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ]
        lines.insert(1, "-+-".join("-" * w for w in widths))
        head = "dry run: nothing changed" if self.dry_run else ""
        notes = [f"{r.path}: {r.note}" for r in self if r.note]
        return "\n".join(([head] if head else []) + lines + (["", *notes] if notes else []))


def _cells(r: Replacement, action: str) -> tuple[str, ...]:
    diff = "" if r.max_diff is None else f"{r.max_diff:.2g}"
    alone = "left alone" if action == "patch" else "kept"
    return (r.path or "(root)", r.original, r.replacement or "-", r.mode or alone, diff)


def patch(
    model: nn.Module,
    *,
    compat: str | None = None,
    scaling: dict[str, Any] | tuple[dict[str, Any] | None, ...] | None = None,
    dry_run: bool = False,
) -> PatchReport:
    """Replace the positional modules of a loaded model in place by exact posenc modules.

    Every module posenc reproduces is replaced at its own attribute path, so the model's
    forward is unchanged; what replaces it, and its options, come from the original's own
    configuration and state. Recognised: in transformers, the rotary modules
    ``RotaryEmbedding.from_hf`` reproduces, the vision towers' rotary modules (Qwen2-VL's
    form, Pixtral, SAM 2 and 3, DINOv3, Llama 4, Gemma 4), Whisper's encoder table, Marian's
    and fairseq's (M2M100, Speech2Text) sinusoidal embeddings, ViT-MAE's fixed 2D table, DETR's
    sine encoding; in diffusers, ``Timesteps``, ``PatchEmbed``'s fixed 2D sin-cos table (SD3's
    cropped one included) and the rotary modules of its image and video transformers (FLUX
    and its kind, Wan, HunyuanVideo, Cosmos, Qwen-Image, LTX-Video and LTX-2, CogView4,
    Kandinsky, Lumina, Z-Image, … : docs/rope-vision.md lists them); in timm, a frozen sin-cos
    ``pos_embed`` and the rotary modules. A learned (trainable) table is never replaced: it
    is reported as left alone.
    posenc modules are skipped, so patching twice changes nothing more.

    Args:
        model: any ``nn.Module`` (a transformers or diffusers model, or a module holding one).
        compat: ``"original"``: the originals' own arithmetic, bit for bit (outputs
            unchanged: in float32, under autocast and after ``.to(torch.bfloat16)``); a
            module whose original numbers posenc cannot repeat is left alone, saying why.
            Default: exact.
        scaling: a rule past the trained size for the rotary modules of the diffusers image
            and video transformers posenc covers (Wan, HunyuanVideo, Cosmos, Qwen-Image,
            FLUX), as :func:`posenc.rope_grid` takes it: one rule, or one per grid axis
            (``(frames, rows, columns)``; FLUX's ids ``(t, row, col)``) with None for an axis
            left as it is: ``({"rope_type": "riflex"}, None, None)``, ``(None, {"rope_type":
            "dype"}, {"rope_type": "dype"})``. Each call makes the tables of its grid under
            the rule; a rule of one axis takes what it lacks from that grid and the family's
            trained size (RIFLEx's length and pair; DyPE's and vision YaRN's trained extent
            and scale), one rule for the whole table is used as given. A rule that follows
            the diffusion time (``"dype"``, ``"dype-comfyui"``, ``"lumina-time"``) reads it
            from the ``timestep`` the model's forward receives (over its value at pure noise:
            1000 for Wan, HunyuanVideo; 1 for FLUX and Qwen-Image, whose pipelines pass it
            over 1000; zeros, clean condition tokens, aside), so a patched
            ``pipe.transformer`` follows every step. The tables are made between compiled
            graphs (a ``torch.compile`` graph break, not a recompile per step). With
            ``compat="original"``, the rule as its reference code applies it where one does
            (RIFLEx on Wan and HunyuanVideo, Cosmos' ``rope_scale``, DyPE and vision YaRN on
            FLUX as the official DyPE code); otherwise refused. A rule no rotary module of
            the model takes is an error, raised before anything changes. Patching again with
            another rule (or none) switches to it.
        dry_run: change nothing; the report says what would be replaced.

    Returns:
        :class:`PatchReport`: a row per positional module found, with the largest
        difference between the original's numbers and the exact ones over the model's
        range.

    Examples:
        >>> config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
        ...     num_hidden_layers=1, num_attention_heads=4, vocab_size=128,
        ...     max_position_embeddings=4096)
        >>> model = transformers.LlamaForCausalLM(config).eval()
        >>> ids = torch.arange(100)[None]
        >>> before = model(ids).logits
        >>> report = patch(model, compat="original")
        >>> torch.equal(model(ids).logits, before)
        True
        >>> type(model.model.rotary_emb).__name__, len(patch(model, compat="original"))  # no-op
        ('HFRotaryEmbedding', 0)
    """
    _check_model(model)
    compat = None if compat is None else check_choice("compat", compat, ("original",))
    scaling = None if scaling is None else check_scaling(scaling)
    dry_run = check_bool("dry_run", dry_run)
    mode = EXACT if compat is None else COMPAT
    report = PatchReport(compat=compat, dry_run=dry_run)
    done: list[str] = []  # paths whose insides are not walked
    found_at: list[tuple[str, nn.Module, Found | None]] = []  # None: a stand-in to switch
    kept = False  # a stand-in in place already applies `scaling`
    for path, module in list(model.named_modules()):
        if any(path == d or path.startswith(d + ".") for d in done):
            continue
        if is_posenc(module):
            done.append(path)
            record = placed(module)
            same = record is not None and record.mode == mode
            rule = isinstance(module, Scaled) and module.scaling != scaling
            if record is not None and (not same or rule):
                found_at.append((path, module, None))
            kept = kept or (same and isinstance(module, Scaled) and module.scaling == scaling)
            continue
        found = _recognise(path, module, model)
        if found is None:
            continue
        if found.attribute is None:
            done.append(path)
            if not path:
                found = Found(found.original, note="the model itself: patch a module holding it")
        found_at.append((path, module, found))
        found_at.extend((path, module, other) for other in found.others)
    if scaling is not None:
        _check_scaling(model, found_at, compat, scaling, kept)
    for path, module, found in found_at:
        if found is None:
            report.append(_switch(model, path, module, compat, scaling, dry_run))
        else:
            report.append(_apply(model, path, module, found, compat, scaling, dry_run))
    return report


def _check_scaling(
    root: nn.Module,
    found_at: list[tuple[str, nn.Module, Found | None]],
    compat: str | None,
    scaling: Any,
    taken: bool,
) -> None:
    """Refuse ``scaling`` before anything changes: where a rotary module that takes a rule
    cannot apply it (naming the module), or where no module of the model takes one (``taken``:
    a stand-in in place applies it already)."""
    unserved: list[str] = []
    for path, module, found in found_at:
        if found is None:  # a stand-in placed before: its original is asked again
            record = placed(module)
            assert record is not None
            if record.attribute is None:
                found = _recognise(path, record.original, root)
            else:
                path = path.rpartition(".")[0]
                found = _recognise(path, root.get_submodule(path), root)
        if found is None or found.build is None:
            continue
        new = found.build(compat)
        if isinstance(new, str) and isinstance(found.build(None), Scaled):
            unserved.append(f"{path} ({found.original}) in compat={compat!r}: {new}")
        if not isinstance(new, Scaled):
            continue
        try:
            new.scale(scaling)
            handles = new.clocked(root, path)
        except PosencError as err:
            raise PosencError(f"`scaling` on {path} ({found.original}): {err}") from None
        for handle in handles:
            handle.remove()
        taken = True
    if not taken and unserved:
        raise PosencError(f"`scaling`: no rotary module takes it here: {'; '.join(unserved)}")
    if not taken:
        fed = [
            f"{name}'s tables are made by its pipeline and passed to its forward: pass "
            f"posenc.rope_grid(shape, dim, preset={preset!r}, scaling=...) there; "
            for name, preset in _fed(root)
        ][:1]
        raise PosencError(
            f"`scaling`: no rotary module of this model takes a rule past the trained size (the "
            "grid and id modules of diffusers' Wan, HunyuanVideo, Cosmos, Qwen-Image and FLUX "
            f"do); {''.join(fed)}got scaling={scaling!r}"
        )


def _fed(root: nn.Module) -> list[tuple[str, str]]:
    """The modules of ``root`` whose rotary tables their pipeline makes (their family
    record's audit says ``fix="pipeline"``: CogVideoX, HunyuanDiT, Allegro), with the preset
    of those tables."""
    pipelines = {
        (model, audit.preset.name)
        for record in FAMILIES.values()
        for audit in record.audits
        if isinstance(audit, Audit) and audit.fix == "pipeline"
        for model in audit.models
    }
    names = {type(m).__name__ for m in root.modules()}
    return sorted((name, preset) for name, preset in pipelines if name in names)


def unpatch(model: nn.Module) -> PatchReport:
    """Put back the original modules :func:`patch` replaced, in place: the model's outputs,
    ``state_dict`` keys and values are then those of a model never patched (moved with it:
    ``.to()``, ``.half()`` since the patch reach the originals too).

    Args:
        model: a model (or a module holding one) that :func:`patch` changed.

    Returns:
        :class:`PatchReport` with ``action="unpatch"``: a row per original put back (``mode``
        ``"original"``; ``replacement`` says what stood there), and a row left alone with its
        reason for one that could not be (a model patched on the meta device whose original
        has a buffer no checkpoint holds, such as a rotary module's ``inv_freq``: reload it).

    Examples:
        >>> config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
        ...     num_hidden_layers=1, num_attention_heads=4, vocab_size=128)
        >>> model = transformers.LlamaForCausalLM(config)
        >>> _ = patch(model)
        >>> [r.path for r in unpatch(model).replaced]
        ['model.rotary_emb']
        >>> type(model.model.rotary_emb).__name__, len(unpatch(model))
        ('LlamaRotaryEmbedding', 0)
    """
    _check_model(model)
    report = PatchReport(action="unpatch")
    for path, module in list(model.named_modules()):
        record = placed(module)
        if record is None:
            continue
        name = type(record.original).__name__
        why = take_back(model, module)
        mode = None if why else ORIGINAL
        report.append(
            Replacement(path, name, record.description, mode, None, why or f"was {record.mode}")
        )
    return report


def _check_model(model: Any) -> None:
    if not isinstance(model, nn.Module):
        raise PosencError(f"`model` must be a torch.nn.Module, got {type(model).__name__}")


def _recognise(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    claimed = INDEX.get((library_of(module), type(module).__name__))
    asked: tuple[Recogniser, ...] = BY_FORM if claimed is None else (claimed, *BY_FORM)
    for recognise in asked:
        try:
            found = recognise(path, module, root)
        except NotImplementedError:  # torch's answer to reading a meta tensor's values
            if not has_meta(root):
                raise
            return Found(type(module).__name__, note=ON_META)
        if found is not None:
            return found
    return None


def _measure(root: nn.Module, found: Found, new: nn.Module) -> tuple[float, bool] | None:
    """``compare`` of the original's numbers and ``new``'s; None where they have no values (a
    model on the meta device whose module keeps its tables outside its buffers)."""
    assert found.numbers is not None
    assert found.probe is not None
    try:
        return compare(found.numbers(), found.probe(new))
    except NotImplementedError:  # torch's answer to reading a meta tensor's values
        if not has_meta(root):
            raise
        return None


def _switch(
    root: nn.Module, path: str, new: nn.Module, compat: str | None, scaling: Any, dry: bool
) -> Replacement:
    """A stand-in of the other mode: its original back, then patched in this mode (a dry
    run puts the stand-in back after)."""
    record = placed(new)
    assert record is not None
    why = take_back(root, new)
    if why is not None:
        return Replacement(path, type(new).__name__, "", None, None, f"not switched: {why}")
    owner_path = path if record.attribute is None else path.rpartition(".")[0]
    owner = root.get_submodule(owner_path)
    found = _recognise(owner_path, owner, root)
    if found is None:  # cannot happen: it was recognised when patched
        found = Found(type(owner).__name__, note="no longer recognised: the original is back")
    row = _apply(root, owner_path, owner, found, compat, scaling, dry)
    if dry:
        put(root, owner, record.attribute, new, mode=record.mode, description=record.description)
        _clock(root, path, new)  # its hooks, which taking it back removed
    if not row.replaced:
        back = "would be" if dry else "is"
        return replace(row, note=f"{row.note}; the original {back} back (was {record.mode})")
    return replace(row, note=f"switched from {record.mode}; {row.note}".rstrip("; "))


def _apply(
    root: nn.Module,
    path: str,
    module: nn.Module,
    found: Found,
    compat: str | None,
    scaling: Any,
    dry: bool,
) -> Replacement:
    """Measure, build and (unless ``dry``) put the replacement in place (with ``scaling``,
    where it takes a rule); the report's row."""
    where = ".".join(p for p in (path, found.attribute) if p)
    if found.build is None or found.numbers is None or found.probe is None:
        return Replacement(where, found.original, "", None, None, found.note)
    exact = found.build(None)
    if isinstance(exact, str):
        return Replacement(where, found.original, "", None, None, exact)
    measure = None if has_meta(module) else _measure(root, found, exact)
    diff, note = (None, NOT_MEASURED) if measure is None else (measure[0], found.note)
    if diff is not None and not math.isfinite(diff):
        return Replacement(where, found.original, "", None, diff, "non-finite numbers")
    new: nn.Module | str = exact
    if compat is not None:
        new = found.build(compat)
        if isinstance(new, str):
            return Replacement(where, found.original, "", None, diff, f"{new}: left alone")
        if measure is not None:
            again = _measure(root, found, new)
            if again is None or not again[1]:
                why = f"compat={compat!r} does not repeat its numbers bit for bit here: left alone"
                return Replacement(where, found.original, "", None, diff, why)
            new = found.build(compat)  # fresh: the probe ran the one checked
    assert not isinstance(new, str)
    problem = unwritable(new, module, found.attribute)
    if problem is not None:
        return Replacement(where, found.original, "", None, diff, f"{problem}: left alone")
    mode = EXACT if compat is None else COMPAT
    description = found.description
    if scaling is not None and isinstance(new, Scaled):
        new.scale(scaling)  # checked by _check_scaling
        description += new.scaling_words()
    row = Replacement(where, found.original, description, mode, diff, note)
    if not dry:
        put(root, module, found.attribute, new, mode=mode, description=description)
        _clock(root, where, new)
    return row


def _clock(root: nn.Module, where: str, new: nn.Module) -> None:
    """A stand-in whose rule follows the diffusion time: its hooks on the model, kept with
    the stand-in's record (removed when it is taken back)."""
    if isinstance(new, Scaled):
        record = placed(new)
        assert record is not None
        record.handles.extend(new.clocked(root, where))
