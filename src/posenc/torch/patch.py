"""``posenc.torch.patch``: make a loaded model's positional modules exact, in place, and say
what changed (:class:`PatchReport`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from torch import nn

from posenc.errors import PosencError, check_bool, check_choice
from posenc.torch import (
    _patch_diffusers,
    _patch_hf_vision,
    _patch_timm,
    _patch_timm_rope,
    _patch_transformers,
)
from posenc.torch._patching import (
    COMPAT,
    EXACT,
    Found,
    Recogniser,
    Replacement,
    compare,
    is_posenc,
    route_key,
)

RECOGNISERS: tuple[Recogniser, ...] = (  # the first answer wins
    *_patch_timm.RECOGNISERS,
    *_patch_timm_rope.RECOGNISERS,
    *_patch_diffusers.RECOGNISERS,  # before transformers' `learned`: any `pos_embed` path
    *_patch_hf_vision.RECOGNISERS,  # before transformers' `rotary`: any module with a config
    *_patch_transformers.RECOGNISERS,
)
COLUMNS = ("path", "original", "replacement", "mode", "max diff")


class PatchReport(list[Replacement]):
    """What :func:`patch` replaced and left alone: a list of
    :class:`~posenc.torch._patching.Replacement` rows (``path``, ``original``,
    ``replacement``, ``mode``, ``max_diff``, ``note``); ``print(report)`` shows them as a
    table.

    Attributes:
        compat: the mode asked for (None: exact; ``"original"``).
        dry_run: nothing was changed.

    Examples:
        >>> config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
        ...     num_hidden_layers=1, num_attention_heads=4, vocab_size=128,
        ...     max_position_embeddings=1024)
        >>> report = patch(transformers.LlamaForCausalLM(config), dry_run=True)
        >>> [r.path for r in report.replaced], report.left_alone
        (['model.rotary_emb'], [])
    """

    def __init__(
        self, rows: Iterable[Replacement] = (), *, compat: str | None = None, dry_run: bool = False
    ) -> None:
        super().__init__(rows)
        self.compat = compat
        self.dry_run = dry_run

    @property
    def replaced(self) -> list[Replacement]:
        """The rows of modules replaced (or, with ``dry_run``, that would be)."""
        return [r for r in self if r.replaced]

    @property
    def left_alone(self) -> list[Replacement]:
        """The rows of positional modules left in place, each with its reason (``note``)."""
        return [r for r in self if not r.replaced]

    def __str__(self) -> str:
        if not self:
            return "posenc.torch.patch: no positional module found"
        rows = [COLUMNS, *(_cells(r) for r in self)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                 for row in rows]  # fmt: skip
        lines.insert(1, "-+-".join("-" * w for w in widths))
        head = "dry run: nothing changed" if self.dry_run else ""
        notes = [f"{r.path}: {r.note}" for r in self if r.note]
        return "\n".join(([head] if head else []) + lines + (["", *notes] if notes else []))


def _cells(r: Replacement) -> tuple[str, ...]:
    diff = "" if r.max_diff is None else f"{r.max_diff:.2g}"
    return (r.path or "(root)", r.original, r.replacement or "-", r.mode or "left alone", diff)


def patch(model: nn.Module, *, compat: str | None = None, dry_run: bool = False) -> PatchReport:
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
        >>> type(model.model.rotary_emb).__name__, len(patch(model))   # patched: no-op
        ('HFRotaryEmbedding', 0)
    """
    if not isinstance(model, nn.Module):
        raise PosencError(f"`model` must be a torch.nn.Module, got {type(model).__name__}")
    compat = None if compat is None else check_choice("compat", compat, ("original",))
    dry_run = check_bool("dry_run", dry_run)
    report = PatchReport(compat=compat, dry_run=dry_run)
    done: list[str] = []  # paths whose insides are not walked
    for path, module in list(model.named_modules()):
        if any(path == d or path.startswith(d + ".") for d in done):
            continue
        if is_posenc(module):
            done.append(path)
            continue
        found = _recognise(path, module, model)
        if found is None:
            continue
        if found.attribute is None:
            done.append(path)
            if not path:
                found = Found(found.original, note="the model itself: patch a module holding it")
        row = _apply(model, path, module, found, compat, dry_run)
        report.append(row)
    return report


def _recognise(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    for recognise in RECOGNISERS:
        found = recognise(path, module, root)
        if found is not None:
            return found
    return None


def _apply(
    root: nn.Module, path: str, module: nn.Module, found: Found, compat: str | None, dry: bool
) -> Replacement:
    """Measure, build and (unless ``dry``) put the replacement in place; the report's row."""
    where = ".".join(p for p in (path, found.attribute) if p)
    if found.build is None or found.numbers is None or found.probe is None:
        return Replacement(where, found.original, "", None, None, found.note)
    exact = found.build(None)
    if isinstance(exact, str):
        return Replacement(where, found.original, "", None, None, exact)
    diff, _ = compare(found.numbers(), found.probe(exact))
    if not math.isfinite(diff):
        return Replacement(where, found.original, "", None, diff, "non-finite numbers")
    new: nn.Module | str = exact
    if compat is not None:
        new = found.build(compat)
        if isinstance(new, str):
            return Replacement(where, found.original, "", None, diff, f"{new}: left alone")
        _, same = compare(found.numbers(), found.probe(new))
        if not same:
            why = f"compat={compat!r} does not repeat its numbers bit for bit here: left alone"
            return Replacement(where, found.original, "", None, diff, why)
        new = found.build(compat)  # fresh: the probe ran the one checked
        assert not isinstance(new, str)
    mode = EXACT if compat is None else COMPAT
    row = Replacement(where, found.original, found.description, mode, diff, found.note)
    if not dry:
        _put(root, path, module, found.attribute, new)
    return row


def _put(
    root: nn.Module, path: str, module: nn.Module, attribute: str | None, new: nn.Module | Any
) -> None:
    if attribute is not None:  # a table kept in a parameter of `module`, or a plain attribute
        saved = attribute in module._parameters or attribute in module._buffers
        delattr(module, attribute)
        setattr(module, attribute, new)
        if saved:  # its checkpoint key now checks the replacement's table
            route_key(module, attribute, new)
        return
    new.train(module.training)
    for parent in list(root.modules()):  # every reference: a module may be shared
        for name, child in list(parent._modules.items()):
            if child is module:
                setattr(parent, name, new)
