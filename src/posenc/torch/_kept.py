"""Kept rows: the first rows of a module's table, kept outside the state_dict (one table per
dtype, on the module's device, forgotten when the module moves), and optionally a window of
rows past them for decoding. Every posenc module with kept rows uses this one mechanism; the
module passes in how a run of rows is computed, so nothing here knows what the rows encode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from posenc.evaluate import FLOAT32_ONLY, float32_only
from posenc.evaluate.libs.torch import tracing
from posenc.evaluate.positions import Positions

Compute = Callable[[int, Any, torch.dtype, torch.device], Tensor]
"""``compute(start, length, dtype, device)``: rows ``start … start + length - 1``, a
``[length, width]`` tensor (``length`` may be symbolic under tracing)."""


def _unkept() -> bool:
    """Whether a call reads no kept row: traced (exported, ``torch.jit.trace``), or inside
    ``posenc.float32_only()``, whose calls compute every row as an export does."""
    return tracing() or FLOAT32_ONLY.get()


class KeptRows:
    """The rows of positions ``0 … length - 1``, kept per dtype on the module's device.

    Args:
        length: how many rows are kept (the module's ``cached_length``).
        compute: how the module computes a run of rows (see :data:`Compute`).
        window: rows kept past the kept ones for decoding (0: none). A call whose positions
            span less than ``window / 2`` reads them; the window is refilled from the block of
            ``window / 2`` rows where the call starts, so a decoding loop refills it at most
            once per ``window / 2`` steps.

    Eager calls slice or gather the kept rows; ``torch.compile`` reads the kept rows that
    cover a call and computes the rest in the graph, with no test on the (symbolic) length;
    ``torch.export`` and ``torch.jit.trace`` keep nothing (every row computed in the graph),
    and neither do calls inside ``posenc.float32_only()``, which compute what an export does.
    """

    def __init__(self, length: int, compute: Compute, *, window: int = 0) -> None:
        self.length = length
        self.window = window
        self._compute = compute
        self.device = torch.device("cpu")
        self.tables: dict[torch.dtype, Tensor] = {}
        self._windows: dict[torch.dtype, tuple[int, Tensor]] = {}

    def reset(self, device: torch.device, dtype: torch.dtype | None = None) -> None:
        """Forget every kept row (the module moved, or was reset): rows are kept on
        ``device`` from now on, and those in ``dtype`` are built now (compiled calls read
        kept rows but cannot build them; other dtypes are built on first eager use)."""
        self.device = device
        self.tables = {}
        self._windows = {}
        if dtype is not None:
            with float32_only(enabled=False):  # kept rows serve the calls outside it
                self.tables[dtype] = self._compute(0, self.length, dtype, device)

    def table(self, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """The kept rows in ``dtype`` on ``device`` (built on first use: activations in
        another dtype than the module's get a table of their own, correctly rounded), or None
        when traced, inside ``posenc.float32_only()`` or on another device than the module's."""
        if _unkept() or device != self.device or not dtype.is_floating_point:
            return None
        table = self.tables.get(dtype)
        if table is None:
            table = self.tables[dtype] = self._compute(0, self.length, dtype, device)
        return table

    def run(self, start: int, length: Any, dtype: torch.dtype, device: torch.device) -> Tensor:
        """Rows ``start … start + length - 1``. Eager: a slice of the kept rows when they
        cover the call, else of the window (a short call), else computed. Under
        ``torch.compile``: the kept rows that cover the start, then the computed rest, with
        no test on the (symbolic) length, so one graph serves every length, inside the kept
        rows and past them. Exports, ``torch.jit.trace`` and ``posenc.float32_only()`` compute
        every row."""
        compiler = torch.compiler
        if compiler.is_compiling() and not compiler.is_exporting():
            return self._compiled(start, length, dtype, device)
        if _unkept():  # first: a size test would specialise the export or the trace
            return self._compute(start, length, dtype, device)
        if start + length <= self.length:
            if (table := self.table(dtype, device)) is not None:
                return table[start : start + length]
        elif 0 < length < self.window // 2 and (near := self._near(start, dtype, device)):
            first, rows = near
            return rows[start - first : start - first + length]
        return self._compute(start, length, dtype, device)

    def _compiled(self, start: int, length: Any, dtype: torch.dtype, device: Any) -> Tensor:
        table = self.tables.get(dtype) if device == self.device else None
        if table is None or start >= self.length:
            return self._compute(start, length, dtype, device)
        kept = torch.sym_min(start + length, self.length) - start  # type: ignore[no-untyped-call]
        # the computed rest is 2 rows longer than needed and cut after: a size that can be 0
        # or 1 would be tested (and specialised) by the compiler
        tail = self._compute(self.length, length - kept + 2, dtype, device)
        return torch.cat([table[start : start + kept], tail])[:length]

    def gather(self, pos: Positions, dtype: torch.dtype) -> Tensor | None:
        """Rows for integer positions read on the host (eager): gathered from the kept rows
        when they hold them all, or from the window when they span less than half of it (the
        same bits: both are the module's computed rows); else None (the module computes
        them). Positions not read on the host (traced, meta, or on an accelerator) have no
        known bounds: None, so reading them never waits for the device."""
        values = pos.values
        if (
            not pos.integral
            or pos.low is None
            or pos.high is None
            or pos.low < 0
            or not values.numel()
        ):
            return None
        low, high = int(pos.low), int(pos.high)
        if high < self.length:
            table = self.table(dtype, values.device)
            return None if table is None else table[values]
        if high - low < self.window // 2 and (near := self._near(low, dtype, values.device)):
            first, rows = near
            return rows[values - first]
        return None

    def _near(
        self, low: int, dtype: torch.dtype, device: torch.device
    ) -> tuple[int, Tensor] | None:
        """The window (its first position and rows) holding ``low … low + window / 2``: kept,
        or refilled from the block of ``window / 2`` rows where ``low`` falls; None when
        traced, inside ``posenc.float32_only()``, or on another device than the module's."""
        if _unkept() or device != self.device:
            return None
        half = self.window // 2
        kept = self._windows.get(dtype)
        if kept is not None and kept[0] <= low and low + half <= kept[0] + self.window:
            return kept
        start = low - low % half
        kept = self._windows[dtype] = (start, self._compute(start, self.window, dtype, device))
        return kept
