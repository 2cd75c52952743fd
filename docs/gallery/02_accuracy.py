"""float32 error against position

The float32 implementations in use form the angle ``position x frequency`` in float32, so
their error grows with the position: about one float32 ulp of the angle. posenc forms it in
float64 (or in float32 pieces, where there is no float64) and rounds each value once, so its
error stays at float32's own rounding of values in [-1, 1] (2^-25 = 3.0e-8) up to 2^24.

The float32 curves are the originals' own arithmetic, reproduced bit for bit by
``compat="original"`` (tested against the upstream code): the PyTorch tutorial's
``PositionalEncoding``, Whisper's ``sinusoids`` and diffusers' ``get_timestep_embedding``.
The truth is float64 NumPy written from each formula here (its own error is below 2e-9).
Each point is the max error over 64 consecutive positions, d = 512.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

import posenc
from posenc.app import plots

D = 512
STARTS = np.unique(np.round(2.0 ** np.linspace(4, 24, 21)).astype(np.int64)).clip(16, 2**24 - 64)


def truth(preset: str, positions: np.ndarray) -> np.ndarray:
    """float64 from the formula: interleaved with the paper's spacing (vaswani), or
    ``[sin | cos]`` halves with tensor2tensor's (whisper; diffusers' default timesteps)."""
    half = D // 2
    x = positions.astype(np.float64)[:, None]
    if preset == "vaswani":
        out = np.empty((len(positions), D))
        angle = x * 10000.0 ** (-np.arange(0, D, 2) / D)
        out[:, 0::2], out[:, 1::2] = np.sin(angle), np.cos(angle)
        return out
    angle = x * np.exp(-np.log(10000.0) * np.arange(half) / (half - 1))
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)


CURVES = {
    "PyTorch tutorial, float32": ("vaswani", "original"),
    "Whisper sinusoids, float32": ("whisper", "original"),
    "diffusers timesteps, float32": ("timestep", "original"),
    "posenc, float32": ("vaswani", None),
}


def errors() -> dict[str, np.ndarray]:
    out: dict[str, list[float]] = {label: [] for label in CURVES}
    for start in STARTS:
        positions = start + np.arange(64)
        for label, (preset, mode) in CURVES.items():
            got = posenc.table(
                64, D, preset=preset, offset=int(start), compat=mode, dtype=torch.float32
            )
            out[label].append(float(np.abs(got.double().numpy() - truth(preset, positions)).max()))
    return {k: np.array(v) for k, v in out.items()}


def figures() -> Iterator[tuple[str, str, str, Any]]:
    err = errors()
    at = int(np.searchsorted(STARTS, 100_000))
    caption = (
        f"Near position {STARTS[at]}: the PyTorch tutorial errs by "
        f"{err['PyTorch tutorial, float32'][at]:.1e}, posenc by "
        f"{err['posenc, float32'][at]:.1e}; just below 2^24 by "
        f"{err['PyTorch tutorial, float32'][-1]:.2g} and {err['posenc, float32'][-1]:.1e}. "
        "The dashed line is half a float32 ulp of values near 1 (2^-25): no float32 table can "
        "do better."
    )
    fig = plots.error_by_position(
        {k: (STARTS, v) for k, v in err.items()},
        f"max error of a table against position, d={D}",
        "64 positions from each start; truth: float64 from the formula",
    )
    fig.axes[0].axhline(2.0**-25, color="grey", linestyle="--", linewidth=0.8)
    yield "", "accuracy", caption, fig


if __name__ == "__main__":
    for _, stem, caption, fig in figures():
        plots.save(fig, f"{stem}.png")
        print(caption)
