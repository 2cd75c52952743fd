"""``posenc demo``: a few figures on built-in defaults, and what they show, in numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from posenc.api.sinusoidal import encode, grid, table
from posenc.app import plots
from posenc.app.files import atomic, need
from posenc.errors import PosencError

FIGURES = ("curves.png", "heatmap.png", "similarity.png", "patch.png", "accuracy.png")


def _float32_tutorial(positions: np.ndarray, d: int) -> np.ndarray:
    """The PyTorch-tutorial recipe as most copies run it: everything in float32."""
    pos = positions.astype(np.float32)[:, None]
    div = np.exp(np.arange(0, d, 2, dtype=np.float32) * np.float32(-np.log(10000.0) / d))
    angle = pos * div
    out = np.empty((len(positions), d), dtype=np.float32)
    out[:, 0::2] = np.sin(angle)
    out[:, 1::2] = np.cos(angle)
    return out


def _exact(positions: np.ndarray, d: int) -> np.ndarray:
    """float64 from the formula, angles reduced exactly for integer positions."""
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)
    angle = positions.astype(np.float64)[:, None] * omega
    out = np.empty((len(positions), d))
    out[:, 0::2] = np.sin(angle)
    out[:, 1::2] = np.cos(angle)
    return out


def run(out_dir: Path, *, force: bool) -> int:
    need("matplotlib", "plot", "posenc demo")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / name for name in FIGURES]
    clash = [str(p) for p in paths if p.exists()]
    if clash and not force:
        raise PosencError(f"{clash[0]!r} exists; pass --force to overwrite, or --out DIR")
    lines = []

    ch = plots.channels("vaswani", 64, 1, {}, grid=False)
    dims = plots.spread(ch, 100)
    pe = table(100, 64, dtype=np.float64)
    figs = {
        "curves.png": plots.curves(
            pe, dims, "vaswani, d=64, 100 positions", "posenc.table(100, 64)", ch=ch
        )
    }
    lines.append(
        f"curves.png: the paper's encoding (d=64), sine channels {', '.join(map(str, dims))}: "
        f"periods {', '.join(f'{ch.period[d]:.1f}' for d in dims)} positions"
    )

    heat = table(256, 128, preset="whisper", dtype=np.float64)
    figs["heatmap.png"] = plots.heatmap(
        heat,
        "whisper, d=128, 256 positions",
        "posenc.table(256, 128, preset='whisper')",
        ch=plots.channels("whisper", 128, 1, {}, grid=False),
    )
    lines.append("heatmap.png: Whisper's table, sines in channels 0-63 and cosines in 64-127")

    tables = {
        "vaswani": table(512, 128, dtype=np.float64),
        "whisper (tensor2tensor spacing)": table(512, 128, preset="whisper", dtype=np.float64),
        "vaswani with base=500": table(512, 128, base=500.0, dtype=np.float64),
    }
    figs["similarity.png"] = plots.similarity(
        tables,
        "similarity of two positions by their distance, d=128",
        "posenc.table(512, 128, ...)",
    )
    sim = {k: plots.similarity_by_distance(v) for k, v in tables.items()}
    lines.append(
        "similarity.png: cos-similarity of PE(p) and PE(p+k) depends on k alone; at k = 10 / "
        "100: " + "; ".join(f"{k} {v[10]:.3f} / {v[100]:.3f}" for k, v in sim.items())
    )

    patches = grid((14, 14), 768, preset="mae", cls_token=True, dtype=np.float64)
    figs["patch.png"] = plots.patch_similarity(
        patches,
        (14, 14),
        (7, 7),
        "mae, d=768, grid 14x14",
        "posenc.grid((14, 14), 768, preset='mae', cls_token=True)",
    )
    body = patches[1:]
    near = plots.cosine(body, body[7 * 14 + 7])
    lines.append(
        "patch.png: MAE 14x14 grid (d=768); cell (7,7) vs its right neighbour "
        f"{near[7 * 14 + 8]:.3f}, "
        f"vs cell (7,13) {near[7 * 14 + 13]:.3f}, vs corner (0,0) {near[0]:.3f}"
    )

    starts = np.array([10, 100, 1_000, 10_000, 100_000, 1_000_000, 2**24 - 64])
    errors: dict[str, list[float]] = {"float32 tutorial recipe": [], "posenc float32": []}
    for s in starts:
        positions = s + np.arange(64)
        exact = _exact(positions, 512)
        errors["float32 tutorial recipe"].append(
            float(np.abs(_float32_tutorial(positions, 512) - exact).max())
        )
        errors["posenc float32"].append(
            float(np.abs(encode(positions, 512).astype(np.float64) - exact).max())
        )
    figs["accuracy.png"] = plots.error_by_position(
        {k: (starts, np.array(v)) for k, v in errors.items()},
        "max error of a float32 table, d=512, 64 positions from each start",
        "the PyTorch tutorial's recipe in float32 NumPy, and posenc.encode(positions, 512)",
    )
    tut, ours = errors["float32 tutorial recipe"], errors["posenc float32"]
    lines.append(
        "accuracy.png: over positions 100000-100063 (d=512) a float32 copy of the PyTorch "
        f"tutorial errs by {tut[4]:.1e}, posenc by {ours[4]:.1e}; just below 2^24 by "
        f"{tut[-1]:.1e} vs {ours[-1]:.1e}"
    )

    for name, fig in figs.items():
        path = out_dir / name
        with atomic(path) as tmp:
            plots.save(fig, tmp)
    print(f"posenc demo: wrote {len(figs)} figures to {out_dir}/")
    for line in lines:
        print(f"  {line}")
    return 0
