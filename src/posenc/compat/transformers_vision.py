"""transformers' own arithmetic for the rotary tables of its vision towers, kept apart from the
exact engine: ``posenc.rope_grid(..., preset=family, compat="transformers")``.

Each replay repeats the module's torch operations in their order and dtypes (transformers 5.x:
``PixtralVisionRotaryEmbedding``, ``Qwen2VLVisionRotaryEmbedding``,
``DINOv3ViTRopePositionEmbedding``, ``Sam2VideoVisionRotaryEmbedding``,
``Sam3ViTRotaryEmbedding``, ``Llama4VisionRotaryEmbedding``; Gemma 4's in
:mod:`posenc.compat.gemma4`): the float32 inverse frequencies as
the module builds them, its position ids (or DINOv3's patch centres) at the shapes it builds
them, the float32 products and cosines and sines, then its layout, so the tables are bit for bit
the module's on CPU torch (checked against transformers itself in the tests). Only the token
order is posenc's: the grid row-major, Llama 4's trailing class token left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from posenc.compat.grid import GridCall, check_form, compat_grid
from posenc.errors import PosencError, show
from posenc.spec.families.base import centred
from posenc.spec.families.dinov3 import DINOV3
from posenc.spec.families.llama4_vision import LLAMA4_VISION
from posenc.spec.families.pixtral import PIXTRAL
from posenc.spec.families.sam import SAM2, SAM3_VIT

Tables = tuple[torch.Tensor, torch.Tensor]
Replay = Callable[[Sequence[int], int, float, float, Any], Tables]
"""``(dims, dim, base, step, device) -> (cos, sin)``: ``step`` is SAM 3's id scale (1 for the
others, whose positions are fixed)."""


def _ladder(base: float, spatial: int) -> torch.Tensor:
    """``compute_axial_rope_parameters`` of Qwen2-VL's vision tower and SAM 2: ``1.0 / (base **
    (arange(0, spatial, 2, float) / spatial))``."""
    return 1.0 / (base ** (torch.arange(0, spatial, 2, dtype=torch.float) / spatial))


def inv_freq(family: str, dim: int, base: float) -> torch.Tensor:
    """The float32 inverse frequencies a family's module keeps in its ``inv_freq`` buffer (on
    the CPU): Pixtral's one ladder split by parity, DINOv3's ``1 / base ** arange(0, 1, 4 /
    dim)``, the others' ladder over ``dim / 2``."""
    if family == PIXTRAL.name:
        ladder = _ladder(base, dim)
        return torch.cat([ladder[0::2], ladder[1::2]])
    if family == DINOV3.name:
        return 1 / base ** torch.arange(0, 1, 4 / dim, dtype=torch.float32)
    return _ladder(base, dim // 2)


def ids_tables(family: str, ids: torch.Tensor, inv: torch.Tensor) -> Tables:
    """The module's ``forward(x, position_ids)`` at ``[N, 2]`` ids (Qwen2-VL's and Pixtral's
    (row, column); SAM 2's and SAM 3's (column, row)): ``ids.float() * inv_freq``, cos and
    sin, placed as the family places them (halves: Qwen2-VL, Pixtral; interleaved: SAM)."""
    freqs = ids[..., None].float() * inv.to(device=ids.device, dtype=torch.float)

    def recompose(f: torch.Tensor) -> torch.Tensor:
        if family == PIXTRAL.name:  # the row takes the even frequencies, the column the odd
            f = torch.stack([m[:, i % 2] for i, m in enumerate(f.chunk(2, dim=-1))], dim=1)
        both = torch.cat([f[:, 0], f[:, 1]], dim=-1)
        if family in (SAM2.name, SAM3_VIT.name):
            return both.repeat_interleave(2, dim=-1)
        return torch.cat([both, both], dim=-1)

    return recompose(freqs.cos()), recompose(freqs.sin())


def dinov3_coords(h: int, w: int, device: Any) -> torch.Tensor:
    """``get_patches_center_coordinates``: the ``[h * w, 2]`` patch centres in ``[-1, 1]``."""
    coords_h = torch.arange(0.5, h, dtype=torch.float32, device=device) / h
    coords_w = torch.arange(0.5, w, dtype=torch.float32, device=device) / w
    coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"), dim=-1).flatten(0, 1)
    return 2.0 * coords - 1.0


def dinov3_augment(coords: torch.Tensor, shift: Any, jitter: Any, rescale: Any) -> torch.Tensor:
    """``augment_patches_center_coordinates`` (training): the same draws, in the same order,
    from the same generator."""
    if shift is not None:
        shift_hw = torch.empty((1, 2), device=coords.device, dtype=coords.dtype)
        coords = coords + shift_hw.uniform_(-shift, shift)
    if jitter is not None:
        r = float(math.log(jitter))
        jitter_hw = torch.empty((1, 2), device=coords.device, dtype=coords.dtype)
        coords = coords * jitter_hw.uniform_(-r, r).exp()
    if rescale is not None:
        r = float(math.log(rescale))
        rescale_hw = torch.empty(1, device=coords.device, dtype=coords.dtype)
        coords = coords * rescale_hw.uniform_(-r, r).exp()
    return coords


def dinov3_tables(coords: torch.Tensor, inv: torch.Tensor) -> Tables:
    """``2 * pi * c * inv_freq``, ``[y | x]`` tiled twice (halves), cos and sin."""
    angles = 2 * math.pi * coords[:, :, None] * inv.to(coords.device)[None, None, :]
    angles = angles.flatten(1, 2).tile(2)
    return torch.cos(angles), torch.sin(angles)


def _row_major_ids(h: int, w: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.meshgrid(arange(h), arange(w), indexing="ij")``, flattened: each patch's row and
    column, row-major (int64, as the modules build them)."""
    rows, cols = torch.meshgrid(
        torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij"
    )
    return rows.flatten(), cols.flatten()


def _rows_first(family: str) -> Replay:
    """Qwen2-VL's and Pixtral's tables of one image: row-major (row, column) ids."""

    def replay(dims: Sequence[int], dim: int, base: float, step: float, device: Any) -> Tables:
        rows, cols = _row_major_ids(dims[0], dims[1], device)
        return ids_tables(family, torch.stack([rows, cols], dim=-1), inv_freq(family, dim, base))

    return replay


def _columns_first(family: str) -> Replay:
    """SAM 2's and SAM 3's tables at ``precompute_positions``' (column, row) ids (SAM 3's int64
    ids times the Python float ``window_size / columns``, float32)."""

    def replay(dims: Sequence[int], dim: int, base: float, step: float, device: Any) -> Tables:
        rows, cols = _row_major_ids(dims[0], dims[1], device)
        ids = torch.stack([cols, rows], dim=-1)
        ids = ids * step if family == SAM3_VIT.name else ids
        return ids_tables(family, ids, inv_freq(family, dim, base))

    return replay


def _dinov3(dims: Sequence[int], dim: int, base: float, step: float, device: Any) -> Tables:
    """``DINOv3ViTRopePositionEmbedding(pixel_values)`` in eval mode."""
    return dinov3_tables(dinov3_coords(dims[0], dims[1], device), inv_freq(DINOV3.name, dim, base))


def _llama4(
    dims: Sequence[int], dim: int, base: float, step: float, device: torch.device
) -> Tables:
    """``Llama4VisionRotaryEmbedding._compute_freqs_ci``: the complex table of the ``n x n``
    patches and the class token (built, then left out), as ``[N, dim]`` interleaved cos and
    sin (each complex slot's real and imaginary parts on its channel pair)."""
    n = dims[0]
    img_idx = torch.arange(n**2, dtype=torch.int32, device=device).reshape(n**2, 1)
    img_idx = torch.cat([img_idx, img_idx[:1]], dim=0)
    img_idx[-1, -1] = -2  # ID_CLS_TOKEN
    frequencies_x = img_idx % n
    frequencies_y = img_idx // n
    freq_dim = dim // 2
    rope_freq = 1.0 / (base ** (torch.arange(0, freq_dim, 2)[: (freq_dim // 2)].float() / freq_dim))
    rope_freq = rope_freq.to(device)
    freqs_x = ((frequencies_x + 1)[..., None] * rope_freq[None, None, :]).repeat_interleave(
        2, dim=-1
    )
    freqs_y = ((frequencies_y + 1)[..., None] * rope_freq[None, None, :]).repeat_interleave(
        2, dim=-1
    )
    freqs = torch.cat([freqs_x, freqs_y], dim=-1).float().contiguous()[..., ::2]
    freqs = freqs.masked_fill(img_idx.reshape(-1, 1, 1) < 0, 0)
    cos, sin = torch.cos(freqs)[:-1, 0], torch.sin(freqs)[:-1, 0]
    return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)


def _check_positions(
    family: str, dims: Sequence[int], starts: Sequence[float], steps: Sequence[float], cropped: bool
) -> None:
    """Refuse positions the module cannot produce (naming the argument)."""
    where = f"`compat='transformers'`: {family}'s module"
    if cropped:
        raise PosencError(f"{where} builds its own positions: `crop` is not one of them")
    if family == DINOV3.name:
        own = centred(tuple(dims))
    elif family == SAM3_VIT.name:  # ids times one Python float, window_size / columns
        scale = steps[0]
        if scale <= 0 or steps[1] != scale:
            raise PosencError(
                f"{where} scales both axes' ids by one positive factor: `step` must be one "
                f"value above 0, got {show(tuple(steps))}"
            )
        own = ([0.0, 0.0], [scale, scale])
    else:
        first = 1.0 if family == LLAMA4_VISION.name else 0.0
        own = ([first] * len(dims), [1.0] * len(dims))
    for name, given, expected in (("start", starts, own[0]), ("step", steps, own[1])):
        if list(given) != list(expected):
            raise PosencError(
                f"{where} puts the patches at `{name}` {show(tuple(expected))} for this grid, "
                f"got {show(tuple(given))}"
            )
    if family == LLAMA4_VISION.name and dims[0] != dims[1]:
        raise PosencError(
            f"{where} holds the square image_size / patch_size grid: `shape` must be (n, n), "
            f"got {tuple(dims)}"
        )


def _replay(call: GridCall, replay: Replay) -> tuple[Any, Any]:
    """``posenc.rope_grid(shape, dim, preset=family, compat="transformers")``: the module's
    float32 ``cos, sin`` of a ``(rows, columns)`` grid, ``[rows * columns, dim]``, tokens
    row-major, in posenc's layout of the family (halves: Qwen2-VL, Pixtral, DINOv3;
    interleaved: SAM 2, SAM 3, Llama 4, whose complex slots become channel pairs). Cast to
    ``dtype`` as the modules cast theirs (Pixtral and DINOv3 to the activations' dtype). NumPy
    out unless torch is asked for (a torch ``dtype``, ``device`` or ``like``)."""
    r = call.rotary
    check_form(call)  # the module's layout, blocks, factors and block order
    _check_positions(call.family, call.dims, call.starts, call.steps, call.cropped)

    def tables(work: torch.device) -> Tables:
        with torch.no_grad():
            return replay(call.dims, r.dim, float(r.base), float(call.steps[0]), work)

    return compat_grid(tables, call)


def qwen2_vl_vision(call: GridCall) -> tuple[Any, Any]:
    """``Qwen2VLVisionRotaryEmbedding``'s tables of one image (:func:`_replay`)."""
    return _replay(call, _rows_first(call.family))


def pixtral(call: GridCall) -> tuple[Any, Any]:
    """``PixtralVisionRotaryEmbedding``'s tables of one image (:func:`_replay`)."""
    return _replay(call, _rows_first(call.family))


def dinov3(call: GridCall) -> tuple[Any, Any]:
    """``DINOv3ViTRopePositionEmbedding``'s tables in eval mode (:func:`_replay`)."""
    return _replay(call, _dinov3)


def sam2(call: GridCall) -> tuple[Any, Any]:
    """``Sam2VideoVisionRotaryEmbedding``'s tables (:func:`_replay`)."""
    return _replay(call, _columns_first(call.family))


def sam3_vit(call: GridCall) -> tuple[Any, Any]:
    """``Sam3ViTRotaryEmbedding``'s tables at a layer's ids (:func:`_replay`)."""
    return _replay(call, _columns_first(call.family))


def llama4_vision(call: GridCall) -> tuple[Any, Any]:
    """``Llama4VisionRotaryEmbedding``'s tables, the class token left out (:func:`_replay`)."""
    return _replay(call, _llama4)
