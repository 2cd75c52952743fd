"""posenc.torch.patch on small random-weight diffusers transformers whose complex rotary tables
are gathered by ids (Lumina-Image-2.0's ``Lumina2RotaryPosEmbed``, Z-Image's ``RopeEmbedder``, a
plain attribute of the transformer; configs, no download): compat="original" leaves every output
identical (float32, a bf16 model, Lumina-Image-2.0's complex64 tables on an MPS host, captions
of other lengths), the exact patch moves the outputs by float32 noise, the original checkpoint
loads with strict=True, the report names the rotary module, and patching twice is a no-op."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.controlnets import controlnet_z_image  # noqa: E402
from diffusers.models.transformers import transformer_bria_fibo2  # noqa: E402

from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


def _lumina2():
    torch.manual_seed(0)
    return diffusers.Lumina2Transformer2DModel(
        sample_size=16, patch_size=2, in_channels=4, hidden_size=96, num_layers=1,
        num_refiner_layers=1, num_attention_heads=2, num_kv_heads=1, multiple_of=16,
        cap_feat_dim=32, axes_dim_rope=(16, 16, 16)).eval()  # fmt: skip


def _lumina2_inputs(caps, rows, cols, dtype=torch.float32):
    torch.manual_seed(1)
    mask = torch.zeros(len(caps), max(caps), dtype=torch.int64)
    for i, cap in enumerate(caps):
        mask[i, :cap] = 1
    return {"hidden_states": torch.randn(len(caps), 4, 2 * rows, 2 * cols, dtype=dtype),
            "timestep": torch.tensor([0.3, 0.7][: len(caps)], dtype=dtype),
            "encoder_hidden_states": torch.randn(len(caps), max(caps), 32, dtype=dtype),
            "encoder_attention_mask": mask}  # fmt: skip


def _lumina2_out(model, inputs):
    with torch.no_grad():
        return model(**inputs).sample


def test_lumina2():
    model = _lumina2()
    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert rows["rope_embedder"].original == "Lumina2RotaryPosEmbed"
    assert rows["rope_embedder"].mode == "compat"
    assert 0 < rows["rope_embedder"].max_diff < 1e-13  # both complex128
    patch(exact)
    for caps, h, w in (((7, 5), 6, 5), ((3,), 8, 8), ((1, 12), 3, 7)):
        x = _lumina2_inputs(caps, h, w)
        assert torch.equal(_lumina2_out(compat, x), _lumina2_out(model, x))
        torch.testing.assert_close(_lumina2_out(exact, x), _lumina2_out(model, x), rtol=0,
                                   atol=1e-5)  # fmt: skip
    bf16, compat16 = copy.deepcopy(model).to(torch.bfloat16), copy.deepcopy(compat)
    compat16.to(torch.bfloat16)
    x = _lumina2_inputs((7, 5), 6, 5, torch.bfloat16)
    assert torch.equal(_lumina2_out(compat16, x), _lumina2_out(bf16, x))
    tables = exact.rope_embedder.freqs_cis
    assert [t.dtype for t in tables] == [torch.complex128] * 3
    angle = np.arange(512)[:, None] * 1e4 ** (-np.arange(0, 16, 2) / 16)
    assert np.abs(tables[1].numpy() - np.exp(1j * angle)).max() < 1e-13
    exact.load_state_dict(model.state_dict(), strict=True)
    assert len(patch(exact)) == 0


def test_lumina2_on_a_host_with_mps(monkeypatch):
    """Built on a host with MPS, the module keeps complex64 tables of float32 angles: the
    compat stand-in repeats them, the exact one rounds the float64 values to complex64."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    model = _lumina2()
    assert model.rope_embedder.freqs_cis[0].dtype == torch.complex64
    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert rows["rope_embedder"].max_diff > 1e-6  # float32 angles
    patch(exact)
    x = _lumina2_inputs((7, 5), 6, 5)
    assert torch.equal(_lumina2_out(compat, x), _lumina2_out(model, x))
    torch.testing.assert_close(_lumina2_out(exact, x), _lumina2_out(model, x), rtol=0, atol=1e-4)
    table = exact.rope_embedder.freqs_cis[1]
    assert table.dtype == torch.complex64
    angle = np.arange(512)[:, None] * 1e4 ** (-np.arange(0, 16, 2) / 16)
    want = np.exp(1j * angle)
    for got, ref in ((table.real, want.real), (table.imag, want.imag)):
        np.testing.assert_array_less(np.abs(got.double().numpy() - ref), 6e-8 * np.abs(ref) + 1e-12)


def _z_image():
    torch.manual_seed(0)
    return diffusers.ZImageTransformer2DModel(
        all_patch_size=(2,), all_f_patch_size=(1,), in_channels=4, dim=64, n_layers=1,
        n_refiner_layers=1, n_heads=2, n_kv_heads=2, cap_feat_dim=32, axes_dims=[8, 12, 12],
        axes_lens=[256, 64, 64]).eval()  # fmt: skip


def _z_image_out(model, images, captions, dtype=torch.float32):
    torch.manual_seed(1)
    xs = [torch.randn(4, f, 2 * h, 2 * w, dtype=dtype) for f, h, w in images]
    caps = [torch.randn(n, 32, dtype=dtype) for n in captions]
    with torch.no_grad():
        return model(xs, torch.tensor([0.3, 0.6][: len(xs)], dtype=dtype), caps).sample


def test_z_image():
    model = _z_image()
    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    report = patch(compat, compat="original")
    rows = {r.path: r for r in report.replaced}
    assert rows["rope_embedder"].original == "RopeEmbedder"
    assert rows["rope_embedder"].max_diff > 1e-7  # float32 angles
    assert "rope_embedder" in dict(compat.named_modules())  # a module there now
    patch(exact)
    for images, captions in (([(1, 6, 5)], [7]), ([(1, 4, 4), (2, 3, 5)], [40, 3])):
        want = _z_image_out(model, images, captions)
        got = _z_image_out(compat, images, captions)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        for a, b in zip(_z_image_out(exact, images, captions), want, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-4)
    bf16, compat16 = copy.deepcopy(model).to(torch.bfloat16), copy.deepcopy(compat)
    compat16.to(torch.bfloat16)
    got = _z_image_out(compat16, [(1, 6, 5)], [7], torch.bfloat16)
    want = _z_image_out(bf16, [(1, 6, 5)], [7], torch.bfloat16)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    table = exact.rope_embedder.freqs_cis[0]  # exact: float64 values rounded once
    angle = np.arange(256)[:, None] * 256.0 ** (-np.arange(0, 8, 2) / 8)
    for part, ref in ((table.real, np.cos(angle)), (table.imag, np.sin(angle))):
        np.testing.assert_array_less(
            np.abs(part.double().numpy() - ref), 6e-8 * np.abs(ref) + 1e-12
        )
    exact.load_state_dict(model.state_dict(), strict=True)
    compat.load_state_dict(model.state_dict(), strict=True)
    assert set(exact.state_dict()) == set(model.state_dict())
    assert len(patch(exact)) == 0


class Holder(torch.nn.Module):
    """A module keeping a ``RopeEmbedder`` as Z-Image's ControlNet and Bria-FIBO2 do."""

    def __init__(self, embedder):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.rope_embedder = embedder


@pytest.mark.parametrize(
    "make",
    [
        lambda: controlnet_z_image.RopeEmbedder(256.0, [32, 48, 48], [1024, 512, 512]),
        lambda: transformer_bria_fibo2.RopeEmbedder(256.0, [32, 48, 48], [2048, 512, 512]),
    ],
)
def test_copies_of_the_rope_embedder(make):
    """ZImageControlNetModel's and Bria-FIBO2's copies, at their models' sizes."""
    ids = torch.cat([torch.stack([torch.arange(1, 513), torch.zeros(512, dtype=torch.int64),
                                  torch.zeros(512, dtype=torch.int64)], -1),
                     torch.stack(torch.meshgrid(torch.tensor([513]), torch.arange(64),
                                                torch.arange(64), indexing="ij"), -1
                                 ).reshape(-1, 3)])  # fmt: skip
    holder = Holder(make())
    want = holder.rope_embedder(ids)
    compat, exact = Holder(make()), Holder(make())
    rows = patch(compat, compat="original").replaced
    assert [(r.path, r.original) for r in rows] == [("rope_embedder", "RopeEmbedder")]
    assert rows[0].max_diff > 1e-5  # float32 angles at row 1023 (3.0e-5)
    assert torch.equal(compat.rope_embedder(ids), want)
    patch(exact)
    torch.testing.assert_close(exact.rope_embedder(ids), want, rtol=0, atol=1e-4)
    assert len(patch(compat, compat="original")) == 0
    assert len(patch(exact)) == 0
    compat.load_state_dict(holder.state_dict(), strict=True)


def test_dry_run_changes_nothing():
    model = _z_image()
    report = patch(model, dry_run=True)
    assert [r.path for r in report.replaced] == ["rope_embedder"]
    assert type(model.rope_embedder).__name__ == "RopeEmbedder"
    assert "rope_embedder" not in dict(model.named_modules())
