"""The rules past the trained size as their references compute them (issue 36: ``compat=`` with
one rule per grid axis), bit for bit against replays written here from the catalogue's
step-by-step arithmetic (ROPE-EXTRAPOLATION.md beside the project) and, where the package is
installed, against diffusers' own functions; and the catalogue's hazards, each with posenc's
exact table beside the reference's."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.reference import ladder, yarn_ladder

torch = pytest.importorskip("torch")

TOL = 6e-8


def _thu_ml(d, pos, theta, k=None, length=None, wide=None):
    """thu-ml/RIFLEx ``get_1d_rotary_pos_embed_riflex`` (use_real, interleaved): the ladder
    from an integer arange in float32 (float64: kijai's ``rope_params``), the pair ``k - 1``
    set to the double ``0.9 * 2 pi / length``, the outer product with the positions, cos and
    sin, each column twice."""
    dtype = wide or torch.float32
    freqs = 1.0 / (theta ** (torch.arange(0, d, 2)[: d // 2].to(dtype) / d))
    if k is not None:
        freqs[k - 1] = 0.9 * 2 * math.pi / length
    angles = torch.outer(pos, freqs)
    return (angles.cos().repeat_interleave(2, 1).float(),
            angles.sin().repeat_interleave(2, 1).float())  # fmt: skip


def _grid(tables, dims):
    """Per-axis tables ``[n_a, d_a]`` broadcast to the grid, ``[t | h | w]``, row-major."""
    parts = []
    for a, t in enumerate(tables):
        shape = [1] * len(dims) + [t.shape[-1]]
        shape[a] = dims[a]
        parts.append(t.reshape(shape).expand(*dims, t.shape[-1]))
    return torch.cat(parts, -1).reshape(math.prod(dims), -1)


@pytest.mark.parametrize(
    ("preset", "dims", "blocks", "theta", "k", "rows"),
    [
        ("hunyuan-video", (66, 4, 5), (16, 56, 56), 256.0, 4, "float32"),  # 261 frames, L' 66
        ("cogvideox", (25, 3, 4), (16, 24, 24), 1e4, 2, "float32"),  # 97 frames, L' 25
        ("wan", (60, 3, 4), (44, 42, 42), 1e4, 6, "float64"),  # kijai's float64, L' 60 > 51
    ],
)
def test_riflex_is_its_references_bit_for_bit(preset, dims, blocks, theta, k, rows):
    """HunyuanVideo and CogVideoX: thu-ml's float32 function; Wan: kijai's float64
    ``rope_params``; the pair found from where the family's videos repeat, the length the
    grid's frames. The replay's float32 error is the catalogue's (2.2e-7 on HunyuanVideo's
    frames), where posenc's exact table is within one rounding."""
    dim = sum(blocks)
    rule = ({"rope_type": "riflex"}, None, None)
    got = posenc.rope_grid(dims, dim, preset=preset, scaling=rule, compat="diffusers",
                           dtype=torch.float32)  # fmt: skip
    wide = torch.float64 if rows == "float64" else None
    per_axis = []
    for a, (d, n) in enumerate(zip(blocks, dims, strict=True)):
        pos = torch.arange(n) if wide is not None else torch.arange(n, dtype=torch.float32)
        per_axis.append(_thu_ml(d, pos, theta, k if a == 0 else None, dims[0], wide))
    want = [_grid([t[j] for t in per_axis], dims) for j in (0, 1)]
    assert torch.equal(got[0], want[0])
    assert torch.equal(got[1], want[1])
    exact = posenc.rope_grid(dims, dim, preset=preset, scaling=rule, dtype=np.float64)
    reference_error = np.abs(got[0].double().numpy() - exact[0]).max()
    if wide is None:
        assert reference_error > 1e-7  # the float32 reference drifts
    plain = posenc.rope_grid(dims, dim, preset=preset, compat="diffusers", dtype=torch.float32)
    assert not torch.equal(got[0], plain[0])  # the rule did act


def test_cosmos_rope_scale_is_the_ntk_aware_rule_of_its_axes():
    """Cosmos-2 Text2Image's rope_scale (1, 4, 4): the NTK-aware rule on rows and columns,
    replayed bit for bit as diffusers' CosmosRotaryPosEmbed computes it."""
    from diffusers.models.transformers.transformer_cosmos import CosmosRotaryPosEmbed

    aware = {"rope_type": "ntk-aware", "factor": 4.0}
    dims = (1, 64, 64)
    got = posenc.rope_grid(dims, 128, preset="cosmos", scaling=(None, aware, aware),
                           compat="diffusers", dtype=torch.float32)  # fmt: skip
    module = CosmosRotaryPosEmbed(128, rope_scale=(2.0, 4.0, 4.0))  # the t axis: the preset's
    want = module(torch.zeros(1, 1, 1, 128, 128))
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_cosmos_tables_cannot_pass_128_tokens_where_posenc_can():
    """The hazard: Cosmos keeps a float32 arange of 128 rows, so a grid past 2048 px raises in
    the original; compat refuses it, naming the rows, and the exact tables take any size."""
    from diffusers.models.transformers.transformer_cosmos import CosmosRotaryPosEmbed

    with pytest.raises(RuntimeError):
        CosmosRotaryPosEmbed(128)(torch.zeros(1, 1, 1, 2 * 129, 2 * 129))
    with pytest.raises(PosencError, match="rows 0 … 127"):
        posenc.rope_grid((1, 129, 129), 128, preset="cosmos", compat="diffusers")
    aware = {"rope_type": "ntk-aware", "factor": 4.0}
    cos, sin = posenc.rope_grid((1, 256, 3), 128, preset="cosmos", scaling=(None, aware, aware),
                                dtype=np.float64)  # fmt: skip
    assert cos.shape == (768, 128)
    assert np.abs(cos**2 + sin**2 - 1).max() < 1e-12


@pytest.mark.parametrize(("time", "linear", "ntk"), [(0.9, 2.0, 1.0), (0.5, 1.0, 2.0)])
def test_lumina_next_time_aware_is_the_pipeline(time, linear, ntk):
    """Lumina-Next at 2048 x 2048 (s = 2): interpolation while Lumina's time 1 - t is below the
    watershed 0.3, NTK after, as get_2d_rotary_pos_embed_lumina with the pipeline's factors."""
    from diffusers.models.embeddings import get_2d_rotary_pos_embed_lumina

    rule = {"rope_type": "lumina-time", "factor": 2.0}
    got = posenc.rope_grid((128, 128), 72, preset="lumina-next", scaling=(rule, rule),
                           time=time, compat="diffusers", layout="compact",
                           dtype=torch.float32)  # fmt: skip
    table = get_2d_rotary_pos_embed_lumina(72, 384, 384, linear_factor=linear, ntk_factor=ntk)
    table = table[:128, :128].reshape(128 * 128, -1)
    assert torch.equal(got[0], table.real)
    assert torch.equal(got[1], table.imag)


def test_diffusers_lumina_watershed_is_always_interpolation():
    """The hazard: diffusers' Lumina pipeline defaults its watershed to 1.0 (Lumina's time is
    always below it: interpolation at every step), where the original switches to NTK after
    30 % of the trajectory. posenc's default is the original's; watershed=1.0 is diffusers'."""
    rule = {"rope_type": "lumina-time", "factor": 2.0}
    ours = posenc.rope_grid((64, 64), 72, preset="lumina-next", scaling=(rule, rule), time=0.2)
    theirs = {**rule, "watershed": 1.0}
    diffusers = posenc.rope_grid((64, 64), 72, preset="lumina-next", scaling=(theirs, theirs),
                                 time=0.2)  # fmt: skip
    ntk = {"rope_type": "ntk", "factor": 2.0}
    pi = {"rope_type": "linear", "factor": 2.0}
    assert np.array_equal(ours[0], posenc.rope_grid((64, 64), 72, preset="lumina-next",
                                                    scaling=(ntk, ntk))[0])  # fmt: skip
    assert np.array_equal(diffusers[0], posenc.rope_grid((64, 64), 72, preset="lumina-next",
                                                         scaling=(pi, pi))[0])  # fmt: skip


def test_flux_bfloat16_ids_collapse_where_integer_ids_do_not():
    """The hazard: diffusers' FLUX pipeline builds the image ids in the pipeline's dtype; in
    bfloat16 the 384 rows of 6144 x 6144 become 321 distinct positions and the tables err by
    0.96. posenc takes the positions as integers: exact."""
    from diffusers import FluxPipeline

    ids = FluxPipeline._prepare_latent_image_ids(1, 384, 384, "cpu", torch.bfloat16)
    rows = ids[:, 1].float()
    assert len(torch.unique(rows)) == 321
    exact_ids = FluxPipeline._prepare_latent_image_ids(1, 384, 384, "cpu", torch.float64)
    sample = slice(0, None, 97)  # every 97th token: all rows, in reach of the CPU
    exact = posenc.rope(exact_ids[sample].numpy(), 128, preset="flux", dtype=np.float64)
    collapsed = posenc.rope(ids[sample].float().numpy(), 128, preset="flux", dtype=np.float64)
    assert np.abs(collapsed[0] - exact[0]).max() > 0.9
    as_integers = posenc.rope(exact_ids[sample].numpy().astype(np.int64), 128, preset="flux")
    assert np.abs(as_integers[0] - exact[0]).max() < TOL


def test_riflex_without_its_guard_raises_the_frequency():
    """The hazard: kijai's Wan wrapper applies RIFLEx whatever the length; at 161 frames (41
    latent frames, below the period 51 of pair 6) that *raises* the pair's frequency, 0.1233 to
    0.1379. posenc keeps the ladder unless ``always``; with ``always`` it is kijai's table."""
    rule = {"rope_type": "riflex", "length": 41}
    kept = posenc.rope_grid((41, 1, 1), 128, preset="wan", scaling=(rule, None, None),
                            dtype=np.float64)  # fmt: skip
    plain = posenc.rope_grid((41, 1, 1), 128, preset="wan", dtype=np.float64)
    assert np.array_equal(kept[0], plain[0])
    forced = posenc.rope_grid((41, 1, 1), 128, preset="wan", dtype=np.float64,
                              scaling=({**rule, "always": True}, None, None))  # fmt: skip
    omega = np.arccos(np.clip(forced[0][1, 10], -1, 1))  # pair 6 at frame 1: its frequency
    old = np.arccos(np.clip(plain[0][1, 10], -1, 1))
    assert old == pytest.approx(0.1233, abs=1e-4)
    assert omega == pytest.approx(0.1379, abs=1e-4)


@pytest.mark.parametrize(
    ("preset", "dims", "rule", "words"),
    [
        ("hunyuan-video", (8, 2, 2), {"rope_type": "ntk", "factor": 2.0}, ("ntk", "pairs")),
        ("wan", (8, 2, 2), {"rope_type": "linear", "factor": 2.0}, ("linear", "pairs")),
        (
            "cosmos",
            (8, 2, 2),
            {"rope_type": "riflex", "k": 2, "always": True},
            ("riflex", "base"),
        ),
        ("hunyuan-dit", (8, 8), {"rope_type": "linear", "factor": 2.0}, ("no rule",)),
    ],
)
def test_a_rule_no_reference_applies_is_refused_under_compat(preset, dims, rule, words):
    scaling = (rule,) + (None,) * (len(dims) - 1)
    with pytest.raises(PosencError) as err:
        posenc.rope_grid(dims, posenc.preset(preset).dim, preset=preset, scaling=scaling,
                         compat="diffusers")  # fmt: skip
    for word in ("`scaling[0]` with `compat`", *words):
        assert word in str(err.value)


def _comfyui_flux(size, time, dtype):
    """ComfyUI-DyPE's ``vision_yarn`` on FLUX's rows and columns (wildminder/ComfyUI-DyPE 2.3,
    written from the catalogue's arithmetic): a ``size`` x ``size`` token grid, G = 64; the
    ladders, NTK base and blends in ``dtype`` (bfloat16 where the ids are on CUDA, float32
    elsewhere), the float32 ramps of the thresholds raised to k = 2 t^2 cast into it, the
    angles float32, cos and sin times m = 1 + 0.1 ln s t^2 held in ``dtype``; at s <= 1 the
    plain ladder in ``dtype``. The column block's cos, float32 ``[size, 28]``."""
    d, base, length = 56, 1e4, 64
    s = size / length
    pos = torch.arange(size, dtype=torch.float32)
    e = torch.arange(0, d, 2, dtype=dtype) / d
    omega = 1.0 / (base**e)
    m = torch.tensor(1.0, dtype=dtype)
    if s > 1:
        k = 2 * time**2
        pi = omega / s
        ntk = 1.0 / ((base * s ** (d / (d - 2))) ** e)

        def ramp(r0, r1):
            c = lambda r: d * math.log(length / (r * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
            lo = min(max(math.floor(c(r0**k)), 0), d // 2)
            hi = min(max(min(math.ceil(c(r1**k)), d - 1), 0), d // 2)
            hi = hi + 0.001 if lo == hi else hi
            return torch.clamp((torch.arange(d // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)

        rb, rg = ramp(1.25, 0.75).to(dtype), ramp(16.0, 2.0).to(dtype)
        omega = (pi * rb + ntk * (1 - rb)) * rg + omega * (1 - rg)
        m = torch.tensor(1 + 0.1 * math.log(s) * time**2, dtype=dtype)
    angles = pos[:, None] * omega.float()[None]
    return angles.cos() * m.float()


@pytest.mark.parametrize(
    ("size", "time", "bf16_worse_than"),
    [(64, 1.0, 0.1), (256, 1.0, 0.1), (256, 0.5, 0.1)],  # 1024^2 (native), 4096^2
)
def test_comfyui_dype_ladders_in_bfloat16_miss_by_tenths(size, time, bf16_worse_than):
    """The hazard: ComfyUI-DyPE builds its ladders in bfloat16 on every GPU, so its tables err
    by tenths even at FLUX's native 1024^2 (where the table should be FLUX's own), and by
    ~1e-5 in float32 on the CPU; posenc's ``"dype-comfyui"`` is its rule in float64, rounded
    once (at s <= 1 FLUX's own table). ``compat="comfyui-dype"`` (``"-cuda"``) is the node's
    float32 (bfloat16) arithmetic bit for bit."""
    rule = {"rope_type": "dype-comfyui", "original_max_position_embeddings": 64}
    shape = (1, size, size)
    got, _ = posenc.rope_grid(shape, 128, preset="flux", scaling=(None, rule, rule), time=time)
    s = size / 64
    k = 2 * time**2
    ladder_hw = yarn_ladder(s, d=56, power=k) if s > 1 else ladder(56, 1e4)
    m = 1 + 0.1 * math.log(s) * time**2 if s > 1 else 1.0
    want = np.cos(np.arange(size, dtype=np.float64)[:, None] * ladder_hw[None]) * m
    mine = np.asarray(got, dtype=np.float64).reshape(size, size, 128)
    blocks = (mine[:, 0, 16:72:2], mine[0, :, 72::2])  # the rows' block, the columns'
    for block in blocks:
        assert np.abs(block - want).max() < TOL * m
    f32 = np.abs(_comfyui_flux(size, time, torch.float32).double().numpy() - want).max()
    bf16 = np.abs(_comfyui_flux(size, time, torch.bfloat16).double().numpy() - want).max()
    assert 1e-7 < f32 < 3e-5
    assert bf16 > bf16_worse_than
    for compat, dtype in (("comfyui-dype", torch.float32), ("comfyui-dype-cuda", torch.bfloat16)):
        cos, _ = posenc.rope_grid(shape, 128, preset="flux", scaling=(None, rule, rule),
                                  time=time, compat=compat, dtype=torch.float32)  # fmt: skip
        table = cos.reshape(size, size, 128)
        node = _comfyui_flux(size, time, dtype)
        assert torch.equal(table[:, 0, 16:72:2], node)
        assert torch.equal(table[0, :, 72::2], node)


def test_comfyui_replays_refuse_a_rule_the_node_does_not_apply():
    riflex = {"rope_type": "riflex", "k": 1, "always": True}
    with pytest.raises(PosencError, match=r"`scaling\[0\]` with `compat`.*'riflex'.*comfyui"):
        posenc.rope_grid((4, 2, 2), 128, preset="flux", scaling=(riflex, None, None),
                         compat="comfyui-dype")  # fmt: skip


def test_riflex_on_cogvideox_1_5_is_not_silently_off():
    """The hazard: thu-ml's CogVideoX pipeline patch applies RIFLEx on 1.0's crop path only; its
    1.5 ("slice") branch passes no k, so the table there is the plain one. posenc applies the
    rule on any grid: CogVideoX 1.5 at 161 frames (41 latent frames, temporal patch 2: 21
    frame tokens, past pair 2's period 20) lowers pair 2 to 0.9 * 2 pi / 21."""
    dims = (21, 2, 3)
    plain = posenc.rope_grid(dims, 64, preset="cogvideox", dtype=np.float64)  # thu-ml's 1.5
    got = posenc.rope_grid(dims, 64, preset="cogvideox", dtype=np.float64,
                           scaling=({"rope_type": "riflex"}, None, None))  # fmt: skip
    assert not np.array_equal(got[0], plain[0])
    omega = np.arctan2(got[1][6, 2], got[0][6, 2])  # pair 2 (channels 2, 3) at frame 1
    assert omega == pytest.approx(0.9 * 2 * math.pi / 21, rel=1e-9)


def test_videox_fun_riflex_divides_by_4_886_again():
    """The hazard: VideoX-Fun's ``enable_riflex`` keeps ``L_test_scale`` 4.886 by default, so
    its pair's frequency is 0.9 * 2 pi / (4.886 L'): a period 5.4 times the video's length,
    not RIFLEx's L' / 0.9. posenc's ``"riflex"`` is the published rule; the fork is the same
    rule with ``riflex_scale`` 0.9 / 4.886, given on purpose."""
    frames = 66
    rule = {"rope_type": "riflex", "k": 6, "length": frames, "always": True}
    fork_rule = {**rule, "riflex_scale": 0.9 / 4.886}
    ours, fork = (
        posenc.rope_grid(
            (frames, 1, 1), 128, preset="wan", dtype=np.float64, scaling=(one, None, None)
        )
        for one in (rule, fork_rule)
    )
    period = [2 * math.pi / np.arctan2(t[1][1, 10], t[0][1, 10]) for t in (ours, fork)]
    assert period[0] == pytest.approx(frames / 0.9, rel=1e-9)
    assert period[1] == pytest.approx(4.886 * frames / 0.9, rel=1e-9)
