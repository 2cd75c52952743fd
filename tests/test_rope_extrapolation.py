"""Rules past the trained size, per axis of a grid (issue 36): RIFLEx, raw NTK, NTK-aware,
position interpolation, I-Max, multi_inter, vision YaRN, DyPE and Lumina-Next's switch, as
scaling entries of ``posenc.rope_grid`` and ``posenc.rope``, exact against float64 references
written here from the catalogue's formulas (ROPE-EXTRAPOLATION.md beside the project), at the
catalogue's sizes and odd ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.reference import band, ladder, pair_at, riflex_ladder, yarn_ladder

TOL = 6e-8  # the catalogue's bound for m = 1: one float32 rounding of values in [-1, 1]


def _grid(shape):
    return np.stack(np.meshgrid(*(np.arange(n) for n in shape), indexing="ij"), -1).reshape(
        -1, len(shape)
    )


def _interleaved(ids, ladders):
    """cos, sin of interleaved blocks (diffusers' FLUX, Wan, HunyuanVideo, CogVideoX):
    block a holds pairs (2j, 2j + 1) at angle ``ids[:, a] * ladders[a][j]``."""
    angles = np.concatenate([ids[:, [a]] * w[None] for a, w in enumerate(ladders)], axis=1)
    angles = np.repeat(angles, 2, axis=1)
    return np.cos(angles), np.sin(angles)


def _lowered(d, base, k, length, period, scale=0.9):
    """The ladder of a ``d``-wide block with RIFLEx's pair ``k`` (1-based), whose period in
    frames is checked, lowered to ``scale * 2 pi / length``."""
    assert round(2 * math.pi / ladder(d, base)[k - 1]) == period
    return riflex_ladder(d, base, k, length, scale)


def _check(got, want):
    for g, w in zip(got, want, strict=True):
        assert np.abs(np.asarray(g, dtype=np.float64) - w).max() < TOL


# ---------------------------------------------------------------------------------------------
# RIFLEx


@pytest.mark.parametrize(
    ("frames", "length", "k", "lowered"),
    [(66, 66, 4, True), (61, 66, 4, True), (13, 13, 4, False)],  # 261 f; an odd size; short
)
def test_riflex_hunyuan_video(frames, length, k, lowered):
    """HunyuanVideo 129 -> 261 frames: the temporal block (16 channels, base 256), pair 4
    (period 50 latent frames) lowered to 0.9 * 2 pi / 66 = 0.08568; below its period, kept."""
    rule = {"rope_type": "riflex", "k": k, "length": length}
    shape = (frames, 3, 5)
    got = posenc.rope_grid(shape, 128, preset="hunyuan-video", scaling=(rule, None, None))
    t = _lowered(16, 256.0, k, length, period=50) if lowered else ladder(16, 256.0)
    assert (t[3] == pytest.approx(0.08568, abs=1e-5)) == (lowered and length == 66)
    want = _interleaved(_grid(shape).astype(np.float64), [t, ladder(56, 256.0), ladder(56, 256.0)])
    _check(got, want)


def test_riflex_cogvideox_and_wan():
    """CogVideoX-5B 49 -> 97 frames (L' 25 past pair 2's period 20: lowered to 0.2262); Wan
    81 -> 161 frames (L' 41, pair 6's period 51 not passed: kept, where a wrapper that skips the
    guard raises it to 0.1379; ``always`` does that on purpose)."""
    shape = (25, 2, 3)
    rule = {"rope_type": "riflex", "k": 2, "length": 25}
    got = posenc.rope_grid(
        shape, 64, axes_dim=(16, 24, 24), layout="interleaved", scaling=(rule, None, None)
    )
    t = _lowered(16, 1e4, k=2, length=25, period=20)
    assert t[1] == pytest.approx(0.2262, abs=1e-4)
    _check(got, _interleaved(_grid(shape).astype(float), [t, ladder(24, 1e4), ladder(24, 1e4)]))

    shape = (41, 2, 2)
    wan = {"axes_dim": (44, 42, 42), "layout": "interleaved"}
    plain = posenc.rope_grid(shape, 128, **wan)
    kept = posenc.rope_grid(
        shape, 128, **wan, scaling=({"rope_type": "riflex", "k": 6, "length": 41}, None, None)
    )
    assert np.array_equal(kept[0], plain[0])
    forced = {"rope_type": "riflex", "k": 6, "length": 41, "always": True}
    got = posenc.rope_grid(shape, 128, **wan, scaling=(forced, None, None))
    t = _lowered(44, 1e4, k=6, length=41, period=51)
    assert t[5] == pytest.approx(0.1379, abs=1e-4)
    _check(got, _interleaved(_grid(shape).astype(float), [t, ladder(42, 1e4), ladder(42, 1e4)]))


def test_riflex_on_a_spatial_axis_with_its_own_scale():
    """UltraImage: pair 10 (0-based 9) of FLUX's rows and columns, 0.85 * 2 pi / 225."""
    rule = {"rope_type": "riflex", "k": 10, "length": 225, "riflex_scale": 0.85}
    shape = (1, 7, 9)
    got = posenc.rope_grid(shape, 128, preset="flux", scaling=(None, rule, rule))
    h = _lowered(56, 1e4, k=10, length=225, period=121, scale=0.85)
    _check(got, _interleaved(_grid(shape).astype(np.float64), [ladder(16, 1e4), h, h]))


# ---------------------------------------------------------------------------------------------
# NTK (raw and NTK-aware) and position interpolation


def test_ntk_aware_is_cosmos_per_axis_base():
    """Cosmos-2 Text2Image: rope_scale (1, 4, 4) on blocks (44, 42, 42) gives the h and w
    base 10000 * 4 ** (42 / 40) = 42870.94; the last frequency becomes exactly 1 / 4 of its
    own, the first stays."""
    shape = (2, 9, 11)
    aware = {"rope_type": "ntk-aware", "factor": 4.0}
    got = posenc.rope_grid(
        shape, 128, axes_dim=(44, 42, 42), layout="halves", scaling=(None, aware, aware)
    )
    b = 1e4 * 4.0 ** (42 / 40)
    assert b == pytest.approx(42870.94, abs=0.01)
    ladders = [ladder(44, 1e4), ladder(42, b), ladder(42, b)]
    assert ladders[1][-1] == pytest.approx(ladder(42, 1e4)[-1] / 4, rel=1e-14)
    angles = np.concatenate([_grid(shape)[:, [a]] * w[None] for a, w in enumerate(ladders)], 1)
    want = np.cos(np.concatenate([angles, angles], 1)), np.sin(np.concatenate([angles, angles], 1))
    _check(got, want)


@pytest.mark.parametrize(
    ("rule", "scaled"),
    [
        ({"rope_type": "ntk", "factor": 20.0}, lambda d: ladder(d, 1e4 * 20.0)),  # CineScale
        ({"rope_type": "linear", "factor": 4.0}, lambda d: ladder(d, 1e4) / 4.0),  # PI
    ],
)
def test_raw_ntk_and_interpolation_on_the_spatial_axes(rule, scaled):
    """CineScale's raw NTK (base x 20 on h and w) and position interpolation (frequencies / 4),
    on FLUX's rows and columns at 4096^2: an odd crop of its 256 x 256 tokens."""
    shape = (1, 13, 17)
    got = posenc.rope_grid(
        shape, 128, preset="flux", scaling=(None, rule, rule), start=(0, 240, 240)
    )
    ids = _grid(shape).astype(np.float64) + np.array([0, 240, 240])
    _check(got, _interleaved(ids, [ladder(16, 1e4), scaled(56), scaled(56)]))


def test_one_rule_for_every_axis_and_rope_of_ids():
    """One dict scales every block; ``posenc.rope`` takes the same per block, on ids."""
    rule = {"rope_type": "ntk", "factor": 3.0}
    shape = (5, 6)
    cos, _ = posenc.rope_grid(shape, 64, axes_dim=(32, 32), layout="interleaved", scaling=rule)
    want, _ = _interleaved(_grid(shape).astype(np.float64), [ladder(32, 3e4), ladder(32, 3e4)])
    assert np.abs(cos - want).max() < TOL
    ids = _grid(shape)
    both = posenc.rope(ids, 64, axes_dim=(32, 32), layout="interleaved", scaling=(rule, rule))
    assert np.array_equal(both[0], cos)
    one = posenc.rope(ids, 64, axes_dim=(32, 32), layout="interleaved", scaling=(None, rule))
    want, _ = _interleaved(ids.astype(np.float64), [ladder(32, 1e4), ladder(32, 3e4)])
    assert np.abs(one[0] - want).max() < TOL


def test_the_rule_follows_the_grid_axis_not_the_block():
    """``block_axes=(1, 0)``: the first block encodes the columns; a rule given for grid axis
    0 (the rows) scales the second block."""
    rule = {"rope_type": "linear", "factor": 2.0}
    shape = (4, 6)
    cos, _ = posenc.rope_grid(
        shape, 32, axes_dim=(16, 16), layout="interleaved", block_axes=(1, 0), scaling=(rule, None)
    )
    ids = _grid(shape).astype(np.float64)[:, ::-1]  # block 0: columns, block 1: rows
    want, _ = _interleaved(ids, [ladder(16, 1e4), ladder(16, 1e4) / 2])
    assert np.abs(cos - want).max() < TOL


# ---------------------------------------------------------------------------------------------
# refusals, before any work


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (
            {"scaling": ({"rope_type": "riflex", "k": 9, "length": 66}, None, None)},
            ("`k`", "riflex", "8", "9"),
        ),
        (
            {"scaling": ({"rope_type": "riflex", "k": 0, "length": 66}, None, None)},
            ("scaling[0]['k']", "0"),
        ),
        (
            {"scaling": ({"rope_type": "ntk-aware", "factor": -1.0}, None, None)},
            ("scaling[0]['factor']", "-1.0"),
        ),
        ({"scaling": (None, None)}, ("`scaling`", "3", "got 2")),
        (
            {"scaling": ({"rope_type": "ntk", "factor": 2.0, "rope_theta": 5.0}, None, None)},
            ("scaling[0]", "rope_theta"),
        ),
        (
            {"scaling": ({"rope_type": "ntk", "factor": 2.0}, None, None), "compat": "diffusers"},
            ("`compat`", "scaling"),
        ),
    ],
)
def test_bad_rules_are_refused_naming_the_key(kwargs, words):
    with pytest.raises(PosencError) as err:
        posenc.rope_grid((66, 4, 4), 128, preset="hunyuan-video", **kwargs)
    for word in words:
        assert word in str(err.value)


def test_vision_rules_are_not_transformers_rope_types():
    with pytest.raises(PosencError, match="has no rule 'ntk'"):
        posenc.rope(
            np.arange(8), 64, scaling={"rope_type": "ntk", "factor": 2.0}, compat="transformers"
        )
    with pytest.raises(PosencError, match="needs one block per axis"):
        posenc.rope(np.arange(8), 64, scaling=({"rope_type": "ntk", "factor": 2.0},))


# ---------------------------------------------------------------------------------------------
# vision YaRN and DyPE: three bands, a magnitude on the rows and columns only


def test_the_bands_are_the_catalogues():
    """FLUX (d 56, base 1e4, L 64): c(16) = -1.4, c(2) = 4.95, c(1.25) = 6.38, c(1) = 7.06,
    c(0.75) = 7.93; DyPE's ranges at 4096^2 for t = 1, 0.5, 0.1, 0.05 (beta | gamma): (6, 8 |
    0, 5), (10, 13 | 2, 10), (20, 22 | 12, 19), (24, 27 | 16, 24): the bands of the reference
    the tables are checked against below."""
    got = [pair_at(r, 56, 1e4, 64) for r in (16, 2, 1.25, 1, 0.75)]
    assert got == pytest.approx([-1.4, 4.95, 6.38, 7.06, 7.93], abs=0.05)
    for t, beta, gamma in (
        (1.0, (6, 8), (0, 5)),
        (0.5, (10, 13), (2, 10)),
        (0.1, (20, 22), (12, 19)),
        (0.05, (24, 27), (16, 24)),
    ):
        k = t * t
        assert band(1.25 * k, 0.75 * k, 56, 1e4, 64) == beta
        assert band(16 * k, 2 * k, 56, 1e4, 64) == gamma


@pytest.mark.parametrize(
    ("rule", "kappa"),
    [
        ({"rope_type": "vision-yarn"}, 1.0),
        ({"rope_type": "dype", "time": 1.0}, 1.0),
        ({"rope_type": "dype", "time": 0.5}, 0.25),
        ({"rope_type": "dype", "time": 0.1}, 0.01),
        ({"rope_type": "dype", "time": 0.05}, 0.0025),
    ],
)
def test_vision_yarn_and_dype_on_flux_at_4096(rule, kappa):
    """FLUX.1 at 4096 x 4096 (s = 4 on rows and columns, L = 64): the rule's ladder on h and
    w, their cos and sin times m = 0.1 ln 4 + 1 = 1.1386, the frame axis untouched."""
    rule = {**rule, "factor": 4.0, "original_max_position_embeddings": 64}
    shape = (1, 5, 7)
    start = (0, 190, 249)  # the far corner of the 256 x 256 tokens, an odd crop
    got = posenc.rope_grid(shape, 128, preset="flux", scaling=(None, rule, rule), start=start)
    m = 0.1 * math.log(4.0) + 1
    assert m == pytest.approx(1.1386, abs=1e-4)
    hw = yarn_ladder(4.0, kappa)
    ids = _grid(shape).astype(np.float64) + np.array(start)
    cos, sin = _interleaved(ids, [ladder(16, 1e4), hw, hw])
    scale = np.concatenate([np.ones(16), np.full(112, m)])
    for g, w in zip(got, (cos * scale, sin * scale), strict=True):
        assert np.abs(g.astype(np.float64) - w).max() < TOL * m


def test_dype_tends_to_the_trained_ladder():
    """At t = 0 every band sits past the last pair: the trained frequencies (the magnitude
    stays, as in DyPE's code); the official code divides by zero there."""
    rule = {"rope_type": "dype", "time": 0.0, "factor": 4.0, "original_max_position_embeddings": 64}
    got, _ = posenc.rope_grid((1, 3, 3), 128, preset="flux", scaling=(None, rule, rule))
    plain, _ = posenc.rope_grid((1, 3, 3), 128, preset="flux")
    m = 0.1 * math.log(4.0) + 1
    ladders = [ladder(16, 1e4), ladder(56, 1e4), ladder(56, 1e4)]
    want, _ = _interleaved(_grid((1, 3, 3)).astype(np.float64), ladders)
    assert np.abs(got[:, 16:] - want[:, 16:] * m).max() < TOL * m
    assert np.array_equal(got[:, :16], plain[:, :16])


@pytest.mark.parametrize(
    ("time", "beta", "gamma"),
    [(1.0, (5, 9), (0, 3)), (0.5, (6, 8), (2, 7)), (0.1, (7, 8), (6, 8)), (0.0, (7, 8), (7, 8))],
)
def test_dype_comfyui_raises_its_thresholds(time, beta, gamma):
    """ComfyUI-DyPE at FLUX 4096^2 (rows s = 4, columns a 3.5 crop, the image's larger side
    s_glob = 4): the thresholds raised to k = 2 t^2 (the catalogue's ranges at t = 1, 0.5,
    0.1; at t = 0 both collapse at c(1): no NTK band, interpolation kept), interpolation by
    each axis' own s, NTK-aware by s_glob, m = 1 + 0.1 ln(s_glob) t^2 on both."""
    k = 2 * time**2
    assert (band(1.25**k, 0.75**k, 56, 1e4, 64), band(16**k, 2**k, 56, 1e4, 64)) == (beta, gamma)
    rows = {"rope_type": "dype-comfyui", "factor": 4.0, "original_max_position_embeddings": 64}
    cols = {**rows, "factor": 3.5, "global_factor": 4.0}
    shape, start = (1, 3, 5), (0, 250, 220)
    got = posenc.rope_grid(shape, 128, preset="flux", scaling=(None, rows, cols), start=start,
                           time=time)  # fmt: skip
    m = 1 + 0.1 * math.log(4.0) * time**2
    h = yarn_ladder(4.0, d=56, power=k)
    w = yarn_ladder(3.5, d=56, power=k, s_glob=4.0)
    ids = _grid(shape).astype(np.float64) + np.array(start)
    cos, sin = _interleaved(ids, [ladder(16, 1e4), h, w])
    scale = np.concatenate([np.ones(16), np.full(112, m)])
    for g, want in zip(got, (cos * scale, sin * scale), strict=True):
        assert np.abs(g.astype(np.float64) - want).max() < TOL * m
    if time == 0.0:  # the hazard: ComfyUI's table stays interpolated; the official returns
        assert not np.allclose(h, ladder(56, 1e4))
        dype = {**rows, "rope_type": "dype"}
        back, _ = posenc.rope_grid(shape, 128, preset="flux", scaling=(None, dype, dype),
                                   start=start, time=0.0, dtype=np.float64)  # fmt: skip
        plain, _ = _interleaved(ids, [ladder(16, 1e4), ladder(56, 1e4), ladder(56, 1e4)])
        assert np.abs(back[:, 16:] / (0.1 * math.log(4.0) + 1) - plain[:, 16:]).max() < 1e-12


def test_dype_comfyui_does_not_stretch_a_short_side():
    """A 32 x 8 grid trained at 16 x 16 (rows s = 2, columns 0.5): ComfyUI-DyPE interpolates
    each axis by max(1, s) (the columns are not stretched) and blends NTK-aware by the larger
    side's s_glob = 2 on both, m = 1 + 0.1 ln 2 t^2 on both; its float32 replay agrees to its
    own rounding."""
    rule = {"rope_type": "dype-comfyui", "original_max_position_embeddings": 16}
    shape, time = (1, 32, 8), 0.5
    got = posenc.rope_grid(shape, 128, preset="flux", scaling=(None, rule, rule), time=time)
    k = 2 * time**2
    rows = yarn_ladder(2.0, d=56, length=16, power=k)
    cols = yarn_ladder(1.0, d=56, length=16, power=k, s_glob=2.0)
    assert not np.allclose(cols, ladder(56, 1e4))  # the NTK leg still acts on the columns
    m = 1 + 0.1 * math.log(2.0) * time**2
    cos, sin = _interleaved(_grid(shape).astype(np.float64), [ladder(16, 1e4), rows, cols])
    scale = np.concatenate([np.ones(16), np.full(112, m)])
    for g, want in zip(got, (cos * scale, sin * scale), strict=True):
        assert np.abs(g.astype(np.float64) - want).max() < TOL * m
    replay = posenc.rope_grid(shape, 128, preset="flux", scaling=(None, rule, rule), time=time,
                              compat="comfyui-dype")  # fmt: skip
    assert np.abs(replay[0].astype(np.float64) - cos * scale).max() < 2e-6


def test_dype_comfyui_within_the_trained_size_is_the_ladder():
    """At s_glob <= 1 (FLUX's native 1024^2) the rule leaves the ladder and m = 1."""
    rule = {"rope_type": "dype-comfyui", "original_max_position_embeddings": 64}
    got = posenc.rope_grid((1, 64, 64), 128, preset="flux", scaling=(None, rule, rule), time=0.7)
    plain = posenc.rope_grid((1, 64, 64), 128, preset="flux")
    assert all(np.array_equal(g, p) for g, p in zip(got, plain, strict=True))


def test_a_time_rule_needs_its_time():
    rule = {"rope_type": "dype", "factor": 4.0, "original_max_position_embeddings": 64}
    with pytest.raises(PosencError, match=r"scaling\[1\]\['time'\]` is required"):
        posenc.rope_grid((1, 3, 3), 128, preset="flux", scaling=(None, rule, rule))
    late = {"rope_type": "lumina-time", "factor": 2.0, "time": 1.5}
    with pytest.raises(PosencError, match=r"\[0, 1\]"):
        posenc.rope_grid((3, 3), 64, axes_dim=(32, 32), scaling=late)


# ---------------------------------------------------------------------------------------------
# Lumina-Next's switch, I-Max's clip, UltraImage's multi_inter


@pytest.mark.parametrize(
    ("time", "watershed", "interpolated"), [(0.9, 0.3, True), (0.5, 0.3, False), (0.5, 1.0, True)]
)
def test_lumina_time(time, watershed, interpolated):
    """Lumina time 1 - t below the watershed: interpolation (frequencies / s), else raw NTK
    (base * s); diffusers' default watershed 1.0 always interpolates."""
    rule = {"rope_type": "lumina-time", "factor": 2.0, "time": time, "watershed": watershed}
    shape = (6, 5)
    cos, _ = posenc.rope_grid(shape, 72, axes_dim=(36, 36), layout="interleaved", scaling=rule)
    one = ladder(36, 1e4) / 2 if interpolated else ladder(36, 2e4)
    want, _ = _interleaved(_grid(shape).astype(np.float64), [one, one])
    assert np.abs(cos - want).max() < TOL


def test_imax_and_multi_inter():
    """I-Max at 4096^2 (s_I = 4, alpha 10): NTK for the high pairs, interpolation below;
    multi_inter on Qwen-Image's rows and columns: pairs 8 and 9 only, s = 4096 / 1328."""
    shape = (1, 4, 6)
    ids = _grid(shape).astype(np.float64) + np.array([0, 100, 150])
    rule = {"rope_type": "imax", "factor": 4.0}
    cos, _ = posenc.rope_grid(shape, 128, preset="flux", scaling=rule, start=(0, 100, 150))
    clip = [np.maximum(ladder(d, 1e5), ladder(d, 1e4) / 4) for d in (16, 56, 56)]
    switch = np.flatnonzero(ladder(56, 1e5) < ladder(56, 1e4) / 4)[0]
    assert switch == 17  # NTK for j <= 16, interpolation from 17 on
    assert np.abs(cos - _interleaved(ids, clip)[0]).max() < TOL

    s = 4096 / 1328
    rule = {"rope_type": "multi-inter", "factor": s, "freq_id": [8, 9]}
    cos, _ = posenc.rope_grid((5, 5), 64, axes_dim=(32, 32), layout="interleaved", scaling=rule)
    inter = ladder(32, 1e4)
    inter[[8, 9]] /= s
    assert (
        np.abs(cos - _interleaved(_grid((5, 5)).astype(np.float64), [inter, inter])[0]).max() < TOL
    )
    with pytest.raises(PosencError, match=r"`freq_id`.*16.*got 16"):
        posenc.rope_grid((5, 5), 64, axes_dim=(32, 32), scaling={**rule, "freq_id": [16]})


# ---------------------------------------------------------------------------------------------
# the float32-only evaluator (MPS, exported graphs)


@pytest.mark.parametrize(
    ("shape", "preset", "rule", "start"),
    [
        (
            (1, 8, 256),
            "flux",
            (
                None,
                *[
                    {
                        "rope_type": "vision-yarn",
                        "factor": 4.0,
                        "original_max_position_embeddings": 64,
                    }
                ]
                * 2,
            ),
            (0, 248, 0),
        ),
        (
            (66, 2, 80),
            "hunyuan-video",
            ({"rope_type": "riflex", "k": 4, "length": 66}, None, None),
            (0, 0, 0),
        ),
        (
            (1, 8, 256),
            "flux",
            (None, *[{"rope_type": "dype", "time": 0.5}] * 2),
            (0, 248, 0),
        ),
        (
            (1, 8, 256),
            "flux",
            (None, *[{"rope_type": "dype-comfyui", "time": 0.5, "global_factor": 4.0}] * 2),
            (0, 248, 0),
        ),
    ],
)
def test_the_float32_only_evaluator_keeps_the_rules(shape, preset, rule, start):
    """FLUX at 4096^2 (the last rows of 256 x 256: vision YaRN, DyPE, ComfyUI-DyPE's rule),
    HunyuanVideo at 261 frames (RIFLEx): without float64, within 1e-6 of the exact tables."""
    exact = posenc.rope_grid(shape, 128, preset=preset, scaling=rule, start=start)
    with posenc.float32_only():
        low = posenc.rope_grid(shape, 128, preset=preset, scaling=rule, start=start)
    for a, b in zip(exact, low, strict=True):
        assert 0 < np.abs(a.astype(np.float64) - b).max() < 1e-6


def test_the_time_keyword_reaches_the_rules_that_read_it():
    """``time=`` goes to each rule that follows the diffusion and has no time of its own; a
    time no rule reads is refused."""
    rule = {"rope_type": "dype", "factor": 4.0, "original_max_position_embeddings": 64}
    given = posenc.rope_grid((1, 4, 4), 128, preset="flux", scaling=(None, rule, rule), time=0.3)
    own = {**rule, "time": 0.3}
    inside = posenc.rope_grid((1, 4, 4), 128, preset="flux", scaling=(None, own, own))
    assert np.array_equal(given[0], inside[0])
    other = posenc.rope_grid((1, 4, 4), 128, preset="flux", scaling=(None, rule, rule), time=0.9)
    assert not np.array_equal(given[0], other[0])
    with pytest.raises(PosencError, match="`time` is read by the rules that follow"):
        posenc.rope_grid((1, 4, 4), 128, preset="flux", time=0.3)


def test_riflex_at_its_period_keeps_the_ladder():
    """RIFLEx engages past the period, not at it: 50 latent frames on HunyuanVideo (pair 4's
    period) keep the trained ladder; 51 lower it."""
    rule = {"rope_type": "riflex", "k": 4}
    plain = posenc.rope_grid((51, 1, 1), 128, preset="hunyuan-video")
    at = posenc.rope_grid(
        (51, 1, 1), 128, preset="hunyuan-video", scaling=({**rule, "length": 50}, None, None)
    )
    past = posenc.rope_grid(
        (51, 1, 1), 128, preset="hunyuan-video", scaling=({**rule, "length": 51}, None, None)
    )
    assert np.array_equal(at[0], plain[0])
    assert not np.array_equal(past[0], plain[0])


def test_lumina_time_within_the_trained_size_keeps_the_ladder():
    rule = {"rope_type": "lumina-time", "factor": 0.5, "time": 1.0}
    plain = posenc.rope_grid((4, 4), 64, axes_dim=(32, 32))
    assert np.array_equal(
        posenc.rope_grid((4, 4), 64, axes_dim=(32, 32), scaling=rule)[0], plain[0]
    )


@pytest.mark.parametrize(
    ("scaling", "words"),
    [
        ((None,) * 4, ("`scaling`", "3", "got 4")),
        (
            (None, {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8}, None),
            ("scaling[1]", "'dynamic'", "sequence length"),
        ),
    ],
)
def test_per_axis_refusals(scaling, words):
    """A tuple longer than the axes, and a rule that reads the sequence length (one axis of a
    grid has none): refused, naming them."""
    with pytest.raises(PosencError) as err:
        posenc.rope_grid((2, 3, 3), 128, preset="flux", scaling=scaling)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize(
    ("preset_kwargs", "repeats_at", "k"),
    [
        ({"preset": "hunyuan-video"}, 48, 4),  # periods 6, 13, 25, 50, ...: repeats seen at 48
        ({"axes_dim": (16, 24, 24), "layout": "interleaved"}, 20, 2),  # CogVideoX-5B
        ({"axes_dim": (44, 42, 42), "layout": "interleaved"}, 51, 6),  # Wan
    ],
)
def test_riflex_finds_its_pair_from_where_the_video_repeats(preset_kwargs, repeats_at, k):
    """The catalogue's identify_k: the pair whose period round(2 pi / omega) is nearest the
    frame where repetition is first seen: HunyuanVideo 4, CogVideoX 2, Wan 6."""
    d, base = (16, 256.0) if "preset" in preset_kwargs else (preset_kwargs["axes_dim"][0], 1e4)
    periods = [round(2 * math.pi / w) for w in ladder(d, base)]
    gaps = [abs(n - repeats_at) for n in periods]
    assert gaps.index(min(gaps)) + 1 == k
    dim = 128 if "preset" in preset_kwargs else sum(preset_kwargs["axes_dim"])
    found = {"rope_type": "riflex", "repeats_at": repeats_at, "length": 120}
    given = {"rope_type": "riflex", "k": k, "length": 120}
    a = posenc.rope_grid((120, 1, 1), dim, **preset_kwargs, scaling=(found, None, None))
    b = posenc.rope_grid((120, 1, 1), dim, **preset_kwargs, scaling=(given, None, None))
    plain = posenc.rope_grid((120, 1, 1), dim, **preset_kwargs)
    assert np.array_equal(a[0], b[0])
    assert not np.array_equal(a[0], plain[0])
    with pytest.raises(PosencError, match=r"takes `k`.*or `repeats_at`.*got both"):
        posenc.rope_grid(
            (120, 1, 1), dim, **preset_kwargs, scaling=({**given, **found}, None, None)
        )


# ---------------------------------------------------------------------------------------------
# what a rule takes from the grid and the family's record


@pytest.mark.parametrize(
    ("preset", "shape", "short", "full"),
    [
        ("hunyuan-video", (66, 45, 80), {"rope_type": "riflex"}, {"k": 4, "length": 66}),
        ("cogvideox", (25, 30, 45), {"rope_type": "riflex"}, {"k": 2, "length": 25}),
        ("wan", (60, 45, 80), {"rope_type": "riflex"}, {"k": 6, "length": 60}),
        ("hunyuan-video", (66, 45, 80), {"rope_type": "riflex", "k": 3}, {"length": 66}),
        ("flux", (1, 256, 256), {"rope_type": "dype", "time": 0.5}, {"factor": 4.0, "L": 64}),
        ("qwen-image", (1, 166, 166), {"rope_type": "vision-yarn"}, {"factor": 2.0, "L": 83}),
        ("z-image", (1, 96, 160), {"rope_type": "vision-yarn"}, {"factor": 1.5, "L": 64}),
    ],
)
def test_a_rule_of_one_axis_takes_the_grid_and_the_family_training(preset, shape, short, full):
    """RIFLEx's length is the axis's extent and its pair the family's (HunyuanVideo repeats at
    48 latent frames: pair 4; CogVideoX 20: 2; Wan 51: 6); vision YaRN's and DyPE's trained
    extent is the family's (FLUX 64, Qwen-Image 83, Z-Image 64) and their scale the axis's
    extent over it: the same tables as the rule written out."""
    full = {**short, **full}
    if "L" in full:
        full["original_max_position_embeddings"] = full.pop("L")
    axis = 0 if short["rope_type"] == "riflex" else 1
    rules = [None] * len(shape)
    given = [None] * len(shape)
    rules[axis] = short
    given[axis] = full
    if axis == 1:  # both spatial axes, as the references apply them
        rules[2], given[2] = (
            short,
            {**full, "factor": shape[2] / full["original_max_position_embeddings"]},
        )
    dim = posenc.preset(preset).dim  # the family's own width: its pair is found on its ladder
    a = posenc.rope_grid(shape, dim, preset=preset, scaling=tuple(rules), dtype=np.float64)
    b = posenc.rope_grid(shape, dim, preset=preset, scaling=tuple(given), dtype=np.float64)
    plain = posenc.rope_grid(shape, dim, preset=preset, dtype=np.float64)
    assert np.array_equal(a[0], b[0])
    assert np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], plain[0])


def test_a_family_without_a_trained_size_names_what_to_give():
    with pytest.raises(PosencError) as err:
        posenc.rope_grid((256, 256), 128, preset="hunyuan-image", time=0.5,
                         scaling=(None, {"rope_type": "dype"}))  # fmt: skip
    for word in ("scaling[1]", "original_max_position_embeddings", "'hunyuan-image'", "give it"):
        assert word in str(err.value)
    with pytest.raises(PosencError) as err:
        posenc.rope_grid(
            (60, 4, 4), 48, axes_dim=(16, 16, 16), scaling=({"rope_type": "riflex"}, None, None)
        )
    for word in ("scaling[0]", "`k`", "`repeats_at`", "without a preset"):
        assert word in str(err.value)


def test_rope_of_ids_has_no_grid_to_read_the_length_from():
    ids = np.zeros((4, 3), dtype=np.int64)
    with pytest.raises(PosencError, match=r"`scaling\[0\]\['length'\]` is required"):
        posenc.rope(
            ids, 128, preset="hunyuan-video", scaling=({"rope_type": "riflex", "k": 4}, None, None)
        )


def test_an_empty_axis_with_a_rule_is_an_empty_table():
    """A rule's defaults on a grid with an empty axis: nothing to refuse, no row to compute."""
    yarn = {"rope_type": "vision-yarn"}
    cos, sin = posenc.rope_grid((1, 0, 64), 128, preset="flux", scaling=(None, yarn, yarn))
    assert cos.shape == sin.shape == (0, 128)
    cos, _ = posenc.rope_grid(
        (0, 4, 4), 128, preset="wan", scaling=({"rope_type": "riflex"}, None, None)
    )
    assert cos.shape == (0, 128)
