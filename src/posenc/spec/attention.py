"""The attention softmax scale that DeepSeek-V2/V3's YaRN implies, which cos and sin cannot
carry (``posenc.softmax_scale``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc.errors import PosencError, check_int
from posenc.spec.scaling import parse_scaling
from posenc.spec.transformers_rules import mscale, yarn_factor


def softmax_scale(config: Any, head_dim: int | None = None) -> float:
    """The attention softmax scale of DeepSeek-V2/V3's YaRN: ``head_dim ** -0.5`` times
    ``mscale(factor, mscale_all_dim) ** 2``, which cos and sin cannot carry.

    Args:
        config: a transformers config (``rope_parameters`` or ``rope_scaling``, and
            ``qk_head_dim`` or ``qk_nope_head_dim + qk_rope_head_dim``), or a rope-parameters
            dict together with ``head_dim``.
        head_dim: the query/key width, when ``config`` is a dict.

    Examples:
        >>> posenc.softmax_scale({"rope_type": "yarn", "factor": 40,
        ...     "original_max_position_embeddings": 4096, "mscale": 1.0,
        ...     "mscale_all_dim": 1.0}, head_dim=192)  # 192**-0.5 * (0.1 ln 40 + 1)**2
        0.13523377886...
    """
    params: Any
    if isinstance(config, Mapping):
        params = config
        if head_dim is None:
            raise PosencError("`head_dim` is required when `config` is a dict")
    else:
        params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
        if head_dim is None:
            head_dim = getattr(config, "qk_head_dim", None)
            if head_dim is None:
                nope = getattr(config, "qk_nope_head_dim", None)
                rope_dim = getattr(config, "qk_rope_head_dim", None)
                if nope is None or rope_dim is None:
                    raise PosencError(
                        "`config` lacks `qk_head_dim` (or `qk_nope_head_dim` and "
                        "`qk_rope_head_dim`); pass `head_dim`"
                    )
                head_dim = nope + rope_dim
    d = check_int("head_dim", head_dim, minimum=1)
    scale: float = d**-0.5
    if not params:
        return scale
    p = parse_scaling(params).p
    if not p.get("mscale_all_dim"):  # a key of yarn's alone
        return scale
    m: float = mscale(yarn_factor(p), p["mscale_all_dim"])
    return scale * m * m  # transformers' order of operations
