"""The official DyPE code (guyyariv/DyPE; Issachar et al., 2025), replayed: its fork of diffusers'
``FluxPosEmbed``, whose ``get_1d_rotary_pos_embed(..., yarn=True, dype=True,
current_timestep=t)`` blends vision YaRN's ladders per axis of FLUX's ids (rows and columns),
in its own mixed precision (ROPE-EXTRAPOLATION.md beside the project, section 4): a float64
ladder, the ramps rounded to float32, float64 blends, float32 positions promoted to float64,
cos and sin rounded to float32 and then multiplied by the magnitude rounded to float32 (two
roundings). :func:`posenc.torch.patch` replays it for ``compat="original"`` with rope_type
``"dype"`` (or ``"vision-yarn"``, its code with DyPE off) on a ``FluxPosEmbed``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from posenc.compat.diffusers import rotary_1d, wide_dtype
from posenc.spec.extrapolation import Reference


def _pair_index(rotations: float, d: int, base: float, length: float) -> float:
    """YaRN's ``find_correction_dim``: ``d ln(L / (2 pi r)) / (2 ln base)``."""
    return (d * math.log(length / (rotations * 2 * math.pi))) / (2 * math.log(base))


def _ramp(fast: float, slow: float, d: int, base: float, length: float) -> torch.Tensor:
    """``find_correction_range`` and ``linear_ramp_factor``: the float32 ramp over the ``d /
    2`` pairs, cast to float64."""
    n = d // 2
    lo = max(math.floor(_pair_index(fast, d, base, length)), 0)
    hi = min(math.ceil(_pair_index(slow, d, base, length)), d - 1)
    lo, hi = min(max(lo, 0), n), min(max(hi, 0), n)
    if lo == hi:
        hi += 0.001
    ramp = (torch.arange(n, dtype=torch.float32) - lo) / (hi - lo)
    return torch.clamp(ramp, 0, 1).to(torch.float64)


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
