"""tcc: a staged tensor-algebra compiler with exact symbolic derivatives.

The public API is re-exported lazily (module ``__getattr__``), so ``import
tcc`` imports nothing else: importing ``tcc.ir.parser`` (which runs this
file first, as the parent package) does not pull in the compiler layer::

    import tcc
    program = tcc.parse("examples/urban.tcc")
    derivative = tcc.grad(program, of="f", wrt=["a", "d"])
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import logging
import sys
from typing import Any

__version__ = "0.1.0"

# a library prints no log records unless the application configures logging (tcc -v: tcc.logconfig)
logging.getLogger(__name__).addHandler(logging.NullHandler())

_LAZY = {
    "parse": "tcc.api",
    "grad": "tcc.api",
    "run": "tcc.api",
    "check": "tcc.api",
    "compile": "tcc.api",
    "transform": "tcc.api",
    "jacobian": "tcc.derivatives",
    "hessian": "tcc.derivatives",
    "jvp": "tcc.derivatives",
    "Derivative": "tcc.derivatives",
    "CompiledProgram": "tcc.runtime.compiled",
    "CallError": "tcc.backends.target",
    "read_source": "tcc.api",
    "TccError": "tcc.ir.diagnostics",
    "Pass": "tcc.passes.pass_base",
    "Level": "tcc.passes.pass_base",
    "PassContext": "tcc.passes.pass_base",
    "parse_pipeline": "tcc.pipeline",
    "run_pipeline": "tcc.pipeline",
    "grad_pipeline": "tcc.pipeline",
    "get_pass_class": "tcc.registry",
    "available_passes": "tcc.registry",
    "register_pass": "tcc.registry",
    "CheckResult": "tcc.reference.fdcheck",
}

__all__ = sorted(_LAZY)


#: Public module names that live elsewhere: ``tcc.torch`` is :mod:`tcc.integrations.torch`, ...
#: Imported on first use (each imports its framework only when called).
_ALIASES = {f"tcc.{name}": f"tcc.integrations.{name}" for name in ("torch", "jax", "dask")}


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``import tcc.torch`` give the module :mod:`tcc.integrations.torch` itself (one module
    object under two names, so its state and its classes are the same whichever name is used)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _ALIASES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: Any) -> Any:
        return importlib.import_module(_ALIASES[spec.name])

    def exec_module(self, module: Any) -> None:
        """The real module ran when it was imported under its own name."""


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.append(_AliasFinder())


def __getattr__(name: str) -> Any:
    if f"tcc.{name}" in _ALIASES:
        return importlib.import_module(f"tcc.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tcc' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
