"""posenc.torch.patch on whole small random-weight diffusers models (configs, no download) of
the families whose rotary modules are otherwise tested inside a tiny root: Framepack,
Motif-Video, Helios, SANA-WM, AnyFlow, AnyFlow FAR, Qwen-Image 2.1, MiniMax-H3 (transformer
and VAE decoder), Wan-Animate, Kandinsky 6 and Kandinsky 6 SR. compat="original" leaves every
output identical (float32, bfloat16 activations, and the model in bfloat16, cast before or
after the patch), the report names the rotary modules (and the Timesteps), the exact patch moves
the outputs by float32 noise only, the original checkpoint loads with strict=True, and patching
twice is a no-op (tests/contract.py). Each model is checked to depend on its rotary
tables, so that identical outputs say something."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from posenc.torch import patch  # noqa: E402
from tests.contract import check_patch_contract, forward  # noqa: E402
from tests.families.models import WAN_SMALL  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("quiet_diffusers"),
    # AnyFlow FAR's block mask and Kandinsky 6 SR's NABLA attention: flex attention, eagerly
    pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile"),
]


def _video(channels=4, size=(3, 10, 6), frames_first=False, **extra):
    """Latents ``[1, C, F, H, W]`` (``[1, F, C, H, W]`` with ``frames_first``), a timestep,
    5 text tokens of width 16, and ``extra`` (made after a fixed seed)."""
    torch.manual_seed(1)
    f, h, w = size
    shape = (1, f, channels, h, w) if frames_first else (1, channels, f, h, w)
    return {"hidden_states": torch.randn(shape), "timestep": torch.tensor([500]),
            "encoder_hidden_states": torch.randn(1, 5, 16), **extra}  # fmt: skip


def _framepack():
    return diffusers.HunyuanVideoFramepackTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=32, num_layers=1,
        num_single_layers=1, num_refiner_layers=1, text_embed_dim=16, pooled_projection_dim=8,
        rope_axes_dim=(8, 12, 12), guidance_embeds=False, has_image_proj=True, image_proj_dim=8,
        has_clean_x_embedder=True)  # fmt: skip


def _framepack_inputs():
    """3 frames at indices 9 … 11 after clean frames 0, 8 and 2x, 4x pooled histories (odd
    sizes: their tables are padded and averaged over 2 x 2 x 2 and 4 x 4 x 4 cells)."""
    x = _video(size=(3, 10, 6))
    return {**x, "encoder_attention_mask": torch.ones(1, 5),
            "pooled_projections": torch.randn(1, 8), "image_embeds": torch.randn(1, 3, 8),
            "indices_latents": torch.tensor([9, 10, 11]),
            "latents_clean": torch.randn(1, 4, 2, 10, 6),
            "indices_latents_clean": torch.tensor([0, 8]),
            "latents_history_2x": torch.randn(1, 4, 3, 10, 6),
            "indices_latents_history_2x": torch.tensor([1, 2, 3]),
            "latents_history_4x": torch.randn(1, 4, 5, 10, 6),
            "indices_latents_history_4x": torch.arange(4, 9)}  # fmt: skip


def _motif():
    return diffusers.MotifVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=32, num_layers=1,
        num_single_layers=1, text_embed_dim=16, rope_axes_dim=(8, 12, 12))  # fmt: skip


def _motif_inputs():
    return _video(size=(5, 10, 6), encoder_attention_mask=torch.ones(1, 5))


def _helios():
    return diffusers.HeliosTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=4,
        out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=1,
        rope_dim=(8, 12, 12))  # fmt: skip


def _helios_inputs():
    """Frames 9 … 11 after short, mid (pooled 2 x 2 x 2) and long (4 x 4 x 4) histories."""
    x = _video(size=(3, 10, 6))
    return {**x, "indices_hidden_states": torch.tensor([[9, 10, 11]]),
            "latents_history_short": torch.randn(1, 4, 2, 10, 6),
            "indices_latents_history_short": torch.tensor([[7, 8]]),
            "latents_history_mid": torch.randn(1, 4, 3, 10, 6),
            "indices_latents_history_mid": torch.tensor([[4, 5, 6]]),
            "latents_history_long": torch.randn(1, 4, 4, 10, 6),
            "indices_latents_history_long": torch.tensor([[0, 1, 2, 3]])}  # fmt: skip


def _sana_wm():
    """2 blocks: a gated-delta-net one and a softmax one (every 2nd), both rotary."""
    return diffusers.SanaWMTransformer3DModel(
        in_channels=4, num_layers=2, hidden_size=64, num_attention_heads=2, patch_size=(1, 2, 2),
        softmax_every_n=2, linear_head_dim=32, caption_channels=16, mlp_ratio=2.0,
        chunk_plucker_post_attn_blocks=2)  # fmt: skip


def _sana_wm_inputs():
    x = _video(size=(3, 10, 6))
    return {**x, "timestep": torch.full((1, 1, 3), 500), "encoder_attention_mask": torch.ones(1, 5),
            "encoder_hidden_states": x["encoder_hidden_states"][:, None]}  # fmt: skip


def _anyflow():
    return diffusers.AnyFlowTransformer3DModel(**WAN_SMALL)


def _anyflow_inputs():
    return _video(size=(3, 10, 6), frames_first=True, timestep=torch.full((1, 3), 500.0),
                  r_timestep=torch.full((1, 3), 300.0))  # fmt: skip


def _far():
    """Chunks (1, 2, 2) with 2 kept whole: the first frame is pooled 4 x 4 by the FAR branch."""
    return diffusers.AnyFlowFARTransformer3DModel(
        patch_size=(1, 2, 2), compressed_patch_size=(1, 4, 4), full_chunk_limit=2,
        num_attention_heads=2, attention_head_dim=24, in_channels=4, out_channels=4, text_dim=16,
        freq_dim=32, ffn_dim=32, num_layers=1, rope_max_seq_len=64,
        chunk_partition=(1, 2, 2))  # fmt: skip


def _far_inputs():
    return _video(size=(5, 8, 12), frames_first=True, timestep=torch.full((1, 5), 500.0),
                  r_timestep=torch.full((1, 5), 300.0), chunk_partition=[1, 2, 2])  # fmt: skip


def _qwen21():
    return diffusers.QwenImage21Transformer2DModel(
        patch_size=1, in_channels=16, out_channels=4, num_layers=1, attention_head_dim=128,
        num_attention_heads=1, context_in_dim=16, axes_dims_rope=(16, 56, 56))  # fmt: skip


def _qwen21_inputs():
    """2 text tokens, a 2 x 4 condition image (2 slots of 4 tokens), 3 text tokens, then the
    4 x 6 target image (6 slots)."""
    torch.manual_seed(1)
    mask = torch.tensor([[False, False, True, True, False, False, False] + [True] * 6])
    return {"hidden_states": torch.randn(1, 8 + 24, 16),
            "encoder_hidden_states": torch.randn(1, 7, 16), "timestep": torch.tensor([0.5]),
            "img_shapes": [[(1, 2, 4), (1, 4, 6)]], "img_mask": mask,
            "encoder_hidden_states_mask": torch.ones(1, 7, dtype=torch.bool)}  # fmt: skip


def _minimax_h3():
    """Heads of 48 = 2 x 3 axes x 8 frequencies."""
    return diffusers.MiniMaxH3Transformer3DModel(
        num_attention_heads=2, attention_head_dim=48, hidden_size=96, num_layers=1,
        num_refiner_layers=1, ffn_dim=32, in_channels=4, audio_in_channels=4, text_dim=16,
        freq_dim=32, time_embed_hidden_dim=32, time_embed_dim=32, rope_freq_dim=8)  # fmt: skip


def _minimax_h3_inputs():
    """5 text rows at (10 + i) on all axes, a 2 x 3 x 4 video grid, 3 audio rows at 20 + i."""
    torch.manual_seed(1)
    axes = [torch.arange(n) for n in (2, 3, 4)]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    text, audio = torch.arange(10, 15), torch.arange(20, 23)
    position_ids = torch.cat([text[:, None].repeat(1, 3), grid, audio[:, None].repeat(1, 3)])
    nt, nv, na = 5, len(grid), 3
    tags = torch.tensor([1] * nt + [0] * nv + [2] * na)
    return {"hidden_states": torch.randn(1, nv, 16), "audio_hidden_states": torch.randn(1, na, 4),
            "encoder_hidden_states": torch.randn(1, nt, 16), "timestep": torch.tensor([0.0, 0.5]),
            "timestep_indices": (tags != 1).long(), "token_tags": tags,
            "position_ids": position_ids, "text_indices": torch.arange(nt),
            "video_indices": torch.arange(nt, nt + nv),
            "audio_indices": torch.arange(nt + nv, nt + nv + na)}  # fmt: skip


def _minimax_h3_vae():
    """Its ViT decoder rotates 24 of each head's 32 channels (rope_dim_ratio 0.75)."""
    return diffusers.AutoencoderKLMiniMaxH3(
        block_out_channels=(8, 16), layers_per_block=1, spatial_downsample_factors=(2, 1),
        temporal_downsample_factors=(1, 2), norm_num_groups=4, latent_channels=4,
        decoder_num_layers=1, decoder_num_attention_heads=2, decoder_attention_head_dim=32,
        decoder_num_register_tokens=2, decoder_ffn_mult=1, clip_length=5, token_drop=1,
        latents_mean=(0.0,) * 4, latents_std=(1.0,) * 4)  # fmt: skip


def _minimax_h3_vae_inputs():
    """5 latent frames: two overlapping clips of 3, cross-faded."""
    torch.manual_seed(1)
    return {"z": torch.randn(1, 4, 5, 3, 4)}


def _wan_animate():
    """One block, with the face adapter after it; 16 x 16 faces."""
    return diffusers.WanAnimateTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=24, in_channels=12,
        latent_channels=4, out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=1,
        image_dim=8, rope_max_seq_len=64, motion_encoder_channel_sizes={"16": 8, "8": 8, "4": 8},
        motion_encoder_size=16, motion_style_dim=8, motion_dim=4, motion_encoder_dim=8,
        face_encoder_hidden_dim=8, face_encoder_num_heads=2, inject_face_latents_blocks=1,
        motion_encoder_batch_size=4)  # fmt: skip


def _wan_animate_inputs():
    """3 latent frames (a reference and 2 posed), 5 face frames (pooled to 2 by stride 4)."""
    x = _video(12, size=(3, 10, 6))
    return {**x, "encoder_hidden_states_image": torch.randn(1, 4, 8),
            "pose_hidden_states": torch.randn(1, 4, 2, 10, 6),
            "face_pixel_values": torch.randn(1, 3, 5, 16, 16)}  # fmt: skip


def _kandinsky6():
    return diffusers.Kandinsky6Transformer3DModel(
        in_visual_dim=4, out_visual_dim=4, in_text_dim=16, in_text_dim2=8, time_dim=16,
        model_dim=64, ff_dim=64, num_text_blocks=1, num_visual_blocks=1, axes_dims=(8, 12, 12),
        in_audio_dim=4, out_audio_dim=4)  # fmt: skip


def _kandinsky6_inputs():
    """Video ``[1, F, H, W, 2 C + 1]`` (latent, condition and mask) and 7 audio rows."""
    torch.manual_seed(1)
    return {"hidden_states": torch.randn(1, 3, 8, 12, 9),
            "encoder_hidden_states": torch.randn(1, 5, 16),
            "pooled_projections": torch.randn(1, 8), "timestep": torch.tensor([500.0]),
            "audio_hidden_states": torch.randn(1, 7, 4)}  # fmt: skip


def _kandinsky6_sr():
    """NABLA attention runs flex attention (eagerly on the CPU) over 8 x 8 token tiles."""
    return diffusers.Kandinsky6SRTransformer3DModel(
        in_visual_dim=4, out_visual_dim=4, time_dim=16, model_dim=64, ff_dim=64,
        num_visual_blocks=1, axes_dims=(8, 12, 12))  # fmt: skip


def _kandinsky6_sr_inputs():
    torch.manual_seed(1)
    return {"hidden_states": torch.randn(1, 2, 16, 16, 9), "timestep": torch.tensor([500.0])}


K6_ROTARY = {"visual_rope_embeddings": "Kandinsky6RoPE3D",
             "video_text_rope_embeddings": "Kandinsky6RoPE1D",
             "audio_text_rope_embeddings": "Kandinsky6RoPE1D",
             "audio_rope_embeddings": "Kandinsky6RoPE1D"}  # fmt: skip

MODELS = {  # build, inputs, the rotary modules' paths and classes, the Timesteps' paths
    "framepack": (_framepack, _framepack_inputs, {"rope": "HunyuanVideoFramepackRotaryPosEmbed"},
                  ["time_text_embed.time_proj", "context_embedder.time_text_embed.time_proj"]),
    "motif-video": (_motif, _motif_inputs, {"rope": "MotifVideoRotaryPosEmbed"},
                    ["time_text_embed.time_proj"]),
    "helios": (_helios, _helios_inputs, {"rope": "HeliosRotaryPosEmbed"},
               ["condition_embedder.timesteps_proj"]),
    "sana-wm": (_sana_wm, _sana_wm_inputs, {"rope": "SanaWMRotaryPosEmbed"}, ["time_proj"]),
    "anyflow": (_anyflow, _anyflow_inputs, {"rope": "AnyFlowRotaryPosEmbed"},
                ["condition_embedder.timesteps_proj"]),
    "anyflow-far": (_far, _far_inputs, {"rope": "AnyFlowCausalRotaryPosEmbed"},
                    ["condition_embedder.timesteps_proj"]),
    "qwen-image-2.1": (_qwen21, _qwen21_inputs, {"pos_embed": "QwenImage21Rope"}, []),
    "minimax-h3": (_minimax_h3, _minimax_h3_inputs, {"rope": "MiniMaxH3RotaryPosEmbed"},
                   ["time_proj"]),
    "minimax-h3-vae": (_minimax_h3_vae, _minimax_h3_vae_inputs,
                       {"decoder.rope": "MiniMaxH3VideoRotaryPosEmbed"}, []),
    "wan-animate": (_wan_animate, _wan_animate_inputs, {"rope": "WanRotaryPosEmbed"},
                    ["condition_embedder.timesteps_proj"]),
    "kandinsky6": (_kandinsky6, _kandinsky6_inputs, K6_ROTARY,
                   ["video_time_embeddings.time_proj", "audio_time_embeddings.time_proj"]),
    "kandinsky6-sr": (_kandinsky6_sr, _kandinsky6_sr_inputs,
                      {"visual_rope_embeddings": "Kandinsky6SRRoPE3D"},
                      ["time_embeddings.time_proj"]),
}  # fmt: skip


def _build(family):
    """The family's model, seeded, in eval mode; its zero-initialised parameters (the
    MiniMax-H3 decoder's residual scales, output layers) get random values too, so that
    every branch, the attention's rotary one included, reaches the outputs."""
    torch.manual_seed(0)
    model = MODELS[family][0]().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and not p.any():
                p.normal_(0.0, 0.5)
    return model


class _Decoding(torch.nn.Module):
    """A VAE whose forward is its decoder's."""

    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, **inputs):
        return self.vae.decode(**inputs)


def _out(model, inputs, dtype=torch.float32):
    """Every tensor the model returns (the VAE: what it decodes), in order, as the contract
    runs it for activations of ``dtype``."""
    call = _Decoding(model) if "z" in inputs else model
    return forward(call, {**inputs, "return_dict": False}, dtype)


def _scaled(value, factor):
    """A rotary module's output (tensors, tuples, lists or dicts of them), times ``factor``."""
    if isinstance(value, torch.Tensor):
        return value * factor
    if isinstance(value, dict):
        return {k: _scaled(v, factor) for k, v in value.items()}
    return type(value)(_scaled(v, factor) for v in value)


# The outputs are O(1). The exact tables differ from the originals' float32 ones by float32
# rounding (a few 1e-7 at these positions), as do the exact Timesteps: the outputs move by
# 1.6e-6 at most. A 1 % error in any one rotary table moves them by more than 2 ATOL (the
# least sensitive: Kandinsky 6's audio text table, 4e-5), a wrong position, axis or frequency
# by O(1e-2 … 1).
ATOL = 1e-5


def _moved_by_scaled_tables(model, path, inputs, before):
    """How far the outputs move when the rotary module at ``path`` returns 1.01 x its tables."""
    handle = model.get_submodule(path).register_forward_hook(
        lambda module, args, out: _scaled(out, 1.01)
    )
    after = _out(model, inputs)
    handle.remove()
    return max((a - b).abs().max().item() for a, b in zip(after, before, strict=True))


# None now: Helios's compat stand-in keeps its frequency buffers, which turn bfloat16 with the
# model as the original's do (its einsum with the float32 positions promotes them back).
LEFT_ALONE_IN_BFLOAT16: set[str] = set()


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
@pytest.mark.parametrize("family", sorted(MODELS))
def test_compat_is_identical_and_exact_is_close(family):
    _, inputs_of, rotary, timesteps = MODELS[family]
    model, inputs = _build(family), inputs_of()
    before = _out(model, inputs)
    for path in rotary:  # the outputs depend on each table: identical outputs say something
        assert _moved_by_scaled_tables(model, path, inputs, before) > 2 * ATOL, path
    rows = {r.path: r for r in patch(copy.deepcopy(model).to(torch.bfloat16), compat="original")}
    for path, name in rotary.items():  # a bfloat16 model's report
        assert rows[path].original == name
        if family in LEFT_ALONE_IN_BFLOAT16:
            assert rows[path].mode is None
            assert "does not repeat its numbers" in rows[path].note
        else:
            assert rows[path].mode == "compat"

    def outputs(m, dtype):
        return _out(m, inputs, dtype)

    def exact(original, patched):
        after = _out(patched, inputs)
        assert all(torch.isfinite(t).all() for t in after)
        for a, b in zip(after, before, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=ATOL)

    paths = {**rotary, **dict.fromkeys(timesteps, "Timesteps")}
    check_patch_contract(model, paths, outputs, exact)
