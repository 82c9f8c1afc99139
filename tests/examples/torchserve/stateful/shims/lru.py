"""Ours, not from pytorch/serve: the part of the `lru-dict` package (``from lru import LRU``) that
TorchServe's stateful example handler uses, so the example runs without installing it: a mapping
that keeps the ``capacity`` most recently used keys and forgets the oldest beyond them."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class LRU:
    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self._items: OrderedDict[Any, Any] = OrderedDict()

    def has_key(self, key: Any) -> bool:
        return key in self._items

    def __contains__(self, key: Any) -> bool:
        return key in self._items

    def __getitem__(self, key: Any) -> Any:
        self._items.move_to_end(key)
        return self._items[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
