"""Running compiled programs: :class:`~tcc.runtime.compiled.CompiledProgram` (binding arrays,
threads, the calls into kernels) and what it uses -- pools of intermediates and results,
foreign arrays (DLPack, CUDA arrays), call-time contraction orders, and the external
kernels (:mod:`tcc.runtime.externs`).

The names of :mod:`tcc.runtime.compiled` are re-exported lazily (``tcc.runtime.compiled.CompiledProgram``,
``from tcc.runtime.compiled import CallError``), so that importing a small module of this package
(``tcc.runtime.externs.window_view``, which the reference interpreter uses) does not load
the code generator behind ``compiled``.
"""
from __future__ import annotations

import importlib
from typing import Any

_COMPILED = ("CallError", "CompiledProgram", "MAX_THREADS", "check_threads", "default_threads", "pool_size", "run_parallel")
__all__ = list(_COMPILED)


def __getattr__(name: str) -> Any:
    if name in _COMPILED:
        return getattr(importlib.import_module("tcc.runtime.compiled"), name)
    raise AttributeError(f"module 'tcc.runtime.compiled' has no attribute '{name}'")
