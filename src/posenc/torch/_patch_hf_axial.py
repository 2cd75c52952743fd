"""transformers' standard axial rotary machinery of vision towers (``rope_type="axial"``), for
:func:`posenc.torch.patch`: covered by what a module holds, not by its class name.

Such a module (MLCD, Kimi-K2.5, VideoLLaMA 3, Inkling 2, EXAONE 4.5, MiniMax-M3-VL, … vision
towers) keeps a float32 ``inv_freq`` ladder ``1 / base ** (arange(0, S, 2) / S)`` and computes,
for ``[N, A]`` position ids (one column per axis), ``position_ids[..., None].float() *
inv_freq``, its cosine and sine times ``attention_scaling``, then lays the ``[N, A, S / 2]``
values out across its head with its own ``recomposition_frequencies``: Qwen2-VL's ``[h | w | h |
w]``, Kimi-K2.5's (w, h) pairs frequency by frequency, Inkling 2's interleaved ``[w | h]``,
MiniMax-M3's ``[t | h | w]`` twice. The stand-in (:class:`AxialRope`) is built from what the
module holds: its ladder (checked bit for bit against its config's ``rope_theta``), the layout
its recomposition makes (read by laying out marker values; as many axes, 3 or 2, as it lays
out whole within its head), and whether its tables follow ``x``'s dtype; it is offered only
once its replay of the module's arithmetic gave the module's own tables bit for bit. The
families with a preset of their own (Qwen2-VL's form, Pixtral, SAM 2, …) are recognised
before, in ``_patch_hf_vision``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from posenc.api.rope import rope
from posenc.errors import PosencError
from posenc.torch._base import _Tracked
from posenc.torch._patch_hf_vision import grid_ids, id_runs
from posenc.torch._patching import Found, compare, from_library, left_alone

MACHINERY = ("compute_axial_rope_parameters", "recomposition_frequencies")
GRIDS = {2: (128, 128), 3: (8, 64, 64)}
"""Where a module is measured, by its number of axes (it has no image size of its own): 16384
(row, column) patches, as Qwen2-VL's default ``max_pixels`` allow, and 8 frames of 64 x 64."""
CHECKED = {2: (12, 20), 3: (3, 6, 10)}
"""The smaller grid the replay is first checked on, before the module is offered."""


def ladder(width: int, base: float) -> Tensor:
    """The float32 ``inv_freq`` of transformers' ``compute_axial_rope_parameters``: ``1.0 /
    (base ** (arange(0, width, 2, float) / width))``."""
    return 1.0 / (base ** (torch.arange(0, width, 2, dtype=torch.float) / width))


class AxialRope(_Tracked):
    """The stand-in for a transformers vision-tower module of the standard axial machinery:
    ``forward(x, position_ids)`` as the original, ``[..., A]`` integer ids in, ``(cos, sin)``
    ``[..., D]`` out (float32, or ``x``'s dtype where the original casts to it).

    Exact (``compat=False``): each axis' angles ``id * base ** (-2j / width)`` evaluated by
    posenc (float64, one rounding), laid out as the original lays them. Compat: the
    original's float32 arithmetic, with its ladder rounded to the dtype ``.to()`` moved the
    module to, as its buffer is.

    Args:
        width: ``S``, the width of one axis' ladder (``S / 2`` frequencies).
        base: ``rope_theta``.
        layout: ``[D]`` indices into the ``[A, S / 2]`` table of one token (``a * S / 2 +
            j``): the original's ``recomposition_frequencies``.
        axes: ``A``.
        follows_x: the tables are cast to ``x``'s dtype.
        compat: repeat transformers' arithmetic.
        dtype: the dtype of the original's buffer; device: its device.
    """

    def __init__(
        self,
        width: int,
        base: float,
        layout: tuple[int, ...],
        *,
        axes: int,
        follows_x: bool,
        compat: bool,
        dtype: torch.dtype,
        device: Any,
    ) -> None:
        super().__init__(device=device, dtype=torch.float32)
        if width % 2 or width < 2:
            raise PosencError(f"`width` (one axis' ladder) must be even and positive, got {width}")
        count = axes * width // 2
        if not layout or not all(0 <= i < count for i in layout):
            raise PosencError(f"`layout` must index the {axes} x {width // 2} angles of a token")
        self.width, self.base, self.axes, self.layout = width, float(base), axes, tuple(layout)
        self.follows_x, self.compat = follows_x, compat
        if dtype != torch.float32:
            self.to(dtype)

    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` of ``position_ids`` (``[..., A]``), laid out as the original's."""
        if position_ids.shape[-1] != self.axes:
            raise PosencError(
                f"`position_ids` must end in one column per axis ({self.axes}), got shape "
                f"{tuple(position_ids.shape)}"
            )
        with torch.no_grad():
            cos, sin = self._compat(position_ids) if self.compat else self._exact(position_ids)
            index = torch.tensor(self.layout, device=cos.device)
            cos, sin = cos.flatten(-2)[..., index], sin.flatten(-2)[..., index]
        if self.follows_x:
            return cos.to(x.dtype), sin.to(x.dtype)
        return cos, sin

    def _compat(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        inv = ladder(self.width, self.base).to(self._dtype).to(ids.device, torch.float)
        freqs = ids[..., None].float() * inv
        return freqs.cos(), freqs.sin()

    def _exact(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        tables = [  # compact: one column per frequency of the axis' ladder
            rope(ids[..., a], self.width, base=self.base, layout="compact", dtype=torch.float32)
            for a in range(self.axes)
        ]
        cos = torch.stack([c for c, _ in tables], dim=-2)
        sin = torch.stack([s for _, s in tables], dim=-2)
        return cos, sin

    def extra_repr(self) -> str:
        mode = ", compat='transformers'" if self.compat else ""
        return f"{self.width}, axes={self.axes}, base={self.base:g}{mode}"


# ---------------------------------------------------------------------------------------------
# the recogniser


def _layout(module: nn.Module, axes: int, half: int) -> tuple[int, ...] | str:
    """Where the module's ``recomposition_frequencies`` puts each angle of a token: marker
    values laid out by it, read back; or why it cannot be read."""
    marker = torch.arange(axes * half, dtype=torch.float64).reshape(1, axes, half)
    try:
        out = type(module).recomposition_frequencies(module, marker)  # type: ignore[attr-defined]
    except Exception as err:  # a layout of another form
        return f"its recomposition_frequencies does not take {axes} axes ({type(err).__name__})"
    if not isinstance(out, Tensor) or out.ndim != 2 or out.shape[0] != 1:
        return "its recomposition_frequencies is not a layout of one token's angles"
    layout = tuple(int(v) for v in out[0].tolist())
    if set(layout) != set(range(axes * half)):
        return f"its recomposition_frequencies leaves angles of {axes} axes out"
    return layout


def _read(module: nn.Module) -> tuple[int, float, int, tuple[int, ...]] | str:
    """``(width, base, axes, layout)`` of a module of the machinery; else why not."""
    config: Any = getattr(module, "config", None)
    inv = getattr(module, "inv_freq", None)
    if not isinstance(inv, Tensor) or inv.ndim != 1 or not inv.is_floating_point():
        return "not covered: it has no inv_freq buffer of transformers' form"
    if float(getattr(module, "attention_scaling", 1.0)) != 1.0:
        return "not covered yet: an attention scaling other than 1"
    params = getattr(config, "rope_parameters", None) or {}
    try:
        base = float(params["rope_theta"])
        head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    except (KeyError, AttributeError, TypeError, ValueError):
        return "not covered: its config gives no rope_theta and head width"
    width = 2 * inv.numel()
    if not torch.equal(ladder(width, base).to(inv.dtype), inv.detach().cpu()):
        return (
            f"not covered: its inv_freq is not transformers' axial ladder of width {width} "
            f"(base {base:g}), bit for bit"
        )
    first = ""
    for axes in sorted(GRIDS, reverse=True):  # the most axes whose angles all fit the head
        layout = _layout(module, axes, inv.numel())
        if isinstance(layout, str):
            first = first or layout
        elif len(layout) <= int(head):
            return width, base, axes, layout
    return f"not covered: {first or f'its layout is wider than its head ({head})'}"


def axial_rope(path: str, module: nn.Module, root: nn.Module) -> Found | None:
    """A transformers module of the standard axial machinery (it defines
    ``compute_axial_rope_parameters`` and ``recomposition_frequencies``), measured over
    ``GRIDS``."""
    name = type(module).__name__
    if not (from_library(module, "transformers") and hasattr(module, "inv_freq")):
        return None
    if not all(hasattr(module, f) for f in MACHINERY):
        return None
    inv: Tensor = module.inv_freq  # type: ignore[assignment]
    if inv.is_meta:  # its values come from its config: a fresh one on the CPU is read
        try:
            with torch.device("cpu"):
                module = type(module)(module.config)
        except Exception:  # any constructor: then it cannot be read
            return left_alone(name, "its tables are on the meta device: load the model first")
    read = _read(module)
    if isinstance(read, str):
        return left_alone(name, read)
    width, base, axes, layout = read
    device = inv.device

    def build(compat: str | None, follows_x: bool = False) -> nn.Module | str:
        try:
            return AxialRope(
                width,
                base,
                layout,
                axes=axes,
                follows_x=follows_x,
                compat=compat is not None,
                dtype=inv.dtype,
                device=device,
            )
        except PosencError as err:
            return f"not covered: {err}"

    checked = grid_ids(CHECKED[axes])
    original = copy.deepcopy(module)
    try:
        theirs = id_runs(original, checked, torch.bfloat16)
    except Exception as err:  # its own forward fails on [N, A] ids
        return left_alone(name, f"not covered: its forward does not take [N, {axes}] ids ({err})")
    follows_x = theirs[0].dtype == torch.bfloat16
    replay = build("transformers", follows_x)
    assert not isinstance(replay, str)
    ours = id_runs(replay, checked, torch.bfloat16)
    if (
        not compare(
            id_runs(original, checked, torch.float32), id_runs(replay, checked, torch.float32)
        )[1]
        or not compare(theirs, ours)[1]
    ):
        return left_alone(name, "not covered: its tables are not those of the axial arithmetic")
    shape = GRIDS[axes]
    ids = grid_ids(shape).to(device)
    return Found(
        name,
        f"AxialRope({width}, axes={axes}, base={base:g})",
        lambda compat: build(compat, follows_x),
        numbers=lambda: id_runs(module, ids, torch.float32),
        probe=lambda new: id_runs(new, ids, torch.float32),
        note=f"max diff over the {' x '.join(map(str, shape))} grid",
    )


RECOGNISERS: tuple[Callable[[str, nn.Module, nn.Module], Found | None], ...] = (axial_rope,)
