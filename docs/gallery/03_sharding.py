"""Sharding layouts

What each rank computes under context parallelism (a sequence split over ranks) and tensor
parallelism (the channels split over ranks), as :func:`posenc.context_parallel_positions`
and :func:`posenc.tensor_parallel_channels` return it: one row per rank, its positions in its
local token order. ``zigzag`` gives rank ``r`` of ``w`` chunks ``r`` and ``2w - 1 - r``, so
every rank has the same causal attention work; packed sequences (``cu_seqlens``) restart
their positions at 0, and ``zigzag`` splits every sequence on its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import posenc
from posenc.app import plots

W = 4
CU = np.array([0, 16, 24, 32])  # three packed sequences of 16, 8 and 8 tokens
LAYOUTS = {
    "contiguous, 32 tokens": {"seq_len": 32, "layout": "contiguous"},
    "zigzag, 32 tokens": {"seq_len": 32, "layout": "zigzag"},
    "contiguous, packed 16 + 8 + 8": {"seq_len": None, "cu_seqlens": CU, "layout": "contiguous"},
    "zigzag, packed 16 + 8 + 8": {"seq_len": None, "cu_seqlens": CU, "layout": "zigzag"},
}


def _rows(kwargs: dict[str, Any]) -> np.ndarray:
    kw = dict(kwargs)
    seq_len = kw.pop("seq_len")
    return np.stack([posenc.context_parallel_positions(seq_len, r, W, **kw) for r in range(W)])


def _check() -> float:
    """Every rank's shard against the full table's rows and channels: 0 when bit for bit."""
    full = posenc.table(32, 64)
    worst = 0.0
    for kwargs in LAYOUTS.values():
        for positions in _rows(kwargs):
            worst = max(worst, float(np.abs(posenc.encode(positions, 64) - full[positions]).max()))
    for r in range(W):
        cut = posenc.tensor_parallel_channels(64, r, W)
        worst = max(worst, float(np.abs(posenc.table(32, 64, channels=cut) - full[:, cut]).max()))
    return worst


def figures() -> Iterator[tuple[str, str, str, Any]]:
    with plots.style():
        title = f"context parallelism: the positions each of {W} ranks encodes"
        fig, axes = plots.panels(title, len(LAYOUTS), 1, 7.5, 6.5)
        for ax, (name, kwargs) in zip(axes[:, 0], LAYOUTS.items(), strict=True):
            rows = _rows(kwargs)
            ax.imshow(rows, cmap="viridis", aspect="auto", vmin=0, vmax=31)
            ax.grid(False)
            for (r, j), p in np.ndenumerate(rows):
                colour = "white" if p < 20 else "black"
                ax.text(j, r, str(p), ha="center", va="center", fontsize=7, color=colour)
            ax.set_yticks(range(W), [f"rank {r}" for r in range(W)])
            ax.set_xticks([])
            ax.set_title(name, loc="left", fontsize=8)
    caption = (
        "posenc.context_parallel_positions(seq_len, rank, 4, layout=..., cu_seqlens=...). "
        "Cell colour and number: the position. Each rank encodes only its own positions; "
        f"its rows equal the full table's rows of the same positions (max difference {_check()})."
    )
    yield "", "context-parallel", caption, fig

    with plots.style():
        fig, ax = plots.figure(
            f"tensor parallelism: the channels each of {W} ranks computes, d=1024",
            "posenc.table(length, 1024, channels=posenc.tensor_parallel_channels(1024, rank, 4))",
            7.5,
            2.2,
        )
        for r in range(W):
            s = posenc.tensor_parallel_channels(1024, r, W)
            ax.barh(0, s.stop - s.start, left=s.start, color=f"C{r}", edgecolor="white")
            ax.text((s.start + s.stop) / 2, 0, f"rank {r}\n{s.start}-{s.stop - 1}", ha="center",
                    va="center", color="white", fontsize=8)  # fmt: skip
        ax.set(xlim=(0, 1024), yticks=[], xlabel="channel")
        ax.grid(False)
    caption = (
        "Each rank computes only its channel range, at a cost proportional to its width, bit "
        "for bit the same as that slice of the full table."
    )
    yield "", "tensor-parallel", caption, fig


if __name__ == "__main__":
    for _, stem, caption, fig in figures():
        plots.save(fig, f"{stem}.png")
        print(caption)
