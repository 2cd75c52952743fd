"""PyTorch's rotation kernels: ``apply_rope`` and the rotary module on torch tensors.

Block by block in the CPU's cache, in the output's own channels, a 16-bit ``x`` rotated in
float32 and rounded once; with autograd and under tracing, the same arithmetic out of place.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch

from posenc.evaluate.libs.torch import tracing
from posenc.spec.rotary import member_columns, pair_channels


def apply(x: Any, cos: Any, sin: Any, w: int, layout: str) -> Any:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    a, b = pair_channels(w, layout)
    c, s = cos.to(device=x.device, dtype=work), sin.to(device=x.device, dtype=work)
    return rotate(
        x, w, layout, (*member_columns(c, layout, a, b), *member_columns(s, layout, a, b))
    )


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
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    if tracing() or (torch.is_grad_enabled() and any(t.requires_grad for t in (x, *tables))):
        return _apply_differentiable(x, w, layout, work, tables)
    out = torch.empty_like(x)
    a, b = pair_channels(w, layout)
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


def _apply_differentiable(x: Any, w: int, layout: str, work: Any, tables: tuple[Any, ...]) -> Any:
    """The same arithmetic out of place, for autograd (``out=`` records no gradient) and
    tracing. Each half is rounded to ``x.dtype`` before one ``cat`` (or ``stack``) joins them
    with the pass-through channels: inductor then fuses it all into one loop as fast as a copy
    (rounding after the join made compiled bf16 3.4x slower)."""
    ca, cb, sa, sb = tables
    a, b = pair_channels(w, layout)
    x1, x2 = x[..., a].to(work), x[..., b].to(work)
    first, second = (x1 * ca - x2 * sa).to(x.dtype), (x2 * cb + x1 * sb).to(x.dtype)
    if layout == "interleaved":
        rotated = [torch.stack([first, second], dim=-1).flatten(-2)]
    else:
        rotated = [first, second]
    return torch.cat([*rotated, x[..., w:]], dim=-1)
