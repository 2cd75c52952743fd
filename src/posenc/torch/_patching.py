"""The machinery of :func:`posenc.torch.patch`: what a recogniser returns (:class:`Found`), what
the report holds (:class:`Replacement`), how a difference is measured, and a tensor-like module
for tables a model keeps in a parameter (ViT-MAE, timm).

A recogniser is a function ``(path, module, root) -> Found | None`` of one model library
(``_patch_transformers.py``, ``_patch_diffusers.py``, ``_patch_timm.py``): it looks at one
module of the model, by class name and module path (the library itself is never imported),
and says what posenc module stands in for it, built from the original's own configuration
and state, or why it is left alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posenc.api.identify import MATCH, identify
from posenc.errors import PosencError
from posenc.spec.families.base import Classes
from posenc.torch._base import _Tracked

EXACT, COMPAT = "exact", "compat"
LEARNED = "learned, left alone"
IDENTIFIED = 1 << 21
"""The most values of a table :func:`holds` tries to identify (a larger one is not named)."""


@dataclass(frozen=True)
class Replacement:
    """One row of a :class:`~posenc.torch.PatchReport`.

    Attributes:
        path: where the module (or parameter) sits in the model (``model.rotary_emb``).
        original: the original's class name (``LlamaRotaryEmbedding``, ``Parameter``).
        replacement: what stands there now (or would, with ``dry_run``), in words; empty
            when left alone.
        mode: ``"exact"``, ``"compat"``, or None when left alone.
        max_diff: the largest ``|original - exact|`` over the model's own range (its
            ``max_position_embeddings``, ``max_source_positions`` or image grid); None when
            not measured.
        note: what else to know: why it was left alone, what the range was.
    """

    path: str
    original: str
    replacement: str
    mode: str | None
    max_diff: float | None
    note: str = ""

    @property
    def replaced(self) -> bool:
        """The module was (or, with ``dry_run``, would be) replaced."""
        return self.mode is not None


@dataclass
class Found:
    """What a recogniser found at a path.

    Attributes:
        original: the original's class name, for the report.
        description: what replaces it, in words (``RotaryEmbedding.from_hf('llama')``).
        build: ``compat`` (None or ``"original"``) -> the module to put in place, or a string
            saying why there is none in that mode. None: left alone, ``note`` says why.
        numbers: the original's numbers over the model's range, chunk by chunk (it must not
            change the original's state: rotary modules are copied first).
        probe: the same numbers from a replacement, chunk for chunk.
        note: why it is left alone, or what the range was.
        attribute: the replacement takes the place of this attribute of the module, not of
            the module itself: a table kept in an ``nn.Parameter`` (its checkpoint key is
            routed to the replacement), or an object that is not a module (Z-Image's
            ``RopeEmbedder``), which the replacement, a module, then registers in its place.
        others: more tables of the same module, each at its own ``attribute``, left alone
            (Hiera's ``pos_embed_win`` beside its ``pos_embed``): a row each in the report.
    """

    original: str
    description: str = ""
    build: Callable[[str | None], nn.Module | str] | None = None
    numbers: Callable[[], Iterable[Tensor]] | None = None
    probe: Callable[[nn.Module], Iterable[Tensor]] | None = None
    note: str = ""
    attribute: str | None = None
    others: tuple[Found, ...] = ()


Recogniser = Callable[[str, nn.Module, nn.Module], Found | None]
"""``(path, module, root) -> Found | None``: None when the module is not one it knows."""


@dataclass(frozen=True)
class ByClass:
    """A recogniser of the modules whose class is one of ``classes``, defined in ``library``
    (:func:`by_class` makes one): :func:`posenc.torch.patch` finds it by the index of these
    ``(library, class name)`` pairs (:func:`index`) and asks it first (the recognisers by form
    only after it, if it says the module is none of its own: a copy of the class elsewhere);
    called directly, it checks the module's class and library itself."""

    library: str
    classes: tuple[str, ...]
    recognise: Recogniser

    def __call__(self, path: str, module: nn.Module, root: nn.Module) -> Found | None:
        if not is_one_of(module, self.library, *self.classes):
            return None
        return self.recognise(path, module, root)


def by_class(library: str | Classes, *classes: str) -> Callable[[Recogniser], ByClass]:
    """Decorator: the recogniser knows the modules of these classes of ``library``, and only
    them (the class and library checks are the index's, not the recogniser's). A family's
    classes are named in its record: ``@by_class(wan.BUFFERS)`` (a
    :class:`~posenc.spec.families.base.Classes`)."""
    group = library if isinstance(library, Classes) else Classes(library, *classes)

    def claim(recognise: Recogniser) -> ByClass:
        return ByClass(group.library, group.names, recognise)

    return claim


def index(recognisers: Iterable[Recogniser | ByClass]) -> dict[tuple[str, str], ByClass]:
    """The ``(library, class name)`` index of the :class:`ByClass` recognisers; a class that
    two of them claim is an error (no order decides between them)."""
    out: dict[tuple[str, str], ByClass] = {}
    for recogniser in recognisers:
        if not isinstance(recogniser, ByClass):
            continue
        for name in recogniser.classes:
            key = (recogniser.library, name)
            if key in out:
                raise PosencError(
                    f"{recogniser.library}'s {name} is claimed by two recognisers: "
                    f"{_named(out[key])} and {_named(recogniser)}"
                )
            out[key] = recogniser
    return out


def _named(recogniser: ByClass) -> str:
    return str(getattr(recogniser.recognise, "__name__", recogniser.recognise))


def library_of(module: Any) -> str:
    """The top package of ``module``'s class (``"transformers"``, ``"diffusers"``, ``"timm"``)."""
    return type(module).__module__.partition(".")[0]


def left_alone(original: str, note: str, attribute: str | None = None) -> Found:
    """A :class:`Found` that replaces nothing, saying why."""
    return Found(original, note=note, attribute=attribute)


def holds(saved: Any) -> str:
    """What sinusoid a stored table holds, for a report's note (``"holds the fairseq sinusoid
    padding_idx=1 to 7.3e-05"``: the preset, its options and the largest difference from
    its exact table), or ``""`` when it is none posenc knows, has no values (meta) or has
    more than ``IDENTIFIED`` of them."""
    if not isinstance(saved, Tensor) or not saved.is_floating_point() or saved.is_meta:
        return ""
    if not 0 < saved.numel() <= IDENTIFIED:
        return ""
    try:
        found = identify(saved.detach().cpu().double().numpy())
    except PosencError:  # not a 2-D table, or not finite
        return ""
    if not found or found[0].error >= MATCH:
        return ""
    best = found[0]
    options = dict(best.options)
    options.pop("length", None)
    shape = options.pop("shape", None)
    grid = "" if shape is None else " on a " + " x ".join(str(n) for n in shape) + " grid"
    extra = "".join(f" {k}={v}" for k, v in options.items())
    return f"holds the {best.preset} sinusoid{grid}{extra} to {best.error:.2g}"


def learned(saved: Any) -> str:
    """The report's note for a trainable table: :data:`LEARNED`, saying which sinusoid it
    still holds when it holds one (a model initialised from one and not trained since)."""
    held = holds(saved)
    return f"learned (a trainable table; {held}), left alone" if held else LEARNED


def is_one_of(module: Any, library: str, *names: str) -> bool:
    """``module``'s class is one of ``names``, defined in ``library`` (``"diffusers"``)."""
    return type(module).__name__ in names and from_library(module, library)


def covered(
    make: Callable[[str | None], nn.Module], replay: str
) -> Callable[[str | None], nn.Module | str]:
    """``build`` of a :class:`Found`: the stand-in ``make`` builds (``compat`` mapped to the
    library's replay, ``replay``), or why there is none (a :class:`PosencError`'s words)."""

    def build(compat: str | None) -> nn.Module | str:
        try:
            return make(None if compat is None else replay)
        except PosencError as err:
            return f"not covered: {err}"

    return build


def unlike(name: str, library: str) -> Found:
    """Left alone: a module of a class posenc knows whose attributes are not that class's."""
    owner = library + ("'" if library.endswith("s") else "'s")
    return left_alone(name, f"not covered: not the attributes of {owner} {name}")


def readable_theta(
    last: float, d: int, matches: Callable[[float], bool], usual: float = 10000.0
) -> float | None:
    """The theta of a table kept without it: the first of ``usual`` and the estimate from
    ``last`` (a block of width ``d``'s last frequency ``theta ** (-(d - 2) / d)``, as kept) to
    1, 2, 3 digits and to an integer whose table ``matches`` the kept one bit for bit (a 16-bit
    table pins theta no closer: the roundest that rebuilds it is read), or None."""
    guesses = [usual]
    if d > 2 and 0.0 < last < 1.0:
        estimate = last ** (-d / (d - 2))
        if math.isfinite(estimate):
            guesses += [float(f"{estimate:.{k}g}") for k in (1, 2, 3)] + [float(round(estimate))]
    found = [t for t in dict.fromkeys(guesses) if t > 0 and matches(t)]
    return found[0] if found else None


def unreproduced(module: nn.Module, why: str) -> Found:
    """A positional module posenc has no stand-in for, left alone: as learned when it has a
    trainable parameter (saying which sinusoid its table still holds), else saying ``why``
    and which sinusoid its table holds, if any."""
    name = type(module).__name__
    weight = table_of(module)
    if any(p.requires_grad for p in module.parameters()):
        return left_alone(name, learned(weight))
    held = holds(weight)
    return left_alone(name, f"{why}; it {held}" if held else why)


def left_table(saved: Tensor, attribute: str, fixed: str) -> Found:
    """A positional table a module keeps at ``attribute`` that no stand-in replaces, left
    alone: as learned when trainable (saying which sinusoid it still holds), else as ``fixed``
    says, its ``{held}`` the sinusoid it holds (`` (holds the … to …)``), if any."""
    kind = "Parameter" if isinstance(saved, nn.Parameter) else "buffer"
    if saved.requires_grad:
        return left_alone(kind, learned(saved), attribute)
    held = holds(saved)
    return left_alone(kind, fixed.format(held=f" ({held})" if held else ""), attribute)


def table_of(module: nn.Module) -> Tensor | None:
    """The module's first parameter of two or more dimensions (its table), if any."""
    return next((t for t in module.parameters() if t.ndim >= 2), None)


def has_meta(module: nn.Module) -> bool:
    """Some parameter or buffer of ``module`` (or of a module inside it) is on the meta
    device: it has a shape and no values."""
    return any(t.is_meta for t in (*module.parameters(), *module.buffers()))


def compare(original: Iterable[Tensor], other: Iterable[Tensor]) -> tuple[float, bool]:
    """The largest difference of two runs chunk for chunk (in float64), and whether they were
    equal bit for bit (same dtypes and values); infinite for chunks of different shapes."""
    largest, equal = 0.0, True
    for a, b in zip(original, other, strict=True):
        if a.shape != b.shape:  # not the same numbers at all
            return math.inf, False
        equal = equal and a.dtype == b.dtype and torch.equal(a, b)
        if a.numel():
            diff = float((a.detach().double() - b.detach().double().to(a.device)).abs().max())
            largest = max(largest, diff) if math.isfinite(diff) else math.inf
    return largest, equal


def chunks(n: int, size: int = 32768) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` runs covering ``0 … n - 1``."""
    for start in range(0, n, size):
        yield start, min(n, start + size)


EDGE = 32768
"""Positions measured at each end of a long range (the first and the last ``EDGE``)."""


def measured(n: int) -> tuple[list[tuple[int, int]], str]:
    """The ``(start, stop)`` runs a difference is measured over for a range of ``n``
    positions, and their description: all of them up to ``2 * EDGE``, else the first and
    the last ``EDGE`` (where float32 angles err most), so a 10M-position model is measured
    in seconds."""
    if n <= 2 * EDGE:
        return list(chunks(n)), f"positions 0 … {n - 1}"
    runs = [*chunks(EDGE), *((n - EDGE + a, n - EDGE + b) for a, b in chunks(EDGE))]
    return runs, f"positions 0 … {EDGE - 1} and {n - EDGE} … {n - 1}"


def is_posenc(module: nn.Module) -> bool:
    """A posenc module (or a replacement :func:`patch` put in place): never patched again."""
    return isinstance(module, _Tracked) or type(module).__module__.startswith("posenc.")


def from_library(module: Any, library: str) -> bool:
    """``module``'s class is defined in ``library`` (``"transformers"``), by its module path."""
    return type(module).__module__.startswith(library + ".")


def float_dtype(module: nn.Module) -> torch.dtype | None:
    """The dtype of the module's own floating tensors (parameters and buffers), if any."""
    for t in (*module.parameters(recurse=False), *module.buffers(recurse=False)):
        if t.is_floating_point():
            return t.dtype
    return None


def device_of(module: nn.Module) -> torch.device:
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    return torch.device("cpu")


class TableParameter(_Tracked):
    """Stands in for a table a model kept in an ``nn.Parameter`` (``[1, rows, d]``, ViT-MAE's
    ``position_embeddings``): reads as that tensor does (slicing, ``shape``, arithmetic, torch
    functions), holds the exact table in the module's dtype and device, and has no key of its
    own: its parent's key is written from it on save (:mod:`posenc.torch._placing`).

    ``table`` is built by ``make(dtype, device)``; its parent module routes the checkpoint key
    of the parameter it replaced to this module's check
    (:func:`posenc.torch._placing.route_key`).
    """

    def __init__(
        self,
        make: Callable[[torch.dtype, torch.device], Tensor],
        expected: Callable[[int], Any],
        largest: Callable[[int], int],
        *,
        dtype: torch.dtype,
        device: Any,
        description: str,
    ) -> None:
        super().__init__(device=device, dtype=dtype)
        self._make, self._expected, self._largest = make, expected, largest
        self.description = description
        self._table: Tensor | None = None

    @property
    def table(self) -> Tensor:
        """The table, as the parameter held it, in the module's dtype and on its device."""
        if self._table is None:
            self._table = self._make(self._dtype, self._device)
        return self._table

    def _moved(self) -> None:
        self._table = None

    def forward(self) -> Tensor:
        """The table (as the parameter read)."""
        return self.table

    def _expected_table(self, rows: int) -> Any:
        return self._expected(rows)

    def _largest_position(self, rows: int) -> int:
        return self._largest(rows)

    shape = property(lambda self: self.table.shape)
    dtype = property(lambda self: self.table.dtype)
    device = property(lambda self: self.table.device)
    ndim = property(lambda self: self.table.ndim)

    def size(self, *dim: int) -> Any:
        return self.table.size(*dim)

    def __getitem__(self, index: Any) -> Tensor:
        out: Tensor = self.table[index]
        return out

    def __add__(self, other: Any) -> Tensor:
        out: Tensor = self.table + other
        return out

    def __radd__(self, other: Any) -> Tensor:
        out: Tensor = other + self.table
        return out

    def __mul__(self, other: Any) -> Tensor:
        out: Tensor = self.table * other
        return out

    __rmul__ = __mul__

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        def unwrap(x: Any) -> Any:
            if isinstance(x, TableParameter):
                return x.table
            if isinstance(x, (list, tuple)):
                return type(x)(unwrap(v) for v in x)
            return x

        return func(*unwrap(args), **{k: unwrap(v) for k, v in (kwargs or {}).items()})

    def extra_repr(self) -> str:
        return self.description
