"""The keywords of a rotary table, declared once: :class:`GridOptions` (``posenc.rope_grid``,
``posenc.torch.AxialRotaryEmbedding``) and :class:`RotaryOptions` (``posenc.rope``,
``posenc.torch.RotaryEmbedding``: the grid's and multimodal sections). Each function takes
them as ``**options`` and hands them to :func:`posenc.spec.rotary.rotary` as they are; a
preset's own keywords are the defaults under them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from posenc.errors import suggest


class GridOptions(TypedDict, total=False):
    """The keywords of the rotary table of a grid (``posenc.rope_grid(shape, dim,
    **options)``, ``AxialRotaryEmbedding(dim, **options)``), each optional: a preset's own
    value (or the default) where not given.

    Keys:
        base: ``theta`` (10000).
        scaling: a rule: a transformers rope-parameters dict (``rope_type`` ``"linear"``,
            ``"yarn"``, ``"llama3"``, … with that type's keys; its attention factor
            multiplies cos and sin before the one rounding), or one rule per position axis, a
            tuple with None for one left as it is (``posenc.rope``: per block of ``axes_dim``;
            ``posenc.rope_grid`` and ``AxialRotaryEmbedding``: per grid axis, to the block
            that encodes it), including the rules of image and video models past their
            trained size (``"riflex"``, ``"ntk-aware"``, ``"dype"``, …: docs, *Beyond the
            trained size*).
        layout: ``"halves"`` (``cos[..., i] == cos[..., i + d/2]``: GPT-NeoX, HF
            ``rotate_half``; the default), ``"interleaved"`` (``cos[..., 2i] ==
            cos[..., 2i+1]``: GPT-J, Meta Llama, FLUX, Wan), ``"compact"`` (``d / 2``
            columns: flash-attn, vLLM) or ``"block-halves"`` (halves inside each of
            ``blocks`` equal blocks: Allegro's axes, LTX-2's heads).
        axes_dim: axial RoPE: one block per position axis (FLUX ``(16, 56, 56)``), each with
            its own frequencies ``base ** (-2j / d_a)``, the widths adding up to ``dim``.
        axes_scale: with ``axes_dim``, a factor on each block's frequencies.
        axes_base: with ``axes_dim``, each block's own base in place of ``base`` (Cosmos).
        blocks: with ``layout="block-halves"``, how many equal blocks (default: the preset's,
            else 1).

    Examples:
        >>> options: posenc.GridOptions = {"base": 256.0, "axes_dim": (16, 56, 56),
        ...                                "layout": "interleaved"}
        >>> cos, sin = posenc.rope_grid((3, 4, 5), 128, **options)
        >>> cos.shape
        (60, 128)
    """

    base: float | None
    scaling: Mapping[str, object] | Sequence[Mapping[str, object] | None] | None
    layout: str | None
    axes_dim: tuple[int, ...] | None
    axes_scale: tuple[float, ...] | None
    axes_base: tuple[float, ...] | None
    blocks: int | None


class RotaryOptions(GridOptions, total=False):
    """The keywords of a rotary table of positions (``posenc.rope(positions, dim,
    **options)``, ``RotaryEmbedding(dim, **options)``): :class:`GridOptions`' and multimodal
    RoPE's.

    Keys:
        sections: multimodal RoPE (Qwen2-VL's ``mrope_section``): frequencies per position
            axis, adding up to ``d / 2``; the result is merged, as transformers returns it.
        interleave_sections: with ``sections``, the frequencies assigned round robin
            (Qwen3-VL's interleaved mrope) instead of in chunks.

    Examples:
        >>> options: posenc.RotaryOptions = {"base": 1e6, "sections": (16, 24, 24)}
        >>> cos, sin = posenc.rope(np.zeros((3, 1, 10)), 128, **options)
        >>> cos.shape
        (1, 10, 128)
    """

    sections: tuple[int, ...] | None
    interleave_sections: bool | None


def checked(
    function: str, options: Mapping[str, Any], of: type, own: Sequence[str] = ()
) -> dict[str, Any]:
    """``options`` as a dict, each key one of ``of``'s (a :class:`GridOptions` or
    :class:`RotaryOptions`); another is the ``TypeError`` Python raises for a keyword a
    function does not take, naming ``function`` and the nearest of its keywords (``own``:
    those it declares itself)."""
    keys = set(getattr(of, "__required_keys__", ())) | set(getattr(of, "__optional_keys__", ()))
    for key in options:
        if key not in keys:
            raise TypeError(
                f"{function}() got an unexpected keyword argument {key!r}"
                f"{suggest(key, sorted(keys | set(own)))}"
            )
    return dict(options)
