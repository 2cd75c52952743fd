"""Caches: every cache of the core is one of these, bounded in bytes and thread-safe.

A value is kept under a key that holds everything its content depends on; the least recently
used values are dropped once the bytes kept pass the limit, and a value larger than the limit
is computed but not kept. Values are shared, never handed out to be written: callers copy.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class BoundedCache:
    """Least-recently-used values up to ``limit`` bytes in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.size = 0
        self.lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The value kept under ``key``, or None."""
        with self.lock:
            hit = self.items.get(key)
            if hit is None:
                return None
            self.items.move_to_end(key)
            return hit[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        """Keep ``value`` (``size`` bytes) unless it alone is over the limit."""
        with self.lock:
            if size > self.limit or key in self.items:
                return
            self.items[key] = (value, size)
            self.size += size
            self._shrink(self.limit)

    def get_or_make(self, key: Hashable, make: Callable[[], T], size: Callable[[T], int]) -> T:
        """The value under ``key``, made (outside the lock) and kept when missing."""
        value: T | None = self.get(key)
        if value is None:
            value = make()
            self.put(key, value, size(value))
        return value

    def resize(self, limit: int) -> None:
        with self.lock:
            self.limit = limit
            self._shrink(limit)

    def _shrink(self, limit: int) -> None:
        while self.size > limit:
            _, (_, size) = self.items.popitem(last=False)
            self.size -= size


def nbytes(*arrays: Any) -> int:
    """Bytes held by NumPy arrays or torch tensors (and tuples of them)."""
    total = 0
    for a in arrays:
        if isinstance(a, tuple | list):
            total += nbytes(*a)
        elif hasattr(a, "nbytes"):
            total += int(a.nbytes)
        elif hasattr(a, "element_size"):
            total += int(a.element_size() * a.numel())
    return total


class derived(Generic[T]):
    """A property computed once from an object's data and kept in its ``memo`` dict, which
    copies of the object that hold the same data share (a plan under another label)."""

    def __init__(self, fn: Callable[[Any], T]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        memo = obj.memo
        if self.name not in memo:
            memo[self.name] = self.fn(obj)
        value: T = memo[self.name]
        return value
