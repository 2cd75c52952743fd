"""The accuracy rule, checked before any work: which positions an evaluation can serve exactly.

An angle ``x * w`` is formed in float64 from a float64 frequency, so it carries a relative
error of about ``1.5 * 2^-52``. Below ``2^27`` rad that is under ``5e-8``, which with float32's
own rounding keeps every value within ``1e-7`` of the exact one; beyond it the float32 result
would be wrong, so such positions are refused. Frequencies that are powers of two (NeRF) make
exact products, and only need the angle to be finite. The float32-only evaluator has rules of
its own (:func:`check_float32_only`).
"""

from __future__ import annotations

from typing import Any

from posenc.errors import MAX_POSITION, PosencError
from posenc.evaluate.libs.base import Backend, largest
from posenc.spec.layout import Plan

ANGLE_LIMIT = float(1 << 27)
"""Largest angle ``|x| * w`` (rad) whose float64 rounding keeps float32 output exact."""


def check_angles(
    largest: float, bound: float | None, what: str, *, exact: bool, label: str = ""
) -> None:
    """The accuracy rule: ``bound * largest`` (the largest frequency) stays below
    ``ANGLE_LIMIT`` (finite for power-of-two frequencies, whose products are exact). Plain
    Python floats, so a tracer can run it."""
    if bound is None:
        return
    angle = bound * largest
    limit = 2.0**1000 if exact else ANGLE_LIMIT
    if not angle < limit:
        rule = (
            "finite angles"
            if exact
            else "angles below 2^27 rad, where float64 angles still give float32 accuracy"
        )
        raise PosencError(
            f"{what} must keep |position| x frequency within {rule}: positions reach {bound:.6g} "
            f"and the largest frequency{' of preset ' + label if label else ''} is {largest:.6g}, "
            f"an angle of {angle:.6g}"
        )


def check_float32_only(largest: float, bound: float | None, what: str) -> None:
    """What the float32-only evaluator (:mod:`posenc.evaluate.float32`) needs: positions below 2^24
    (where every integer is a float32) and frequencies below 2^15."""
    if largest >= 2.0**15:
        raise PosencError(
            f"float32-only evaluation (exported graphs, MPS) needs frequencies below 2^15, "
            f"got {largest:.6g}; evaluate eagerly, or on a device with float64"
        )
    if bound is not None and bound >= 2.0**24:
        raise PosencError(
            f"{what} must stay below 2^24 in float32-only evaluation (exported graphs, MPS), "
            f"got {bound:.6g}"
        )


def check_plan(
    plan: Plan, bound: float | None, what: str, *, float32_only: bool, dtype: Any
) -> None:
    """The accuracy rule for ``plan`` at positions of magnitude up to ``bound`` (None: not
    known on the host), and included inputs (NeRF) that the output ``dtype`` can hold."""
    constants = plan.constants
    check_angles(constants.largest, bound, what, exact=constants.exact, label=plan.label)
    if float32_only:
        check_float32_only(constants.largest, bound, what)
    if constants.identities and bound is not None and bound > (top := largest(dtype)):
        raise PosencError(
            f"{what} must fit the output dtype {dtype} (the positions themselves are "
            f"channels of this encoding): its largest value is {top:g}, got {bound:g}"
        )


def check_on_device(plan: Plan, backend: Backend, x: Any, *, float32_only: bool) -> None:
    """The accuracy rule for positions ``x`` whose values are not read on the host: checked
    on the device, by the backend."""
    c = plan.constants
    if not c.largest > 0:
        return
    if not c.exact:
        backend.check_on_device(x, min(MAX_POSITION, ANGLE_LIMIT / c.largest), plan.angle_rule)
    if float32_only:
        message = "`positions` must stay below 2^24 in float32-only graphs"
        backend.check_on_device(x, 2.0**24, message)
