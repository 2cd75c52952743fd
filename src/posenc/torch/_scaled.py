"""A rule past the trained size in a patched model (``posenc.torch.patch(model, scaling=...)``):
what a stand-in keeps of it (:class:`Scaled`), and the diffusion time that a rule following it
(DyPE, Lumina-Next's switch) reads from the ``timestep`` its model's forward receives
(:class:`Clock`, set by a forward pre-hook on that model: no pipeline change).

The tables of a rule are computed outside any ``torch.compile`` graph, as the original's own
rotary module computes its tables per call: a compiled model keeps its graphs from step to
step (the time is read by eager code, so no guard holds it), and recompiles only for a new
grid size."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar, cast

import torch
from torch import nn

from posenc.api.rope_grid import with_training
from posenc.errors import PosencError, show
from posenc.spec.families import trained_of
from posenc.spec.families.base import Trained
from posenc.spec.scaling import reads_time, timed

TIMESTEP = "timestep"
"""The argument of a diffusers transformer's forward that carries the diffusion time."""

F = TypeVar("F", bound=Callable[..., Any])


def eager(function: F) -> F:
    """``function`` run outside any ``torch.compile`` graph (``torch.compiler.disable``,
    typed): a rule's tables, made from the time that eager code reads."""
    return cast(F, torch.compiler.disable(function))  # type: ignore[no-untyped-call]


def check_scaling(scaling: Any) -> Any:
    """``scaling`` as :func:`posenc.rope_grid` takes it (one rule, a dict; or one per grid axis,
    a tuple of dicts and None), its shape checked before any module is touched; the rules'
    keys are checked by the first tables the stand-ins make."""
    one = isinstance(scaling, Mapping)
    per_axis = isinstance(scaling, list | tuple) and bool(scaling)
    if not (one or per_axis) or (
        per_axis and not all(r is None or isinstance(r, Mapping) for r in scaling)
    ):
        raise PosencError(
            "`scaling` must be a rule (a dict with a 'rope_type') or one per grid axis (a tuple "
            f"of dicts, None for an axis left as it is), got {show(scaling)}"
        )
    if per_axis and all(r is None for r in scaling):
        raise PosencError(f"`scaling` holds no rule, got {show(scaling)}")
    return tuple(scaling) if per_axis else dict(scaling)


def follows_time(scaling: Any) -> bool:
    """A rule of ``scaling`` reads the diffusion time and holds none of its own."""
    rules = scaling if isinstance(scaling, tuple) else (scaling,)
    return any(reads_time(rule) and "time" not in rule for rule in rules)


class Clock:
    """The diffusion time (1: pure noise) of the forward a patched model is running, read from
    its ``timestep`` (over ``noise``, the family's ``timestep`` at pure noise) by a forward
    pre-hook on the module whose forward takes it; None outside such a forward."""

    def __init__(self, noise: float, owner: str) -> None:
        self.noise, self.owner = noise, owner
        self.time: float | None = None

    def read(self, timestep: Any) -> None:
        """Set the time from a forward's ``timestep``: a number or a tensor holding one value
        for the whole batch, besides zeros (the clean tokens of a condition: Wan 2.2's
        per-token timesteps, 0 on an image-to-video's first frame)."""
        if timestep is None:
            self.time = None
            return
        values = torch.as_tensor(timestep).detach().reshape(-1).to("cpu", torch.float64)
        noised = torch.unique(values[values != 0])
        if values.numel() == 0 or noised.numel() > 1:
            raise PosencError(
                f"`timestep` of {self.owner} must hold one time for the whole batch (a rule "
                f"that follows the diffusion time makes one table for it; zeros, clean "
                f"condition tokens, aside), got {show(values.tolist())}"
            )
        value = float(noised[0]) if noised.numel() else 0.0
        time = value / self.noise
        if not 0.0 <= time <= 1.0:
            raise PosencError(
                f"`timestep` of {self.owner} must be in [0, {self.noise:g}] (pure noise at "
                f"{self.noise:g}, as its pipeline passes it), got {value:g}"
            )
        self.time = time


@eager
def _read(clock: Clock, position: int, module: nn.Module, args: Any, kwargs: Any) -> None:
    """The forward pre-hook: the clock reads the forward's ``timestep``."""
    given = kwargs.get(TIMESTEP, args[position] if position < len(args) else None)
    clock.read(given)


@eager
def _stop(clock: Clock, *_: Any) -> None:
    """The forward hook (also after an error): no time outside the forward."""
    clock.time = None


def _timestep_position(module: nn.Module) -> int | None:
    """Where ``timestep`` sits among the positional arguments of ``module``'s forward, or None
    when its forward takes none."""
    try:
        names = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return None
    return names.index(TIMESTEP) if TIMESTEP in names else None


class Scaled:
    """What a stand-in keeps of a rule past the trained size: the rule(s) as given
    (``scaling``), the size its family (``preset``'s) was trained at (``trained``), and, for
    a rule that follows the diffusion time, the :class:`Clock` it reads. A stand-in that takes
    a rule mixes this in, defines :meth:`trial` and asks :meth:`tables` for its tables."""

    preset: str | None = None
    scaling: Any = None
    clock: Clock | None = None
    trained: Trained | None = None
    _last: tuple[Any, Any] | None = None

    def scale(self, scaling: Any) -> None:
        """Take ``scaling`` (checked by :func:`check_scaling`) for the family of the
        stand-in's ``preset`` (its trained size, RIFLEx's pair), and make the tables once at
        that size (at time 1 for a rule that follows the time), so that a rule the stand-in
        cannot apply is refused now."""
        self.scaling, self.trained = check_scaling(scaling), trained_of(self.preset)
        grid = self.trained.grid if self.trained is not None else ()
        self.clock = Clock(1.0, type(self).__name__)  # the trial's: time 1
        self.clock.time = 1.0
        try:
            self.trial(tuple(1 if n is None else n for n in grid))
        finally:
            self.clock, self._last = None, None  # the model's hooks set the clock

    def trial(self, grid: tuple[int, ...]) -> None:
        """Make the tables once, at the family's trained ``grid`` (empty: none recorded)."""
        raise NotImplementedError

    def rules(self, dims: Sequence[int]) -> Any:
        """The rule(s) at the grid ``dims``: one per axis filled in from the grid and the
        family's training (:func:`posenc.api.rope_grid.with_training`), with the clock's
        time for a rule that follows it."""
        scaling = self.scaling
        if isinstance(scaling, tuple):
            scaling = with_training(scaling, self.preset, tuple(int(n) for n in dims))
        if not follows_time(scaling):
            return scaling
        time = None if self.clock is None else self.clock.time
        if time is None:
            raise PosencError(
                f"{type(self).__name__}: `scaling` {show(self.scaling)} follows the diffusion "
                "time, read from the `timestep` of the patched model's forward: call the model, "
                "not its rotary module alone"
            )
        return timed(scaling, time)

    @eager
    def tables(self, dims: Sequence[int], key: Any, make: Callable[[Any], Any]) -> Any:
        """``make(rules)``: the tables of the grid ``dims`` under :meth:`rules` (``key``: what
        else they depend on), made again only when the rules or the key change (a new time
        of DyPE, a new size). Eager code: the time is read here, outside any compiled
        graph."""
        rules = self.rules(dims)
        held = (getattr(self, "_dtype", None), str(getattr(self, "_device", None)))
        tag = (tuple(int(n) for n in dims), key, repr(rules), held)
        if self._last is None or self._last[0] != tag:
            self._last = (tag, make(rules))
        return self._last[1]

    def clocked(self, root: nn.Module, path: str) -> list[Any]:
        """Register the hooks that set the time on the nearest module above ``path`` whose
        forward takes a ``timestep``: before its forward, the time read from it; after (an
        error included), none. Their handles, for the caller to keep (none when the rule
        does not follow the time)."""
        if not follows_time(self.scaling):
            return []
        noise = None if self.trained is None else self.trained.noise_timestep
        parts = path.split(".") if path else []
        for n in range(len(parts) - 1, -1, -1):
            owner = root.get_submodule(".".join(parts[:n]))
            position = _timestep_position(owner)
            if position is not None:
                break
        else:
            raise PosencError(
                f"`scaling` {show(self.scaling)} follows the diffusion time, and no module above "
                f"{path or 'the model'} takes a `timestep` in its forward to read it from: give "
                "the rule its 'time'"
            )
        if noise is None:
            raise PosencError(
                f"`scaling` {show(self.scaling)} follows the diffusion time, and posenc does "
                f"not know the `timestep` {type(owner).__name__} receives at pure noise: give "
                "the rule its 'time'"
            )
        self.clock = Clock(noise, type(owner).__name__)
        start = partial(_read, self.clock, position)
        return [
            owner.register_forward_pre_hook(start, with_kwargs=True),
            owner.register_forward_hook(partial(_stop, self.clock), always_call=True),
        ]

    def scaling_words(self) -> str:
        """Words for the rule (the report, ``extra_repr``): ``", scaling=..."`` and where its
        time comes from; empty without one."""
        if self.scaling is None:
            return ""
        time = ""
        if follows_time(self.scaling):
            noise = "" if self.trained is None else f" / {self.trained.noise_timestep:g}"
            time = f", time = timestep{noise}"
        return f", scaling={self.scaling!r}{time}"
