"""posenc: fixed sinusoidal positional encodings, every convention in use, exact.

    >>> import posenc
    >>> posenc.table(2048, 512).shape                       # the paper's, NumPy float32
    (2048, 512)
    >>> posenc.grid((14, 14), 768, preset="mae", cls_token=True).shape
    (197, 768)

Every value is the exact encoding (angles in float64) rounded once to the output dtype.
"""

from posenc.api.apply import apply_rope
from posenc.api.detr import detr
from posenc.api.options import GridOptions, RotaryOptions
from posenc.api.positions import fairseq_positions
from posenc.api.presets import preset, presets
from posenc.api.rope import rope
from posenc.api.rope_grid import rope_grid
from posenc.api.sharding import context_parallel_positions, tensor_parallel_channels
from posenc.api.sinusoidal import encode, grid, table
from posenc.errors import PosencError
from posenc.evaluate import float32_only
from posenc.evaluate.integers import set_table_cache
from posenc.evaluate.libs.numpy import get_num_threads, set_num_threads
from posenc.spec.attention import softmax_scale
from posenc.spec.encoding import Encoding
from posenc.spec.presets import Preset, RotaryPreset

__version__ = "0.2.0"

__all__ = [
    "Encoding",
    "GridOptions",
    "PosencError",
    "Preset",
    "RotaryOptions",
    "RotaryPreset",
    "apply_rope",
    "context_parallel_positions",
    "detr",
    "encode",
    "fairseq_positions",
    "float32_only",
    "get_num_threads",
    "grid",
    "preset",
    "presets",
    "rope",
    "rope_grid",
    "set_num_threads",
    "set_table_cache",
    "softmax_scale",
    "table",
    "tensor_parallel_channels",
]
