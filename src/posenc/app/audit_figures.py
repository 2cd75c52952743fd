"""The figures of ``posenc audit``: an original's float32 error and the bf16 ``.to()`` hazard.

Each figure is a max abs difference against posenc's exact result (no ``compat``, float64) at
the positions measured, over every channel (cos and sin together for rotary tables). The
originals' float32 arithmetic is posenc's compat modes (``compat="transformers"`` and
``compat="original"``, which compute with torch: :func:`torch_missing` says when they cannot);
where an original computes in float64 its float32 table is the exact one rounded once, and
the figure is that rounding. The bf16 figures round what a ``.to(torch.bfloat16)`` rounds (a
rotary module's ``inv_freq`` buffer, a stored table) with NumPy, so this module touches no
torch itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posenc.api.rope import rope
from posenc.api.sinusoidal import encode, grid, table
from posenc.spec.presets.sinusoidal import DIFFUSERS_2D, MAE, TIMESTEP
from posenc.spec.rotary import LAYOUTS, rotary

FULL = 8192  # up to this many positions, every one is measured
TAIL = 4096  # beyond: the last TAIL positions ...
SPREAD = 1024  # ... and SPREAD spread evenly below them


def torch_missing() -> str | None:
    """Why the float32 figures cannot be computed (torch is not installed), or None."""
    try:
        from posenc.compat import sinusoid, transformers  # noqa: F401
    except ImportError:
        return "the float32 figures replay the originals' torch arithmetic: pip install torch"
    return None


def sample(n: int) -> tuple[np.ndarray, str]:
    """The positions measured of ``0 … n - 1``, and the words that say which they are."""
    if n <= FULL:
        return np.arange(n), f"all {n} (0…{n - 1})"
    spread = np.linspace(0, n - TAIL, SPREAD, endpoint=False).astype(np.int64)
    ids = np.unique(np.concatenate([spread, np.arange(n - TAIL, n)]))
    return ids, f"{len(ids)} of 0…{n - 1}: the last {TAIL} and {SPREAD} spread below them"


def bf16(x: Any) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest, ties to even), held in float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    kept = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    out: np.ndarray = (kept << np.uint64(16)).astype(np.uint32).view(np.float32)
    return out


def _err(a: Any, b: Any) -> float:
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


# --- rotary tables -----------------------------------------------------------------------------


def rotary_figures(keywords: dict[str, Any], n: int) -> tuple[float, float]:
    """transformers' float32 error and the bf16 ``inv_freq`` error over ``sample(n)``, for
    ``posenc.rope`` keywords (``dim`` included) as ``read_config`` gives them. Multimodal
    sections get the same id on every axis (text tokens)."""
    from posenc.compat.transformers import inv_freq

    ids, _ = sample(n)
    kw = dict(keywords)
    dim = kw.pop("dim")
    sections = kw.get("sections")
    pos = np.stack([ids] * len(sections)) if sections else ids
    cos, sin = rope(pos, dim, dtype=np.float64, **kw)
    cos32, sin32 = rope(pos, dim, compat="transformers", **kw)
    original = max(_err(cos32, cos), _err(sin32, sin))
    r = rotary(dim, **kw)
    freq, factor = inv_freq(r, n if r.scaling.rule.uses_seq_len else None)
    cast = bf16(freq.numpy())  # what model.to(torch.bfloat16) leaves in the buffer
    angles = ids.astype(np.float32)[:, None] * cast[None, :]  # float32, as transformers
    cols = LAYOUTS[r.layout](r.dim // 2)
    factor32 = np.float32(factor)
    hazard = max(
        _err((np.cos(angles) * factor32)[:, cols], cos),
        _err((np.sin(angles) * factor32)[:, cols], sin),
    )
    return original, hazard


def axial_figures(
    axes_dim: tuple[int, ...], theta: float, side: int | tuple[int, int]
) -> tuple[float, float]:
    """FLUX's axial rotary at ids ``(0, h, w)`` (``(0, h, w, 0)`` with four axes, ``(h, w)``
    with two), ``h, w < side`` (or ``h < rows, w < columns``): the error of diffusers' float32
    table on CPU/CUDA (float64 arithmetic, rounded once) and of its float32 arithmetic on
    MPS/NPU (replayed in NumPy float32)."""
    rows, cols = (side, side) if isinstance(side, int) else side
    h, w = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    ids = np.zeros((rows * cols, len(axes_dim)), dtype=np.int64)  # (0, h, w, 0 …), or (h, w)
    first = 1 if len(axes_dim) > 2 else 0
    ids[:, first], ids[:, first + 1] = h.ravel(), w.ravel()
    kw: dict[str, Any] = {"base": theta, "layout": "interleaved", "axes_dim": tuple(axes_dim)}
    cos, sin = rope(ids, sum(axes_dim), dtype=np.float64, **kw)
    cos32, sin32 = rope(ids, sum(axes_dim), dtype=np.float32, **kw)
    rounded = max(_err(cos32, cos), _err(sin32, sin))
    mc, ms = [], []
    for axis, d in enumerate(axes_dim):  # diffusers get_1d_rotary_pos_embed, freqs_dtype float32
        exps = np.arange(0, d, 2, dtype=np.float32)[: d // 2] / np.float32(d)
        freqs = np.float32(1.0) / (np.float32(theta) ** exps)
        angles = ids[:, axis].astype(np.float32)[:, None] * freqs[None, :]
        mc.append(np.repeat(np.cos(angles), 2, axis=1))
        ms.append(np.repeat(np.sin(angles), 2, axis=1))
    mps = max(_err(np.concatenate(mc, axis=1), cos), _err(np.concatenate(ms, axis=1), sin))
    return rounded, mps


def bf16_ids(axes_dim: tuple[int, ...], theta: float, side: int) -> str | None:
    """What diffusers' FLUX pipeline does to ids of ``side`` rows built in bfloat16 (its
    ``_prepare_latent_image_ids(…, dtype)``): how many positions stay distinct and the error
    of the row block's table at them, or None below 257 rows (bfloat16 integers are exact)."""
    if side <= 256:
        return None
    exact = np.arange(side, dtype=np.float64)
    collapsed = bf16(exact.astype(np.float32)).astype(np.float64)
    d = axes_dim[1] if len(axes_dim) > 2 else axes_dim[0]
    omega = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    err = max(
        _err(np.cos(np.outer(collapsed, omega)), np.cos(np.outer(exact, omega))),
        _err(np.sin(np.outer(collapsed, omega)), np.sin(np.outer(exact, omega))),
    )
    return (
        f"the pipeline's bfloat16 ids: {side} rows become {len(np.unique(collapsed))} "
        f"positions, the tables {err:.2g} off (posenc takes integer ids)"
    )


# --- sinusoidal tables -------------------------------------------------------------------------


def table_figures(
    preset: str, n: int, dim: int, options: dict[str, Any], *, float32_original: bool
) -> tuple[float, float]:
    """A stored ``[n, dim]`` table: the original's float32 error (its own arithmetic with
    ``compat="original"``, else the one rounding of a float64 original) and the error of the
    stored table rounded to bf16."""
    exact = table(n, dim, preset=preset, dtype=np.float64, **options)
    if float32_original:
        stored = table(n, dim, preset=preset, compat="original", **options)
    else:
        stored = table(n, dim, preset=preset, dtype=np.float32, **options)
    return _err(stored, exact), _err(bf16(stored), exact)


def timestep_figure(dim: int, options: dict[str, Any], t: np.ndarray) -> float:
    """diffusers ``get_timestep_embedding``'s float32 error at the timesteps ``t``."""
    t32 = np.asarray(t, dtype=np.float32)  # the original casts t to float32
    exact = encode(t32.astype(np.float64), dim, preset=TIMESTEP.name, dtype=np.float64, **options)
    stored = encode(t32, dim, preset=TIMESTEP.name, compat="original", **options)
    return _err(stored, exact)


def grid_figures(preset: str, side: int, dim: int, options: dict[str, Any]) -> tuple[float, float]:
    """A float64 original's ``side x side`` grid table (``mae``): its float32 rounding and
    the error of that table rounded to bf16."""
    exact = grid((side, side), dim, preset=preset, dtype=np.float64, **options)
    stored = exact.astype(np.float32)
    return _err(stored, exact), _err(bf16(stored), exact)


def patch_grid_figures(
    side: int, dim: int, base_size: float, interpolation_scale: float
) -> tuple[float, float]:
    """diffusers ``get_2d_sincos_pos_embed`` on a ``side x side`` grid: positions
    ``i / (side / base_size) / interpolation_scale`` in float32, sin and cos in float64, the
    buffer float32 (``pos_embed``). Its float32 error, and that of the buffer rounded to bf16."""
    options: dict[str, Any] = {"base_size": base_size, "interpolation_scale": interpolation_scale}
    exact = grid((side, side), dim, preset=DIFFUSERS_2D.name, dtype=np.float64, **options)
    i = np.arange(side, dtype=np.float32)
    p = i / np.float32(side / base_size) / np.float32(interpolation_scale)  # torch float32
    rows, cols = np.meshgrid(p, p, indexing="ij")
    coords = np.stack([rows.ravel(), cols.ravel()], axis=-1).astype(np.float64)
    stored = encode(coords, dim, preset=MAE.name, dtype=np.float64).astype(np.float32)
    return _err(stored, exact), _err(bf16(stored), exact)
