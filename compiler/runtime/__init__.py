"""Running compiled programs: :class:`~tcc.runtime.compiled.CompiledProgram` (binding arrays,
threads, the calls into kernels) and what it uses -- pools of intermediates and results,
foreign arrays (DLPack, CUDA arrays), call-time contraction orders, and the external
kernels (:mod:`tcc.runtime.externs`).

The public names of :mod:`tcc.runtime.compiled` (its ``__all__``) are re-exported lazily
(``tcc.runtime.CompiledProgram``, ``from tcc.runtime import CallError``), so that importing a small module of this package
(``tcc.runtime.externs.window_view``, which the reference interpreter uses) does not load
the code generator behind ``compiled``.
"""
from __future__ import annotations

import importlib
from typing import Any

def __getattr__(name: str) -> Any:
    compiled = importlib.import_module("tcc.runtime.compiled")
    if name in compiled.__all__:
        return getattr(compiled, name)
    raise AttributeError(f"module 'tcc.runtime' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(importlib.import_module("tcc.runtime.compiled").__all__))
