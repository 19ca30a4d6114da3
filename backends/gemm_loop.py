"""A native loop of GEMM calls: the shifted products of a convolution without Python between them.

A stride-1 convolution run as shifted GEMMs (``tcc.window_kernel``) makes
one BLAS call per kernel offset and batch member -- 72 for a 3x3 kernel over
a batch of 8 -- each with the same shapes and leading dimensions and its own
three base pointers.  From Python each call costs a few microseconds of
argument handling under the GIL, and when two threads split the calls their
Python halves serialise on the GIL: the parallel run measured slower than
one thread.  This module compiles (once per process, with the CPU backend's
llvmlite MCJIT) a function that walks an array of ``(offset of A, offset of
B, offset of C, beta)`` quadruples and calls the BLAS function pointer for
each: one ctypes call per thread, which releases the GIL for its whole run.

The caller guarantees memory safety: every offset addresses a matrix
inside its buffer with the given leading dimensions (``tcc.window_kernel``
builds them from NumPy views of those buffers).
"""
from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

__all__ = ["gemm_loop"]

#: the fixed arguments of every call, in the order of ``cfg``
_CFG = ("ta", "tb", "m", "nn", "k", "lda", "ldb", "ldc")
_LOADS = "".join(f"  %p{i} = getelementptr inbounds i64, ptr %cfg, i64 {i}\n  %{name} = load i64, ptr %p{i}\n"
                 for i, name in enumerate(_CFG))

_TEMPLATE = r"""
define void @tcc_gemm_loop_{ch}(ptr %fn, ptr noalias %cfg, ptr noalias %offs, i64 %n, ptr %a, ptr %b, ptr %c) {{
entry:
{loads}  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %body
body:
  %i = phi i64 [ 0, %entry ], [ %i1, %body ]
  %q = mul i64 %i, 4
  %qa = getelementptr inbounds i64, ptr %offs, i64 %q
  %oa = load i64, ptr %qa
  %qb = getelementptr inbounds i64, ptr %qa, i64 1
  %ob = load i64, ptr %qb
  %qc = getelementptr inbounds i64, ptr %qa, i64 2
  %oc = load i64, ptr %qc
  %qd = getelementptr inbounds i64, ptr %qa, i64 3
  %flag = load i64, ptr %qd
  %pa = getelementptr i8, ptr %a, i64 %oa
  %pb = getelementptr i8, ptr %b, i64 %ob
  %pc = getelementptr i8, ptr %c, i64 %oc
  %add = icmp ne i64 %flag, 0
  %beta = select i1 %add, {real} 1.0, {real} 0.0
  call void %fn(i64 101, i64 %ta, i64 %tb, i64 %m, i64 %nn, i64 %k, {real} 1.0, ptr %pa, i64 %lda, ptr %pb, i64 %ldb, {real} %beta, ptr %pc, i64 %ldc)
  %i1 = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %body, label %exit
exit:
  ret void
}}
"""

_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _compiled() -> tuple[object, dict[str, object]]:
    """The engine (kept alive with the functions) and the loop per dtype character, compiled on first use."""
    from .llvm.machines import jit_ir

    with _LOCK:
        engine = jit_ir("".join(_TEMPLATE.format(ch=ch, real=real, loads=_LOADS)
                                for ch, real in (("d", "double"), ("s", "float"))))
        fns = {ch: _SIGNATURE(engine.get_function_address(f"tcc_gemm_loop_{ch}")) for ch in "ds"}
        return engine, fns


def gemm_loop(ch: str, fn: int, cfg: np.ndarray, offs: np.ndarray, a: int, b: int, c: int) -> None:
    """For each row ``(oa, ob, oc, beta)`` of ``offs`` (int64, ``n x 4``), call the row-major
    ``cblas_?gemm`` at address ``fn`` with ``cfg`` = ``(transA, transB, M, N, K, lda, ldb, ldc)`` on
    ``a + oa``, ``b + ob``, ``c + oc`` (byte addresses) and ``beta`` 0 or 1; ``ch`` is ``d`` or ``s``."""
    _, fns = _compiled()
    fns[ch](fn, cfg.ctypes.data, offs.ctypes.data, offs.shape[0], a, b, c)  # type: ignore[operator]
