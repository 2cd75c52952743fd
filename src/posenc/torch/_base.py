"""What every posenc module shares: a preset resolved once, the dtype and device it was built
for or moved to (no buffers), the checkpoint check, and the kept first rows of 1D modules
(:class:`posenc.torch._kept.KeptRows`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from posenc import evaluate
from posenc.errors import PosencError, check_int
from posenc.evaluate.libs import as_positions
from posenc.evaluate.libs.torch import check_device
from posenc.evaluate.positions import Positions
from posenc.spec.layout import Plan, channel_plan, check_channels
from posenc.spec.presets import get_preset
from posenc.torch._checkpoint import check_saved_tables
from posenc.torch._kept import KeptRows


class _Tracked(nn.Module):
    """The dtype and device a module was built for or moved to, tracked through ``_apply``
    (so ``.to()``, ``.half()``, ``to_empty()`` and friends reach it without a buffer that DDP
    would broadcast); ``_moved`` runs after a change."""

    def __init__(self, *, device: Any, dtype: Any) -> None:
        super().__init__()
        dtype = dtype or torch.get_default_dtype()
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise PosencError(f"`dtype` must be a floating torch dtype, got {dtype!r}")
        probe = torch.empty(0, dtype=dtype, device=_api_device(device))
        self._dtype, self._device = probe.dtype, probe.device

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> _Tracked:
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        probe = fn(torch.empty(0, dtype=self._dtype, device=self._device))
        if (probe.dtype, probe.device) != (self._dtype, self._device):
            self._dtype, self._device = probe.dtype, probe.device
            self._moved()
        return self

    def _moved(self) -> None:
        """Called after the module's dtype or device changed."""

    def __prepare_scriptable__(self) -> nn.Module:
        """``torch.jit.script`` asks this first: say plainly what to use instead."""
        raise PosencError(
            f"{type(self).__name__} cannot be compiled by torch.jit.script: its forward calls "
            "posenc's Python core, which TorchScript cannot type. Use torch.compile, "
            "torch.export or torch.onnx.export (dynamic lengths), or torch.jit.trace"
        )


class _Module(_Tracked):
    """What every sinusoidal module shares: a preset resolved once, the tracked dtype and
    device, and the check of the tables a checkpoint holds."""

    def __init__(
        self, preset: str, options: dict[str, Any], *, grid: bool, device: Any, dtype: Any
    ) -> None:
        super().__init__(device=device, dtype=dtype)
        p = get_preset(preset)
        self.preset = p.name
        self.options = dict(options)
        self.enc = p.resolve(self.options, grid=grid)
        self.label = p.label(self.options)  # how errors name the preset and its options
        self._register_load_state_dict_pre_hook(  # type: ignore[no-untyped-call]
            check_saved_tables, with_module=True
        )

    def _expected_table(self, rows: int) -> np.ndarray | str:
        """This module's own ``[rows, width]`` table in float64, to compare a checkpoint's
        with (:mod:`posenc.torch._checkpoint`), or why it has none."""
        return "is not a table this module has"

    def _largest_position(self, rows: int) -> int:
        """The largest position in a table of ``rows`` rows."""
        return rows


def _traceable(plan: Plan) -> Plan:
    """A plan whose constants (and the message of its accuracy rule) are computed now, so a
    tracer only reads attributes."""
    plan.constants  # noqa: B018
    plan.angle_rule  # noqa: B018
    return plan


def _api_device(device: Any) -> torch.device:
    out: torch.device = check_device("cpu" if device is None else device)
    return out


class _Cached(_Module):
    """The shared part of the 1D modules: a preset, and the kept rows of the first
    ``cached_length`` positions (:class:`~posenc.torch._kept.KeptRows`)."""

    def __init__(
        self,
        dim: int,
        preset: str,
        cached_length: int,
        device: Any,
        dtype: Any,
        options: dict[str, Any],
        channels: slice | None,
    ) -> None:
        super().__init__(preset, options, grid=False, device=device, dtype=dtype)
        if self.enc.ndim not in (1, None):
            raise PosencError(
                f"preset {self.preset!r} encodes {self.enc.ndim} axes; it cannot serve a "
                "sequence module"
            )
        self.dim = check_int("dim", dim, minimum=1)
        self.channels = check_channels(channels, self.dim)
        self._plan = _traceable(channel_plan(self.enc, self.dim, 1, self.label, self.channels))
        self.width = self._plan.dim
        self.cached_length = check_int("cached_length", cached_length, maximum=1 << 24)
        self._kept = KeptRows(self.cached_length, self._span)
        self.reset_parameters()

    @property
    def cache(self) -> Tensor:
        """The kept table ``[cached_length, width]``, in the module's dtype and device."""
        return self._kept.tables[self._dtype]

    @property
    def _tables(self) -> dict[torch.dtype, Tensor]:
        """The kept tables, by dtype (the module's, and those built for activations in
        another dtype)."""
        return self._kept.tables

    def reset_parameters(self) -> None:
        """(Re)build the table of the first ``cached_length`` rows (and forget the tables
        kept for other activation dtypes)."""
        self._kept.reset(self._device, self._dtype)

    def _span(self, start: int, length: Any, dtype: torch.dtype, device: Any) -> Tensor:
        """Rows ``start … start + length - 1``: a run of positions, evaluated as a table
        (every evaluator's fastest form; ``length`` may be symbolic under tracing)."""
        out: Tensor = evaluate.span(
            self._plan,
            float(start),
            length,
            dtype=dtype,
            device=device,
            padding_idx=self.enc.padding_idx,
            on_device=True,
        )
        return out

    def _moved(self) -> None:
        self.reset_parameters()

    def _computed(self, pos: Positions, dtype: torch.dtype) -> Tensor:
        out: Tensor = evaluate.points(
            self._plan, pos, coords=False, dtype=dtype, padding_idx=self.enc.padding_idx
        )
        return out

    def _expected_table(self, rows: int) -> np.ndarray | str:
        return self._span(0, rows, torch.float64, torch.device("cpu")).numpy()

    def _rows(self, positions: Tensor | Positions, dtype: torch.dtype) -> Tensor:
        """Rows for explicit positions (checked once): eager integer positions inside the
        kept table are gathered from it (the same bits: the table is the core's); others are
        computed, on the device of the positions."""
        pos = (
            positions
            if isinstance(positions, Positions)
            else as_positions(positions, on_device=True)
        )
        rows = self._kept.gather(pos, dtype)
        return self._computed(pos, dtype) if rows is None else rows

    def extra_repr(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        shard = "" if self.channels is None else f", channels={self.channels!r}"
        return (
            f"{self.dim}, preset={self.preset!r}{opts}{shard}, cached_length={self.cached_length}"
        )


def _short(values: list[Any]) -> str:
    return str(values) if len(values) <= 8 else f"[{', '.join(map(str, values[:8]))}, …]"
