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

from tcc.ir.diagnostics import TccError
from tcc.passes import BUILTIN_PASSES
from tcc.passes.pass_base import Pass

from .plugins import PluginTable

ENTRY_POINT_GROUP = "tcc.passes"

# registered passes, the built-in table and the entry-point scan
_TABLE: PluginTable[type[Pass]] = PluginTable("pass", ENTRY_POINT_GROUP, BUILTIN_PASSES, lambda cls: f"{cls.__module__}.{cls.__qualname__}")
# loaded built-in classes, by name (external ones are not cached: entry points may change)
_LOADED: dict[str, type[Pass]] = {}


def _check_class(cls: object, name: str, origin: str) -> type[Pass]:
    if not (isinstance(cls, type) and issubclass(cls, Pass)):
        raise TccError(f"{origin} for pass '{name}' is not a tcc Pass subclass: {cls!r}")
    if cls.name != name:
        raise TccError(f"{origin} is named '{name}' but its class {cls.__qualname__} has name '{cls.name}'")
    return cls


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
    external = _TABLE.entry_points()
    cls = _TABLE.registered.get(name) or _LOADED.get(name)
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
    return _TABLE.names()


def register_pass(cls: type[Pass], *, replace: bool = False) -> type[Pass]:
    """Make ``cls`` available under ``cls.name``; usable as a class decorator.

    A name already taken by a built-in or another registered class is an
    error unless ``replace=True``.
    """
    if not (isinstance(cls, type) and issubclass(cls, Pass)):
        raise TypeError(f"register_pass expects a Pass subclass, got {cls!r}")
    if not cls.name:
        raise TccError(f"pass class {cls.__qualname__} has no name")
    return _TABLE.register(cls.name, cls, replace)


def is_builtin_pass(p: Pass | type[Pass]) -> bool:
    """Whether ``p`` (a pass or its class) is tcc's own: its class is defined in the ``tcc``
    package.  The rule of the disk cache (:func:`tcc.build.disk_cache.cacheable`): a subclass of a
    built-in pass defined elsewhere, a class given to :func:`register_pass` or found through an
    entry point, is a plug-in, whose results tcc verifies by default (:class:`tcc.instruments.VerifyPlugins`)."""
    module = (p if isinstance(p, type) else type(p)).__module__
    return module == "tcc" or module.startswith("tcc.")


def pass_origin(p: Pass | type[Pass]) -> str:
    """Where a pass's class lives, as an entry point names it: ``module:QualName``."""
    cls = p if isinstance(p, type) else type(p)
    return f"{cls.__module__}:{cls.__qualname__}"


def unregister_pass(name: str) -> None:
    """Undo :func:`register_pass` (tests)."""
    _TABLE.registered.pop(name, None)
