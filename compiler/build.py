"""From a program to native code: the compile pipeline and the in-memory cache.

The pipeline is the L1 -> L2 part (``DEFAULT_LOOP_PIPELINE`` or the user's
``passes``), completed by whatever lowering it lacks: ``lower-loops`` if it
ends at L1, then ``lower-llvm`` (with the element type) and ``llvm-opt``.  So
``--passes infer-ranges,lower-loops`` compiles without the L2 optimisations,
which is how their effect is measured.

Compiled kernels are cached per process, keyed by everything that changes the
code: the printed program (outputs and extents included), the pipeline spec,
the element type and the target.  The host CPU cannot change within a process.
A run with instruments (dumps, timing) is never served from the cache: the
user asked to watch the passes run.
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from tcc.diagnostics import TccError
from tcc.pass_base import Level, Pass

DEFAULT_LOOP_PIPELINE = "infer-ranges,lower-loops,interchange,hoist,peel,reduce-in-place,unroll-jam,fuse,reuse-buffers,parallel"
TARGETS = ("cpu",)
DTYPES = ("float64", "float32")

_CACHE: dict[tuple, tuple[Any, Any, Any, Any]] = {}
_CACHE_LOCK = threading.Lock()


def normalize_dtype(dtype: Any) -> str:
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in DTYPES:
        raise TccError(f"unsupported dtype '{dtype}' (choose float64 or float32)")
    return name


def check_target(target: str) -> str:
    if target not in TARGETS:
        raise TccError(f"unknown target '{target}' (available: {', '.join(TARGETS)})")
    return target


def compile_pipeline(passes: str | Sequence[Pass] | None, dtype: str, target: str = "cpu") -> list[Pass]:
    """The full pipeline: ``passes`` (default :data:`DEFAULT_LOOP_PIPELINE`) plus the lowering it lacks."""
    from tcc.pipeline import check_levels, resolve_pipeline

    pipeline = list(resolve_pipeline(DEFAULT_LOOP_PIPELINE if passes is None else passes))
    level = pipeline[-1].output_level if pipeline else Level.INDEX
    tail: list[str] = []
    if level is Level.INDEX:
        if not any(p.name == "infer-ranges" for p in pipeline):
            pipeline.insert(0, resolve_pipeline("infer-ranges")[0])
        tail.append("lower-loops")
    if level in (Level.INDEX, Level.LOOPS):
        tail.append(f"lower-llvm{{dtype={dtype} target={target}}}")
        tail.append("llvm-opt")
    if tail:
        pipeline += list(resolve_pipeline(",".join(tail)))
    check_levels(pipeline)
    return pipeline


def build(
    program: Any,
    *,
    target: str = "cpu",
    dtype: Any = "float64",
    passes: str | Sequence[Pass] | None = None,
    threads: int | None = None,
    instruments: Sequence[Any] = (),
) -> Any:
    """Compile an L1 program to a :class:`tcc.runtime.CompiledProgram`."""
    from tcc.pipeline import format_pipeline, run_pipeline
    from tcc.runtime import CompiledProgram

    check_target(target)
    dtype = normalize_dtype(dtype)
    pipeline = compile_pipeline(passes, dtype, target)
    key = (str(program), format_pipeline(pipeline), dtype, target)
    hit = None if instruments else _CACHE.get(key)
    if hit is None:
        from tcc.instruments import BaseInstrument

        class _LastIndexState(BaseInstrument):
            """The L1 program after the last index-level pass: sizes bind against its extents."""

            def __init__(self, start: Any) -> None:
                self.program = start

            def after_pass(self, pass_: Pass, index: int, state: Any) -> None:
                if pass_.output_level is Level.INDEX:
                    self.program = state

        keep = _LastIndexState(program)
        llvm_module = run_pipeline(program, pipeline, instruments=[*instruments, keep])
        from tcc.backends.cpu import jit

        executable = jit(llvm_module)
        l1, loops = keep.program, llvm_module.program
        hit = (l1, loops, llvm_module, executable)
        if not instruments:
            with _CACHE_LOCK:
                _CACHE[key] = hit
    l1, loops, llvm_module, executable = hit
    return CompiledProgram(l1, loops, llvm_module, executable, np.dtype(dtype), threads)


def clear_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()
