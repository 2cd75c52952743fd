"""The recognisers of transformers' vision-tower rotary modules for :func:`posenc.torch.patch`
(asked before the language-model ``*RotaryEmbedding`` recogniser), and their stand-ins.

Covered, each by its class name (and a module path under ``transformers.``):

- the Qwen2-VL form ``forward(x, position_ids)``, ``[N, 2]`` (row, column) ids in, float32
  ``[N, dim]`` halves out: Qwen2-VL, Qwen2.5-VL, Qwen3-VL (and MoE), Qwen2.5-Omni, Qwen3-Omni,
  Qwen3.5 (and MoE), GLM-4V (and MoE), GLM-OCR, PaddleOCR-VL (preset ``qwen2-vl-vision``);
- Pixtral's ``forward(x, position_ids)``, the same in ``x``'s dtype (preset ``pixtral``);
- SAM 2 video's memory attention (EdgeTAM video, SAM 3 tracker video alike): (column, row) ids,
  float32 ``[1, N, dim]`` interleaved (preset ``sam2``);
- SAM 3's ViT layers: the same at the layer's own ids, scaled to its 24 x 24 window (preset
  ``sam3-vit``);
- DINOv3's ``forward(pixel_values)``: the patch centres of the image's grid (preset ``dinov3``);
- Llama 4's vision ``forward(hidden_states)``: its complex ``freqs_ci`` table, the class token
  last (preset ``llama4-vision``);
- Gemma 4's vision encoder ``forward(x, position_ids)``: ``[B, N, 2]`` (x, y) ids, ``[x | x][y
  | y]`` tables in ``x``'s dtype (preset ``gemma4-vision``; stand-in
  :class:`~posenc.torch._gemma4_rope.Gemma4VisionRope`, shared with timm's module).

Each stand-in (:class:`VisionRope`) is called as the original is and returns what the model
consumes (shapes, dtype, device): exact tables from posenc by default; with
``compat="original"`` transformers' own float32 arithmetic (its replays in
:mod:`posenc.compat.transformers_vision`, here with the inverse frequencies the module's buffer
holds, rounded as ``.to()`` rounds that buffer). Nothing is kept in the state dict.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from posenc.compat import gemma4
from posenc.compat import transformers_vision as original
from posenc.errors import PosencError
from posenc.spec.families import dinov3, gemma4_vision, llama4_vision, pixtral, qwen2_vl_vision, sam
from posenc.spec.families.dinov3 import DINOV3
from posenc.spec.families.gemma4_vision import GEMMA4_VISION
from posenc.spec.families.llama4_vision import LLAMA4_VISION
from posenc.spec.families.pixtral import PIXTRAL
from posenc.spec.families.qwen2_vl_vision import QWEN2_VL_VISION
from posenc.spec.families.sam import SAM2, SAM3_VIT
from posenc.torch._gemma4_rope import Gemma4VisionRope
from posenc.torch._hf_vision_rope import VisionRope
from posenc.torch._patching import Found, Recogniser, by_class, chunks, left_alone, library_of

QWEN_GRID = (128, 128)
"""Where a Qwen2-VL-form module is measured (it has no image size): a 1792 x 1792 image in 14
px patches, 16384 patches (Qwen2-VL's default ``max_pixels`` allow 16384 merged tokens)."""


def _pair(v: Any) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), int(v))


# ---------------------------------------------------------------------------------------------
# the recognisers


def _buffer_form(name: str, module: Any, family: str, base: Any) -> tuple[int, float] | str:
    """``(dim, base)`` when the module's ``inv_freq`` is the family's float32 ladder (in the
    dtype the buffer has now) bit for bit; else why not."""
    inv = getattr(module, "inv_freq", None)
    if not isinstance(inv, Tensor) or inv.ndim != 1 or not inv.is_floating_point():
        return f"not covered: {name} has no inv_freq buffer of transformers' form"
    if inv.is_meta:
        return "its tables are on the meta device: load the model first"
    if float(getattr(module, "attention_scaling", 1.0)) != 1.0:
        return "not covered yet: an attention scaling other than 1"
    try:
        base = float(base)
    except (TypeError, ValueError):
        return f"not covered: {name}'s rope_theta {base!r} is not a number"
    dim = 4 * inv.numel() if family != PIXTRAL.name else 2 * inv.numel()
    own = original.inv_freq(family, dim, base).to(inv.dtype)
    if not torch.equal(own, inv.detach().cpu()):
        return (
            f"not covered yet: its inv_freq is not the {family} ladder of a head dim "
            f"{dim} (base {base:g}), bit for bit"
        )
    return dim, base


def _build(
    family: str, dim: int, base: float, dtype: torch.dtype, device: Any, **kw: Any
) -> Callable[[str | None], nn.Module | str]:
    def build(compat: str | None) -> nn.Module | str:
        try:
            return VisionRope(
                family, dim, base, compat=compat is not None, dtype=dtype, device=device, **kw
            )
        except PosencError as err:
            return f"not covered: {err}"

    return build


def grid_ids(shape: tuple[int, ...]) -> Tensor:
    """``[N, A]`` integer ids of a grid's tokens, row-major (the first axis slowest)."""
    return torch.cartesian_prod(*(torch.arange(n) for n in shape)).reshape(-1, len(shape))


def id_runs(module: nn.Module, ids: Tensor, dtype: torch.dtype) -> list[Tensor]:
    """The module's tables of ``ids``, a chunk of tokens at a time (``x`` of ``dtype``)."""
    x = torch.zeros(1, dtype=dtype, device=ids.device)
    out: list[Tensor] = []
    with torch.no_grad():
        for a, b in chunks(ids.shape[0]):
            out.extend(t.detach() for t in module(x, ids[a:b]))
    return out


def _ids_found(
    name: str, module: nn.Module, family: str, base: Any, ids: Tensor, where: str, **kw: Any
) -> Found:
    form = _buffer_form(name, module, family, base)
    if isinstance(form, str):
        return left_alone(name, form)
    dim, theta = form
    inv: Tensor = module.inv_freq  # type: ignore[assignment]
    ids = ids.to(inv.device)
    return Found(
        name,
        f"VisionRope({dim}, preset={family!r}, base={theta:g})",
        _build(family, dim, theta, inv.dtype, inv.device, **kw),
        numbers=lambda: id_runs(module, ids, torch.float32),
        probe=lambda new: id_runs(new, ids, torch.float32),
        note=f"max diff over {where}",
    )


def _rope_theta(config: Any) -> Any:
    params = getattr(config, "rope_parameters", None) or {}
    return params.get("rope_theta", getattr(config, "rope_theta", None))


@by_class(qwen2_vl_vision.MODULES)
def qwen2_vl_vision_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """The Qwen2-VL form (its record's ``MODULES``), measured at the (row, column) ids of a
    ``QWEN_GRID`` image."""
    name = type(module).__name__
    h, w = QWEN_GRID
    ids = grid_ids((h, w))
    return _ids_found(
        name,
        module,
        QWEN2_VL_VISION.name,
        _rope_theta(getattr(module, "config", None)),
        ids,
        f"the {h} x {w} patch grid",
    )


@by_class(pixtral.MODULE)
def pixtral_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Pixtral's, measured at the ids of its ``image_size / patch_size`` grid."""
    name = type(module).__name__
    config = getattr(module, "config", None)
    try:
        n = int(config.image_size) // int(config.patch_size)  # type: ignore[union-attr]
    except (AttributeError, TypeError, ValueError):
        return left_alone(name, "not covered: no image_size and patch_size in its config")
    ids = grid_ids((n, n))
    return _ids_found(
        name,
        module,
        PIXTRAL.name,
        _rope_theta(config),
        ids,
        f"the {n} x {n} patch grid (image_size / patch_size)",
    )


def _parent(root: nn.Module, path: str) -> nn.Module | None:
    if "." not in path:
        return root if path else None
    try:
        return root.get_submodule(path.rsplit(".", 1)[0])
    except AttributeError:
        return None


@by_class(sam.MEMORY)
def sam2_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """SAM 2 video's memory-attention rotary module (EdgeTAM, SAM 3 tracker alike), measured
    at its parent's own ``position_ids`` (and EdgeTAM's ``position_ids_k``), else the
    ``memory_attention_rope_feat_sizes`` grid."""
    name = type(module).__name__
    config = getattr(module, "config", None)
    parent = _parent(root, path)
    kept = [getattr(parent, k, None) for k in ("position_ids", "position_ids_k")]
    runs = [t for t in kept if isinstance(t, Tensor) and t.ndim == 2 and t.shape[-1] == 2]
    if runs:
        ids, where = torch.cat(runs).long(), "its attention's position_ids"
    else:
        try:
            w, h = (int(v) for v in config.memory_attention_rope_feat_sizes)  # type: ignore
        except (AttributeError, TypeError, ValueError):
            return left_alone(name, "not covered: no memory_attention_rope_feat_sizes")
        ids, where = grid_ids((h, w)).flip(-1), f"the {h} x {w} memory feature grid"
    return _ids_found(name, module, SAM2.name, _rope_theta(config), ids, where)


@by_class(sam.VIT)
def sam3_vit_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """SAM 3's ViT rotary module, inside a ``Sam3ViTLayer`` whose ``position_ids`` (its window
    grid, or the global one, at the window's scale) it is called with: measured at them."""
    name = type(module).__name__
    parent, config = _parent(root, path), getattr(module, "config", None)
    ids = getattr(parent, "position_ids", None)
    if not isinstance(ids, Tensor) or config is None:
        return left_alone(name, "not covered: not inside a Sam3ViTLayer with position_ids")
    try:
        size = int(getattr(parent, "window_size", 0))
        if size > 0:
            h, w = size, size
        else:  # precompute_positions: (image_size[1], image_size[0]) // patch_size
            image, patch = _pair(config.image_size), _pair(config.patch_size)
            h, w = image[1] // patch[1], image[0] // patch[0]
        scale = config.window_size / w
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return left_alone(name, "not covered: not the config of transformers' Sam3ViTLayer")
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    own = torch.stack([cols.flatten(), rows.flatten()], dim=-1) * scale
    if ids.shape != own.shape or not torch.equal(ids.detach().cpu(), own):
        return left_alone(
            name,
            "not covered: its layer's position_ids are not the grid "
            f"{h} x {w} at {scale:g} per patch",
        )
    return _ids_found(
        name,
        module,
        SAM3_VIT.name,
        _rope_theta(config),
        ids.detach(),
        f"its layer's position_ids ({h} x {w} patches, {scale:g} per patch)",
        grid=((h, w), scale),
    )


@by_class(dinov3.TRANSFORMERS)
def dinov3_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """DINOv3's rotary module, measured in eval mode (a copy) at its config's image size."""
    name = type(module).__name__
    m: Any = module
    form = _buffer_form(name, module, DINOV3.name, getattr(m, "base", None))
    if isinstance(form, str):
        return left_alone(name, form)
    dim, base = form
    try:
        patch = _pair(m.config.patch_size)
        image = _pair(m.config.image_size)
        if dim != int(m.head_dim):
            return left_alone(
                name, f"not covered: inv_freq of {dim // 4} for head_dim {m.head_dim}"
            )
    except (AttributeError, TypeError, ValueError):
        return left_alone(name, "not covered: not the config of transformers' DINOv3 ViT")
    h, w = image[0] // patch[0], image[1] // patch[1]
    inv = m.inv_freq
    pixels = torch.zeros(1, 3, h * patch[0], w * patch[1], device=inv.device)

    def run(mod: nn.Module) -> list[Tensor]:
        twin = copy.deepcopy(mod).eval()  # no random draws, the original's mode untouched
        with torch.no_grad():
            return [t.detach() for t in twin(pixels)]

    return Found(
        name,
        f"VisionRope({dim}, preset={DINOV3.name!r}, base={base:g})",
        _build(DINOV3.name, dim, base, inv.dtype, inv.device, grid=patch, config=m.config),
        numbers=lambda: run(module),
        probe=run,
        note=f"max diff over the {h} x {w} patch grid, eval mode",
    )


def _parts(t: Tensor) -> list[Tensor]:
    t = t.detach()
    if t.is_complex():
        return [t.real.contiguous(), t.imag.contiguous()]
    return [t]


@by_class(llama4_vision.MODULE)
def llama4_vision_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """Llama 4's vision rotary module: its ``freqs_ci`` buffer of the square patch grid and
    the class token, measured whole."""
    name = type(module).__name__
    m: Any = module
    try:
        c = m.config
        n = int(c.image_size) // int(c.patch_size)
        dim = int(c.hidden_size) // int(c.num_attention_heads)
        base = float(_rope_theta(c))
        freqs: Tensor = m.freqs_ci
    except (AttributeError, TypeError, ValueError):
        return left_alone(name, "not covered: not the config of transformers' Llama 4 vision")
    if freqs.is_meta:
        return left_alone(name, "its tables are on the meta device: load the model first")
    if tuple(freqs.shape) != (n * n + 1, 1, dim // 2) or dim % 4:
        return left_alone(
            name,
            f"not covered: freqs_ci {tuple(freqs.shape)} is not the "
            f"{n} x {n} grid and class token of head dim {dim}",
        )
    if not freqs.is_complex():
        return left_alone(
            name,
            "not covered: its freqs_ci was cast to a real dtype "
            "(model.to() keeps only the cosines): patch before casting",
        )

    def build(compat: str | None) -> nn.Module | str:
        try:
            out = VisionRope(
                LLAMA4_VISION.name,
                dim,
                base,
                compat=compat is not None,
                dtype=torch.float32,
                device=freqs.device,
                grid=n,
            )
        except PosencError as err:
            return f"not covered: {err}"
        return out.to(freqs.dtype) if freqs.dtype != torch.complex64 else out

    def probe(new: nn.Module) -> list[Tensor]:
        return _parts(new(torch.zeros(1, device=freqs.device)))

    return Found(
        name,
        f"VisionRope({dim}, preset={LLAMA4_VISION.name!r}, base={base:g})",
        build,
        numbers=lambda: _parts(m.freqs_ci),
        probe=probe,
        note=f"max diff over its freqs_ci ({n} x {n} patches, class token)",
    )


GEMMA4_GRID = (96, 105)
"""Where Gemma 4's vision rotary modules are measured: 10080 patches, the largest image of its
processor (``max_soft_tokens=1120``, 3 x 3 pooling)."""


def gemma4_ids(h: int, w: int, device: Any) -> Tensor:
    """``[1, h * w + 2, 2]`` (x, y) ids of an ``h x w`` grid and two padding rows ``(-1, -1)``,
    as Gemma 4's processor pads them (both modules rotate the padding too)."""
    ids = torch.cat([gemma4.grid_ids(h, w, "cpu"), torch.full((2, 2), -1)])
    return ids[None].to(device)


def gemma4_found(name: str, module: nn.Module, base: Any) -> Found:
    """The :class:`Found` of a Gemma 4 vision rotary module (transformers' or timm's: one
    ``inv_freq`` ladder, one forward), measured at ``GEMMA4_GRID`` and its padding."""
    form = _buffer_form(name, module, GEMMA4_VISION.name, base)
    if isinstance(form, str):
        return left_alone(name, form)
    dim, theta = form
    inv: Tensor = module.inv_freq  # type: ignore[assignment]
    h, w = GEMMA4_GRID
    ids = gemma4_ids(h, w, inv.device)

    def build(compat: str | None) -> nn.Module | str:
        try:
            return Gemma4VisionRope(
                dim,
                theta,
                compat=compat is not None,
                dtype=inv.dtype,
                device=inv.device,
                library=library_of(module),
            )
        except PosencError as err:
            return f"not covered: {err}"

    def run(mod: nn.Module) -> list[Tensor]:
        with torch.no_grad():
            return [t.detach() for t in mod(torch.zeros(1, device=inv.device), ids)]

    return Found(
        name,
        f"Gemma4VisionRope({dim}, preset={GEMMA4_VISION.name!r}, base={theta:g})",
        build,
        numbers=lambda: run(module),
        probe=run,
        note=f"max diff over the {h} x {w} patch grid and padding ids",
    )


@by_class(gemma4_vision.TRANSFORMERS)
def gemma4_vision_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """transformers' ``Gemma4VisionRotaryEmbedding`` (Gemma 4's vision encoder)."""
    name = type(module).__name__
    config = getattr(module, "config", None)
    kind = (getattr(config, "rope_parameters", None) or {}).get("rope_type")
    if kind != "axial":
        return left_alone(name, f"not covered: rope_type {kind!r} (posenc repeats 'axial')")
    return gemma4_found(name, module, _rope_theta(config))


RECOGNISERS: tuple[Recogniser, ...] = (
    qwen2_vl_vision_rope,
    pixtral_rope,
    sam2_rope,
    sam3_vit_rope,
    dinov3_rope,
    llama4_vision_rope,
    gemma4_vision_rope,
)
"""The transformers vision recognisers, in the order they are asked."""
