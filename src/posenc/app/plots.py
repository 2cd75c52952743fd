"""Figures, drawn with matplotlib's object API (no pyplot state), headless, in one style.

The demo, the CLI and the documentation's gallery all draw through these functions, so a
figure looks the same wherever it is made: a bold title naming the preset and its width, the
posenc call in small type under it, legends outside the data, the sin/cos boundaries marked.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from posenc.app.files import need
from posenc.spec import layout
from posenc.spec.layout import ZERO
from posenc.spec.presets import get_preset

STYLE = {
    "font.size": 9.0,
    "axes.titlesize": 8.0,
    "axes.labelsize": 9.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8.0,
    "legend.frameon": False,
    "lines.linewidth": 1.3,
    "image.interpolation": "nearest",
}
DPI = 110
F = TypeVar("F", bound=Callable[..., Any])


@contextlib.contextmanager
def style() -> Iterator[None]:
    """:data:`STYLE` in force (matplotlib reads most settings when an artist is made)."""
    mpl = need("matplotlib", "plot", "plotting")
    with mpl.rc_context(STYLE):
        yield


def _styled(draw: F) -> F:
    """Draw under :func:`style`."""

    @functools.wraps(draw)
    def inner(*args: Any, **kwargs: Any) -> Any:
        with style():
            return draw(*args, **kwargs)

    return inner  # type: ignore[return-value]


def panels(title: str, rows: int, cols: int, width: float, height: float, **kw: Any) -> Any:
    """A titled figure of ``rows x cols`` axes (``kw``: ``sharey`` and the like), in the house
    style when called inside :func:`style`."""
    figure_module = need("matplotlib.figure", "plot", "plotting")
    fig = figure_module.Figure(figsize=(width, height), layout="constrained")
    fig.suptitle(title, fontweight="bold", fontsize=10)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def figure(title: str, subtitle: str = "", width: float = 7.5, height: float = 4.0) -> Any:
    """A titled figure and its one axes, the posenc call (``subtitle``) in small type above
    the data; in the house style when called inside :func:`style`."""
    fig, axes = panels(title, 1, 1, width, height)
    ax = axes[0, 0]
    if subtitle:
        ax.set_title(subtitle, loc="left", color="0.35", fontsize=7.5)
    return fig, ax


def _legend_outside(ax: Any) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def save(fig: Any, path: Path | str, fmt: str = "png") -> None:
    """Write ``fig`` at the one resolution every posenc figure uses."""
    fig.savefig(path, format=fmt, dpi=DPI, facecolor="white")


# --- what each channel holds -----------------------------------------------------------------


@dataclass(frozen=True)
class Channels:
    """For each output channel: ``kind`` ("sin", "cos", "zero" or "x"), ``axis`` (-1 for
    none) and ``period`` in positions (``inf`` where there is no wave)."""

    kind: tuple[str, ...]
    axis: tuple[int, ...]
    period: tuple[float, ...]
    tokens: str = "row-major"  # grids: the order the cells are flattened in

    def segments(self) -> list[tuple[int, int, str]]:
        """Runs of neighbouring channels that hold the same kind on the same axis."""
        out: list[tuple[int, int, str]] = []
        start = 0
        for j in range(1, len(self.kind) + 1):
            if j == len(self.kind) or (self.kind[j], self.axis[j]) != (
                self.kind[start],
                self.axis[start],
            ):
                out.append((start, j, self.kind[start]))
                start = j
        return out


def channels(preset: str, dim: int, ndim: int, options: dict[str, Any], *, grid: bool) -> Channels:
    """What each channel of ``preset`` at width ``dim`` holds, from the same layout plan the
    tables are computed with."""
    encoding = get_preset(preset).resolve(options, grid=grid)
    plan = layout.plan(encoding, dim, ndim, repr(preset))
    kinds, axes, periods = [], [], []
    for s in plan.src.tolist():
        if s >= 0:
            u = s // 2
            kinds.append("cos" if s % 2 else "sin")
            axes.append(int(plan.axis[u]))
            periods.append(2 * np.pi / abs(float(plan.omega[u]) * encoding.scale))
        else:
            kinds.append("zero" if s == ZERO else "x")
            axes.append(-1 if s == ZERO else -2 - s)
            periods.append(float("inf"))
    return Channels(tuple(kinds), tuple(axes), tuple(periods), encoding.tokens)


def axis_name(axis: int, ndim: int) -> str:
    """``row``/``column`` on images, ``frame``/``row``/``column`` on video, else ``axis k``."""
    names = {2: ("row", "column"), 3: ("frame", "row", "column")}.get(ndim)
    return names[axis] if names and 0 <= axis < ndim else f"axis {axis}"


def spread(ch: Channels, length: int, count: int = 4) -> list[int]:
    """``count`` sine channels of the first axis whose periods spread over the frequencies a
    table of ``length`` positions shows: from the fastest to about four times the length."""
    sines = [j for j, k in enumerate(ch.kind) if k == "sin" and ch.axis[j] == 0]
    visible = [j for j in sines if ch.period[j] <= 4 * max(length, 1)] or sines[:1]
    visible.sort(key=lambda j: ch.period[j])
    if len(visible) <= count:
        return visible
    picks = np.unique(np.round(np.linspace(0, len(visible) - 1, count)).astype(int))
    return [visible[i] for i in picks]


# --- the figures -----------------------------------------------------------------------------


@_styled
def curves(
    pe: np.ndarray,
    dims: Sequence[int],
    title: str,
    subtitle: str = "",
    *,
    offset: float = 0,
    ch: Channels | None = None,
) -> Any:
    """Selected channels against position: the classic picture."""
    fig, ax = figure(title, subtitle)
    x = offset + np.arange(pe.shape[0])
    for d in dims:
        label = f"channel {d}"
        if ch is not None and ch.kind[d] in ("sin", "cos"):
            label += f" ({ch.kind[d]}, period {ch.period[d]:.4g})"
        ax.plot(x, pe[:, d], label=label)
    ax.set(xlabel="position", ylabel="encoding value")
    _legend_outside(ax)
    return fig


@_styled
def heatmap(
    pe: np.ndarray,
    title: str,
    subtitle: str = "",
    *,
    xlabel: str = "position",
    ch: Channels | None = None,
) -> Any:
    """Every channel of every position, with the blocks of sines and cosines marked."""
    fig, ax = figure(title, subtitle)
    image = ax.imshow(pe.T, aspect="auto", origin="lower", cmap="RdBu_r", vmin=-1, vmax=1)
    ax.grid(False)
    ax.set(xlabel=xlabel, ylabel="channel")
    if ch is not None:
        segs = ch.segments()
        axes = len({a for a in ch.axis if a >= 0})
        if len(segs) <= 24:  # blocks: a line at each boundary, each block named on the right
            for lo, hi, kind in segs:
                if lo:
                    ax.axhline(lo - 0.5, color="black", linewidth=0.8)
                name = kind + (f", {axis_name(ch.axis[lo], axes)}" if axes > 1 else "")
                ax.annotate(
                    name,
                    xy=(1.01, (lo + hi) / 2 / len(ch.kind)),
                    xycoords="axes fraction",
                    va="center",
                    fontsize=7.5,
                )
        else:  # interleaved: the rule in the label, axis blocks still marked
            ax.set_ylabel("channel (even: sin, odd: cos)")
            for j in range(1, len(ch.axis)):
                if ch.axis[j] != ch.axis[j - 1] and ch.axis[j] >= 0 and ch.axis[j - 1] >= 0:
                    ax.axhline(j - 0.5, color="black", linewidth=0.8)
    fig.colorbar(image, ax=ax, label="value", pad=0.1 if ch is not None else 0.02)
    return fig


def cosine(body: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``body`` (along its last axis) with ``ref``."""
    norms = np.linalg.norm(body, axis=-1) * np.linalg.norm(ref)
    out: np.ndarray = body @ ref / np.maximum(norms, 1e-300)
    return out


def similarity_by_distance(pe: np.ndarray) -> np.ndarray:
    """Cosine similarity of position 0 with position k, for every k."""
    return cosine(pe, pe[0])


@_styled
def similarity(tables: dict[str, np.ndarray], title: str, subtitle: str = "") -> Any:
    """Similarity of two positions as a function of their distance, one curve per table."""
    fig, ax = figure(title, subtitle)
    for label, pe in tables.items():
        ax.plot(np.arange(pe.shape[0]), similarity_by_distance(pe), label=label)
    ax.set(xlabel="distance k between positions", ylabel="cos-similarity of PE(p), PE(p+k)")
    ax.axhline(0, color="grey", linewidth=0.5)
    _legend_outside(ax)
    return fig


def cells(pe: np.ndarray, shape: tuple[int, ...], tokens: str = "row-major") -> np.ndarray:
    """The grid's rows of ``pe`` (after any class tokens) as ``[*shape, dim]``."""
    body = pe[pe.shape[0] - int(np.prod(shape)) :]
    if tokens == "row-major":
        return body.reshape(*shape, pe.shape[-1])
    flipped = body.reshape(*shape[::-1], pe.shape[-1])
    return flipped.transpose(*range(len(shape) - 1, -1, -1), len(shape))


@_styled
def axis_similarity(
    pe: np.ndarray,
    shape: tuple[int, ...],
    title: str,
    subtitle: str = "",
    tokens: str = "row-major",
) -> Any:
    """Grids: similarity of the centre cell to the cells on each axis line through it."""
    grid = cells(pe, shape, tokens)
    centre = tuple(n // 2 for n in shape)
    fig, ax = figure(title, subtitle)
    for a, (n, style) in enumerate(zip(shape, ("o-", "x--", "s:", "^-."), strict=False)):
        line = grid[tuple(slice(None) if b == a else c for b, c in enumerate(centre))]
        sim = cosine(line, grid[centre])
        ax.plot(
            np.arange(n) - centre[a],
            sim,
            style,
            markersize=4,
            label=f"along the {axis_name(a, len(shape))} axis",
        )
    ax.set(xlabel=f"offset from the centre cell {centre}", ylabel="cosine similarity")
    _legend_outside(ax)
    return fig


@_styled
def patch_similarity(
    pe: np.ndarray,
    shape: tuple[int, int],
    cell: tuple[int, int],
    title: str,
    subtitle: str = "",
    tokens: str = "row-major",
) -> Any:
    """Similarity of one grid cell's encoding to every cell's, as an image of the grid."""
    grid = cells(pe, shape, tokens)
    sim = cosine(grid, grid[cell])
    fig, ax = figure(title, subtitle, 5.5, 4.6)
    image = ax.imshow(sim, cmap="viridis", origin="upper")
    ax.grid(False)
    ax.plot(cell[1], cell[0], marker="x", color="red", markersize=10, linestyle="none")
    ax.set(xlabel=f"column (red x: cell {cell})", ylabel="row")
    fig.colorbar(image, ax=ax, label="cosine similarity")
    return fig


@_styled
def error_by_position(
    errors: dict[str, tuple[np.ndarray, np.ndarray]], title: str, subtitle: str = ""
) -> Any:
    """Max error against position, log-log, one curve per implementation."""
    fig, ax = figure(title, subtitle)
    for label, (pos, err) in errors.items():
        ax.loglog(pos, np.maximum(err, 1e-12), marker="o", markersize=3, label=label)
    ax.set(xlabel="position", ylabel="max |error| against the exact value")
    _legend_outside(ax)
    return fig
