"""The recognisers of timm's rotary modules for :func:`posenc.torch.patch`, and their stand-in
:class:`TimmRotaryEmbedding`.

timm's vision transformers (``timm.models.eva``: EVA-02, naver's RoPE-ViT, Perception
Encoder, DINOv3; NaFlexViT, SAM's ViT, Qwen3's and DeepSeek's towers) take their rotary tables
from a module of ``timm.layers.pos_embed_sincos``:

- ``RotaryEmbeddingCat`` (and ``RotaryEmbedding``, the same tables as a ``(sin, cos)`` pair):
  ``dim / 4`` bands ``temperature ** (-k / (dim / 4))`` per grid axis, positions ``i +
  grid_offset``, rescaled to ``ref_feat_shape`` when it is set; :func:`posenc.rope_grid`'s
  ``vit-rope`` (no ``ref_feat_shape``), ``eva02`` and ``perception-encoder`` (with one).
  With ``in_pixels=True`` (pixel bands ``pi … pi * max_res / 2``, log- or evenly spaced, over
  ``linspace(-1, 1, n)``): ``timm-pixel``, ``timm-pixel-linear``.
- ``RotaryEmbeddingDinoV3``: periods ``temperature ** (2k / (dim / 2))`` over the patch
  centres mapped to ``[-1, 1]``; ``dinov3``.
- ``RotaryEmbeddingMRope``: one ladder, its frequencies reading the row, the column or a zero
  time axis in turn (Qwen3-VL's interleaved sections); ``timm-mrope``, replaced by a
  :class:`~posenc.torch._timm_mrope.TimmMRopeEmbedding`.

Each is recognised by class name and module path (timm is never imported), its configuration
read from its own attributes, and replaced by a :class:`TimmRotaryEmbedding` called as the
original is (``get_embed``, ``get_batch_embeds``, ``update_feat_shape``, ``forward``) with the
same output form: exact by default, or (``compat="original"``) timm's own float32 tables
(``posenc.rope_grid(..., compat="timm")``). Other grid types (pixel bands over integer
positions, a ``ref_feat_shape`` on the pixel grid), training-time coordinate augmentation,
DINOv3's min/max periods and the learned ``RotaryEmbeddingMixed`` are left alone, saying
why. ``Gemma4RotaryEmbedding2D`` (``timm.models.gemma4_vit``) gets the stand-in of transformers'
Gemma 4 vision module (:class:`~posenc.torch._gemma4_rope.Gemma4VisionRope`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.errors import PosencError
from posenc.spec.families import dinov3, eva, gemma4_vision, timm_mrope
from posenc.spec.families.timm_mrope import TIMM_MROPE
from posenc.torch._patch_hf_vision import gemma4_found
from posenc.torch._patching import LEARNED, Found, Recogniser, by_class, left_alone, unlike
from posenc.torch._timm_mrope import TimmMRopeEmbedding
from posenc.torch._timm_rope import CAT, PERIODS, TimmRope, TimmRotaryEmbedding

FORMS = {eva.CAT_CLASS: "cat", eva.PAIR_CLASS: "pair"}
"""timm's axial rotary classes and the form of their ``get_embed``: ``cat(sin, cos)`` ``[N, 2 *
dim]``, or the pair ``(sin, cos)``, each ``[N, dim]``."""
MEASURED = (32, 32)
"""The grid a module without a cached table is measured on when the model has no patch grid."""


def _shape(value: Any) -> tuple[int, ...] | None:
    return None if value is None else tuple(int(v) for v in value)


def _patch_grid(root: nn.Module) -> tuple[int, int]:
    grid = getattr(getattr(root, "patch_embed", None), "grid_size", None)
    try:
        h, w = (int(v) for v in grid)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return MEASURED
    return (h, w) if h > 0 and w > 0 else MEASURED


def _found(
    name: str, module: nn.Module, root: nn.Module, rope: TimmRope, kept: Tensor | None, free: Tensor
) -> Found:
    """The :class:`Found` of a recognised module: its kept table (``kept``, or none) and the
    dtype and device of its tables (``free``: the bands or periods)."""
    m: Any = module
    feat = m.feat_shape if kept is not None else None
    if feat is not None and len(feat) != 2:
        return left_alone(name, f"not covered yet: feat_shape {tuple(feat)} is not a 2D grid")
    like = free if kept is None else kept
    if like.is_meta:
        return left_alone(name, "its tables are on the meta device: load the model first")
    dtype = like.dtype if like.is_floating_point() else torch.float32

    def build(compat: str | None) -> nn.Module | str:
        try:
            return TimmRotaryEmbedding(
                rope, feat, compat=compat is not None, dtype=dtype, device=like.device
            )
        except PosencError as err:
            return f"not covered yet: {err}"

    trial = build(None)  # a table the stand-in cannot give (a width timm takes, posenc not)
    if isinstance(trial, str):
        return left_alone(name, trial)
    grid = None if feat is not None else _patch_grid(root)

    def run(mod: nn.Module) -> list[Tensor]:
        out = mod.get_embed() if grid is None else mod.get_embed(shape=grid)  # type: ignore[operator]
        return list(out) if isinstance(out, tuple) else [out]

    where = (
        f"its kept {feat[0]} x {feat[1]} grid"
        if feat is not None
        else f"a {grid[0]} x {grid[1]} grid"
        if grid is not None
        else ""
    )
    return Found(
        name,
        f"TimmRotaryEmbedding({rope.label()})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note=f"max diff over {where}",
    )


def _augmented(m: Any) -> bool:
    return bool(getattr(m, "aug_active", False)) or any(
        getattr(m, k, None) is not None for k in ("shift_coords", "jitter_coords", "rescale_coords")
    )


AUGMENTED = (
    "not covered yet: training-time coordinate augmentation (shift, jitter, rescale) "
    "draws random numbers posenc does not repeat"
)


@by_class(eva.MODULES)
def rotary_cat(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """timm's ``RotaryEmbeddingCat`` and ``RotaryEmbedding``: frequency bands over the patch
    indices (EVA-02, RoPE-ViT, Perception Encoder, …), measured over its kept grid, or the
    model's patch grid."""
    name = type(module).__name__
    m: Any = module
    try:
        in_pixels, grid_type = bool(m.in_pixels), str(m.grid_type)
        pixel = "pixel-linear" if bool(m.linear_bands) else "pixel"
        rope = TimmRope(
            CAT,
            FORMS[name],
            int(m.dim),
            float(m.temperature),
            float(m.grid_offset),
            str(m.grid_indexing),
            bool(m.rotate_half),
            _shape(m.ref_feat_shape),
            bands=pixel if in_pixels else "lang",
            max_res=float(m.max_res),
        )
        bands, cached = m.bands, bool(m._use_cached_embed)
        kept = (m.pos_embed if rope.form == "cat" else m.pos_embed_sin) if cached else None
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "timm")
    if grid_type != ("pixel" if in_pixels else "index"):
        return left_alone(
            name,
            f"not covered yet: grid_type {grid_type!r} with "
            f"in_pixels={in_pixels} (posenc repeats timm's 'index' grid of "
            "temperature bands and 'pixel' grid of pixel bands)",
        )
    if in_pixels and rope.ref_feat_shape is not None:
        return left_alone(
            name,
            "not covered yet: pixel bands with a ref_feat_shape (linspace(-1, 1, n) / n * ref)",
        )
    if _augmented(m):
        return left_alone(name, AUGMENTED)
    if rope.grid_indexing not in ("ij", "xy"):
        return left_alone(name, f"not covered: grid_indexing {rope.grid_indexing!r}")
    if rope.ref_feat_shape is not None and len(rope.ref_feat_shape) != 2:
        return left_alone(name, f"not covered yet: ref_feat_shape {rope.ref_feat_shape} is not 2D")
    if not isinstance(bands, Tensor) or (cached and not isinstance(kept, Tensor)):
        return left_alone(name, f"not covered: not the buffers of timm's {name}")
    return _found(name, module, root, rope, kept, bands)


@by_class(dinov3.TIMM)
def rotary_dinov3(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """timm's ``RotaryEmbeddingDinoV3``: periods over the patch centres in ``[-1, 1]``,
    measured over its kept grid, or the model's patch grid (DINOv3 models size it per call)."""
    name = type(module).__name__
    m: Any = module
    try:
        if m.min_period is not None and m.max_period is not None:
            return left_alone(
                name,
                "not covered yet: periods from min_period and "
                "max_period (min * (max / min) ** linspace(0, 1)), not a "
                "temperature",
            )
        rope = TimmRope(
            PERIODS,
            "cat",
            int(m.dim),
            float(m.temperature),
            float(m.grid_offset),
            str(m.grid_indexing),
            bool(m.rotate_half),
            normalize_coords=str(m.normalize_coords),
        )
        periods, kept = m.periods, m.pos_embed_cached
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "timm")
    if _augmented(m):
        return left_alone(name, AUGMENTED)
    if rope.grid_indexing not in ("ij", "xy") or rope.normalize_coords not in (
        "separate",
        "max",
        "min",
    ):
        return left_alone(
            name,
            f"not covered: grid_indexing {rope.grid_indexing!r}, "
            f"normalize_coords {rope.normalize_coords!r}",
        )
    if not isinstance(periods, Tensor) or not (kept is None or isinstance(kept, Tensor)):
        return left_alone(name, f"not covered: not the buffers of timm's {name}")
    return _found(name, module, root, rope, kept, periods)


@by_class("timm", "RotaryEmbeddingMixed")
def rotary_mixed(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """timm's ``RotaryEmbeddingMixed`` (RoPE-Mixed): learned frequencies, left alone."""
    return left_alone(type(module).__name__, LEARNED)


@by_class(timm_mrope.MODULE)
def rotary_mrope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """timm's ``RotaryEmbeddingMRope`` (GenLIP, NaFlexViT ``rope_type='mrope'``): Qwen3-VL's
    interleaved sections over an image, measured over the model's patch grid."""
    name = type(module).__name__
    m: Any = module
    try:
        dim, temperature = int(m.dim), float(m.temperature)
        section = tuple(int(s) for s in m.mrope_section)
        indexing, inv_freq = str(m.grid_indexing), m.inv_freq
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "timm")
    if _augmented(m):
        return left_alone(name, AUGMENTED)
    if indexing != "ij" or not isinstance(inv_freq, Tensor):
        return left_alone(
            name, f"not covered: grid_indexing {indexing!r}, or not the buffers of timm's {name}"
        )
    if inv_freq.is_meta:
        return left_alone(name, "its tables are on the meta device: load the model first")
    grid = _patch_grid(root)

    def build(compat: str | None) -> nn.Module | str:
        try:
            return TimmMRopeEmbedding(
                dim,
                section,
                temperature,
                compat=compat is not None,
                dtype=inv_freq.dtype,
                device=inv_freq.device,
            )
        except PosencError as err:
            return f"not covered yet: {err}"

    def run(mod: nn.Module) -> list[Tensor]:
        return [mod.get_embed(grid)]  # type: ignore[operator]

    label = f"TimmMRopeEmbedding({dim}, preset={TIMM_MROPE.name!r}, mrope_section={section})"
    return Found(
        name,
        label,
        build,
        numbers=lambda: run(module),
        probe=run,
        note=f"max diff over a {grid[0]} x {grid[1]} grid",
    )


@by_class(gemma4_vision.TIMM)
def rotary_gemma4(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """timm's ``Gemma4RotaryEmbedding2D`` (``timm.models.gemma4_vit``): transformers' Gemma 4
    vision arithmetic (``[x | x][y | y]``, base 100), the same stand-in as transformers'
    module, measured over the largest image of Gemma 4's processor and padding ids."""
    name = type(module).__name__
    m: Any = module
    try:
        head_dim, theta, size = int(m.head_dim), float(m.rope_theta), int(m.inv_freq.numel())
    except (AttributeError, TypeError, ValueError):
        return unlike(name, "timm")
    if 4 * size != head_dim:
        return left_alone(name, f"not covered: inv_freq of {size} for head_dim {head_dim}")
    return gemma4_found(name, module, theta)


RECOGNISERS: tuple[Recogniser, ...] = (
    rotary_cat,
    rotary_dinov3,
    rotary_mixed,
    rotary_mrope,
    rotary_gemma4,
)
"""The timm rotary recognisers, in the order they are asked."""
