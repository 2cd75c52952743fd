"""The patch contract, in one place for every family's tests: on a small random-weight model,
``patch(compat="original")`` replaces exactly the positional modules (and says which original
each was) and leaves every output ``torch.equal`` (float32, bfloat16 activations on the float32
model, and the model in bfloat16, cast before and after patching); ``patch(model)`` switches
the same stand-ins to exact (so does a fresh ``patch``), which the family's float64 reference
checks. In either mode the original checkpoint loads into the patched model with
``strict=True`` and the patched model's into the original class, under the same keys in the
same order, and patching again replaces nothing and says again what it left alone.

``forward`` runs a model on keyword inputs as the contract compares it; ``forwards`` makes the
contract's ``outputs`` of a list of such calls, and ``assert_outputs_close`` compares an exact
model's outputs with the original's on them."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posenc.torch import patch
from posenc.torch.patch import PatchReport


@dataclass(frozen=True)
class Contract:
    """What a contract run leaves for a test's own checks: the patched model (exact) and the
    reports of the compat and the exact patch."""

    model: torch.nn.Module
    compat: PatchReport
    exact: PatchReport


def check_patch_contract(
    model: torch.nn.Module,
    paths: Sequence[str] | Mapping[str, str],
    outputs: Callable[[torch.nn.Module, torch.dtype], Iterable[torch.Tensor]],
    exact: Callable[[torch.nn.Module, torch.nn.Module], Any],
    *,
    left_alone: Sequence[str] = (),
    bf16: bool = True,
    cast_first: bool = True,
) -> Contract:
    """Run the contract on ``model`` (patched in place, exact at the end).

    Args:
        model: the unpatched model.
        paths: the modules ``patch`` must replace, as the report names them; a mapping gives
            each one's original class name too, as the report's ``original`` says it.
        outputs: ``(model, dtype) -> tensors`` compared with ``torch.equal`` between the
            unpatched and the compat-patched model (the model's forward, or its positional
            modules' tables on the family's positions, at each size the test names), for
            activations of ``dtype`` (float32; bfloat16, called under CPU autocast: see
            ``forward``).
        exact: ``(original, patched) -> None``: asserts the exact model against the family's
            float64 reference (written in the test, from the formula); run on the model
            switched from compat to exact and on a fresh copy patched exact.
        left_alone: the rows the report leaves alone (learned tables, modules posenc does not
            cover), as it names them: none else.
        bf16: also compare the model cast to bfloat16, before and after patching.
        cast_first: with ``bf16``, also patch the model cast first (False where the original
            cannot be read once cast: Llama 4's complex table, which ``.to()`` makes real).
    """
    original = copy.deepcopy(model)
    report = patch(model, compat="original")
    _replaced(report, paths, "compat", left_alone)
    _twice(model, report, "original")
    _loads(model, original)
    _same(outputs(original, torch.float32), outputs(model, torch.float32))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16 activations, and any matmul
        _same(outputs(original, torch.bfloat16), outputs(model, torch.bfloat16))
    if bf16:
        low = copy.deepcopy(original).to(torch.bfloat16)
        want = list(outputs(low, torch.bfloat16))
        if cast_first:
            _replaced(patch(low, compat="original"), paths, "compat", left_alone)
            _same(want, outputs(low, torch.bfloat16))
        _same(want, outputs(copy.deepcopy(model).to(torch.bfloat16), torch.bfloat16))

    kinds = {r.path: type(model.get_submodule(r.path)) for r in report.replaced}
    switched = patch(model)
    _replaced(switched, paths, "exact", left_alone)
    assert {p: type(model.get_submodule(p)) for p in kinds} == kinds  # one stand-in, two modes
    exact(original, model)
    fresh = copy.deepcopy(original)  # exact at once, the usual way in
    direct = patch(fresh)
    _replaced(direct, paths, "exact", left_alone)
    assert [(r.path, r.replacement, r.max_diff) for r in direct] == [
        (r.path, r.replacement, r.max_diff) for r in switched
    ], (str(direct), str(switched))
    exact(original, fresh)

    _loads(model, original)
    _twice(model, switched, None)
    return Contract(model, report, switched)


def _loads(model: torch.nn.Module, original: torch.nn.Module) -> None:
    """The original checkpoint loads into the patched model, strictly; the patched model's
    has the same keys in the same order, and loads into the original class."""
    model.load_state_dict(original.state_dict(), strict=True)
    saved = model.state_dict()
    assert list(saved) == list(original.state_dict())
    copy.deepcopy(original).load_state_dict(saved, strict=True)


def _twice(model: torch.nn.Module, first: PatchReport, compat: str | None) -> None:
    """Patching again in the same mode replaces nothing, keeps the stand-ins in place and says
    again what it left alone."""
    placed = {r.path: model.get_submodule(r.path) for r in first.replaced}
    again = patch(model, compat=compat)
    assert [(r.path, r.note) for r in again] == [
        (r.path, r.note) for r in first if not r.replaced
    ], str(again)
    assert all(model.get_submodule(path) is module for path, module in placed.items())


def forward(
    model: torch.nn.Module,
    inputs: Mapping[str, Any] | torch.Tensor,
    dtype: torch.dtype,
    method: str = "__call__",
) -> list[Any]:
    """``model(**inputs)``'s tensors (or ``model.<method>(**inputs)``'s: timm's
    ``forward_features``; a tensor is passed as the one positional input), in order, without
    gradients: as given for float32; for bfloat16, under CPU autocast on a float32 model, and
    with the floating inputs (and those in lists) cast on a bfloat16 one (position ids,
    inputs named ``*ids``, kept as they are)."""
    keywords = {} if isinstance(inputs, torch.Tensor) else dict(inputs)
    args = (inputs,) if isinstance(inputs, torch.Tensor) else ()
    if dtype == torch.float32:
        scope: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    elif next(model.parameters()).dtype == torch.float32:
        scope = torch.autocast("cpu", dtype=dtype)
    else:
        scope = contextlib.nullcontext()
        args = tuple(_cast(a, dtype) for a in args)
        keywords = {k: v if k.endswith("ids") else _cast(v, dtype) for k, v in keywords.items()}
    with torch.no_grad(), scope:
        return list(_tensors(getattr(model, method)(*args, **keywords)))


def forwards(
    calls: Sequence[Mapping[str, Any]], method: str = "__call__"
) -> Callable[[torch.nn.Module, torch.dtype], list[Any]]:
    """The ``outputs`` of :func:`check_patch_contract` for a model called on each of ``calls``
    (keyword inputs): :func:`forward`'s tensors, call after call."""

    assert calls, "no calls"

    def outputs(model: torch.nn.Module, dtype: torch.dtype) -> list[Any]:
        return [t for inputs in calls for t in forward(model, inputs, dtype, method)]

    return outputs


def assert_outputs_close(
    original: torch.nn.Module,
    patched: torch.nn.Module,
    calls: Sequence[Mapping[str, Any]],
    atol: float,
) -> None:
    """The exact model's float32 outputs within ``atol`` of the original's on each call (the
    float32 noise of the original's tables through the layers)."""
    assert calls, "no calls"
    for inputs in calls:
        got, want = (
            forward(patched, inputs, torch.float32),
            forward(original, inputs, torch.float32),
        )
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=atol)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, (list, tuple)):  # Bria-FIBO's text_encoder_layers
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)


def _replaced(
    report: PatchReport,
    paths: Sequence[str] | Mapping[str, str],
    mode: str,
    left_alone: Sequence[str],
) -> None:
    replaced = report.replaced
    assert sorted(r.path for r in replaced) == sorted(paths), str(report)
    assert sorted(r.path for r in report.left_alone) == sorted(left_alone), str(report)
    assert all(r.mode == mode for r in replaced), str(report)
    if isinstance(paths, Mapping):
        assert {r.path: r.original for r in replaced} == dict(paths), str(report)


def _same(want: Iterable[torch.Tensor], got: Iterable[torch.Tensor]) -> None:
    # each side whole before the other: an ``outputs`` generator that yields inside an
    # autocast scope would otherwise interleave two scopes and leave autocast on
    want, got = list(want), list(got)
    assert want, "no outputs to compare"
    for a, b in zip(want, got, strict=True):
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        assert torch.equal(a, b)
