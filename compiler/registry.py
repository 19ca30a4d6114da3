"""Pass registry: pass name -> pass class.

Lookup order (documented in :mod:`tcc.passes`):

1. classes registered with :func:`register_pass` (tests, programmatic use);
2. the lazy built-in table :data:`tcc.passes.BUILTIN_PASSES`;
3. the entry-point group ``tcc.passes`` (out-of-tree passes, no fork needed).

Nothing is imported until a pass is asked for.  An entry point must be named
like the class it points to (``entry point name == cls.name``); an external
name that clashes with a built-in or registered pass, or two packages
offering different classes under one name, is a :class:`TccError`.
"""
from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

from tcc.ir.diagnostics import TccError
from tcc.passes.pass_base import Pass
from tcc.passes import BUILTIN_PASSES

ENTRY_POINT_GROUP = "tcc.passes"

# programmatically registered passes (tests, notebooks)
_REGISTERED: dict[str, type[Pass]] = {}
# loaded built-in classes, by name (external ones are not cached: entry points may change)
_LOADED: dict[str, type[Pass]] = {}
# entry-point scan, cached per ``importlib.metadata.entry_points`` function so a
# monkeypatched one (tests) is honoured without any cache clearing
_EP_CACHE: tuple[Any, dict[str, Any]] | None = None


def _check_class(cls: Any, name: str, origin: str) -> type[Pass]:
    if not (isinstance(cls, type) and issubclass(cls, Pass)):
        raise TccError(f"{origin} for pass '{name}' is not a tcc Pass subclass: {cls!r}")
    if cls.name != name:
        raise TccError(f"{origin} is named '{name}' but its class {cls.__qualname__} has name '{cls.name}'")
    return cls


def _entry_points() -> dict[str, Any]:
    """Entry points of group ``tcc.passes`` by name; conflicting ones raise TccError."""
    global _EP_CACHE
    fn = importlib.metadata.entry_points
    if _EP_CACHE is not None and _EP_CACHE[0] is fn:
        return _EP_CACHE[1]
    eps = fn(group=ENTRY_POINT_GROUP)
    found: dict[str, Any] = {}
    for ep in eps:
        prev = found.get(ep.name)
        if prev is not None and prev.value != ep.value:
            raise TccError(
                f"external pass '{ep.name}' is provided twice, by '{prev.value}' and '{ep.value}' "
                f"(entry-point group '{ENTRY_POINT_GROUP}')"
            )
        found[ep.name] = ep
    _EP_CACHE = (fn, found)
    return found


def _check_conflicts(external: dict[str, Any]) -> None:
    for name, ep in external.items():
        if name in BUILTIN_PASSES:
            raise TccError(
                f"external pass '{name}' ({ep.value}, entry-point group '{ENTRY_POINT_GROUP}') "
                f"conflicts with the built-in pass of that name"
            )
        reg = _REGISTERED.get(name)
        if reg is not None:
            raise TccError(
                f"external pass '{name}' ({ep.value}, entry-point group '{ENTRY_POINT_GROUP}') "
                f"conflicts with the registered pass {reg.__module__}.{reg.__qualname__}"
            )


def _load_builtin(name: str) -> type[Pass]:
    target = BUILTIN_PASSES[name]
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise TccError(f"built-in pass '{name}' is not available: module {module_name} is missing") from None
    try:
        cls = getattr(module, attr)
    except AttributeError:
        raise TccError(f"built-in pass '{name}' is not available: {module_name} has no class {attr}") from None
    return _check_class(cls, name, f"built-in table entry '{target}'")


def get_pass_class(name: str) -> type[Pass]:
    """The pass class called ``name``; TccError if there is none (or a conflict)."""
    external = _entry_points()
    _check_conflicts(external)
    cls = _REGISTERED.get(name) or _LOADED.get(name)
    if cls is not None:
        return cls
    if name in BUILTIN_PASSES:
        cls = _LOADED[name] = _load_builtin(name)
        return cls
    if name in external:
        ep = external[name]
        return _check_class(ep.load(), name, f"entry point '{name} = {ep.value}'")
    raise TccError(f"unknown pass '{name}' (known passes: {', '.join(available_passes())})")


def available_passes() -> list[str]:
    """Every pass name that can be asked for, sorted (nothing is imported)."""
    external = _entry_points()
    _check_conflicts(external)
    return sorted(set(BUILTIN_PASSES) | set(_REGISTERED) | set(external))


def register_pass(cls: type[Pass], *, replace: bool = False) -> type[Pass]:
    """Make ``cls`` available under ``cls.name``; usable as a class decorator.

    A name already taken by a built-in or another registered class is an
    error unless ``replace=True``.
    """
    if not (isinstance(cls, type) and issubclass(cls, Pass)):
        raise TypeError(f"register_pass expects a Pass subclass, got {cls!r}")
    name = cls.name
    if not name:
        raise TccError(f"pass class {cls.__qualname__} has no name")
    if not replace:
        if name in BUILTIN_PASSES:
            raise TccError(f"pass '{name}' is already a built-in pass")
        other = _REGISTERED.get(name)
        if other is not None and other is not cls:
            raise TccError(f"pass '{name}' is already registered by {other.__module__}.{other.__qualname__}")
    _REGISTERED[name] = cls
    return cls


def unregister_pass(name: str) -> None:
    """Undo :func:`register_pass` (tests)."""
    _REGISTERED.pop(name, None)
