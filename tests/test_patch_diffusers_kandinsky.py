"""posenc.torch.patch on diffusers' rotate-half rotary modules that no image or video family
record holds, called as their models call them (Ideogram 4's and Cosmos 3's mrope, MiniMax-Music
3's, LongCat-AudioDiT's and Anima's 1-D RoPE): compat="original" leaves every output identical
(float32, bf16 autocast, the buffers patched then cast to bfloat16 or cast then patched), the
exact tables are the float64 ones rounded once, the checkpoint loads with strict=True, patching
twice is a no-op; Mochi's learned frequencies and the audio modules that hand out angles are
reported, left alone, with their reason. (Kandinsky 5 and 6: tests/families/test_kandinsky.py;
OmniGen: tests/families/test_omnigen.py.)"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_diffusers")


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
    calls = [(100, torch.float32), (37, torch.bfloat16)]

    def outputs(m, dtype):  # bfloat16: autocast (Anima's matmul is lowered) on the float32 root
        low = any(b.dtype == torch.bfloat16 for b in m.buffers())  # a bfloat16 root: as it is
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32 and not low):
            return [t for n, d in calls for t in m(n, d)]

    def exact(original, patched):
        for n, dtype in calls:
            for a, b in zip(patched(n, dtype), original(n, dtype), strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-2)
        cos, sin = patched.ideogram(torch.tensor([[[3, 65536 + 9, 65536 + 4]]]))
        j = np.arange(64)
        axis = np.where((j % 3 == 1) & (j < 60), 1, np.where((j % 3 == 2) & (j < 60), 2, 0))
        theta = np.array([3, 65536 + 9, 65536 + 4])[axis] * 5e6 ** (-2 * j / 128)
        theta = np.concatenate([theta, theta])
        for got, want in ((cos, np.cos(theta)), (sin, np.sin(theta))):
            np.testing.assert_array_less(np.abs(got[0, 0].double().numpy() - want),
                                         6e-8 * np.abs(want) + 1e-38)  # fmt: skip

    root = _RotateHalf()
    for n, dtype in calls:
        want = root(n, dtype)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not torch.equal(root(n, dtype)[-1], want[-1])  # Anima's angles in bfloat16
    paths = {"ideogram": "Ideogram4MRoPE", "cosmos3": "Cosmos3VLTextRotaryEmbedding",
             "minimax": "MiniMaxMusic3RotaryEmbedding", "audiodit": "AudioDiTRotaryEmbedding",
             "anima": "AnimaRotaryEmbedding"}  # fmt: skip
    contract = check_patch_contract(root, paths, outputs, exact)
    rows = {r.path: r for r in contract.compat.replaced}
    assert rows["ideogram"].max_diff > 1e-3  # float32 angles at 65536 + j, base 5e6


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
