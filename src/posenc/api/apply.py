"""``posenc.apply_rope``: rotate queries and keys by rotary tables, in any library."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, get_args, overload

import numpy as np

from posenc._types import Floats
from posenc.errors import PosencError, check_choice, check_int, show
from posenc.evaluate.libs import array_namespace, backend_of, is_torch
from posenc.evaluate.libs.base import FLOATS, dtype_name
from posenc.spec.rotary import RopeLayout, member_columns, pair_channels

if TYPE_CHECKING:
    from posenc._types import Tensor


@overload
def apply_rope(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    layout: str = ...,
    *,
    blocks: int | None = ...,
    compat: str | None = ...,
) -> Tensor: ...


@overload
def apply_rope(
    x: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
    layout: str = ...,
    *,
    blocks: int | None = ...,
    compat: None = ...,
) -> Floats: ...


@overload
def apply_rope(
    x: Any,
    cos: Any,
    sin: Any,
    layout: str = ...,
    *,
    blocks: int | None = ...,
    compat: str | None = ...,
) -> Any: ...


def apply_rope(
    x: Any,
    cos: Any,
    sin: Any,
    layout: str = "halves",
    *,
    blocks: int | None = None,
    compat: str | None = None,
) -> Any:
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
            pair as halves, ``"block-halves"``: halves inside each of ``blocks`` equal blocks
            of the ``w`` channels (Allegro's three axes, LTX-2's "split" heads).
        blocks: with ``"block-halves"``, how many blocks (default 1: halves); any other
            layout takes only ``blocks=1`` (one block: the layout itself), as :func:`rope`.
        compat: torch only: the original's own arithmetic, bit for bit: ``"diffusers"``
            (``apply_rotary_emb(x, (cos, sin), use_real=True)``: float32 products and sum,
            then ``x``'s dtype; ``use_real_unbind_dim=-1`` is the interleaved layout, ``-2``
            halves; ``"block-halves"`` is ``apply_rotary_emb_allegro``), ``"ltx2"`` (LTX-2's
            ``apply_split_rotary_emb``: ``x * cos`` then ``addcmul_``, halves or
            ``"block-halves"``) or ``"transformers"`` (``apply_rotary_pos_emb``: in ``x``'s
            dtype, the tables cast to it). Default: posenc's rotation, rounded once.

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
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if dtype_name(t.dtype) not in FLOATS:
            raise PosencError(
                f"`{name}` must hold floating-point values (a rotation of integers would be "
                f"truncated), got {t.dtype}"
            )
    w = cos.shape[-1] * (2 if layout == "compact" else 1)
    d = x.shape[-1]
    if w % 2 or w > d:
        raise PosencError(
            f"the rotary width ({w}, from `cos` of shape {tuple(cos.shape)} in layout "
            f"{layout!r}) must be even and at most the last axis of `x` ({d})"
        )
    try:
        lead = np.broadcast_shapes(tuple(x.shape[:-1]), tuple(cos.shape[:-1]))
    except ValueError:
        lead = None
    if lead != tuple(x.shape[:-1]):
        raise PosencError(
            f"`cos` of shape {tuple(cos.shape)} must broadcast against `x` of shape "
            f"{tuple(x.shape)} without enlarging it (insert the head axis: cos[:, None])"
        )
    if layout == "block-halves":
        return _block_halves(x, cos, sin, w, blocks, compat)
    if blocks is not None and check_int("blocks", blocks, minimum=1) != 1:  # as rope()'s
        raise PosencError(f"`blocks` cuts the 'block-halves' layout, not {layout!r}: drop it")
    if compat is not None:
        return _apply_compat(x, cos, sin, w, layout, compat)
    if is_torch(x):
        from posenc.evaluate.libs.torch_rotation import apply

        return apply(x, cos, sin, w, layout)
    return _apply_array(x, cos, sin, w, layout)


def _block_halves(x: Any, cos: Any, sin: Any, w: int, blocks: Any, compat: Any) -> Any:
    """``"block-halves"``: ``x``'s first ``w`` channels and the tables seen as ``[...,
    blocks, w / blocks]``, each block rotated as halves (elementwise the same arithmetic)."""
    n = 1 if blocks is None else check_int("blocks", blocks, minimum=1)
    if w % (2 * n):
        raise PosencError(
            f"`blocks` = {n} must cut the rotary width {w} (from `cos` of shape "
            f"{tuple(cos.shape)}) into blocks of an even width"
        )

    def cut(t: Any) -> Any:
        return t.reshape(*t.shape[:-1], n, w // n)

    part = x[..., :w]
    out = apply_rope(cut(part), cut(cos), cut(sin), "halves", compat=compat)
    out = out.reshape(*part.shape)
    if w == x.shape[-1]:
        return out
    return backend_of(x).concat([out, x[..., w:]], axis=-1)


def _apply_array(x: Any, cos: Any, sin: Any, w: int, layout: str) -> Any:
    xp = array_namespace(x)
    astype: Callable[[Any, Any], Any]
    if xp is None:  # NumPy (any version): its own names
        x = np.asarray(x)
        xp, astype, concat = np, lambda v, t: v.astype(t), np.concatenate
    else:
        astype, concat = xp.astype, xp.concat
    work = xp.float64 if x.dtype == xp.float64 else xp.float32
    a, b = pair_channels(w, layout)
    c, s = xp.asarray(cos, dtype=work), xp.asarray(sin, dtype=work)
    (ca, cb), (sa, sb) = member_columns(c, layout, a, b), member_columns(s, layout, a, b)
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


def _apply_compat(x: Any, cos: Any, sin: Any, w: int, layout: str, compat: Any) -> Any:
    """``compat=``: the originals are torch code, and rotate whole-width tables."""
    try:
        from posenc.compat import rotation
    except ImportError:
        raise PosencError("`compat` rotates with torch: pip install 'posenc[torch]'") from None
    compat = check_choice("compat", compat, rotation.MODES)
    if not (is_torch(x) and is_torch(cos) and is_torch(sin)):
        raise PosencError(f"`compat={compat!r}` repeats torch code: pass torch `x`, `cos`, `sin`")
    if layout == "compact":
        raise PosencError(f"`compat={compat!r}` rotates by full-width tables, not 'compact' ones")
    if compat == "ltx2" and layout != "halves":
        raise PosencError(
            "`compat='ltx2'` is LTX-2's split rotation: layout 'halves' or 'block-halves', "
            f"not {layout!r} (its interleaved one is compat='diffusers')"
        )
    return rotation.apply(x, cos, sin, w, layout, compat)
