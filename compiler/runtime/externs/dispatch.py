"""The one table of external kernels: which NumPy/BLAS code runs an L2 ``extern`` statement.

An ``extern`` statement names its operation by ``fn`` (``matmul``, ``gram``, ``inv``, ...) or,
for a general contraction, carries a ``spec`` (the index names of both operands and the
result); :func:`kind` reduces both to one key of :data:`KERNELS`.  Adding a kernel family is
one entry here and one module beside this one (the matching pass lives in ``passes/blas``).

Every kernel writes into ``out`` in place and runs with BLAS limited to the call's
``threads`` (:func:`blas_limit`): external kernels run on the calling thread while tcc's
pool is idle, so a call uses at most ``threads`` cores exactly when BLAS does too.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Mapping

import numpy as np

from tcc.ir.contraction import has_window
from tcc.runtime.externs.blas_spin import shorten_blas_spin
from tcc.runtime.externs.contraction_kernel import run_contract
from tcc.runtime.externs.gram_kernel import run_gram
from tcc.runtime.externs.matrix_functions import matrix_function
from tcc.runtime.externs.stack_matmul import matmul_stack
from tcc.runtime.externs.window_kernel import run_window

__all__ = ["KERNELS", "blas_limit", "kind", "run_extern"]

_blas: Any = None  # the BLAS libraries' ThreadpoolController selection, made on first use


def blas_limit(threads: int | None) -> Any:
    """A context that runs BLAS with at most ``threads`` threads.

    One threadpoolctl controller is created on first use and reused; the
    BLAS libraries' current thread counts are read each time (a ctypes call
    each), and when none exceeds ``threads`` nothing is changed: a null
    context.  Otherwise the limit is set for the extern and restored after
    it (docs/runtime.md has the measured cost).  ``threads=None`` leaves
    BLAS alone.
    """
    global _blas
    if threads is None:
        return contextlib.nullcontext()
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        _blas = ThreadpoolController().select(user_api="blas")
    if all(lib.num_threads <= threads for lib in _blas.lib_controllers):
        return contextlib.nullcontext()
    return _blas.limit(limits=threads)


Buffers = Mapping[str, np.ndarray]


def _window(stmt: Any, buffers: Buffers, out: np.ndarray, threads: int | None) -> None:
    """A stride-1 convolution: shifted GEMMs (:mod:`tcc.runtime.externs.window_kernel`)."""
    run_window(stmt.spec, buffers[stmt.args[0]], buffers[stmt.args[1]], out)


def _contract(stmt: Any, buffers: Buffers, out: np.ndarray, threads: int | None) -> None:
    """Operands reshaped (or copied) into matrix stacks, one ``np.matmul``
    (:mod:`tcc.runtime.externs.contraction_kernel`)."""
    run_contract(stmt.spec, buffers[stmt.args[0]], buffers[stmt.args[1]], out, threads)


def _gram(stmt: Any, buffers: Buffers, out: np.ndarray, threads: int | None) -> None:
    """X^T diag(w) X: syrk when every weight is >= 0 (:mod:`tcc.runtime.externs.gram_kernel`)."""
    run_gram(buffers[stmt.args[0]], buffers[stmt.args[1]], out)


def _matmul(stmt: Any, buffers: Buffers, out: np.ndarray, threads: int | None) -> None:
    """``np.matmul(A, B, out=C)`` straight into ``out``; an argument read transposed is passed as
    the transposed view (BLAS gets the transpose flag, nothing is copied)."""
    flags = getattr(stmt, "transposed", ()) or (False, False)
    a, b = (np.swapaxes(buffers[n], -1, -2) if t else buffers[n] for n, t in zip(stmt.args, flags))
    if out.size == 0:  # nothing to write (an empty column count made reshape(-1, 0) ambiguous)
        return
    if a.shape[-1] == 0:  # an empty inner dimension: the product is all zeros
        out[...] = 0
    elif a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous and out.flags.c_contiguous and a.size:
        # a stack of matrices times one matrix is one GEMM on the stacked rows (not one per member)
        np.matmul(a.reshape(-1, a.shape[-1]), b, out=out.reshape(-1, out.shape[-1]))
    else:  # a stack of small products is dealt over the thread team (tcc.runtime.externs.stack_matmul)
        matmul_stack(a, b, out, threads)


def _matrix_function(stmt: Any, buffers: Buffers, out: np.ndarray, threads: int | None) -> None:
    """``inv``, ``adj``, ``det``, ``logdet``: LAPACK through NumPy."""
    out[...] = matrix_function(stmt.fn, *(buffers[n] for n in stmt.args), where=f"definition '{stmt.out}'")


#: kind -> kernel(stmt, buffers, out, threads)
KERNELS: dict[str, Callable[[Any, Buffers, np.ndarray, int | None], None]] = {
    "window": _window, "contract": _contract, "gram": _gram, "matmul": _matmul, "matrix": _matrix_function,
}


def kind(stmt: Any) -> str:
    """The key of :data:`KERNELS` that runs ``stmt``."""
    spec = getattr(stmt, "spec", ())
    if spec:
        return "window" if has_window(spec) else "contract"
    return stmt.fn if stmt.fn in ("gram", "matmul") else "matrix"


def run_extern(stmt: Any, buffers: Buffers, threads: int | None = None) -> None:
    """Run the external kernel ``extern fn(args) -> out`` on the bound arrays, writing ``out`` in
    place, with BLAS on at most ``threads`` threads.  An inf times a zero is NaN without NumPy's
    warning, as in the compiled kernels."""
    shorten_blas_spin()  # once per process: OpenBLAS's idle workers would spin 0.1 s on the team's cores
    with blas_limit(threads), np.errstate(invalid="ignore", over="ignore"):
        KERNELS[kind(stmt)](stmt, buffers, buffers[stmt.out], threads)
