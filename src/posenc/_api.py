"""The public functions: ``table``, ``encode``, ``grid``, ``detr``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _array_api
from ._backends import backend_for, is_torch
from ._engine import fill_grid, fill_points
from ._errors import PosencError, check_int, check_real
from ._layout import channel_plan, plan
from ._positions import Progression, as_positions, grid_axes, grid_shape
from ._presets import PRESETS, Preset, get_preset


def presets() -> list[str]:
    """Names of all presets. ``posenc.preset(name)`` tells each one's origin and options.

    Example:
        >>> "whisper" in posenc.presets()
        True
    """
    return list(PRESETS)


def preset(name: str) -> Preset:
    """The :class:`Preset` record: ``origin``, ``summary``, ``options``, ``quirks``."""
    return get_preset(name)


def _one_axis(p: Preset, call: str) -> None:
    if p.encoding.ndim not in (1, None):
        raise PosencError(
            f"preset {p.name!r} encodes {p.encoding.ndim} axes; use posenc.grid(shape, dim, "
            f"preset={p.name!r}) or posenc.encode(coords, dim, preset={p.name!r}) with "
            f"coords of shape [..., {p.encoding.ndim}] instead of {call}"
        )


def table(
    length: int,
    dim: int,
    *,
    preset: str = "vaswani",
    offset: float = 0,
    dtype: Any = None,
    device: Any = None,
    channels: slice | None = None,
    like: Any = None,
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
        **options: the preset's options, by their original names.

    Returns:
        ``[length, dim]`` array (``[length, stop - start]`` with ``channels``); every value is
        the exact encoding rounded once to ``dtype``.

    Example:
        >>> pe = posenc.table(2048, 512)                              # the paper's
        >>> pe = posenc.table(1500, 384, preset="whisper")
        >>> pe = posenc.table(64, 17, preset="fairseq", padding_idx=1)  # row 1 all zero
    """
    p = get_preset(preset)
    _one_axis(p, "posenc.table")
    enc = p.resolve(options, grid=False)
    length = check_int("length", length)
    dim = check_int("dim", dim, minimum=1)
    offset_f = check_real("offset", offset)
    pl = channel_plan(enc, dim, 1, p.name, channels)
    foreign = _foreign(like, dtype)
    if foreign is not None:
        xp, out_dtype = foreign
        positions = xp.arange(length, dtype=xp.float64) + offset_f
        return _array_api.points(
            xp, xp.reshape(positions, (length, 1)), pl, out_dtype, enc.padding_idx
        )
    if _array_api.is_jax(like):
        return _to_jax(
            table,
            length,
            dim,
            preset=p.name,
            offset=offset,
            dtype=dtype,
            channels=channels,
            **options,
        )
    if is_torch(like) and device is None:
        device = like.device
    bk = backend_for(dtype, device)
    out = bk.empty((length, pl.dim))
    fill_grid(bk, out, pl, [Progression(offset_f, 1.0, length)], [0])
    if enc.padding_idx is not None:
        row = enc.padding_idx - offset_f
        if row == int(row) and 0 <= row < length:
            out[int(row)] = 0
    return out


def encode(
    positions: Any,
    dim: int,
    *,
    preset: str = "vaswani",
    dtype: Any = None,
    ndim: int | None = None,
    channels: slice | None = None,
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
        **options: the preset's options.

    Returns:
        ``[*s, dim]``, in the library and on the device of ``positions``.

    Integer ids that cover their range densely (a batch of token ids) are gathered from the
    table of that range, which is kept for the next call: up to 64 MiB of such tables in all,
    on the ids' device (``posenc.set_table_cache``). The numbers are the same either way.

    Example:
        >>> t = torch.tensor([0.0, 250.5, 999.0])
        >>> posenc.encode(t, 320, preset="timestep", flip_sin_to_cos=True).shape
        torch.Size([3, 320])
    """
    p = get_preset(preset)
    enc = p.resolve(options, grid=False)
    dim = check_int("dim", dim, minimum=1)
    k = _axes(p, ndim)
    coords = k > 1 or ndim is not None
    xp = _array_api.namespace(positions)
    if xp is not None:
        x, integral = _foreign_positions(xp, positions)
    else:
        x, integral = as_positions(positions)
    if coords and (x.ndim == 0 or x.shape[-1] != k):
        raise PosencError(
            f"`positions` must have a last axis of {k} coordinates for preset {p.name!r}, "
            f"got shape {tuple(x.shape)}"
        )
    lead = tuple(x.shape[:-1]) if coords else tuple(x.shape)
    pl = channel_plan(enc, dim, k, p.name, channels)
    if xp is not None:
        if _array_api.is_jax(x) and not _array_api.x64_enabled():
            host_dtype = np.dtype(_array_api.out_dtype(xp, dtype))

            def compute(q: np.ndarray) -> Any:
                return encode(
                    q, dim, preset=p.name, dtype=host_dtype, ndim=ndim, channels=channels, **options
                )

            return _array_api.jax_callback(compute, x, (*lead, pl.dim), host_dtype)
        flat_x = xp.reshape(x, (-1, k))
        out_x = _array_api.points(xp, flat_x, pl, _array_api.out_dtype(xp, dtype), enc.padding_idx)
        return xp.reshape(out_x, (*lead, pl.dim))
    bk = backend_for(dtype, None, like=x)
    flat = x.reshape(-1, k)
    out = bk.empty((flat.shape[0], pl.dim))
    fill_points(bk, out, pl, flat, integral)
    if enc.padding_idx is not None:
        out[flat[:, 0] == enc.padding_idx] = 0
    return out.reshape(*lead, pl.dim)


def _foreign(like: Any, dtype: Any) -> tuple[Any, Any] | None:
    """(namespace, dtype) when ``like`` is an Array API array evaluated in its own library:
    anything but NumPy, torch, and JAX without x64 (which the NumPy core serves)."""
    xp = _array_api.namespace(like)
    if xp is None or (_array_api.is_jax(like) and not _array_api.x64_enabled()):
        return None
    return xp, _array_api.out_dtype(xp, dtype)


def _to_jax(fn: Any, *args: Any, dtype: Any, **kwargs: Any) -> Any:
    """A table computed by the NumPy core, as a JAX array (a constant under ``jax.jit``)."""
    import jax.numpy as jnp

    host_dtype = np.dtype(_array_api.out_dtype(jnp, dtype))
    return jnp.asarray(fn(*args, dtype=host_dtype, **kwargs))


def _foreign_positions(xp: Any, x: Any) -> tuple[Any, bool]:
    """Positions of another Array API library: checked where their values are known."""
    if xp.isdtype(x.dtype, "integral"):
        return x, True
    if not xp.isdtype(x.dtype, "real floating"):
        raise PosencError(f"`positions` must hold integers or real numbers, got {x.dtype}")
    traced = _array_api.is_jax(x) and not _concrete(x)
    if not traced and not bool(xp.all(xp.isfinite(x))):
        raise PosencError("`positions` must be finite, got a NaN or infinite value")
    return x, False


def _concrete(x: Any) -> bool:
    import jax

    return not isinstance(x, jax.core.Tracer)


def _axes(p: Preset, ndim: int | None) -> int:
    fixed = p.encoding.ndim
    if ndim is None:
        return fixed or 1
    ndim = check_int("ndim", ndim, minimum=1)
    if fixed is not None and ndim != fixed:
        raise PosencError(f"`ndim` must be {fixed} for preset {p.name!r}, got {ndim}")
    return ndim


def grid(
    shape: int | tuple[int, ...],
    dim: int,
    *,
    preset: str = "mae",
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
        dtype, device, channels, like: as in :func:`table`.
        **options: the preset's options (``cls_token``, ``interpolation_scale``, …).

    Returns:
        ``[extra + prod(shape), dim]`` where ``extra`` is the number of leading zero rows for
        class/register tokens.

    Example:
        >>> posenc.grid((14, 14), 768, preset="mae", cls_token=True).shape
        (197, 768)
    """
    p = get_preset(preset)
    enc = p.resolve(options, grid=True)
    dims = grid_shape(shape, p.encoding.ndim)
    nd = len(dims)
    dim = check_int("dim", dim, minimum=1)
    pl = channel_plan(enc, dim, nd, p.name, channels)
    axes = grid_axes(enc, dims)
    order = list(range(nd)) if enc.tokens == "row-major" else list(range(nd))[::-1]
    foreign = _foreign(like, dtype)
    if foreign is not None:
        xp, out_dtype = foreign
        coords = _array_api.grid_coordinates(xp, [a.values() for a in axes], order)
        body = _array_api.points(xp, coords, pl, out_dtype)
        lead = xp.zeros((enc.extra_tokens, pl.dim), dtype=out_dtype)
        return xp.concat((lead, body), axis=0)
    if _array_api.is_jax(like):
        return _to_jax(grid, shape, dim, preset=p.name, dtype=dtype, channels=channels, **options)
    if is_torch(like) and device is None:
        device = like.device
    bk = backend_for(dtype, device)
    cells = math.prod(dims)
    out = bk.empty((enc.extra_tokens + cells, pl.dim))
    out[: enc.extra_tokens] = 0
    body = out[enc.extra_tokens :]
    view = body.reshape(*[dims[a] for a in order], pl.dim)
    fill_grid(bk, view, pl, axes, [order.index(a) for a in range(nd)])
    return out


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
    """
    opts: dict[str, Any] = {"temperature": temperature, "normalize": normalize}
    if scale is not None:
        opts["scale"] = scale
    p = get_preset("detr")
    enc = p.resolve(opts, grid=True)
    dim = check_int("dim", dim, minimum=1)
    pl = plan(enc, dim, 2, p.name)
    torch_in = is_torch(mask)
    m = np.asarray(mask.cpu() if torch_in else mask)
    if m.dtype != bool or m.ndim != 3:
        raise PosencError(
            f"`mask` must be a [batch, H, W] boolean array, got {m.dtype} of shape {m.shape}"
        )
    filled = ~m
    y = np.cumsum(filled, axis=1, dtype=np.int64)
    x = np.cumsum(filled, axis=2, dtype=np.int64)
    coords: np.ndarray = np.stack([y, x], axis=-1)
    if normalize:
        coords = np.stack([y / (y[:, -1:, :] + 1e-6), x / (x[:, :, -1:] + 1e-6)], axis=-1)
    bk = backend_for(dtype, mask.device if torch_in else None, like=mask if torch_in else None)
    flat = coords.reshape(-1, 2)
    out: Any = bk.empty((flat.shape[0], dim))
    fill_points(bk, out, pl, flat, integral=not normalize)
    b, h, w = m.shape
    out = out.reshape(b, h, w, dim)
    return out.permute(0, 3, 1, 2) if torch_in else out.transpose(0, 3, 1, 2)
