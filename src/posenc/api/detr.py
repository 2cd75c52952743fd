"""``posenc.detr``: DETR's sine position embedding of a padding mask."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from posenc import evaluate
from posenc._types import Floats, NumpyDType
from posenc.spec.layout import channel_plan
from posenc.spec.presets.sinusoidal import DETR

if TYPE_CHECKING:
    from posenc._types import Tensor


@overload
def detr(
    mask: Tensor,
    dim: int = ...,
    *,
    temperature: float = ...,
    normalize: bool = ...,
    scale: float | None = ...,
    dtype: Any = ...,
) -> Tensor: ...


@overload
def detr(
    mask: np.ndarray | Sequence[Any],
    dim: int = ...,
    *,
    temperature: float = ...,
    normalize: bool = ...,
    scale: float | None = ...,
    dtype: NumpyDType = ...,
) -> Floats: ...


@overload
def detr(
    mask: Any,
    dim: int = ...,
    *,
    temperature: float = ...,
    normalize: bool = ...,
    scale: float | None = ...,
    dtype: Any = ...,
) -> Any: ...


def detr(
    mask: Any,
    dim: int = 256,
    *,
    temperature: float = 10000.0,
    normalize: bool = False,
    scale: float | None = None,
    dtype: Any = None,
) -> Any:
    """DETR's ``PositionEmbeddingSine`` from a padding mask, reproduced exactly.

    Args:
        mask: ``[B, H, W]`` booleans, True where the image is padding (DETR's convention).
        dim: output channels, ``2 * num_pos_feats`` (DETR: 256); a multiple of 4.
        temperature: largest timescale.
        normalize: divide the 1-based coordinates by the last one (+1e-6), times ``scale``.
        scale: with ``normalize`` (default ``2*pi``).
        dtype: output dtype (default float32, or torch's default for a torch mask).

    Returns:
        ``[B, dim, H, W]``: channels ``[y block | x block]``, each interleaved sin/cos pairs
        at frequencies ``temperature ** (-2m / num_pos_feats)``.

    Examples:
        >>> mask = np.zeros((2, 20, 30), dtype=bool)
        >>> mask[1, :, 24:] = True                    # image 1 is padded on the right
        >>> posenc.detr(mask, 256, normalize=True).shape
        (2, 256, 20, 30)
    """
    opts: dict[str, Any] = {"temperature": temperature, "normalize": normalize}
    if scale is not None:
        opts["scale"] = scale
    encoding = DETR.resolve(opts, grid=True)
    plan = channel_plan(encoding, dim, 2, DETR.label(opts), None)
    return evaluate.detr(plan, encoding, mask, dtype=dtype)
