"""``posenc.rope_grid``: the axial rotary tables of every token of an image or video grid.

One block of channels per grid axis (:class:`~posenc.spec.rotary.Rotary` with ``axes_dim``),
each grid axis at the positions ``start + i * step`` (integers by default, a crop of a base
grid with ``crop=``), the tokens flattened with the first axis outermost, as diffusers' video
and image transformers order them. The exact engine evaluates it per axis (float64 angles,
one rounding); ``compat=`` repeats a family's own arithmetic
(:mod:`posenc.compat.diffusers`).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from posenc import evaluate
from posenc._types import Floats, NumpyDType
from posenc.api.options import GridOptions, checked
from posenc.api.rope import rope_label
from posenc.errors import MAX_POSITION, PosencError, check_choice, check_int, check_real, show
from posenc.evaluate.libs import is_torch
from posenc.evaluate.positions import Progression, grid_shape
from posenc.spec.families import trained_of
from posenc.spec.ladders import SPACINGS
from posenc.spec.presets import get_rotary_preset
from posenc.spec.rotary import Rotary, rotary, with_axes_scaling
from posenc.spec.scaling import across, sized, timed

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11

    from posenc._types import Tensor, TorchDType


@overload
def rope_grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | None = ...,
    time: float | None = ...,
    block_axes: tuple[int, ...] | None = ...,
    start: float | Sequence[float] | None = ...,
    step: float | Sequence[float] | None = ...,
    crop: tuple[Sequence[float], Sequence[float]] | None = ...,
    dtype: TorchDType,
    device: Any = ...,
    like: Any = ...,
    compat: str | None = ...,
    **options: Unpack[GridOptions],
) -> tuple[Tensor, Tensor]: ...


@overload
def rope_grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | None = ...,
    time: float | None = ...,
    block_axes: tuple[int, ...] | None = ...,
    start: float | Sequence[float] | None = ...,
    step: float | Sequence[float] | None = ...,
    crop: tuple[Sequence[float], Sequence[float]] | None = ...,
    dtype: Any = ...,
    device: Any = ...,
    like: Tensor,
    compat: str | None = ...,
    **options: Unpack[GridOptions],
) -> tuple[Tensor, Tensor]: ...


@overload
def rope_grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | None = ...,
    time: float | None = ...,
    block_axes: tuple[int, ...] | None = ...,
    start: float | Sequence[float] | None = ...,
    step: float | Sequence[float] | None = ...,
    crop: tuple[Sequence[float], Sequence[float]] | None = ...,
    dtype: NumpyDType = ...,
    device: None = ...,
    like: np.ndarray | None = ...,
    compat: str | None = ...,
    **options: Unpack[GridOptions],
) -> tuple[Floats, Floats]: ...


@overload
def rope_grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | None = ...,
    time: float | None = ...,
    block_axes: tuple[int, ...] | None = ...,
    start: float | Sequence[float] | None = ...,
    step: float | Sequence[float] | None = ...,
    crop: tuple[Sequence[float], Sequence[float]] | None = ...,
    dtype: Any = ...,
    device: Any = ...,
    like: Any = ...,
    compat: str | None = ...,
    **options: Unpack[GridOptions],
) -> tuple[Any, Any]: ...


def rope_grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | None = None,
    time: float | None = None,
    block_axes: tuple[int, ...] | None = None,
    start: float | Sequence[float] | None = None,
    step: float | Sequence[float] | None = None,
    crop: tuple[Sequence[float], Sequence[float]] | None = None,
    dtype: Any = None,
    device: Any = None,
    like: Any = None,
    compat: str | None = None,
    **options: Unpack[GridOptions],
) -> tuple[Any, Any]:
    """The rotary tables ``cos, sin`` of every token of a grid (axial RoPE: image and video
    transformers).

    Args:
        shape: the grid, first axis outermost in the token order: ``(H, W)`` patches of an
            image, ``(F, H, W)`` latent frames, rows and columns of a video.
        dim: the rotary width (the head dimension): the blocks of ``axes_dim`` add up to it.
        preset: an image or video family (diffusers' ``wan``, ``hunyuan-video``,
            ``cogvideox``, ``hunyuan-dit``, ``flux``; transformers' ``qwen2-vl-vision``,
            ``pixtral``, ``dinov3``, ``sam2``, …; timm's; ``posenc.presets("rotary")``): its
            base, layout, how it splits ``dim`` into blocks and, for some, its coordinates.
            Keywords given beside it replace the preset's.
        time: the diffusion time (1: pure noise, 0: the clean image) for the rules that
            follow it (``"dype"``, ``"lumina-time"``), which refuse to run without one: given
            to each that has no ``"time"`` of its own.
        block_axes: the grid axis each block encodes (default: block ``a`` encodes axis
            ``a``; ``(1, 0)``: the column block first).
        start: the position of each axis's first row (one value, or one per axis; default 0,
            or the preset's: DINOv3's centred grids, Qwen-Image's, LTX-Video's -1).
        step: the distance between rows (one value, or one per axis; default 1, or the
            preset's).
        crop: ``((top, left, …), (bottom, right, …))``: the last axes take positions ``top
            + i * (bottom - top) / n`` (the originals' ``numpy.linspace(top, bottom, n,
            endpoint=False)``: a crop of a base grid, HunyuanDiT and CogVideoX 1.0), the axes
            before them ``0 … n - 1``. Excludes ``start`` and ``step``.
        dtype: output dtype (default float32 for NumPy output, torch's default dtype for
            torch output); a torch dtype makes the output torch.
        device: the torch device of the result; giving one makes the output torch.
        like: an array whose library and device the result follows (not its dtype).
        compat: the family's own arithmetic, its positions included: ``"diffusers"``
            (``"diffusers-mps"``: Wan's and Lumina-Image-2.0's float32 tables on a host with
            MPS), ``"transformers"``, ``"timm"``; ``posenc.preset(name).originals`` lists a
            family's modes. The replay runs torch ops on ``device`` (else ``like``'s, else
            the CPU), checked bit for bit against the originals on CPU torch, and its values
            are cast to ``dtype``: the original's bits in a dtype that holds them (float32
            tables in float32 or float64; Lumina-Image-2.0's float64 ones only in float64).
            Only grid positions ``start + i * step`` the original can produce are taken;
            positions no grid holds (ids) are replayed by :func:`posenc.torch.patch`
            (``compat="original"``). With one rule per grid axis (``scaling``), the rule as
            its references apply it within the family's code, where one does: RIFLEx
            (thu-ml's on HunyuanVideo and CogVideoX, kijai's float64 on Wan: ``"riflex"``),
            Cosmos' ``rope_scale`` (``"ntk-aware"``, ``"ntk"``), Lumina-Next's pipeline
            (``"lumina-time"``, ``"linear"``, ``"ntk"``); any other is refused, naming it.
            Default: exact.
        **options: the table's keywords (:class:`posenc.GridOptions`), each replacing the
            preset's: ``base`` (``theta``, 10000), ``layout`` (``"interleaved"``: pairs
            ``(2i, 2i+1)``, each block's own: FLUX, Wan, HunyuanVideo, CogVideoX;
            ``"halves"``: both halves holding every block: Qwen2-VL's vision tower, Pixtral;
            ``"block-halves"``: Allegro, LTX-2's split heads; ``"compact"``), ``blocks``,
            ``axes_dim`` (the width of each block, one per grid axis, adding up to ``dim``),
            ``axes_scale``, ``axes_base`` (Cosmos's per-axis bases) and ``scaling``: a rule
            past the trained size, for every axis (a dict) or one per grid axis (a tuple of
            dicts, None for an axis left as it is), applied to that axis' block ladder (its
            width ``d_a`` and base): ``{"rope_type": "riflex", "k": 4, "length": 66}``
            (RIFLEx: pair ``k``, 1-based, lowered to ``0.9 * 2 pi / length``, once ``length``
            latent frames pass its period ``round(2 pi / omega)``, or with ``"always":
            True``), ``{"rope_type": "ntk", "factor": a}`` (the base times ``a``),
            ``{"rope_type": "ntk-aware", "factor": s}`` (times ``s ** (d_a / (d_a - 2))``),
            ``{"rope_type": "linear", "factor": s}`` (frequencies ``/ s``), ``"imax"``,
            ``"multi-inter"``, ``"vision-yarn"`` (its magnitude on the axes it is given for),
            ``"dype"``, ``"dype-comfyui"`` and ``"lumina-time"`` (with ``"time"``: 1 pure
            noise), and transformers' rules (docs: *Beyond the trained size*). Exact: the
            rule's float64 frequencies and magnitude, rounded once with the table. A rule of
            one grid axis takes what it lacks from the grid and the size the preset's family
            was trained at (its record's ``trained``): RIFLEx's ``length`` is ``shape[a]`` and
            its pair the family's (HunyuanVideo 4, CogVideoX 2, Wan 6); vision YaRN's and
            DyPE's ``original_max_position_embeddings`` the trained extent (FLUX 64) and
            ``factor`` ``shape[a]`` over it (pass ``factor`` for a crop of a larger image).

    Returns:
        ``(cos, sin)``, each ``[prod(shape), dim]`` (``dim / 2`` compact). NumPy arrays,
        unless a torch ``dtype``, a ``device`` or a torch ``like`` is given: then torch
        tensors on ``device`` (else ``like``'s device, else the CPU). Without ``compat`` a
        JAX (or other array API) ``like`` gives its library; with ``compat`` the output is
        NumPy or torch (bfloat16 only as torch), whatever computed it. In ``dtype``, by
        default float32 (NumPy) or torch's default dtype (torch).

    Examples:
        >>> cos, sin = posenc.rope_grid((21, 45, 80), 128, preset="wan")   # 720p, 81 frames
        >>> cos.shape
        (75600, 128)
        >>> cos, sin = posenc.rope_grid((32, 24), 88, preset="hunyuan-dit",
        ...                             crop=((0, 4), (32, 28)))   # 512 x 384 on a 32 x 32 base
    """
    own = ("preset", "time", "block_axes", "start", "step", "crop", "dtype", "device", "like")
    given = checked("rope_grid", options, GridOptions, (*own, "compat"))
    scaling = timed(given.pop("scaling", None), time)
    per_axis = scaling if isinstance(scaling, list | tuple) else None
    r = rotary(dim, preset=preset, scaling=None if per_axis is not None else scaling, **given)
    if r.sections is not None or (r.axes_dim is None and not SPACINGS[r.spacing].shared):
        raise PosencError(
            "`rope_grid` needs one block per grid axis: pass `axes_dim` or an axial preset "
            "(wan, hunyuan-video, cogvideox, hunyuan-dit, flux, qwen2-vl-vision, pixtral, …)"
        )
    k = r.ndim
    dims = grid_shape(shape, k, axes=grid_axes_rule(r))
    read = block_axes_of(block_axes, preset, k)  # the grid axis of each block
    if per_axis is not None:  # one rule per grid axis, to the block that encodes it
        per_axis = with_training(per_axis, preset, dims)
        r = with_axes_scaling(r, per_axis, [read.index(g) for g in range(k)])
    recipe = get_rotary_preset(preset).positions if preset is not None else None
    if recipe is not None and crop is None:  # the family's coordinates, where none are given
        own_start, own_step = recipe(dims)
        start = own_start if start is None else start
        step = own_step if step is None else step
    starts, steps = _coordinates(dims, start, step, crop)
    if compat is not None and not r.scaling.is_default:
        raise PosencError(
            "`scaling` with `compat`: one rule for the whole table is not a family's own "
            "arithmetic; give one rule per grid axis (those with a reference are replayed), or "
            "drop `compat` for the rule's exact tables"
        )
    if compat is not None:
        family = get_rotary_preset(preset) if preset is not None else None
        if family is None or not family.originals:
            raise PosencError(
                f"`compat` repeats a family's own arithmetic: pass a preset that has one "
                f"(posenc.preset(name).originals), got preset={show(preset)}"
            )
        compat = check_choice("compat", compat, family.originals)
        from posenc.compat.grid import GridCall, compat_grid  # torch code: only for compat

        call = GridCall(
            family.name,
            compat,
            tuple(dims),
            r,
            tuple(read),
            tuple(starts),
            tuple(steps),
            crop is not None,
            dtype,
            device,
            like,
        )
        if 0 in dims:  # no row to replay (an empty axis has no positions to check either)
            return compat_grid(_no_rows, call)
        where, function = family.replays[compat].split(":")
        return getattr(importlib.import_module(where), function)(call)  # type: ignore[no-any-return]
    axes = [Progression(starts[g], steps[g], dims[g]) for g in read]
    order = [read.index(g) for g in range(k)]
    if is_torch(like) and device is None:
        device = like.device
    both = evaluate.rotary_grid(
        r.plan(None, rope_label(r)), axes, order, dtype=dtype, device=device, like=like
    )
    w = r.width
    return both[:, :w], both[:, w:]


def _no_rows(device: Any) -> Any:
    raise AssertionError("an empty grid is never computed")  # pragma: no cover


def with_training(rules: Sequence[Any], preset: Any, dims: tuple[int, ...]) -> Any:
    """One rule per grid axis, each with the keys its rule takes from the grid and the size
    the preset's family was trained at (:func:`posenc.spec.scaling.sized`): the extents of
    ``dims``, the family's trained grid, and where its videos repeat (the first axis, time)."""
    if len(rules) != len(dims):
        return rules  # refused, naming the count, by with_axes_scaling
    trained = trained_of(preset)
    grid = trained.grid if trained is not None and len(trained.grid) == len(dims) else ()
    repeats = trained.repeats_at if trained is not None else None
    family = get_rotary_preset(preset).name if preset is not None else None
    filled = [
        sized(
            rule,
            n,
            grid[g] if grid else None,
            repeats if g == 0 else None,
            where=f"scaling[{g}]",
            family=family,
        )
        for g, (rule, n) in enumerate(zip(rules, dims, strict=True))
    ]
    filled = across(filled)
    return type(rules)(filled) if isinstance(rules, tuple) else filled


def grid_axes_rule(rotary: Rotary) -> str:
    """Why a grid under ``r`` has ``r.ndim`` axes (for :func:`grid_shape`'s message)."""
    if rotary.axes_dim is None:  # LTX-Video's one ladder over its coordinates
        return "for this preset"
    return f"(one per block of axes_dim {rotary.axes_dim})"


def block_axes_of(given: Any, preset: str | None, k: int) -> list[int]:
    """The grid axis of each block: ``given``, the preset's, or ``0 … k - 1``."""
    if given is None and preset is not None:
        given = get_rotary_preset(preset).block_axes
    if given is None:
        return list(range(k))
    if not isinstance(given, list | tuple) or sorted(given) != list(range(k)):
        raise PosencError(
            f"`block_axes` must order the {k} grid axes (a permutation of {tuple(range(k))}), "
            f"got {show(given)}"
        )
    return [check_int(f"block_axes[{i}]", a) for i, a in enumerate(given)]


def per_axis(name: str, value: Any, k: int, default: float) -> list[float]:
    if value is None:
        return [default] * k
    values = list(value) if isinstance(value, list | tuple) else [value] * k
    if len(values) != k:
        raise PosencError(f"`{name}` must be one value or {k} (one per axis), got {show(value)}")
    return [check_real(f"{name}[{i}]", v) for i, v in enumerate(values)]


def _coordinates(
    dims: tuple[int, ...], start: Any, step: Any, crop: Any
) -> tuple[list[float], list[float]]:
    """Each axis's first position and step."""
    k = len(dims)
    if crop is None:
        starts, steps = per_axis("start", start, k, 0.0), per_axis("step", step, k, 1.0)
    else:
        if start is not None or step is not None:
            raise PosencError("`crop` gives the positions: pass it without `start` and `step`")
        top, bottom = _crop_pair(crop, k)
        m = len(top)
        lo = [check_real(f"crop[0][{i}]", v) for i, v in enumerate(top)]
        hi = [check_real(f"crop[1][{i}]", v) for i, v in enumerate(bottom)]
        spans = zip(lo, hi, dims[k - m :], strict=True)
        starts = [0.0] * (k - m) + lo
        steps = [1.0] * (k - m) + [(b - a) / n if n else 1.0 for a, b, n in spans]
    for a, (s0, st, n) in enumerate(zip(starts, steps, dims, strict=True)):
        last = s0 + st * max(n - 1, 0)
        if not (math.isfinite(last) and abs(last) <= MAX_POSITION):
            raise PosencError(
                f"the positions of grid axis {a} ({s0:g} + i * {st:g} for i < {n}) must stay "
                f"within +-2^53, got {np.float64(last)!r}"
            )
    return starts, steps


def _crop_pair(crop: Any, k: int) -> tuple[Sequence[Any], Sequence[Any]]:
    """``crop``'s two corners, of one length between 1 and ``k``."""
    pair = isinstance(crop, list | tuple) and len(crop) == 2
    top, bottom = crop if pair else ((), ())
    sides = isinstance(top, list | tuple) and isinstance(bottom, list | tuple)
    if pair and sides and len(top) == len(bottom) and 0 < len(top) <= k:
        return top, bottom
    raise PosencError(
        f"`crop` must be ((top, left, …), (bottom, right, …)) for at most {k} axes, "
        f"got {show(crop)}"
    )
