"""Putting a stand-in in a model in place of an original, and taking it back.

:func:`put` puts a stand-in at every reference to the original module (or in place of a table
the original kept in a parameter, a buffer or a plain attribute) and keeps the original on the
stand-in (:class:`Placed`), for :func:`take_back` (``unpatch``, and ``patch`` switching modes).

A stand-in saves what its original saved. Each state-dict key the original held that the
stand-in does not hold itself is written when the state dict is taken, read from the
stand-in's attribute of the same name (the stand-ins read as their originals do: ``weight``,
``weights``, ``pos_embed``, a :class:`~posenc.torch._patching.TableParameter`'s table), in the
stand-in's dtype and shape and in the original's key order; nothing is stored for it. So a
patched model's checkpoint loads into the unpatched class with ``strict=True``. Such a key
arriving in ``load_state_dict`` goes to the stand-in's checkpoint check, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from posenc.torch._base import _Tracked
from posenc.torch._checkpoint import check_saved_table

PLACED = "_posenc_placed"  # the stand-in's record (in its __dict__: not a submodule)
WRITES = "_posenc_writes"  # the owner's keys to write (in its __dict__)


T = TypeVar("T")


def on_meta(build: Callable[[], T]) -> T:
    """What ``build()`` makes with torch's default device set to meta: a model's modules and
    shapes without its weights (how accelerate and ``from_pretrained`` start a large model)."""
    with torch.device("meta"):
        return build()


@dataclass
class Placed:
    """What :func:`put` replaced, kept on the stand-in.

    Attributes:
        original: the module (or the parameter, buffer or object) that was there, as it was:
            its tensors are not moved with the model; :func:`take_back` moves them as the
            stand-in moved since.
        mode: ``"exact"`` or ``"compat"``.
        description: what the stand-in is, in words (the report's ``replacement``).
        attribute: the name it took in its parent, when it replaced a table or an object kept
            in an attribute (None: it replaced a module at every reference).
        kind: ``"parameter"``, ``"buffer"``, ``"persistent buffer"`` or ``"object"`` (for an
            attribute), ``"module"`` otherwise.
        where: the stand-in's dtype and device when it was put in place.
        handles: the hooks registered on other modules for it (removed when taken back).
    """

    original: Any
    mode: str
    description: str
    attribute: str | None
    kind: str
    where: tuple[torch.dtype | None, torch.device | None]
    handles: list[RemovableHandle] = field(default_factory=list)


@dataclass
class _Writes:
    """An owner's keys written by its state-dict hook: its keys in the original's order, the
    ones the stand-in computes, and the hook's handle."""

    order: list[str]
    lost: list[str]
    handle: RemovableHandle


def placed(module: nn.Module) -> Placed | None:
    """The record of a stand-in :func:`put` in place (None: not one)."""
    record: Placed | None = module.__dict__.get(PLACED)
    return record


def saved_keys(
    module: nn.Module, attribute: str | None, new: nn.Module
) -> tuple[dict[str, Tensor], list[str]]:
    """``(before, lost)`` before a replacement: the state dict of the module whose state dict
    changes (``module``), in order, and the keys the stand-in ``new`` must write: for a
    module, those of ``module``'s keys ``new`` does not hold itself; for an attribute, its
    key when it is a parameter or a persistent buffer."""
    before = module.state_dict(keep_vars=True)
    if attribute is not None:
        return before, [attribute] if attribute in before else []
    own = set(new.state_dict(keep_vars=True))
    return before, [k for k in before if k not in own]


def unwritable(new: nn.Module, module: nn.Module, attribute: str | None) -> str | None:
    """Why ``new`` cannot write a key ``module`` saves (None: it writes them all, each with the
    original's shape and dtype)."""
    before, lost = saved_keys(module, attribute, new)
    for key in lost:
        value = _read(new, key if attribute is None else "")
        want = before[key]
        if value is None:
            return f"its checkpoint key {key!r} would be lost (the stand-in has no {key!r})"
        if value.shape != want.shape or value.dtype != want.dtype:
            return (
                f"its checkpoint key {key!r} is a {tuple(want.shape)} {want.dtype} tensor; the "
                f"stand-in's is {tuple(value.shape)} {value.dtype}"
            )
    return None


def _read(obj: Any, key: str) -> Tensor | None:
    """The tensor at the dotted attribute path ``key`` of ``obj`` (a table module's ``table``)."""
    for part in filter(None, key.split(".")):
        obj = getattr(obj, part, None)
    if not isinstance(obj, Tensor) and isinstance(getattr(obj, "table", None), Tensor):
        obj = obj.table
    return obj if isinstance(obj, Tensor) else None


def _write(module: nn.Module, state: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """The state-dict hook of an owner: writes its lost keys, in the original's order."""
    writes: _Writes | None = module.__dict__.get(WRITES)
    if writes is None:
        return
    tail = []
    for key in reversed(state):  # the module's own entries are the last ones written
        if not key.startswith(prefix):
            break
        tail.append(key)
    entries = {k: state.pop(k) for k in reversed(tail)}
    for key in writes.lost:
        if prefix + key not in entries:
            value = _read(module, key)
            assert value is not None, key  # checked when it was put in place
            entries[prefix + key] = value.detach()
    for key in writes.order:
        if prefix + key in entries:
            state[prefix + key] = entries.pop(prefix + key)
    state.update(entries)


def _add_writes(owner: nn.Module, order: list[str], lost: list[str]) -> None:
    writes: _Writes | None = owner.__dict__.get(WRITES)
    if writes is None:
        handle = owner.register_state_dict_post_hook(_write)  # type: ignore[no-untyped-call]
        owner.__dict__[WRITES] = _Writes(order, list(lost), handle)
    else:
        writes.lost += [k for k in lost if k not in writes.lost]


def _drop_writes(owner: nn.Module, keys: list[str]) -> None:
    writes: _Writes | None = owner.__dict__.get(WRITES)
    if writes is None:
        return
    writes.lost = [k for k in writes.lost if k not in keys]
    if not writes.lost:
        writes.handle.remove()
        del owner.__dict__[WRITES]


def where(new: nn.Module) -> tuple[torch.dtype | None, torch.device | None]:
    """The dtype and device a stand-in computes in (tracked, or of its first tensor)."""
    if isinstance(new, _Tracked):
        return new._dtype, new._device
    for t in (*new.parameters(), *new.buffers()):
        return (t.dtype if t.is_floating_point() else None), t.device
    return None, None


def route_key(parent: nn.Module, name: str, child: nn.Module) -> RemovableHandle:
    """Route the checkpoint key ``<parent>.<name>`` (a parameter ``child`` replaced) to
    ``child``'s checkpoint check: the same table loads quietly, another one is an error."""

    def hook(module: nn.Module, state: dict[str, Any], prefix: str, *args: Any) -> None:
        check_saved_table(child, state, prefix + name)

    handle: RemovableHandle = parent._register_load_state_dict_pre_hook(hook, with_module=True)  # type: ignore[no-untyped-call]
    return handle


def _references(root: nn.Module, module: Any) -> list[tuple[nn.Module, str]]:
    """Every ``(parent, name)`` at which ``module`` sits (a module may be shared)."""
    return [
        (parent, name)
        for parent in root.modules()
        for name, child in list(parent._modules.items())
        if child is module
    ]


def put(
    root: nn.Module,
    module: nn.Module,
    attribute: str | None,
    new: nn.Module,
    *,
    mode: str,
    description: str,
) -> None:
    """Put ``new`` in place of ``module`` (everywhere in ``root``), or of ``module``'s
    ``attribute``; ``new`` then writes the keys the original saved and keeps it."""
    before, lost = saved_keys(module, attribute, new)
    handles: list[RemovableHandle] = []
    if attribute is not None:  # a table kept in a parameter or buffer, or a plain attribute
        original = getattr(module, attribute)
        kind = (
            "parameter"
            if attribute in module._parameters
            else "object"
            if attribute not in module._buffers
            else "buffer"
            if attribute in module._non_persistent_buffers_set
            else "persistent buffer"
        )
        delattr(module, attribute)
        setattr(module, attribute, new)
        if kind != "object":  # its checkpoint key now checks the replacement's table
            handles.append(route_key(module, attribute, new))
        owner: nn.Module = module
    else:
        original, kind = module, "module"
        new.train(module.training)
        for parent, name in _references(root, module):
            setattr(parent, name, new)
        owner = new
    if lost:
        _add_writes(owner, list(before), lost)
    new.__dict__[PLACED] = Placed(original, mode, description, attribute, kind, where(new), handles)


def take_back(root: nn.Module, new: nn.Module) -> str | None:
    """Put the original :func:`put` kept on ``new`` back in its place; None when done, else
    why not (``new`` then stays)."""
    record = placed(new)
    assert record is not None
    refs = _references(root, new)
    if not refs:
        return "not found in the model"
    original = _as_now(record, new)
    if isinstance(original, str):
        return original
    if record.attribute is None:
        original.train(new.training)
        for parent, name in refs:
            setattr(parent, name, original)
    else:
        for parent, name in refs:
            delattr(parent, name)
            if record.kind == "parameter":
                parent.register_parameter(name, original)
            elif record.kind == "object":
                setattr(parent, name, original)
            else:
                parent.register_buffer(name, original, persistent=record.kind != "buffer")
            _drop_writes(parent, [name])
    for handle in record.handles:
        handle.remove()
    del new.__dict__[PLACED]
    return None


def _as_now(record: Placed, new: nn.Module) -> Any:
    """The original, moved as the stand-in moved since (``.to()``, ``.half()``), with values
    for what it left on the meta device (a model patched before it was loaded): the tables
    the stand-in writes; a string when some tensor has none."""
    original = record.original
    dtype, device = where(new)
    cast = dtype if dtype != record.where[0] else None  # a dtype the model moved to since
    if isinstance(original, Tensor):
        moved = _moved(original, new, "", cast, device)
        if isinstance(moved, str) or moved is original:
            return moved
        if isinstance(original, nn.Parameter):
            return nn.Parameter(moved, requires_grad=original.requires_grad)
        return moved
    if not isinstance(original, nn.Module):
        return original
    for path, owner in original.named_modules():
        for tensors in (owner._parameters, owner._buffers):
            for name, t in list(tensors.items()):
                if t is None:
                    continue
                moved = _moved(t, new, f"{path}.{name}" if path else name, cast, device)
                if isinstance(moved, str):
                    return moved
                if moved is not t:
                    keep = isinstance(t, nn.Parameter)
                    tensors[name] = nn.Parameter(moved, t.requires_grad) if keep else moved
    return original


def _moved(
    t: Tensor, new: nn.Module, key: str, dtype: torch.dtype | None, device: torch.device | None
) -> Tensor | str:
    """``t`` as the stand-in is now (itself when nothing changed), or why it cannot be."""
    if t.is_meta and device is not None and device.type != "meta":
        value = _read(new, key)
        if value is None or value.shape != t.shape:
            what = f"its {key!r}" if key else "its table"
            return f"built on the meta device: {what} has no value to restore (reload the model)"
        return value.detach().clone().to(t.dtype if dtype is None else dtype)
    if dtype is not None and t.is_floating_point() and t.dtype != dtype:
        t = t.detach().to(dtype)
    if device is not None and t.device != device:
        t = t.detach().to(device)
    return t
