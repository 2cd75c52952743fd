"""Positions of sequences from what a forward call is given: packed sequences'
boundaries (``cu_seqlens``) and per-batch offsets (a KV cache), taken on the device with no
host read where the values cannot be read (traced, or not on the CPU); and rotary ids spread
over multimodal sections.

Shapes: ``b`` batch, ``s`` sequence, ``t`` packed tokens.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posenc.errors import PosencError, check_int
from posenc.evaluate.libs import as_positions
from posenc.evaluate.libs.torch import assert_on_device
from posenc.evaluate.positions import Positions
from posenc.spec.rotary import Rotary
from posenc.torch._base import _short


def packed_positions(cu_seqlens: Tensor, total: int | None = None) -> Tensor:
    """Positions of packed sequences: ``0, 1, …`` restarting at every boundary.

    Args:
        cu_seqlens: ``[n + 1]`` cumulative sequence lengths: starting at 0, non-decreasing
            (flash-attn's varlen convention).
        total: number of tokens; ``cu_seqlens`` must end there. Default ``cu_seqlens[-1]``,
            read on the host (a wait for the device): give it to stay on the device.

    Returns:
        ``[t]`` int64 positions.

    Examples:
        >>> packed_positions(torch.tensor([0, 3, 5])).tolist()
        [0, 1, 2, 0, 1]
    """
    if (
        not isinstance(cu_seqlens, Tensor)
        or cu_seqlens.ndim != 1
        or cu_seqlens.is_floating_point()
        or cu_seqlens.is_complex()
        or cu_seqlens.dtype == torch.bool
        or cu_seqlens.shape[0] < 2
    ):
        raise PosencError(
            "`cu_seqlens` must be a 1-D integer tensor [n + 1] of cumulative lengths, got "
            f"{getattr(cu_seqlens, 'dtype', type(cu_seqlens).__name__)} of shape "
            f"{tuple(getattr(cu_seqlens, 'shape', ()))}"
        )
    given = as_positions(cu_seqlens, "cu_seqlens", on_device=True)
    cu = given.values
    if total is not None:
        total = check_int("total", total)
    end = "" if total is None else f" and end at the number of tokens {total}"
    rule = f"`cu_seqlens` must start at 0, never decrease{end}"
    if given.low is None:  # not read on the host: checked on the device
        ok = (cu[:1] == 0) & (cu[1:] >= cu[:-1]).all()
        assert_on_device(ok if total is None else ok & (cu[-1:] == total), rule)
    elif int(cu[0]) != 0 or bool((cu[1:] < cu[:-1]).any()) or total not in (None, int(cu[-1])):
        raise PosencError(f"{rule}, got {_short(cu.tolist())}")
    # the number of tokens: the end of cu_seqlens is read on the host only when not given
    count = int(cu[-1]) if total is None else total
    tokens = torch.arange(count, device=cu.device)
    doc = torch.searchsorted(cu[1:], tokens, right=True)
    out: Tensor = tokens - cu.index_select(0, doc)
    return out


def offset_positions(offset: Tensor, batch: int, length: Any, device: Any) -> Positions:
    """Positions ``offset[b] + i`` (``i < length``) of sequences continuing a KV cache.

    Args:
        offset: ``[batch]`` (or ``[]``) integer tensor, each ``>= 0``.
        batch, length: the batch and sequence sizes of the activations.
        device: where the positions go.

    Returns:
        ``[batch, length]`` (``[1, length]`` for a scalar offset) checked positions, with
        their bounds when the offsets could be read (no second pass over the rows).
    """
    if (
        offset.shape not in ((batch,), ())
        or offset.is_floating_point()
        or offset.is_complex()
        or offset.dtype == torch.bool
    ):
        raise PosencError(
            f"`offset` must be an int or an integer tensor [batch] = [{batch}], got "
            f"{offset.dtype} of shape {tuple(offset.shape)}"
        )
    given = as_positions(offset, "offset", on_device=True)
    rows = given.values.to(device).reshape(-1, 1) + torch.arange(length, device=device)
    if given.low is None or given.high is None:  # not read on the host: checked on the device
        assert_on_device(given.values >= 0, "`offset` must be >= 0")
        return Positions(rows, True, None, None)
    if given.low < 0:
        raise PosencError(f"`offset` must be >= 0, got {_short(offset.tolist())}")
    return Positions(rows, True, given.low, given.high + length - 1)


def _spread(rotary: Rotary, pos: Tensor | Positions) -> Any:
    """Multimodal sections: ids without the sections' leading axis serve every axis (text
    tokens, as transformers' modules broadcast them)."""
    k = len(rotary.sections or ())
    if not k:
        return pos
    if isinstance(pos, Positions):
        v = pos.values
        return Positions(v.expand(k, *v.shape), pos.integral, pos.low, pos.high)
    return pos.expand(k, *pos.shape)
