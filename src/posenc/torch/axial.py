"""``AxialRotaryEmbedding``: the rotary tables of image and video grids as a module
(:func:`posenc.rope_grid` with kept rows).

Each block of ``axes_dim`` keeps its own rows (the positions ``start + i * step`` of its grid
axis, one column per frequency, :class:`~posenc.torch._kept.KeptRows`); a call writes each
block's rows, broadcast over the grid, straight into the columns the layout gives them, so a
table is one copy of kept rows, whatever the grid. Nothing is saved in the state dict.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from posenc import evaluate
from posenc.api.options import GridOptions, checked
from posenc.api.rope_grid import block_axes_of, grid_axes_rule, per_axis, rope_grid
from posenc.errors import PosencError, check_int
from posenc.evaluate.positions import grid_shape
from posenc.spec.ladders import SPACINGS
from posenc.spec.presets import get_rotary_preset
from posenc.spec.rotary import rotary, with_axes_scaling
from posenc.spec.scaling import across
from posenc.torch._base import _Tracked
from posenc.torch._kept import KeptRows

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11


class AxialRotaryEmbedding(_Tracked):
    """Axial RoPE for grids of tokens: ``forward(shape)`` gives ``(cos, sin)``, each
    ``[prod(shape), dim]``, the tables :func:`posenc.rope_grid` gives for that grid (exact:
    float64 angles, rounded once).

    Args:
        dim: the rotary width (the head dimension).
        preset: an image or video family (``wan``, ``hunyuan-video``, ``cogvideox``,
            ``hunyuan-dit``, ``flux``, …), as in :func:`posenc.rope_grid`; keywords given
            beside it replace the preset's.
        block_axes: as in :func:`posenc.rope_grid`.
        start: each grid axis's first position, as in :func:`posenc.rope_grid`.
        step: each grid axis's step, as in :func:`posenc.rope_grid`.
        cached_length: rows kept per block (a grid axis longer than this is computed per
            call). A preset whose positions follow the grid's size (DINOv3's centred
            coordinates) keeps no rows: each call computes its table.
        device: where the tables are kept (follows ``.to()``).
        **options: the table's keywords, as :func:`posenc.rope_grid` takes them
            (:class:`posenc.GridOptions`: ``base``, ``layout``, ``blocks``, ``axes_dim``,
            ``axes_scale``, ``axes_base``, ``scaling``). A rule is kept with the rows, so it
            says all it needs (``{"rope_type": "riflex", "k": 4, "length": 66}``, a
            ``"time"`` for DyPE): the module does not size it to each grid or read a
            diffusion time (``posenc.torch.patch(model, scaling=...)`` does both).

    Examples:
        >>> rope = posenc.torch.AxialRotaryEmbedding(128, preset="wan")
        >>> cos, sin = rope((21, 45, 80))                  # 720p, 81 frames: [75600, 128]
        >>> torch.equal(cos, torch.from_numpy(posenc.rope_grid((21, 45, 80), 128,
        ...                                                    preset="wan")[0]))
        True
    """

    def __init__(
        self,
        dim: int,
        *,
        preset: str | None = None,
        block_axes: tuple[int, ...] | None = None,
        start: float | Sequence[float] | None = None,
        step: float | Sequence[float] | None = None,
        cached_length: int = 1024,
        device: Any = None,
        **options: Unpack[GridOptions],
    ) -> None:
        super().__init__(device=device, dtype=torch.float32)
        own = ("preset", "block_axes", "start", "step", "cached_length", "device")
        given = checked("AxialRotaryEmbedding", options, GridOptions, own)
        scaling = given.pop("scaling", None)
        if isinstance(scaling, list | tuple):  # one rule per axis: what it takes from the others
            scaling = type(scaling)(across(list(scaling)))
        each = scaling if isinstance(scaling, list | tuple) else None
        r = rotary(dim, preset=preset, scaling=None if each is not None else scaling, **given)
        if SPACINGS[r.spacing].shared or r.interleave_axes:
            raise PosencError(
                "`AxialRotaryEmbedding` keeps rows per block of channels; this family's axes "
                "take turns per frequency (LTX-Video's one ladder, Lumina-Next's interleaved "
                f"axes): use posenc.rope_grid(shape, dim, preset={preset!r})"
            )
        if r.axes_dim is None:
            raise PosencError(
                "`AxialRotaryEmbedding` needs one block per grid axis: pass `axes_dim` or an "
                "axial preset (wan, hunyuan-video, cogvideox, hunyuan-dit, flux, pixtral, …)"
            )
        k = len(r.axes_dim)
        self.block_axes = tuple(block_axes_of(block_axes, preset, k))
        if each is not None:  # one rule per grid axis, to the block that encodes it
            r = with_axes_scaling(r, each, [self.block_axes.index(g) for g in range(k)])
        self.rotary, self.preset, self.dim, self._scaling = r, preset, r.dim, scaling
        recipe = get_rotary_preset(preset).positions if preset is not None else None
        self._recipe = recipe if start is None or step is None else None
        self._given = (start, step)  # what the recipe leaves alone
        self.start = per_axis("start", start, k, 0.0)
        self.step = per_axis("step", step, k, 1.0)
        self.cached_length = check_int("cached_length", cached_length, maximum=1 << 24)
        scales = r.axes_scale or (1.0,) * k
        bases, widths = r.bases, r.axes_dim
        assert widths is not None  # checked above: one block per grid axis
        rules = r.axes_scaling or (None,) * k
        self._plans = [  # each block alone: one column per frequency, [cos | sin]
            dataclasses.replace(
                r,
                dim=d,
                axes_dim=(d,),
                axes_scale=(s,),
                axes_base=(b,),
                layout="compact",
                blocks=1,
                axes_scaling=None if rule is None else (rule,),
            ).plan(None, f"AxialRotaryEmbedding({r.dim}, axes_dim={r.axes_dim})")
            for d, s, b, rule in zip(widths, scales, bases, rules, strict=True)
        ]
        self._kept = [KeptRows(self.cached_length, self._block_rows(a)) for a in range(k)]
        self._moved()

    def _block_rows(self, a: int) -> Any:
        def compute(first: int, length: Any, work: torch.dtype, device: Any) -> Tensor:
            g = self.block_axes[a]
            start, step = self.start[g] + first * self.step[g], self.step[g]
            out: Tensor = evaluate.span(
                self._plans[a], start, length, dtype=work, device=device, on_device=True, step=step
            )
            return out

        return compute

    def _moved(self) -> None:
        for kept in self._kept:
            kept.reset(self._device, torch.float32)

    def reset_parameters(self) -> None:
        """Rebuild the kept tables (they hold no learned state)."""
        self._moved()

    def forward(self, shape: int | Sequence[int], *, dtype: torch.dtype | None = None) -> Any:
        """``(cos, sin)`` of every token of the grid ``shape`` (first axis outermost; an int: a
        square or cube), each ``[prod(shape), dim]`` in ``dtype`` (default: the module's,
        float32 unless moved) on the module's device. ``shape`` is checked as
        :func:`posenc.rope_grid` checks it: one integer >= 0 per block of ``axes_dim`` (an
        axis of 0 gives tables of no rows)."""
        dtype = self._dtype if dtype is None else dtype
        r = self.rotary
        dims = grid_shape(
            shape, len(self.block_axes), axes=grid_axes_rule(r), symbolic=torch.SymInt
        )
        if self._recipe is not None:  # positions set by the grid's size: no rows to keep
            start, step = self._given
            return rope_grid(
                dims,
                r.dim,
                preset=self.preset,
                base=r.base,
                layout=r.layout,
                blocks=r.blocks,
                axes_dim=r.axes_dim,
                axes_scale=r.axes_scale,
                axes_base=r.bases,
                scaling=self._scaling,
                block_axes=self.block_axes,
                start=start,
                step=step,
                dtype=dtype,
                device=self._device,
            )
        nf, k = r.dim // 2, len(dims)
        out = [torch.empty(*dims, r.width, dtype=dtype, device=self._device) for _ in (0, 1)]
        first = 0
        for a, g in enumerate(self.block_axes):
            rows = self._kept[a].run(0, dims[g], dtype, self._device)  # [n_g, 2 * n_a]
            na = rows.shape[-1] // 2
            view = [1] * k + [na]
            view[g] = dims[g]
            for t, part in zip(out, (rows[:, :na], rows[:, na:]), strict=True):
                _place(t, part.reshape(view), r.layout, nf, first, first + na, r.blocks)
            first += na
        n = math.prod(dims)
        return out[0].reshape(n, r.width), out[1].reshape(n, r.width)

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        r = self.rotary
        halves = f", blocks={r.blocks}" if r.layout == "block-halves" else ""
        rule = "" if self._scaling is None else f", scaling={self._scaling!r}"
        return (
            f"{r.dim}, axes_dim={r.axes_dim}, base={r.base:g}, layout={r.layout!r}"
            f"{halves}, block_axes={self.block_axes}{rule}"
        )


def _place(
    out: Tensor, rows: Tensor, layout: str, n: int, lo: int, hi: int, blocks: int = 1
) -> None:
    """Write one block's columns (frequencies ``lo … hi - 1`` of ``n``, ``rows`` broadcasting
    over the grid) into the table ``out`` ``[*grid, width]`` where ``layout`` puts them: each
    frequency twice in a row (interleaved), in both halves (of the whole width, or of each of
    ``blocks`` blocks: block-halves), or once (compact). Each write is one contiguous run of
    channels per token."""
    if layout == "block-halves":  # frequency j of halves block b: channels b m + j, + m
        m = n // blocks
        for b in range(lo // m, -(-hi // m)):
            a, z = max(lo, b * m), min(hi, (b + 1) * m)
            for at in (b * m, b * m + m):
                out[..., at + a : at + z] = rows[..., a - lo : z - lo]
        return
    if layout == "interleaved":
        out[..., 2 * lo : 2 * hi] = rows.repeat_interleave(2, dim=-1)
    elif layout == "halves":
        out[..., lo:hi] = rows
        out[..., n + lo : n + hi] = rows
    else:
        out[..., lo:hi] = rows
