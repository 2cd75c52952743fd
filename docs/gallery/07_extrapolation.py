"""Beyond the trained size: what each rule does to an axis' ladder

Two figures, for docs/extrapolation.md. The first: the wavelength of each pair of FLUX's row
block (56 channels, base 1e4, trained on 64 tokens per side) as sampled at 4096 x 4096 (256
tokens), read back from the tables ``posenc.rope_grid`` gives under each rule: position
interpolation and NTK-aware at s = 4, vision YaRN (the trained ladder for the fast pairs,
NTK-aware in the middle, interpolation for the slow ones), DyPE at three diffusion times,
which returns to the trained ladder as the time goes to 0, and ComfyUI-DyPE's rule at time 0,
which does not (its thresholds raised to 2 t^2 all become 1). The second: RIFLEx on
HunyuanVideo's temporal block (16 channels, base 256): the period of its intrinsic pair (k =
4, 50 latent frames) against the video's length in latent frames, before and after the rule;
the rule engages once the video is longer than that period, and keeps the period 1 / 0.9
times the length. ``python docs/gallery/07_extrapolation.py`` draws both and prints the
wavelengths of four pairs under each rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import posenc
from posenc.app import plots

ROW = slice(16, 72)  # FLUX's row block: channels 16 … 71 of a head of 128 (interleaved)
TRAINED = {"factor": 4.0, "original_max_position_embeddings": 64}
RULES: dict[str, dict[str, Any] | None] = {
    "trained ladder": None,
    "position interpolation (s = 4)": {"rope_type": "linear", "factor": 4.0},
    "NTK-aware (s = 4)": {"rope_type": "ntk-aware", "factor": 4.0},
    "vision YaRN": {"rope_type": "vision-yarn", **TRAINED},
    "DyPE, t = 1": {"rope_type": "dype", "time": 1.0, **TRAINED},
    "DyPE, t = 0.5": {"rope_type": "dype", "time": 0.5, **TRAINED},
    "DyPE, t = 0.1": {"rope_type": "dype", "time": 0.1, **TRAINED},
    "ComfyUI-DyPE, t = 0": {"rope_type": "dype-comfyui", "time": 0.0, **TRAINED},
}


def row_wavelengths(rule: dict[str, Any] | None) -> np.ndarray:
    """The 28 wavelengths of FLUX's row block under ``rule``: 2 pi over the angle of each pair
    at row 1, read from the table (the magnitude does not change an angle)."""
    cos, sin = posenc.rope_grid(
        (1, 2, 1), 128, preset="flux", scaling=(None, rule, None), dtype=np.float64
    )
    angle = np.arctan2(sin[1, ROW], cos[1, ROW])[0::2]  # interleaved: one channel per pair
    return 2 * np.pi / angle


def riflex_periods(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The period (latent frames) of HunyuanVideo's temporal pair 4, before and after RIFLEx,
    for each video length."""
    before, after = [], []
    for n in lengths:
        rule = {"rope_type": "riflex", "k": 4, "length": int(n)}
        pairs = []
        for scaling in (None, rule):
            cos, sin = posenc.rope_grid(
                (2, 1, 1),
                128,
                preset="hunyuan-video",
                scaling=(scaling, None, None),
                dtype=np.float64,
            )
            pairs.append(2 * np.pi / np.arctan2(sin[1, 6], cos[1, 6]))  # pair 4: channels 6, 7
        before.append(pairs[0])
        after.append(pairs[1])
    return np.array(before), np.array(after)


def figures() -> Iterator[tuple[str, str, str, Any]]:
    with plots.style():
        fig, ax = plots.figure(
            "FLUX at 4096 x 4096: the row block's wavelengths under each rule",
            'posenc.rope_grid((1, 256, 256), 128, preset="flux", scaling=(None, rule, rule))',
            8,
            4.6,
        )
        for name, rule in RULES.items():
            ax.semilogy(row_wavelengths(rule), ".-", label=name, linewidth=1, markersize=3)
        for tokens, what in ((64, "trained extent (64)"), (256, "sampled extent (256)")):
            ax.axhline(tokens, color="0.6", linewidth=0.8, linestyle="--")
            ax.annotate(what, (27, tokens), fontsize=7, ha="right", va="bottom")
        ax.set(xlabel="pair j of the row block", ylabel="wavelength (tokens)")
        ax.legend(loc="upper left", fontsize=7)
    caption = (
        "Interpolation stretches every wavelength 4 times, NTK-aware the slow ones only; vision "
        "YaRN keeps the fast pairs, NTK-aware in the middle, interpolation for the slowest; "
        "DyPE moves those bands toward the slow end as the diffusion time goes to 0; "
        "ComfyUI-DyPE's rule keeps interpolating the slow pairs at time 0."
    )
    yield "", "extrapolation-ladders", caption, fig
    lengths = np.arange(10, 131, 2)
    before, after = riflex_periods(lengths)
    with plots.style():
        fig, ax = plots.figure(
            "RIFLEx on HunyuanVideo: the intrinsic pair's period against the video's length",
            'scaling=({"rope_type": "riflex", "k": 4, "length": n}, None, None)',
            8,
            4.2,
        )
        ax.plot(lengths, before, label="period of pair 4, trained", linewidth=1.2)
        ax.plot(lengths, after, label="period of pair 4, RIFLEx", linewidth=1.2)
        ax.plot(lengths, lengths, "--", color="0.6", linewidth=0.8, label="the video's length")
        ax.set(xlabel="latent frames n", ylabel="latent frames")
        ax.legend(loc="upper left", fontsize=8)
    caption = (
        "Past 50 latent frames (about 197 frames) the video would cross the period of its "
        "intrinsic pair and repeat; RIFLEx keeps that period at n / 0.9."
    )
    yield "", "extrapolation-riflex", caption, fig


def main() -> None:
    print("| rule | pair 0 | pair 7 | pair 14 | pair 27 |")
    print("|---|---|---|---|---|")
    for name, rule in RULES.items():
        w = row_wavelengths(rule)
        print(f"| {name} | " + " | ".join(f"{w[j]:.4g}" for j in (0, 7, 14, 27)) + " |")
    for _, stem, _, fig in figures():
        plots.save(fig, f"{stem}.png")


if __name__ == "__main__":
    main()
