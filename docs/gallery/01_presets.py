"""Every sinusoidal preset

Each preset's table as a heatmap (channels against position, or against grid cell for the
grid presets, with the blocks of sines and cosines marked), and what the encoding does to
attention's view of two positions: their cosine similarity by distance for the 1-D presets,
one cell against the whole grid for the 2-D ones, the similarity along each axis for video.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import posenc
from posenc.app import plots

GRIDS_2D = ("mae", "diffusers-2d", "timm-2d", "hf-2d", "detr", "t2t-nd", "tatp22")


def _one_d(name: str) -> Iterator[tuple[str, str, str, Any]]:
    length = 1000 if name == "timestep" else 128
    pe = posenc.table(length, 64, preset=name, dtype=np.float64)
    ch = plots.channels(name, 64, 1, {}, grid=False)
    call = f"posenc.table({length}, 64, preset={name!r})"
    yield (
        name,
        f"{name}-table",
        f"`{call}`",
        plots.heatmap(pe, f"{name}, d=64, {length} positions", call, ch=ch),
    )
    long = posenc.table(512, 128, preset=name, dtype=np.float64)
    call = f"posenc.table(512, 128, preset={name!r})"
    title = f"{name}, d=128: similarity by distance"
    yield name, f"{name}-similarity", f"`{call}`", plots.similarity({name: long}, title, call)


def _two_d(name: str) -> Iterator[tuple[str, str, str, Any]]:
    pe = posenc.grid((8, 8), 64, preset=name, dtype=np.float64)
    ch = plots.channels(name, 64, 2, {}, grid=True)
    call = f"posenc.grid((8, 8), 64, preset={name!r})"
    title = f"{name}, d=64, grid 8x8"
    yield name, f"{name}-table", f"`{call}`", plots.heatmap(pe, title, call, xlabel="token", ch=ch)
    big = posenc.grid((14, 14), 256, preset=name, dtype=np.float64)
    call = f"posenc.grid((14, 14), 256, preset={name!r})"
    fig = plots.patch_similarity(big, (14, 14), (4, 9), f"{name}, d=256, grid 14x14", call)
    yield name, f"{name}-patch", f"`{call}`", fig


def _video(name: str) -> Iterator[tuple[str, str, str, Any]]:
    pe = posenc.grid((4, 6, 6), 96, preset=name, dtype=np.float64)
    ch = plots.channels(name, 96, 3, {}, grid=True)
    call = f"posenc.grid((4, 6, 6), 96, preset={name!r})"
    title = f"{name}, d=96, grid 4x6x6"
    yield name, f"{name}-table", f"`{call}`", plots.heatmap(pe, title, call, xlabel="token", ch=ch)
    big = posenc.grid((8, 16, 16), 384, preset=name, dtype=np.float64)
    call = f"posenc.grid((8, 16, 16), 384, preset={name!r})"
    title = f"{name}, d=384, grid 8x16x16"
    yield (
        name,
        f"{name}-similarity",
        f"`{call}`",
        plots.axis_similarity(big, (8, 16, 16), title, call),
    )


def _nerf() -> Iterator[tuple[str, str, str, Any]]:
    x = np.linspace(-1.0, 1.0, 400)
    pe = posenc.encode(x, 21, preset="nerf", dtype=np.float64)
    ch = plots.channels("nerf", 21, 1, {}, grid=False)
    call = "posenc.encode(np.linspace(-1, 1, 400), 21, preset='nerf')"
    fig = plots.heatmap(pe, "nerf, L=10 (d=21), one real coordinate", call, xlabel="sample", ch=ch)
    yield "nerf", "nerf-table", f"`{call}`", fig
    dims = [1, 5, 9, 13]  # sin(2^k pi x), k = 0, 2, 4, 6
    fig = plots.curves(pe, dims, "nerf: sines of 2^k pi x", call, ch=ch)
    ax = fig.axes[0]
    for line in ax.get_lines():
        line.set_xdata(x)
    ax.set_xlim(-1, 1)
    ax.set_xlabel("x")
    yield "nerf", "nerf-curves", "sin(2^k pi x) for k = 0, 2, 4, 6", fig


def figures() -> Iterator[tuple[str, str, str, Any]]:
    for name in posenc.presets("sinusoidal"):
        if name == "nerf":
            yield from _nerf()
        elif name == "diffusers-3d":
            yield from _video(name)
        elif name in GRIDS_2D:
            yield from _two_d(name)
        else:
            yield from _one_d(name)


if __name__ == "__main__":
    for _, stem, _, fig in figures():
        plots.save(fig, f"{stem}.png")
