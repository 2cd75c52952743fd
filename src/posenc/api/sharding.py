"""Sharding: which positions and channels one rank of a parallel job computes.

Context parallelism splits the sequence: ``contiguous`` gives rank ``r`` of ``w`` the ``r``-th
of ``w`` equal chunks; ``zigzag`` (ring attention for causal models) cuts the sequence into
``2w`` chunks and gives rank ``r`` chunks ``r`` and ``2w - 1 - r``, so every rank has the same
amount of causal work. Tensor parallelism splits the channels into ``w`` equal ranges.

The positions returned here go to :func:`posenc.encode` (or a module's ``positions=``), the
channel range to ``channels=``; each rank then computes exactly its shard, bit for bit equal
to the same slice of the full table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
from numpy.typing import NDArray

from posenc.errors import MAX_POSITION, PosencError, check_int
from posenc.evaluate.libs import backend_for, is_torch

if TYPE_CHECKING:
    from posenc._types import Tensor

Layout = Literal["contiguous", "zigzag"]


def _rank(rank: Any, world_size: Any) -> tuple[int, int]:
    w = check_int("world_size", world_size, minimum=1)
    r = check_int("rank", rank)
    if r >= w:
        raise PosencError(f"`rank` must be < world_size = {w}, got {r}")
    return r, w


def _split(length: int, r: int, w: int, layout: str, what: str) -> np.ndarray:
    """Indices ``0 … length-1`` that rank ``r`` holds."""
    if layout == "contiguous":
        if length % w:
            raise PosencError(f"{what} must be divisible by world_size = {w}, got {length}")
        chunk = length // w
        return np.arange(r * chunk, (r + 1) * chunk)
    if layout == "zigzag":
        if length % (2 * w):
            raise PosencError(
                f"{what} must be divisible by 2 * world_size = {2 * w} for the zigzag layout, "
                f"got {length}"
            )
        chunk = length // (2 * w)
        return np.concatenate(
            [
                np.arange(r * chunk, (r + 1) * chunk),
                np.arange((2 * w - 1 - r) * chunk, (2 * w - r) * chunk),
            ]
        )
    raise PosencError(f"`layout` must be 'contiguous' or 'zigzag', got {layout!r}")


@overload
def context_parallel_positions(
    seq_len: int | None,
    rank: int,
    world_size: int,
    *,
    layout: Layout = ...,
    cu_seqlens: Tensor,
    offset: int = ...,
) -> Tensor: ...


@overload
def context_parallel_positions(
    seq_len: int | None,
    rank: int,
    world_size: int,
    *,
    layout: Layout = ...,
    cu_seqlens: np.ndarray | Sequence[int] | None = ...,
    offset: int = ...,
) -> NDArray[np.int64]: ...


def context_parallel_positions(
    seq_len: int | None,
    rank: int,
    world_size: int,
    *,
    layout: Layout = "contiguous",
    cu_seqlens: Any = None,
    offset: int = 0,
) -> Any:
    """The positions rank ``rank`` encodes under context parallelism.

    Args:
        seq_len: global sequence length (``None`` with ``cu_seqlens``).
        rank: this rank in the context-parallel group.
        world_size: the context-parallel group size.
        layout: ``"contiguous"`` or ``"zigzag"``.
        cu_seqlens: packed sequences, ``[n + 1]`` cumulative lengths: positions restart at 0
            in every sequence. ``contiguous`` splits the packed tokens; ``zigzag`` splits
            every sequence (each length divisible by ``2 * world_size``), as ring attention's
            varlen kernels do.
        offset: added to every position (a KV-cache length).

    Returns:
        int64 positions of this rank's tokens, in its local token order (NumPy, or torch
        when ``cu_seqlens`` is a tensor).

    Examples:
        >>> context_parallel_positions(8, 0, 2, layout="zigzag").tolist()
        [0, 1, 6, 7]
    """
    r, w = _rank(rank, world_size)
    limit = int(MAX_POSITION)
    offset = check_int("offset", offset, minimum=-limit, maximum=limit)
    if cu_seqlens is None:
        if seq_len is None:
            raise PosencError("give `seq_len` or `cu_seqlens`")
        seq_len = check_int("seq_len", seq_len, maximum=limit)
        if offset + seq_len > limit:
            raise PosencError(
                f"`offset` + `seq_len` must be <= 2^53 ({limit}), where every position is a "
                f"float64, got {offset} + {seq_len}"
            )
        positions = _split(seq_len, r, w, layout, "`seq_len`")
        return positions.astype(np.int64) + offset
    bounds = np.asarray(cu_seqlens.cpu() if is_torch(cu_seqlens) else cu_seqlens)
    if (
        bounds.ndim != 1
        or bounds.shape[0] < 2
        or bounds.dtype.kind not in "iu"
        or bounds[0] != 0
        or (np.diff(bounds) < 0).any()
    ):
        raise PosencError(
            "`cu_seqlens` must be [n + 1] non-decreasing integers starting at 0, got "
            f"{bounds.tolist()}"
        )
    if seq_len is not None and seq_len != int(bounds[-1]):
        raise PosencError(f"`seq_len` must equal cu_seqlens[-1] = {int(bounds[-1])}, got {seq_len}")
    if int(bounds[-1]) + offset > limit:
        raise PosencError(
            f"`offset` + cu_seqlens[-1] must be <= 2^53 ({limit}), got {offset} + {int(bounds[-1])}"
        )
    lengths = np.diff(bounds)
    within = np.concatenate([np.arange(n) for n in lengths]) if len(lengths) else np.empty(0)
    if layout == "contiguous":
        positions = within[_split(int(bounds[-1]), r, w, layout, "the number of packed tokens")]
    else:
        positions = np.concatenate(
            [_split(int(n), r, w, layout, f"sequence {i}'s length") for i, n in enumerate(lengths)]
        )
    out = positions.astype(np.int64) + offset
    if is_torch(cu_seqlens):
        return backend_for(like=cu_seqlens).from_numpy(out)
    return out


def tensor_parallel_channels(dim: int, rank: int, world_size: int) -> slice:
    """The channel range rank ``rank`` holds when ``dim`` is split ``world_size`` ways.

    Examples:
        >>> tensor_parallel_channels(1024, 1, 4)
        slice(256, 512, None)
    """
    r, w = _rank(rank, world_size)
    dim = check_int("dim", dim, minimum=1)
    if dim % w:
        raise PosencError(f"`dim` must be divisible by world_size = {w}, got {dim}")
    size = dim // w
    return slice(r * size, (r + 1) * size)
