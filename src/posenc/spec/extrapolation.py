"""The rules of image and video models past their trained size, each applied to one axis' block
of a grid (its width ``d`` and base): ``(params, d, base, seq_len) -> (omega [d/2] float64,
attention factor)``, as every rule of :data:`posenc.spec.scaling.RULES` (where they are
registered, ``origin="vision"``). The catalogue they follow: RIFLEx (Zhao et al., 2025), raw
and NTK-aware base scaling (diffusers' ``ntk_factor``, Cosmos' ``rope_scale``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc.errors import PosencError
from posenc.spec.frequencies import paper

Params = dict[str, Any]


@dataclass(frozen=True)
class Reference:
    """A rule in its references' own terms, as their code applies it to one block of an
    original's arithmetic (``compat=``): a new ``base`` (a Python double, raised to the
    original's exponents), a divisor of the ladder (``linear``: diffusers' ``linear_factor``),
    and ``pairs`` set to new frequencies (Python doubles assigned into the original's ladder:
    RIFLEx), or vision YaRN's blend (``by_parts``: its ``factor``,
    ``original_max_position_embeddings`` and four thresholds, DyPE's already times ``time **
    2``: the official DyPE code's ``get_1d_rotary_pos_embed(..., yarn=True, dype=True)``), or
    ComfyUI-DyPE's (``comfyui``: the same keys, ``global_factor`` and the ``magnitude``, its
    thresholds already raised to its schedule's power). The default is the original's own
    table."""

    base: float | None = None
    linear: float = 1.0
    pairs: Mapping[int, float] = field(default_factory=dict)
    by_parts: Mapping[str, float] | None = None
    comfyui: Mapping[str, float] | None = None

    @property
    def forms(self) -> frozenset[str]:
        """What it changes: ``"base"``, ``"linear"``, ``"pairs"``, ``"by_parts"``,
        ``"comfyui"``."""
        changed = (
            self.base is not None,
            self.linear != 1.0,
            bool(self.pairs),
            self.by_parts is not None,
            self.comfyui is not None,
        )
        names = ("base", "linear", "pairs", "by_parts", "comfyui")
        return frozenset(f for f, on in zip(names, changed, strict=True) if on)


def ntk_reference(p: Params, d: int, base: float) -> Reference:
    """Raw NTK as diffusers' ``ntk_factor``: ``theta * ntk_factor``."""
    return Reference(base=base * p["factor"])


def ntk_aware_reference(p: Params, d: int, base: float) -> Reference:
    """NTK-aware as Cosmos' ``rope_scale``: ``base * s ** (d / (d - 2))`` in double."""
    ntk_aware(p, d, base, None)  # refused as the exact rule refuses
    return Reference(base=_aware_base(base, p["factor"], d))


def linear_reference(p: Params, d: int, base: float) -> Reference:
    """Position interpolation as diffusers' ``linear_factor``: the ladder divided by s."""
    return Reference(linear=p["factor"])


def riflex_reference(p: Params, d: int, base: float) -> Reference:
    """RIFLEx as thu-ml's ``get_1d_rotary_pos_embed_riflex`` (and kijai's float64 copy): the
    pair ``k - 1`` set to the double ``riflex_scale * 2 pi / length`` where the rule applies."""
    plain = paper(d, base)
    omega, _ = riflex(p, d, base, None)
    changed = np.flatnonzero(omega != plain)
    return Reference(pairs={int(j): p["riflex_scale"] * 2 * math.pi / p["length"] for j in changed})


def lumina_time_reference(p: Params, d: int, base: float) -> Reference:
    """Lumina-Next's pipeline: ``linear_factor`` s while Lumina's time is below the
    watershed, ``ntk_factor`` s after; within the trained size, the table as it is."""
    if p["factor"] <= 1:
        return Reference()
    if 1.0 - p["time"] < p["watershed"]:
        return Reference(linear=p["factor"])
    return Reference(base=base * p["factor"])


def vision_yarn_reference(p: Params, d: int, base: float) -> Reference:
    """Vision YaRN as the official DyPE code applies it with DyPE off (past the trained size
    only)."""
    return _by_parts_reference(p, 1.0)


def dype_reference(p: Params, d: int, base: float) -> Reference:
    """DyPE as its official code applies it: vision YaRN's thresholds times ``time ** 2``; at
    time 0 that code divides by zero."""
    if p["time"] == 0:
        raise PosencError(
            "rope_type 'dype' at time 0 as the official DyPE code computes it: its band "
            "thresholds are 0 there, and it divides by zero; drop `compat` for the exact tables "
            "(the trained ladder)"
        )
    return _by_parts_reference(p, p["time"] ** 2)


def dype_comfyui_reference(p: Params, d: int, base: float) -> Reference:
    """ComfyUI-DyPE's ``vision_yarn`` as its node computes it: past the trained size (the
    image's larger side), its thresholds raised to ``dype_scale * time ** dype_exponent`` and
    its magnitude; within it, the plain ladder (the node's own dtype all the same)."""
    glob = p["global_factor"] if p["global_factor"] is not None else p["factor"]
    if glob <= 1:
        return Reference()
    _, m = dype_comfyui(p, d, base, None)
    k = p["dype_scale"] * p["time"] ** p["dype_exponent"]
    bands = {key: p[key] ** k for key in ("beta_fast", "beta_slow", "gamma_fast", "gamma_slow")}
    given = {
        "factor": max(float(p["factor"]), 1.0),  # the node's max(1, span / G)
        "original_max_position_embeddings": float(p["original_max_position_embeddings"]),
    }
    return Reference(comfyui={**given, **bands, "global_factor": glob, "magnitude": m})


def _by_parts_reference(p: Params, kappa: float) -> Reference:
    if p["factor"] <= 1:
        return Reference()
    bands = {k: p[k] * kappa for k in ("beta_fast", "beta_slow", "gamma_fast", "gamma_slow")}
    keys = ("factor", "original_max_position_embeddings")
    return Reference(by_parts={**{k: float(p[k]) for k in keys}, **bands})


def ntk(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """Raw NTK: the base times ``factor`` (diffusers' ``ntk_factor``, Lumina-Next, CineScale,
    I-Max)."""
    return paper(d, base * p["factor"]), 1.0


def ntk_aware(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """NTK-aware (bloc97): the base times ``factor ** (d / (d - 2))``, so the first frequency
    stays and the last becomes exactly its ``1 / factor`` (Cosmos' ``rope_scale``,
    HunyuanVideo's ``theta_rescale_factor``)."""
    if d <= 2:
        raise PosencError(
            f"rope_type 'ntk-aware' needs a block wider than 2 (its base is raised to the power "
            f"d / (d - 2)), got d = {d}"
        )
    return paper(d, _aware_base(base, p["factor"], d)), 1.0


def _aware_base(base: float, s: float, d: int) -> float:
    """NTK-aware's base: ``base * s ** (d / (d - 2))`` (``d`` > 2)."""
    return float(base * s ** (d / (d - 2)))


def riflex_period(omega: float) -> int:
    """RIFLEx's period of a frequency in frames: ``round(2 pi / omega)``."""
    return round(2 * math.pi / omega) if omega > 0 else 0


def intrinsic_pair(omega: np.ndarray, repeats_at: int) -> int:
    """RIFLEx's ``identify_k``: the pair (1-based) whose period in frames is nearest the frame
    where the video first repeats (the first of equals)."""
    gaps = [abs(riflex_period(w) - repeats_at) for w in omega]
    return gaps.index(min(gaps)) + 1


def riflex_check(p: Params) -> None:
    """RIFLEx takes its pair as ``k`` or finds it from ``repeats_at``: one of them."""
    if (p["k"] is None) == (p["repeats_at"] is None):
        given = "both" if p["k"] is not None else "neither"
        raise PosencError(
            "rope_type 'riflex' takes `k` (the intrinsic pair, 1-based) or `repeats_at` (the "
            f"latent frame where the video first repeats, to find it from), got {given}"
        )


def riflex(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """RIFLEx: the intrinsic pair ``k`` (1-based; or the pair whose period is nearest
    ``repeats_at`` frames) lowered to ``riflex_scale * 2 pi / length`` (``length``: the latent
    frames at inference), the others kept; only once ``length`` passes that pair's period
    ``round(2 pi / omega)``, unless ``always``."""
    omega = paper(d, base)
    k = p["k"] if p["k"] is not None else intrinsic_pair(omega, p["repeats_at"])
    if k > len(omega):
        raise PosencError(
            f"`k` of rope_type 'riflex' (the intrinsic pair, 1-based) must be at most d / 2 "
            f"= {len(omega)} for a block of width {d}, got {k}"
        )
    if p["always"] or p["length"] > riflex_period(omega[k - 1]):
        omega = omega.copy()
        omega[k - 1] = p["riflex_scale"] * 2 * math.pi / p["length"]
    return omega, 1.0


def _pair_index(d: int, base: float, length: float, rotations: float) -> float:
    """The (real) pair index at which ``rotations`` turns fit in ``length`` positions:
    ``d * ln(length / (2 pi rotations)) / (2 ln base)`` (+inf for no rotation)."""
    if rotations <= 0:
        return math.inf
    return d * math.log(length / (2 * math.pi * rotations)) / (2 * math.log(base))


def ramp_range(at_fast: float, at_slow: float, d: int) -> tuple[float, float]:
    """YaRN's ramp range from the (real) pair indices of its two thresholds: ``(max(floor(
    at_fast), 0), min(ceil(at_slow), d - 1))`` clamped to ``[0, d / 2]`` (an infinite index:
    ``d / 2``), 0.001 wider when empty (YaRN's ``find_correction_range`` and
    ``linear_ramp_factor``; the references' replays take it too)."""
    n = d // 2
    lo = float(max(math.floor(at_fast), 0)) if math.isfinite(at_fast) else float(n)
    hi = float(min(math.ceil(at_slow), d - 1)) if math.isfinite(at_slow) else float(n)
    lo, hi = min(max(lo, 0.0), n), min(max(hi, 0.0), n)
    return (lo, hi + 0.001) if lo == hi else (lo, hi)


def _ramp(d: int, base: float, length: float, fast: float, slow: float) -> np.ndarray:
    """YaRN's ramp over the ``d / 2`` pairs, from 0 below the pair of ``fast`` rotations to 1
    past the pair of ``slow`` ones (:func:`ramp_range`)."""
    lo, hi = ramp_range(_pair_index(d, base, length, fast), _pair_index(d, base, length, slow), d)
    return np.clip((np.arange(d // 2, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)


def _blend(
    p: Params,
    d: int,
    base: float,
    kappa: float,
    *,
    schedule: Any = None,
    global_factor: float | None = None,
) -> np.ndarray:
    """Vision YaRN's frequencies, its band thresholds times ``kappa`` (or each mapped by
    ``schedule``): the trained ladder below ``gamma_fast`` rotations, NTK-aware (by
    ``global_factor``, default ``factor``) up to ``beta_fast``, position interpolation (by
    ``factor``) past ``beta_slow``, linear ramps between."""
    s, length = p["factor"], p["original_max_position_embeddings"]
    at = schedule or (lambda r: r * kappa)
    omega = paper(d, base)
    pi = omega / s
    aware = s if global_factor is None else global_factor
    ntk = paper(d, _aware_base(base, aware, d)) if d > 2 else omega
    beta = _ramp(d, base, length, at(p["beta_fast"]), at(p["beta_slow"]))
    gamma = _ramp(d, base, length, at(p["gamma_fast"]), at(p["gamma_slow"]))
    first = pi * beta + ntk * (1 - beta)
    blended: np.ndarray = first * gamma + omega * (1 - gamma)
    return blended


def yarn_magnitude(s: float) -> float:
    """Vision YaRN's magnitude on cos and sin: ``0.1 ln s + 1`` past the trained size."""
    return 0.1 * math.log(s) + 1.0 if s > 1 else 1.0


def _by_parts(p: Params, d: int, base: float, kappa: float) -> tuple[np.ndarray, float]:
    """Vision YaRN's frequencies (thresholds times ``kappa``) and magnitude ``0.1 ln s + 1``;
    at s <= 1 the trained ladder."""
    if p["factor"] <= 1:
        return paper(d, base), 1.0
    return _blend(p, d, base, kappa), yarn_magnitude(p["factor"])


def vision_yarn(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """Vision YaRN (NTK-by-parts with a middle NTK band; DyPE's code with DyPE off): ``factor``
    s, ``original_max_position_embeddings`` L the trained extent in tokens, thresholds
    ``beta_fast`` 1.25, ``beta_slow`` 0.75, ``gamma_fast`` 16, ``gamma_slow`` 2; magnitude
    ``0.1 ln s + 1``. At s <= 1 the trained ladder."""
    return _by_parts(p, d, base, 1.0)


def dype(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """DyPE (the official code): vision YaRN with its four thresholds times ``time ** 2``
    (``time``: 1 pure noise, the ``timestep`` FLUX's pipeline passes), so the table returns to
    the trained one as the time goes to 0; the magnitude stays ``0.1 ln s + 1``."""
    return _by_parts(p, d, base, p["time"] ** 2)


def dype_comfyui(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """ComfyUI-DyPE's ``vision_yarn`` (wildminder/ComfyUI-DyPE 2.3): vision YaRN whose four
    thresholds are raised to ``k = dype_scale * time ** dype_exponent`` (not multiplied: as the
    time goes to 0 they all go to 1, so the table keeps position interpolation past one
    rotation and does not return to the trained ladder), interpolation by the axis' own
    ``factor`` (at least 1: a side below the trained one is not stretched) and NTK-aware by
    ``global_factor`` (the image's larger side over the trained
    one; default ``factor``), magnitude ``1 + 0.1 ln(global_factor) * min(time /
    dype_start_sigma, 1) ** dype_exponent``; the trained ladder where ``global_factor`` <= 1."""
    glob = p["global_factor"] if p["global_factor"] is not None else p["factor"]
    if glob <= 1:
        return paper(d, base), 1.0
    k = p["dype_scale"] * p["time"] ** p["dype_exponent"]
    local = {**p, "factor": max(p["factor"], 1.0)}  # the node's max(1, span / G)
    omega = _blend(local, d, base, 1.0, schedule=lambda r: r**k, global_factor=glob)
    decay = min(p["time"] / p["dype_start_sigma"], 1.0) ** p["dype_exponent"]
    return omega, 1.0 + 0.1 * math.log(glob) * decay


def lumina_time(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """Lumina-Next's time-aware scaling: position interpolation (frequencies / ``factor``)
    while Lumina's time ``1 - time`` is below ``watershed`` (0.3, the original's; diffusers'
    pipeline defaults to 1.0: always interpolation), raw NTK (base times ``factor``) after; at
    ``factor`` <= 1 (within the trained size) the trained ladder, as the original."""
    if p["factor"] <= 1:  # within the trained size: the original does not extrapolate
        return paper(d, base), 1.0
    if 1.0 - p["time"] < p["watershed"]:
        return paper(d, base) / p["factor"], 1.0
    return ntk(p, d, base, seq_len)


def imax(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """I-Max's NTK clipped by interpolation: ``max((base * ntk_factor) ** (-2j / d), omega_j /
    factor)`` (``ntk_factor`` 10, ``factor`` the side ratio ``sqrt(image tokens / 4096)``)."""
    return np.maximum(paper(d, base * p["ntk_factor"]), paper(d, base) / p["factor"]), 1.0


def multi_inter(p: Params, d: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
    """UltraImage's ``multi_inter``: position interpolation on the pairs ``freq_id`` (0-based)
    only (Qwen-Image's rows and columns: [8, 9], ``factor`` side / 1328)."""
    omega = paper(d, base)
    pairs = list(p["freq_id"])
    if max(pairs) >= len(omega):
        raise PosencError(
            f"`freq_id` of rope_type 'multi-inter' (0-based pairs) must be below d / 2 = "
            f"{len(omega)} for a block of width {d}, got {max(pairs)}"
        )
    omega[pairs] = omega[pairs] / p["factor"]
    return omega, 1.0
