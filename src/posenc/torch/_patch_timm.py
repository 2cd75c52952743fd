"""The timm recogniser of :func:`posenc.torch.patch`: a model's ``pos_embed`` table.

timm's vision transformers keep their absolute positions in a ``pos_embed`` parameter
``[1, prefix + H * W, d]``. timm itself makes it a learned table; a fixed sin-cos one is the
user's (MoCo v3, a MAE-style pretraining, ``build_sincos2d_pos_embed`` copied in and frozen).
A trainable table is reported and left alone. A frozen one is identified among posenc's grid
presets on the model's patch grid (``patch_embed.grid_size``), its prefix rows (class and
register tokens, unless ``no_embed_class``) zero, and replaced by a
:class:`~posenc.torch._patching.TableParameter` that computes it exactly.

``compat="original"``: a table that is the exact one rounded once to float32 (MAE's NumPy
float64, transformers' float64 builders) is repeated from the exact numbers; one that timm's
float32 arithmetic built (``build_sincos2d_pos_embed``, MoCo v3's copy of it) by
:func:`posenc.compat.timm.sincos_2d`; any other is left as it is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from posenc.api.identify import MATCH, identify
from posenc.api.sinusoidal import grid
from posenc.compat import timm as original
from posenc.torch._checkpoint import _problem
from posenc.torch._patching import (
    Found,
    Recogniser,
    TableParameter,
    from_library,
    learned,
    left_alone,
    left_table,
)

ATTRIBUTE = "pos_embed"
REPLAYS = tuple(
    {"reverse_coord": rev, "interleave_sin_cos": inter}
    for rev in (False, True)
    for inter in (False, True)
)
"""The option sets of timm's ``build_sincos2d_pos_embed`` that ``compat="original"`` tries."""


def _prefix(module: Any) -> int:
    """The rows before the grid: the class and register tokens, unless ``no_embed_class``."""
    return (
        0
        if getattr(module, "no_embed_class", False)
        else int(getattr(module, "num_prefix_tokens", 0))
    )


def pos_embed(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """A timm module's ``pos_embed``: learned (left alone) or a fixed sin-cos grid table; and
    its other tables named ``pos_embed_*`` (Hiera's ``pos_embed_win``, its video form's
    ``pos_embed_spatial`` and ``pos_embed_temporal``), left alone."""
    if not from_library(module, "timm"):
        return None
    own = {**module._parameters, **module._buffers}
    others = tuple(
        left_table(t, name, "a fixed table{held}: posenc has no stand-in for it, left alone")
        for name, t in own.items()
        if name.startswith(ATTRIBUTE + "_") and isinstance(t, Tensor)
    )
    saved = own.get(ATTRIBUTE)
    found = _pos_embed(module, saved) if isinstance(saved, Tensor) else None
    if found is None:
        return replace(others[0], others=others[1:]) if others else None
    return replace(found, others=others)


def _pos_embed(module: nn.Module, saved: Tensor) -> Found | None:
    kind = type(saved).__name__ if isinstance(saved, nn.Parameter) else "buffer"
    if saved.requires_grad:  # [1, rows, d], or NaFlexViT's [1, H, W, d]
        return left_alone(kind, learned(saved), ATTRIBUTE)
    if saved.ndim != 3:
        return None
    if saved.is_meta:
        return left_alone(kind, "its table is on the meta device: load the model first", ATTRIBUTE)
    shape = tuple(int(s) for s in getattr(getattr(module, "patch_embed", None), "grid_size", ()))
    prefix, (rows, dim) = _prefix(module), tuple(saved.shape[1:])
    if len(shape) != 2 or rows != prefix + shape[0] * shape[1]:
        return left_alone(
            kind,
            f"a fixed table of {rows} rows that is not {prefix} prefix rows "
            f"and the patch grid {shape}: left alone",
            ATTRIBUTE,
        )
    values = saved.detach()[0].double().cpu().numpy()
    found = [c for c in identify(values[prefix:], shape=shape) if c.error < MATCH]
    if not found:
        return left_alone(
            kind, "a fixed table that is not a sinusoid posenc knows: left alone", ATTRIBUTE
        )
    if values[:prefix].any():
        return left_alone(
            kind, "a fixed table whose class-token rows are not zero: left alone", ATTRIBUTE
        )
    preset = found[0].preset
    options = {k: v for k, v in found[0].options.items() if k != "shape" and v is not False}

    def exact_rows(dtype: torch.dtype, device: Any) -> Tensor:
        body = grid(shape, dim, preset=preset, dtype=dtype, device=device, **options)
        return torch.cat((body.new_zeros(prefix, dim), body))[None]

    def replay_rows(replay: dict[str, Any]) -> Any:
        def rows_of(dtype: torch.dtype, device: Any) -> Tensor:
            body = original.sincos_2d(shape, dim, **replay, device=device).to(dtype)
            return torch.cat((body.new_zeros(prefix, dim), body))[None]

        return rows_of

    def stand_in(make: Any, label: str) -> TableParameter:
        def expected(n: int) -> Any:
            if n != rows:
                return f"has {n} rows, not the {rows} of its {prefix} prefix rows and {shape} grid"
            return exact_rows(torch.float64, "cpu")[0].numpy()

        return TableParameter(
            make,
            expected,
            lambda n: max(shape) - 1,
            dtype=saved.dtype,
            device=saved.device,
            description=label,
        )

    opts = "".join(f", {k}={v!r}" for k, v in options.items())
    label = f"grid({shape}, {dim}, preset={preset!r}{opts}), {prefix} zero prefix rows"
    exact = stand_in(exact_rows, label)
    if _problem(exact, saved.detach().reshape(-1, dim)) is not None:
        return left_alone(
            kind, f"a fixed table near the {preset} sinusoid but not it: left alone", ATTRIBUTE
        )

    def build(compat: str | None) -> nn.Module | str:
        if compat is None:
            return stand_in(exact_rows, label)
        first = exact_rows(torch.float32, saved.device).to(saved.dtype)
        if torch.equal(first, saved.detach()):  # the exact numbers, rounded to float32 first
            return stand_in(
                lambda dtype, device: exact_rows(torch.float32, device).to(dtype), label
            )
        for replay in REPLAYS:
            make = replay_rows({"temperature": options.get("temperature", 10000.0), **replay})
            if torch.equal(make(saved.dtype, saved.device), saved.detach()):
                said = ", ".join(f"{k}={v!r}" for k, v in replay.items())
                return stand_in(make, f"timm build_sincos2d_pos_embed({shape}, {dim}, {said})")
        return (
            "compat='original': its numbers are neither the exact ones nor timm's float32 "
            "build_sincos2d_pos_embed"
        )

    def probe(stand: Any) -> list[Tensor]:
        return [stand.table]

    return Found(
        kind,
        f"TableParameter({label})",
        build,
        numbers=lambda: [saved.detach()],
        probe=probe,
        note=f"max diff over its {shape[0]} x {shape[1]} grid",
        attribute=ATTRIBUTE,
    )


RECOGNISERS: tuple[Recogniser, ...] = (pos_embed,)
"""The timm recognisers (by form: asked after the index, in this order)."""
