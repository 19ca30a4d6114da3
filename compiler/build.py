"""From a program to native code: the compile pipeline and the in-memory cache.

The pipeline is the L1 -> L2 part (the target's default -- ``DEFAULT_LOOP_PIPELINE``
for the CPU, ``DEFAULT_GPU_PIPELINE`` for ``cuda`` and ``cuda-sim`` -- or the
user's ``passes``), completed by whatever lowering it lacks: ``lower-loops``
if it ends at L1, then ``lower-llvm`` (with the element type and target) and
``llvm-opt``, and for ``cuda`` ``emit-ptx``.  So
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
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from tcc.ir.diagnostics import TccError
from tcc.passes.pass_base import Level, Pass
from tcc.ir.program import Program
from tcc.sizes import check_program_index_ranges

DEFAULT_LOOP_PIPELINE = "infer-ranges,blas,lower-loops,interchange,hoist,peel,reduce-in-place,unroll-jam,fuse,reuse-buffers,parallel"
# The GPU maps loops to threads, so it keeps what the CPU pipeline trades away
# for registers and caches: no reduce-in-place or unroll-jam (they move
# reductions outside output loops and give one thread several outputs), no
# peel or interchange (they split or reorder loops inside a thread, where
# coalescing across threads matters more than the order within one); fusion
# only of whole nests, and every perfectly nested parallel loop marked, so
# the grid gets one thread per output element; long reductions over few
# outputs split into parallel partial sums (docs/cuda.md).
DEFAULT_GPU_PIPELINE = "infer-ranges,lower-loops,hoist,fuse{full=true},reuse-buffers,parallel{depth=8},split-reduction"
TARGETS = ("cpu", "cuda", "cuda-sim")
DTYPES = ("float64", "float32")

#: How many compiled programs the in-memory cache keeps (least recently used evicted first);
#: change it with :func:`set_cache_size`.
CACHE_SIZE = 64

# insertion order is recency order: a hit is moved to the end, eviction takes the front
_CACHE: dict[tuple, tuple[Any, Any, Any, Any]] = {}
_CACHE_LOCK = threading.Lock()


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


def check_target(target: str) -> str:
    if target not in TARGETS:
        raise TccError(f"unknown target '{target}' (available: {', '.join(TARGETS)})")
    return target


def default_pipeline(target: str) -> str:
    return DEFAULT_LOOP_PIPELINE if target == "cpu" else DEFAULT_GPU_PIPELINE


def compile_pipeline(
    passes: str | Sequence[Pass] | None, dtype: str, target: str = "cpu", arch: str = "", ptx: int = 0
) -> list[Pass]:
    """The full pipeline: ``passes`` (default: the target's) plus the lowering it lacks.

    GPU targets lower with ``reassociate=never``: reassociation only pays
    where LLVM vectorizes, which it does not for NVPTX, and without it a GPU
    thread sums in the reference interpreter's order.
    """
    from tcc.pipeline import check_levels, check_lowering, resolve_pipeline

    check_target(target)
    if target == "cpu" and (arch or ptx):
        raise TccError("arch and ptx are options of target cuda, not of cpu")
    pipeline = list(resolve_pipeline(default_pipeline(target) if passes is None else passes))
    check_lowering(pipeline, dtype=dtype, target=target, arch=arch, ptx=ptx)
    level = pipeline[-1].output_level if pipeline else Level.INDEX
    tail: list[str] = []
    if level is Level.INDEX:
        if not any(p.name == "infer-ranges" for p in pipeline):
            pipeline.insert(0, resolve_pipeline("infer-ranges")[0])
        tail.append("lower-loops")
    if level in (Level.INDEX, Level.LOOPS):
        opts = f"dtype={dtype} target={target}"
        if target != "cpu":
            opts += " reassociate=never"
        if arch:
            opts += f" arch={arch}"
        if ptx:
            opts += f" ptx={ptx}"
        tail.append(f"lower-llvm{{{opts}}}")
        tail.append("llvm-opt")
    if target == "cuda" and level is not Level.PTX:
        tail.append("emit-ptx")
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
) -> Any:
    """Compile an L1 program to a :class:`tcc.runtime.CompiledProgram` (a
    :class:`tcc.backends.cuda.CudaProgram` for ``cuda``)."""
    from tcc.pipeline import format_pipeline, run_pipeline
    from tcc.runtime import CompiledProgram

    check_target(target)
    dtype = normalize_dtype(dtype)
    if target == "cuda":  # fail before compiling anything when it could not run
        from tcc.backends.cuda import require_pycuda

        _refuse_matrix_functions(program)
        require_pycuda()
    pipeline = compile_pipeline(passes, dtype, target, arch, ptx)
    key = (str(program), format_pipeline(pipeline), dtype, target)
    hit = None if instruments else _cache_get(key)
    if hit is None:
        # the interpreter refuses the same programs (tcc.sizes); a cached one passed already
        if isinstance(program, Program):
            check_program_index_ranges(program)
        from tcc.instruments import BaseInstrument

        class _LastIndexState(BaseInstrument):
            """The L1 program after the last index-level pass: sizes bind against its extents."""

            def __init__(self, start: Any) -> None:
                self.program = start

            def after_pass(self, pass_: Pass, index: int, state: Any) -> None:
                if pass_.output_level is Level.INDEX:
                    self.program = state

        keep = _LastIndexState(program)
        final = run_pipeline(program, pipeline, instruments=[*instruments, keep])
        if target == "cuda":
            from tcc.backends.cuda import load

            if not hasattr(final, "arch") or not hasattr(final, "llvm"):
                raise TccError("a cuda pipeline must end with emit-ptx")
            executable = load(final)
            llvm_module = final.llvm
        else:
            from tcc.backends.cpu import jit

            llvm_module = final
            executable = jit(llvm_module)
        l1, loops = keep.program, llvm_module.program
        hit = (l1, loops, llvm_module, executable)
        if not instruments:
            _cache_put(key, hit)
    l1, loops, llvm_module, executable = hit
    if target == "cuda":
        from tcc.backends.cuda import CudaProgram

        compiled = CudaProgram(l1, loops, llvm_module, executable, np.dtype(dtype), threads)
    else:
        compiled = CompiledProgram(l1, loops, llvm_module, executable, np.dtype(dtype), threads)
    # a call returns the definitions of the program it was given; definitions that
    # passes of the compile pipeline add (blas's outlined factors) are intermediates,
    # like the temporaries of the L2 passes
    given = {d.name for d in getattr(program, "definitions", ())}
    if given:
        compiled.results = tuple(n for n in compiled.results if n in given)
    return compiled


def _refuse_matrix_functions(program: Any) -> None:
    """Matrix functions run on the host (LAPACK through NumPy): the cuda target refuses them.

    Checked on the L1 program, before PyCUDA is needed, so the message is
    the same with or without a GPU (lower-llvm refuses the L2 form too).
    """
    from tcc.ir.expr import MatrixFn

    for d in getattr(program, "definitions", ()):
        if isinstance(d.body, MatrixFn):
            from tcc.backends.llvm import cuda_refusal

            raise cuda_refusal(d.body.fn, d.body.args, d.name, d.loc, program.source)


def clear_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()
