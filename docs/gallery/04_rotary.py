"""Rotary embeddings

RoPE rotates each pair of query/key channels by ``position x frequency``. The presets differ
in their frequencies (the base, and the long-context rules that stretch the slow ones:
Llama 3's, YaRN's) and in which channels form a pair (``halves``: channel ``i`` with
``i + d/2``, as ``rotate_half``; ``interleaved``: ``2i`` with ``2i + 1``, as GPT-J). The
frequencies below are read back from the tables posenc computes (the angle at position 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import posenc
from posenc.app import plots

PRESETS = ("llama", "qwen2", "llama3", "deepseek-v3", "gpt-oss")


def wavelengths(preset: str) -> np.ndarray:
    """2 pi / frequency of each channel pair, from the cos/sin of position 1."""
    p = posenc.preset(preset)
    cos, sin = posenc.rope(np.array([1]), p.dim, preset=preset, dtype=np.float64)
    layout = p.rotary.get("layout", "halves")
    if layout == "halves":
        c, s = cos[0, : p.dim // 2], sin[0, : p.dim // 2]
    elif layout == "interleaved":
        c, s = cos[0, 0::2], sin[0, 0::2]
    else:  # compact: one column per pair
        c, s = cos[0], sin[0]
    return 2 * np.pi / np.arctan2(s, c)


def figures() -> Iterator[tuple[str, str, str, Any]]:
    with plots.style():
        fig, ax = plots.figure(
            "rotary presets: the wavelength of each channel pair",
            "2 pi / angle at position 1 of posenc.rope([1], dim, preset=...)",
        )
        for name in PRESETS:
            w = wavelengths(name)
            ax.semilogy(np.arange(len(w)) / len(w), w, label=f"{name} (d={2 * len(w)})")
        ax.set(xlabel="pair index / number of pairs", ylabel="wavelength (positions)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    caption = (
        "Llama 3 and YaRN (DeepSeek-V3, gpt-oss) stretch the wavelengths beyond the original "
        "context (8192 and 4096 positions) by their factor and keep the short ones; in between "
        "they blend."
    )
    yield "", "rope-wavelengths", caption, fig

    for name in ("llama", "gptj"):
        dim = posenc.preset(name).dim
        cos, _ = posenc.rope(np.arange(256), dim, preset=name, dtype=np.float64)
        layout = posenc.preset(name).rotary["layout"]
        call = f"cos, sin = posenc.rope(np.arange(256), {dim}, preset={name!r})"
        fig = plots.heatmap(cos, f"{name}: cos table, {layout}, d={dim}", call)
        fig.axes[0].set_ylabel(
            "channel (pairs i, i + d/2)" if layout == "halves" else "channel (pairs 2i, 2i + 1)"
        )
        yield "cos tables", f"rope-{name}-cos", f"{layout}: `{call}`", fig


if __name__ == "__main__":
    for _, stem, caption, fig in figures():
        plots.save(fig, f"{stem}.png")
        print(caption)
