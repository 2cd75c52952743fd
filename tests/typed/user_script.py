"""A user's script, type-checked by mypy --strict in CI (``mypy`` reads pyproject.toml) and run
by the tests: the public API's return types follow the input's library."""

from __future__ import annotations

from typing import Any, assert_type

import numpy as np
import torch
from numpy.typing import NDArray

import posenc
from posenc.torch import GridEncoding, PositionalEncoding, RotaryEmbedding

Floats = NDArray[np.floating[Any]]


def numpy_in_numpy_out() -> None:
    assert_type(posenc.table(128, 64), Floats)
    assert_type(posenc.table(128, 64, preset="whisper", dtype=np.float64), Floats)
    assert_type(posenc.encode(np.arange(10), 64), Floats)
    assert_type(posenc.encode([0.5, 2.0], 64, preset="timestep"), Floats)
    assert_type(posenc.grid((14, 14), 768, preset="mae", cls_token=True), Floats)
    cos, sin = posenc.rope(np.arange(16), 128)
    assert_type(cos, Floats)
    assert_type(posenc.apply_rope(np.ones((16, 128)), cos, sin), Floats)
    assert_type(posenc.detr(np.zeros((1, 4, 4), dtype=bool)), Floats)
    assert_type(posenc.context_parallel_positions(64, 0, 2), NDArray[np.int64])
    assert_type(posenc.tensor_parallel_channels(1024, 1, 4), slice)


def torch_in_torch_out(x: torch.Tensor) -> None:
    assert_type(posenc.table(128, 64, dtype=torch.bfloat16), torch.Tensor)
    assert_type(posenc.table(128, 64, device="cpu"), torch.Tensor)
    assert_type(posenc.table(128, 64, like=x), torch.Tensor)
    assert_type(posenc.encode(torch.arange(10), 64), torch.Tensor)
    assert_type(posenc.encode(np.arange(10), 64, dtype=torch.float32), torch.Tensor)
    assert_type(posenc.grid(4, 32, dtype=torch.float32), torch.Tensor)
    cos, sin = posenc.rope(torch.arange(16)[None], 128, preset="llama3")
    assert_type(cos, torch.Tensor)
    q = torch.randn(1, 2, 16, 128)
    assert_type(posenc.apply_rope(q, cos[:, None], sin[:, None]), torch.Tensor)
    assert_type(posenc.detr(torch.zeros(1, 4, 4, dtype=torch.bool)), torch.Tensor)
    cu = torch.tensor([0, 8, 16])
    assert_type(posenc.context_parallel_positions(None, 0, 2, cu_seqlens=cu), torch.Tensor)


def modules(x: torch.Tensor) -> torch.Tensor:
    pe = PositionalEncoding(64, batch_first=True)
    y = assert_type(pe(x), torch.Tensor)
    grid = GridEncoding(64, preset="mae")
    z = assert_type(grid(torch.zeros(1, 16, 64), (4, 4)), torch.Tensor)
    rope = RotaryEmbedding(128, preset="llama")
    q, k = rope(torch.randn(1, 2, 8, 128), torch.randn(1, 2, 8, 128))
    assert_type(k, torch.Tensor)
    assert_type(rope(q), tuple[torch.Tensor, None])
    return y + z.mean() + k.mean()


def options_declared_once(x: torch.Tensor) -> None:
    """Keywords gathered in a RotaryOptions or GridOptions keep the return type precise."""
    options: posenc.RotaryOptions = {"base": 5e5, "scaling": {"rope_type": "linear", "factor": 2}}
    assert_type(posenc.rope(np.arange(16), 128, **options)[0], Floats)
    assert_type(posenc.rope(x, 128, **options)[0], torch.Tensor)
    grid: posenc.GridOptions = {"base": 256.0, "axes_dim": (16, 56, 56), "layout": "interleaved"}
    assert_type(posenc.rope_grid((3, 4, 5), 128, **grid)[0], Floats)
    assert_type(posenc.rope_grid((3, 4, 5), 128, dtype=torch.float32, **grid)[0], torch.Tensor)


def custom_preset() -> None:
    enc = posenc.Encoding(layout="halves", base=500.0, shift=1.0, widths="floor")
    mine = posenc.Preset("mine", "my lab", "halves, base 500", enc)
    assert_type(posenc.table(16, 32, preset=mine), Floats)
    p = posenc.preset("whisper")
    assert isinstance(p, posenc.Preset)
    assert p.encoding.layout == "halves"


def main() -> None:
    numpy_in_numpy_out()
    torch_in_torch_out(torch.zeros(1))
    assert modules(torch.zeros(2, 10, 64)).shape == (2, 10, 64)
    options_declared_once(torch.arange(16))
    custom_preset()


if __name__ == "__main__":
    main()
