"""The patch contract, in one place for every family's tests: on a small random-weight model,
``patch(compat="original")`` replaces exactly the positional modules and leaves every output
``torch.equal`` (float32, bfloat16 activations on the float32 model, and after
``.to(torch.bfloat16)``); ``patch(model)`` switches them to
exact, which the family's float64 reference checks; the original checkpoint loads into the
patched model with ``strict=True`` and the patched model's into the original class; patching
twice is a no-op."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from posenc.torch import patch


def check_patch_contract(
    model: torch.nn.Module,
    paths: Sequence[str],
    outputs: Callable[[torch.nn.Module, torch.dtype], Iterable[torch.Tensor]],
    exact: Callable[[torch.nn.Module, torch.nn.Module], Any],
    *,
    bf16: bool = True,
) -> torch.nn.Module:
    """Run the contract on ``model`` (patched in place; returned, exact).

    Args:
        model: the unpatched model.
        paths: the modules ``patch`` must replace, as the report names them.
        outputs: ``(model, dtype) -> tensors`` compared with ``torch.equal`` between the
            unpatched and the compat-patched model (the model's forward, or its positional
            modules' tables on the family's positions), for activations of ``dtype``
            (float32, bfloat16).
        exact: ``(original, patched) -> None``: asserts the exact tables against the
            family's float64 reference (written in the test, from the formula).
        bf16: also compare after ``.to(torch.bfloat16)``.
    """
    original = copy.deepcopy(model)
    report = patch(model, compat="original")
    assert sorted(r.path for r in report.replaced) == sorted(paths), str(report)
    _same(outputs(original, torch.float32), outputs(model, torch.float32))
    _same(outputs(original, torch.bfloat16), outputs(model, torch.bfloat16))  # bf16 activations
    if bf16:
        low = copy.deepcopy(original).to(torch.bfloat16)
        want = list(outputs(low, torch.bfloat16))
        patch(low, compat="original")
        _same(want, outputs(low, torch.bfloat16))

    switched = patch(model)
    assert sorted(r.path for r in switched.replaced) == sorted(paths), str(switched)
    exact(original, model)

    model.load_state_dict(original.state_dict(), strict=True)
    saved = model.state_dict()
    assert list(saved) == list(original.state_dict())  # the same keys, in the same order
    copy.deepcopy(original).load_state_dict(saved, strict=True)
    assert not patch(model).replaced  # twice: a no-op
    return model


def _same(want: Iterable[torch.Tensor], got: Iterable[torch.Tensor]) -> None:
    for a, b in zip(want, got, strict=True):
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        assert torch.equal(a, b)
