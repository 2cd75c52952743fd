"""transformers' own float32 RoPE arithmetic, kept apart from the exact engine.

``compat="transformers"`` exists so a model can switch to posenc without changing one logit:
it reproduces, op for op in torch float32, what transformers 5.x computes: the inverse
frequencies of each ``rope_type`` (``modeling_rope_utils.py`` and the models'
``compute_default_rope_parameters``), then ``ids.float()[..., None] * inv_freq``, ``cos`` and
``sin``, ``* attention_factor`` as a Python float, the layout, ``.to(dtype)``. Every step is
elementwise, so merging multimodal sections or duplicating halves before or after ``cos``
gives the same bits. The rules' parameters and validation are those of
:mod:`posenc._scaling`; only the arithmetic is here. These numbers are not exact (float32
angles drift with the position): :func:`posenc.rope` without ``compat`` is.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._backends import dtype_name, is_torch
from ._rope import LAYOUTS, Rotary, _section_axes
from ._scaling import longrope_attention, longrope_long, yarn_attention, yarn_factor, yarn_range
from ._validate import PosencError, Positions


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise PosencError(
            "`compat='transformers'` computes with torch: pip install 'posenc[torch]'"
        ) from None
    return torch


def inv_freq(r: Rotary, seq_len: int | None, device: Any = None) -> tuple[Any, float]:
    """transformers' float32 inverse frequencies and attention factor for this rule, as a
    freshly built rotary module holds them for a sequence of ``seq_len``."""
    torch = _torch()
    d, base, p = r.dim, r.base, r.scaling.p
    kind = r.scaling.rope_type

    def default(b: Any = base) -> Any:
        exponent = torch.arange(0, d, 2, dtype=torch.int64, device=device).float() / d
        return 1.0 / (b**exponent)

    if kind == "default":
        return default(), 1.0
    if kind == "linear":
        out = default()
        out /= p["factor"]
        return out, 1.0
    if kind == "dynamic":
        f, length = p["factor"], p["max_position_embeddings"]
        if seq_len is not None and seq_len > length:  # the module's update: tensor arithmetic
            s = torch.maximum(
                torch.tensor(seq_len, device=device), torch.tensor(length, device=device)
            )
            return default(base * ((f * s / length) - (f - 1)) ** (d / (d - 2))), 1.0
        return default(base * ((f * length / length) - (f - 1)) ** (d / (d - 2))), 1.0
    if kind == "yarn":
        f = yarn_factor(p)
        pos_freqs = base ** (torch.arange(0, d, 2, device=device).float() / d)
        extrapolation = 1.0 / pos_freqs
        interpolation = 1.0 / (f * pos_freqs)
        lo, hi = yarn_range(p, d, base)
        ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
        keep = (1 - ramp).to(device=device, dtype=torch.float)
        return interpolation * (1 - keep) + extrapolation * keep, yarn_attention(p)
    if kind == "longrope":
        key = "long_factor" if longrope_long(p, seq_len) else "short_factor"
        ext = torch.tensor(p[key], dtype=torch.float32, device=device)
        shape = torch.arange(0, d, 2, dtype=torch.int64, device=device).float() / d
        return 1.0 / (ext * base**shape), longrope_attention(p)
    if kind == "llama3":
        out = default()
        f, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
        length = p["original_max_position_embeddings"]
        low_wavelength, high_wavelength = length / low, length / high
        wavelength = 2 * math.pi / out
        scaled = torch.where(wavelength > low_wavelength, out / f, out)
        smooth = (length / wavelength - low) / (high - low)
        smoothed = (1 - smooth) * scaled / f + smooth * scaled
        medium = ~(wavelength < high_wavelength) * ~(wavelength > low_wavelength)
        return torch.where(medium, smoothed, scaled), 1.0
    if kind == "proportional":
        rotated = int(p["partial_rotary_factor"] * d // 2)
        exponent = torch.arange(0, 2 * rotated, 2, dtype=torch.int64, device=device).float() / d
        out = 1.0 / (base**exponent)
        if d // 2 > rotated:
            zeros = torch.zeros(d // 2 - rotated, dtype=torch.float32, device=device)
            out = torch.cat((out, zeros), dim=0)
        out /= p["factor"]
        return out, 1.0
    raise PosencError(f"no transformers arithmetic for rope_type {kind!r}")  # pragma: no cover


def rope(r: Rotary, pos: Positions, seq_len: int | None, dtype: Any) -> tuple[Any, Any]:
    """``(cos, sin)`` as transformers computes them; positions with the axis of several
    sections last (as :func:`posenc.rope` passes them)."""
    torch = _torch()
    if r.axes_dim is not None:
        raise PosencError(
            "`compat='transformers'` has no axial rule: axial RoPE (FLUX) is diffusers', whose "
            "float64 tables are the exact ones; drop `compat`"
        )
    x = pos.values
    numpy_out = not is_torch(x)
    if numpy_out:
        x = torch.from_numpy(np.ascontiguousarray(x))
    out_dtype = _torch_dtype(torch, dtype)
    freq, factor = inv_freq(r, seq_len, device=x.device)
    ids = x.float()
    if r.sections is not None:  # each frequency reads its section's axis
        axis = torch.from_numpy(_section_axes(r)).to(x.device)
        angles = torch.take_along_dim(ids, axis.expand(*ids.shape[:-1], -1), dim=-1) * freq
    else:
        angles = ids[..., None] * freq
    cols = torch.tensor(LAYOUTS[r.layout](r.dim // 2), device=x.device)
    cos = (angles.cos() * factor)[..., cols].to(out_dtype)
    sin = (angles.sin() * factor)[..., cols].to(out_dtype)
    if numpy_out:
        if out_dtype == torch.bfloat16:
            raise PosencError("`dtype` bfloat16 has no NumPy form: pass torch positions")
        return cos.numpy(), sin.numpy()
    return cos, sin


def _torch_dtype(torch: Any, dtype: Any) -> Any:
    if dtype is None:
        return torch.get_default_dtype()
    name = dtype_name(dtype)
    if name not in ("float16", "bfloat16", "float32", "float64"):
        raise PosencError(f"`dtype` must be a float dtype, got {dtype!r}")
    return getattr(torch, name)
