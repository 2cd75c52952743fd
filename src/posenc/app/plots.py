"""Figures, drawn with matplotlib's object API (no pyplot state), headless."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .files import need


def _figure(width: float = 7.0, height: float = 4.0) -> Any:
    figure = need("matplotlib.figure", "plot", "plotting")
    return figure.Figure(figsize=(width, height), layout="constrained")


def curves(pe: np.ndarray, dims: Sequence[int], title: str, offset: float = 0) -> Any:
    """Selected channels against position: the classic picture."""
    fig = _figure()
    ax = fig.add_subplot()
    x = offset + np.arange(pe.shape[0])
    for d in dims:
        ax.plot(x, pe[:, d], label=f"channel {d}")
    ax.set(title=title, xlabel="position", ylabel="encoding value")
    ax.legend(loc="upper right", fontsize="small")
    return fig


def heatmap(pe: np.ndarray, title: str, xlabel: str = "position") -> Any:
    """Every channel of every position."""
    fig = _figure()
    ax = fig.add_subplot()
    image = ax.imshow(
        pe.T, aspect="auto", origin="lower", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
    )
    ax.set(title=title, xlabel=xlabel, ylabel="channel")
    fig.colorbar(image, ax=ax, label="value")
    return fig


def similarity_by_distance(pe: np.ndarray) -> np.ndarray:
    """Cosine similarity of position 0 with position k, for every k."""
    norms = np.linalg.norm(pe, axis=1)
    return (pe @ pe[0]) / np.maximum(norms * norms[0], 1e-300)


def similarity(tables: dict[str, np.ndarray], title: str) -> Any:
    """Similarity of two positions as a function of their distance, one curve per table."""
    fig = _figure()
    ax = fig.add_subplot()
    for label, pe in tables.items():
        ax.plot(np.arange(pe.shape[0]), similarity_by_distance(pe), label=label)
    ax.set(
        title=title,
        xlabel="distance k between positions",
        ylabel="cosine similarity of PE(p) and PE(p+k)",
    )
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.legend(loc="upper right", fontsize="small")
    return fig


def patch_similarity(
    pe: np.ndarray, shape: tuple[int, int], cell: tuple[int, int], title: str
) -> Any:
    """Similarity of one grid cell's encoding to every cell's, as an image of the grid."""
    h, w = shape
    body = pe[-h * w :]
    ref = body[cell[0] * w + cell[1]]
    norms = np.linalg.norm(body, axis=1) * np.linalg.norm(ref)
    sim = (body @ ref / np.maximum(norms, 1e-300)).reshape(h, w)
    fig = _figure(5.5, 4.5)
    ax = fig.add_subplot()
    image = ax.imshow(sim, cmap="viridis", origin="upper")
    ax.plot(cell[1], cell[0], marker="x", color="red", markersize=10, label=f"cell {cell}")
    ax.set(title=title, xlabel="column", ylabel="row")
    ax.legend(loc="upper right", fontsize="small")
    fig.colorbar(image, ax=ax, label="cosine similarity")
    return fig


def error_by_position(errors: dict[str, tuple[np.ndarray, np.ndarray]], title: str) -> Any:
    """Max error against position, log-log, one curve per implementation."""
    fig = _figure()
    ax = fig.add_subplot()
    for label, (pos, err) in errors.items():
        ax.loglog(pos, np.maximum(err, 1e-12), marker="o", label=label)
    ax.set(title=title, xlabel="position", ylabel="max |error| vs exact")
    ax.legend(loc="upper left", fontsize="small")
    return fig
