"""The transformers model families whose rotary modules ``RotaryEmbedding.from_hf`` reproduces,
as data (:data:`FAMILIES`, by ``config.model_type``): what each one's module returns and how it
reads its config. Torch-free: ``posenc audit`` reads a config through them without torch;
:mod:`posenc.compat.transformers` replays their arithmetic."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """How one transformers model family's rotary module reads its config and what it
    returns: ``form`` ``"halves"``, ``"interleaved"``, ``"compact"`` (a ``(cos, sin)`` pair)
    or ``"complex"`` (one complex64 tensor); ``partial``: its default rule honours
    ``partial_rotary_factor`` (the scaled rules always do); ``sections``: multimodal RoPE
    with these default sections, ``interleave``: Qwen3-VL's round robin; ``float32``: the
    tables stay float32 whatever ``x``'s dtype (OLMo), instead of following it;
    ``per_layer``: one module holds a set of tables per layer type (``rope_parameters``
    keyed by ``config.layer_types``), and its forward takes ``layer_type`` (Gemma 3);
    ``theta``: the ``rope_theta`` its config class defaults to, which a config.json without
    one is read with (Meta's Llama-2: none, ``"rope_scaling": null``; per layer type: None)."""

    form: str
    partial: bool = False
    sections: tuple[int, ...] | None = None
    interleave: bool = False
    float32: bool = False
    per_layer: bool = False
    theta: float | None = 10000.0
    checked: bool = False
    """Taken for a module only once its tables were seen to be this form's (``STANDARD``): a
    key of the model's own in ``rope_parameters`` (``ignore_keys_at_rope_validation``) that
    the rule does not take is then dropped, since the module's numbers showed it unread."""


_HALVES, _PARTIAL = Family("halves"), Family("halves", partial=True)
FAMILIES: dict[str, Family] = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "gemma",
            "gemma2",
            "granite",
            "deepseek_v3",
            "starcoder2",
        ),
        _HALVES,
    ),
    "mixtral": Family("halves", theta=1e6),
    "smollm3": Family("halves", theta=2e6),
    **dict.fromkeys(("olmo", "olmo2"), Family("halves", float32=True)),
    **dict.fromkeys(("gpt_neox", "phi", "phi3", "stablelm", "persimmon"), _PARTIAL),
    "cohere": Family("interleaved", theta=5e5),
    "cohere2": Family("interleaved"),
    "gpt_oss": Family("compact", theta=1.5e5),
    "llama4_text": Family("complex", theta=5e5),
    "deepseek_v2": Family("complex"),
    **dict.fromkeys(
        ("qwen2_vl_text", "qwen2_5_vl_text"), Family("halves", sections=(16, 24, 24), theta=1e6)
    ),
    "qwen3_vl_text": Family("halves", sections=(24, 20, 20), interleave=True, theta=5e5),
    **dict.fromkeys(("gemma3_text", "gemma3n_text"), Family("halves", per_layer=True, theta=None)),
    "gemma4_text": Family("halves", per_layer=True, theta=None),  # per-layer head dims
    "olmo3": Family("halves", float32=True, per_layer=True, theta=None),
}
"""The model families whose rotary modules ``RotaryEmbedding.from_hf`` reproduces (each one
checked bit for bit against transformers 5.23 in the tests), by ``config.model_type``."""
