"""The rotary presets of FLUX-style id tables of other families (HiDream, PRX, Ernie-Image,
FLUX.2, Flux3, Krea2): the ``IDS_PRESETS`` data (see :mod:`posenc.spec.presets.vision` for what
a vision preset holds).

These families read no grid: the model builds ``[N, n_axes]`` ids (text tokens and image
patches, their own convention) and each block of the head encodes one column of them, as
FLUX's ``flux`` preset does. ``posenc.rope(ids, d, preset=...)`` gives their tables; the
patch stand-ins (:func:`posenc.torch.patch`) repeat diffusers' own arithmetic with
``compat="original"``. Bria and Bria-FIBO are FLUX.1's numbers (``flux``).
"""

from __future__ import annotations

from posenc.spec.presets.base import RotaryPreset


def _ids(
    name: str, origin: str, summary: str, dim: int, base: float, axes: tuple[int, ...], quirks: str
) -> RotaryPreset:
    """An id-table family: interleaved pairs, one block per id column."""
    rotary = {"base": base, "layout": "interleaved", "axes_dim": axes}
    return RotaryPreset(name, origin, summary, dim, rotary, quirks)


IDS_PRESETS: dict[str, RotaryPreset] = {
    p.name: p
    for p in [
        _ids(
            "flux2",
            "diffusers Flux2PosEmbed(theta=2000, axes_dim=(32, 32, 32, 32)); BFL FLUX.2",
            "axial: interleaved blocks of 32, 32, 32, 32 channels for (t, row, col, layer) ids",
            128,
            2000.0,
            (32, 32, 32, 32),
            "ids are [N, 4]: text (0, 0, 0, l), image (0, row, col, 0), reference image k at "
            "t = 10 + 10 k; diffusers computes in float64, so its float32 tables are these "
            "(float32 on MPS/NPU, where they are not)",
        ),
        _ids(
            "flux3",
            "diffusers Flux3PosEmbed(theta=10000, axes_dim=(32, 32, 32, 32)) (code defaults)",
            "axial: interleaved blocks of 32, 32, 32, 32 channels, base 1e4",
            128,
            10000.0,
            (32, 32, 32, 32),
            "FLUX.2's recipe with Flux3Transformer2DModel's default rope_theta 10000: pass a "
            "checkpoint's own `base` if its config differs; float64 in diffusers",
        ),
        _ids(
            "krea2",
            "diffusers Krea2RotaryPosEmbed(theta=1000, axes_dim=(32, 48, 48)) (Krea 2)",
            "axial: interleaved blocks of 32, 48, 48 channels for (t, row, col) ids, base 1e3",
            128,
            1000.0,
            (32, 48, 48),
            "a copy of FluxPosEmbed (float64 in diffusers, float32 on MPS/NPU)",
        ),
        _ids(
            "hidream",
            "diffusers HiDreamImageEmbedND(theta=10000, axes_dims_rope=(64, 32, 32)); "
            "HiDream-I1 (BFL's rope)",
            "axial: interleaved blocks of 64, 32, 32 channels for (0, row, col) ids",
            128,
            10000.0,
            (64, 32, 32),
            "the module returns [B, N, 1, d/2, 2, 2] rotation matrices [[cos, -sin], [sin, "
            "cos]] per pair (the patch stand-in builds them from these tables); text ids are "
            "0 and non-square images pad their ids with 0 rows; float64 in diffusers",
        ),
        _ids(
            "prx",
            "diffusers PRXEmbedND(theta=10000, axes_dim=(32, 32)) (Photoroom PRX)",
            "axial: interleaved blocks of 32, 32 channels for (row, col) ids",
            64,
            10000.0,
            (32, 32),
            "the module returns [B, 1, N, d/2, 2, 2] rotation matrices, as HiDream's; image "
            "tokens only; float64 in diffusers",
        ),
        _ids(
            "ernie-image",
            "diffusers ErnieImageEmbedND3(theta=256, axes_dim=(32, 48, 48)) (ERNIE-Image)",
            "axial: interleaved blocks of 32, 48, 48 channels for (t, row, col) ids, base 256",
            128,
            256.0,
            (32, 48, 48),
            "the module returns the float32 angles [B, S, 1, d] (each pair's twice), and the "
            "attention rotates the halves (rotate_half) by them: channel i turns with the "
            "angle of column i, its partner i + d/2 with that of column i + d/2, so apply "
            "these tables with layout 'halves'; ids: image (text length, row, col), text "
            "(i, 0, 0); diffusers computes in float32",
        ),
    ]
}
"""The id-table families; the keywords of :func:`posenc.rope` each stands for."""
