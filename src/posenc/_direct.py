"""The direct formula: a plan evaluated with plain array operations, in any library.

Angles ``x * w`` in float64, their sine and cosine, the basis columns put in channel order,
one rounding. It serves what the engine (:mod:`posenc._engine`) cannot: traced torch code
(``torch.compile``, ``torch.export``, ONNX), meta tensors (shapes and dtypes only), JAX with
x64 on, and any Python Array API library. The library is reached through
:class:`~posenc._backends.Ops`; the numbers are the float64 value rounded once, as the
engine's, within one ulp of them (both are exact to the output's rounding).
"""

from __future__ import annotations

from typing import Any

from ._backends import Ops, round_once
from ._layout import Plan


def points(ops: Ops, x: Any, plan: Plan, dtype: Any, padding_idx: int | None = None) -> Any:
    """``[N, k]`` positions -> ``[N, dim]`` in ``dtype``."""
    c = plan.constants
    x64 = ops.astype(x, ops.float64)
    w = ops.asarray(c.omega, ops.float64, x64)
    if plan.ndim == 1:
        theta = x64 * w
    else:
        theta = ops.take(x64, ops.asarray(c.axis, ops.int64, x64), axis=1) * w
    basis = ops.reshape(
        ops.stack([ops.sin(theta), ops.cos(theta)], axis=-1), (-1, 2 * len(c.omega))
    )
    basis = ops.concat([basis, x64[:, :1] * 0.0, x64], axis=1)
    out = round_once(ops.take(basis, ops.asarray(c.columns, ops.int64, x64), axis=1), dtype, ops)
    if padding_idx is not None:
        out = ops.where(x64[:, :1] == float(padding_idx), out * 0, out)
    return out


def grid(ops: Ops, axes: list[Any], order: list[int], plan: Plan, dtype: Any) -> Any:
    """Per-axis float64 positions ``[L_a]`` -> ``[L_order[0], …, L_order[k-1], dim]``.

    Separable: each axis evaluates its own frequencies into its own channels (zero in the
    others'), and the parts add up exactly.
    """
    k = len(axes)
    out: Any = None
    for a, pos in enumerate(axes):
        omega, cols = plan.constants.axes[a]
        x64 = ops.reshape(ops.astype(pos, ops.float64), (-1, 1))
        theta = x64 * ops.asarray(omega, ops.float64, x64)
        basis = ops.reshape(
            ops.stack([ops.sin(theta), ops.cos(theta)], axis=-1), (x64.shape[0], 2 * len(omega))
        )
        basis = ops.concat([basis, x64 * 0.0, x64], axis=1)
        part = ops.take(basis, ops.asarray(cols, ops.int64, x64), axis=1)
        view = [1] * k
        view[order.index(a)] = x64.shape[0]
        part = ops.reshape(part, (*view, plan.dim))
        out = part if out is None else out + part
    return round_once(out, dtype, ops)
