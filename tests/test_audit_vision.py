"""``posenc audit`` on image and video rotary models: diffusers configs with the fields and
defaults the real classes write (read from their signatures, nothing built or downloaded),
timm ``config.json`` files, and the float32 figures checked against the originals' own
modules computed here and a float64 reference written from the formula."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest

from tests import reference
from tests.test_audit import encodings, run
from tests.test_cli import assert_one_line_error

torch = pytest.importorskip("torch")
D = pytest.importorskip("diffusers")

FAMILIES = {  # class: (where, preset, extra config fields)
    "WanTransformer3DModel": ("WanRotaryPosEmbed", "wan", {}),
    "SkyReelsV2Transformer3DModel": ("WanRotaryPosEmbed", "wan", {}),
    "HunyuanVideoTransformer3DModel": ("HunyuanVideoRotaryPosEmbed", "hunyuan-video", {}),
    "CosmosTransformer3DModel": ("CosmosRotaryPosEmbed", "cosmos", {}),
    "QwenImageTransformer2DModel": ("QwenEmbedRope", "qwen-image", {}),
    "LTXVideoTransformer3DModel": ("LTXVideoRotaryPosEmbed", "ltx-video", {}),
    "CogView4Transformer2DModel": ("CogView4RotaryPosEmbed", "cogview4", {}),
    "GlmImageTransformer2DModel": ("CogView4RotaryPosEmbed", "cogview4", {}),
    "CogVideoXTransformer3DModel": ("get_3d_rotary_pos_embed", "cogvideox",
                                    {"use_rotary_positional_embeddings": True}),
    "HunyuanDiT2DModel": ("get_2d_rotary_pos_embed", "hunyuan-dit", {}),
    "ChronoEditTransformer3DModel": ("WanRotaryPosEmbed", "wan", {}),
    "HunyuanImageTransformer2DModel": ("HunyuanImageRotaryPosEmbed", "hunyuan-image", {}),
    "Kandinsky5Transformer3DModel": ("Kandinsky5RoPE3D", "kandinsky5", {}),
    "Kandinsky6Transformer3DModel": ("Kandinsky6RoPE3D", "kandinsky6", {}),
    "Lumina2Transformer2DModel": ("Lumina2RotaryPosEmbed", "lumina2", {}),
    "ZImageTransformer2DModel": ("RopeEmbedder", "z-image", {}),
    "AllegroTransformer3DModel": ("get_3d_rotary_pos_embed_allegro", "allegro", {}),
    "LuminaNextDiT2DModel": ("get_2d_rotary_pos_embed_lumina", "lumina-next", {}),
}  # fmt: skip


def _config(name: str, extra: dict) -> dict:
    """The config diffusers' ``save_config`` writes for the class built with its defaults."""
    sig = inspect.signature(getattr(D, name).__init__)
    cfg = {k: p.default for k, p in sig.parameters.items()
           if p.default is not inspect.Parameter.empty and k != "self"}  # fmt: skip
    cfg = json.loads(json.dumps(cfg, default=lambda v: list(v) if isinstance(v, tuple) else None))
    return {"_class_name": name, "_diffusers_version": D.__version__, **cfg, **extra}


def _audit(folder: Path, cfg: dict) -> list[dict]:
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    proc = run("audit", str(folder), "--json")
    assert proc.returncode == 0, proc.stderr
    return encodings(json.loads(proc.stdout))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_is_named_and_measured(tmp_path, name):
    where, preset, extra = FAMILIES[name]
    (record,) = _audit(tmp_path / name, _config(name, extra))
    assert where in record["where"]
    assert f"preset='{preset}'" in record["equivalent"]
    assert isinstance(record["float32_error"], float)
    assert 1e-8 < record["float32_error"] < 1e-2, record
    assert record["fix"]


def test_cogvideox_without_rotary_is_not_called_rotary(tmp_path):
    """CogVideoX-2B has a fixed 3D sin-cos buffer instead (not measured yet): no rotary row;
    patch's report lists its timestep module."""
    cfg = _config("CogVideoXTransformer3DModel", {"use_rotary_positional_embeddings": False})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    proc = run("audit", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)
    assert not [r for r in encodings(records) if "rotary" in r["encoding"]]
    assert any("time_proj (Timesteps) replaced" in r["note"] for r in records if r["note"])


def _against_float64(cos, sin, dims, axes, base):
    want = reference.axial_rope(dims, axes, base, list(range(len(dims))),
                                [np.arange(n, dtype=np.float64) for n in dims])  # fmt: skip
    got = (cos.reshape(-1, sum(axes)).double().numpy(), sin.reshape(-1, sum(axes)).double().numpy())
    return max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))


def test_wan_figures_are_the_modules_own(tmp_path, monkeypatch):
    """Wan's float32 figure (its float64 tables rounded once), the MPS host's (its float32
    angles, measured on diffusers' own module built as on a Mac) and the bf16 buffers'."""
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    (record,) = _audit(tmp_path / "wan", _config("WanTransformer3DModel", {}))
    latents = torch.zeros(1, 1, 21, 90, 160)
    linux = WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    mac = WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    monkeypatch.undo()
    dims, axes = (21, 45, 80), (44, 42, 42)
    assert _against_float64(*linux(latents), dims, axes, 1e4) == pytest.approx(
        record["float32_error"], rel=0.1)  # fmt: skip
    mps = _against_float64(*mac(latents), dims, axes, 1e4)
    assert mps > 1e-6
    assert f"{mps:.3g}" in record["note"]
    bf16 = _against_float64(*linux.to(torch.bfloat16)(latents), dims, axes, 1e4)
    assert bf16 == pytest.approx(record["bf16_error"], rel=0.1)


def test_hunyuan_video_figure_is_the_modules_own(tmp_path):
    from diffusers.models.transformers.transformer_hunyuan_video import (
        HunyuanVideoRotaryPosEmbed,
    )

    (record,) = _audit(tmp_path / "h", _config("HunyuanVideoTransformer3DModel", {}))
    module = HunyuanVideoRotaryPosEmbed(2, 1, [16, 56, 56], 256.0)
    cos, sin = module(torch.zeros(1, 1, 33, 90, 160))
    err = _against_float64(cos, sin, (33, 45, 80), (16, 56, 56), 256.0)
    assert err == pytest.approx(record["float32_error"], rel=0.1)
    assert err > 1e-6  # float32 angles


TIMM = {  # architecture, input side: preset
    ("eva02_large_patch14_448.mim_m38m_ft_in22k_in1k", 448): "eva02",
    ("vit_base_patch16_rope_224.naver_in1k", 224): "vit-rope",
    ("vit_base_patch16_rope_reg1_gap_256.sbb_in1k", 256): "eva02",
    ("vit_pe_core_large_patch14_336.fb", 336): "perception-encoder",
    ("vit_pe_core_gigantic_patch14_448.fb", 448): "perception-encoder",
    ("vit_large_patch16_dinov3.lvd1689m", 224): "dinov3",
}


@pytest.mark.parametrize(("arch", "side"), sorted(TIMM))
def test_timm_rotary_models(tmp_path, arch, side):
    cfg = {"architecture": arch, "num_features": 768,
           "pretrained_cfg": {"input_size": [3, side, side]}}  # fmt: skip
    (record,) = _audit(tmp_path / "t", cfg)
    assert f"preset='{TIMM[(arch, side)]}'" in record["equivalent"]
    assert 1e-8 < record["float32_error"] < 1e-5
    assert "head width 64 assumed" in record["positions"]
    if "vit_pe_" in arch:  # positions i + 1 (i for the gigantic models): the largest is n or n - 1
        n = side // 14
        assert record["max_position"] == (n - 1 if "gigantic" in arch else n)
        assert ("start=(0.0, 0.0)" in record["equivalent"]) == ("gigantic" in arch)


def test_eva02_figure_is_timms_own(tmp_path):
    """EVA-02 L/14 at 448: timm's float32 table (positions i * 16 / 32) against float64."""
    from timm.layers import RotaryEmbeddingCat

    cfg = {"architecture": "eva02_large_patch14_448", "num_features": 1024,
           "pretrained_cfg": {"input_size": [3, 448, 448]}}  # fmt: skip
    (record,) = _audit(tmp_path / "e", cfg)
    rope = RotaryEmbeddingCat(64, in_pixels=False, feat_shape=[32, 32], ref_feat_shape=[16, 16])
    sin, cos = rope.get_embed().chunk(2, dim=-1)
    pos = [np.arange(32) * 0.5] * 2
    want = reference.axial_rope((32, 32), (32, 32), 1e4, [0, 1], pos)
    err = max(float(np.abs(cos.double().numpy() - want[0]).max()),
              float(np.abs(sin.double().numpy() - want[1]).max()))  # fmt: skip
    assert err == pytest.approx(record["float32_error"], rel=0.1)


def test_learned_timm_frequencies_are_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"architecture": "vit_base_patch16_rope_mixed_224", "num_features": 768}))  # fmt: skip
    assert_one_line_error(run("audit", str(tmp_path)), "learned frequencies")


IDS = {  # class: (where its module sits, preset)
    "Flux2Transformer2DModel": ("pos_embed (Flux2PosEmbed)", "flux2"),
    "Flux3Transformer2DModel": ("pos_embed (Flux3PosEmbed)", "flux3"),
    "Krea2Transformer2DModel": ("rotary_emb (Krea2RotaryPosEmbed)", "krea2"),
    "ChromaTransformer2DModel": ("pos_embed (FluxPosEmbed)", "flux"),
    "BriaTransformer2DModel": ("pos_embed (BriaEmbedND)", "flux"),
}


@pytest.mark.parametrize("name", sorted(IDS))
def test_id_families_carry_their_own_base_and_axes(tmp_path, name):
    """FLUX's kind: each config's rope_theta and axes, measured on its own ids; FLUX.2's base
    2000 (before: FLUX's 10000 was assumed); no FLUX.1 timestep row for the others."""
    where, preset = IDS[name]
    cfg = _config(name, {})
    (record,) = _audit(tmp_path / name, cfg)
    assert record["where"] == where
    assert f"preset='{preset}'" in record["equivalent"]
    theta = float(cfg.get("rope_theta") or 10000)
    assert f"base {theta:g}" in record["encoding"]
    axes = tuple(cfg["axes_dims_rope"])
    ids = np.zeros((128 * 128, len(axes)))
    first = 1 if len(axes) > 2 else 0
    rows, cols = np.meshgrid(np.arange(128), np.arange(128), indexing="ij")
    ids[:, first], ids[:, first + 1] = rows.ravel(), cols.ravel()
    want = [np.concatenate(parts, axis=1) for parts in zip(*[
        (np.repeat(np.cos(ids[:, [a]] * theta ** (-np.arange(0, d, 2) / d)), 2, axis=1),
         np.repeat(np.sin(ids[:, [a]] * theta ** (-np.arange(0, d, 2) / d)), 2, axis=1))
        for a, d in enumerate(axes)], strict=True)]  # fmt: skip
    float32 = max(float(np.abs(w.astype(np.float32).astype(np.float64) - w).max()) for w in want)
    assert record["float32_error"] == pytest.approx(float32, rel=0.1)  # float64, rounded once


OWN_KEYS = {  # class: (where, preset, its config's own keys for the blocks and the base)
    "PRXTransformer2DModel": ("pe_embedder (PRXEmbedND)", "prx",
                              {"axes_dim": [16, 48], "theta": 500}),
    "ErnieImageTransformer2DModel": ("pos_embed (ErnieImageEmbedND3)", "ernie-image",
                                     {"rope_axes_dim": [48, 40, 40], "rope_theta": 300}),
    "HiDreamImageTransformer2DModel": ("pe_embedder (HiDreamImageEmbedND)", "hidream",
                                       {"axes_dims_rope": [64, 32, 32]}),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OWN_KEYS))
def test_id_families_read_their_own_keys(tmp_path, name):
    """PRX and ERNIE-Image had no audit (HiDream's named FLUX's attribute): each now names its
    module where it sits, and reads its blocks and base under its config's own keys."""
    where, preset, keys = OWN_KEYS[name]
    cfg = _config(name, keys)
    records = _audit(tmp_path / name, cfg)
    (record,) = [r for r in records if "rotary" in r["encoding"]]
    assert record["where"] == where
    assert f"preset='{preset}'" in record["equivalent"]
    blocks = next(v for k, v in keys.items() if "axes" in k)
    base = float(next((v for k, v in keys.items() if "theta" in k), 10000))
    assert record["encoding"] == f"axial rotary, axes {tuple(blocks)}, base {base:g}"


# ---------------------------------------------------------------------------------------------
# posenc audit PATH --size WIDTHxHEIGHT [--frames N]: what each original computes at that size


def _audit_at(folder: Path, cfg: dict, *size: str) -> dict:
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    proc = run("audit", str(folder), "--json", "--size", *size)
    assert proc.returncode == 0, proc.stderr
    (record,) = [r for r in encodings(json.loads(proc.stdout)) if "rotary" in r["encoding"]]
    return record


def test_wan_at_161_and_261_frames(tmp_path):
    """Wan 720p at 161 frames (41 latent frames, inside the period 51 of its intrinsic pair:
    no rule) and 261 (66: RIFLEx, the call given runs and lowers the pair); the figure is the
    original's float32 error on that grid, measured against diffusers' own module there."""
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    cfg = _config("WanTransformer3DModel", {})
    inside = _audit_at(tmp_path / "a", cfg, "1280x720", "--frames", "161")
    assert "41 x 45 x 80 grid" in inside["positions"]
    assert "within the period of its intrinsic pair (51 latent frames)" in inside["note"]
    past = _audit_at(tmp_path / "b", cfg, "1280x720", "--frames", "261")
    assert "66 x 45 x 80 grid" in past["positions"]
    call = past["note"].split("on axes [0]: ")[1]
    assert call.startswith("posenc.rope_grid((66, 45, 80), 128, preset='wan'")
    import posenc

    cos, _ = eval(call, {"posenc": posenc})  # the call the audit prints
    plain, _ = posenc.rope_grid((66, 45, 80), 128, preset="wan")
    assert not np.array_equal(cos, plain)
    module = WanRotaryPosEmbed(128, (1, 2, 2), 1024)(torch.zeros(1, 1, 66, 90, 160))
    own = _against_float64(*module, (66, 45, 80), (44, 42, 42), 1e4)
    assert own == pytest.approx(past["float32_error"], rel=0.1)


def test_cosmos_past_its_128_rows(tmp_path):
    """Cosmos at 4096 x 4096 (256 tokens a side): diffusers' module raises past its 128 rows;
    the audit says the original cannot compute that grid, and names the rule that extends
    the exact tables: Cosmos' own, its rope_scale (NTK-aware; 256 / 80 columns = 3.2)."""
    from diffusers.models.transformers.transformer_cosmos import CosmosRotaryPosEmbed

    with pytest.raises(RuntimeError):
        CosmosRotaryPosEmbed(128)(torch.zeros(1, 1, 16, 512, 512))
    record = _audit_at(tmp_path, _config("CosmosTransformer3DModel", {}), "4096x4096")
    assert record["float32_error"] is None
    assert "the original cannot compute this grid: it holds rows 0 … 127" in record["note"]
    assert "{'rope_type': 'ntk-aware', 'factor': 3.2}" in record["note"]  # its rope_scale


def test_flux_bfloat16_ids_at_6144(tmp_path):
    """FLUX at 6144 x 6144: the pipeline's bfloat16 ids collapse (384 rows, 321 positions,
    counted here from diffusers' own id builder)."""
    from diffusers import FluxPipeline

    ids = FluxPipeline._prepare_latent_image_ids(1, 384, 384, "cpu", torch.bfloat16)
    distinct = len(torch.unique(ids[:, 1].float()))
    record = _audit_at(tmp_path, _config("FluxTransformer2DModel", {}), "6144x6144")
    assert f"384 rows become {distinct} positions" in record["note"]
    assert "h < 384, w < 384" in record["positions"]
    assert "'original_max_position_embeddings': 64" in record["note"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--size", "4096"), ("--size", "WIDTHxHEIGHT", "'4096'")),
        (("--size", "0x64"), ("--size", "positive", "'0x64'")),
        (("--size", "64x64", "--frames", "0"), ("--frames", "positive", "0")),
        (("--frames", "9"), ("--frames 9", "--size")),
    ],
)
def test_size_arguments_are_checked(tmp_path, args, words):
    (tmp_path / "config.json").write_text(json.dumps(_config("WanTransformer3DModel", {})))
    assert_one_line_error(run("audit", str(tmp_path), *args), *words)


def test_size_of_a_model_without_an_image_family_is_an_error(tmp_path):
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
           "num_attention_heads": 4, "num_hidden_layers": 2}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(run("audit", str(tmp_path), "--size", "64x64"), "--size", "no image")


@pytest.mark.parametrize(
    ("name", "size", "words"),
    [
        # 197 frames: 50 latent frames, the period of HunyuanVideo's pair 4 (it repeats at 48)
        ("HunyuanVideoTransformer3DModel", ("1280x720", "--frames", "197"),
         ("within the period of its intrinsic pair (50 latent frames)",)),
        # Kandinsky 5's pipeline divides rows and columns by 3.16 past 854 px
        ("Kandinsky5Transformer3DModel", ("1024x1024",), ("axes_scale=(1.0, 0.316",)),
        # HunyuanDiT resizes a 48 x 64 grid into its 32 x 32 base: rows 4 … 28
        ("HunyuanDiT2DModel", ("1024x768",), ("crop=((4, 0), (28, 32))",)),
    ],
)  # fmt: skip
def test_a_size_takes_the_pipelines_own_positions(tmp_path, name, size, words):
    record = _audit_at(tmp_path, _config(name, FAMILIES[name][2]), *size)
    text = record["equivalent"] + " " + (record["note"] or "")
    for word in words:
        assert word in text, text


def test_the_largest_position_at_a_size_is_the_familys(tmp_path):
    """Lumina-Image-2.0's image patches sit after the caption: at 1024 x 1024 the largest
    position is the caption's 256, not the grid's 63."""
    record = _audit_at(tmp_path, _config("Lumina2Transformer2DModel", {}), "1024x1024")
    assert record["max_position"] == 256


def test_a_size_below_one_token_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_config("WanTransformer3DModel", {})))
    assert_one_line_error(run("audit", str(tmp_path), "--size", "8x8"), "--size 8x8", "16 pixels")
