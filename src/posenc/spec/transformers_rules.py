"""transformers' RoPE scaling rules, as functions: each rule's exact float64 frequencies and
attention factor, ``(params, d, base, seq_len) -> (omega [d/2], factor)``, and transformers'
own float32 arithmetic, ``(xp, params, d, base, seq_len, device) -> (inv_freq, factor)``,
replayed op for op with the torch module ``xp`` (so this module imports no torch). They are
registered in :data:`posenc.spec.scaling.RULES`, where rope_type names live."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from posenc.errors import PosencError
from posenc.spec.frequencies import frequencies, paper

Params = dict[str, Any]


def paper32(xp: Any, d: int, base: Any, device: Any) -> Any:
    """transformers' float32 ``1 / base ** (arange(0, d, 2) / d)`` (``base``: maybe a tensor)."""
    exponent = xp.arange(0, d, 2, dtype=xp.int64, device=device).float() / d
    return 1.0 / (base**exponent)


def linear32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    out = paper32(xp, d, base, device)
    out /= p["factor"]
    return out, 1.0


def dynamic(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """The paper's frequencies for the NTK-aware base, which grows past the original length."""
    if d < 4:
        raise PosencError(
            f"`dim` must be at least 4 for dynamic scaling (its exponent is d / (d - 2)), got {d}"
        )
    length, f = p["max_position_embeddings"], p["factor"]
    s = max(seq_len or length, length)
    return paper(d, base * ((f * s / length) - (f - 1)) ** (d / (d - 2))), 1.0


def dynamic32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    f, length = p["factor"], p["max_position_embeddings"]
    if seq_len is not None and seq_len > length:  # the module's update: tensor arithmetic
        s = xp.maximum(xp.tensor(seq_len, device=device), xp.tensor(length, device=device))
        return paper32(xp, d, base * ((f * s / length) - (f - 1)) ** (d / (d - 2)), device), 1.0
    return paper32(xp, d, base * ((f * length / length) - (f - 1)) ** (d / (d - 2)), device), 1.0


def mscale(scale: float, m: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 m ln(scale) + 1`` (1 for ``scale <= 1``)."""
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def yarn_factor(p: Params) -> float:
    """The stretch ``factor``, or ``max_position_embeddings / original`` when absent."""
    if p["factor"] is not None:
        return float(p["factor"])
    if p["max_position_embeddings"] is None:
        raise PosencError(
            "`scaling['factor']` is required (or `max_position_embeddings`, from which "
            "factor = max_position_embeddings / original_max_position_embeddings)"
        )
    return float(p["max_position_embeddings"] / p["original_max_position_embeddings"])


def yarn_attention(p: Params) -> float:
    """YaRN's attention factor: given, or ``mscale(f, mscale) / mscale(f, mscale_all_dim)``
    when both are set (DeepSeek), else ``mscale(f)``."""
    if p["attention_factor"] is not None:
        return float(p["attention_factor"])
    f = yarn_factor(p)
    if p["mscale"] and p["mscale_all_dim"]:
        return mscale(f, p["mscale"]) / mscale(f, p["mscale_all_dim"])
    return mscale(f)


def yarn_range(p: Params, d: int, base: float) -> tuple[float, float]:
    """The pair indices ``(lo, hi)`` between which YaRN blends: where the original window
    holds ``beta_fast`` and ``beta_slow`` turns."""
    length = p["original_max_position_embeddings"]

    def pair(turns: float) -> float:
        return d * math.log(length / (turns * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = pair(p["beta_fast"] or 32.0), pair(p["beta_slow"] or 1.0)
    if p["truncate"]:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    return lo, (hi + 0.001 if lo == hi else hi)


def yarn(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    w = paper(d, base)
    lo, hi = yarn_range(p, d, base)
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)
    return (w / yarn_factor(p)) * ramp + w * (1.0 - ramp), yarn_attention(p)


def yarn32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    f = yarn_factor(p)
    pos_freqs = base ** (xp.arange(0, d, 2, device=device).float() / d)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (f * pos_freqs)
    lo, hi = yarn_range(p, d, base)
    ramp = xp.clamp((xp.arange(d // 2, dtype=xp.float32) - lo) / (hi - lo), 0, 1)
    keep = (1 - ramp).to(device=device, dtype=xp.float32)
    return interpolation * (1 - keep) + extrapolation * keep, yarn_attention(p)


def longrope_long(p: Params, seq_len: int | None) -> bool:
    """Long factors apply past the original length (strictly: ``seq_len = L`` is short)."""
    return seq_len is not None and seq_len > p["original_max_position_embeddings"]


def longrope(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    for key in ("short_factor", "long_factor"):
        if len(p[key]) != d // 2:
            raise PosencError(
                f"`scaling['{key}']` must hold d / 2 = {d // 2} factors for a rotary width of "
                f"{d}, got {len(p[key])}"
            )
    ext = np.asarray(p["long_factor" if longrope_long(p, seq_len) else "short_factor"])
    return paper(d, base) / ext, longrope_attention(p)


def longrope32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    key = "long_factor" if longrope_long(p, seq_len) else "short_factor"
    ext = xp.tensor(p[key], dtype=xp.float32, device=device)
    shape = xp.arange(0, d, 2, dtype=xp.int64, device=device).float() / d
    return 1.0 / (ext * base**shape), longrope_attention(p)


def longrope_attention(p: Params) -> float:
    if p["attention_factor"] is not None:
        return float(p["attention_factor"])
    f = yarn_factor(p)
    length = p["original_max_position_embeddings"]
    return 1.0 if f <= 1.0 else math.sqrt(1 + math.log(f) / math.log(length))


def llama3(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    w = paper(d, base)
    f, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    length = p["original_max_position_embeddings"]
    wavelength = 2 * math.pi / w
    smooth = (length / wavelength - low) / (high - low)
    out = np.where(wavelength > length / low, w / f, w)
    medium = (wavelength >= length / high) & (wavelength <= length / low)
    return np.where(medium, (1 - smooth) * w / f + smooth * w, out), 1.0


def llama3_32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    out = paper32(xp, d, base, device)
    f, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    length = p["original_max_position_embeddings"]
    low_wavelength, high_wavelength = length / low, length / high
    wavelength = 2 * math.pi / out
    scaled = xp.where(wavelength > low_wavelength, out / f, out)
    smooth = (length / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * scaled / f + smooth * scaled
    medium = ~(wavelength < high_wavelength) * ~(wavelength > low_wavelength)
    return xp.where(medium, smoothed, scaled), 1.0


def llama3_check(p: Params) -> None:
    if not p["low_freq_factor"] < p["high_freq_factor"]:
        raise PosencError(
            "`scaling['low_freq_factor']` must be below `scaling['high_freq_factor']`, got "
            f"{p['low_freq_factor']:g} and {p['high_freq_factor']:g}"
        )


def proportional(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    rotated = int(p["partial_rotary_factor"] * d // 2)
    w = np.zeros(d // 2)
    w[:rotated] = frequencies("geometric", rotated, den=d / 2, base=base)
    return w / p["factor"], 1.0


def prop32(xp: Any, p: Params, d: int, base: float, seq_len: int | None, device: Any) -> Any:
    rotated = int(p["partial_rotary_factor"] * d // 2)
    exponent = xp.arange(0, 2 * rotated, 2, dtype=xp.int64, device=device).float() / d
    out = 1.0 / (base**exponent)
    if d // 2 > rotated:
        zeros = xp.zeros(d // 2 - rotated, dtype=xp.float32, device=device)
        out = xp.cat((out, zeros), dim=0)
    out /= p["factor"]
    return out, 1.0
