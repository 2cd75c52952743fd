"""The originals' own rotation arithmetic (``posenc.apply_rope(..., compat=…)``), kept apart
from posenc's kernel (:mod:`posenc.evaluate.libs.torch_rotation`, which rounds once: a
product and a fused multiply-add per channel).

- ``"diffusers"``: ``apply_rotary_emb(x, (cos, sin), use_real=True)``:
  ``(x.float() * cos + x_rotated.float() * sin).to(x.dtype)``, the rotated copy built as
  pairs (``use_real_unbind_dim=-1``: interleaved layout) or halves (``-2``).
- ``"ltx2"``: LTX-2's ``apply_split_rotary_emb`` (halves): the float32 products
  ``x * cos``, then ``addcmul_`` adds ``-/+ x_partner * sin`` (fused, one rounding, where the
  CPU has FMA), then ``x``'s dtype.
- ``"transformers"``: ``apply_rotary_pos_emb``: ``x * cos + rotate_half(x) * sin`` in
  ``x``'s dtype, with the tables in it (as the rotary modules return them); interleaved
  pairs as ``rotate_half``'s pairwise form.

Bit for bit with the originals on CPU torch (checked against them in the tests).
"""

from __future__ import annotations

import torch

MODES = ("diffusers", "transformers", "ltx2")


def _rotated(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The partner of each channel, negated where the rotation needs it: ``(-x_2i+1, x_2i)``
    pairs (interleaved) or ``[-x_hi | x_lo]`` (halves)."""
    if layout == "interleaved":
        real, imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
        return torch.stack([-imag, real], dim=-1).flatten(-2)
    real, imag = x.reshape(*x.shape[:-1], 2, -1).unbind(-2)
    return torch.cat([-imag, real], dim=-1)


def _split(part: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, w: int) -> torch.Tensor:
    """``apply_split_rotary_emb``'s arithmetic on halves: ``[..., 2, w / 2]`` float32, times
    ``cos``, then each half ``addcmul_`` its partner times ``-sin`` / ``sin``."""
    r = w // 2

    def halves(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(*t.shape[:-1], 2, r)

    x = halves(part).float()
    c, s = halves(cos), halves(sin)
    out = x * c
    out[..., 0, :].addcmul_(-s[..., 0, :], x[..., 1, :])
    out[..., 1, :].addcmul_(s[..., 1, :], x[..., 0, :])
    return out.reshape(*out.shape[:-2], w)


def apply(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, w: int, layout: str, mode: str
) -> torch.Tensor:
    """The first ``w`` channels of ``x`` rotated as ``mode``'s original does (``cos`` and
    ``sin`` full-width tables, interleaved or halves); the rest pass through."""
    part = x[..., :w]
    if mode == "ltx2":
        out = _split(part, cos.to(x.device), sin.to(x.device), w).to(x.dtype)
    elif mode == "diffusers":
        cos, sin = cos.to(x.device), sin.to(x.device)
        out = (part.float() * cos + _rotated(part, layout).float() * sin).to(x.dtype)
    else:
        cos, sin = cos.to(device=x.device, dtype=x.dtype), sin.to(device=x.device, dtype=x.dtype)
        out = (part * cos) + (_rotated(part, layout) * sin)
    return out if w == x.shape[-1] else torch.cat([out, x[..., w:]], dim=-1)
