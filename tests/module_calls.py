"""Every posenc.torch module with every kind of input it takes, on a given device: the cases
that the sync-free, compile and CUDA-graph tests run (issue 13, item 4).

``calls(device)`` yields ``(name, module, args, kwargs)``; the inputs are on ``device``.
``call(name, device)`` is one of them, and ``NAMES`` their names, to parametrize tests by.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from posenc.torch import (
    DetrSineEncoding,
    GridEncoding,
    PositionalEncoding,
    RotaryEmbedding,
    SinusoidalEmbedding,
    Timesteps,
)

Call = tuple[str, torch.nn.Module, tuple[Any, ...], dict[str, Any]]


def calls(device: Any) -> Iterator[Call]:
    def on(t: torch.Tensor) -> torch.Tensor:
        return t.to(device)

    pe = PositionalEncoding(32, cached_length=64, device=device)
    x = on(torch.randn(2, 8, 32))
    yield "PositionalEncoding", pe, (x,), {}
    yield "PositionalEncoding offset=int", pe, (x,), {"offset": 3}
    yield "PositionalEncoding offset=int past the cache", pe, (x,), {"offset": 100}
    yield "PositionalEncoding offset=[b]", pe, (x,), {"offset": on(torch.tensor([5, 90]))}
    ids = on(torch.tensor([[0, 1, 2, 3, 50, 60, 70, 80], [9, 8, 7, 6, 5, 4, 3, 2]]))
    yield "PositionalEncoding positions=[b, s]", pe, (x, ids), {}
    yield "PositionalEncoding real positions=[s]", pe, (x, on(torch.arange(8.0) * 2.5)), {}
    packed, cu = on(torch.randn(8, 32)), on(torch.tensor([0, 3, 8]))
    yield "PositionalEncoding cu_seqlens", pe, (packed,), {"cu_seqlens": cu}
    bf16 = PositionalEncoding(32, cached_length=64, device=device, dtype=torch.bfloat16)
    yield "PositionalEncoding bf16", bf16, (x.bfloat16(),), {"offset": 100}

    emb = SinusoidalEmbedding(32, cached_length=64, device=device)
    yield "SinusoidalEmbedding ids", emb, (ids,), {}
    fair = SinusoidalEmbedding(
        32, preset="fairseq", padding_idx=1, from_tokens=True, cached_length=64, device=device
    )
    tokens = on(torch.tensor([[5, 6, 7, 1], [8, 9, 1, 1]]))
    yield "SinusoidalEmbedding from_tokens", fair, (tokens,), {}
    yield "SinusoidalEmbedding from_tokens step", fair, (tokens,), {"step": 7}

    steps = Timesteps(32, device=device)
    yield "Timesteps int", steps, (on(torch.tensor([0, 250, 999])),), {}
    yield "Timesteps real", steps, (on(torch.tensor([0.5, 999.25])),), {}

    grid = GridEncoding(32, preset="mae", device=device)
    yield "GridEncoding", grid, (on(torch.randn(2, 12, 32)), (3, 4)), {}
    detr = DetrSineEncoding(16, normalize=True, device=device)
    mask = on(torch.tensor([[[False] * 5 + [True]] * 4] * 2))
    yield "DetrSineEncoding mask", detr, (mask,), {}
    yield "DetrSineEncoding pixel_mask", detr, (), {"pixel_mask": (~mask).long()}

    rope = RotaryEmbedding(16, cached_length=64, device=device)
    q, k = on(torch.randn(2, 4, 8, 16)), on(torch.randn(2, 2, 8, 16))
    yield "RotaryEmbedding", rope, (q, k), {}
    yield "RotaryEmbedding offset=int past the cache", rope, (q, k), {"offset": 1000}
    yield "RotaryEmbedding offset=[b]", rope, (q, k), {"offset": on(torch.tensor([5, 900]))}
    yield "RotaryEmbedding positions", rope, (q, k, ids), {}
    qp, kp = on(torch.randn(8, 4, 16)), on(torch.randn(8, 2, 16))
    yield "RotaryEmbedding cu_seqlens", rope, (qp, kp), {"cu_seqlens": cu}


def call(name: str, device: Any) -> Call:
    return next(c for c in calls(device) if c[0] == name)


NAMES = [name for name, *_ in calls("meta")]
