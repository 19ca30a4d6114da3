"""Target registry: target name -> :class:`tcc.backends.target.Target`, built like the pass registry.

Lookup order:

1. targets registered with :func:`register_target` (tests, programmatic use);
2. the lazy built-in table :data:`tcc.backends.BUILTIN_TARGETS`
   (``cpu``, ``cuda``, ``cuda-sim``; loaded, once, by
   :func:`tcc.backends.target.builtin_target`);
3. the entry-point group ``tcc.targets`` (out-of-tree targets, no fork
   needed).  A package declares, e.g. in its ``pyproject.toml``::

       [project.entry-points."tcc.targets"]
       my-gpu = "my_package.target:MyGPU"

   pointing at a Target subclass (instantiated without arguments) or
   instance whose ``name`` equals the entry point's.

Nothing is imported until a target is asked for.  A name that an entry point
shares with a built-in or registered target, or that two packages offer with
different objects, is a :class:`TccError`; so is an unknown name, listing the
known ones.  The compiler (:mod:`tcc.build`, the CLI) asks the target it
finds here rather than branching on the name.
"""
from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

from tcc.backends import BUILTIN_TARGETS
from tcc.backends.target import Target, builtin_target, target_from_object
from tcc.ir.diagnostics import TccError

__all__ = ["ENTRY_POINT_GROUP", "available_targets", "get_target", "register_target", "unregister_target"]

ENTRY_POINT_GROUP = "tcc.targets"

# programmatically registered targets (tests, notebooks)
_REGISTERED: dict[str, Target] = {}
# entry-point scan, cached per ``importlib.metadata.entry_points`` function so a
# monkeypatched one (tests) is honoured without any cache clearing
_EP_CACHE: tuple[Any, dict[str, Any]] | None = None


def _entry_points() -> dict[str, Any]:
    """Entry points of group ``tcc.targets`` by name; conflicting ones raise TccError."""
    global _EP_CACHE
    fn = importlib.metadata.entry_points
    if _EP_CACHE is not None and _EP_CACHE[0] is fn:
        return _EP_CACHE[1]
    found: dict[str, Any] = {}
    for ep in fn(group=ENTRY_POINT_GROUP):
        prev = found.get(ep.name)
        if prev is not None and prev.value != ep.value:
            raise TccError(
                f"external target '{ep.name}' is provided twice, by '{prev.value}' and '{ep.value}' "
                f"(entry-point group '{ENTRY_POINT_GROUP}')"
            )
        found[ep.name] = ep
    _EP_CACHE = (fn, found)
    return found


def _check_conflicts(external: dict[str, Any]) -> None:
    for name, ep in external.items():
        if name in BUILTIN_TARGETS or name in _REGISTERED:
            what = "built-in" if name in BUILTIN_TARGETS else "registered"
            raise TccError(
                f"external target '{name}' ({ep.value}, entry-point group '{ENTRY_POINT_GROUP}') "
                f"conflicts with the {what} target of that name"
            )


def get_target(name: str) -> Target:
    """The target called ``name``; TccError if there is none (or a conflict)."""
    external = _entry_points()
    _check_conflicts(external)
    target = _REGISTERED.get(name)
    if target is not None:
        return target
    if name in BUILTIN_TARGETS:
        return builtin_target(name)
    if name in external:
        ep = external[name]
        return target_from_object(ep.load(), name, f"entry point '{name} = {ep.value}'")
    raise TccError(f"unknown target '{name}' (available: {', '.join(available_targets())})")


def available_targets() -> list[str]:
    """Every target name that can be asked for, sorted (nothing is imported)."""
    external = _entry_points()
    _check_conflicts(external)
    return sorted(set(BUILTIN_TARGETS) | set(_REGISTERED) | set(external))


def register_target(target: Target | type[Target], *, replace: bool = False) -> Target:
    """Make ``target`` (an instance, or a subclass to instantiate) available under its name.

    A name already taken by a built-in or another registered target is an
    error unless ``replace=True``.
    """
    if isinstance(target, type) and issubclass(target, Target):
        target = target()
    if not isinstance(target, Target):
        raise TypeError(f"register_target expects a Target, got {target!r}")
    name = target.name
    if not name:
        raise TccError(f"target {type(target).__qualname__} has no name")
    if not replace:
        if name in BUILTIN_TARGETS:
            raise TccError(f"target '{name}' is already a built-in target")
        other = _REGISTERED.get(name)
        if other is not None and other is not target:
            raise TccError(f"target '{name}' is already registered by {type(other).__module__}.{type(other).__qualname__}")
    _REGISTERED[name] = target
    return target


def unregister_target(name: str) -> None:
    """Undo :func:`register_target` (tests)."""
    _REGISTERED.pop(name, None)
