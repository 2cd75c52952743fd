"""The sinusoidal front-end: ``table``, ``encode`` and ``grid``, and their ``compat`` mode."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

import numpy as np

from posenc import evaluate
from posenc._types import ArrayLike, Floats, NumpyDType
from posenc.errors import PosencError, check_choice, check_int, check_real
from posenc.evaluate.libs import as_positions, is_torch
from posenc.evaluate.positions import grid_shape
from posenc.spec.encoding import Encoding
from posenc.spec.layout import channel_plan
from posenc.spec.presets import Preset, get_preset

if TYPE_CHECKING:
    from posenc._types import Device, Tensor, TorchDType


def _one_axis(preset: Preset, call: str) -> None:
    if preset.encoding.ndim not in (1, None):
        raise PosencError(
            f"preset {preset.name!r} encodes {preset.encoding.ndim} axes; use "
            f"posenc.grid(shape, dim, preset={preset.name!r}) or posenc.encode(coords, dim, "
            f"preset={preset.name!r}) with coords of shape [..., {preset.encoding.ndim}] "
            f"instead of {call}"
        )


@overload
def table(
    length: int,
    dim: int,
    *,
    preset: str | Preset = ...,
    offset: float = ...,
    dtype: TorchDType,
    device: Any = ...,
    channels: slice | None = ...,
    like: Any = ...,
    compat: str | None = ...,
    **options: Any,
) -> Tensor: ...


@overload
def table(
    length: int,
    dim: int,
    *,
    preset: str | Preset = ...,
    offset: float = ...,
    dtype: Any = ...,
    device: Device,
    channels: slice | None = ...,
    like: Any = ...,
    compat: str | None = ...,
    **options: Any,
) -> Tensor: ...


@overload
def table(
    length: int,
    dim: int,
    *,
    preset: str | Preset = ...,
    offset: float = ...,
    dtype: Any = ...,
    device: Any = ...,
    channels: slice | None = ...,
    like: Tensor,
    compat: str | None = ...,
    **options: Any,
) -> Tensor: ...


@overload
def table(
    length: int,
    dim: int,
    *,
    preset: str | Preset = ...,
    offset: float = ...,
    dtype: NumpyDType = ...,
    device: None = ...,
    channels: slice | None = ...,
    like: np.ndarray | None = ...,
    compat: str | None = ...,
    **options: Any,
) -> Floats: ...


@overload
def table(
    length: int,
    dim: int,
    *,
    preset: str | Preset = ...,
    offset: float = ...,
    dtype: Any = ...,
    device: Any = ...,
    channels: slice | None = ...,
    like: Any = ...,
    compat: str | None = ...,
    **options: Any,
) -> Any: ...


def table(
    length: int,
    dim: int,
    *,
    preset: str | Preset = "vaswani",
    offset: float = 0,
    dtype: Any = None,
    device: Any = None,
    channels: slice | None = None,
    like: Any = None,
    compat: str | None = None,
    **options: Any,
) -> Any:
    """The encoding of positions ``offset, offset+1, …, offset+length-1``.

    Args:
        length: number of positions (rows).
        dim: number of channels.
        preset: a 1D convention (see :func:`presets`).
        offset: first position: a KV-cache length, tensor2tensor's ``start_index``.
        dtype: output dtype (NumPy or torch; default float32, or torch's default dtype).
            A torch dtype or a ``device`` gives a torch tensor.
        device: torch device for the output.
        channels: ``slice(start, stop)``: only these channels (tensor parallelism), bit for
            bit the same as slicing the full table, at a cost proportional to the slice.
        like: an array whose library the result follows (a JAX array, an Array API array, a
            torch tensor: its device too).
        compat: ``"original"``: the original's own float32 arithmetic, bit for bit on CPU
            torch (``vaswani``: the PyTorch tutorial, ``whisper``, ``fairseq``, ``timestep``:
            diffusers), for porting a checkpoint that saw those numbers. Default: exact.
        **options: the preset's options, by their original names.

    Returns:
        ``[length, dim]`` array (``[length, stop - start]`` with ``channels``); every value is
        the exact encoding rounded once to ``dtype``.

    Examples:
        >>> pe = posenc.table(2048, 512)                              # the paper's
        >>> pe = posenc.table(1500, 384, preset="whisper")
        >>> pe = posenc.table(64, 17, preset="fairseq", padding_idx=1)  # row 1 all zero
    """
    preset_ = get_preset(preset)
    _one_axis(preset_, "posenc.table")
    encoding = preset_.resolve(options, grid=False)
    length = check_int("length", length)
    offset_f = check_real("offset", offset)
    if compat is not None:
        start = int(offset_f) if offset_f.is_integer() else offset_f
        original = _compat_module()
        positions = original.arange(start, length, dtype=dtype, device=device, like=like)
        return _original(preset_, encoding, positions, dim, dtype, compat, channels, like)
    plan = channel_plan(encoding, dim, 1, preset_.label(options), channels)
    return evaluate.span(
        plan,
        offset_f,
        length,
        dtype=dtype,
        device=device,
        like=like,
        padding_idx=encoding.padding_idx,
    )


@overload
def encode(
    positions: Tensor,
    dim: int,
    *,
    preset: str | Preset = ...,
    dtype: Any = ...,
    ndim: int | None = ...,
    channels: slice | None = ...,
    compat: str | None = ...,
    **options: Any,
) -> Tensor: ...


@overload
def encode(
    positions: Any,
    dim: int,
    *,
    preset: str | Preset = ...,
    dtype: TorchDType,
    ndim: int | None = ...,
    channels: slice | None = ...,
    compat: str | None = ...,
    **options: Any,
) -> Tensor: ...


@overload
def encode(
    positions: ArrayLike,
    dim: int,
    *,
    preset: str | Preset = ...,
    dtype: NumpyDType = ...,
    ndim: int | None = ...,
    channels: slice | None = ...,
    compat: str | None = ...,
    **options: Any,
) -> Floats: ...


@overload
def encode(
    positions: Any,
    dim: int,
    *,
    preset: str | Preset = ...,
    dtype: Any = ...,
    ndim: int | None = ...,
    channels: slice | None = ...,
    compat: str | None = ...,
    **options: Any,
) -> Any: ...


def encode(
    positions: Any,
    dim: int,
    *,
    preset: str | Preset = "vaswani",
    dtype: Any = None,
    ndim: int | None = None,
    channels: slice | None = None,
    compat: str | None = None,
    **options: Any,
) -> Any:
    """The encoding of arbitrary positions: integer or real, any shape.

    Args:
        positions: list, NumPy array, torch tensor, JAX array or any Array API array (traced
            under ``jax.jit`` and ``jax.vmap`` too). For a 1D preset any shape ``[*s]``;
            for a preset of ``k`` axes (``mae``: 2) coordinates ``[*s, k]`` in the grid's
            axis order (row, column).
        dim: number of channels.
        preset: any preset name.
        dtype: output dtype; default float32 (torch: its default dtype).
        ndim: number of axes, for presets that take any (``t2t-nd``, ``tatp22``, ``nerf``).
            When given, ``positions`` has a last axis of ``ndim`` coordinates; when not,
            such presets encode scalar positions like a 1D preset.
        channels: ``slice(start, stop)``: only these channels, as in :func:`table`.
        compat: ``"original"``: the original's float32 arithmetic, as in :func:`table`.
        **options: the preset's options.

    Returns:
        ``[*s, dim]``, in the library and on the device of ``positions``.

    Integer ids that cover their range densely (a batch of token ids) are gathered from the
    table of that range, which is kept for the next call: up to 64 MiB of such tables in all,
    on the ids' device (``posenc.set_table_cache``). The numbers are the same either way.

    Examples:
        >>> t = torch.tensor([0.0, 250.5, 999.0])
        >>> posenc.encode(t, 320, preset="timestep", flip_sin_to_cos=True).shape
        torch.Size([3, 320])
    """
    preset_ = get_preset(preset)
    encoding = preset_.resolve(options, grid=False)
    if compat is not None:
        return _original(preset_, encoding, positions, dim, dtype, compat, channels, None)
    k = _axes(preset_, ndim)
    coords = k > 1 or ndim is not None
    pos = as_positions(positions)
    x = pos.values
    if coords and (x.ndim == 0 or x.shape[-1] != k):
        raise PosencError(
            f"`positions` must have a last axis of {k} coordinates for preset "
            f"{preset_.name!r}, got shape {tuple(x.shape)}"
        )
    plan = channel_plan(encoding, dim, k, preset_.label(options), channels)
    padding_idx = encoding.padding_idx
    return evaluate.points(plan, pos, coords=coords, dtype=dtype, padding_idx=padding_idx)


def _original(
    preset: Preset,
    encoding: Encoding,
    positions: Any,
    dim: Any,
    dtype: Any,
    compat: Any,
    channels: Any,
    like: Any,
) -> Any:
    """``compat="original"``: the preset's original float32 arithmetic."""
    check_choice("compat", compat, ("original",))
    for name, given in (("channels", channels), ("like", None if is_torch(like) else like)):
        if given is not None:
            raise PosencError(
                f"`{name}` does not apply with `compat`: the original has no such form"
            )
    dim = check_int("dim", dim, minimum=1)
    pos = as_positions(positions)
    if pos.bound is not None and pos.bound > 2**24 and pos.integral:
        raise PosencError(
            f"`positions` must stay below 2^24 with `compat`: the originals cast them to "
            f"float32, got {pos.bound:g}"
        )
    return _compat_module().evaluate(preset, encoding, pos, dim, dtype)


def _compat_module() -> Any:
    """:mod:`posenc.compat.sinusoid`, which computes with torch."""
    try:
        from posenc.compat import sinusoid
    except ImportError:
        raise PosencError(
            "`compat='original'` computes with torch: pip install 'posenc[torch]'"
        ) from None
    return sinusoid


def _axes(preset: Preset, ndim: int | None) -> int:
    fixed = preset.encoding.ndim
    if ndim is None:
        return fixed or 1
    ndim = check_int("ndim", ndim, minimum=1)
    if fixed is not None and ndim != fixed:
        raise PosencError(f"`ndim` must be {fixed} for preset {preset.name!r}, got {ndim}")
    return ndim


@overload
def grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | Preset = ...,
    dtype: TorchDType,
    device: Any = ...,
    channels: slice | None = ...,
    like: Any = ...,
    **options: Any,
) -> Tensor: ...


@overload
def grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | Preset = ...,
    dtype: Any = ...,
    device: Device,
    channels: slice | None = ...,
    like: Any = ...,
    **options: Any,
) -> Tensor: ...


@overload
def grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | Preset = ...,
    dtype: Any = ...,
    device: Any = ...,
    channels: slice | None = ...,
    like: Tensor,
    **options: Any,
) -> Tensor: ...


@overload
def grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | Preset = ...,
    dtype: NumpyDType = ...,
    device: None = ...,
    channels: slice | None = ...,
    like: np.ndarray | None = ...,
    **options: Any,
) -> Floats: ...


@overload
def grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | Preset = ...,
    dtype: Any = ...,
    device: Any = ...,
    channels: slice | None = ...,
    like: Any = ...,
    **options: Any,
) -> Any: ...


def grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str | Preset = "mae",
    dtype: Any = None,
    device: Any = None,
    channels: slice | None = None,
    like: Any = None,
    **options: Any,
) -> Any:
    """The encoding of every cell of a grid, flattened to tokens.

    Args:
        shape: grid size per axis, first axis outermost in the token order: ``(H, W)`` for
            images, ``(T, H, W)`` for video. An int means a square (cube) of that side.
        dim: number of channels.
        preset: a grid convention: ``mae``, ``diffusers-2d``, ``diffusers-3d``, ``timm-2d``,
            ``hf-2d``, ``detr``, or an N-D one (``t2t-nd``, ``tatp22``, ``nerf``).
        dtype: as in :func:`table`.
        device: as in :func:`table`.
        channels: as in :func:`table`.
        like: as in :func:`table`.
        **options: the preset's options (``cls_token``, ``interpolation_scale``, …).

    Returns:
        ``[extra + prod(shape), dim]`` where ``extra`` is the number of leading zero rows for
        class/register tokens.

    Examples:
        >>> posenc.grid((14, 14), 768, preset="mae", cls_token=True).shape
        (197, 768)
    """
    preset_ = get_preset(preset)
    encoding = preset_.resolve(options, grid=True)
    dims = grid_shape(shape, preset_.encoding.ndim)
    plan = channel_plan(encoding, dim, len(dims), preset_.label(options), channels)
    if is_torch(like) and device is None:
        device = like.device
    return evaluate.grid(plan, encoding, dims, dtype=dtype, device=device, like=like)
