"""A native loop of GEMM calls: the shifted products of a convolution without Python between them.

A stride-1 convolution run as shifted GEMMs (``tcc.runtime.externs.window_kernel``) makes
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
inside its buffer with the given leading dimensions (``tcc.runtime.externs.window_kernel``
builds them from NumPy views of those buffers).
"""
from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

__all__ = ["gemm_loop", "gemm_loop_parts"]

#: the fixed arguments of every call, in the order of ``cfg``
_CFG = ("ta", "tb", "m", "nn", "k", "lda", "ldb", "ldc")
_LOADS = "".join(f"  %p{i} = getelementptr inbounds i64, ptr %cfg, i64 {i}\n  %{name} = load i64, ptr %p{i}\n"
                 for i, name in enumerate(_CFG))

_TEMPLATE = r"""
define private void @tcc_gemm_range_{ch}(ptr %fn, ptr noalias %cfg, ptr noalias %offs, i64 %lo, i64 %hi, ptr %a, ptr %b, ptr %c) {{
entry:
{loads}  %empty = icmp sge i64 %lo, %hi
  br i1 %empty, label %exit, label %body
body:
  %i = phi i64 [ %lo, %entry ], [ %i1, %body ]
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
  %more = icmp slt i64 %i1, %hi
  br i1 %more, label %body, label %exit
exit:
  ret void
}}

define void @tcc_gemm_loop_{ch}(ptr %fn, ptr noalias %cfg, ptr noalias %offs, i64 %n, ptr %a, ptr %b, ptr %c) {{
  call void @tcc_gemm_range_{ch}(ptr %fn, ptr %cfg, ptr %offs, i64 0, i64 %n, ptr %a, ptr %b, ptr %c)
  ret void
}}

; a kernel-shaped entry (job, unused, part, nparts) for the thread team: the calls n*part/nparts up to
; n*(part+1)/nparts of the job (fn, cfg, offs, n, a, b, c)
define void @tcc_gemm_part_{ch}(ptr %job, ptr %unused, i64 %part, i64 %nparts) {{
  %j1 = getelementptr i64, ptr %job, i64 1
  %j2 = getelementptr i64, ptr %job, i64 2
  %j3 = getelementptr i64, ptr %job, i64 3
  %j4 = getelementptr i64, ptr %job, i64 4
  %j5 = getelementptr i64, ptr %job, i64 5
  %j6 = getelementptr i64, ptr %job, i64 6
  %fn = load ptr, ptr %job
  %cfg = load ptr, ptr %j1
  %offs = load ptr, ptr %j2
  %n = load i64, ptr %j3
  %a = load ptr, ptr %j4
  %b = load ptr, ptr %j5
  %c = load ptr, ptr %j6
  %np = mul i64 %n, %part
  %lo = sdiv i64 %np, %nparts
  %part1 = add i64 %part, 1
  %np1 = mul i64 %n, %part1
  %hi = sdiv i64 %np1, %nparts
  call void @tcc_gemm_range_{ch}(ptr %fn, ptr %cfg, ptr %offs, i64 %lo, i64 %hi, ptr %a, ptr %b, ptr %c)
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
        fns: dict[str, object] = {ch: _SIGNATURE(engine.get_function_address(f"tcc_gemm_loop_{ch}")) for ch in "ds"}
        fns.update({f"part_{ch}": engine.get_function_address(f"tcc_gemm_part_{ch}") for ch in "ds"})
        return engine, fns


def _blas(ch: str) -> str:
    """BLAS's type character of NumPy's (``d``; float32 is NumPy's ``f``, BLAS's ``s``)."""
    return "s" if ch == "f" else ch


def gemm_loop(ch: str, fn: int, cfg: np.ndarray, offs: np.ndarray, a: int, b: int, c: int) -> None:
    """For each row ``(oa, ob, oc, beta)`` of ``offs`` (int64, ``n x 4``), call the row-major
    ``cblas_?gemm`` at address ``fn`` with ``cfg`` = ``(transA, transB, M, N, K, lda, ldb, ldc)`` on
    ``a + oa``, ``b + ob``, ``c + oc`` (byte addresses) and ``beta`` 0 or 1; ``ch`` is ``d`` or ``s``
    (or NumPy's ``f`` for float32)."""
    _, fns = _compiled()
    fns[_blas(ch)](fn, cfg.ctypes.data, offs.ctypes.data, offs.shape[0], a, b, c)  # type: ignore[operator]


def gemm_loop_parts(ch: str, fn: int, cfg: np.ndarray, offs: np.ndarray, a: int, b: int, c: int,
                    nparts: int, threads: int | None = None) -> bool:
    """:func:`gemm_loop`'s calls dealt in ``nparts`` contiguous runs to the thread team
    (:mod:`tcc.backends.thread_team`), each run one native loop; the calls must write disjoint
    results.  False (nothing ran) where there is no team or another thread's job holds it."""
    from .thread_team import team

    crew = team()
    if crew is None:
        return False
    _, fns = _compiled()
    job = np.array([fn, cfg.ctypes.data, offs.ctypes.data, offs.shape[0], a, b, c], dtype=np.int64)
    return crew.run(fns[f"part_{_blas(ch)}"], job.ctypes.data, job.ctypes.data, nparts, threads)  # type: ignore[arg-type]
