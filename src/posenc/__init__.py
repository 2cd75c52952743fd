"""posenc: fixed sinusoidal positional encodings, every convention in use, exact.

    >>> import posenc
    >>> posenc.table(2048, 512).shape                       # the paper's, NumPy float32
    (2048, 512)
    >>> posenc.grid((14, 14), 768, preset="mae", cls_token=True).shape
    (197, 768)

Every value is the exact encoding (angles in float64) rounded once to the output dtype.
"""

from ._api import detr, encode, grid, preset, presets, table
from ._backends import get_num_threads, set_num_threads
from ._engine import set_table_cache
from ._positions import fairseq_positions
from ._presets import Preset, RotaryPreset
from ._rope import apply_rope, rope
from ._scaling import softmax_scale
from ._sharding import context_parallel_positions, tensor_parallel_channels
from ._spec import Encoding
from ._validate import PosencError

__version__ = "0.1.0"

__all__ = [
    "Encoding",
    "PosencError",
    "Preset",
    "RotaryPreset",
    "apply_rope",
    "context_parallel_positions",
    "detr",
    "encode",
    "fairseq_positions",
    "get_num_threads",
    "grid",
    "preset",
    "presets",
    "rope",
    "set_num_threads",
    "set_table_cache",
    "softmax_scale",
    "table",
    "tensor_parallel_channels",
]
