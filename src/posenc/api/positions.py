"""Positions from token ids: ``fairseq_positions``, fairseq's ``make_positions``."""

from __future__ import annotations

from typing import Any

from posenc.errors import PosencError, check_int
from posenc.evaluate.libs import as_positions, backend_of


def fairseq_positions(tokens: Any, padding_idx: int) -> Any:
    """fairseq's ``make_positions``: ``padding_idx + 1, +2, …`` over non-pad tokens.

    Pad tokens get ``padding_idx`` (which the ``fairseq`` preset maps to an all-zero row);
    counting restarts on every row of a ``[batch, seq]`` input.

    Examples:
        >>> fairseq_positions([[5, 6, 7, 1, 1]], padding_idx=1).tolist()
        [[2, 3, 4, 1, 1]]
    """
    padding_idx = check_int("padding_idx", padding_idx, minimum=None)
    given = as_positions(tokens, "tokens")
    ids = given.values
    if not given.integral:
        raise PosencError(f"`tokens` must be integer token ids, got {ids.dtype}")
    mask = ids != padding_idx
    backend = backend_of(ids)
    return backend.cumsum(backend.astype(mask, backend.int64), axis=-1) * mask + padding_idx
