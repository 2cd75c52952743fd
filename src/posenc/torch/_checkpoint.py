"""Checkpoints never lose information silently.

The modules save no table, but checkpoints of the modules they replace do, under a handful of
names. When such a key arrives in ``load_state_dict``, its table is compared with the module's
own encoding: the same sinusoid (to the precision its original computed in) is dropped
quietly, since the module computes it exactly; anything else (a learned or fine-tuned table,
another convention, another width) is an error that says what the table is and how to keep
it; ``strict=False`` drops it with a warning instead.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from posenc.errors import PosencError

# the names the original modules saved their tables under (tutorial, timm/MAE, Whisper,
# fairseq, HF ViT-MAE)
SAVED_KEYS = ("pe", "pos_embed", "positional_embedding", "weights", "position_embeddings")
PROBE_KEYS = ("_float_tensor",)  # fairseq's device probe: a placeholder, no values

# what a float32 original errs by: its angle p * w is formed in float32 (about |p| 2^-23 w),
# so each row may differ by up to 2^-21 (|p| + 1) from the exact table (4x margin); and what
# storing the table in a narrower dtype adds
ROUNDING = {
    torch.float64: 1e-12,
    torch.float32: 2.0**-22,
    torch.bfloat16: 2.0**-7,
    torch.float16: 2.0**-9,
}


def check_saved_tables(module: nn.Module, state: dict[str, Any], prefix: str, *args: Any) -> None:
    """The load_state_dict pre-hook of every posenc module."""
    for name in PROBE_KEYS:
        state.pop(prefix + name, None)
    for name in SAVED_KEYS:
        check_saved_table(module, state, prefix + name)


def check_saved_table(module: nn.Module, state: dict[str, Any], key: str) -> None:
    """The check of one key: popped from ``state``, quietly when it holds ``module``'s own
    encoding; else an error (a warning under ``strict=False``). :func:`posenc.torch.patch`
    routes the keys of the tables it replaced (``weight``, a parameter's name) here."""
    if key in state:
        saved = state.pop(key)
        problem = _problem(module, saved)
        if problem is None:
            return
        message = (
            f"checkpoint key {key!r} holds {problem}. {type(module).__name__} computes its "
            "encoding and saves none: to keep this table, load it into a learned parameter "
            "(an nn.Parameter or nn.Embedding) instead; load_state_dict(..., strict=False) "
            "drops it with a warning"
        )
        if _loading_strictly():
            raise PosencError(message)
        warnings.warn(f"{message}; dropped (strict=False)", UserWarning, stacklevel=4)


def _loading_strictly() -> bool:
    """The ``strict`` argument of the ``load_state_dict`` call running this hook. torch hands
    its hooks ``strict=True`` whatever the caller asked, so it is read from that call's frame;
    loaders other than ``nn.Module.load_state_dict`` count as strict."""
    code = nn.Module.load_state_dict.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return bool(frame.f_locals.get("strict", True))
        frame = frame.f_back  # type: ignore[assignment]
    return True


def _problem(module: Any, saved: Any) -> str | None:
    """None when ``saved`` is the module's own encoding; else what it is, in words."""
    if not isinstance(saved, torch.Tensor) or not saved.is_floating_point() or saved.ndim < 1:
        return f"a {type(saved).__name__} that is not a floating-point table"
    rows = saved.detach().to("cpu", torch.float64).reshape(-1, saved.shape[-1]).numpy()
    shape = "x".join(map(str, rows.shape))
    what = f"a [{shape}] {str(saved.dtype).replace('torch.', '')} table"
    own = module._expected_table(rows.shape[0])
    if isinstance(own, str):
        return f"{what}, which {own}"
    if own.shape[1] != rows.shape[1]:
        return f"{what}, but this module's encoding is {own.shape[1]} channels wide"
    if not np.isfinite(rows).all():
        return f"{what} with NaN or infinite values"
    largest = module._largest_position(rows.shape[0])
    tol = ROUNDING.get(saved.dtype, 2.0**-7) + 2.0**-21 * (largest + 1)
    diff = np.abs(rows - own)
    if (diff <= tol).all():
        return None
    row = int(np.argmax(diff.max(axis=1)))
    return (
        f"{what} that is not this module's encoding: max difference {diff.max():.3g} at row "
        f"{row}, where a copy computed in float32 and stored as it is stays within {tol:.2g}; "
        f"{_what_it_is(rows)}"
    )


def _what_it_is(rows: np.ndarray) -> str:
    """The preset the table matches, if any (the `posenc identify` machinery)."""
    from posenc.api.identify import MATCH, identify

    try:
        found = identify(rows)
    except PosencError as err:
        return f"it is not a sinusoidal table ({err})"
    if found and found[0].error < MATCH:
        return f"it is preset {found[0].preset!r}: {found[0].call} (max error {found[0].error:.2g})"
    closest = f" (closest sinusoid: {found[0].call}, off by {found[0].error:.2g})" if found else ""
    return f"it looks learned{closest}"
