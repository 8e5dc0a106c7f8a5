"""A name → implementation registry, explicit and without import-order magic.

A registry may also name an entry-point group (`importlib.metadata`): implementations that installed packages
declare there (`[project.entry-points."<group>"]` in their pyproject.toml) are listed with the registered
ones and imported the first time they are asked for. A backend is added that way without editing the code
that looks it up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from coda.errors import RegistryError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to implementations of one kind (critics, operators, strategies...).

    Args:
        kind: what the registry holds, used in error messages ("critic", "operator").
        entry_points: an entry-point group whose implementations are found on first use ("coda.backends").
    """

    def __init__(self, kind: str, entry_points: str | None = None) -> None:
        self.kind = kind
        self.group = entry_points
        self._items: dict[str, T] = {}
        self._declared: dict[str, Any] | None = None  # name -> importlib.metadata.EntryPoint, read once

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

    def _entry_points(self) -> dict[str, Any]:
        if self._declared is None:
            from importlib.metadata import entry_points

            self._declared = {ep.name: ep for ep in entry_points(group=self.group)} if self.group else {}
        return self._declared

    def get(self, name: str) -> T:
        """Return the implementation for `name` (importing a declared entry point the first time). Raises
        RegistryError listing what exists, or naming the entry point that failed to import."""
        if name in self._items:
            return self._items[name]
        ep = self._entry_points().get(name)
        if ep is None:
            raise RegistryError(f"Unknown {self.kind} '{name}'. Available: {self.names()}")
        try:
            item = ep.load()
        except Exception as e:  # noqa: BLE001 - any import failure of a plugin is reported the same way
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise RegistryError(f"{self.kind} '{name}' (entry point {ep.value!r} of group '{self.group}') "
                                f"failed to import: {first}") from e
        self._items[name] = item
        return item

    def names(self) -> list[str]:
        return sorted({*self._items, *self._entry_points()})

    def __contains__(self, name: object) -> bool:
        return name in self._items or name in self._entry_points()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
