"""``posenc audit``, run as a user would: configs written by transformers and diffusers
themselves (small sizes, nothing downloaded), the command in a subprocess, its table and
``--json`` read back, and the figures checked against the originals computed here."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.test_cli import assert_one_line_error

ROOT = Path(__file__).resolve().parent.parent
CLI = (
    "import sys; from tests.environment import prepare; prepare(); "
    "from posenc.app.cli import main; sys.exit(main(sys.argv[1:]))"
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """``posenc ARGS`` in a fresh process, as tests/test_cli.run, with the libraries this
    machine's torch needs importable (tests/environment.py): the audit builds the models it
    reads on the meta device when transformers or diffusers imports."""
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=False)  # fmt: skip


def encodings(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``--json`` records of encodings (the rest carry the notes alone)."""
    return [r for r in records if r["encoding"] is not None]


torch = pytest.importorskip("torch")

SMALL = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
         "num_hidden_layers": 2, "intermediate_size": 512, "vocab_size": 1000}  # fmt: skip
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192, "rope_theta": 500000.0}  # fmt: skip


def _hf(folder: Path, config: Any) -> None:
    folder.mkdir()
    (folder / "config.json").write_text(config.to_json_string(use_diff=False))


def _transformers_configs(root: Path) -> None:
    T = pytest.importorskip("transformers")
    T.logging.set_verbosity_error()
    _hf(root / "llama31", T.LlamaConfig(**SMALL, max_position_embeddings=131072,
                                        rope_parameters=dict(LLAMA3),
                                        architectures=["LlamaForCausalLM"]))  # fmt: skip
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
            "rope_theta": 1000000.0}  # fmt: skip
    _hf(root / "qwen2", T.Qwen2Config(**SMALL, max_position_embeddings=131072,
                                      rope_parameters=yarn))  # fmt: skip
    layers = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}  # fmt: skip
    _hf(root / "gemma3", T.Gemma3TextConfig(**{**SMALL, "num_key_value_heads": 1}, head_dim=64,
                                            max_position_embeddings=131072,
                                            rope_parameters=layers))  # fmt: skip
    _hf(root / "neox", T.GPTNeoXConfig(**SMALL, max_position_embeddings=2048))
    longrope = {"rope_type": "longrope", "short_factor": [1.0] * 32, "rope_theta": 10000.0,
                "long_factor": [1.0 + 0.25 * i for i in range(32)]}  # fmt: skip
    _hf(root / "phi3", T.Phi3Config(**SMALL, max_position_embeddings=131072,
                                    original_max_position_embeddings=4096,
                                    rope_parameters=longrope, pad_token_id=0))  # fmt: skip
    text = {**SMALL, "max_position_embeddings": 32768, "rope_parameters": {
        "rope_type": "default", "mrope_section": [8, 12, 12], "rope_theta": 1000000.0}}  # fmt: skip
    vision = {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2}
    _hf(root / "qwen2vl", T.Qwen2VLConfig(text_config=text, vision_config=vision))
    small = {"d_model": 64, "encoder_layers": 1, "decoder_layers": 1, "vocab_size": 100,
             "encoder_attention_heads": 2, "decoder_attention_heads": 2, "pad_token_id": 1,
             "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 0}  # fmt: skip
    _hf(root / "whisper", T.WhisperConfig(**small, max_source_positions=1500))
    _hf(root / "marian", T.MarianConfig(**small, max_position_embeddings=512))
    mae = {"hidden_size": 64, "num_attention_heads": 2, "num_hidden_layers": 1}
    _hf(
        root / "vitmae", T.ViTMAEConfig(**mae, intermediate_size=128, image_size=224, patch_size=16)
    )


def _diffusers_models(root: Path) -> dict[str, Any]:
    D = pytest.importorskip("diffusers")
    models = {
        "unet": D.UNet2DModel(sample_size=32, block_out_channels=(32, 64), layers_per_block=1,
                              down_block_types=("DownBlock2D", "DownBlock2D"),
                              up_block_types=("UpBlock2D", "UpBlock2D"), norm_num_groups=8,
                              flip_sin_to_cos=False, freq_shift=1),
        "dit": D.Transformer2DModel(num_attention_heads=2, attention_head_dim=32, in_channels=4,
                                    num_layers=1, sample_size=48, patch_size=2,
                                    norm_type="ada_norm_zero", num_embeds_ada_norm=1000,
                                    interpolation_scale=3.0),
        "flux": D.FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1,
                                         num_single_layers=1, attention_head_dim=16,
                                         num_attention_heads=2, joint_attention_dim=32,
                                         pooled_projection_dim=32, axes_dims_rope=(4, 6, 6)),
    }  # fmt: skip
    for name, model in models.items():
        model.save_config(str(root / name))
    return models


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def models(root) -> dict[str, Any]:
    _transformers_configs(root)
    return _diffusers_models(root)


_RUNS: dict[tuple[str, bool], Any] = {}


def audit(root: Path, name: str, as_json: bool = False) -> Any:
    """The command's output for one model folder (each run once per module)."""
    key = (str(root / name), as_json)
    if key not in _RUNS:
        proc = run("audit", str(root / name), *(["--json"] if as_json else []))
        assert proc.returncode == 0, proc.stderr
        _RUNS[key] = json.loads(proc.stdout) if as_json else proc.stdout
    return _RUNS[key]


EXPECTED = {  # model folder: what each row's encoding and posenc equivalent say
    "llama31": [("rotary llama3, d=64, base 500000", "preset='llama3'")],
    "qwen2": [("rotary yarn, d=64", "'rope_type': 'yarn'")],
    "gemma3": [("rotary linear, d=64, base 1e+06", "'factor': 8.0"),
               ("rotary default, d=64, base 10000", "posenc.rope(ids, 64)")],
    "neox": [("rotary default, d=16", "posenc.rope(ids, 16)")],
    "phi3": [("rotary longrope, d=64", "'long_factor'")],
    "qwen2vl": [("sections (8, 12, 12)", "sections=(8, 12, 12)")],
    "whisper": [("sinusoid whisper, 1500 x 64", "posenc.table(1500, 64, preset='whisper')")],
    "marian": [("sinusoid marian, 512 x 64", "posenc.table(512, 64, preset='marian')")],
    "vitmae": [("2D sin-cos mae, 14x14", "grid((14, 14), 64, preset='mae', cls_token=True)")],
    "unet": [("timestep, d=32", "flip_sin_to_cos=False, downscale_freq_shift=1")],
    "dit": [("diffusers-2d, 24x24, d=64", "base_size=24, interpolation_scale=3.0"),
            ("timestep, d=256", "flip_sin_to_cos=True, downscale_freq_shift=1")],
    "flux": [("axial rotary, axes (4, 6, 6)", "preset='flux', axes_dim=(4, 6, 6)"),
             ("timestep, d=256", "downscale_freq_shift=0")],
}  # fmt: skip
ROTARY = ("llama31", "qwen2", "gemma3", "neox", "phi3", "qwen2vl")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_encoding_is_named_with_its_figures(models, root, name):
    records = encodings(audit(root, name, as_json=True))
    assert len(records) == len(EXPECTED[name])
    for r, (encoding, equivalent) in zip(records, EXPECTED[name], strict=True):
        assert encoding in r["encoding"], r
        assert equivalent in r["equivalent"], r
        assert r["fix"]
        assert "posenc.torch.patch(model)" in r["fix"]
        assert isinstance(r["float32_error"], float), r
        assert r["positions"]
        assert r["max_position"] > 0
    if name in ROTARY:
        for r in records:
            assert 1e-5 < r["float32_error"] < 1, r  # float32 angles at the largest positions
            assert r["bf16_error"] > 1e-3, r  # a bf16 inv_freq drifts much further
            assert "compat='transformers'" in r["original"]
    if name in ("marian", "vitmae"):  # float64 originals: one rounding to float32
        assert records[0]["float32_error"] < 1e-7
        assert 1e-4 < records[0]["bf16_error"] < 4e-3
    if name == "whisper":
        assert 1e-6 < records[0]["float32_error"] < 1e-3
    if name == "flux":
        assert records[0]["float32_error"] < 1e-7  # float64 on CPU/CUDA
        assert "MPS" in records[0]["note"]
        assert "MPS" in records[0]["fix"]
    for r in records:
        if r["encoding"].startswith("timestep"):
            assert 1e-8 < r["float32_error"] < 1e-2
            assert r["bf16_error"] is None


def test_per_layer_types_and_alternatives(models, root):
    gemma = encodings(audit(root, "gemma3", as_json=True))
    assert [r["where"] for r in gemma] == [
        "rotary_emb (full_attention layers)",
        "rotary_emb (sliding_attention layers)",
    ]
    llama = audit(root, "llama31", as_json=True)[0]
    assert llama["alternative"] == "model.model.rotary_emb = RotaryEmbedding.from_hf(model.config)"
    assert llama["max_position"] == 131071
    assert "last 4096" in llama["positions"]
    vl = audit(root, "qwen2vl", as_json=True)[0]
    assert "language_model" in vl["alternative"]


@pytest.mark.parametrize("name", ["llama31", "gemma3", "dit", "flux"])
def test_the_table_carries_the_json_numbers(models, root, name):
    from posenc.app.audit import number

    table = audit(root, name)
    records = encodings(audit(root, name, as_json=True))
    rows = table.splitlines()
    for i, r in enumerate(records, 1):
        row = next(line for line in rows if line.startswith(f"{i} "))
        assert r["where"] in row
        assert r["encoding"] in row
        assert number(r["float32_error"]) in row
        assert number(r["bf16_error"]) in row
        assert r["equivalent"] in table
        assert r["fix"] in table


def _llama3_inv_freq(xp: Any, inv: Any, p: dict[str, float]) -> Any:
    """transformers' _compute_llama3_parameters, in the array library ``xp`` given."""
    old, low, high, factor = (p["original_max_position_embeddings"], p["low_freq_factor"],
                              p["high_freq_factor"], p["factor"])  # fmt: skip
    wavelen = 2 * math.pi / inv
    scaled = xp.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return xp.where(medium, smoothed, scaled)


def test_llama3_figures_match_an_independent_evaluation(models, root):
    """float64 NumPy of the formula against transformers' float32 arithmetic written here:
    the figures the command prints, within 10%."""
    record = audit(root, "llama31", as_json=True)[0]
    d, n = 64, 131072
    ids = np.concatenate([np.linspace(0, n - 4096, 1024, endpoint=False).astype(np.int64),
                          np.arange(n - 4096, n)])  # fmt: skip
    inv64 = _llama3_inv_freq(np, 500000.0 ** (-np.arange(0, d, 2) / d), LLAMA3)
    angles = ids[:, None].astype(np.float64) * inv64
    exact = np.concatenate([np.cos(angles), np.sin(angles)], axis=1)
    base = 1.0 / (500000.0 ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    inv32 = _llama3_inv_freq(torch, base, LLAMA3)
    for key, freq in (("float32_error", inv32), ("bf16_error", inv32.to(torch.bfloat16).float())):
        a = torch.from_numpy(ids).float()[:, None] * freq[None, :]
        ours = torch.cat([a.cos(), a.sin()], dim=1).double().numpy()
        err = float(np.abs(ours - exact).max())
        assert err == pytest.approx(record[key], rel=0.1), key
    assert 1e-4 < record["float32_error"] < 5e-2  # the known 1e-3 scale at 131072 positions


def test_diffusers_figures_match_the_modules(models, root):
    """The buffers and embeddings diffusers builds itself, against posenc's exact ones."""
    import posenc

    dit = audit(root, "dit", as_json=True)
    buffer = models["dit"].pos_embed.pos_embed[0].double().numpy()
    exact = posenc.grid((24, 24), 64, preset="diffusers-2d", base_size=24,
                        interpolation_scale=3.0, dtype=np.float64)  # fmt: skip
    assert float(np.abs(buffer - exact).max()) == pytest.approx(dit[0]["float32_error"], rel=0.1)
    assert dit[0]["float32_error"] > 1e-8  # the float32 positions i / 3 are off
    t = torch.arange(1000)
    unet = audit(root, "unet", as_json=True)[0]
    ours = models["unet"].time_proj(t).double().numpy()
    exact = posenc.encode(np.arange(1000.0), 32, preset="timestep", flip_sin_to_cos=False,
                          downscale_freq_shift=1, dtype=np.float64)  # fmt: skip
    assert float(np.abs(ours - exact).max()) == pytest.approx(unet["float32_error"], rel=0.1)


def test_a_pipeline_audits_each_component(models, root, tmp_path):
    (tmp_path / "transformer").mkdir()
    flux = (root / "flux" / "config.json").read_text()
    (tmp_path / "transformer" / "config.json").write_text(flux)
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text('{"_class_name": "AutoencoderKL"}')
    index = {"_class_name": "FluxPipeline", "transformer": ["diffusers", "FluxTransformer2DModel"],
             "vae": ["diffusers", "AutoencoderKL"], "scheduler": ["diffusers", "X"]}  # fmt: skip
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    proc = run("audit", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "transformer / pos_embed (FluxPosEmbed)" in proc.stdout
    assert "vae (AutoencoderKL): no positional encoding" in proc.stdout


def test_an_unknown_rotary_model_is_audited_as_generic(tmp_path):
    cfg = {"model_type": "mystery", "hidden_size": 256, "num_attention_heads": 4,
           "max_position_embeddings": 4096,
           "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    proc = run("audit", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    (record,) = encodings(json.loads(proc.stdout))
    assert "as transformers' standard rotary machinery (halves)" in record["note"]
    assert record["alternative"] is None
    assert 1e-6 < record["float32_error"] < 1e-2


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (None, "no such file"),
        ('{"model_type": "llama",', "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"model_type": "bert", "max_position_embeddings": 512}', "not recognised"),
        ('{"_class_name": "AutoencoderKL"}', "no positional encoding posenc recognises"),
    ],
)
def test_a_config_it_cannot_read_is_one_line_and_exit_2(tmp_path, text, fragment):
    path = tmp_path / "config.json"
    if text is not None:
        path.write_text(text)
    assert_one_line_error(run("audit", str(path)), fragment)
    assert_one_line_error(run("audit", str(tmp_path / "empty")), "no such file")


def test_without_torch_the_encodings_are_listed_unmeasured(models, root):
    code = (
        "import sys; sys.modules['torch'] = None; from posenc.app.cli import main; "
        f"sys.exit(main(['audit', {str(root / 'whisper')!r}, '--json']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (record,) = encodings(json.loads(proc.stdout))
    assert record["float32_error"] is None
    assert "pip install torch" in record["note"]
    assert record["equivalent"] == "posenc.table(1500, 64, preset='whisper')"


LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
         "max_position_embeddings": 4096, "rope_theta": 10000.0}  # fmt: skip
GEMMA3 = {**LLAMA, "model_type": "gemma3_text", "head_dim": 16, "rope_parameters": {
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}  # fmt: skip


@pytest.mark.parametrize(
    ("config", "field", "value"),
    [
        (LLAMA, "rope_theta", "10000"),
        (LLAMA, "max_position_embeddings", "4096"),
        (LLAMA, "hidden_size", 64.5),
        (LLAMA, "rope_scaling", {"rope_type": "llama3", "factor": "8"}),
        (GEMMA3, "rope_parameters.sliding_attention.rope_theta", True),
        (GEMMA3, "rope_parameters.full_attention.factor", [8]),
        ({"model_type": "whisper", "max_source_positions": 1500}, "d_model", "384"),
        ({"model_type": "vit_mae", "hidden_size": 64}, "image_size", "224"),
        ({"_class_name": "UNet2DModel"}, "block_out_channels", "abc"),
        ({"_class_name": "FluxTransformer2DModel"}, "axes_dims_rope", [16, -56, 56]),
        (
            {"architecture": "vit_base_patch16_224", "num_features": 768},
            "pretrained_cfg.input_size",
            "224",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_named(tmp_path, config, field, value):
    """Each field the audit reads is checked before it is read: the error names the field
    and the value, not an internal error or 'not recognised'."""
    cfg = json.loads(json.dumps(config))
    *outer, last = field.split(".")
    inner = cfg
    for key in outer:
        inner = inner.setdefault(key, {})
    inner[last] = value
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    proc = run("audit", str(tmp_path))
    name = last if last != "rope_scaling" else "factor"
    assert_one_line_error(proc, name)
    assert repr(value if last != "rope_scaling" else "8") in proc.stderr
    assert "not recognised" not in proc.stderr
    assert "internal error" not in proc.stderr


def test_every_field_read_has_a_rule():
    """The config keys the audit reads by name (``cfg.get("x")``, ``cfg["x"]``) are in
    FIELDS, the table checked before reading, or are a scaling rule's (checked by the rule)."""
    import ast
    import importlib
    import inspect

    from posenc.app import audit_fields, audit_models, audit_vision
    from posenc.spec.families import FAMILIES
    from posenc.spec.scaling import RULES

    def config_like(node: ast.AST) -> bool:  # cfg, rp (its rope parameters), (cfg.get(x) or {})
        return (isinstance(node, ast.Name) and node.id in ("cfg", "rp")) or isinstance(
            node, ast.BoolOp
        )

    read: set[str] = set()
    records = [importlib.import_module(f"posenc.spec.families.{name}") for name in FAMILIES]
    source = "\n".join(inspect.getsource(m) for m in (audit_models, audit_vision, *records))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get":
            arg = node.args[0] if node.args and config_like(node.func.value) else None
        elif isinstance(node, ast.Subscript) and config_like(node.value):
            arg = node.slice
        else:
            continue
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            read.add(arg.value)
    rule_keys = {k for rule in RULES.values() for k in (*rule.required, *rule.optional)}
    assert read, "no field found: the walk is broken"
    assert read - set(audit_fields.FIELDS) - rule_keys == set()


def test_timm_configs(tmp_path):
    cfg = {"architecture": "vit_small_patch16_384.augreg_in21k_ft_in1k", "num_classes": 1000,
           "num_features": 384, "pretrained_cfg": {"input_size": [3, 384, 384]}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    proc = run("audit", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    (record,) = json.loads(proc.stdout)
    assert record["where"] == "pos_embed"
    assert "learned" in record["encoding"]
    assert record["max_position"] == 23
    assert record["float32_error"] is None
    assert "posenc.torch.patch(model)" in record["fix"]
    cfg["architecture"] = "vit_base_patch16_rope_mixed_224.naver_in1k"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(run("audit", str(tmp_path)), "learned frequencies")


# ---------------------------------------------------------------------------------------------
# what the audit says about fixing a model comes from patch, on the model built from the config


def _write(folder: Path, cfg: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, default=str))
    return folder


def _transformers_config(config: Any, architecture: str | None = None) -> dict[str, Any]:
    cfg = json.loads(config.to_json_string(use_diff=False))
    if architecture:
        cfg["architectures"] = [architecture]
    return cfg


def _diffusers_config(cls: Any, **kw: Any) -> dict[str, Any]:
    D = pytest.importorskip("diffusers")
    with torch.device("meta"):
        model = cls(**kw)
    return {"_class_name": cls.__name__, "_diffusers_version": D.__version__, **model.config}


def _audit_json(folder: Path) -> list[dict[str, Any]]:
    proc = run("audit", str(folder), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _notes(records: list[dict[str, Any]]) -> list[str]:
    return [r["note"] for r in records if r["encoding"] is None]


def test_the_fix_names_the_module_patch_replaces(tmp_path):
    T = pytest.importorskip("transformers")
    cfg = _transformers_config(T.GPTNeoXConfig(**SMALL, max_position_embeddings=2048),
                               "GPTNeoXForCausalLM")  # fmt: skip
    records = _audit_json(_write(tmp_path / "neox", cfg))
    (record,) = encodings(records)
    assert record["fix"] == "posenc.torch.patch(model) (replaces model.gpt_neox.rotary_emb)"
    assert record["alternative"].startswith("model.gpt_neox.rotary_emb = ")  # not model.model
    assert any("GPTNeoXForCausalLM built from the config on the meta device" in n
               for n in _notes(records))  # fmt: skip


def test_a_llama2_config_is_read_as_transformers_reads_it(tmp_path):
    """Meta's Llama-2 config.json: no rope_theta, "rope_scaling": null (base 10000)."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
           "intermediate_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2,
           "num_key_value_heads": 4, "max_position_embeddings": 4096, "rope_scaling": None,
           "vocab_size": 1000, "torch_dtype": "float16"}  # fmt: skip
    (record,) = encodings(_audit_json(_write(tmp_path / "llama2", cfg)))
    assert record["encoding"] == "rotary default, d=64, base 10000"
    assert record["fix"].endswith("(replaces model.model.rotary_emb)")


def test_a_standard_rotary_module_of_an_unlisted_family_is_fixed(tmp_path):
    """Falcon is not a family from_hf lists; its module is transformers' standard machinery,
    which patch checks (on a fresh module: the audit's model is on the meta device)."""
    T = pytest.importorskip("transformers")
    cfg = _transformers_config(T.FalconConfig(hidden_size=256, num_attention_heads=4,
                                              num_hidden_layers=2, vocab_size=1000),
                               "FalconForCausalLM")  # fmt: skip
    (record,) = encodings(_audit_json(_write(tmp_path / "falcon", cfg)))
    assert record["fix"] == "posenc.torch.patch(model) (replaces model.transformer.rotary_emb)"
    assert "standard rotary machinery" in record["note"]


def test_a_module_patch_leaves_alone_gets_no_fix(tmp_path):
    """GPT-J keeps its sinusoid as a buffer in every attention layer, which patch reports and
    leaves alone: the audit lists those rows and gives no fix (it exited 2, "not recognised",
    while patch reported them)."""
    T = pytest.importorskip("transformers")
    cfg = _transformers_config(T.GPTJConfig(n_embd=256, n_head=4, n_layer=2, vocab_size=1000,
                                            rotary_dim=32), "GPTJForCausalLM")  # fmt: skip
    records = _audit_json(_write(tmp_path / "gptj", cfg))
    assert not encodings(records)  # GPT-J's tables are per-layer buffers: nothing to fix
    notes = "\n".join(_notes(records))
    assert "patch: transformer.h.0.attn.embed_positions (buffer) left alone: a fixed table" in notes


def test_gemma3_full_attention_is_not_given_another_familys_preset(tmp_path):
    T = pytest.importorskip("transformers")
    layers = {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}  # fmt: skip
    cfg = _transformers_config(T.Gemma3TextConfig(**{**SMALL, "num_key_value_heads": 1},
                                                  head_dim=64, max_position_embeddings=8192,
                                                  rope_parameters=layers))  # fmt: skip
    full, _ = encodings(_audit_json(_write(tmp_path / "gemma3", cfg)))
    assert full["equivalent"] == "posenc.rope(ids, 64, base=1000000.0)"  # not preset='qwen2'


def test_diffusers_findings_follow_the_model_its_config_builds(tmp_path):
    D = pytest.importorskip("diffusers")
    small = {"num_attention_heads": 2, "attention_head_dim": 16}
    aura = _audit_json(_write(tmp_path / "aura", _diffusers_config(
        D.AuraFlowTransformer2DModel, sample_size=32, patch_size=2, in_channels=4,
        num_mmdit_layers=1, num_single_dit_layers=1, joint_attention_dim=32,
        caption_projection_dim=32, out_channels=4, pos_embed_max_size=256, **small)))  # fmt: skip
    assert not [r for r in encodings(aura) if "pos_embed" in r["where"]]  # learned: dropped
    notes = "\n".join(_notes(aura))
    assert "patch: pos_embed.pos_embed (Parameter) left alone: learned, left alone" in notes
    assert "patch: time_step_embed (Timesteps) replaced (exact)" in notes
    assert "GiB" not in json.dumps(aura)  # nothing about this machine
    sana = _audit_json(_write(tmp_path / "sana", _diffusers_config(
        D.SanaTransformer2DModel, in_channels=4, out_channels=4, num_layers=1,
        num_cross_attention_heads=2, cross_attention_head_dim=16, cross_attention_dim=32,
        caption_channels=32, sample_size=32, interpolation_scale=None, **small)))  # fmt: skip
    assert not [r for r in encodings(sana) if "pos_embed" in r["where"]]  # no such table
    notes = "\n".join(_notes(sana))
    assert "time_embed.emb.time_proj (Timesteps) replaced (exact)" in notes
    assert "HunyuanDiT" not in notes
    cog = _audit_json(_write(tmp_path / "cog", _diffusers_config(
        D.CogView3PlusTransformer2DModel, in_channels=4, out_channels=4, num_layers=1,
        text_embed_dim=32, time_embed_dim=32, condition_dim=16, sample_size=32,
        **small)))  # fmt: skip
    assert not [r for r in encodings(cog) if r["fix"].startswith("posenc.torch.patch(model)")
                and "pos_embed" in r["where"]]  # fmt: skip
    assert "patch_embed.pos_embed (buffer) left alone: not covered yet" in "\n".join(_notes(cog))


def test_an_empty_path_is_one_line():
    assert_one_line_error(run("audit", ""), "PATH must name a model folder")


def test_json_keeps_the_components_not_audited(models, root, tmp_path):
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text(
        (root / "flux" / "config.json").read_text()
    )
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text('{"_class_name": "AutoencoderKL"}')
    index = {"_class_name": "FluxPipeline", "transformer": ["diffusers", "x"],
             "vae": ["diffusers", "AutoencoderKL"]}  # fmt: skip
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    records = _audit_json(tmp_path)
    assert any(n.startswith("vae (AutoencoderKL): ") for n in _notes(records))


def _patched_paths(model: Any) -> set[str]:
    from posenc.torch import patch

    return {r.path for r in patch(model, dry_run=True).replaced}


def _audited_paths(folder: Path) -> set[str]:
    """The modules the audit says patch replaces: its fix lines and the rest of its report."""
    import re

    records = _audit_json(folder)
    named = {p for r in encodings(records) for p in re.findall(r"model\.([\w.]+)", r["fix"])}
    rest = {m.group(1) for n in _notes(records)
            if (m := re.search(r"patch: (\S+) \(\w+\) replaced", n))}  # fmt: skip
    return named | rest


@pytest.mark.parametrize("name", ["llama31", "qwen2", "neox", "phi3", "whisper", "marian",
                                  "unet", "dit", "flux"])  # fmt: skip
def test_audit_and_patch_name_the_same_modules(models, root, name):
    """For each model the audit tests build, the modules the audit says patch replaces are
    the ones patch replaces on the model itself."""
    if name in models:
        model = models[name]
    else:
        T = pytest.importorskip("transformers")
        config = T.AutoConfig.from_pretrained(root / name)
        architectures = [a for a in config.architectures or () if hasattr(T, a)]
        model = (getattr(T, architectures[0])(config) if architectures
                 else T.AutoModel.from_config(config))  # fmt: skip
    assert _audited_paths(root / name) == _patched_paths(model)


# ---------------------------------------------------------------------------------------------
# where the model's library is not installed: the config alone, read through the records


def _alone(folder: Path, library: str) -> subprocess.CompletedProcess[str]:
    """``posenc audit FOLDER --json`` where ``library`` cannot be imported: the config alone."""
    code = CLI.replace("from posenc", f"sys.modules[{library!r}] = None; from posenc", 1)
    args = [sys.executable, "-c", code, "audit", str(folder), "--json"]
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)


def test_without_transformers_a_llama2_config_is_default_rope(tmp_path):
    """Meta's Llama-2 config.json read alone (it exited 2, "no positional encoding posenc
    recognises"): default RoPE, base 10000; no module path is guessed for the assignment."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
           "intermediate_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2,
           "num_key_value_heads": 4, "max_position_embeddings": 4096, "rope_scaling": None,
           "vocab_size": 1000, "torch_dtype": "float16"}  # fmt: skip
    proc = _alone(_write(tmp_path / "llama2", cfg), "transformers")
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)
    (record,) = encodings(records)
    assert record["encoding"] == "rotary default, d=64, base 10000"
    assert record["alternative"] is None
    assert any("the config alone (transformers is not installed)" in n for n in _notes(records))


def test_without_torch_a_llama2_config_is_default_rope_unmeasured(tmp_path):
    """The same config where torch is not installed either: the family's default base, read
    from the torch-free records, the figures not computed."""
    cfg = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
           "max_position_embeddings": 4096, "rope_scaling": None}  # fmt: skip
    proc = _alone(_write(tmp_path / "llama2", cfg), "torch")
    assert proc.returncode == 0, proc.stderr
    (record,) = encodings(json.loads(proc.stdout))
    assert record["encoding"] == "rotary default, base 10000.0"
    assert record["float32_error"] is None
    assert "pip install torch" in record["note"]


def test_without_transformers_no_module_path_is_guessed(tmp_path):
    """GPT-NeoX's rotary module is ``gpt_neox.rotary_emb``: read alone, the audit offered
    ``model.model.rotary_emb = ...`` (an AttributeError)."""
    T = pytest.importorskip("transformers")
    cfg = _transformers_config(T.GPTNeoXConfig(**SMALL, max_position_embeddings=2048),
                               "GPTNeoXForCausalLM")  # fmt: skip
    proc = _alone(_write(tmp_path / "neox", cfg), "transformers")
    assert proc.returncode == 0, proc.stderr
    (record,) = encodings(json.loads(proc.stdout))
    assert record["alternative"] is None
    assert "model.model" not in proc.stdout


def _diffusers_configs() -> dict[str, dict[str, Any]]:
    D = pytest.importorskip("diffusers")
    small = {"num_attention_heads": 2, "attention_head_dim": 16}
    return {
        "aura": _diffusers_config(D.AuraFlowTransformer2DModel, sample_size=32, patch_size=2,
                                  in_channels=4, num_mmdit_layers=1, num_single_dit_layers=1,
                                  joint_attention_dim=32, caption_projection_dim=32,
                                  out_channels=4, pos_embed_max_size=256, **small),
        "sana": _diffusers_config(D.SanaTransformer2DModel, in_channels=4, out_channels=4,
                                  num_layers=1, num_cross_attention_heads=2,
                                  cross_attention_head_dim=16, cross_attention_dim=32,
                                  caption_channels=32, sample_size=32, interpolation_scale=None,
                                  **small),
        "cog": _diffusers_config(D.CogView3PlusTransformer2DModel, in_channels=4,
                                 out_channels=4, num_layers=1, text_embed_dim=32,
                                 time_embed_dim=32, condition_dim=16, sample_size=32, **small),
        "sd3": _diffusers_config(D.SD3Transformer2DModel, sample_size=32, patch_size=2,
                                 in_channels=4, num_layers=1, joint_attention_dim=32,
                                 caption_projection_dim=32, pooled_projection_dim=32,
                                 out_channels=4, pos_embed_max_size=24, **small),
    }  # fmt: skip


def test_without_diffusers_no_table_is_guessed_from_config_keys(tmp_path):
    """Read alone, AuraFlow's config (a learned table), Sana's (``interpolation_scale: null``:
    no table) and CogView3Plus' (another patch embedding) were each given a diffusers-2d
    sin-cos table and ``fix: posenc.torch.patch(model)``, AuraFlow's with this machine's
    memory size; now none is claimed and the error says the config was read alone. SD3's,
    a class whose table the audit knows, is still read: its table and timestep sinusoid."""
    configs = _diffusers_configs()
    for name in ("aura", "sana", "cog"):
        proc = _alone(_write(tmp_path / name, configs[name]), "diffusers")
        assert_one_line_error(proc, "no positional encoding posenc recognises in its config alone")
        assert "diffusers is not installed" in proc.stderr
        assert "GiB" not in proc.stderr
    proc = _alone(_write(tmp_path / "sd3", configs["sd3"]), "diffusers")
    assert proc.returncode == 0, proc.stderr
    found = {r["where"]: r for r in encodings(json.loads(proc.stdout))}
    assert sorted(found) == ["pos_embed.pos_embed", "time_text_embed.time_proj"]
    assert found["pos_embed.pos_embed"]["encoding"] == "2D sin-cos diffusers-2d, 24x24, d=32"
