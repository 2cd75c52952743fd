"""``posenc.rope``: the rotary tables of positions, exact, in any scaling rule.

The table is the plan of a :class:`~posenc.spec.rotary.Rotary` evaluated by the exact engine
and returned as two views of one ``[cos | sin]`` array. ``compat="transformers"`` leaves the
engine for transformers' own float32 arithmetic (:mod:`posenc.compat.transformers`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

from posenc import evaluate
from posenc._types import ArrayLike, Floats, NumpyDType
from posenc.api.options import RotaryOptions, checked
from posenc.errors import PosencError, check_choice
from posenc.evaluate.libs import as_positions
from posenc.evaluate.positions import Positions
from posenc.spec.presets import ROTARY_PRESETS
from posenc.spec.rotary import Rotary, rotary

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11

    from posenc._types import Tensor, TorchDType


@overload
def rope(
    positions: Tensor,
    dim: int,
    *,
    preset: str | None = ...,
    dtype: Any = ...,
    seq_len: int | None = ...,
    compat: str | None = ...,
    **options: Unpack[RotaryOptions],
) -> tuple[Tensor, Tensor]: ...


@overload
def rope(
    positions: Any,
    dim: int,
    *,
    preset: str | None = ...,
    dtype: TorchDType,
    seq_len: int | None = ...,
    compat: str | None = ...,
    **options: Unpack[RotaryOptions],
) -> tuple[Tensor, Tensor]: ...


@overload
def rope(
    positions: ArrayLike,
    dim: int,
    *,
    preset: str | None = ...,
    dtype: NumpyDType = ...,
    seq_len: int | None = ...,
    compat: str | None = ...,
    **options: Unpack[RotaryOptions],
) -> tuple[Floats, Floats]: ...


@overload
def rope(
    positions: Any,
    dim: int,
    *,
    preset: str | None = ...,
    dtype: Any = ...,
    seq_len: int | None = ...,
    compat: str | None = ...,
    **options: Unpack[RotaryOptions],
) -> tuple[Any, Any]: ...


def rope(
    positions: Any,
    dim: int,
    *,
    preset: str | None = None,
    dtype: Any = None,
    seq_len: int | None = None,
    compat: str | None = None,
    **options: Unpack[RotaryOptions],
) -> tuple[Any, Any]:
    """The rotary tables ``cos, sin`` of positions: exact, in any scaling rule.

    Args:
        positions: integer or real positions of any shape ``[*s]``, as a list, NumPy array,
            torch tensor or JAX array. With ``sections`` a leading axis of one row per section
            (Qwen2-VL's ``[3, batch, seq]``: temporal, height, width); with ``axes_dim`` a
            trailing axis of one coordinate per block (FLUX's ``[N, 3]``).
        dim: the rotary width ``d`` (after any partial-rotary factor): even.
        preset: a model family's keywords (``posenc.presets("rotary")``: ``llama``,
            ``llama3``, ``neox``, ``gptj``, ``qwen2-vl``, ``flux``, ``deepseek-v3``, …); the
            keywords given beside it replace the preset's.
        dtype: output dtype (default float32, or torch's default dtype).
        seq_len: the sequence length the ``dynamic`` and ``longrope`` rules read (default:
            the largest position + 1, transformers' rule). ``dynamic`` is stateless: the
            answer of a freshly built transformers module.
        compat: ``"transformers"``: transformers' own float32 arithmetic of 1-D and
            multimodal-section RoPE, bit for bit on CPU torch (so a model switches to posenc
            without changing one logit); the only mode here. diffusers' and timm's tables
            (``"diffusers"``, ``"timm"``) are :func:`posenc.rope_grid`'s ``compat=`` for grid
            families, and :func:`posenc.torch.patch` (``compat="original"``) for positions no
            grid holds. Default: exact (float64 angles, one rounding to ``dtype``).
        **options: the table's keywords (:class:`posenc.RotaryOptions`): ``base``
            (``rope_theta``, 10000), ``scaling`` (a transformers rope-parameters dict:
            ``"linear"``, ``"dynamic"``, ``"yarn"``, ``"longrope"``, ``"llama3"``,
            ``"proportional"``; with ``axes_dim`` one rule per block, the image and video
            rules of :func:`posenc.rope_grid` included), ``layout`` (``"halves"``,
            ``"interleaved"``, ``"compact"``, ``"block-halves"``), ``sections`` and
            ``interleave_sections`` (multimodal RoPE), ``axes_dim`` (axial RoPE: one block
            per position axis, FLUX's ``(16, 56, 56)``; :func:`posenc.rope_grid` gives whole
            grids), ``axes_scale``, ``axes_base``, ``blocks``.

    Returns:
        ``(cos, sin)``, each ``[*s, d]`` (``[*s, d/2]`` compact), in the library and on the
        device of ``positions``. Exact: both views of one ``[*s, 2 d]`` array.

    Examples:
        >>> cos, sin = posenc.rope(np.arange(4096), 128, base=500000.0,
        ...     scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        ...              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
        >>> cos.shape, cos.dtype
        ((4096, 128), dtype('float32'))
    """
    given = checked("rope", options, RotaryOptions, ("preset", "dtype", "seq_len", "compat"))
    r = rotary(dim, preset=preset, **given)
    compat = None if compat is None else _check_compat(compat, preset)
    if compat is not None and any(rule.float32 is None for rule in r.rules):
        kinds = ", ".join(repr(s.rope_type) for s in r.scalings if s.rule.float32 is None)
        raise PosencError(
            f"`compat='transformers'` repeats transformers' arithmetic, which has no rule "
            f"{kinds} (a rule of image and video models): drop `compat` for its exact tables"
        )
    pos = as_positions(positions)
    pos = evaluate.rotary_axes_last(r, pos)
    length = evaluate.rotary_seq_len(r, pos, seq_len)
    if compat is not None:
        return _compat(r, pos, length, dtype)
    plan = r.plan(length, rope_label(r))
    both = evaluate.points(plan, pos, coords=r.ndim > 1, dtype=dtype, padding_idx=None)
    w = r.width
    return both[..., :w], both[..., w:]


def rope_label(rotary: Rotary) -> str:
    """How errors name a rotary table of the functions."""
    kind = "/".join(dict.fromkeys(s.rope_type for s in rotary.scalings))
    return f"'rope' ({kind}, dim={rotary.dim}, base={rotary.base:g})"


def _check_compat(compat: Any, preset: str | None) -> str:
    """``compat``, which must be ``"transformers"``; a grid family's mode (``"diffusers"``,
    ``"timm"``, …: the presets' ``originals``) is refused with where its tables are."""
    grid_modes = {m for p in ROTARY_PRESETS.values() for m in p.originals} - {"transformers"}
    if isinstance(compat, str) and compat in grid_modes:
        family = repr(preset) if isinstance(preset, str) else "..."
        raise PosencError(
            f"`compat` of posenc.rope must be 'transformers' (transformers' float32 arithmetic "
            f"of 1-D and multimodal RoPE), got {compat!r}: posenc.rope does not replay "
            f"diffusers' or timm's tables. A grid family's are "
            f"posenc.rope_grid(shape, dim, preset={family}, compat={compat!r}) "
            f"(posenc.preset(name).originals lists its modes); positions no grid holds (ids: "
            f"Qwen-Image's text rows, CogView4's canvas rows, frame ids) are replayed by "
            f"posenc.torch.patch(model, compat='original')"
        )
    return check_choice("compat", compat, ("transformers",))


def _compat(rotary: Rotary, pos: Positions, length: int | None, dtype: Any) -> tuple[Any, Any]:
    """``compat="transformers"``: transformers' float32 arithmetic (which needs torch)."""
    try:
        from posenc.compat import transformers
    except ImportError:
        raise PosencError(
            "`compat='transformers'` computes with torch: pip install 'posenc[torch]'"
        ) from None
    return transformers.rope(rotary, pos, length, dtype)
