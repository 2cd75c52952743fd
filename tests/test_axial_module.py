"""posenc.torch.AxialRotaryEmbedding: the tables of posenc.rope_grid (equal, in every dtype)
from kept per-axis rows, with the production properties of the other modules: nothing in
the state dict, rows kept per dtype on the module's device and rebuilt by .to(), one graph
under torch.compile for every grid size, exports without float64 within 1e-6, meta-device
init."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PosencError
from tests import reference
from tests.helpers import onnx_session

torch = pytest.importorskip("torch")
import posenc.torch  # noqa: E402
from posenc.torch import AxialRotaryEmbedding  # noqa: E402


def _float64(dims, axes, base, starts, steps, blocks=None):
    """The float64 tables of a grid at positions ``start + i * step`` (interleaved)."""
    positions = [s0 + st * np.arange(n) for s0, st, n in zip(starts, steps, dims, strict=True)]
    return reference.axial_rope(dims, axes, base, blocks or list(range(len(dims))), positions)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize(
    ("kw", "dims"),
    [({"preset": "wan"}, (21, 45, 80)), ({"preset": "hunyuan-video"}, (5, 3, 7)),
     ({"preset": "hunyuan-dit", "start": (0, 4), "step": (1, 0.5)}, (32, 24)),
     ({"axes_dim": (16, 16), "layout": "halves", "axes_scale": (1.0, 0.5)}, (9, 11))],
)  # fmt: skip
def test_equals_rope_grid(kw, dims, dtype):
    head = {"wan": 128, "hunyuan-video": 128, "hunyuan-dit": 88}.get(kw.get("preset"), 32)
    module = AxialRotaryEmbedding(head, **kw)
    cos, sin = module(dims, dtype=dtype)
    want = posenc.rope_grid(dims, head, dtype=dtype, **kw)
    assert cos.dtype == dtype
    if dtype == torch.float64:  # both float64-accurate; the per-axis rows' last bits differ
        torch.testing.assert_close((cos, sin), want, rtol=0, atol=1e-15)
    else:  # rounded once from float64: the same numbers
        assert torch.equal(cos, want[0])
        assert torch.equal(sin, want[1])


def test_tables_are_exact_and_keep_nothing_in_the_state_dict():
    module = AxialRotaryEmbedding(88, preset="hunyuan-dit", start=(0, 4), step=(1.0, 0.5))
    cos, sin = module((64, 48))
    want = _float64((64, 48), (44, 44), 1e4, (0, 4), (1, 0.5), blocks=[1, 0])
    for got, w in zip((cos, sin), want, strict=True):
        np.testing.assert_array_less(np.abs(got.double().numpy() - w), 6e-8 * np.abs(w) + 1e-38)
    assert module.state_dict() == {}
    assert list(module.buffers()) == []


def test_grids_longer_than_the_kept_rows():
    module = AxialRotaryEmbedding(32, axes_dim=(16, 16), cached_length=8)
    cos, _ = module((3, 20))  # 20 columns > 8 kept rows
    want, _ = posenc.rope_grid((3, 20), 32, axes_dim=(16, 16), dtype=torch.float32)
    assert torch.equal(cos, want)


def test_to_rebuilds_the_rows_in_the_new_dtype():
    module = AxialRotaryEmbedding(128, preset="wan")
    module.to(torch.float64)
    cos, _ = module((3, 4, 5))
    assert cos.dtype == torch.float64
    want = _float64((3, 4, 5), (44, 42, 42), 1e4, (0, 0, 0), (1, 1, 1))[0]
    np.testing.assert_allclose(cos.numpy(), want, rtol=0, atol=1e-15)


def test_meta_init_then_to_empty():
    module = AxialRotaryEmbedding(128, preset="wan", device="meta")
    assert module((2, 3, 4))[0].is_meta
    module.to_empty(device="cpu")
    cos, _ = module((2, 3, 4))
    want, _ = posenc.rope_grid((2, 3, 4), 128, preset="wan", dtype=torch.float32)
    assert torch.equal(cos, want)


def test_compiled_one_graph_for_every_size():
    torch._dynamo.reset()
    module = AxialRotaryEmbedding(64, preset="cogvideox", cached_length=16)
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    for dims in [(3, 6, 9), (4, 7, 10), (2, 30, 5)]:  # past the kept rows too
        got = compiled(dims)
        want = module(dims)
        assert torch.equal(got[0], want[0])
        assert torch.equal(got[1], want[1])


class _Video(torch.nn.Module):
    """A video attention block's rotary tables, read off its latents' shape."""

    def __init__(self) -> None:
        super().__init__()
        self.rope = AxialRotaryEmbedding(128, preset="wan")

    def forward(self, latents):
        return self.rope(tuple(latents.shape[2:]))


def test_export_has_no_float64_and_stays_within_1e_6():
    f, h, w = (torch.export.Dim(n, min=2, max=512) for n in ("f", "h", "w"))
    program = torch.export.export(_Video(), (torch.zeros(1, 1, 3, 4, 5),),
                                  dynamic_shapes=({2: f, 3: h, 4: w},))  # fmt: skip
    doubles = [n for n in program.graph.nodes
               if getattr(n.meta.get("val"), "dtype", None) == torch.float64]  # fmt: skip
    assert doubles == []
    for dims in [(3, 4, 5), (21, 45, 80)]:
        cos, sin = program.module()(torch.zeros(1, 1, *dims))
        want = _float64(dims, (44, 42, 42), 1e4, (0, 0, 0), (1, 1, 1))
        assert np.abs(cos.double().numpy() - want[0]).max() < 1e-6
        assert np.abs(sin.double().numpy() - want[1]).max() < 1e-6


def test_onnx_runs_in_onnxruntime_within_1e_6_at_three_grids(tmp_path):
    f, h, w = (torch.export.Dim(n, min=2, max=512) for n in ("f", "h", "w"))
    session, (name,) = onnx_session(_Video().eval(), (torch.zeros(1, 1, 3, 4, 5),),
                                    ({2: f, 3: h, 4: w},), tmp_path / "axial.onnx")  # fmt: skip
    for dims in [(3, 4, 5), (7, 2, 9), (21, 45, 80)]:
        cos, sin = session.run(None, {name: np.zeros((1, 1, *dims), np.float32)})
        assert cos.dtype == np.float32
        assert cos.shape == (int(np.prod(dims)), 128)
        want = _float64(dims, (44, 42, 42), 1e4, (0, 0, 0), (1, 1, 1))
        assert np.abs(cos - want[0]).max() < 1e-6
        assert np.abs(sin - want[1]).max() < 1e-6


def test_positions_that_follow_the_grid_size():
    module = AxialRotaryEmbedding(64, preset="dinov3")  # patch centres of the grid asked for
    cos, _ = module((7, 9))
    want, _ = posenc.rope_grid((7, 9), 64, preset="dinov3", dtype=torch.float32)
    assert torch.equal(cos, want)


def test_bad_arguments():
    with pytest.raises(PosencError, match="needs one block per grid axis"):
        AxialRotaryEmbedding(64)
    for name, dim in (("ltx-video", 2048), ("lumina-next", 72)):  # axes in turn per frequency
        with pytest.raises(PosencError, match=f"take turns per frequency.*preset='{name}'"):
            AxialRotaryEmbedding(dim, preset=name)
    with pytest.raises(PosencError, match="`shape` must have 3 axes"):
        AxialRotaryEmbedding(128, preset="wan")((4, 4))
    with pytest.raises(PosencError, match="`cached_length`"):
        AxialRotaryEmbedding(128, preset="wan", cached_length=-1)


@pytest.mark.parametrize(
    "kw",
    [{"axes_dim": (16, 16, 16), "layout": "block-halves", "blocks": 3},
     {"axes_dim": (16, 16, 16), "layout": "block-halves", "blocks": 4},  # blocks across axes
     {"axes_dim": (8, 24, 16), "layout": "block-halves", "blocks": 2},
     {"preset": "allegro", "blocks": 6},
     {"preset": "allegro"}],
)  # fmt: skip
def test_block_halves_equals_rope_grid(kw):
    """``blocks=`` (halves inside each of that many blocks, aligned with the axes' blocks or
    not) gives rope_grid's table, and a float64 reference written here: each block of
    ``48 / blocks`` channels holds its frequencies twice over."""
    module = AxialRotaryEmbedding(48, **kw)
    dims = (3, 4, 5)
    cos, sin = module(dims)
    want = posenc.rope_grid(dims, 48, dtype=torch.float32, **kw)
    assert torch.equal(cos, want[0])
    assert torch.equal(sin, want[1])
    if "preset" in kw:
        return
    positions = [np.arange(n, dtype=np.float64) for n in dims]
    ref = [np.asarray(t) for t in reference.axial_rope(dims, kw["axes_dim"], 1e4, (0, 1, 2),
                                                        positions, "interleaved")]  # fmt: skip
    n, m = 24, 24 // kw["blocks"]
    cols = [j for b in range(kw["blocks"]) for _ in (0, 1) for j in range(b * m, (b + 1) * m)]
    for got, r in zip((cos, sin), ref, strict=True):
        want64 = r[:, 0::2][:, cols]  # one column per frequency, placed block by block
        assert want64.shape[1] == 2 * n
        np.testing.assert_array_less(np.abs(got.double().numpy() - want64),
                                     6e-8 * np.abs(want64) + 1e-12)  # fmt: skip
    assert "blocks=" in repr(module)


# -- one check for every grid: posenc.rope_grid's (posenc.evaluate.positions.grid_shape) --------

BAD_GRIDS = [(21, -45, 3), (21, 45.5, 3), (21, True, 3), (21, 45), (21, 45, 3, 2), (), "21x45x3"]
"""Grids rope_grid refuses: a negative size, a float, a bool, the wrong number of axes, none,
not a tuple."""


def _refusal(call):
    """The message of the PosencError ``call()`` raises."""
    with pytest.raises(PosencError) as info:
        call()
    return str(info.value)


@pytest.mark.parametrize("grid", BAD_GRIDS, ids=repr)
@pytest.mark.parametrize("kw", [{"preset": "wan"}, {"axes_dim": (64, 32, 32)}], ids=str)
def test_bad_grids_get_rope_grids_error(kw, grid):
    """AxialRotaryEmbedding refuses what rope_grid refuses, with its message word for word
    (naming `shape`, the rule and the value), before any work: not torch's errors."""
    want = _refusal(lambda: posenc.rope_grid(grid, 128, **kw))
    assert "`shape" in want
    assert _refusal(lambda: AxialRotaryEmbedding(128, **kw)(grid)) == want


@pytest.mark.parametrize(
    ("kw", "dim", "dims"),
    [({"preset": "wan"}, 128, (21, 0, 3)), ({"preset": "wan"}, 128, (0, 4, 5)),
     ({"preset": "hunyuan-dit", "start": (0, 4), "step": (1, 0.5)}, 88, (0, 7))],
)  # fmt: skip
def test_an_empty_axis_gives_rope_grids_empty_table(kw, dim, dims):
    cos, sin = AxialRotaryEmbedding(dim, **kw)(dims)
    want = posenc.rope_grid(dims, dim, dtype=torch.float32, **kw)
    assert cos.shape == sin.shape == want[0].shape == (0, dim)
    assert cos.dtype == want[0].dtype


def test_an_int_is_a_cube_as_in_rope_grid():
    cos, sin = AxialRotaryEmbedding(128, preset="wan")(4)
    want = posenc.rope_grid(4, 128, preset="wan", dtype=torch.float32)
    assert torch.equal(cos, want[0])
    assert torch.equal(sin, want[1])


def test_the_check_keeps_one_graph_for_every_size():
    """The grid's check reads no symbolic size: one graph under torch.compile, as before."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    module = AxialRotaryEmbedding(64, preset="cogvideox", cached_length=16)
    compiled = torch.compile(module, fullgraph=True, dynamic=True, backend=counter)
    for dims in [(3, 6, 9), (4, 7, 10), (2, 30, 5)]:
        assert torch.equal(compiled(dims)[0], module(dims)[0])
    assert counter.frame_count == 1


@pytest.mark.parametrize("grid", [(14, -14), (14, 14.5), (True, 14), (14,), (14, 14, 2), "14x14"])
def test_grid_encoding_refuses_what_posenc_grid_refuses(grid):
    """GridEncoding's `grid` gets posenc.grid's check of `shape`, named as its argument."""
    from posenc.torch import GridEncoding

    want = _refusal(lambda: posenc.grid(grid, 16)).replace("`shape", "`grid")
    module = GridEncoding(16)
    assert _refusal(lambda: module(torch.zeros(1, 196, 16), grid)) == want
    assert _refusal(lambda: module.encoding(grid)) == want


def test_grid_encoding_empty_and_square_grids_as_posenc_grid():
    from posenc.torch import GridEncoding

    module = GridEncoding(16, cls_token=True)
    for grid, tokens in (((0, 14), 1), (14, 197)):
        got = module(torch.zeros(1, tokens, 16), grid)[0]
        assert torch.equal(got, torch.from_numpy(posenc.grid(grid, 16, cls_token=True)))


def _stand_ins():
    """The stand-ins that take a grid from their caller: (id, its argument's name, the rope_grid
    keywords of its grids, a call on a grid, whether an empty axis is served)."""
    from posenc.torch._diffusers_rope import QwenImageRope
    from posenc.torch._timm_mrope import TimmMRopeEmbedding
    from posenc.torch._timm_rope import CAT, PERIODS, TimmRope, TimmRotaryEmbedding
    from posenc.torch._video_rope import Qwen21Rope
    from posenc.torch._video_rope_complex import AnyFlowCausalRope, AnyFlowRope, SanaWMRope

    cpu = torch.device("cpu")
    wan = {"dim": 48, "preset": "wan", "axes_dim": (16, 16, 16)}
    qwen = {"dim": 128, "preset": "qwen-image", "axes_dim": (16, 56, 56)}
    out = []
    for mode in (None, "diffusers"):
        sana = SanaWMRope(48, (16, 16, 16), 1e4, compat=mode)
        flow = AnyFlowRope(48, (16, 16, 16), 1e4, wide=True, compat=mode)
        far = AnyFlowCausalRope(48, (16, 16, 16), 1e4, (1, 2, 2), 64, compat=mode)
        qwen_image = QwenImageRope(1e4, (16, 56, 56), True, mode)

        def cfg(g):
            return {"total_frames": g[0], "full_frame_shape": g[1:]}

        out += [
            (f"sana-wm-{mode}", "`fhw", wan, lambda g, m=sana: m(g, cpu), True),
            (f"anyflow-{mode}", "`fhw", wan,
             lambda g, m=flow: m(cfg(g), cpu)["query"], True),
            (f"anyflow-far-{mode}", "`fhw", wan, lambda g, m=far: m(
                {**cfg(g), "num_compressed_frames": 1, "compressed_frame_shape": g[1:]}, cpu
            )["query"], True),
            (f"qwen-image-{mode}", "`video_fhw[0]", qwen,
             lambda g, m=qwen_image: m([g], cpu, 4)[0], True),
        ]  # fmt: skip
    qwen21 = Qwen21Rope(1e4, (16, 56, 56))
    out.append(("qwen-image-21", "`img_shapes[0]", qwen,
                lambda g: qwen21([g], torch.ones(8, dtype=torch.bool), cpu), False))  # fmt: skip
    for compat in (False, True):
        for rope in (TimmRope(CAT, "cat", 64, 1e4, 0.0, "ij", False),
                     TimmRope(CAT, "cat", 64, 1e4, 0.0, "ij", False, ref_feat_shape=(16, 16)),
                     TimmRope(PERIODS, "cat", 64, 100.0, 0.0, "ij", False)):  # fmt: skip
            timm = TimmRotaryEmbedding(rope, None, compat=compat)
            name = f"timm-{rope.preset}-{'compat' if compat else 'exact'}"
            out.append((name, "`shape", {"dim": 64, "axes_dim": (32, 32)},
                        lambda g, m=timm: m.get_embed(g), True))  # fmt: skip
        mrope = TimmMRopeEmbedding(64, (4, 6, 6), 1e4, compat=compat)
        out.append((f"timm-mrope-{compat}", "`shape", {"dim": 64, "axes_dim": (32, 32)},
                    lambda g, m=mrope: m.get_embed(g), True))  # fmt: skip
    return out


@pytest.mark.parametrize("stand_in", _stand_ins(), ids=lambda s: s[0])
def test_stand_ins_check_their_grids_as_rope_grid(stand_in):
    """Each stand-in that takes a grid from its caller refuses what rope_grid refuses, with
    rope_grid's message (its own argument's name for `shape`), before any work; an empty axis
    gives a table of no rows, as rope_grid's."""
    _, name, kw, call, serves_empty = stand_in
    k = len(kw["axes_dim"])
    good = (3, 4, 5)[:k]
    bad = [(good[0], size, *good[2:]) for size in (-4, 4.5, True)] + [good[:-1], (*good, 6)]
    for grid in bad:
        want = _refusal(lambda g=grid: posenc.rope_grid(g, **kw))
        got = _refusal(lambda g=grid: call(g))
        if len(grid) == k:  # one size: the same words
            assert got == want.replace("`shape", name), grid
        else:  # the number of axes: the rule, and the grid received
            assert got.startswith(f"{name}` must have {k} axes"), got
            assert got.endswith(f"got {grid}"), got
    if serves_empty:
        empty = (good[0], 0, *good[2:])
        assert posenc.rope_grid(empty, **kw)[0].shape[0] == 0
        got, full = call(empty), call(good)
        assert got.numel() == 0
        assert got.shape[-1] == full.shape[-1]


def _linear(factor):
    return {"rope_type": "linear", "factor": factor}


def _comfyui(factor):
    return {"rope_type": "dype-comfyui", "factor": factor, "time": 0.5,
            "original_max_position_embeddings": 4}  # fmt: skip


@pytest.mark.parametrize(
    ("preset", "shape", "scaling"),
    [
        ("hunyuan-dit", (6, 5), (_linear(2.0), None)),  # its column block first: block_axes
        ("hunyuan-dit", (6, 5), _linear(2.0)),  # one rule for the whole table
        ("flux", (1, 8, 12), (None, _comfyui(2.0), _comfyui(3.0))),  # global_factor: 3
        ("qwen-image", (1, 8, 12), (None, _comfyui(2.0), _comfyui(3.0))),  # centred positions
    ],
)
def test_a_rule_is_the_one_rope_grid_applies(preset, shape, scaling):
    """``AxialRotaryEmbedding(..., scaling=...)`` gives ``posenc.rope_grid``'s tables under the
    same keywords: one rule per grid axis, to the block that encodes it (HunyuanDiT's column
    block comes first), ComfyUI-DyPE's global factor from the other axes, the presets whose
    positions follow the grid; and the rule did act."""
    dim = 88 if preset == "hunyuan-dit" else 128
    module = AxialRotaryEmbedding(dim, preset=preset, scaling=scaling)
    got = module(shape)
    want = posenc.rope_grid(shape, dim, preset=preset, scaling=scaling, dtype=torch.float32)
    plain = posenc.rope_grid(shape, dim, preset=preset, dtype=torch.float32)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert not torch.equal(got[0], plain[0])
    assert "scaling=" in repr(module)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: posenc.rope(np.arange(4), 64, bse=1e4), r"rope\(\) got an unexpected keyword "
         r"argument 'bse' \(did you mean 'base'\?\)"),
        (lambda: posenc.rope(np.arange(4), 64, prest="llama"), r"'prest' \(did you mean 'preset'"),
        (lambda: posenc.rope_grid((2, 2), 64, sections=(16, 16)),
         r"rope_grid\(\) got an unexpected keyword argument 'sections'"),
        (lambda: AxialRotaryEmbedding(64, axes_dim=(32, 32), cached_lenght=8),
         r"'cached_lenght' \(did you mean 'cached_length'"),
        (lambda: posenc.torch.RotaryEmbedding(64, bse=1e4), r"'bse' \(did you mean 'base'"),
    ],
)  # fmt: skip
def test_an_unknown_keyword_is_python_s_type_error(call, words):
    with pytest.raises(TypeError, match=words):
        call()


def test_rotary_embedding_refuses_a_table_layout():
    """``block-halves`` is a table's layout (Allegro, LTX-2): RotaryEmbedding pairs channels
    and would rotate them as plain halves, so it refuses it, saying where it is given."""
    with pytest.raises(PosencError, match=r"'block-halves'.*posenc\.rope"):
        posenc.torch.RotaryEmbedding(64, layout="block-halves", blocks=2)
