"""Rotary position embeddings: the same sinusoids, used as rotations.

A RoPE table is a plan like any other (:mod:`posenc._layout`): its channels are the cosines,
then the sines, of the rotary frequencies, each placed by a layout. So it is evaluated by the
same exact engine (float64 angles, the attention factor applied in float64, one rounding) and
returned as two views of one array. What is RoPE's own:

- :class:`Rotary`, the spec record beside :class:`~posenc.Encoding`: width, base, scaling
  rule (:mod:`posenc._scaling`), layout, and how the frequencies meet several position axes
  (multimodal sections, axial blocks);
- :data:`LAYOUTS`, the table of where each frequency's cosine (and sine) goes;
- :func:`rope` and :func:`apply_rope`, the public functions.

``compat="transformers"`` leaves the exact engine for transformers' own float32 arithmetic,
kept apart in :mod:`posenc._rope_compat`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args, overload

import numpy as np

from ._api import evaluate_points
from ._backends import array_namespace, is_torch
from ._cache import nbytes
from ._layout import PLANS, Plan
from ._presets import get_rotary_preset
from ._scaling import Scaling, parse_scaling
from ._types import ArrayLike, Floats, NumpyDType
from ._validate import (
    MAX_AXES,
    MAX_DIM,
    PosencError,
    Positions,
    as_positions,
    check_bool,
    check_choice,
    check_int,
    check_real,
    show,
    tracing,
)

if TYPE_CHECKING:
    from ._types import Tensor, TorchDType

RopeLayout = Literal["halves", "interleaved", "compact"]

LAYOUTS: dict[str, Callable[[int], list[int]]] = {
    "halves": lambda n: [*range(n), *range(n)],  # GPT-NeoX, HF rotate_half: cat(f, f)
    "interleaved": lambda n: [i for i in range(n) for _ in (0, 1)],  # GPT-J, Meta, FLUX
    "compact": lambda n: list(range(n)),  # flash-attn, vLLM: one column per pair
}
"""For ``n`` frequencies of a block, the frequency of each of the block's table columns."""


@dataclass(frozen=True)
class Rotary:
    """Everything that defines one rotary table, for any positions.

    Attributes:
        dim: rotary width ``d`` (channels that rotate; even): tables are ``d`` wide
            (``d / 2`` in the compact layout).
        scaling: the validated scaling rule.
        base: ``rope_theta``.
        layout: see :data:`LAYOUTS`.
        sections: multimodal RoPE: how many of the ``d / 2`` frequencies each position axis
            takes (Qwen2-VL ``mrope_section``), in consecutive chunks, or, with
            ``interleave_sections``, round robin (Qwen3-VL).
        axes_dim: axial RoPE: one block of this width per position axis, each with its own
            frequencies ``base ** (-2j / d_k)`` (FLUX).
    """

    dim: int
    scaling: Scaling
    base: float = 10000.0
    layout: RopeLayout = "halves"
    sections: tuple[int, ...] | None = None
    interleave_sections: bool = False
    axes_dim: tuple[int, ...] | None = None

    @property
    def ndim(self) -> int:
        """Position axes: 1, ``len(sections)`` or ``len(axes_dim)``."""
        return len(self.sections or self.axes_dim or (0,))

    @property
    def width(self) -> int:
        """Channels of each of the cos and sin tables."""
        return self.dim // 2 if self.layout == "compact" else self.dim

    def plan(self, seq_len: int | None, who: str = "rope") -> Plan:
        """The plan of ``[cos | sin]`` (``2 * width`` channels) at this sequence length (which
        only the ``dynamic`` and ``longrope`` rules read)."""
        key = (self, self.scaling.phase(seq_len), who)
        return PLANS.get_or_make(key, lambda: _plan(*key), lambda p: nbytes(p.omega, p.axis, p.src))


def _plan(r: Rotary, seq_len: int | None, who: str) -> Plan:
    blocks: list[tuple[np.ndarray, np.ndarray]] = []  # (omega, axis) per channel block
    if r.axes_dim is not None:
        for k, dk in enumerate(r.axes_dim):
            omega, factor = r.scaling.frequencies(dk, r.base, seq_len)
            blocks.append((omega, np.full(len(omega), k)))
    else:
        omega, factor = r.scaling.frequencies(r.dim, r.base, seq_len)
        blocks.append((omega, _section_axes(r)))
    order = LAYOUTS[r.layout]
    columns: list[int] = []  # the frequency u (over all blocks) of each cos channel
    first = 0
    for omega, _ in blocks:
        columns += [first + i for i in order(len(omega))]
        first += len(omega)
    cols = np.asarray(columns, dtype=np.int64)
    src = np.concatenate([2 * cols + 1, 2 * cols])  # cosines, then sines
    omega = np.concatenate([b[0] for b in blocks])
    axis = np.concatenate([b[1] for b in blocks]).astype(np.int64)
    return Plan(len(src), r.ndim, omega, axis, src, who, factor)


def _section_axes(r: Rotary) -> np.ndarray:
    """The position axis of each of the ``d / 2`` frequencies."""
    n = r.dim // 2
    if r.sections is None:
        return np.zeros(n, dtype=np.int64)
    if not r.interleave_sections:
        return np.repeat(np.arange(len(r.sections)), r.sections)
    k = len(r.sections)
    j = np.arange(n)
    axis = np.zeros(n, dtype=np.int64)
    for a in range(1, k):  # Qwen3-VL: axis a takes j = a mod k below k * sections[a]
        axis[(j % k == a) & (j < k * r.sections[a])] = a
    return axis


def _ints(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise PosencError(f"`{name}` must be a tuple of positive integers, got {show(value)}")
    out = tuple(check_int(f"{name}[{i}]", v, minimum=1) for i, v in enumerate(value))
    if len(out) > MAX_AXES:
        raise PosencError(f"`{name}` may have at most {MAX_AXES} entries, got {len(out)}")
    return out


def rotary(
    dim: Any,
    *,
    preset: Any = None,
    base: Any = None,
    scaling: Any = None,
    layout: Any = None,
    sections: Any = None,
    interleave_sections: Any = None,
    axes_dim: Any = None,
) -> Rotary:
    """The checked :class:`Rotary` of :func:`rope`'s keywords: a preset's, replaced by those
    given, then the defaults (base 10000, halves)."""
    given = {
        "base": base,
        "scaling": scaling,
        "layout": layout,
        "sections": sections,
        "interleave_sections": interleave_sections,
        "axes_dim": axes_dim,
    }
    kw: dict[str, Any] = {"base": 10000.0, "layout": "halves", "interleave_sections": False}
    if preset is not None:
        kw.update(get_rotary_preset(preset).rotary)
    kw.update({k: v for k, v in given.items() if v is not None})
    return _rotary(dim, **kw)


def _rotary(
    dim: Any,
    *,
    base: Any,
    layout: Any,
    interleave_sections: Any,
    scaling: Any = None,
    sections: Any = None,
    axes_dim: Any = None,
) -> Rotary:
    dim = check_int("dim", dim, minimum=1, maximum=MAX_DIM)
    if dim % 2:
        raise PosencError(
            f"`dim` (the rotary width) must be even: channels rotate in pairs, got {dim}"
        )
    s = parse_scaling(scaling)
    base = check_real("base", base, positive=True)
    layout = check_choice("layout", layout, get_args(RopeLayout))
    interleave_sections = check_bool("interleave_sections", interleave_sections)
    shared = dict(s.shared)
    if "rope_theta" in shared and check_real("scaling['rope_theta']", shared["rope_theta"]) != base:
        raise PosencError(
            f"`scaling['rope_theta']` ({show(shared['rope_theta'])}) disagrees with `base` "
            f"({base:g}): pass base={shared['rope_theta']!r}"
        )
    if "partial_rotary_factor" in shared and shared["partial_rotary_factor"] != 1:
        raise PosencError(
            f"`scaling['partial_rotary_factor']` ({show(shared['partial_rotary_factor'])}) "
            "does not apply here: `dim` is already the rotary width (int(head_dim * factor)); "
            "drop the key"
        )
    if "mrope_section" in shared:
        given = _ints("scaling['mrope_section']", shared["mrope_section"])
        if sections is None:
            sections = given
        elif tuple(sections) != given:
            raise PosencError(
                f"`scaling['mrope_section']` ({show(shared['mrope_section'])}) disagrees with "
                f"`sections` ({show(sections)})"
            )
    if "mrope_interleaved" in shared:
        flag = check_bool("scaling['mrope_interleaved']", shared["mrope_interleaved"])
        if flag != interleave_sections and interleave_sections:
            raise PosencError(
                "`scaling['mrope_interleaved']` is False but `interleave_sections` is True"
            )
        interleave_sections = flag
    if sections is not None and axes_dim is not None:
        raise PosencError("`sections` and `axes_dim` exclude each other: pass one")
    if sections is not None:
        sections = _ints("sections", sections)
        if sum(sections) != dim // 2:
            raise PosencError(
                f"`sections` must add up to dim / 2 = {dim // 2} (one entry per frequency), "
                f"got {sections} (sum {sum(sections)})"
            )
    elif interleave_sections:
        raise PosencError("`interleave_sections` needs `sections`")
    if axes_dim is not None:
        axes_dim = _ints("axes_dim", axes_dim)
        odd = [d for d in axes_dim if d % 2]
        if odd or sum(axes_dim) != dim:
            raise PosencError(
                f"`axes_dim` must be even widths adding up to `dim` = {dim}, got {axes_dim}"
            )
    return Rotary(dim, s, base, layout, sections, interleave_sections, axes_dim)


@overload
def rope(
    positions: Tensor,
    dim: int,
    *,
    base: float | None = ...,
    scaling: dict[str, Any] | None = ...,
    layout: str | None = ...,
    dtype: Any = ...,
    seq_len: int | None = ...,
    sections: tuple[int, ...] | None = ...,
    interleave_sections: bool | None = ...,
    axes_dim: tuple[int, ...] | None = ...,
    compat: str | None = ...,
    preset: str | None = ...,
) -> tuple[Tensor, Tensor]: ...


@overload
def rope(
    positions: Any,
    dim: int,
    *,
    base: float | None = ...,
    scaling: dict[str, Any] | None = ...,
    layout: str | None = ...,
    dtype: TorchDType,
    seq_len: int | None = ...,
    sections: tuple[int, ...] | None = ...,
    interleave_sections: bool | None = ...,
    axes_dim: tuple[int, ...] | None = ...,
    compat: str | None = ...,
    preset: str | None = ...,
) -> tuple[Tensor, Tensor]: ...


@overload
def rope(
    positions: ArrayLike,
    dim: int,
    *,
    base: float | None = ...,
    scaling: dict[str, Any] | None = ...,
    layout: str | None = ...,
    dtype: NumpyDType = ...,
    seq_len: int | None = ...,
    sections: tuple[int, ...] | None = ...,
    interleave_sections: bool | None = ...,
    axes_dim: tuple[int, ...] | None = ...,
    compat: str | None = ...,
    preset: str | None = ...,
) -> tuple[Floats, Floats]: ...


@overload
def rope(
    positions: Any,
    dim: int,
    *,
    base: float | None = ...,
    scaling: dict[str, Any] | None = ...,
    layout: str | None = ...,
    dtype: Any = ...,
    seq_len: int | None = ...,
    sections: tuple[int, ...] | None = ...,
    interleave_sections: bool | None = ...,
    axes_dim: tuple[int, ...] | None = ...,
    compat: str | None = ...,
    preset: str | None = ...,
) -> tuple[Any, Any]: ...


def rope(
    positions: Any,
    dim: int,
    *,
    base: float | None = None,
    scaling: dict[str, Any] | None = None,
    layout: str | None = None,
    dtype: Any = None,
    seq_len: int | None = None,
    sections: tuple[int, ...] | None = None,
    interleave_sections: bool | None = None,
    axes_dim: tuple[int, ...] | None = None,
    compat: str | None = None,
    preset: str | None = None,
) -> tuple[Any, Any]:
    """The rotary tables ``cos, sin`` of positions: exact, in any scaling rule.

    Args:
        positions: integer or real positions of any shape ``[*s]``, as a list, NumPy array,
            torch tensor or JAX array. With ``sections`` a leading axis of one row per section
            (Qwen2-VL's ``[3, batch, seq]``: temporal, height, width); with ``axes_dim`` a
            trailing axis of one coordinate per block (FLUX's ``[N, 3]``).
        dim: the rotary width ``d`` (after any partial-rotary factor): even.
        base: ``rope_theta`` (10000).
        scaling: a transformers rope-parameters dict: ``rope_type`` ``"default"``,
            ``"linear"``, ``"dynamic"``, ``"yarn"``, ``"longrope"``, ``"llama3"`` or
            ``"proportional"`` with that type's keys. Its attention factor multiplies cos and
            sin (before the one rounding).
        layout: ``"halves"`` (the default; ``cos[..., i] == cos[..., i + d/2]``: GPT-NeoX, HF
            ``rotate_half``), ``"interleaved"`` (``cos[..., 2i] == cos[..., 2i+1]``: GPT-J,
            Meta Llama, FLUX) or ``"compact"`` (``d / 2`` columns: flash-attn, vLLM).
        dtype: output dtype (default float32, or torch's default dtype).
        seq_len: the sequence length the ``dynamic`` and ``longrope`` rules read (default:
            the largest position + 1, transformers' rule). ``dynamic`` is stateless: the
            answer of a freshly built transformers module.
        sections: multimodal RoPE (Qwen2-VL ``mrope_section``): frequencies per position axis,
            adding up to ``d / 2``; the result is already merged, as transformers returns it.
        interleave_sections: with ``sections``, assign the frequencies round robin
            (Qwen3-VL's interleaved mrope) instead of in chunks.
        axes_dim: axial RoPE (FLUX ``(16, 56, 56)``): one block per position axis, each in
            ``layout``, concatenated; the widths add up to ``dim``.
        compat: ``"transformers"``: transformers' own float32 arithmetic, bit for bit on CPU
            torch (so a model switches to posenc without changing one logit). Default: exact
            (float64 angles, one rounding to ``dtype``).
        preset: a model family's keywords (``posenc.presets("rotary")``: ``llama``,
            ``llama3``, ``neox``, ``gptj``, ``qwen2-vl``, ``flux``, ``deepseek-v3``, …); the
            keywords given beside it replace the preset's.

    Returns:
        ``(cos, sin)``, each ``[*s, d]`` (``[*s, d/2]`` compact), in the library and on the
        device of ``positions``. Exact: both views of one ``[*s, 2 d]`` array.

    Examples:
        >>> cos, sin = posenc.rope(np.arange(4096), 128, base=500000.0,
        ...     scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        ...              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
        >>> cos.shape, cos.dtype
        ((4096, 128), dtype('float32'))
    """
    r = rotary(
        dim,
        preset=preset,
        base=base,
        scaling=scaling,
        layout=layout,
        sections=sections,
        interleave_sections=interleave_sections,
        axes_dim=axes_dim,
    )
    compat = None if compat is None else check_choice("compat", compat, ("transformers",))
    pos = as_positions(positions)
    pos = _axes_last(r, pos)
    length = _seq_len(r, pos, seq_len)
    if compat is not None:
        from . import _rope_compat

        return _rope_compat.rope(r, pos, length, dtype)
    pl = r.plan(length, _label(r))
    both = evaluate_points(pl, pos, coords=r.ndim > 1, dtype=dtype, padding_idx=None)
    w = r.width
    return both[..., :w], both[..., w:]


def _label(r: Rotary) -> str:
    kind = r.scaling.rope_type
    return f"'rope' ({kind}, dim={r.dim}, base={r.base:g})"


def _axes_last(r: Rotary, pos: Positions) -> Positions:
    """Positions with the coordinate axis last: sections' leading axis moved there, a
    trailing axis of ``axes_dim`` checked."""
    x = pos.values
    k = r.ndim
    if r.sections is not None:
        if x.ndim < 1 or x.shape[0] != k:
            raise PosencError(
                f"`positions` must have a leading axis of {k} rows (one per section of "
                f"{r.sections}), got shape {tuple(x.shape)}"
            )
        perm = (*range(1, x.ndim), 0)
        return Positions(_permute(x, perm), pos.integral, pos.low, pos.high)
    if r.axes_dim is not None and (x.ndim < 1 or x.shape[-1] != k):
        raise PosencError(
            f"`positions` must have a last axis of {k} coordinates (one per block of "
            f"`axes_dim` {r.axes_dim}), got shape {tuple(x.shape)}"
        )
    return pos


def _permute(x: Any, perm: tuple[int, ...]) -> Any:
    if is_torch(x):
        return x.permute(perm)
    xp = array_namespace(x)
    return np.transpose(x, perm) if xp is None else xp.permute_dims(x, perm)


def _seq_len(r: Rotary, pos: Positions, seq_len: Any) -> int | None:
    """The length the rule reads: ``seq_len``, or the largest position + 1."""
    if not r.scaling.rule.uses_seq_len:
        return None if seq_len is None else check_int("seq_len", seq_len, minimum=1)
    if seq_len is not None:
        return check_int("seq_len", seq_len, minimum=1)
    if pos.high is None:
        raise PosencError(
            f"`seq_len` is required for rope_type {r.scaling.rope_type!r} when the positions "
            "cannot be read (traced or meta)"
        )
    return int(np.floor(pos.high)) + 1


@overload
def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, layout: str = ...) -> Tensor: ...


@overload
def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str = ...) -> Floats: ...


@overload
def apply_rope(x: Any, cos: Any, sin: Any, layout: str = ...) -> Any: ...


def apply_rope(x: Any, cos: Any, sin: Any, layout: str = "halves") -> Any:
    """Rotate the first channels of ``x`` by the tables ``cos, sin``.

    Args:
        x: ``[..., seq, d]`` queries or keys (torch, NumPy or JAX), ``d`` at least the
            table's width; channels past it pass through (partial rotary: GPT-NeoX
            ``rotary_pct``, Phi).
        cos: a table broadcasting against ``x`` by the usual rules (insert the head axis
            yourself, as transformers' ``unsqueeze_dim`` does).
        sin: the table of sines, shaped as ``cos``.
        layout: the tables' layout: ``"halves"`` pairs channel ``i`` with ``i + w/2``
            (``x * cos + rotate_half(x) * sin``), ``"interleaved"`` pairs ``2i`` with
            ``2i + 1`` (Meta's complex product), ``"compact"`` tables of ``w/2`` columns
            pair as halves.

    Returns:
        The rotated ``x``, same shape and dtype. The arithmetic is float32 (float64 for
        float64 ``x``), rounded once to ``x``'s dtype.

    Examples:
        >>> cos, sin = posenc.rope(torch.arange(16), 64)
        >>> q = torch.randn(2, 8, 16, 128)                    # [batch, heads, seq, head_dim]
        >>> posenc.apply_rope(q, cos, sin).shape              # the first 64 channels rotate
        torch.Size([2, 8, 16, 128])
    """
    layout = check_choice("layout", layout, get_args(RopeLayout))
    for name, t in (("cos", cos), ("sin", sin)):
        if not hasattr(t, "shape") or len(t.shape) < 1:
            raise PosencError(f"`{name}` must be an array of at least one axis, got {show(t)}")
    if tuple(cos.shape) != tuple(sin.shape):
        raise PosencError(
            f"`cos` and `sin` must have one shape, got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    if not hasattr(x, "shape") or len(x.shape) < 1:
        raise PosencError(f"`x` must be an array of at least one axis, got {show(x)}")
    w = cos.shape[-1] * (2 if layout == "compact" else 1)
    d = x.shape[-1]
    if w % 2 or w > d:
        raise PosencError(
            f"the rotary width ({w}, from `cos` of shape {tuple(cos.shape)} in layout "
            f"{layout!r}) must be even and at most the last axis of `x` ({d})"
        )
    lead = np.broadcast_shapes(tuple(x.shape[:-1]), tuple(cos.shape[:-1]))
    if lead != tuple(x.shape[:-1]):
        raise PosencError(
            f"`cos` of shape {tuple(cos.shape)} must broadcast against `x` of shape "
            f"{tuple(x.shape)} without enlarging it (insert the head axis: cos[:, None])"
        )
    if is_torch(x):
        return _apply_torch(x, cos, sin, w, layout)
    return _apply_array(x, cos, sin, w, layout)


def _pairs(w: int, layout: str) -> tuple[slice, slice]:
    """The channels of the first and second member of each rotating pair."""
    if layout == "interleaved":
        return slice(0, w, 2), slice(1, w, 2)
    return slice(0, w // 2), slice(w // 2, w)


def _per_member(t: Any, layout: str, a: slice, b: slice) -> tuple[Any, Any]:
    """A table's columns for the first and the second member of each pair (a compact table
    serves both)."""
    return (t, t) if layout == "compact" else (t[..., a], t[..., b])


def _apply_torch(x: Any, cos: Any, sin: Any, w: int, layout: str) -> Any:
    import torch

    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    a, b = _pairs(w, layout)
    c, s = cos.to(device=x.device, dtype=work), sin.to(device=x.device, dtype=work)
    return rotate(x, w, layout, (*_per_member(c, layout, a, b), *_per_member(s, layout, a, b)))


BLOCK = 1 << 19
"""Elements of ``x`` rotated at a time: the float32 temporaries of a block stay in the CPU's
cache, so a block costs about one read and one write of memory (2x faster in bf16, 1.3x in
float32 on q of [1, 32, 4096, 128] than one pass over the whole tensor)."""


def rotate(x: Any, w: int, layout: str, tables: tuple[Any, Any, Any, Any]) -> Any:
    """Rotate the first ``w`` channels of a torch ``x`` by the per-member tables
    ``(cos_a, cos_b, sin_a, sin_b)`` (float32, or float64 for float64 ``x``, broadcasting
    against the members' channels). Block by block (:data:`BLOCK`), four passes (a product
    and a fused multiply-add per member) written into the output's own channels; a 16-bit
    ``x`` is rotated in float32, then rounded once. With autograd, and traced (where the
    compiler fuses the passes), the same arithmetic out of place."""
    import torch

    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    if tracing() or (torch.is_grad_enabled() and any(t.requires_grad for t in (x, *tables))):
        return _apply_differentiable(torch, x, w, layout, work, tables)
    out = torch.empty_like(x)
    a, b = _pairs(w, layout)
    lead = tuple(x.shape[:-1])
    for ix in _blocks(lead, x.shape[-1]) if x.numel() > BLOCK else [()]:
        ca, cb, sa, sb = (_block_of(t, ix, len(lead)) for t in tables) if ix else tables
        xb, ob = x[ix], out[ix]
        x1, x2, first, second = xb[..., a], xb[..., b], ob[..., a], ob[..., b]
        if x.dtype == work:
            torch.mul(x1, ca, out=first)
            first.addcmul_(x2, sa, value=-1)
            torch.mul(x2, cb, out=second)
            second.addcmul_(x1, sb)
        else:
            f1, f2 = x1.to(work), x2.to(work)
            one, two = f1 * ca, f2 * cb
            first.copy_(one.addcmul_(f2, sa, value=-1))  # rounded once
            second.copy_(two.addcmul_(f1, sb))
    if w < x.shape[-1]:
        out[..., w:] = x[..., w:]
    return out


def _blocks(lead: tuple[int, ...], d: int) -> Iterator[tuple[Any, ...]]:
    """Index tuples over the leading axes ``lead`` of ``[*lead, d]``, each selecting at most
    :data:`BLOCK` elements (at least one row): whole trailing axes, then rows of the next."""
    k, size = len(lead), d
    while k and size * lead[k - 1] <= BLOCK:
        k -= 1
        size *= lead[k]
    if not k:
        yield ()
        return
    step = max(1, BLOCK // size)
    for outer in itertools.product(*map(range, lead[: k - 1])):
        for start in range(0, lead[k - 1], step):
            yield (*outer, slice(start, start + step))


def _block_of(t: Any, ix: tuple[Any, ...], nlead: int) -> Any:
    """The part of a table (broadcasting against ``[*lead, n]``) for the block ``ix``."""
    skip = nlead - (t.ndim - 1)  # leading axes of x the table does not have
    sel = [
        i if t.shape[j - skip] > 1 else (0 if isinstance(i, int) else slice(None))
        for j, i in enumerate(ix)
        if j >= skip
    ]
    return t[tuple(sel)]


def _apply_differentiable(
    torch: Any, x: Any, w: int, layout: str, work: Any, tables: tuple[Any, ...]
) -> Any:
    """The same arithmetic out of place, for autograd (``out=`` records no gradient) and
    tracing. Each half is rounded to ``x.dtype`` before one ``cat`` (or ``stack``) joins them
    with the pass-through channels: inductor then fuses it all into one loop as fast as a copy
    (rounding after the join made compiled bf16 3.4x slower)."""
    ca, cb, sa, sb = tables
    a, b = _pairs(w, layout)
    x1, x2 = x[..., a].to(work), x[..., b].to(work)
    first, second = (x1 * ca - x2 * sa).to(x.dtype), (x2 * cb + x1 * sb).to(x.dtype)
    if layout == "interleaved":
        rotated = [torch.stack([first, second], dim=-1).flatten(-2)]
    else:
        rotated = [first, second]
    return torch.cat([*rotated, x[..., w:]], dim=-1)


def _apply_array(x: Any, cos: Any, sin: Any, w: int, layout: str) -> Any:
    xp = array_namespace(x)
    astype: Callable[[Any, Any], Any]
    if xp is None:  # NumPy (any version): its own names
        x = np.asarray(x)
        xp, astype, concat = np, lambda v, t: v.astype(t), np.concatenate
    else:
        astype, concat = xp.astype, xp.concat
    work = xp.float64 if x.dtype == xp.float64 else xp.float32
    a, b = _pairs(w, layout)
    c, s = xp.asarray(cos, dtype=work), xp.asarray(sin, dtype=work)
    (ca, cb), (sa, sb) = _per_member(c, layout, a, b), _per_member(s, layout, a, b)
    x1, x2 = astype(x[..., a], work), astype(x[..., b], work)
    first = astype(x1 * ca - x2 * sa, x.dtype)
    second = astype(x2 * cb + x1 * sb, x.dtype)
    if layout == "interleaved":
        rotated = xp.reshape(xp.stack([first, second], axis=-1), (*first.shape[:-1], w))
    else:
        rotated = concat([first, second], axis=-1)
    if w == x.shape[-1]:
        return rotated
    return concat([rotated, x[..., w:]], axis=-1)
