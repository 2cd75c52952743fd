"""posenc.torch.patch on small random-weight timm vision transformers (no download). timm's
own ViTs learn their ``pos_embed``; a fixed sin-cos one is put there by the user's code, as
MoCo v3, MAE-style pretraining and timm's ``build_sincos2d_pos_embed`` do. Per table: the
report names it, ``compat="original"`` leaves the outputs identical (float32, bf16 autocast,
a bf16 model, another image size through ``dynamic_img_size``), the exact patch holds the
float64 reference rounded once, the original checkpoint loads with strict=True, a learned
table in it is refused, and patching twice is a no-op."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.errors import PosencError
from tests import reference

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
from timm.layers import build_sincos2d_pos_embed  # noqa: E402

from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402


def _vit(**kw):
    torch.manual_seed(0)
    options = {
        "img_size": 64,
        "patch_size": 8,
        "embed_dim": 64,
        "depth": 1,
        "num_heads": 4,
        "num_classes": 5,
    }
    return timm.models.vision_transformer.VisionTransformer(**{**options, **kw}).eval()


def _moco(h: int, w: int, dim: int) -> torch.Tensor:
    """MoCo v3's ``build_2d_sincos_position_embedding`` (float32 torch), restated."""
    grid_w, grid_h = torch.meshgrid(
        torch.arange(w, dtype=torch.float32), torch.arange(h, dtype=torch.float32), indexing="ij"
    )
    omega = 1.0 / 10000.0 ** (torch.arange(dim // 4, dtype=torch.float32) / (dim // 4))
    out_w = torch.einsum("m,d->md", grid_w.flatten(), omega)
    out_h = torch.einsum("m,d->md", grid_h.flatten(), omega)
    return torch.cat([out_w.sin(), out_w.cos(), out_h.sin(), out_h.cos()], dim=1)


def _fix(model, body: torch.Tensor) -> torch.Tensor:
    """Freeze ``body`` (the grid rows) into the model's ``pos_embed``, zero prefix rows."""
    prefix = model.pos_embed.shape[1] - body.shape[0]
    with torch.no_grad():
        model.pos_embed.copy_(torch.cat([torch.zeros(prefix, body.shape[1]), body])[None])
    model.pos_embed.requires_grad_(False)
    return model.pos_embed.detach().clone()


def _out(model, x):
    with torch.no_grad():
        return model(x)


def _float64_table(h, w, dim, prefix, kind):
    if kind == "timm":
        body = reference.timm_2d((h, w), dim)
    elif kind == "moco":  # timm-2d's reverse_coord with interleaved [sin | cos] blocks
        body = reference.timm_2d((h, w), dim, reverse_coord=True, interleave_sin_cos=True)
    else:
        body = reference.hf_2d(h, w, dim)
    return np.concatenate([np.zeros((prefix, dim)), body])


KINDS = {
    "timm": (lambda h, w, d: build_sincos2d_pos_embed([h, w], d), "timm-2d", True),
    "moco": (_moco, "2d", True),  # on a square grid, hf-2d's numbers
    "float64": (  # built in float64 and rounded once (transformers' builder, MAE's NumPy)
        lambda h, w, d: torch.from_numpy(reference.hf_2d(h, w, d)).float(),
        "hf-2d",
        False,
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize(
    "options",
    [{}, {"img_size": (64, 40)}, {"no_embed_class": True, "reg_tokens": 2}],
    ids=["square", "8x5-grid", "no-embed-class"],
)
def test_fixed_tables(kind, options):
    build, preset, float32_original = KINDS[kind]
    model = _vit(**options)
    h, w = model.patch_embed.grid_size
    saved = _fix(model, build(h, w, 64))
    prefix = saved.shape[1] - h * w
    x = torch.randn(2, 3, *model.patch_embed.img_size)

    def exact(original, patched):
        before = _out(original, x)
        assert not patched.pos_embed.state_dict()
        truth = _float64_table(h, w, 64, prefix, kind)
        got = patched.pos_embed.table[0].double().numpy()
        np.testing.assert_array_less(np.abs(got - truth), 6e-8 * np.abs(truth) + 1e-45)
        original_error = np.abs(saved[0].double().numpy() - truth).max()
        if float32_original:  # float32 bands and angles: off by more than a rounding
            assert original_error > 1e-7
            assert not torch.equal(_out(patched, x), before)
        else:
            assert torch.equal(_out(patched, x), before)
        torch.testing.assert_close(_out(patched, x), before, rtol=0, atol=1e-5)

    def outputs(m, dtype):
        return forward(m, {"x": x}, dtype)

    contract = check_patch_contract(model, {"pos_embed": "Parameter"}, outputs, exact)
    assert not contract.compat.left_alone
    assert preset in contract.compat[0].replacement
    got = contract.model.pos_embed.table[0].double().numpy()
    assert contract.exact[0].max_diff == pytest.approx(
        np.abs(saved[0].double().numpy() - got).max()
    )
    assert not patch(contract.model)  # patched: nothing left to do


def test_bigger_images_through_dynamic_img_size():
    model = _vit(dynamic_img_size=True)
    _fix(model, build_sincos2d_pos_embed([8, 8], 64))
    images = [torch.randn(1, 3, *size) for size in [(64, 64), (96, 48)]]

    def outputs(m, dtype):  # timm resamples its table: the stand-in is read alike
        for x in images:
            yield from forward(m, {"x": x}, dtype)

    def exact(original, patched):  # as test_fixed_tables at its own size
        for x in images:
            torch.testing.assert_close(_out(patched, x), _out(original, x), rtol=0, atol=1e-5)

    check_patch_contract(model, {"pos_embed": "Parameter"}, outputs, exact)


def test_learned_and_other_tables_are_left_alone():
    model = _vit()
    report = patch(model)
    assert [(r.path, r.mode, r.note) for r in report] == [
        ("pos_embed", None, "learned, left alone")
    ]
    frozen = _vit()
    frozen.pos_embed.requires_grad_(False)  # frozen, but random
    (row,) = patch(frozen)
    assert row.mode is None
    assert "not a sinusoid posenc knows" in row.note
    h, w = frozen.patch_embed.grid_size
    _fix(frozen, build_sincos2d_pos_embed([h, w], 64))
    with torch.no_grad():
        frozen.pos_embed[0, 0, 0] = 0.5  # a class row that is not zero
    (row,) = patch(frozen)
    assert row.mode is None
    assert "class-token rows are not zero" in row.note


def test_compat_leaves_a_table_it_cannot_repeat():
    model = _vit()
    body = torch.from_numpy(reference.timm_2d((8, 8), 64)).float()
    body[3, 5] = torch.nextafter(body[3, 5], torch.tensor(2.0))  # one ulp off every replay
    _fix(model, body)
    before = _out(model, torch.ones(1, 3, 64, 64))
    (row,) = patch(model, compat="original")
    assert row.mode is None
    assert "neither the exact ones nor timm's" in row.note
    assert torch.equal(_out(model, torch.ones(1, 3, 64, 64)), before)
    (row,) = patch(model)
    assert row.mode == "exact"
    assert row.max_diff < 1e-6


def test_a_learned_table_in_the_checkpoint_is_refused():
    model = _vit()
    _fix(model, build_sincos2d_pos_embed([8, 8], 64))
    learned = {k: v.clone() for k, v in model.state_dict().items()}
    learned["pos_embed"] = torch.randn_like(learned["pos_embed"])
    patch(model)
    with pytest.raises(PosencError, match="pos_embed"):
        model.load_state_dict(learned, strict=True)
    with pytest.warns(UserWarning, match="pos_embed"):
        model.load_state_dict(learned, strict=False)  # warned, the sinusoid kept
    truth = _float64_table(8, 8, 64, 1, "timm")
    np.testing.assert_allclose(model.pos_embed.table[0].double().numpy(), truth, atol=1e-7)
