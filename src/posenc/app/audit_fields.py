"""The config fields ``posenc audit`` reads, each with its rule, checked before any is read:
a field of the wrong type is one error naming it, the rule and the value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from posenc.errors import PosencError, show


def _integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _integers(v: Any, minimum: int) -> bool:
    return isinstance(v, list) and bool(v) and all(_integer(x) and x >= minimum for x in v)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)


def _positives(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(_number(x) and x > 0 for x in v)


_SIZES = (
    "max_position_embeddings",
    "max_source_positions",
    "d_model",
    "hidden_size",
    "num_attention_heads",
    "head_dim",
    "attention_head_dim",
    "in_channels",
    "pos_embed_max_size",
    "original_max_position_embeddings",
    "num_features",
    "patch_size_t",
)
_SIDES = ("image_size", "patch_size", "sample_size", "img_size")
FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    **dict.fromkeys(
        (
            "model_type",
            "_class_name",
            "rope_type",
            "type",
            "time_embedding_type",
            "norm_type",
            "architecture",
        ),
        ("a string", lambda v: isinstance(v, str)),
    ),
    **dict.fromkeys(_SIZES, ("a positive integer", lambda v: _integer(v) and v > 0)),
    **dict.fromkeys(
        _SIDES,
        (
            "a positive integer or a list of them",
            lambda v: (_integer(v) and v > 0) or _integers(v, 1),
        ),
    ),
    **dict.fromkeys(
        (
            "rope_theta",
            "rotary_emb_base",
            "partial_rotary_factor",
            "rotary_pct",
            "freq_shift",
            "interpolation_scale",
        ),
        ("a number", _number),
    ),
    **dict.fromkeys(
        ("flip_sin_to_cos", "guidance_embeds", "use_rotary_positional_embeddings"),
        ("true or false", lambda v: isinstance(v, bool)),
    ),
    "rope_scale": ("a non-empty list of positive numbers", _positives),
    **dict.fromkeys(
        (
            "axes_dims_rope",
            "block_out_channels",
            "mrope_section",
            "input_size",
            "rope_axes_dim",
            "axes_dims",
            "axes_dim_rope",
        ),
        ("a non-empty list of positive integers", lambda v: _integers(v, 1)),
    ),
    **dict.fromkeys(
        ("rope_parameters", "rope_scaling", "text_config", "pretrained_cfg"),
        ("an object", lambda v: isinstance(v, dict)),
    ),
}
"""Every config field the audit (and ``read_config``, for rotary configs) reads outside the
scaling rules' own keys (which each rule checks), with its rule: ``(rule in words, test)``.
JSON ``null`` is a field left unset."""


def check_fields(cfg: dict[str, Any], where: str = "") -> None:
    """Each field of ``FIELDS`` in ``cfg`` (and in its ``text_config``, its rope parameters,
    their sets per layer type) is null or meets its rule; else an error naming the field,
    the rule and the value."""
    for key, value in cfg.items():
        if key in FIELDS and value is not None and not FIELDS[key][1](value):
            raise PosencError(
                f"config field `{where}{key}` must be {FIELDS[key][0]}, got "
                f"{show(value)} ({type(value).__name__})"
            )
    for key in ("text_config", "rope_parameters", "rope_scaling", "pretrained_cfg"):
        inner = cfg.get(key)
        if isinstance(inner, dict):
            check_fields(inner, f"{where}{key}.")
    if not where:
        return
    for key, value in cfg.items():  # rope_parameters: one set per layer type
        if isinstance(value, dict) and where.endswith(("rope_parameters.", "rope_scaling.")):
            check_fields(value, f"{where}{key}.")
