"""The public functions: ``table``, ``encode``, ``grid``, ``detr``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ._backends import Ops, array_namespace, is_torch, is_torch_dtype, ops_for
from ._evaluate import Direct, Evaluator, evaluator
from ._layout import Plan, channel_plan
from ._positions import Progression, grid_axes, grid_shape
from ._presets import PRESETS, ROTARY_PRESETS, Preset, RotaryPreset, get_preset
from ._spec import Encoding
from ._types import ArrayLike, Floats, NumpyDType
from ._validate import (
    ANGLE_LIMIT,
    MAX_POSITION,
    PosencError,
    Positions,
    as_positions,
    assert_traced,
    check_angles,
    check_choice,
    check_float32_only,
    check_int,
    check_real,
    tracing,
)

if TYPE_CHECKING:
    from ._types import Device, Tensor, TorchDType


def presets(kind: str | None = None) -> list[str]:
    """Names of the presets: the sinusoidal ones (added to activations: :func:`table`,
    :func:`encode`, :func:`grid`), then the rotary ones (:func:`rope`). ``kind``
    (``"sinusoidal"`` or ``"rotary"``) lists one family. ``posenc.preset(name)`` tells each
    one's origin and settings.

    Examples:
        >>> "whisper" in posenc.presets(), "llama3" in posenc.presets("rotary")
        (True, True)
    """
    kind = None if kind is None else check_choice("kind", kind, ("sinusoidal", "rotary"))
    sinusoidal = [] if kind == "rotary" else list(PRESETS)
    return sinusoidal + ([] if kind == "sinusoidal" else list(ROTARY_PRESETS))


def preset(name: str) -> Preset | RotaryPreset:
    """The preset record: ``origin``, ``summary`` and ``quirks``, with ``options`` (a
    sinusoidal :class:`Preset`) or the :func:`rope` keywords ``rotary`` (a
    :class:`RotaryPreset`).

    Examples:
        >>> posenc.preset("whisper").summary
        '[sin | cos] halves, tensor2tensor spacing'
        >>> posenc.preset("llama").rotary["base"]
        10000.0
    """
    if isinstance(name, str) and name in ROTARY_PRESETS:
        return ROTARY_PRESETS[name]
    return get_preset(name)


def _one_axis(p: Preset, call: str) -> None:
    if p.encoding.ndim not in (1, None):
        raise PosencError(
            f"preset {p.name!r} encodes {p.encoding.ndim} axes; use posenc.grid(shape, dim, "
            f"preset={p.name!r}) or posenc.encode(coords, dim, preset={p.name!r}) with "
            f"coords of shape [..., {p.encoding.ndim}] instead of {call}"
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
    p = get_preset(preset)
    _one_axis(p, "posenc.table")
    enc = p.resolve(options, grid=False)
    length = check_int("length", length)
    offset_f = check_real("offset", offset)
    if compat is not None:
        if is_torch(like) and device is None:
            device = like.device
        torch_out = device is not None or is_torch_dtype(dtype)
        start = int(offset_f) if offset_f.is_integer() else offset_f
        if torch_out:
            import torch

            positions: Any = torch.arange(start, start + length, device=device)
        else:
            positions = np.arange(start, start + length)
        return _original(p, enc, positions, dim, dtype, compat, channels, like)
    pl = channel_plan(enc, dim, 1, p.label(options), channels)
    if is_torch(like) and device is None:
        device = like.device
    return evaluate_span(pl, offset_f, length, dtype=dtype, device=device, like=like,
                         padding_idx=enc.padding_idx)  # fmt: skip


def evaluate_span(
    pl: Plan,
    start: float,
    length: Any,
    *,
    dtype: Any,
    device: Any,
    like: Any = None,
    padding_idx: int | None = None,
    on_device: bool = False,
) -> Any:
    """Rows ``start … start + length - 1`` under a resolved 1D plan: the evaluation half of
    :func:`table`, which modules call for a run of positions (a table is every evaluator's
    fastest form). Under tracing ``length`` may be symbolic; the checks then wait for eager
    calls. ``on_device``: see :func:`posenc._evaluate.evaluator`."""
    ev = evaluator(like=like, dtype=dtype, device=device, on_device=on_device)
    prog = Progression(start, 1.0, length)
    if not tracing():
        _check(pl, prog.bound, "`offset` and `length`", ev)
    return ev.grid(pl, [prog], [0], padding_idx=padding_idx)


def _check(pl: Plan, bound: float | None, what: str, ev: Evaluator) -> None:
    """The accuracy rule, and included inputs (NeRF) that the output dtype can hold."""
    c = pl.constants
    check_angles(c.largest, bound, what, exact=c.exact, who=pl.who)
    if ev.float32_only:
        check_float32_only(c.largest, bound, what)
    if c.identities and bound is not None and bound > ev.largest:
        raise PosencError(
            f"{what} must fit the output dtype {ev.dtype} (the positions themselves are "
            f"channels of this encoding): its largest value is {ev.largest:g}, got {bound:g}"
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
    p = get_preset(preset)
    enc = p.resolve(options, grid=False)
    if compat is not None:
        return _original(p, enc, positions, dim, dtype, compat, channels, None)
    k = _axes(p, ndim)
    coords = k > 1 or ndim is not None
    pos = as_positions(positions)
    x = pos.values
    if coords and (x.ndim == 0 or x.shape[-1] != k):
        raise PosencError(
            f"`positions` must have a last axis of {k} coordinates for preset {p.name!r}, "
            f"got shape {tuple(x.shape)}"
        )
    pl = channel_plan(enc, dim, k, p.label(options), channels)
    return evaluate_points(pl, pos, coords=coords, dtype=dtype, padding_idx=enc.padding_idx)


def _original(
    p: Preset,
    enc: Encoding,
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
    from . import _sinusoid_compat

    return _sinusoid_compat.evaluate(p.name, enc, pos, dim, dtype)


def evaluate_points(
    pl: Plan, pos: Positions, *, coords: bool, dtype: Any, padding_idx: int | None
) -> Any:
    """Checked positions ``[*s]`` (``[*s, k]`` with ``coords``) under a resolved plan ->
    ``[*s, width]``: the evaluation half of :func:`encode`, which modules call directly."""
    x = pos.values
    lead = tuple(x.shape[:-1]) if coords else tuple(x.shape)
    # positions not read on the host (traced, or a module's on an accelerator) are evaluated
    # where they are, and the accuracy rule is checked there
    ev = evaluator(like=x, dtype=dtype, on_device=pos.bound is None)
    _check(pl, pos.bound, "`positions`", ev)
    if pos.bound is None and is_torch(x) and pl.constants.largest > 0:
        c = pl.constants
        if not c.exact:
            assert_traced(x, c.angle_rule, min(MAX_POSITION, ANGLE_LIMIT / c.largest))
        if ev.float32_only:
            assert_traced(x, "`positions` must stay below 2^24 in float32-only graphs", 2.0**24)
    flat = _reshape(ev, x, (-1, pl.ndim))
    out = ev.points(pl, flat, pos.integral, padding_idx)
    return _reshape(ev, out, (*lead, pl.dim))


def _reshape(ev: Evaluator, x: Any, shape: tuple[int, ...]) -> Any:
    if isinstance(ev, Direct):
        return ev.ops.reshape(x, shape)
    return x.reshape(shape)


def _axes(p: Preset, ndim: int | None) -> int:
    fixed = p.encoding.ndim
    if ndim is None:
        return fixed or 1
    ndim = check_int("ndim", ndim, minimum=1)
    if fixed is not None and ndim != fixed:
        raise PosencError(f"`ndim` must be {fixed} for preset {p.name!r}, got {ndim}")
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
    p = get_preset(preset)
    enc = p.resolve(options, grid=True)
    dims = grid_shape(shape, p.encoding.ndim)
    pl = channel_plan(enc, dim, len(dims), p.label(options), channels)
    if is_torch(like) and device is None:
        device = like.device
    return evaluate_grid(pl, enc, dims, dtype=dtype, device=device, like=like)


def evaluate_grid(
    pl: Plan,
    enc: Encoding,
    dims: tuple[int, ...],
    *,
    dtype: Any,
    device: Any,
    like: Any,
    crop_from: tuple[int, ...] | None = None,
    on_device: bool = False,
) -> Any:
    """The evaluation half of :func:`grid`: a resolved plan over a checked grid size (the
    centred crop of a ``crop_from`` grid, if given)."""
    nd = len(dims)
    axes = grid_axes(enc, dims, crop_from)
    order = list(range(nd)) if enc.tokens == "row-major" else list(range(nd))[::-1]
    ev = evaluator(like=like, dtype=dtype, device=device, on_device=on_device)
    _check(pl, max([a.bound for a in axes] + [0.0]), _GRID_POSITIONS, ev)
    return ev.grid(pl, axes, order, extra=enc.extra_tokens)


_GRID_POSITIONS = "the grid positions (`shape` and the preset's scaling options)"


@overload
def detr(
    mask: Tensor,
    dim: int = ...,
    *,
    temperature: float = ...,
    normalize: bool = ...,
    scale: float | None = ...,
    dtype: Any = ...,
) -> Tensor: ...


@overload
def detr(
    mask: np.ndarray | Sequence[Any],
    dim: int = ...,
    *,
    temperature: float = ...,
    normalize: bool = ...,
    scale: float | None = ...,
    dtype: NumpyDType = ...,
) -> Floats: ...


@overload
def detr(
    mask: Any,
    dim: int = ...,
    *,
    temperature: float = ...,
    normalize: bool = ...,
    scale: float | None = ...,
    dtype: Any = ...,
) -> Any: ...


def detr(
    mask: Any,
    dim: int = 256,
    *,
    temperature: float = 10000.0,
    normalize: bool = False,
    scale: float | None = None,
    dtype: Any = None,
) -> Any:
    """DETR's ``PositionEmbeddingSine`` from a padding mask, reproduced exactly.

    Args:
        mask: ``[B, H, W]`` booleans, True where the image is padding (DETR's convention).
        dim: output channels, ``2 * num_pos_feats`` (DETR: 256); a multiple of 4.
        temperature: largest timescale.
        normalize: divide the 1-based coordinates by the last one (+1e-6), times ``scale``.
        scale: with ``normalize`` (default ``2*pi``).
        dtype: output dtype (default float32, or torch's default for a torch mask).

    Returns:
        ``[B, dim, H, W]``: channels ``[y block | x block]``, each interleaved sin/cos pairs
        at frequencies ``temperature ** (-2m / num_pos_feats)``.

    Examples:
        >>> mask = np.zeros((2, 20, 30), dtype=bool)
        >>> mask[1, :, 24:] = True                    # image 1 is padded on the right
        >>> posenc.detr(mask, 256, normalize=True).shape
        (2, 256, 20, 30)
    """
    opts: dict[str, Any] = {"temperature": temperature, "normalize": normalize}
    if scale is not None:
        opts["scale"] = scale
    enc = get_preset("detr").resolve(opts, grid=True)
    pl = channel_plan(enc, dim, 2, get_preset("detr").label(opts), None)
    return evaluate_detr(pl, enc, mask, dtype=dtype)


def evaluate_detr(
    pl: Plan, enc: Encoding, mask: Any, *, dtype: Any, on_device: bool = False
) -> Any:
    """The evaluation half of :func:`detr`."""
    if not (is_torch(mask) or array_namespace(mask) is not None):
        mask = _numpy_mask(mask)
    if str(mask.dtype).rsplit(".", 1)[-1] != "bool" or mask.ndim != 3:
        raise PosencError(
            f"`mask` must be a [batch, H, W] boolean array, got {mask.dtype} of shape "
            f"{tuple(mask.shape)}"
        )
    coords = detr_coordinates(ops_for(mask), mask, enc.normalize)
    ev = evaluator(like=coords, dtype=dtype, on_device=on_device)
    _check(pl, 1.0 if enc.normalize else float(max(mask.shape[1:])), "`mask`", ev)
    out = ev.points(pl, ops_for(coords).reshape(coords, (-1, 2)), not enc.normalize)
    ops = ops_for(out)
    b, h, w = mask.shape
    return ops.permute(ops.reshape(out, (b, h, w, pl.dim)), (0, 3, 1, 2))


def detr_coordinates(ops: Ops, mask: Any, normalize: bool) -> Any:
    """DETR's coordinates ``[B, H, W, 2]`` (y, x) from a padding mask (True = padding): the
    cumulative count of non-padded cells, 1-based, as integers; with ``normalize``, divided
    by the last one (+1e-6), in float64 (``scale`` is in the plan's frequencies)."""
    filled = ops.astype(~mask, ops.int64)
    y = ops.cumsum(filled, axis=1)
    x = ops.cumsum(filled, axis=2)
    if not normalize:
        return ops.stack([y, x], axis=-1)
    y64, x64 = ops.astype(y, ops.float64), ops.astype(x, ops.float64)
    y64 = y64 / (y64[:, -1:, :] + 1e-6)
    x64 = x64 / (x64[:, :, -1:] + 1e-6)
    return ops.stack([y64, x64], axis=-1)


def _numpy_mask(mask: Any) -> Any:
    import numpy as np

    try:
        return np.asarray(mask)
    except (TypeError, ValueError):
        raise PosencError(
            f"`mask` must be a [batch, H, W] boolean array, got {mask!r:.60}"
        ) from None
