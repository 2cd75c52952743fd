"""DyPE's references replayed (ROPE-EXTRAPOLATION.md beside the project, section 4), each in its
own mixed precision.

- The official code (guyyariv/DyPE; Issachar et al., 2025), :func:`official`: its fork of
  diffusers' ``FluxPosEmbed``, whose ``get_1d_rotary_pos_embed(..., yarn=True, dype=True,
  current_timestep=t)`` blends vision YaRN's ladders per axis of FLUX's ids: a float64 ladder,
  the ramps rounded to float32, float64 blends, float32 positions promoted to float64, cos and
  sin rounded to float32 and then multiplied by the magnitude rounded to float32 (two
  roundings). :func:`posenc.torch.patch` replays it for ``compat="original"`` with rope_type
  ``"dype"`` (or ``"vision-yarn"``, its code with DyPE off) on a ``FluxPosEmbed``.
- ComfyUI-DyPE 2.3 (wildminder/ComfyUI-DyPE), :func:`comfyui` and :func:`comfyui_cuda`: its
  FLUX module's ``get_1d_dype_yarn_pos_embed`` (rope_type ``"dype-comfyui"``), whose ladders,
  NTK base and blends are held in the ladder's dtype: float32 where the ids are on the CPU,
  bfloat16 on CUDA; the float32 ramps cast into it, the angles float32 (the positions' dtype
  wins), cos and sin times the magnitude held in the ladder's dtype. ``posenc.rope_grid(...,
  preset="flux", compat="comfyui-dype")`` (``"comfyui-dype-cuda"``: its bfloat16 ladders, on any
  device).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from posenc.compat.diffusers import rotary_1d, wide_dtype
from posenc.compat.diffusers_video import grid_tables
from posenc.compat.grid import GridCall, check_form, compat_grid, references
from posenc.spec.extrapolation import Reference, ramp_range


def _pair_index(rotations: float, d: int, base: float, length: float) -> float:
    """YaRN's ``find_correction_dim``: ``d ln(L / (2 pi r)) / (2 ln base)``."""
    return (d * math.log(length / (rotations * 2 * math.pi))) / (2 * math.log(base))


def _ramp(fast: float, slow: float, d: int, base: float, length: float) -> torch.Tensor:
    """``find_correction_range`` (:func:`~posenc.spec.extrapolation.ramp_range` of its own
    pair indices) and ``linear_ramp_factor``: the float32 ramp over the ``d / 2`` pairs."""
    at = (_pair_index(fast, d, base, length), _pair_index(slow, d, base, length))
    lo, hi = ramp_range(*at, d)
    ramp = (torch.arange(d // 2, dtype=torch.float32) - lo) / (hi - lo)
    return torch.clamp(ramp, 0, 1)


def _by_parts_1d(
    d: int, pos: torch.Tensor, theta: float, p: Mapping[str, float], wide: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """One axis' table under vision YaRN as the official code computes it."""
    s = torch.tensor(p["factor"], dtype=wide)
    length = p["original_max_position_embeddings"]
    exponent = torch.arange(0, d, 2, dtype=wide) / d
    omega = 1.0 / (theta**exponent)
    pi = 1.0 / (s * theta**exponent)
    ntk = 1.0 / ((theta * s ** (d / (d - 2))) ** exponent)
    beta = _ramp(p["beta_fast"], p["beta_slow"], d, theta, length).to(wide)
    gamma = _ramp(p["gamma_fast"], p["gamma_slow"], d, theta, length).to(wide)
    first = pi * beta + ntk * (1 - beta)
    freqs = first * gamma + omega * (1 - gamma)
    angles = torch.outer(pos.to(wide), freqs.to(pos.device))
    m = torch.tensor(0.1 * math.log(p["factor"]) + 1.0, dtype=wide)
    n = 2 * freqs.shape[0]
    cos = angles.cos().repeat_interleave(2, dim=1, output_size=n).float() * m
    sin = angles.sin().repeat_interleave(2, dim=1, output_size=n).float() * m
    return cos, sin


def official(
    ids: torch.Tensor, theta: float, axes_dim: Sequence[int], refs: Sequence[Reference]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The official DyPE ``FluxPosEmbed(theta, axes_dim)(ids)``: per id column its
    ``by_parts`` reference's table (``refs``, one per block: ``Reference()`` for an axis
    left as diffusers has it), concatenated: ``(cos, sin)`` ``[N, sum(axes_dim[:n])]``
    float32."""
    pos = ids.float()
    wide = wide_dtype(ids.device)
    tables = []
    for i in range(ids.shape[-1]):
        p = refs[i].by_parts
        if p is None:
            tables.append(rotary_1d(axes_dim[i], pos[..., i], theta, freqs_dtype=wide))
        else:
            tables.append(_by_parts_1d(axes_dim[i], pos[..., i], theta, p, wide))
    cos, sin = (torch.cat([t[j] for t in tables], dim=-1).to(ids.device) for j in (0, 1))
    return cos, sin


def _comfyui_ladder(
    d: int, theta: float, ref: Reference, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One axis' ladder as ComfyUI-DyPE holds it, in ``dtype``, and its magnitude (None: the
    plain ladder, no magnitude)."""
    exponent = torch.arange(0, d, 2, dtype=dtype) / d
    omega = 1.0 / (theta**exponent)
    p = ref.comfyui
    if p is None:
        return omega, None
    length, glob = p["original_max_position_embeddings"], p["global_factor"]
    pi = omega / p["factor"]
    ntk = 1.0 / ((theta * glob ** (d / (d - 2))) ** exponent) if d > 2 else omega
    beta = _ramp(p["beta_fast"], p["beta_slow"], d, theta, length).to(dtype)
    gamma = _ramp(p["gamma_fast"], p["gamma_slow"], d, theta, length).to(dtype)
    ladder = (pi * beta + ntk * (1 - beta)) * gamma + omega * (1 - gamma)
    return ladder, torch.tensor(p["magnitude"], dtype=dtype)


def _comfyui(call: GridCall, dtype: torch.dtype) -> tuple[object, object]:
    check_form(call, None, ("comfyui",))
    r = call.rotary
    refs = references(call, ("comfyui",))

    def tables(work: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        axes = tuple(r.axes_dim or ())
        base = float(r.base)
        held = [_comfyui_ladder(d, base, ref, dtype) for d, ref in zip(axes, refs, strict=True)]
        positions = [
            (torch.arange(n, dtype=torch.float64) * step + start).float().to(work)
            for n, start, step in zip(call.dims, call.starts, call.steps, strict=True)
        ]
        ladders = [ladder for ladder, _ in held]
        cos, sin = grid_tables(positions, axes, float(r.base), ladders=ladders)
        first = 0
        for d, (_, m) in zip(axes, held, strict=True):
            if m is not None:  # cos, sin (float32) times m held in the ladder's dtype
                cos[:, first : first + d] = cos[:, first : first + d] * m.to(work)
                sin[:, first : first + d] = sin[:, first : first + d] * m.to(work)
            first += d
        return cos, sin

    return compat_grid(tables, call)


def comfyui(call: GridCall) -> tuple[object, object]:
    """ComfyUI-DyPE's FLUX tables on the CPU: float32 ladders."""
    return _comfyui(call, torch.float32)


def comfyui_cuda(call: GridCall) -> tuple[object, object]:
    """ComfyUI-DyPE's FLUX tables on a CUDA device: bfloat16 ladders (on any device here)."""
    return _comfyui(call, torch.bfloat16)
