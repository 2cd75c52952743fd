"""The originals' own float32 arithmetic for the sinusoidal presets, kept apart from the exact
engine (``compat="original"`` of :func:`posenc.table` and :func:`posenc.encode`).

A checkpoint trained with an original's float32 table saw that table's rounding errors
(OpenAI Whisper's ``sinusoids`` differ from the exact table by up to 9.6e-5 at its 1500
positions). Porting it may call for those numbers, not the exact ones. Each entry repeats its
original's torch operations in their order, in float32, for any positions (the originals
build ``arange(length)``; the same operations on other positions give what the original's
table holds at those rows): bit for bit on CPU torch, checked against the upstream code in
the tests. The results are not exact: :func:`posenc.table` without ``compat`` is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from posenc.errors import PosencError
from posenc.evaluate.libs.torch import compat_dtype, compat_in, compat_out
from posenc.evaluate.positions import Positions
from posenc.spec.encoding import Encoding
from posenc.spec.presets import PRESETS, Preset


def whisper(pos: Any, dim: int, enc: Encoding) -> Any:
    """OpenAI whisper ``model.sinusoids`` (and transformers' copy for Whisper)."""
    if dim % 2:
        raise PosencError(f"`dim` must be even for whisper's sinusoids, got {dim}")
    increment = math.log(enc.base) / (dim // 2 - 1)
    inv_timescales = torch.exp(-increment * torch.arange(dim // 2, device=pos.device))
    scaled = pos.view(-1, 1) * inv_timescales.view(1, -1)
    return torch.cat([scaled.sin(), scaled.cos()], dim=1)


def fairseq(pos: Any, dim: int, enc: Encoding) -> Any:
    """fairseq ``SinusoidalPositionalEmbedding.get_embedding`` (and transformers' ports)."""
    half = dim // 2
    step = math.log(10000) / (half - 1)
    freq = torch.exp(torch.arange(half, dtype=torch.float, device=pos.device) * -step)
    emb = pos.float().unsqueeze(1) * freq.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(len(pos), -1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros(len(pos), 1, device=pos.device)], dim=1)
    if enc.padding_idx is not None:
        emb[pos == enc.padding_idx, :] = 0
    return emb


def tutorial(pos: Any, dim: int, enc: Encoding) -> Any:
    """The PyTorch tutorial's ``PositionalEncoding`` (and labml's ``get_positional_encoding``,
    whose float32 aranges hold the same values)."""
    position = pos.unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2, device=pos.device) * (-math.log(enc.base) / dim))
    pe = torch.zeros(len(pos), dim, device=pos.device)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def timestep(pos: Any, dim: int, enc: Encoding) -> Any:
    """diffusers ``embeddings.get_timestep_embedding``."""
    half = dim // 2
    exponent = -math.log(enc.base) * torch.arange(0, half, dtype=torch.float32, device=pos.device)
    exponent = exponent / (half - enc.shift)
    emb = torch.exp(exponent)
    emb = pos[:, None].float() * emb[None, :]
    emb = enc.scale * emb
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    if enc.layout == "halves-cos-first":
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    if dim % 2:
        emb = torch.nn.functional.pad(emb, (0, 1, 0, 0))
    return emb


REPLAYS: dict[str, Callable[[Any, int, Encoding], Any]] = {
    f.__name__: f for f in (tutorial, whisper, fairseq, timestep)
}
"""The replays a sinusoidal preset's ``replay`` names, by name."""


def evaluate(preset: Preset, enc: Encoding, pos: Positions, dim: int, dtype: Any) -> Any:
    """``[n, dim]`` rows of flat positions ``pos``, as the original computes them (the
    preset's ``replay``, a function here), cast to ``dtype`` (default float32); NumPy
    positions give NumPy rows. tensor2tensor's original is TensorFlow, whose float32
    ``exp``/``sin`` are not torch's: no bit-for-bit claim can be tested here, so it has no
    replay."""
    if not preset.replay:
        replayed = ", ".join(p.name for p in PRESETS.values() if p.replay)
        raise PosencError(
            f"`compat='original'` applies to presets whose original computes in float32 "
            f"({replayed}), not {preset.name!r}: its exact table is the original's"
        )
    x, numpy_out = compat_in(pos.values)
    out_dtype = compat_dtype(dtype, torch.float32)
    out = REPLAYS[preset.replay](x.reshape(-1), dim, enc).to(out_dtype)
    (out,) = compat_out((out.reshape(*x.shape, dim),), numpy_out)
    return out


def arange(start: float, length: int, *, dtype: Any, device: Any, like: Any) -> Any:
    """The positions of a table, as the originals build them: ``torch.arange`` for torch
    output (a torch ``like``, ``dtype`` or ``device``), else ``np.arange``."""
    if isinstance(like, torch.Tensor) and device is None:
        device = like.device
    if device is not None or isinstance(dtype, torch.dtype):
        return torch.arange(start, start + length, device=device)
    return np.arange(start, start + length)
