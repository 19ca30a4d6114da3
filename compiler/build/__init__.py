"""From a program to native code: the compile pipeline and the in-memory cache.

The pipeline is the L1 -> L2 part (the target's default -- ``DEFAULT_LOOP_PIPELINE``
for the CPU, ``DEFAULT_GPU_PIPELINE`` for ``cuda`` and ``cuda-sim`` -- or the
user's ``passes``), completed by whatever lowering it lacks: ``lower-loops``
if it ends at L1, then ``lower-llvm`` (with the element type and the
target's lowering options) and ``llvm-opt``, and the target's emit passes
(``emit-ptx`` for ``cuda``).  Everything target-specific is asked of the
target found in the registry (:mod:`tcc.targets`).  So
``--passes infer-ranges,lower-loops`` compiles without the L2 optimisations,
which is how their effect is measured.

Compiled kernels are cached per process, keyed by everything that changes the
code: the printed program (outputs and extents included), the pipeline spec,
the element type and the target.  The host CPU cannot change within a process.
A run with instruments (dumps, timing) is never served from the cache: the
user asked to watch the passes run.  The cache keeps the :data:`CACHE_SIZE`
most recently used programs (about 1 MB each: machine code, LLVM module and
IR); an evicted program's code lives on in the callables already returned
for it and is freed with the last of them.

Below the in-memory cache, CPU compiles are kept on disk across processes
(:mod:`tcc.build.disk_cache`: ``TCC_CACHE_DIR``, docs/cache.md), under a key that
adds the host CPU and the tcc and llvmlite versions to the one above.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Sequence

import numpy as np

from tcc.backends.builtin_targets import DEFAULT_GPU_PIPELINE, DEFAULT_LOOP_PIPELINE  # re-exported
from tcc.backends.target import DTYPES  # re-exported
from tcc.instruments import BaseInstrument
from tcc.ir.diagnostics import TccError
from tcc.ir.program import Program
from tcc.passes.pass_base import Level, Pass
from tcc.pipeline import check_levels, check_lowering, format_pipeline, plugin_verification, resolve_pipeline, run_pipeline
from tcc.sizes import check_program_index_ranges
from tcc.targets import get_target

#: the built-in target names (the registry, :mod:`tcc.targets`, may know more)

#: How many compiled programs the in-memory cache keeps (least recently used evicted first);
#: change it with :func:`set_cache_size`.
CACHE_SIZE = 64

# insertion order is recency order: a hit is moved to the end, eviction takes the front
_CACHE: dict[tuple, tuple[Any, Any, Any, Any]] = {}
_CACHE_LOCK = threading.Lock()
#: appended to the cache key of a program compiled with ``verify_plugins=False`` and plug-in passes
_UNPROVED = "plug-ins unverified"


def set_cache_size(entries: int) -> int:
    """Keep at most ``entries`` compiled programs in the cache (0: cache nothing); returns the old bound."""
    global CACHE_SIZE
    if isinstance(entries, bool) or not isinstance(entries, int) or entries < 0:
        raise ValueError(f"the cache size must be a non-negative integer, got {entries!r}")
    with _CACHE_LOCK:
        old, CACHE_SIZE = CACHE_SIZE, entries
        _evict()
    return old


def _evict() -> None:
    """Drop the least recently used entries beyond :data:`CACHE_SIZE` (``_CACHE_LOCK`` held)."""
    while len(_CACHE) > CACHE_SIZE:
        del _CACHE[next(iter(_CACHE))]


def _cache_get(key: tuple) -> Any:
    with _CACHE_LOCK:
        hit = _CACHE.pop(key, None)
        if hit is not None:
            _CACHE[key] = hit
        return hit


def _cache_put(key: tuple, value: tuple[Any, Any, Any, Any]) -> None:
    with _CACHE_LOCK:
        _CACHE.pop(key, None)
        _CACHE[key] = value
        _evict()


def normalize_dtype(dtype: Any) -> str:
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in DTYPES:
        raise TccError(f"unsupported dtype '{dtype}' (choose float64 or float32)")
    return name


def default_pipeline(target: str) -> str:
    return get_target(target).default_pipeline


def compile_pipeline(
    passes: str | Sequence[Pass] | None, dtype: str, target: str = "cpu", arch: str = "", ptx: int = 0
) -> list[Pass]:
    """The full pipeline: ``passes`` (default: the target's) plus the lowering it lacks.

    The appended ``lower-llvm`` takes the target's lowering options (GPU
    targets: ``reassociate=never``, see :mod:`tcc.backends.builtin_targets`).
    """
    tgt = get_target(target)
    tgt.check_options(arch, ptx)
    pipeline = list(resolve_pipeline(tgt.default_pipeline if passes is None else passes))
    check_lowering(pipeline, dtype=dtype, target=tgt.codegen(), arch=arch, ptx=ptx)
    level = pipeline[-1].output_level if pipeline else Level.INDEX
    tail: list[str] = []
    if level is Level.INDEX:
        if not any(p.name == "infer-ranges" for p in pipeline):
            pipeline.insert(0, resolve_pipeline("infer-ranges")[0])
        tail.append("lower-loops")
    if level in (Level.INDEX, Level.LOOPS):
        tail.append(f"lower-llvm{{{tgt.lower_llvm_options(dtype, arch, ptx)}}}")
        tail.append("llvm-opt")
    if level is not Level.PTX:
        tail += tgt.emit_passes
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
    arch: str = "",
    ptx: int = 0,
    results: Sequence[str] | None = None,
    verify_plugins: bool = True,
) -> Any:
    """Compile an L1 program to a :class:`tcc.runtime.compiled.CompiledProgram` running the target's executable.

    ``results`` (default: every definition) names the definitions a call
    returns: they become the program's outputs, and the default pipeline
    gains ``rematerialize``, which may recompute or drop the others.
    ``verify_plugins`` is :func:`tcc.pipeline.run_pipeline`'s: the results of
    plug-in passes are verified (their accesses proved in bounds) unless it
    is False.  A program compiled without that proof is cached apart, so a
    later compile that asks for it does not get the unproved code.
    """
    from tcc.runtime.compiled import CompiledProgram, check_threads  # imports the backends, and so llvmlite

    if threads is not None:
        check_threads(threads)  # before the compile it would otherwise follow
    tgt = get_target(target)
    dtype = normalize_dtype(dtype)
    if results is not None:
        program = results_program(program, results)
        results = program.outputs  # once: an iterator given as results is read here, not again by variants
        if passes is None:
            passes = with_rematerialize(tgt.default_pipeline)
    tgt.prepare(program)  # fail before compiling anything when it could not run
    pipeline = compile_pipeline(passes, dtype, target, arch, ptx)
    key = (str(program), format_pipeline(pipeline), dtype, target)
    unproved = not verify_plugins and bool(plugin_verification(pipeline))
    hit = None if instruments else _cache_get(key) or (_cache_get((*key, _UNPROVED)) if unproved else None)
    if hit is None:
        hit = _compile(program, tgt, pipeline, key, instruments, unproved)
    l1, loops, llvm_module, executable = hit
    if isinstance(program, Program) and program.source is not None and l1.source is not program.source:
        l1 = dataclasses.replace(l1, source=program.source)  # a cache hit from another file: this file's name in errors
    compiled = CompiledProgram(l1, loops, llvm_module, executable, np.dtype(dtype), threads)
    # a call returns the definitions of the program it was given; definitions that
    # passes of the compile pipeline add (blas's outlined factors) are intermediates,
    # like the temporaries of the L2 passes
    given = {d.name for d in getattr(program, "definitions", ())}
    if results is not None:
        compiled.results = tuple(program.outputs)
    elif given:
        compiled.results = tuple(n for n in compiled.results if n in given)
    if isinstance(program, Program) and not instruments:
        compiled._reorder = _call_time_order(program, pipeline, target, dtype, threads, arch, ptx, results,
                                             verify_plugins)
    return compiled


def results_program(program: Any, results: Sequence[str]) -> Program:
    """``program`` whose outputs are exactly ``results``: the definitions a call of its compiled form returns."""
    if not isinstance(program, Program):
        raise TccError(f"results= needs a program in the tensor language (L1), got {type(program).__name__}")
    names = tuple(n.strip() for n in results.split(",")) if isinstance(results, str) else tuple(results)
    if not names:
        raise TccError("results= names no definition: a call would return nothing")
    defined = [d.name for d in program.definitions]
    for n in names:
        if not isinstance(n, str) or n not in defined:
            hint = f"inputs are not results; definitions: {', '.join(defined)}" if program.input(str(n)) else \
                f"definitions: {', '.join(defined)}"
            raise TccError(f"results=: {n!r} is not a definition of the program ({hint})")
    if len(set(names)) != len(names):
        raise TccError(f"results=: {', '.join(names)} names a definition twice")
    return dataclasses.replace(program, outputs=names)


def with_rematerialize(pipeline: str) -> str:
    """``pipeline`` for a call that returns named results only: with ``rematerialize`` after
    ``contract-order`` (or ``infer-ranges``, or first), and ``shrink-locals`` before ``reuse-buffers``
    where the pipeline fuses row chains (``fuse-rows``: the CPU's).  Not on the GPU, whose
    ``parallel{depth=8}`` splits the inner loops too: a row shared by them would keep it from it."""
    passes = pipeline.split(",")
    if "fuse-rows" in passes and "reuse-buffers" in passes:
        passes.insert(passes.index("reuse-buffers"), "shrink-locals")
    for after in ("contract-order", "infer-ranges"):
        if after in passes:
            passes.insert(passes.index(after) + 1, "rematerialize")
            return ",".join(passes)
    return ",".join(["rematerialize", *passes])


def _compile(program: Any, tgt: Any, pipeline: list[Pass], key: tuple, instruments: Sequence[Any],
             unproved: bool = False) -> tuple:
    """``(l1, loops, llvm_module, executable)`` from the on-disk cache (:mod:`tcc.build.disk_cache`), else compiled.

    Runs with instruments neither read nor write the disk cache, as they
    bypass the in-memory one; what they compile is not kept at all.
    ``unproved``: the pipeline's plug-in passes are not verified, and the
    result is kept under ``key`` plus :data:`_UNPROVED`.  (The disk cache
    holds built-in pipelines only, where there is nothing to verify.)
    """
    from tcc.build import disk_cache

    disk = None if instruments or not disk_cache.cacheable(tgt, pipeline) else disk_cache.open_cache()
    disk_key = disk_cache.entry_key(*key) if disk is not None else ""
    entry = disk.load(disk_key) if disk is not None else None
    if entry is not None:
        hit = (entry.l1, entry.llvm_module.program, entry.llvm_module, entry.executable)
        _cache_put(key, hit)
        return hit
    # the interpreter refuses the same programs (tcc.sizes); a cached one passed already
    if isinstance(program, Program):
        check_program_index_ranges(program)

    class _LastIndexState(BaseInstrument):
        """The L1 program after the last index-level pass: sizes bind against its extents."""

        def __init__(self, start: Any) -> None:
            self.program = start

        def after_pass(self, pass_: Pass, index: int, state: Any) -> None:
            if pass_.output_level is Level.INDEX:
                self.program = state

    keep = _LastIndexState(program)
    final = run_pipeline(program, pipeline, instruments=[*instruments, keep], verify_plugins=not unproved)
    if disk is not None:
        from tcc.backends.cpu import jit_with_object

        executable, object_code = jit_with_object(final)
        disk.store(disk_key, keep.program, final, object_code)
    else:
        executable = tgt.load(final)
    llvm_module = executable.llvm_module
    hit = (keep.program, llvm_module.program, llvm_module, executable)
    if not instruments:
        _cache_put((*key, _UNPROVED) if unproved else key, hit)
    return hit


def _call_time_order(program: Program, pipeline: list[Pass], target: str, dtype: str, threads: int | None,
                     arch: str, ptx: int, results: Sequence[str] | None, verify_plugins: bool = True) -> Any:
    """Call-time re-decision of contraction orders (:mod:`tcc.runtime.call_orders`), or None where sizes cannot change them."""
    from tcc.runtime.call_orders import call_time_order

    l1_l2 = [p for p in pipeline if p.output_level in (Level.INDEX, Level.LOOPS)]
    return call_time_order(
        program, l1_l2,
        lambda passes: build(program, target=target, dtype=dtype, passes=passes, threads=threads, arch=arch, ptx=ptx,
                             results=results, verify_plugins=verify_plugins),
    )


def clear_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()
