"""Model and input builders, and small checks, that more than one test file uses: the family
test files (tests/families/test_<record>.py) and the cross-family test files their tests came
from. Each is the one its test file had, under the same name, or under a name saying which
where two had one name.

The builders make small random-weight models from configs (no download), or the originals'
rotary modules. The float64 references that several files use are in tests/reference.py."""

from __future__ import annotations

import copy
import functools
import importlib
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
T = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")

from posenc.torch import patch  # noqa: E402

# ---------------------------------------------------------------------------------------------
# checks and a width that several files share

HEAD = 64  # the head width of timm's rotary ViTs


def assert_exact(got, want):
    """Within one float32 rounding of the float64 value."""
    got = np.asarray(got, dtype=np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + 1e-38)


def assert_rounded_once(got, want, floor=1e-12):
    """float32 ``got`` (an array or a tensor) is float64 ``want`` rounded once: within a
    relative half ulp, and ``floor`` near zero (LTX's angles reach 1.6e4 rad, where float64
    itself is 2e-12 apart)."""
    got = got.detach().double().numpy() if hasattr(got, "detach") else np.asarray(got, np.float64)
    np.testing.assert_array_less(np.abs(got - want), 6e-8 * np.abs(want) + floor)


def max_error(got, want) -> float:
    got = got.double().numpy() if hasattr(got, "double") else np.asarray(got, np.float64)
    return float(np.abs(got - want).max())


def _out(model, inputs, dtype=None):
    """A diffusers model's output (its ``sample``) on ``inputs``, their floating tensors cast
    to ``dtype`` first when one is given."""
    with torch.no_grad():
        if dtype is not None:
            inputs = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
                      else v for k, v in inputs.items()}  # fmt: skip
        return model(**inputs)[0]


def _err(got, want):
    return float(np.abs(np.asarray(got.detach().double()) - want).max())


class _Holder(torch.nn.Module):
    def __init__(self, **modules):
        super().__init__()
        for k, v in modules.items():
            setattr(self, k, v)


# ---------------------------------------------------------------------------------------------
# diffusers: Wan, HunyuanVideo and Cosmos transformers (test_patch_diffusers_rope.py)


def _hunyuan():
    torch.manual_seed(0)
    return diffusers.HunyuanVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=32,
        num_layers=1, num_single_layers=1, num_refiner_layers=1, text_embed_dim=16,
        pooled_projection_dim=8, rope_axes_dim=(8, 12, 12),
        guidance_embeds=False).eval()  # fmt: skip


def _wan():
    torch.manual_seed(0)
    return diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=24, in_channels=4,
        out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=1,
        rope_max_seq_len=64).eval()  # fmt: skip


def _wan_inputs(size=(5, 8, 12)):
    torch.manual_seed(1)
    f, h, w = size
    return {"hidden_states": torch.randn(1, 4, f, h, w), "timestep": torch.tensor([500]),
            "encoder_hidden_states": torch.randn(1, 7, 16)}  # fmt: skip


def _cosmos():
    torch.manual_seed(0)
    return diffusers.CosmosTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=24,
        num_layers=1, text_embed_dim=16, adaln_lora_dim=8, max_size=(32, 64, 64),
        rope_scale=(2.0, 3.0, 3.0), concat_padding_mask=False,
        extra_pos_embed_type=None).eval()  # fmt: skip


def _cosmos_inputs(size=(3, 10, 6), fps=30):
    torch.manual_seed(1)
    f, h, w = size
    return {"hidden_states": torch.randn(1, 4, f, h, w), "timestep": torch.tensor([500.0]),
            "encoder_hidden_states": torch.randn(1, 5, 16), "fps": fps}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# diffusers: video and image models, rotary modules (test_patch_diffusers_video.py)


def _m(name):
    """The module ``diffusers.models.transformers.<name>``."""
    return importlib.import_module(f"diffusers.models.transformers.{name}")


def _video(f, h, w, *, text=5, **extra):
    def inputs(size=(f, h, w)):
        torch.manual_seed(1)
        return {"hidden_states": torch.randn(1, 4, *size), "timestep": torch.tensor([500.0]),
                "encoder_hidden_states": torch.randn(1, text, 16), **extra}  # fmt: skip

    return inputs


def _hunyuan_image():
    return diffusers.HunyuanImageTransformer2DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=32,
        num_layers=1, num_single_layers=1, num_refiner_layers=1, text_embed_dim=16,
        rope_axes_dim=(16, 16))  # fmt: skip


def _hunyuan_image_inputs(size=(6, 10)):
    torch.manual_seed(1)
    return {"hidden_states": torch.randn(1, 4, *size), "timestep": torch.tensor([500.0]),
            "encoder_hidden_states": torch.randn(1, 5, 16),
            "encoder_attention_mask": torch.ones(1, 5)}  # fmt: skip


WAN_SMALL = {"patch_size": (1, 2, 2), "num_attention_heads": 2, "attention_head_dim": 24,
             "in_channels": 4, "out_channels": 4, "text_dim": 16, "freq_dim": 32, "ffn_dim": 32,
             "num_layers": 1, "rope_max_seq_len": 64}  # fmt: skip
"""A small transformer of Wan's form (ChronoEdit's, AnyFlow's)."""


def _chronoedit():
    return diffusers.ChronoEditTransformer3DModel(**WAN_SMALL)


def _easyanimate():
    return diffusers.EasyAnimateTransformer3DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
        time_embed_dim=16, text_embed_dim=16, num_layers=1, mmdit_layers=1, patch_size=2,
        sample_width=16, sample_height=16)  # fmt: skip


def _sana_video():
    return diffusers.SanaVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=24,
        num_layers=1, num_cross_attention_heads=2, cross_attention_head_dim=24,
        cross_attention_dim=48, caption_channels=16, sample_size=16)  # fmt: skip


def _qwen(cls, **kw):
    def build():
        return cls(patch_size=2, in_channels=16, out_channels=4, num_layers=1,
                   attention_head_dim=128, num_attention_heads=1, joint_attention_dim=16,
                   axes_dims_rope=(16, 56, 56), **kw)  # fmt: skip

    return build


def _qwen_inputs(layers):
    """Inputs of ``layers`` images of the same size (Layered: the last is the condition)."""

    def inputs(size=(4, 6)):
        torch.manual_seed(1)
        h, w = size
        extra = {"additional_t_cond": torch.tensor([0])} if layers > 1 else {}
        return {"hidden_states": torch.randn(1, layers * h * w, 16),
                "encoder_hidden_states": torch.randn(1, 7, 16),
                "encoder_hidden_states_mask": torch.ones(1, 7), "timestep": torch.tensor([0.5]),
                "img_shapes": [[(1, h, w)] * layers], **extra}  # fmt: skip

    return inputs


VIDEO_MODELS = {  # build, inputs, other sizes, the rotary module's path and class
    "hunyuan-image": (_hunyuan_image, _hunyuan_image_inputs, [(4, 14), (9, 3)], "rope",
                      "HunyuanImageRotaryPosEmbed"),
    "chronoedit": (_chronoedit, _video(2, 8, 12), [(3, 6, 4), (5, 2, 14)], "rope",
                   "ChronoEditRotaryPosEmbed"),
    "easyanimate": (_easyanimate, _video(3, 8, 12), [(1, 12, 8), (5, 6, 14)],
                    "rope_embedding", "EasyAnimateRotaryPosEmbed"),
    "sana-video": (_sana_video, _video(3, 8, 12), [(1, 6, 4), (5, 2, 14)], "rope",
                   "WanRotaryPosEmbed"),
    "qwen-image-layered": (_qwen(diffusers.QwenImageTransformer2DModel, use_layer3d_rope=True,
                                 use_additional_t_cond=True), _qwen_inputs(3),
                           [(3, 5), (2, 8)], "pos_embed", "QwenEmbedLayer3DRope"),
    "nucleusmoe-image": (_qwen(diffusers.NucleusMoEImageTransformer2DModel), _qwen_inputs(1),
                         [(3, 5), (7, 2)], "pos_embed", "NucleusMoEEmbedRope"),
}  # fmt: skip


def _root(module):
    root = torch.nn.Module()
    root.rope = module
    return root


def _patched(module, compat):
    root = _root(copy.deepcopy(module))
    (row,) = patch(root, compat=compat)
    assert row.original == type(module).__name__
    assert row.mode == ("compat" if compat else "exact")
    return root.rope


# ---------------------------------------------------------------------------------------------
# timm: NaFlexViT, SAM's ViT, the Qwen3 / DeepSeek towers (test_patch_timm_more.py)


SMALL = {"depth": 1, "embed_dim": 192, "num_heads": 3}  # head 64


# name: (timm model, options, rotary module paths, their class, the preset the report names)
TIMM_FORMS = {
    "naflex-axial": ("naflexvit_base_patch16_gap", {**SMALL, "rope_type": "axial",
                     "pos_embed": "none"}, ["rope"], "RotaryEmbeddingCat", "vit-rope"),
    "naflex-axial-ref": ("naflexvit_base_patch16_gap", {**SMALL, "rope_type": "axial",
                         "rope_ref_feat_shape": (16, 16), "rope_grid_indexing": "xy",
                         "rope_rotate_half": True}, ["rope"], "RotaryEmbeddingCat",
                         "perception-encoder"),
    "naflex-dinov3": ("naflexvit_base_patch16_gap", {**SMALL, "rope_type": "dinov3",
                      "rope_rotate_half": True, "rope_temperature": 100.0}, ["rope"],
                      "RotaryEmbeddingDinoV3", "dinov3"),
    "naflex-mrope": ("naflexvit_base_patch16_gap", {**SMALL, "rope_type": "mrope",
                     "rope_mrope_section": (8, 12, 12)}, ["rope"], "RotaryEmbeddingMRope",
                     "timm-mrope"),
    "sam": ("samvit_base_patch16", {**SMALL, "depth": 2, "img_size": 224, "window_size": 7,
            "global_attn_indexes": (1,), "use_rope": True, "use_rel_pos": False},
            ["rope_global", "rope_window"], "RotaryEmbeddingCat", "vit-rope"),
    "sam-ref": ("samvit_base_patch16", {**SMALL, "depth": 2, "img_size": 224, "window_size": 7,
                "global_attn_indexes": (1,), "use_rope": True, "use_rel_pos": False,
                "ref_feat_shape": (16, 8)}, ["rope_global", "rope_window"],
                "RotaryEmbeddingCat", "eva02"),
    "qwen3": ("qwen3_vit_88m", {"depth": 1}, ["encoder.rope"], "RotaryEmbeddingCat",
              "vit-rope"),
    "deepseek": ("deepseek_vit_412m", {"depth": 1}, ["encoder.rope"], "RotaryEmbeddingCat",
                 "vit-rope"),
}  # fmt: skip


TIMM_FORM_SIZES = [(224, 224), (160, 240)]  # SAM's size is fixed: the first only


@functools.cache
def _timm_form_built(name):
    model_name, options, *_ = TIMM_FORMS[name]
    torch.manual_seed(0)
    return timm.create_model(model_name, pretrained=False, **options).eval()


def _timm_form_model(name):
    return copy.deepcopy(_timm_form_built(name))


def _timm_form_sizes(name):
    """224 x 224 at patch 16 and a 10 x 15 patch grid (the towers' patch is 14 or 16)."""
    if name.startswith("sam"):
        return TIMM_FORM_SIZES[:1]
    p = 14 if name == "deepseek" else 16
    return [(14 * p, 14 * p), (10 * p, 15 * p)]


def _timm_form_features(model, x):
    with torch.no_grad():
        if isinstance(x, dict):
            return model.forward_features(**x)["patches"]
        return model.forward_features(x)


def _timm_form_images(name):
    torch.manual_seed(1)
    return [torch.randn(2, 3, h, w) for h, w in _timm_form_sizes(name)]


def _module(model, path):
    return model.get_submodule(path)


def _rows(report):
    return {r.path: r for r in report}


# ---------------------------------------------------------------------------------------------
# timm: EVA-02, RoPE-ViT, Perception Encoder, DINOv3 (test_patch_timm_rope.py)


# each family's tables, from the timm model definitions (timm/models/eva.py): base, the
# reference grid positions are rescaled to, grid offset, the column block first
# (grid_indexing 'xy'), the halves layout (rotate_half), DINOv3's centred coordinates
ROPE_VIT_FAMILIES = {
    "eva02": {"base": 1e4, "ref": (16, 16)},
    "vit-rope": {"base": 100.0, "columns_first": True},
    "perception-encoder": {"base": 1e4, "ref": (24, 24), "offset": 1.0, "columns_first": True},
    "dinov3": {"base": 100.0, "halves": True, "centred": True},
}


# name: (timm model, options, image sizes, patch size, rope class, family)
ROPE_VITS = {
    "eva02": ("eva02_tiny_patch14_224", {}, [(224, 224)], 14, "RotaryEmbeddingCat", "eva02"),
    "eva02-154": ("eva02_tiny_patch14_224", {"img_size": 154}, [(154, 154)], 14,
                  "RotaryEmbeddingCat", "eva02"),  # 11 x 11 patches on the 16 x 16 reference
    "eva02-dynamic": ("eva02_tiny_patch14_224", {"dynamic_img_size": True},
                      [(224, 224), (154, 182)], 14, "RotaryEmbeddingCat", "eva02"),
    "vit-rope": ("vit_small_patch16_rope_224", {}, [(224, 224)], 16, "RotaryEmbeddingCat",
                 "vit-rope"),
    "vit-rope-dynamic": ("vit_small_patch16_rope_224", {"dynamic_img_size": True},
                         [(224, 224), (144, 176)], 16, "RotaryEmbeddingCat", "vit-rope"),
    "perception-encoder": ("vit_pe_core_tiny_patch16_384", {}, [(384, 384)], 16,
                           "RotaryEmbeddingCat", "perception-encoder"),
    "dinov3": ("vit_small_patch16_dinov3", {}, [(256, 256), (144, 176)], 16,
               "RotaryEmbeddingDinoV3", "dinov3"),
}  # fmt: skip


@functools.cache
def _rope_vit_built(name):
    model_name, options, *_ = ROPE_VITS[name]
    torch.manual_seed(0)
    return timm.create_model(model_name, pretrained=False, depth=1, **options).eval()


def _rope_vit_model(name):
    return copy.deepcopy(_rope_vit_built(name))


def _rope_vit_images(name, dtype=torch.float32):
    torch.manual_seed(1)
    return [torch.randn(2, 3, h, w).to(dtype) for h, w in ROPE_VITS[name][2]]


def _rope_vit_features(model, x):
    with torch.no_grad():
        return model.forward_features(x)


def _rope_vit_embed(rope, grid):
    """The table the model asks its rotary module for at this grid."""
    return rope.get_embed() if rope.feat_shape is not None else rope.get_embed(shape=grid)


def _rope_vit_row(report, path="rope"):
    rows = [r for r in report if r.path == path]
    assert len(rows) == 1, str(report)
    return rows[0]


def _pairs(a, b):
    a, b = (list(t) if isinstance(t, (tuple, list)) else [t] for t in (a, b))
    assert len(a) == len(b)
    return zip(a, b, strict=True)


# ---------------------------------------------------------------------------------------------
# transformers: the vision towers (test_patch_hf_vision.py)


def _qwen2_vl_tower():
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VisionTransformerPretrainedModel,
    )

    config = Qwen2VLVisionConfig(depth=2, embed_dim=80, num_heads=1, hidden_size=16)
    model = Qwen2VisionTransformerPretrainedModel(config)
    sizes = [[(1, 8, 12)], [(1, 4, 6), (2, 10, 2)]]  # one image; an image and a 2-frame video

    def inputs(grids):
        n = sum(t * h * w for t, h, w in grids)
        gen = torch.Generator().manual_seed(n)
        x = torch.randn(n, 3 * 2 * 14 * 14, generator=gen)
        return (x,), {"grid_thw": torch.tensor(grids)}

    return model, "rotary_pos_emb", "Qwen2VLVisionRotaryEmbedding", [inputs(g) for g in sizes]


def _pixtral_tower():
    config = T.PixtralVisionConfig(hidden_size=64, num_attention_heads=1, head_dim=64,
                                   intermediate_size=32, num_hidden_layers=2,
                                   image_size=256, patch_size=16)  # fmt: skip
    model = T.PixtralVisionModel(config)

    def inputs(h, w):
        gen = torch.Generator().manual_seed(h * w)
        return (torch.randn(1, 3, h, w, generator=gen),), {"image_sizes": [(h, w)]}

    return model, "patch_positional_embedding", "PixtralVisionRotaryEmbedding", [
        inputs(128, 192), inputs(48, 16)]  # fmt: skip


def _dinov3_tower():
    config = T.DINOv3ViTConfig(hidden_size=64, num_attention_heads=1, intermediate_size=32,
                               num_hidden_layers=2, patch_size=16, image_size=128)  # fmt: skip
    model = T.DINOv3ViTModel(config)

    def inputs(h, w):
        gen = torch.Generator().manual_seed(h * w)
        return (torch.randn(1, 3, h, w, generator=gen),), {}

    return model, "rope_embeddings", "DINOv3ViTRopePositionEmbedding", [
        inputs(128, 128), inputs(48, 112)]  # fmt: skip


class _Memory(torch.nn.Module):
    """Holds SAM 2 video's memory attention (the model's own class) and feeds it as the video
    model does: the current frame's features, two memory frames and object pointers."""

    def __init__(self):
        super().__init__()
        from transformers.models.sam2_video.modeling_sam2_video import Sam2VideoMemoryAttention

        config = T.Sam2VideoConfig(memory_attention_rope_feat_sizes=[8, 6],
                                   memory_attention_num_layers=2)  # fmt: skip
        self.attention = Sam2VideoMemoryAttention(config)

    def forward(self, current, memory, memory_pos):
        return self.attention(current, memory, memory_posision_embeddings=memory_pos,
                              num_object_pointer_tokens=4)  # fmt: skip


def _sam2_tower():
    model = _Memory()
    gen = torch.Generator().manual_seed(2)
    n = 8 * 6
    args = (torch.randn(n, 1, 256, generator=gen), torch.randn(2 * n + 4, 1, 64, generator=gen),
            torch.randn(2 * n + 4, 1, 64, generator=gen))  # fmt: skip
    return model, "attention.rotary_emb", "Sam2VideoVisionRotaryEmbedding", [(args, {})]


def _sam3_tower():
    from transformers.models.sam3.configuration_sam3 import Sam3ViTConfig
    from transformers.models.sam3.modeling_sam3 import Sam3ViTModel

    config = Sam3ViTConfig(hidden_size=64, num_attention_heads=1, intermediate_size=32,
                           num_hidden_layers=2, global_attn_indexes=[1], image_size=14 * 36,
                           patch_size=14, window_size=12, pretrain_image_size=14 * 12)  # fmt: skip
    model = Sam3ViTModel(config)
    gen = torch.Generator().manual_seed(3)
    return model, "layers.1.rotary_emb", "Sam3ViTRotaryEmbedding", [
        ((torch.randn(1, 3, 14 * 36, 14 * 36, generator=gen),), {})]  # fmt: skip


def _llama4_tower():
    config = T.Llama4VisionConfig(hidden_size=176, num_attention_heads=2, intermediate_size=704,
                                  num_hidden_layers=2, image_size=112, patch_size=14,
                                  vision_output_dim=16, projector_input_dim=16,
                                  projector_output_dim=16, pixel_shuffle_ratio=0.5)  # fmt: skip
    model = T.Llama4VisionModel(config)
    gen = torch.Generator().manual_seed(4)
    return model, "rotary_embedding", "Llama4VisionRotaryEmbedding", [
        ((torch.randn(1, 3, 112, 112, generator=gen),), {})]  # fmt: skip


TOWERS = {"qwen2-vl-vision": _qwen2_vl_tower, "pixtral": _pixtral_tower, "dinov3": _dinov3_tower,
          "sam2": _sam2_tower, "sam3-vit": _sam3_tower, "llama4-vision": _llama4_tower}  # fmt: skip


def build_tower(family):
    torch.manual_seed(0)
    model, path, cls, runs = TOWERS[family]()
    return model.eval(), path, cls, runs


def tower_output(model, args, kwargs):
    with torch.no_grad():
        out = model(*args, **kwargs)
    if isinstance(out, torch.Tensor):
        return out
    return out.last_hidden_state


def tower_outputs(model, runs, dtype=None):
    out = []
    for args, kwargs in runs:
        if dtype is not None:
            args = tuple(a.to(dtype) for a in args)
        out.append(tower_output(model, args, kwargs))
    return out


def tower_module(model, path):
    return model.get_submodule(path)


# ---------------------------------------------------------------------------------------------
# transformers: the vision towers' rotary modules (test_rope_hf_vision.py)


# family -> (head dim, the model's real grid, the grids the original builds at odd sizes)
TOWER_GRIDS = {
    "pixtral": (64, (64, 64), [(17, 23), (1, 7)]),  # 1024 px / 16
    "qwen2-vl-vision": (80, (32, 48), [(17, 23), (1, 7)]),  # 448 x 672 px / 14
    "dinov3": (64, (64, 64), [(17, 23), (1, 7), (7, 3)]),  # 1024 px / 16
    "sam2": (256, (64, 64), [(17, 23), (1, 7)]),  # the memory feature grid
    "sam3-vit": (64, (72, 72), [(24, 24), (17, 23), (1, 7)]),  # global; (24, 24) a window
    "llama4-vision": (88, (24, 24), [(17, 17), (7, 7), (1, 1)]),  # 336 px / 14; square only
}


def _hooked(module):
    """A forward hook on ``module`` keeping its inputs and output."""
    seen = {}

    def hook(mod, args, out):
        seen["args"], seen["out"] = args, out

    module.register_forward_hook(hook)
    return seen


def _row_major(ids, h, w, table):
    """A table whose rows are the tokens of ``ids`` ([N, 2] (row, column)), in row-major
    order; every patch appears once."""
    flat = ids[:, 0] * w + ids[:, 1]
    assert torch.equal(torch.sort(flat).values, torch.arange(h * w))
    out = torch.empty_like(table)
    out[flat] = table
    return out


def _pixtral_model():
    config = T.PixtralVisionConfig(hidden_size=64, num_attention_heads=1, head_dim=64,
                                   intermediate_size=8, num_hidden_layers=0)  # fmt: skip
    return T.PixtralVisionModel(config).eval()


def _pixtral(h, w):
    model = _pixtral_model()
    seen = _hooked(model.patch_positional_embedding)
    with torch.no_grad():
        model(torch.zeros(1, 3, h * 16, w * 16), image_sizes=[(h * 16, w * 16)])
    ids = seen["args"][1]
    assert torch.equal(ids[:, 0] * w + ids[:, 1], torch.arange(h * w))  # row-major already
    return seen["out"]


def _qwen2_vl(h, w):
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VisionTransformerPretrainedModel,
    )

    merge = 2 if h % 2 == 0 and w % 2 == 0 else 1  # the odd grids: no 2 x 2 merge
    config = Qwen2VLVisionConfig(depth=0, embed_dim=80, num_heads=1, hidden_size=16,
                                 spatial_merge_size=merge)  # fmt: skip
    model = Qwen2VisionTransformerPretrainedModel(config).eval()
    seen = _hooked(model.rotary_pos_emb)
    patches = torch.zeros(h * w, 3 * 2 * 14 * 14)
    with torch.no_grad():
        model(patches, grid_thw=torch.tensor([[1, h, w]]))
    ids = seen["args"][1]
    if merge == 2:  # the 2 x 2 block order, not row-major
        assert not torch.equal(ids[:, 0] * w + ids[:, 1], torch.arange(h * w))
    cos, sin = seen["out"]
    return _row_major(ids, h, w, cos), _row_major(ids, h, w, sin), ids


def _llama4_freqs(n):
    from transformers.models.llama4.modeling_llama4 import Llama4VisionRotaryEmbedding

    config = T.Llama4VisionConfig(hidden_size=1408, num_attention_heads=16,
                                  image_size=n * 14, patch_size=14)  # fmt: skip
    return Llama4VisionRotaryEmbedding(config).freqs_ci[:, 0]  # [n * n + 1, 44] complex64


def _within_half_ulp(got, ref):
    got = np.asarray(got, dtype=np.float64)
    bound = 6e-8 * np.abs(ref) + 1e-38
    worst = float(np.max(np.abs(got - ref) - bound))
    assert worst <= 0, worst


# ---------------------------------------------------------------------------------------------
# timm: the rotary models' grids, their float64 tables (test_rope_timm.py)


# family: (timm model, patch, dynamic size, real grid, base, layout, column block first)
TIMM_GRID_MODELS = {
    "eva02": ("eva02_large_patch14_448", 14, False, (32, 32), 1e4, "interleaved", False),
    "vit-rope": ("vit_base_patch16_rope_224", 16, False, (14, 14), 100.0, "interleaved", True),
    "perception-encoder": ("vit_pe_core_large_patch14_336", 14, False, (24, 24), 1e4,
                           "interleaved", True),
    "dinov3": ("vit_large_patch16_dinov3", 16, True, (64, 64), 100.0, "halves", False),
}  # fmt: skip


def timm_coordinates(family: str, n: int) -> np.ndarray:
    """The float64 positions of one grid axis of ``n`` patches, from each model's recipe."""
    i = np.arange(n, dtype=np.float64)
    if family == "eva02":  # ref_feat_shape (16, 16): i / n * 16
        return i * 16.0 / n
    if family == "perception-encoder":  # grid_offset 1, ref_feat_shape (24, 24)
        return (i + 1.0) * 24.0 / n
    if family == "dinov3":  # 'centered', normalize_coords 'separate'
        return (i + 0.5) / n * 2.0 - 1.0
    return i


def timm_grid_reference(family, dims, dim=HEAD, positions=None, layout=None, columns_first=None):
    """float64 ``(cos, sin)`` ``[prod(dims), dim]``: per axis ``dim / 4`` frequencies (EVA-02
    style ``base ** (-k / (dim / 4))``, or DINOv3's ``2 pi / base ** (2k / (dim / 2))``), the
    row block first unless ``columns_first``, interleaved or halves."""
    _, _, _, _, base, own_layout, own_order = TIMM_GRID_MODELS[family]
    layout = layout or own_layout
    columns_first = own_order if columns_first is None else columns_first
    positions = positions or [timm_coordinates(family, n) for n in dims]
    rows, cols = (g.reshape(-1) for g in np.meshgrid(*positions, indexing="ij"))
    k = np.arange(dim // 4, dtype=np.float64)
    if family == "dinov3":
        omega = 2.0 * math.pi / base ** (2.0 * k / (dim // 2))
    else:
        omega = 1.0 / base ** (k / (dim // 4))
    first, second = (cols, rows) if columns_first else (rows, cols)
    theta = np.concatenate([first[:, None] * omega, second[:, None] * omega], axis=1)
    if layout == "interleaved":
        theta = np.repeat(theta, 2, axis=1)
    else:
        theta = np.concatenate([theta, theta], axis=1)
    return np.cos(theta), np.sin(theta)


# ---------------------------------------------------------------------------------------------
# timm: MRoPE ids (test_rope_timm_more.py)


def _mrope_ids(dims):
    rows, cols = np.meshgrid(np.arange(dims[0]), np.arange(dims[1]), indexing="ij")
    return np.stack([np.zeros(rows.size), rows.reshape(-1), cols.reshape(-1)])
