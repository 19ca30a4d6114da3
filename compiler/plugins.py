"""What the pass registry and the target registry share: a name table of plug-ins of one kind.

Passes (:mod:`tcc.registry`) and targets (:mod:`tcc.targets`) are found the
same way -- programmatic registrations, then a lazy built-in table of
``"module:Object"`` strings, then an entry-point group -- and refuse the same
mistakes (a name offered twice, an external name shadowing a built-in or
registered one) with the same messages.  One class holds that logic so the two
registries differ only in what a valid entry is.
"""
from __future__ import annotations

import importlib.metadata
from typing import Any, Callable, Generic, Mapping, TypeVar

from tcc.ir.diagnostics import TccError

__all__ = ["PluginTable"]

T = TypeVar("T")


class PluginTable(Generic[T]):
    """Plug-ins of one ``kind`` ("pass", "target") by name.

    ``describe`` names a registered plug-in in messages (its class's
    ``module.qualname``).  The entry-point scan is cached per
    ``importlib.metadata.entry_points`` function, so a monkeypatched one
    (tests) is honoured without any cache clearing.
    """

    def __init__(self, kind: str, group: str, builtin: Mapping[str, str], describe: Callable[[T], str]) -> None:
        self.kind = kind
        self.group = group
        self.builtin = builtin
        self.describe = describe
        self.registered: dict[str, T] = {}
        self._ep_cache: tuple[Any, dict[str, Any]] | None = None

    def entry_points(self) -> dict[str, Any]:
        """Entry points of the group by name, checked against the built-in and registered names."""
        fn = importlib.metadata.entry_points
        if self._ep_cache is None or self._ep_cache[0] is not fn:
            found: dict[str, Any] = {}
            for ep in fn(group=self.group):
                prev = found.get(ep.name)
                if prev is not None and prev.value != ep.value:
                    raise TccError(
                        f"external {self.kind} '{ep.name}' is provided twice, by '{prev.value}' and '{ep.value}' "
                        f"(entry-point group '{self.group}')"
                    )
                found[ep.name] = ep
            self._ep_cache = (fn, found)
        external = self._ep_cache[1]
        for name, ep in external.items():
            where = f"external {self.kind} '{name}' ({ep.value}, entry-point group '{self.group}') conflicts with the"
            if name in self.builtin:
                raise TccError(f"{where} built-in {self.kind} of that name")
            reg = self.registered.get(name)
            if reg is not None:
                raise TccError(f"{where} registered {self.kind} {self.describe(reg)}")
        return external

    def names(self) -> list[str]:
        """Every name that can be asked for, sorted (nothing is imported)."""
        return sorted(set(self.builtin) | set(self.registered) | set(self.entry_points()))

    def register(self, name: str, obj: T, replace: bool) -> T:
        """Make ``obj`` available under ``name``; a taken name is an error unless ``replace``."""
        if not replace:
            if name in self.builtin:
                raise TccError(f"{self.kind} '{name}' is already a built-in {self.kind}")
            other = self.registered.get(name)
            if other is not None and other is not obj:
                raise TccError(f"{self.kind} '{name}' is already registered by {self.describe(other)}")
        self.registered[name] = obj
        return obj
