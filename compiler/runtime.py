"""Compiled programs: the object ``tcc.compile`` returns, and how it is called.

    f = tcc.compile("examples/urban.tcc")             # target="cpu", float64
    out = f(a=a, b=b, c=c, d=d)                        # {"f": array}
    f(a=a, b=b, c=c, d=d, f=buffer)                    # write into a given array

The call is where a compiled kernel meets user data, and compiled code has no
bounds checks (``infer-ranges`` proved every access in bounds *for arrays of
the declared shapes*), so everything is checked here before any kernel runs:
missing or unknown names, shapes against the declarations (sizes bind from
them), the dtype (never converted silently: a float32 kernel fed float64 data
would either copy on every call or compute in the wrong precision),
C-contiguity, writeability and aliasing of given output arrays.  Each mistake
raises :class:`CallError` naming the tensor.

Parallel kernels (an outermost ``parallel for``) are split over a thread
pool: ctypes releases the GIL for the duration of a foreign call, so the parts
run truly in parallel.  Kernels run in order; a kernel starts when every part
of the previous one has finished.

External kernels (``extern inv(A) -> B``: a matrix function;
``extern matmul(A, B) -> C``: a matrix product) have no code;
:func:`run_extern` computes them here with LAPACK or BLAS through NumPy
(:func:`tcc.interpreter.matrix_function`, the interpreter's own code, and
``np.matmul(A, B, out=C)``) on the bound arrays, in kernel order, writing the
result into the output array in place.  They run on the calling thread (NumPy's BLAS may use its own
threads), after every part of the previous kernel has finished.

Target ``cuda-sim`` runs the CUDA backend's grid kernels on the host: each
kernel is "launched" with the shape the CUDA runtime's
:func:`tcc.backends.cuda.launch_shape` picks, with deliberately tiny blocks
(:data:`SIM_BLOCK` threads, at most :data:`SIM_MAX_BLOCKS` blocks) so that
even small tests run the grid-stride loop, and the simulated threads run one
after another.  It exists to test the grid mapping where there is no GPU.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import os
import threading
from typing import Any, Mapping

import numpy as np

from tcc.diagnostics import TccError
from tcc.sizes import bind_sizes, extents_shape, format_decl

__all__ = ["CallError", "CompiledProgram", "default_threads", "run_extern", "SIM_BLOCK", "SIM_MAX_BLOCKS"]

#: cuda-sim launch shape: threads per block and the most blocks (24 simulated threads in all)
SIM_BLOCK = 8
SIM_MAX_BLOCKS = 3


class CallError(TccError, ValueError):
    """A bad call of a compiled program (wrong name, shape, dtype, layout)."""


def default_threads() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def run_extern(stmt: Any, buffers: Mapping[str, np.ndarray]) -> None:
    """Run the external kernel ``extern fn(args) -> out`` on the bound arrays, writing ``out`` in place.

    ``matmul`` writes straight into ``out`` (``np.matmul(A, B, out=C)``: NumPy's
    BLAS, no temporary; the runtime never binds overlapping buffers).
    """
    from tcc.interpreter import matrix_function

    out = buffers[stmt.out]
    if stmt.fn == "matmul":
        a, b = (buffers[n] for n in stmt.args)
        if a.shape[1] == 0:  # an empty inner dimension: the product is all zeros
            out[...] = 0
        else:
            np.matmul(a, b, out=out)
        return
    out[...] = matrix_function(stmt.fn, *(buffers[n] for n in stmt.args), where=f"definition '{stmt.out}'")


_POOLS: dict[int, concurrent.futures.ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    with _POOLS_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tcc")
            _POOLS[threads] = pool
        return pool


class CompiledProgram:
    """A program compiled for one target and element type.

    ``inputs``: the input names; ``results``: every definition's name (what a
    call returns); ``threads``: how many threads parallel kernels use
    (settable).  ``program`` is the L1 program, ``loops`` the optimised L2
    program and ``llvm`` the optimised LLVM module it came from, for
    inspection.
    """

    def __init__(self, program: Any, loops: Any, llvm: Any, executable: Any, dtype: np.dtype, threads: int | None) -> None:
        self.program = program
        self.loops = loops
        self.llvm = llvm
        self.executable = executable
        self.dtype = np.dtype(dtype)
        self.threads = default_threads() if threads is None else threads
        self.inputs: tuple[str, ...] = tuple(d.name for d in program.inputs)
        self.results: tuple[str, ...] = tuple(b.name for b in loops.buffers if b.role in ("output", "local"))
        self._buffer_index = {b.name: i for i, b in enumerate(loops.buffers)}
        self._bands = None
        if getattr(llvm, "target", "cpu") == "cuda-sim":
            from tcc.backends.llvm import grid_band

            self._bands = [grid_band(k) for k in loops.kernels]

    @property
    def threads(self) -> int:
        return self._threads

    @threads.setter
    def threads(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"threads must be a positive integer, got {value!r}")
        self._threads = value

    def __repr__(self) -> str:
        return (
            f"<tcc compiled program: inputs {', '.join(self.inputs) or '-'}; "
            f"results {', '.join(self.results)}; {self.dtype} on {self.llvm.target}>"
        )

    # -- argument checking ------------------------------------------------
    def _check_input(self, name: str, value: Any, decl: Any) -> np.ndarray:
        if isinstance(value, np.ndarray):
            arr = value
        elif isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and not decl.extents:
            arr = np.asarray(value, dtype=self.dtype)
        else:
            raise CallError(
                f"input '{name}' must be a NumPy array of {self.dtype}, got {type(value).__name__}"
            )
        if arr.dtype != self.dtype:
            raise CallError(
                f"input '{name}' has dtype {arr.dtype}, but this program was compiled for {self.dtype} "
                f"(convert with .astype(np.{self.dtype}) or compile with dtype='{arr.dtype}')"
            )
        if not arr.flags.c_contiguous:
            raise CallError(
                f"input '{name}' is not C-contiguous (strides {arr.strides}); pass np.ascontiguousarray({name})"
            )
        return arr

    def _check_output(self, name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            raise CallError(f"output '{name}' must be a NumPy array, got {type(value).__name__}")
        if value.dtype != self.dtype:
            raise CallError(f"output '{name}' has dtype {value.dtype}, expected {self.dtype}")
        if value.shape != shape:
            raise CallError(f"output '{name}' has shape {value.shape}, expected {shape} for these inputs")
        if not value.flags.c_contiguous:
            raise CallError(f"output '{name}' is not C-contiguous (strides {value.strides})")
        if not value.flags.writeable:
            raise CallError(f"output '{name}' is read-only")
        return value

    def bind(self, arrays: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, np.ndarray]]:
        """Check a call's arguments; return the sizes and every buffer's array."""
        known = set(self.inputs) | set(self.results)
        for name in arrays:
            if name not in known:
                hint = f"inputs: {', '.join(self.inputs) or 'none'}; results: {', '.join(self.results)}"
                raise CallError(f"unknown argument '{name}' ({hint})")
        missing = [n for n in self.inputs if n not in arrays]
        if missing:
            raise CallError(f"missing input{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)}")
        buffers: dict[str, np.ndarray] = {}
        for decl in self.program.inputs:
            buffers[decl.name] = self._check_input(decl.name, arrays[decl.name], decl)
        try:
            sizes = bind_sizes(self.program, buffers)
        except CallError:
            raise
        except TccError as exc:
            raise CallError(exc.message) from None
        for b in self.loops.buffers:
            if b.role == "input":
                continue
            shape = extents_shape(b.shape, sizes)
            if any(s < 0 for s in shape):
                raise CallError(
                    f"{'temporary' if b.role == 'temp' else 'result'} '{b.name}' would have a negative extent "
                    f"({format_decl(b.name, b.shape)} = {shape}) for these sizes"
                )
            if b.name in arrays:
                buffers[b.name] = self._check_output(b.name, arrays[b.name], shape)
            else:
                buffers[b.name] = self._new_buffer(b.name, shape)
        given = [n for n in self.results if n in arrays]
        for n in given:
            for other, arr in buffers.items():
                if other != n and self._overlap(buffers[n], arr):
                    raise CallError(f"output '{n}' overlaps the memory of '{other}'")
        return sizes, buffers

    def _new_buffer(self, name: str, shape: tuple[int, ...]) -> Any:
        """Storage for a result or temporary the caller did not pass."""
        return np.empty(shape, dtype=self.dtype)

    @staticmethod
    def _overlap(a: Any, b: Any) -> bool:
        return np.may_share_memory(a, b)

    # -- calling ------------------------------------------------------------
    def __call__(self, **arrays: Any) -> dict[str, np.ndarray]:
        sizes, buffers = self.bind(arrays)
        order = self.loops.buffers
        ptrs = (ctypes.c_void_p * max(1, len(order)))(*[buffers[b.name].ctypes.data for b in order])
        size_vals = (ctypes.c_int64 * max(1, len(self.loops.sizes)))(*[sizes[s] for s in self.loops.sizes])
        threads = self._threads
        if self._bands is not None:
            from tcc.backends.cuda import launch_shape

            for k, band in zip(self.executable.kernels, self._bands):
                if k.extern is not None:
                    run_extern(k.extern, buffers)
                    continue
                blocks, block = launch_shape(band, sizes, SIM_BLOCK, SIM_MAX_BLOCKS)
                if blocks:
                    k.fn(ptrs, size_vals, blocks, block)
            return {n: buffers[n] for n in self.results}
        for k in self.executable.kernels:
            if k.extern is not None:
                run_extern(k.extern, buffers)
            elif k.parallel and threads > 1:
                pool = _pool(threads)
                futures = [pool.submit(k.fn, ptrs, size_vals, part, threads) for part in range(threads)]
                for f in futures:
                    f.result()
            else:
                k.fn(ptrs, size_vals, 0, 1)
        # the arrays stay referenced by `buffers` until every kernel has run
        return {n: buffers[n] for n in self.results}
