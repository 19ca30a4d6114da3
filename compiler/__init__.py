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
import logging
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
    "CompiledProgram": "tcc.runtime",
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
    "CheckResult": "tcc.fdcheck",
}

__all__ = sorted(_LAZY)


_SUBMODULES = ("torch", "jax", "dask")  # tcc.torch, tcc.jax, tcc.dask: imported on first use (they import their framework only when called)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"tcc.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tcc' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
