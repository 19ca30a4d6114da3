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

from tcc.backends import BUILTIN_TARGETS
from tcc.backends.target import Target, builtin_target, target_from_object
from tcc.ir.diagnostics import TccError

from .plugins import PluginTable

__all__ = ["ENTRY_POINT_GROUP", "available_targets", "get_target", "register_target", "unregister_target"]

ENTRY_POINT_GROUP = "tcc.targets"

# registered targets, the built-in table and the entry-point scan
_TABLE: PluginTable[Target] = PluginTable("target", ENTRY_POINT_GROUP, BUILTIN_TARGETS, lambda t: f"{type(t).__module__}.{type(t).__qualname__}")


def get_target(name: str) -> Target:
    """The target called ``name``; TccError if there is none (or a conflict)."""
    external = _TABLE.entry_points()
    target = _TABLE.registered.get(name)
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
    return _TABLE.names()


def register_target(target: Target | type[Target], *, replace: bool = False) -> Target:
    """Make ``target`` (an instance, or a subclass to instantiate) available under its name.

    A name already taken by a built-in or another registered target is an
    error unless ``replace=True``.
    """
    if isinstance(target, type) and issubclass(target, Target):
        target = target()
    if not isinstance(target, Target):
        raise TypeError(f"register_target expects a Target, got {target!r}")
    if not target.name:
        raise TccError(f"target {type(target).__qualname__} has no name")
    return _TABLE.register(target.name, target, replace)


def unregister_target(name: str) -> None:
    """Undo :func:`register_target` (tests)."""
    _TABLE.registered.pop(name, None)
