"""A name → implementation registry, explicit and without import-order magic."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from coda.errors import RegistryError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to implementations of one kind (critics, operators, strategies...).

    Args:
        kind: what the registry holds, used in error messages ("critic", "operator").
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        """Add `item` under `name`. Raises RegistryError if the name is taken."""
        if name in self._items:
            raise RegistryError(f"Duplicate {self.kind} '{name}': already registered")
        self._items[name] = item
        return item

    def add(self, name: str) -> Callable[[T], T]:
        """Decorator form of `register`."""

        def deco(item: T) -> T:
            return self.register(name, item)

        return deco

    def get(self, name: str) -> T:
        """Return the implementation for `name`. Raises RegistryError listing what exists."""
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(
                f"Unknown {self.kind} '{name}'. Available: {sorted(self._items)}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)
