"""Rotary tables of image and video models: wavelengths per axis, error against position

Two figures. The first shows, for each channel of one head, the grid axis it encodes and its
wavelength (2 pi over its frequency, read back from the table: the angle at position 1 of
that axis), for four families: how they cut the head into axis blocks, and their layouts
(pairs side by side when interleaved, a repeated sequence when in halves over the head).
The second, for docs/rope-vision.md: the largest cos/sin error of each family's table at the
positions up to p of one grid axis (the last: the width), for p = 1 … 1023, against the
float64 value of the formula. Curves: the originals' arithmetic as
posenc's compat modes repeat it bit for bit (diffusers' HunyuanVideo and CogVideoX in float32;
Wan's tables on a host with MPS, float32; transformers' Qwen2-VL vision tower, float32) and
posenc's exact tables in float32. Diffusers' Wan and FLUX compute in float64 off MPS: exact
already, so not drawn. ``python docs/gallery/06_vision_rope.py`` draws it and prints the
values at five positions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

import posenc
from posenc.app import plots

N = 1024
FAMILIES = {  # preset: (head dim, grid axes, compat mode of the original)
    "hunyuan-video": (128, 3, "diffusers"),
    "cogvideox": (64, 3, "diffusers"),
    "wan": (128, 3, "diffusers-mps"),
    "qwen2-vl-vision": (80, 2, "transformers"),
}
LABELS = {"hunyuan-video": "HunyuanVideo (diffusers, float32)",
          "cogvideox": "CogVideoX (diffusers, float32)",
          "wan": "Wan on an MPS host (diffusers, float32)",
          "qwen2-vl-vision": "Qwen2-VL vision (transformers, float32)"}  # fmt: skip


def errors() -> dict[str, np.ndarray]:
    """Max |error| over the channels and the positions up to each of 0 … N - 1 of the last
    grid axis."""
    out: dict[str, np.ndarray] = {}
    exact = np.zeros(N)
    for preset, (dim, k, mode) in FAMILIES.items():
        if preset not in posenc.presets("rotary"):
            continue
        shape = (1,) * (k - 1) + (N,)
        truth = posenc.rope_grid(shape, dim, preset=preset, dtype=np.float64)
        original = posenc.rope_grid(shape, dim, preset=preset, compat=mode, dtype=torch.float32)
        ours = posenc.rope_grid(shape, dim, preset=preset, dtype=np.float32)

        def worst(pair: Any, truth: Any = truth) -> np.ndarray:
            cos, sin = (np.abs(np.asarray(t, dtype=np.float64) - r).max(-1)
                        for t, r in zip(pair, truth, strict=True))  # fmt: skip
            return np.maximum.accumulate(np.maximum(cos, sin))  # up to each position

        out[LABELS[preset]] = worst([t.double().numpy() for t in original])
        exact = np.maximum(exact, worst(ours))
    out["posenc.rope_grid, float32 (every family)"] = exact
    return out


MARKS = (10, 100, 300, 600, 1023)
AXES = ("frames (t)", "rows (h)", "columns (w)")
WAVELENGTHS = {  # preset: (head dim, number of grid axes)
    "wan": (128, 3),
    "hunyuan-video": (128, 3),
    "cosmos": (128, 3),
    "pixtral": (64, 2),
}


def wavelengths(preset: str, dim: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per channel of the head: the grid axis it encodes (-1: none) and its wavelength, from
    the tables at position 1 of each axis in turn (positions start at 0 on every axis)."""
    axis = np.full(dim, -1)
    wave = np.full(dim, np.nan)
    for a in range(k):
        shape = tuple(2 if b == a else 1 for b in range(k))
        cos, sin = posenc.rope_grid(shape, dim, preset=preset, start=0.0, step=1.0,
                                    dtype=np.float64)  # fmt: skip
        angle = np.abs(np.arctan2(sin[1], cos[1]))
        moving = angle > 0
        axis[moving] = a
        wave[moving] = 2 * np.pi / angle[moving]
    return axis, wave


def figures() -> Iterator[tuple[str, str, str, Any]]:
    with plots.style():
        fig, axes = plots.panels("axial RoPE: the axis and wavelength of each channel", 2, 2,
                                 9, 6)  # fmt: skip
        for ax, (preset, (dim, k)) in zip(axes.ravel(), WAVELENGTHS.items(), strict=True):
            axis, wave = wavelengths(preset, dim, k)
            for a in range(k):
                on = axis == a
                ax.semilogy(np.flatnonzero(on), wave[on], ".", markersize=3,
                            label=AXES[a + 3 - k])  # fmt: skip
            ax.set_title(f"{preset} (d = {dim})", loc="left", fontsize=9)
            ax.set(xlabel="channel of the head", ylabel="wavelength (positions)")
            ax.legend(loc="lower right", fontsize=7)
    caption = (
        "Which grid axis each channel of a head encodes, and its wavelength: Wan's and "
        "HunyuanVideo's interleaved [t | h | w] blocks (each its own ladder from 2 pi), "
        "Cosmos's blocks in halves over the head with its per-axis bases, Pixtral's one ladder "
        "split by parity between rows and columns."
    )
    yield "", "rope-vision-wavelengths", caption, fig
    err = errors()
    positions = np.arange(1, N)
    with plots.style():
        fig, ax = plots.figure(
            "axial RoPE: cos/sin error against position",
            "posenc.rope_grid((1, 1, 1024), d, preset=…, compat=…)",
            8,
            4.4,
        )
        for name, e in err.items():
            ax.loglog(positions, np.maximum(e[1:], 1e-10), label=name, linewidth=1)
        ax.set(xlabel="position p along the grid axis", ylabel="max |error| up to p")
        ax.legend(loc="upper left", fontsize=8)
    caption = (
        "The originals' float32 tables (repeated bit for bit by posenc's compat modes) against "
        "posenc's exact ones, at positions 0 … 1023 of one grid axis; truth: float64."
    )
    yield "", "rope-vision-error", caption, fig


def main() -> None:
    err = errors()
    print("| table | " + " | ".join(f"p = {m}" for m in MARKS) + " |")
    print("|---|" + "---|" * len(MARKS))
    for name, e in err.items():
        print(f"| {name} | " + " | ".join(f"{e[m]:.2g}" for m in MARKS) + " |")
    for _, stem, _, fig in figures():
        plots.save(fig, f"{stem}.png")


if __name__ == "__main__":
    main()
