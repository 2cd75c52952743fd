"""posenc.torch.patch on Kandinsky 5 (a small random-weight Kandinsky5Transformer3DModel from
a config, no download) and on Kandinsky 6's rotary modules inside a tiny root: compat="original"
leaves every output identical (float32, a bf16 model, other grid sizes, both scale factors), the
exact patch holds the float64 tables rounded once and moves the outputs by float32 noise, the
original checkpoint loads with strict=True, the report names the rotary modules, patching twice
is a no-op; Mochi's learned frequencies and the audio modules that hand out angles are reported,
left alone, with their reason."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers import transformer_kandinsky6 as k6  # noqa: E402
from diffusers.models.transformers import transformer_kandinsky6_sr as k6sr  # noqa: E402

from posenc.torch import patch  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


def _kandinsky5():
    torch.manual_seed(0)
    return diffusers.Kandinsky5Transformer3DModel(
        in_visual_dim=4, in_text_dim=16, in_text_dim2=8, time_dim=16, out_visual_dim=4,
        model_dim=64, ff_dim=64, num_text_blocks=1, num_visual_blocks=1,
        axes_dims=(16, 24, 24)).eval()  # fmt: skip


def _inputs(size=(3, 4, 6), scale=(1, 2, 2), text=5, dtype=torch.float32):
    torch.manual_seed(1)
    f, h, w = size
    return {"hidden_states": torch.randn(1, f, 2 * h, 2 * w, 4, dtype=dtype),
            "encoder_hidden_states": torch.randn(text, 16, dtype=dtype),
            "timestep": torch.tensor([500.0], dtype=dtype),
            "pooled_projections": torch.randn(1, 8, dtype=dtype),
            "visual_rope_pos": [torch.arange(f), torch.arange(h), torch.arange(w)],
            "text_rope_pos": torch.arange(text), "scale_factor": scale}  # fmt: skip


def _bf16(model):
    """The model in bfloat16 as from_pretrained(torch_dtype=bfloat16) loads it (its
    _keep_in_fp32_modules in float32); the rotary buffers turn bfloat16."""
    model.to(torch.bfloat16)
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in model._keep_in_fp32_modules:
            module.float()
    return model


def _out(model, inputs):
    with torch.no_grad():
        return model(**inputs).sample


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # its own norms
def test_kandinsky5_compat_is_identical_and_exact_is_close():
    model = _kandinsky5()
    before = _out(model, _inputs())
    compat = copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert rows["text_rope_embeddings"].original == "Kandinsky5RoPE1D"
    assert rows["visual_rope_embeddings"].original == "Kandinsky5RoPE3D"
    assert {r.mode for r in rows.values()} == {"compat"}
    assert rows["text_rope_embeddings"].max_diff > 1e-5  # float32 angles at row 1023
    assert torch.equal(_out(compat, _inputs()), before)
    for size, scale, text in [((1, 7, 3), (1, 3.16, 3.16), 9), ((5, 2, 9), (1, 2, 2), 1)]:
        x = _inputs(size, scale, text)
        assert torch.equal(_out(compat, x), _out(model, x))
    bf16, compat16 = _bf16(copy.deepcopy(model)), _bf16(copy.deepcopy(compat))
    x = _inputs(dtype=torch.bfloat16)
    assert torch.equal(_out(compat16, x), _out(bf16, x))

    exact = copy.deepcopy(model)
    assert {r.path: r.mode for r in patch(exact).replaced}["visual_rope_embeddings"] == "exact"
    out = _out(exact, _inputs())
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, before, rtol=0, atol=5e-2)  # q, k rounded to bfloat16
    exact.load_state_dict(model.state_dict(), strict=True)
    assert not exact.state_dict().keys() - model.state_dict().keys()
    assert len(patch(exact)) == 0
    assert len(patch(compat, compat="original")) == 0


def test_kandinsky5_exact_tables_are_the_float64_ones_rounded_once():
    model = _kandinsky5()
    patch(model)
    pos = [torch.arange(31), torch.arange(64), torch.arange(64)]  # 1024 x 1024, 121 frames
    rope = model.visual_rope_embeddings((2, 31, 64, 64), pos, (1, 3.16, 3.16))
    assert rope.shape == (2, 31, 64, 64, 1, 32, 2, 2)
    grids = np.meshgrid(np.arange(31), np.arange(64) / 3.16, np.arange(64) / 3.16, indexing="ij")
    theta = np.concatenate([g.reshape(-1)[:, None] * np.exp(-np.log(1e4) * np.arange(d // 2)
                                                            / (d // 2))
                            for g, d in zip(grids, (16, 24, 24), strict=True)], axis=1)  # fmt: skip
    cos = rope[1, ..., 0, :, 0, 0].reshape(len(theta), -1).double().numpy()
    sin = rope[1, ..., 0, :, 1, 0].reshape(len(theta), -1).double().numpy()
    for got, want in ((cos, np.cos(theta)), (sin, np.sin(theta))):
        np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-38)
    np.testing.assert_array_equal(rope[..., 0, 1].numpy(), -rope[..., 1, 0].numpy())  # -sin


class _Kandinsky6Rotary(torch.nn.Module):
    """Kandinsky 6's rotary modules and its apply, as the model holds and calls them."""

    def __init__(self):
        super().__init__()
        self.video_text_rope_embeddings = k6.Kandinsky6RoPE1D(128)
        self.audio_rope_embeddings = k6.Kandinsky6RoPE1D(64, freqs_scaling=0.37)
        self.visual_rope_embeddings = k6.Kandinsky6RoPE3D((32, 48, 48))
        self.sr_rope = k6sr.Kandinsky6SRRoPE3D((8, 12, 12))
        self.proj = torch.nn.Linear(128, 128)

    def forward(self, size, scale, text):
        torch.manual_seed(2)
        dtype = self.proj.weight.dtype
        pos = [torch.arange(n) for n in size]
        q = self.proj(torch.randn(*size, 2, 128, dtype=dtype))
        out = [k6.apply_rotary(q, self.visual_rope_embeddings(pos, scale))]
        small = torch.randn(*size, 2, 32, dtype=dtype)
        out.append(k6sr.apply_rotary(small, self.sr_rope(pos, scale)))
        t = torch.arange(text)
        out.append(k6.apply_rotary(q[0, 0, :text], self.video_text_rope_embeddings(t)))
        out.append(k6.apply_rotary(q[0, 0, :text, :, :64], self.audio_rope_embeddings(t)))
        return out


def test_kandinsky6_modules_compat_is_identical_and_exact_is_close():
    root = _Kandinsky6Rotary().eval()
    compat, exact = copy.deepcopy(root), copy.deepcopy(root)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert rows["visual_rope_embeddings"].original == "Kandinsky6RoPE3D"
    assert rows["sr_rope"].original == "Kandinsky6SRRoPE3D"
    assert rows["audio_rope_embeddings"].original == "Kandinsky6RoPE1D"
    assert "preset='kandinsky6'" in rows["audio_rope_embeddings"].replacement
    assert "freqs_scaling=0.37" in rows["audio_rope_embeddings"].replacement
    assert len(rows) == 4
    assert {r.mode for r in rows.values()} == {"compat"}
    patch(exact)
    with torch.no_grad():
        for size, scale, text in [((3, 5, 4), (1.0, 2.0, 2.0), 4), ((1, 9, 2), (1, 3.16, 3.16), 1)]:
            want = root(size, scale, text)
            assert all(
                torch.equal(a, b) for a, b in zip(compat(size, scale, text), want, strict=True)
            )
            for a, b in zip(exact(size, scale, text), want, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-4)
        bf16, compat16 = copy.deepcopy(root).to(torch.bfloat16), copy.deepcopy(compat)
        compat16.to(torch.bfloat16)  # the buffers of the original turn bfloat16 too
        for a, b in zip(compat16((2, 3, 4), (1, 2, 2), 3), bf16((2, 3, 4), (1, 2, 2), 3),
                        strict=True):  # fmt: skip
            assert a.dtype == torch.bfloat16
            assert torch.equal(a, b)
    audio = exact.audio_rope_embeddings(torch.arange(2048))  # the scaled frequencies
    theta = np.arange(2048)[:, None] * np.exp(-np.log(1e4) * np.arange(32) / 32) * 0.37
    got = audio[:, 0, :, 1, 0].double().numpy()
    np.testing.assert_array_less(np.abs(got - np.sin(theta)), 6e-8 * np.abs(np.sin(theta)) + 1e-38)
    exact.load_state_dict(root.state_dict(), strict=True)
    assert len(patch(exact)) == 0


def test_learned_and_angle_modules_are_left_alone_with_their_reason():
    from diffusers.models.autoencoders.autoencoder_same import RotaryEmbedding
    from diffusers.models.transformers.transformer_mochi import MochiRoPE
    from diffusers.models.transformers.transformer_stable_audio3 import (
        StableAudio3RotaryEmbedding,
    )

    root = torch.nn.Module()
    root.mochi, root.stable, root.same = MochiRoPE(), StableAudio3RotaryEmbedding(64), \
        RotaryEmbedding(32)  # fmt: skip
    report = patch(root)
    rows = {r.path: r for r in report}
    assert not report.replaced
    assert rows["mochi"].original == "MochiRoPE"
    assert "learned" in rows["mochi"].note
    assert "pos_frequencies" in rows["mochi"].note
    assert "angles" in rows["stable"].note
    assert "angles" in rows["same"].note
    assert rows["same"].original == "RotaryEmbedding"


def _omnigen():
    torch.manual_seed(0)
    factors = {"short_factor": (1 + torch.rand(16) * 0.1).tolist(),
               "long_factor": (1 + torch.rand(16) * 20).tolist()}  # fmt: skip
    return diffusers.OmniGenTransformer2DModel(
        in_channels=4, patch_size=2, hidden_size=64, num_attention_heads=2,
        num_key_value_heads=2, intermediate_size=32, num_layers=1, vocab_size=100,
        pad_token_id=0, rope_scaling=factors, pos_embed_max_size=16, time_step_dim=32,
        original_max_position_embeddings=16, max_position_embeddings=64).eval()  # fmt: skip


def _omnigen_inputs(h=4, w=6, text=5, shift=0):
    torch.manual_seed(1)
    n = text + 1 + h * w // 4
    return {"hidden_states": torch.randn(1, 4, h, w), "timestep": torch.tensor([0.5]),
            "input_ids": torch.randint(1, 100, (1, text)), "input_img_latents": [],
            "input_image_sizes": {}, "attention_mask": torch.ones(1, n, n),
            "position_ids": torch.arange(n)[None] + shift}  # fmt: skip


def test_omnigen_compat_is_identical_and_exact_is_close():
    model = _omnigen()
    compat, exact = copy.deepcopy(model), copy.deepcopy(model)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert rows["rope"].original == "OmniGenSuScaledRotaryEmbedding"
    assert rows["rope"].mode == "compat"
    assert rows["rope"].max_diff > 1e-7  # float32 angles (positions below 64 here)
    assert {r.path: r.mode for r in patch(exact).replaced}["rope"] == "exact"
    for kw in ({}, {"h": 8, "w": 8, "text": 7, "shift": 20}):  # short factors, then long
        x = _omnigen_inputs(**kw)
        want = _out(model, x)
        assert torch.equal(_out(compat, x), want)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(_out(compat, x), _out(model, x))
        torch.testing.assert_close(_out(exact, x), want, rtol=0, atol=1e-4)
    m = model.rope
    for n in (16, 300):  # the float64 table of the first item, the factors by the largest
        cos, sin = exact.rope(torch.zeros(1), torch.arange(n)[None].repeat(2, 1))
        ext = np.asarray(m.long_factor if n > 16 else m.short_factor)
        omega = 1e4 ** (-np.arange(0, 32, 2) / 32) / ext
        theta = np.arange(n)[:, None] * np.concatenate([omega, omega])[None]
        factor = np.sqrt(1 + np.log(64 / 16) / np.log(16))
        for got, want in ((cos, factor * np.cos(theta)), (sin, factor * np.sin(theta))):
            np.testing.assert_array_less(np.abs(got.double().numpy() - want),
                                         6e-8 * np.abs(want) + 1e-38)  # fmt: skip
    exact.load_state_dict(model.state_dict(), strict=True)
    assert not patch(exact).replaced  # OmniGenPatchEmbed's fixed table stays reported
    assert not patch(compat, compat="original").replaced


class _RotateHalf(torch.nn.Module):
    """Ideogram 4's and Cosmos 3's mrope, MiniMax-Music 3's, LongCat-AudioDiT's and Anima's
    1-D RoPE, called as their models call them."""

    def __init__(self):
        from diffusers.models.condition_embedders.condition_embedder_anima import (
            AnimaRotaryEmbedding,
        )
        from diffusers.models.transformers.transformer_cosmos3 import (
            Cosmos3VLTextRotaryEmbedding,
        )
        from diffusers.models.transformers.transformer_ideogram4 import Ideogram4MRoPE
        from diffusers.models.transformers.transformer_longcat_audio_dit import (
            AudioDiTRotaryEmbedding,
        )
        from diffusers.models.transformers.transformer_minimax_music3 import (
            MiniMaxMusic3RotaryEmbedding,
        )

        super().__init__()
        self.ideogram = Ideogram4MRoPE(128, 5_000_000, (24, 20, 20))
        self.cosmos3 = Cosmos3VLTextRotaryEmbedding(64, 1e6, (12, 10, 10))
        self.minimax = MiniMaxMusic3RotaryEmbedding(32, theta=5e5)
        self.audiodit = AudioDiTRotaryEmbedding(64, max_position_embeddings=50)
        self.anima = AnimaRotaryEmbedding(64)

    def forward(self, n, dtype):
        ids = torch.stack([torch.arange(n) // 7, 65536 + torch.arange(n) % 7,
                           65536 + torch.arange(n) % 5], dim=-1)[None]  # fmt: skip
        x, cpu = torch.zeros(2, n, 8, dtype=dtype), torch.device("cpu")
        return [*self.ideogram(ids), *self.cosmos3(ids.permute(2, 0, 1), cpu, dtype),
                *self.cosmos3(torch.arange(n)[None], cpu, dtype),
                *self.minimax(n, torch.device("cpu")), *self.audiodit(x), *self.audiodit(x, 3),
                *self.anima(x, torch.arange(n)[None].repeat(2, 1) + 5)]  # fmt: skip


def test_rotate_half_modules_compat_is_identical_and_exact_is_close():
    root = _RotateHalf()
    compat, exact = copy.deepcopy(root), copy.deepcopy(root)
    rows = {r.path: r for r in patch(compat, compat="original").replaced}
    assert {r.original for r in rows.values()} == {
        "Ideogram4MRoPE", "Cosmos3VLTextRotaryEmbedding", "MiniMaxMusic3RotaryEmbedding",
        "AudioDiTRotaryEmbedding", "AnimaRotaryEmbedding"}  # fmt: skip
    assert rows["ideogram"].max_diff > 1e-3  # float32 angles at 65536 + j, base 5e6
    patch(exact)
    for n, dtype in [(100, torch.float32), (37, torch.bfloat16)]:
        want = root(n, dtype)
        got = compat(n, dtype)
        assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(got, want, strict=True))
        with torch.autocast("cpu", dtype=torch.bfloat16):  # Anima's matmul is lowered
            under = root(n, dtype)
            assert all(a.dtype == b.dtype and torch.equal(a, b)
                       for a, b in zip(compat(n, dtype), under, strict=True))  # fmt: skip
        assert not torch.equal(under[-1], want[-1])  # Anima's angles in bfloat16 here
        for a, b in zip(exact(n, dtype), want, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-2)
    cos, sin = exact.ideogram(torch.tensor([[[3, 65536 + 9, 65536 + 4]]]))
    j = np.arange(64)
    axis = np.where((j % 3 == 1) & (j < 60), 1, np.where((j % 3 == 2) & (j < 60), 2, 0))
    theta = np.array([3, 65536 + 9, 65536 + 4])[axis] * 5e6 ** (-2 * j / 128)
    theta = np.concatenate([theta, theta])
    for got, want in ((cos, np.cos(theta)), (sin, np.sin(theta))):
        np.testing.assert_array_less(np.abs(got[0, 0].double().numpy() - want),
                                     6e-8 * np.abs(want) + 1e-38)  # fmt: skip
    exact.load_state_dict(root.state_dict(), strict=True)
    assert len(patch(exact)) == 0


def test_rotate_half_buffers_follow_bfloat16():
    """Ideogram 4's, Cosmos 3's and Anima's inv_freq buffers follow .to(bfloat16): patched then
    cast, or cast then patched, compat stays bit for bit; a bfloat16 module is covered, its
    exact tables those of the float32 one."""
    root = _RotateHalf()
    bf16 = copy.deepcopy(root).to(torch.bfloat16)
    compat, late, exact = copy.deepcopy(root), copy.deepcopy(bf16), copy.deepcopy(bf16)
    patch(compat, compat="original")
    compat.to(torch.bfloat16)
    kept = ("ideogram", "cosmos3", "anima")
    rows = {r.path: r.mode for r in patch(late, compat="original").replaced}
    assert all(rows[p] == "compat" for p in kept)
    rows = {r.path: r.mode for r in patch(exact).replaced}
    assert all(rows[p] == "exact" for p in kept)
    exact32 = copy.deepcopy(root)
    patch(exact32)
    for n, dtype in [(100, torch.float32), (37, torch.bfloat16)]:
        want = bf16(n, dtype)
        assert not torch.equal(want[0], root(n, dtype)[0])  # the rounded ladder shows
        for got in (compat(n, dtype), late(n, dtype)):
            assert all(a.dtype == b.dtype and torch.equal(a, b)
                       for a, b in zip(got, want, strict=True))  # fmt: skip
        assert all(torch.equal(a, b) for a, b in zip(exact(n, dtype), exact32(n, dtype),
                                                     strict=True))  # fmt: skip
