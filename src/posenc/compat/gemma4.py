"""Gemma 4's vision rotary arithmetic, as transformers (``Gemma4VisionRotaryEmbedding``) and timm
(``Gemma4RotaryEmbedding2D``) compute it, kept apart from the exact engine:
``posenc.rope_grid(..., preset="gemma4-vision", compat="transformers")`` or ``compat="timm"``.

Both modules hold the float32 ladder ``1 / base ** (arange(0, d/2, 2) / (d/2))`` (``d/4``
frequencies), take ``[B, N, 2]`` ``(x, y)`` patch ids, multiply each axis's float32 ids by the
ladder in float32 (transformers elementwise, timm as a ``[F, 1] @ [1, N]`` matmul: one product
per entry, the same rounding, except that an ambient autocast lowers timm's matmul), take cos
and sin, and lay them out ``[x | x][y | y]``: halves inside each axis block (posenc's
``"block-halves"`` with ``blocks=2``). One replay serves both, bit for bit on CPU torch
(checked against each in the tests).
"""

from __future__ import annotations

from typing import Any

import torch

from posenc.compat.grid import GridCall, check_form, compat_grid
from posenc.errors import PosencError, show


def inv_freq(dim: int, base: float) -> torch.Tensor:
    """The float32 ``[dim / 4]`` ladder both modules keep in their ``inv_freq`` buffer (CPU)."""
    spatial = dim // 2
    return 1.0 / (base ** (torch.arange(0, spatial, 2, dtype=torch.float) / spatial))


def ids_tables(
    ids: torch.Tensor, inv: torch.Tensor, *, matmul: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The modules' ``forward(x, position_ids)`` before the cast to ``x``'s dtype: ``ids``
    ``[..., 2]`` (x, y), ``inv`` the buffer as it is now (upcast to float32 as both do);
    float32 ``(cos, sin)`` ``[..., 4 * len(inv)]``, laid out ``[x | x][y | y]``.

    ``matmul``: timm's product, a matmul of inner size 1 (the same bits as transformers'
    elementwise product, except under an ambient autocast, which lowers timm's matmul and not
    transformers' product)."""
    pos, inv = ids[..., None].float(), inv.to(device=ids.device, dtype=torch.float)
    freqs = pos @ inv[None, :] if matmul else pos * inv

    def recompose(f: torch.Tensor) -> torch.Tensor:
        fx, fy = f[..., 0, :], f[..., 1, :]
        return torch.cat([fx, fx, fy, fy], dim=-1)

    return recompose(freqs.cos()), recompose(freqs.sin())


def _check_positions(call: GridCall) -> None:
    """Refuse positions other than the processor's integer patch grid, naming the argument."""
    dims, starts, steps = call.dims, call.starts, call.steps
    if call.cropped or list(starts) != [0.0] * len(dims) or list(steps) != [1.0] * len(dims):
        raise PosencError(
            f"`compat={call.compat!r}`: Gemma 4's vision table is the processor's integer patch "
            f"grid: `start` 0 and `step` 1 (no `crop`), got start {show(tuple(starts))}, step "
            f"{show(tuple(steps))}"
        )


def grid_ids(h: int, w: int, device: Any) -> torch.Tensor:
    """The processor's ``[h * w, 2]`` (x, y) int64 ids of an ``h x w`` patch grid, row-major."""
    rows, cols = torch.meshgrid(
        torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij"
    )
    return torch.stack([cols.flatten(), rows.flatten()], dim=-1)


def rotary_grid(call: GridCall) -> tuple[Any, Any]:
    """``posenc.rope_grid((rows, columns), dim, preset="gemma4-vision", compat=…)``: the
    modules' float32 ``cos, sin`` ``[rows * columns, dim]`` of the grid's (x, y) ids, tokens
    row-major, cast to ``dtype`` (the modules cast theirs to the activations' dtype). NumPy
    out unless torch is asked for (a torch ``dtype``, ``device`` or ``like``)."""
    r = call.rotary
    check_form(call)  # block-halves, blocks=2 ([x | x][y | y]), the column block first
    _check_positions(call)

    def tables(work: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            return ids_tables(
                grid_ids(call.dims[0], call.dims[1], work), inv_freq(r.dim, float(r.base))
            )

    return compat_grid(tables, call)
