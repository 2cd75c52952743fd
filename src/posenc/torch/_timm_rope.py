"""The stand-in for timm's rotary modules that :func:`posenc.torch.patch` puts in place
(:class:`TimmRotaryEmbedding`, configured by a :class:`TimmRope`; the recognisers are in
``_patch_timm_rope.py``): called as the original is (``get_embed``, ``get_batch_embeds``,
``update_feat_shape``, ``forward``), with the same output form, exact by default or timm's own
float32 tables (``posenc.rope_grid(..., compat="timm")``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from posenc.api.rope_grid import rope_grid
from posenc.errors import PosencError
from posenc.evaluate.positions import grid_shape
from posenc.spec.families.dinov3 import DINOV3
from posenc.spec.families.eva import EVA02, PERCEPTION_ENCODER, VIT_ROPE
from posenc.spec.rotary import rotary
from posenc.torch._base import _Tracked

CAT, PERIODS = "cat", "periods"


@dataclasses.dataclass(frozen=True)
class TimmRope:
    """The configuration of one timm rotary module, as its attributes give it.

    Attributes:
        kind: ``"cat"`` (``RotaryEmbeddingCat`` / ``RotaryEmbedding``) or ``"dinov3"``.
        form: ``"cat"`` (``get_embed`` is ``cat(sin, cos)``) or ``"pair"`` (``(sin, cos)``).
        dim: timm's ``dim`` (the head width; the tables are ``[N, dim]``).
        temperature, grid_offset, grid_indexing, rotate_half: timm's.
        ref_feat_shape: ``RotaryEmbeddingCat``'s (positions rescaled to it), or None.
        normalize_coords: ``RotaryEmbeddingDinoV3``'s denominator (``separate``, ``max``,
            ``min``).
        bands: ``"lang"`` (``in_pixels=False``), or the pixel bands of ``in_pixels=True``:
            ``"pixel"`` (log-spaced) or ``"pixel-linear"``, over the ``'pixel'`` grid.
        max_res: the pixel bands' maximum resolution.
    """

    kind: str
    form: str
    dim: int
    temperature: float
    grid_offset: float
    grid_indexing: str
    rotate_half: bool
    ref_feat_shape: tuple[int, ...] | None = None
    normalize_coords: str = "separate"
    bands: str = "lang"
    max_res: float = 224.0

    @property
    def preset(self) -> str:
        """The :func:`posenc.rope_grid` preset of these tables."""
        if self.bands != "lang":
            return "timm-" + self.bands
        if self.kind == PERIODS:
            return DINOV3.name
        if self.ref_feat_shape is None:
            return VIT_ROPE.name
        return PERCEPTION_ENCODER.name if self.grid_indexing == "xy" else EVA02.name

    def grid_options(self, shape: Sequence[int]) -> dict[str, Any]:
        """The :func:`posenc.rope_grid` keywords of the tables for the grid ``shape``: per grid
        axis ``start + i * step``, the block of the first axis first (``'ij'``) or second."""
        h, w = shape
        base = self.temperature
        steps: tuple[float, ...]
        starts: tuple[float, ...]
        if self.bands != "lang":  # linspace(-1, 1, n)
            base = self.max_res
            steps = tuple(2.0 / (n - 1) if n > 1 else 2.0 for n in (h, w))
            starts = (-1.0, -1.0)
        elif self.kind == PERIODS:
            dims = {"separate": (h, w), "max": (max(h, w),) * 2, "min": (min(h, w),) * 2}
            denoms = dims[self.normalize_coords]
            # ((i + 0.5 + offset) / d) * 2 - 1: a middle patch at exactly 0 (an empty axis
            # has no positions: any step)
            steps = tuple(2.0 / d if d else 1.0 for d in denoms)
            starts = tuple(
                (0.5 + self.grid_offset - d / 2) * s for d, s in zip(denoms, steps, strict=True)
            )
        elif self.ref_feat_shape is None:
            steps, starts = (1.0, 1.0), (self.grid_offset,) * 2
        else:
            steps = tuple(
                r / n if n else 1.0 for r, n in zip(self.ref_feat_shape, (h, w), strict=True)
            )
            starts = tuple(self.grid_offset * s for s in steps)
        return {
            "preset": self.preset,
            "base": base,
            "layout": "halves" if self.rotate_half else "interleaved",
            "block_axes": (0, 1) if self.grid_indexing == "ij" else (1, 0),
            "start": starts,
            "step": steps,
        }

    def label(self) -> str:
        """These tables in words, for the report."""
        words = [f"{self.dim}", f"preset={self.preset!r}"]
        if self.bands != "lang":
            words.append(f"max_res={self.max_res:g}")
        else:
            words.append(f"base={self.temperature:g}")
        if self.grid_offset:
            words.append(f"grid_offset={self.grid_offset:g}")
        if self.ref_feat_shape is not None:
            words.append(f"ref_feat_shape={self.ref_feat_shape}")
        if self.kind == PERIODS and self.normalize_coords != "separate":
            words.append(f"normalize_coords={self.normalize_coords!r}")
        words += [f"grid_indexing={self.grid_indexing!r}", f"rotate_half={self.rotate_half}"]
        return ", ".join(words)


def _rotated(x: Tensor, sin: Tensor, cos: Tensor, half: bool) -> Tensor:
    """``x`` rotated by the tables, as timm's ``apply_rot_embed``: the pairs ``(i, i + D/2)``
    (``half``) or ``(2i, 2i + 1)``, in the promoted dtype, cast back to ``x``'s."""
    if half:
        first, second = x.chunk(2, dim=-1)
        turned = torch.cat([-second, first], dim=-1)
    else:
        turned = torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).reshape(x.shape)
    return (x * cos + turned * sin).to(dtype=x.dtype)


def _padded(tables: list[Tensor], seq_len: int) -> Tensor:
    """Tables ``[N_b, D]`` zero-padded to ``seq_len`` rows and stacked (timm's
    ``_pad_rope_embeds``)."""
    out = tables[0].new_zeros((len(tables), *tables[0].shape[:-2], seq_len, tables[0].shape[-1]))
    for b, table in enumerate(tables):
        if table.shape[-2] > seq_len:
            raise PosencError("`seq_len` must be at least the number of positions of each grid")
        out[b, ..., : table.shape[-2], :] = table
    return out


class TimmRotaryEmbedding(_Tracked):
    """The stand-in for a timm rotary module (``RotaryEmbeddingCat``, ``RotaryEmbedding``,
    ``RotaryEmbeddingDinoV3``): called as the original is, its tables in the same form.

    ``get_embed(shape=None, dtype=None)`` gives ``cat(sin, cos)`` ``[H * W, 2 * dim]`` (the pair
    ``(sin, cos)`` for ``RotaryEmbedding``). With a ``feat_shape`` the table of that grid is
    kept, in the module's dtype (``.to()`` moves it as timm's buffer); ``RotaryEmbeddingCat``
    then ignores ``shape``, DINOv3's computes any ``shape`` given. Without one each call
    computes the table of ``shape``: float32 (DINOv3: its periods' dtype, at least float32)
    unless ``dtype`` is given. Nothing is saved in the state dict (timm's buffers are
    non-persistent).

    Exact (default): the float64 tables rounded once to the dtype they are returned in.
    ``compat=True``: timm's float32 tables (``posenc.rope_grid(..., compat="timm")``), the kept
    one computed on the CPU as timm's is at init and cast by ``.to()`` as timm's buffer is.
    """

    def __init__(
        self,
        rope: TimmRope,
        feat_shape: Sequence[int] | None,
        *,
        compat: bool = False,
        dtype: torch.dtype = torch.float32,
        device: Any = None,
    ) -> None:
        super().__init__(device=device, dtype=dtype)
        given = rope.grid_options((1, 1))  # a width or base the family has not: refused now
        rotary(rope.dim, preset=given["preset"], base=given["base"], layout=given["layout"])
        self.rope, self.compat = rope, compat
        self.dim, self.temperature, self.rotate_half = rope.dim, rope.temperature, rope.rotate_half
        self.grid_offset, self.grid_indexing = rope.grid_offset, rope.grid_indexing
        self.ref_feat_shape = rope.ref_feat_shape
        self.normalize_coords = rope.normalize_coords
        self.in_pixels, self.aug_active = rope.bands != "lang", False
        self.max_res, self.linear_bands = rope.max_res, rope.bands == "pixel-linear"
        self.grid_type = (
            "centered" if rope.kind == PERIODS else "pixel" if self.in_pixels else "index"
        )
        self.feat_shape = feat_shape
        self._use_cached_embed = feat_shape is not None
        self._kept: tuple[Tensor, ...] | None = None  # (sin, cos) of feat_shape
        if compat and feat_shape is not None:
            self._kept = self._replayed(feat_shape, self._dtype, torch.device("cpu"))
            self._kept = tuple(t.to(self._device) for t in self._kept)

    # -- tables

    @staticmethod
    def _grid(shape: Any) -> tuple[int, ...]:
        """``shape`` checked as :func:`posenc.rope_grid` checks a grid: ``(H, W)``, integers
        >= 0."""
        return grid_shape(shape, 2, axes="(H, W): timm's rotary tables are of 2D grids")

    def _replayed(
        self, shape: Sequence[int], dtype: torch.dtype, device: Any
    ) -> tuple[Tensor, ...]:
        """timm's float32 ``(sin, cos)`` of ``shape``, computed on ``device``, cast to
        ``dtype``."""
        dims = self._grid(shape)
        cos, sin = rope_grid(
            dims,
            self.dim,
            compat="timm",
            dtype=torch.float32,
            device=device,
            **self.rope.grid_options(dims),
        )
        return sin.to(dtype), cos.to(dtype)

    def _tables(self, shape: Sequence[int], dtype: torch.dtype) -> tuple[Tensor, ...]:
        """``(sin, cos)`` of the grid ``shape`` in ``dtype`` on the module's device."""
        dims = self._grid(shape)
        if self.compat:
            return self._replayed(dims, dtype, self._device)
        cos, sin = rope_grid(
            dims, self.dim, dtype=dtype, device=self._device, **self.rope.grid_options(dims)
        )
        return sin, cos

    def _cached(self) -> tuple[Tensor, ...]:
        if self.feat_shape is None:
            raise PosencError("no table is kept: pass the grid `shape`")
        if self._kept is None:
            self._kept = self._tables(self.feat_shape, self._dtype)
        return self._kept

    def _free_dtype(self) -> torch.dtype:
        """The dtype of a table computed per call: timm's float32 (DINOv3: its periods', the
        module's dtype if at least float32)."""
        if self.rope.kind == PERIODS and torch.finfo(self._dtype).bits >= 32:
            return self._dtype
        return torch.float32

    def _out(self, tables: tuple[Tensor, ...]) -> Any:
        return torch.cat(tables, dim=-1) if self.rope.form == "cat" else tables

    def get_embed(
        self, shape: Sequence[int] | None = None, dtype: torch.dtype | None = None
    ) -> Any:
        """The tables of the grid ``shape`` (or the kept ``feat_shape``): ``cat(sin, cos)``
        ``[H * W, 2 * dim]``, or ``(sin, cos)``; in ``dtype`` if given."""
        fresh = shape is not None and (self.rope.kind == PERIODS or not self._use_cached_embed)
        if fresh or self.feat_shape is None:
            if shape is None:
                raise PosencError(
                    "get_embed() needs a grid `shape`: this module keeps no table (timm's "
                    "asserts the same)"
                )
            if self.compat or dtype is None:
                tables = self._tables(shape, self._free_dtype())
                return self._out(tuple(t.to(dtype) for t in tables) if dtype else tables)
            return self._out(self._tables(shape, dtype))  # rounded once to dtype
        tables = self._cached()
        return self._out(tuple(t.to(dtype) for t in tables) if dtype else tables)

    def get_batch_embeds(
        self,
        shapes: list[tuple[int, int]],
        seq_len: int | None = None,
        dtype: torch.dtype | None = None,
    ) -> Any:
        """The tables of several grids (a list, or zero-padded to ``seq_len`` and stacked), as
        timm's: the integer grids of ``RotaryEmbeddingCat`` (no ``ref_feat_shape``) cut from the
        largest one."""
        if not shapes:
            return []
        if self.rope.kind != PERIODS and self._use_cached_embed:
            raise RuntimeError(
                "Batch embedding generation requires cached bands, not pre-computed embeddings"
            )
        if self.grid_type == "index" and self.ref_feat_shape is None:  # timm's cut
            h, w = max(s[0] for s in shapes), max(s[1] for s in shapes)
            whole = self._as_cat(self.get_embed((h, w), dtype=dtype)).view(h, w, -1)
            tables = [self._from_cat(whole[:a, :b].reshape(a * b, -1)) for a, b in shapes]
        else:
            tables = [self.get_embed((a, b), dtype=dtype) for a, b in shapes]
        if seq_len is None:
            return tables
        if self.rope.form == "cat":
            return _padded(tables, seq_len)
        return tuple(_padded([t[j] for t in tables], seq_len) for j in (0, 1))

    def _as_cat(self, out: Any) -> Tensor:
        return out if self.rope.form == "cat" else torch.cat(out, dim=-1)

    def _from_cat(self, table: Tensor) -> Any:
        return table if self.rope.form == "cat" else tuple(table.chunk(2, dim=-1))

    def forward(self, x: Tensor) -> Tensor:
        """Rotate a channels-first ``[B, dim, H, W]`` tensor (timm's ``forward``)."""
        shape = x.shape
        sin, cos = self._as_cat(self.get_embed(shape[2:])).chunk(2, dim=-1)
        flat = x.flatten(2).transpose(1, 2)
        flat = _rotated(flat, sin, cos, self.rotate_half)
        return flat.transpose(1, 2).reshape(shape)

    def update_feat_shape(self, feat_shape: Sequence[int]) -> None:
        """Keep the table of another grid (a kept one only; timm's ``update_feat_shape``)."""
        if self.feat_shape is not None and feat_shape != self.feat_shape:
            dtype = self._dtype if self._kept is None else self._kept[0].dtype
            self._kept = self._replayed(feat_shape, dtype, self._device) if self.compat else None
            self.feat_shape = feat_shape

    def reset_parameters(self) -> None:
        """Rebuild the kept table (it holds no learned state)."""
        if self.compat and self.feat_shape is not None:
            kept = self._replayed(self.feat_shape, self._dtype, torch.device("cpu"))
            self._kept = tuple(t.to(self._device) for t in kept)
        else:
            self._kept = None

    init_non_persistent_buffers = reset_parameters

    # -- attributes timm's callers read

    @property
    def pos_embed(self) -> Tensor | None:
        """``RotaryEmbeddingCat``'s kept ``cat(sin, cos)`` (None without a ``feat_shape``)."""
        return None if self.feat_shape is None else torch.cat(self._cached(), dim=-1)

    pos_embed_cached = pos_embed

    def _moved(self) -> None:
        if not self.compat:
            self._kept = None

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> TimmRotaryEmbedding:
        super()._apply(fn, recurse)
        if self.compat and self._kept is not None:  # timm's buffer is cast, not rebuilt
            self._kept = tuple(fn(t) for t in self._kept)
        return self

    def extra_repr(self) -> str:
        kept = "" if self.feat_shape is None else f", feat_shape={tuple(self.feat_shape)}"
        mode = ", compat='timm'" if self.compat else ""
        return f"{self.rope.label()}{kept}{mode}"


# ---------------------------------------------------------------------------------------------
# the recognisers
