"""posenc.torch.patch covers a transformers vision tower whose rotary module follows
transformers' standard axial machinery (``compute_axial_rope_parameters``, ``inv_freq``,
``recomposition_frequencies``) by what the module holds, whatever its class: its ladder, its
axes and the layout its recomposition makes. MLCD, Kimi-K2.5, Inkling 2, VideoLLaMA 3 and
MiniMax-M3-VL's towers were "not covered yet" (rope_type 'axial'). compat="original" gives
the module's own tables bit for bit; the exact tables are the float64 formula rounded once,
laid out as each original's recomposition lays them (written here from each model's code);
the original checkpoint loads with strict=True; patching twice is a no-op."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_transformers")


def _h_w_twice(a):  # [N, 2, F] (row, column): [h | w | h | w]
    both = np.concatenate([a[:, 0], a[:, 1]], axis=1)
    return np.concatenate([both, both], axis=1)


def _w_h_pairs_twice(a):  # Kimi-K2.5: (w, h) frequency by frequency, twice
    pairs = a[:, ::-1, :].transpose(0, 2, 1).reshape(len(a), -1)
    return np.concatenate([pairs, pairs], axis=1)


def _w_h_interleaved(a):  # Inkling 2: [w | h], each angle twice
    return np.repeat(np.concatenate([a[:, 1], a[:, 0]], axis=1), 2, axis=1)


def _t_h_w_twice(a):  # MiniMax-M3: [t | h | w], twice
    flat = a.reshape(len(a), -1)
    return np.concatenate([flat, flat], axis=1)


TOWERS = {  # model type: (the rotary module's class, its layout, its grid)
    "mlcd_vision_model": ("MLCDRotaryEmbedding", _h_w_twice, (12, 17)),
    "video_llama_3_vision": ("VideoLlama3VisionRotaryEmbedding", _h_w_twice, (12, 17)),
    "kimi_k25_vision": ("Kimi_K25VisionRotaryEmbedding", _w_h_pairs_twice, (12, 17)),
    "inkling2_vision": ("Inkling2VisionRotaryEmbedding", _w_h_interleaved, (12, 17)),
    "minimax_m3_vl": ("MiniMaxM3VLVisionRotaryEmbedding", _t_h_w_twice, (3, 7, 9)),
}
LEARNED = {"kimi_k25_vision": ["patch_embed.pos_emb"],
           "inkling2_vision": ["embeddings.position_embedding"]}  # fmt: skip
"""The towers' learned position tables, left alone."""


def _model(model_type):
    from benchmarks.census import _overrides

    base = T.AutoConfig.for_model(model_type)
    config = T.AutoConfig.for_model(model_type, **_overrides(base, small=True, keep_head=True))
    torch.manual_seed(0)
    return T.AutoModel.from_config(config).eval()


def _ids(shape):
    return torch.cartesian_prod(*(torch.arange(n) for n in shape)).reshape(-1, len(shape))


def _tables(module, ids, dtype=torch.float32):
    with torch.no_grad():
        return module(torch.zeros(1, dtype=dtype), ids)


@pytest.mark.parametrize("model_type", TOWERS)
def test_a_tower_of_the_axial_machinery_is_covered(model_type):
    cls, layout, grid = TOWERS[model_type]
    model = _model(model_type)
    (path,) = [p for p, m in model.named_modules() if type(m).__name__ == cls]
    ids = _ids(grid) + 40  # away from the origin, where the float32 angles err
    others = [r.path for r in patch(copy.deepcopy(model), dry_run=True).replaced]

    def outputs(m, dtype):
        return _tables(m.get_submodule(path), ids, dtype)

    def exact(original, patched):
        theirs, ours = original.get_submodule(path), patched.get_submodule(path)
        assert type(ours).__name__ == "AxialRope"
        config = theirs.config
        head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        width = 2 * theirs.inv_freq.numel()
        omega = config.rope_parameters["rope_theta"] ** (-np.arange(0, width, 2) / width)
        angles = ids.numpy().astype(np.float64)[:, :, None] * omega  # [N, axes, width / 2]
        want = np.cos(layout(angles))
        assert want.shape[1] <= head
        err = np.abs(_tables(ours, ids)[0].double().numpy() - want).max()
        assert err < 2**-24  # float32 rounding of values in [-1, 1]
        assert err <= np.abs(_tables(theirs, ids)[0].double().numpy() - want).max()

    assert path in others
    check_patch_contract(model, others, outputs, exact, left_alone=LEARNED.get(model_type, ()))


def test_another_ladder_is_left_alone_saying_so():
    model = _model("mlcd_vision_model")
    model.vision_rotary_embedding.inv_freq *= 1.001
    row = next(r for r in patch(model, dry_run=True) if r.path == "vision_rotary_embedding")
    assert row.mode is None
    assert "not transformers' axial ladder" in row.note


def test_on_the_meta_device_a_fresh_module_is_read():
    from benchmarks.census import _overrides

    base = T.AutoConfig.for_model("mlcd_vision_model")
    config = T.AutoConfig.for_model("mlcd_vision_model", **_overrides(base, True, True))
    with torch.device("meta"):
        model = T.AutoModel.from_config(config)
    row = next(r for r in patch(model) if r.path == "vision_rotary_embedding")
    assert row.mode == "exact"
    model.to_empty(device="cpu")
    ids = _ids((5, 6))
    cos = _tables(model.vision_rotary_embedding, ids)[0].double().numpy()
    width = (config.hidden_size // config.num_attention_heads) // 2  # the ladder over half a head
    omega = config.rope_parameters["rope_theta"] ** (-np.arange(0, width, 2) / width)
    want = np.cos(_h_w_twice(ids.numpy().astype(np.float64)[:, :, None] * omega))
    assert np.abs(cos - want).max() < 2**-24
