"""``posenc.rope``: the rotary tables of positions, exact, in any scaling rule.

The table is the plan of a :class:`~posenc.spec.rotary.Rotary` evaluated by the exact engine
and returned as two views of one ``[cos | sin]`` array. ``compat="transformers"`` leaves the
engine for transformers' own float32 arithmetic (:mod:`posenc.compat.transformers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

from posenc import evaluate
from posenc._types import ArrayLike, Floats, NumpyDType
from posenc.errors import PosencError, check_choice
from posenc.evaluate.libs import as_positions
from posenc.evaluate.positions import Positions
from posenc.spec.presets import ROTARY_PRESETS
from posenc.spec.rotary import Rotary, rotary

if TYPE_CHECKING:
    from posenc._types import Tensor, TorchDType


@overload
def rope(
    positions: Tensor,
    dim: int,
    *,
    base: float | None = ...,
    scaling: dict[str, Any] | Sequence[dict[str, Any] | None] | None = ...,
    layout: str | None = ...,
    dtype: Any = ...,
    seq_len: int | None = ...,
    sections: tuple[int, ...] | None = ...,
    interleave_sections: bool | None = ...,
    axes_dim: tuple[int, ...] | None = ...,
    axes_scale: tuple[float, ...] | None = ...,
    axes_base: tuple[float, ...] | None = ...,
    blocks: int | None = ...,
    compat: str | None = ...,
    preset: str | None = ...,
) -> tuple[Tensor, Tensor]: ...


@overload
def rope(
    positions: Any,
    dim: int,
    *,
    base: float | None = ...,
    scaling: dict[str, Any] | Sequence[dict[str, Any] | None] | None = ...,
    layout: str | None = ...,
    dtype: TorchDType,
    seq_len: int | None = ...,
    sections: tuple[int, ...] | None = ...,
    interleave_sections: bool | None = ...,
    axes_dim: tuple[int, ...] | None = ...,
    axes_scale: tuple[float, ...] | None = ...,
    axes_base: tuple[float, ...] | None = ...,
    blocks: int | None = ...,
    compat: str | None = ...,
    preset: str | None = ...,
) -> tuple[Tensor, Tensor]: ...


@overload
def rope(
    positions: ArrayLike,
    dim: int,
    *,
    base: float | None = ...,
    scaling: dict[str, Any] | Sequence[dict[str, Any] | None] | None = ...,
    layout: str | None = ...,
    dtype: NumpyDType = ...,
    seq_len: int | None = ...,
    sections: tuple[int, ...] | None = ...,
    interleave_sections: bool | None = ...,
    axes_dim: tuple[int, ...] | None = ...,
    axes_scale: tuple[float, ...] | None = ...,
    axes_base: tuple[float, ...] | None = ...,
    blocks: int | None = ...,
    compat: str | None = ...,
    preset: str | None = ...,
) -> tuple[Floats, Floats]: ...


@overload
def rope(
    positions: Any,
    dim: int,
    *,
    base: float | None = ...,
    scaling: dict[str, Any] | Sequence[dict[str, Any] | None] | None = ...,
    layout: str | None = ...,
    dtype: Any = ...,
    seq_len: int | None = ...,
    sections: tuple[int, ...] | None = ...,
    interleave_sections: bool | None = ...,
    axes_dim: tuple[int, ...] | None = ...,
    axes_scale: tuple[float, ...] | None = ...,
    axes_base: tuple[float, ...] | None = ...,
    blocks: int | None = ...,
    compat: str | None = ...,
    preset: str | None = ...,
) -> tuple[Any, Any]: ...


def rope(
    positions: Any,
    dim: int,
    *,
    base: float | None = None,
    scaling: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
    layout: str | None = None,
    dtype: Any = None,
    seq_len: int | None = None,
    sections: tuple[int, ...] | None = None,
    interleave_sections: bool | None = None,
    axes_dim: tuple[int, ...] | None = None,
    axes_scale: tuple[float, ...] | None = None,
    axes_base: tuple[float, ...] | None = None,
    blocks: int | None = None,
    compat: str | None = None,
    preset: str | None = None,
) -> tuple[Any, Any]:
    """The rotary tables ``cos, sin`` of positions: exact, in any scaling rule.

    Args:
        positions: integer or real positions of any shape ``[*s]``, as a list, NumPy array,
            torch tensor or JAX array. With ``sections`` a leading axis of one row per section
            (Qwen2-VL's ``[3, batch, seq]``: temporal, height, width); with ``axes_dim`` a
            trailing axis of one coordinate per block (FLUX's ``[N, 3]``).
        dim: the rotary width ``d`` (after any partial-rotary factor): even.
        base: ``rope_theta`` (10000).
        scaling: a transformers rope-parameters dict: ``rope_type`` ``"default"``,
            ``"linear"``, ``"dynamic"``, ``"yarn"``, ``"longrope"``, ``"llama3"`` or
            ``"proportional"`` with that type's keys. Its attention factor multiplies cos and
            sin (before the one rounding). With ``axes_dim``, one rule per block too (a
            tuple, None for a block left as it is), and the rules of image and video models
            past their trained size (``"riflex"``, ``"ntk"``, ``"ntk-aware"``: see
            :func:`posenc.rope_grid`).
        layout: ``"halves"`` (the default; ``cos[..., i] == cos[..., i + d/2]``: GPT-NeoX, HF
            ``rotate_half``), ``"interleaved"`` (``cos[..., 2i] == cos[..., 2i+1]``: GPT-J,
            Meta Llama, FLUX), ``"compact"`` (``d / 2`` columns: flash-attn, vLLM) or
            ``"block-halves"`` (halves inside each of ``blocks`` equal blocks: Allegro's axes,
            LTX-2's heads).
        dtype: output dtype (default float32, or torch's default dtype).
        seq_len: the sequence length the ``dynamic`` and ``longrope`` rules read (default:
            the largest position + 1, transformers' rule). ``dynamic`` is stateless: the
            answer of a freshly built transformers module.
        sections: multimodal RoPE (Qwen2-VL ``mrope_section``): frequencies per position axis,
            adding up to ``d / 2``; the result is already merged, as transformers returns it.
        interleave_sections: with ``sections``, assign the frequencies round robin
            (Qwen3-VL's interleaved mrope) instead of in chunks.
        axes_dim: axial RoPE (FLUX ``(16, 56, 56)``): one block per position axis, each with
            its own frequencies, laid out over the whole width (interleaved pairs inside their
            block; halves hold every block in both halves); the widths add up to ``dim``.
            :func:`posenc.rope_grid` gives them for whole image and video grids.
        axes_scale: with ``axes_dim``, a factor on each block's frequencies.
        axes_base: with ``axes_dim``, each block's own base in place of ``base``.
        blocks: with ``layout="block-halves"``, how many equal blocks (default: the preset's,
            else 1, plain halves).
        compat: ``"transformers"``: transformers' own float32 arithmetic of 1-D and
            multimodal-section RoPE, bit for bit on CPU torch (so a model switches to posenc
            without changing one logit); the only mode here. diffusers' and timm's tables
            (``"diffusers"``, ``"timm"``) are :func:`posenc.rope_grid`'s ``compat=`` for grid
            families, and :func:`posenc.torch.patch` (``compat="original"``) for positions no
            grid holds. Default: exact (float64 angles, one rounding to ``dtype``).
        preset: a model family's keywords (``posenc.presets("rotary")``: ``llama``,
            ``llama3``, ``neox``, ``gptj``, ``qwen2-vl``, ``flux``, ``deepseek-v3``, …); the
            keywords given beside it replace the preset's.

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
    r = rotary(
        dim,
        preset=preset,
        base=base,
        scaling=scaling,
        layout=layout,
        sections=sections,
        interleave_sections=interleave_sections,
        axes_dim=axes_dim,
        axes_scale=axes_scale,
        axes_base=axes_base,
        blocks=blocks,
    )
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
