"""PyTorch modules: drop-in sinusoidal encodings for transformers, ViTs, DETR and diffusion.

Every module holds a preset (an :class:`~posenc.Encoding` and a width) and calls the core,
which chooses the evaluation (:mod:`posenc.evaluate`): eager calls run the exact engine,
compiled ones (``torch.compile(fullgraph=True)``) the same float64 formula in torch ops, and
exported ones (``torch.export``, ONNX) and MPS a float32-only formula within 1e-6
(:mod:`posenc.evaluate.float32`); meta inputs give meta outputs. Angles are formed in float64
and the result is rounded once to the dtype of the activations (to odd first for 16-bit dtypes), so
``module.to(torch.bfloat16)``, ``.half()`` and autocast never degrade the encoding.

No table is saved, and the modules have no buffers (DDP and FSDP have nothing to broadcast). A
checkpoint that holds a table under a key the original modules used (``pe``, ``weights``,
``pos_embed``, ``positional_embedding``) is compared with the module's own encoding when it
loads: the same sinusoid loads quietly; anything else (a learned or fine-tuned table, another
convention, another width) is an error that says what the table is, and ``strict=False`` drops
it with a warning instead. :class:`PositionalEncoding`
and :class:`SinusoidalEmbedding` keep a table of the first ``cached_length`` positions, outside
the buffers, in the module's dtype and on its device: ``.to()``, ``.half()``, ``.float()``,
``.cuda()`` and ``to_empty()`` rebuild it, so it never holds stale numbers.

Shapes: ``b`` batch, ``s`` sequence, ``d`` channels, ``t`` packed tokens.
"""

from __future__ import annotations

from posenc.torch._positions import packed_positions
from posenc.torch.axial import AxialRotaryEmbedding
from posenc.torch.diffusion import Timesteps
from posenc.torch.patch import PatchReport, patch, unpatch
from posenc.torch.rotary import RotaryEmbedding
from posenc.torch.sequence import PositionalEncoding, SinusoidalEmbedding, encode
from posenc.torch.vision import DetrSineEncoding, GridEncoding

__all__ = [
    "AxialRotaryEmbedding",
    "DetrSineEncoding",
    "GridEncoding",
    "PatchReport",
    "PositionalEncoding",
    "RotaryEmbedding",
    "SinusoidalEmbedding",
    "Timesteps",
    "encode",
    "packed_positions",
    "patch",
    "unpatch",
]
