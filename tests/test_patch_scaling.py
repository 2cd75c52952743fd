"""``posenc.torch.patch(model, scaling=...)`` (issue 36, item 4) on small random-weight diffusers
transformers (Wan, HunyuanVideo, Cosmos, FLUX, Qwen-Image; configs, no download): the rule's
tables reach the attention (the patched model's outputs are those of the model whose rotary
module is replaced by one returning the rule's float64 tables, written here from the catalogue's
formulas, rounded once), a rule that follows the diffusion time reads it from each forward's
``timestep`` (also compiled: no recompile from step to step), ``compat="original"`` applies the
rule as its reference code does (RIFLEx's, Cosmos' ``rope_scale``) bit for bit, the original
checkpoint loads with strict=True, patching twice is a no-op and ``unpatch`` gives the original
back; and each misuse is refused before anything changes, naming what is wrong."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests.families.models import _hunyuan, _out, _wan
from tests.helpers import compile_counter
from tests.reference import ladder, riflex_ladder, yarn_ladder, yarn_magnitude

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from posenc.torch import patch, unpatch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")

TOL = 6e-8


# ---------------------------------------------------------------------------------------------
# the models, their inputs, and their rotary tables written from the formula


def _cosmos(rope_scale=(1.0, 1.0, 1.0)):
    torch.manual_seed(0)
    return diffusers.CosmosTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=24,
        num_layers=1, text_embed_dim=16, adaln_lora_dim=8, max_size=(32, 64, 64),
        rope_scale=rope_scale, concat_padding_mask=False,
        extra_pos_embed_type=None).eval()  # fmt: skip


def _flux():
    torch.manual_seed(0)
    return diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
        axes_dims_rope=(4, 6, 6)).eval()  # fmt: skip


def _qwen():
    torch.manual_seed(0)
    return diffusers.QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=1, attention_head_dim=128,
        num_attention_heads=1, joint_attention_dim=16,
        axes_dims_rope=(16, 56, 56)).eval()  # fmt: skip


def _video_inputs(frames, h, w, timestep, text=5, **extra):
    g = torch.Generator().manual_seed(1)
    out = {"hidden_states": torch.randn(1, 4, frames, h, w, generator=g),
           "timestep": torch.tensor([float(timestep)]),
           "encoder_hidden_states": torch.randn(1, text, 16, generator=g), **extra}  # fmt: skip
    return out


def _wan_inputs(frames, h, w, timestep):
    return _video_inputs(frames, h, w, timestep)


def _hunyuan_inputs(frames, h, w, timestep):
    g = torch.Generator().manual_seed(2)
    return _video_inputs(frames, h, w, timestep, encoder_attention_mask=torch.ones(1, 5),
                         pooled_projections=torch.randn(1, 8, generator=g))  # fmt: skip


def _cosmos_inputs(frames, h, w, timestep):
    return _video_inputs(frames, h, w, timestep)


def _flux_inputs(frames, h, w, timestep):
    g = torch.Generator().manual_seed(1)
    img = torch.zeros(h, w, 3)
    img[..., 1], img[..., 2] = torch.arange(h)[:, None], torch.arange(w)[None]
    return {"hidden_states": torch.randn(1, h * w, 4, generator=g),
            "encoder_hidden_states": torch.randn(1, 3, 32, generator=g),
            "pooled_projections": torch.randn(1, 32, generator=g),
            "timestep": torch.tensor([float(timestep)]),
            "img_ids": img.reshape(-1, 3), "txt_ids": torch.zeros(3, 3)}  # fmt: skip


def _qwen_inputs(frames, h, w, timestep, text=7):
    g = torch.Generator().manual_seed(1)
    return {"hidden_states": torch.randn(1, frames * h * w, 16, generator=g),
            "encoder_hidden_states": torch.randn(1, text, 16, generator=g),
            "encoder_hidden_states_mask": torch.ones(1, text),
            "timestep": torch.tensor([float(timestep)]),
            "img_shapes": [[(frames, h, w)]]}  # fmt: skip


def _grid_ids(dims, start=(0, 0, 0)):
    mesh = np.meshgrid(*(np.arange(n) + s for n, s in zip(dims, start, strict=True)),
                       indexing="ij")  # fmt: skip
    return np.stack(mesh, -1).reshape(-1, len(dims)).astype(np.float64)


def _angles(ids, ladders):
    """Per token, each block's angles ``[N, sum(d_a) / 2]``, blocks in order."""
    return np.concatenate([ids[:, [a]] * w[None] for a, w in enumerate(ladders)], axis=1)


def _scales(ladders, magnitudes):
    return np.concatenate([np.full(len(w), m) for w, m in zip(ladders, magnitudes, strict=True)])


def _interleaved(ids, ladders, magnitudes=(1.0, 1.0, 1.0)):
    """cos, sin ``[N, D]`` float64, each block's pairs ``(2j, 2j + 1)``: Wan, HunyuanVideo,
    FLUX."""
    angles, m = _angles(ids, ladders), _scales(ladders, magnitudes)
    return (np.repeat(np.cos(angles) * m, 2, 1), np.repeat(np.sin(angles) * m, 2, 1))


def _halves(ids, ladders):
    """cos, sin ``[N, D]`` float64, ``[t h w t h w]``: Cosmos."""
    angles = _angles(ids, ladders)
    return np.cos(np.concatenate([angles] * 2, 1)), np.sin(np.concatenate([angles] * 2, 1))


class _Tables(torch.nn.Module):
    """A rotary module returning the reference's tables: ``tables(*args, **kwargs)`` (float64
    NumPy, or tensors) as its original returns them."""

    def __init__(self, tables):
        super().__init__()
        self.tables = tables

    def forward(self, *args, **kwargs):
        return self.tables(*args, **kwargs)


def _swapped(model, path, tables):
    """A copy of ``model`` whose module at ``path`` returns ``tables``' output."""
    out = copy.deepcopy(model)
    parent, _, name = path.rpartition(".")
    setattr(out.get_submodule(parent) if parent else out, name, _Tables(tables))
    return out


def _captured(model, path, inputs, tables=None):
    """The model's output and what its module at ``path`` returned in that forward (with
    ``tables``: also what ``tables`` returns for the module's arguments)."""
    seen = []

    def hook(module, args, kwargs, output):
        seen.append((output, None if tables is None else tables(*args, **kwargs)))

    handle = model.get_submodule(path).register_forward_hook(hook, with_kwargs=True)
    try:
        out = _out(model, inputs)
    finally:
        handle.remove()
    ((got, want),) = seen
    return (out, got) if tables is None else (out, got, want)


def _close(got, want, m=1.0):
    got = got.detach().double().numpy() if isinstance(got, torch.Tensor) else got
    assert np.abs(got - want).max() < TOL * max(1.0, m)


# ---------------------------------------------------------------------------------------------
# RIFLEx on the frames: exact, and as its references compute it


def _f32(*tables):
    return tuple(torch.from_numpy(np.asarray(t)).float() for t in tables)


WAN_BLOCKS, HUNYUAN_BLOCKS = (8, 8, 8), (8, 12, 12)


def _wan_tables(dims, ladders, magnitudes=(1.0, 1.0, 1.0)):
    cos, sin = _f32(*_interleaved(_grid_ids(dims), ladders, magnitudes))
    return cos[None, :, None], sin[None, :, None]


def _hunyuan_tables(dims, ladders):
    return _f32(*_interleaved(_grid_ids(dims), ladders))


@pytest.mark.parametrize(
    ("build", "inputs_of", "table_of", "blocks", "base", "dims", "k"),
    [
        (_wan, _wan_inputs, _wan_tables, WAN_BLOCKS, 1e4, (9, 3, 2), 1),  # period 6 < 9
        (_hunyuan, _hunyuan_inputs, _hunyuan_tables, HUNYUAN_BLOCKS, 256.0, (13, 2, 3), 1),
    ],
)
def test_riflex_reaches_the_attention(build, inputs_of, table_of, blocks, base, dims, k):
    """RIFLEx on the frames (pair k lowered to 0.9 * 2 pi / frames, past its period): the
    tables the attention receives are the rule's, and the outputs are those of the model
    whose rotary module returns the rule's float64 tables rounded once; the checkpoint, the
    report, a second patch and unpatch as the contract says."""
    model = build()
    f, h, w = dims
    inputs = inputs_of(f, 2 * h, 2 * w, 500)
    before = _out(model, inputs)
    rule = ({"rope_type": "riflex", "k": k}, None, None)
    patched = copy.deepcopy(model)
    report = patch(patched, scaling=rule)
    (row,) = [r for r in report.replaced if r.path == "rope"]
    assert "'riflex'" in row.replacement, str(report)
    assert row.mode == "exact"
    lowered = riflex_ladder(blocks[0], base, k, f)
    assert round(2 * math.pi / ladder(blocks[0], base)[k - 1]) < f  # past its period
    ladders = [lowered, ladder(blocks[1], base), ladder(blocks[2], base)]
    out, tables = _captured(patched, "rope", inputs)
    want = table_of(dims, ladders)
    for g, w64 in zip(tables, want, strict=True):
        _close(g, w64.double().numpy())
    reference = _swapped(model, "rope", lambda *a, **kw: want)
    patch(reference)  # the timestep embedding exact too: only the rotary tables differ
    torch.testing.assert_close(out, _out(reference, inputs), rtol=0, atol=1e-6)
    assert not torch.allclose(out, before, rtol=0, atol=1e-4)  # the rule did act
    patched.load_state_dict(model.state_dict(), strict=True)
    assert list(patched.state_dict()) == list(model.state_dict())
    assert not patch(patched, scaling=rule).replaced  # twice: a no-op
    unpatch(patched)
    assert torch.equal(_out(patched, inputs), before)


def _kijai_wan(model, f, k, length):
    """kijai's ComfyUI-WanVideoWrapper ``rope_params`` with RIFLEx: Wan's float64 frame
    ladder with pair k set to the double ``0.9 * 2 pi / length``, its table rounded to
    float32 into the module's buffers (the frame block is the first ``d_t`` columns)."""
    out = copy.deepcopy(model)
    rope = out.rope
    d_t = rope.t_dim
    freqs = 1.0 / (1e4 ** (torch.arange(0, d_t, 2, dtype=torch.float64)[: d_t // 2] / d_t))
    freqs[k - 1] = 0.9 * 2 * math.pi / length
    angles = torch.outer(torch.arange(rope.max_seq_len, dtype=torch.float64), freqs)
    rope.freqs_cos[:, :d_t] = angles.cos().repeat_interleave(2, 1).float()
    rope.freqs_sin[:, :d_t] = angles.sin().repeat_interleave(2, 1).float()
    return out


def _thu_ml(dims, blocks, theta, k, length):
    """thu-ml/RIFLEx's ``get_1d_rotary_pos_embed_riflex`` per axis (HunyuanVideo's and
    CogVideoX's rotary code): each axis' float32 ladder from an integer arange, the frames'
    pair k set to the double ``0.9 * 2 pi / length``, float32 outer products with positions
    ``0 … n - 1``, cos and sin, each column twice; broadcast to the grid, ``[S, D]``."""

    def one(d, n, pair=None):
        freqs = 1.0 / (theta ** (torch.arange(0, d, 2)[: d // 2].float() / d))
        if pair is not None:
            freqs[pair - 1] = 0.9 * 2 * math.pi / length
        angles = torch.outer(torch.arange(n, dtype=torch.float32), freqs)
        return angles.cos().repeat_interleave(2, 1), angles.sin().repeat_interleave(2, 1)

    parts = [one(d, n, k if a == 0 else None)
             for a, (d, n) in enumerate(zip(blocks, dims, strict=True))]  # fmt: skip
    out = []
    for j in (0, 1):
        pieces = []
        for a, part in enumerate(parts):
            shape = [1, 1, 1, part[j].shape[-1]]
            shape[a] = dims[a]
            pieces.append(part[j].reshape(shape).expand(*dims, -1))
        out.append(torch.cat(pieces, -1).reshape(math.prod(dims), -1))
    return tuple(out)


def _thu_ml_hunyuan(model, k, length):
    """HunyuanVideo's rotary module as thu-ml/RIFLEx's ``HunyuanVideoRotaryPosEmbedRifleX``."""
    rope = model.rope

    def tables(hidden_states):
        _, _, f, h, w = hidden_states.shape
        dims = (f // rope.patch_size_t, h // rope.patch_size, w // rope.patch_size)
        return _thu_ml(dims, rope.rope_dim, rope.theta, k, length)

    return _swapped(model, "rope", tables)


@pytest.mark.parametrize("family", ["wan", "hunyuan-video"])
def test_riflex_compat_is_its_references_bit_for_bit(family):
    """``compat="original"`` with RIFLEx: Wan's tables as kijai's float64 ``rope_params``,
    HunyuanVideo's as thu-ml's float32 function; the outputs ``torch.equal`` those of the
    model whose rotary module is the reference's."""
    f, k = 9, 1
    if family == "wan":
        model, inputs = _wan(), _wan_inputs(f, 6, 4, 500)
        reference = _kijai_wan(model, f, k, f)
    else:
        model, inputs = _hunyuan(), _hunyuan_inputs(f, 4, 6, 500)
        reference = _thu_ml_hunyuan(model, k, f)
    patched = copy.deepcopy(model)
    report = patch(patched, compat="original", scaling=({"rope_type": "riflex", "k": k}, None,
                                                        None))  # fmt: skip
    (row,) = [r for r in report.replaced if r.path == "rope"]
    assert row.mode == "compat"
    assert "'riflex'" in row.replacement
    assert torch.equal(_out(patched, inputs), _out(reference, inputs))
    assert not torch.equal(_out(patched, inputs), _out(model, inputs))  # the rule did act


def test_cogvideox_takes_the_rule_in_its_pipeline_tables():
    """CogVideoX's tables are made by its pipeline and passed as ``image_rotary_emb``: ``patch``
    has no module to change and says where the rule goes; posenc's ``rope_grid`` of the rule
    (``compat="diffusers"``: RIFLEx as thu-ml's CogVideoX code) passed there gives the outputs
    of thu-ml's tables bit for bit."""
    torch.manual_seed(0)
    model = diffusers.CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=64, in_channels=4, out_channels=4,
        time_embed_dim=16, text_embed_dim=16, num_layers=1, sample_width=8, sample_height=8,
        sample_frames=9, patch_size=2, max_text_seq_length=5,
        use_rotary_positional_embeddings=True).eval()  # fmt: skip
    riflex = ({"rope_type": "riflex", "k": 2}, None, None)
    with pytest.raises(PosencError, match=r"CogVideoXTransformer3DModel's tables are made by its "
                       r"pipeline.*preset='cogvideox'"):  # fmt: skip
        patch(model, scaling=riflex)
    f, dims = 25, (25, 4, 4)  # 97 frames' latents past pair 2's period (20)
    g = torch.Generator().manual_seed(1)
    inputs = {"hidden_states": torch.randn(1, f, 4, 8, 8, generator=g),
              "encoder_hidden_states": torch.randn(1, 5, 16, generator=g),
              "timestep": torch.tensor([500])}  # fmt: skip
    ours = posenc.rope_grid(dims, 64, preset="cogvideox", scaling=riflex, compat="diffusers",
                            dtype=torch.float32)  # fmt: skip
    thu_ml = _thu_ml(dims, (16, 24, 24), 1e4, 2, f)
    unscaled = posenc.rope_grid(dims, 64, preset="cogvideox", compat="diffusers",
                                dtype=torch.float32)  # fmt: skip
    with torch.no_grad():
        got = model(**inputs, image_rotary_emb=ours).sample
        want = model(**inputs, image_rotary_emb=thu_ml).sample
        plain = model(**inputs, image_rotary_emb=unscaled).sample
    assert torch.equal(got, want)
    assert not torch.equal(got, plain)


def test_cosmos_ntk_aware_is_its_own_rope_scale():
    """Cosmos' NTK-aware rule on rows and columns: exact, the float64 ladder of the raised
    base; with ``compat="original"``, bit for bit the model built with that ``rope_scale``."""
    model, inputs = _cosmos(), _cosmos_inputs(3, 10, 6, 0.5)
    aware = {"rope_type": "ntk-aware", "factor": 2.0}
    compat = copy.deepcopy(model)
    patch(compat, compat="original", scaling=(None, aware, aware))
    scaled = _cosmos((1.0, 2.0, 2.0))
    scaled.load_state_dict(model.state_dict(), strict=True)
    assert torch.equal(_out(compat, inputs), _out(scaled, inputs))

    exact = copy.deepcopy(model)
    patch(exact, scaling=(None, aware, aware))
    out, tables = _captured(exact, "rope", inputs)
    d_t, d_s = 8, 8
    raised = 1e4 * 2.0 ** (d_s / (d_s - 2))
    want = _halves(_grid_ids((3, 5, 3)), [ladder(d_t, 1e4), ladder(d_s, raised),
                                          ladder(d_s, raised)])  # fmt: skip
    for g, w in zip(tables, want, strict=True):
        _close(g, w)
    reference = _swapped(model, "rope", lambda *a, **kw: _f32(*want))
    patch(reference)
    torch.testing.assert_close(out, _out(reference, inputs), rtol=0, atol=1e-6)
    exact.load_state_dict(model.state_dict(), strict=True)
    assert not patch(exact, scaling=(None, aware, aware)).replaced  # twice: a no-op


# ---------------------------------------------------------------------------------------------
# DyPE: the time read from each forward's timestep


def _dype_ladders(blocks, base, extents, length):
    """DyPE's per-axis ladders and magnitudes at a time, the frame axis untouched."""

    def at(time):
        ladders, magnitudes = [ladder(blocks[0], base)], [1.0]
        for d, n in zip(blocks[1:], extents, strict=True):
            s = n / length
            ladders.append(yarn_ladder(s, time**2, d, base, length) if s > 1 else ladder(d, base))
            magnitudes.append(yarn_magnitude(s))
        return ladders, magnitudes

    return at


def _flux_tables(at, time, ids):
    ladders, magnitudes = at(time)
    return _f32(*_interleaved(ids.double().numpy(), ladders, magnitudes))


def _qwen_tables(at, time, shape, text):
    f, h, w = shape
    ladders, magnitudes = at(time)
    image = _grid_ids(shape, (0, -(h - h // 2), -(w - w // 2)))
    first = max(h // 2, w // 2)
    ids = np.concatenate([image, np.repeat(np.arange(first, first + text)[:, None], 3, 1)])
    angles, m = _angles(ids, ladders), _scales(ladders, magnitudes)
    table = torch.complex(*_f32(np.cos(angles) * m, np.sin(angles) * m))
    return table[: f * h * w], table[f * h * w :]


def _flux_case(h, w):
    at = _dype_ladders((4, 6, 6), 1e4, (h, w), 4)

    def inputs_of(timestep):
        return _flux_inputs(1, h, w, timestep)

    def tables(time):
        return lambda ids: _flux_tables(at, time, ids)

    return _flux(), 1.0, "pos_embed", inputs_of, tables


def _qwen_case(h, w):
    at = _dype_ladders((16, 56, 56), 1e4, (h, w), 4)

    def inputs_of(timestep):
        return _qwen_inputs(1, h, w, timestep)

    def tables(time):
        def module(video_fhw, device, max_txt_seq_len):
            return _qwen_tables(at, time, (1, h, w), int(max_txt_seq_len))

        return module

    return _qwen(), 1.0, "pos_embed", inputs_of, tables


def _wan_case(h, w):
    at = _dype_ladders(WAN_BLOCKS, 1e4, (h, w), 4)

    def inputs_of(timestep):
        return _wan_inputs(2, 2 * h, 2 * w, timestep)

    def tables(time):
        return lambda hidden_states: _wan_tables((2, h, w), *at(time))

    return _wan(), 1000.0, "rope", inputs_of, tables


_DYPE_CASES = {"flux": _flux_case, "qwen-image": _qwen_case, "wan": _wan_case}
"""Per family: its model, its ``timestep`` at pure noise, its rotary module's path, its
inputs at a timestep, and the reference module's tables at a time (DyPE on an ``h x w``
grid, L = 4)."""


@pytest.mark.parametrize("family", ["flux", "qwen-image", "wan"])
def test_dype_follows_the_timestep_of_each_forward(family):
    """DyPE on rows and columns (trained extent L = 4 tokens, the grid 8 x 8: s = 2): at each
    ``timestep`` the attention receives DyPE's tables at time = timestep / the family's value
    at pure noise (FLUX and Qwen-Image 1, their pipelines dividing by 1000; Wan 1000), which
    differ from time to time; the outputs are those of the reference module at that time."""
    dype = {"rope_type": "dype", "original_max_position_embeddings": 4}
    model, noise, path, inputs_of, tables = _DYPE_CASES[family](8, 8)
    patched = copy.deepcopy(model)
    report = patch(patched, scaling=(None, dype, dype))
    (row,) = [r for r in report.replaced if r.path == path]
    assert "'dype'" in row.replacement
    assert f"timestep / {noise:g}" in row.replacement
    seen = {}
    for time in (0.9, 0.1):  # ladders that differ at these widths
        inputs = inputs_of(time * noise)
        out, got, want = _captured(patched, path, inputs, tables(time))
        m = yarn_magnitude(2.0)
        if family == "qwen-image":
            for g, w64 in zip(got, want, strict=True):
                _close(torch.view_as_real(g), torch.view_as_real(w64).double().numpy(), m)
        else:
            for g, w64 in zip(got, want, strict=True):
                _close(g, w64.double().numpy(), m)
        reference = _swapped(model, path, tables(time))
        patch(reference)
        torch.testing.assert_close(out, _out(reference, inputs), rtol=0, atol=1e-6)
        seen[time] = got
    assert not torch.equal(seen[0.9][0], seen[0.1][0])  # the tables follow the time
    patched.load_state_dict(model.state_dict(), strict=True)
    assert list(patched.state_dict()) == list(model.state_dict())
    assert not patch(patched, scaling=(None, dype, dype)).replaced  # twice: a no-op


def _official_ramp(r0, r1, d, theta, length):
    """The official code's ``find_correction_range`` and float32 ``linear_ramp_factor``, cast
    to float64."""
    c = lambda r: d * math.log(length / (r * 2 * math.pi)) / (2 * math.log(theta))  # noqa: E731
    lo = min(max(math.floor(c(r0)), 0), d // 2)
    hi = min(max(min(math.ceil(c(r1)), d - 1), 0), d // 2)
    hi = hi + 0.001 if lo == hi else hi
    return torch.clamp((torch.arange(d // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1).double()


def _official_dype(ids, theta, axes, length, time):
    """The official DyPE ``FluxPosEmbed`` (guyyariv/DyPE), written from the catalogue's
    arithmetic: axis 0 as diffusers has it; rows and columns with s = (max id + 1) / L > 1 by
    a float64 ladder, float32 ramps of the bands times t^2 cast to float64, float64 blends,
    cos and sin of float64 angles rounded to float32, times m rounded to float32."""
    pos = ids.float()
    tables = []
    for i, d in enumerate(axes):
        e = torch.arange(0, d, 2, dtype=torch.float64) / d
        omega = 1.0 / (theta**e)
        s = torch.tensor((float(pos[:, i].max()) + 1) / length, dtype=torch.float64)
        m = torch.tensor(1.0)
        if i > 0 and float(s) > 1:
            k = time**2
            pi = 1.0 / (s * theta**e)
            ntk = 1.0 / ((theta * s ** (d / (d - 2))) ** e)
            rb = _official_ramp(1.25 * k, 0.75 * k, d, theta, length)
            rg = _official_ramp(16.0 * k, 2.0 * k, d, theta, length)
            omega = (pi * rb + ntk * (1 - rb)) * rg + omega * (1 - rg)
            m = (0.1 * torch.log(s) + 1.0).float()
        angles = torch.outer(pos[:, i].double(), omega)
        tables.append([angles.cos().float() * m, angles.sin().float() * m])
    return tuple(torch.cat([t[j] for t in tables], 1).repeat_interleave(2, 1) for j in (0, 1))


def test_flux_dype_compat_is_the_official_code_bit_for_bit():
    """``compat="original"`` with DyPE on FLUX: the official code's own arithmetic, bit for
    bit (the attention receives its tables at each step's time, and the outputs equal the
    model whose rotary module is that code's), where its float32 steps leave it up to a few
    ulp from the exact tables."""
    dype = {"rope_type": "dype", "original_max_position_embeddings": 4}
    model = _flux()
    compat = copy.deepcopy(model)
    report = patch(compat, compat="original", scaling=(None, dype, dype))
    (row,) = [r for r in report.replaced if r.path == "pos_embed"]
    assert row.mode == "compat"
    for time in (0.9, 0.1):
        inputs = _flux_inputs(1, 8, 8, time)
        official = lambda ids, time=time: _official_dype(ids, 1e4, (4, 6, 6), 4, time)  # noqa: E731
        out, got, want = _captured(compat, "pos_embed", inputs, official)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
        reference = _swapped(model, "pos_embed", official)
        patch(reference, compat="original")  # the timestep embedding as diffusers has it
        assert torch.equal(out, _out(reference, inputs))
    with pytest.raises(PosencError, match="time 0 as the official DyPE code"):
        _out(compat, _flux_inputs(1, 8, 8, 0.0))


@pytest.mark.parametrize("time", [1.0, 0.5, 0.05])
def test_flux_dype_compat_at_4096_is_the_official_code(time):
    """FLUX.1 at 4096 x 4096 (256 x 256 ids, L = 64: s = 4 on rows and columns): the compat
    stand-in's tables are the official code's bit for bit; its float32 steps (the ramps, the
    two roundings of m) leave it within a few ulp of the exact tables (the catalogue: 3.6e-7
    at t = 1), where posenc's exact ones are within one rounding."""
    from posenc.torch._ids_rope import AxialRope
    from posenc.torch._scaled import Clock

    dype = {"rope_type": "dype"}  # L = 64 and s = 4: FLUX's record and the ids' span
    ids = torch.zeros(256, 256, 3)
    ids[..., 1], ids[..., 2] = torch.arange(256)[:, None], torch.arange(256)[None]
    ids = ids.reshape(-1, 3)
    tables = {}
    for compat in ("original", None):
        module = AxialRope(1e4, (16, 56, 56), False, compat, preset="flux")
        module.scale((None, dype, dype))
        module.clock = Clock(1.0, "FluxTransformer2DModel")
        module.clock.time = time
        tables[compat] = module(ids)
    official = _official_dype(ids, 1e4, (16, 56, 56), 64, time)
    assert all(torch.equal(g, w) for g, w in zip(tables["original"], official, strict=True))
    m = yarn_magnitude(4.0)
    h = yarn_ladder(4.0, time**2)
    want = _interleaved(ids.double().numpy(), [ladder(16, 1e4), h, h], (1.0, m, m))
    for exact, replay, w in zip(tables[None], official, want, strict=True):
        _close(exact, w, m)
        assert np.abs(replay.double().numpy() - w).max() < 8 * TOL * m


def test_qwen_image_scale_follows_the_image_not_the_prompt():
    """The hazard: ComfyUI-DyPE's Qwen-Image port measures s over every token's ids, the text's
    included (text at max(H/2, W/2) + i on every axis), so its scale grows with the prompt
    ((8 + L_text) / L here). posenc's rule reads the image's grid: the image's tables are the
    same for a 7- and a 40-token prompt, and only the text's rows differ."""
    dype = {"rope_type": "dype", "original_max_position_embeddings": 4}
    model = _qwen()
    patch(model, scaling=(None, dype, dype))
    _, (image7, text7) = _captured(model, "pos_embed", _qwen_inputs(1, 8, 8, 0.5, text=7))
    _, (image40, text40) = _captured(model, "pos_embed", _qwen_inputs(1, 8, 8, 0.5, text=40))
    assert torch.equal(image7, image40)
    assert torch.equal(text7, text40[:7])


def test_a_compiled_model_keeps_its_graphs_from_step_to_step():
    """DyPE in a torch.compile'd Wan: the graphs are compiled at the first step only; every
    step's outputs are the eager model's (the tables are made between the graphs, as the
    original module makes its own)."""
    dype = {"rope_type": "dype", "original_max_position_embeddings": 4}
    model = _wan()
    patch(model, scaling=(None, dype, dype))
    counter = compile_counter()
    compiled = torch.compile(model, backend=counter)
    counts = []
    for timestep in (999.0, 750.0, 500.0, 250.0, 10.0):
        inputs = _wan_inputs(2, 16, 16, timestep)
        assert torch.equal(_out(compiled, inputs), _out(model, inputs))
        counts.append(counter.frame_count)
    assert counts[0] > 0
    assert len(set(counts)) == 1, counts


# ---------------------------------------------------------------------------------------------
# switching, and what is refused


def test_patching_with_another_rule_or_none_switches():
    model = _wan()
    inputs = _wan_inputs(9, 6, 4, 500)
    plain = copy.deepcopy(model)
    patch(plain)
    riflex = ({"rope_type": "riflex", "k": 1}, None, None)
    patch(model, scaling=riflex)
    assert not torch.equal(_out(model, inputs), _out(plain, inputs))
    report = patch(model)
    (row,) = [r for r in report.replaced if r.path == "rope"]
    assert "switched" in row.note
    assert "scaling" not in row.replacement
    assert torch.equal(_out(model, inputs), _out(plain, inputs))


@pytest.mark.parametrize(
    ("build", "kwargs", "words"),
    [
        (_wan, {"scaling": "riflex"}, r"`scaling` must be a rule .* got 'riflex'"),
        (_wan, {"scaling": (None, None, None)}, r"`scaling` holds no rule"),
        (_wan, {"scaling": ({"rope_type": "riflex", "k": 9},)}, r"on rope .*`scaling` must be"),
        (_wan, {"scaling": ({"rope_type": "rifle"}, None, None)}, r"on rope .*'rifle'"),
        (_flux, {"compat": "original", "scaling": (None, {"rope_type": "riflex", "k": 1}, None)},
         r"on pos_embed \(FluxPosEmbed\).*no reference applies rope_type 'riflex'"),
        (_cosmos, {"scaling": (None, {"rope_type": "dype"}, None)},
         r"on rope .*does not know the `timestep`"),
        (lambda: torch.nn.Sequential(diffusers.models.embeddings.Timesteps(8, True, 0)),
         {"scaling": {"rope_type": "linear", "factor": 2.0}}, r"no rotary module"),
    ],
)  # fmt: skip
def test_a_rule_that_cannot_apply_is_refused_before_anything_changes(build, kwargs, words):
    model = build()
    before = copy.deepcopy(model.state_dict())
    kinds = [type(m).__name__ for m in model.modules()]
    with pytest.raises(PosencError, match=words):
        patch(model, **kwargs)
    assert [type(m).__name__ for m in model.modules()] == kinds  # nothing replaced
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_a_time_rule_needs_one_time_per_forward():
    """A batch at two times is refused (one table serves the batch), as is the rotary module
    called alone (no forward to read the time from) and a timestep past pure noise."""
    model = _wan()
    dype = {"rope_type": "dype", "original_max_position_embeddings": 4}
    patch(model, scaling=(None, dype, dype))
    inputs = _wan_inputs(2, 16, 16, 500)
    two = {**inputs, "hidden_states": inputs["hidden_states"].repeat(2, 1, 1, 1, 1),
           "encoder_hidden_states": inputs["encoder_hidden_states"].repeat(2, 1, 1),
           "timestep": torch.tensor([500.0, 400.0])}  # fmt: skip
    with pytest.raises(PosencError, match=r"`timestep` of WanTransformer3DModel must hold one"):
        _out(model, two)
    with pytest.raises(PosencError, match=r"must be in \[0, 1000\].*got 1500"):
        _out(model, {**inputs, "timestep": torch.tensor([1500.0])})
    fresh = _wan()
    patch(fresh, scaling=(None, dype, dype))
    with pytest.raises(PosencError, match="call the model, not its rotary module alone"):
        fresh.rope(inputs["hidden_states"])


def test_the_time_is_read_per_forward_and_kept_through_a_dry_run():
    """After a forward the time is gone (the rotary module called alone asks for the model);
    per-token timesteps with zeros (Wan 2.2's clean first frame) read the noised tokens' time;
    a dry run (a switch that changes nothing) keeps the hooks, so the next step still reads
    its time."""
    dype = {"rope_type": "dype", "original_max_position_embeddings": 4}
    model = _wan()
    patch(model, scaling=(None, dype, dype))
    inputs = _wan_inputs(2, 16, 16, 900)
    _out(model, inputs)
    with pytest.raises(PosencError, match="call the model"):
        model.rope(inputs["hidden_states"])
    per_token = torch.full((1, 2 * 8 * 8), 900.0)
    per_token[:, : 8 * 8] = 0  # the first latent frame: a clean condition
    _, got = _captured(model, "rope", {**inputs, "timestep": per_token})
    _, want = _captured(model, "rope", inputs)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    patch(model, compat="original", dry_run=True)  # would switch: changes nothing
    _, late = _captured(model, "rope", _wan_inputs(2, 16, 16, 100))
    assert not torch.equal(late[0], want[0])  # time 0.1 read, not 0.9 kept


def test_the_tables_follow_the_module_s_dtype():
    """A rule's tables are made again in the dtype the module was moved to (Wan's stand-in
    follows ``.to()``, as its original's buffers do)."""
    model = _wan()
    patch(model, scaling=({"rope_type": "riflex", "k": 1}, None, None))
    x = torch.zeros(1, 4, 9, 4, 4)
    assert model.rope(x)[0].dtype == torch.float32
    model.to(torch.float64)
    assert model.rope(x)[0].dtype == torch.float64


def test_flux_ids_in_bfloat16_take_the_rule():
    """FLUX's pipeline passes its ids in the transformer's dtype: bfloat16 ids (integers below
    256, exact) give the float32 ids' tables under the rule."""
    dype = {"rope_type": "dype", "original_max_position_embeddings": 4}
    model = _flux()
    patch(model, scaling=(None, dype, dype))
    inputs = _flux_inputs(1, 8, 8, 0.5)
    _, want = _captured(model, "pos_embed", inputs)
    low = {
        **inputs,
        "img_ids": inputs["img_ids"].bfloat16(),
        "txt_ids": inputs["txt_ids"].bfloat16(),
    }
    _, got = _captured(model, "pos_embed", low)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize(
    ("first", "then", "words"),
    [
        (None, {"compat": "original", "scaling": (None, {"rope_type": "vision-yarn"}, None)},
         r"on rope .*'vision-yarn'"),
        ({"scaling": (None, {"rope_type": "dype"}, None)},
         {"compat": "original", "scaling": (None, {"rope_type": "dype"}, None)},
         r"on rope .*'dype'"),
    ],
)  # fmt: skip
def test_a_compat_rule_is_refused_at_patch_time_at_any_size(first, then, words):
    """A rule the compat replay cannot apply is refused when patching, though it changes
    nothing at the trained size (vision YaRN and DyPE leave the ladder there), and a switch
    of mode keeping the rule is refused before the stand-in in place is taken back."""
    model = _wan()
    if first is not None:
        patch(model, **first)
    kinds = [type(m).__name__ for m in model.modules()]
    with pytest.raises(PosencError, match=words):
        patch(model, **then)
    assert [type(m).__name__ for m in model.modules()] == kinds
