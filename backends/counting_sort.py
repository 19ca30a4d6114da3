"""A native counting sort: the stable order of an index array's entries, O(n + h), for inverse indices.

The derived index arrays of reverse-mode derivatives (``inverse_perm(col)``:
the positions holding each value, in order) are built by every call.  NumPy
has no counting sort: its stable ``argsort`` is a radix sort for 16-bit keys
only and a merge sort above, and a radix sort of wider keys done 16 bits at a
time costs two or more sorts plus a random gather per pass -- at 10**6
entries several times the gather kernels the inverse serves.  The counting
sort's placement loop (``perm[next[src[k]]++] = k``) is sequential and has no
NumPy form, so it is one small LLVM function, compiled once per process with
the same llvmlite MCJIT as the CPU backend.

Memory safety rests on the caller: ``src`` has been validated (every entry in
``0..h``) and ``next`` holds the bucket starts of exactly these entries (the
prefix sums of their counts), so every slot written lies in ``0..n - 1``.
"""
from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

__all__ = ["place_stable"]

_IR = r"""
define void @tcc_place_stable(ptr noalias %src, i64 %n, ptr noalias %next, ptr noalias %perm) nounwind {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %body
body:
  %k = phi i64 [ 0, %entry ], [ %k1, %body ]
  %ps = getelementptr inbounds i64, ptr %src, i64 %k
  %w = load i64, ptr %ps, align 8
  %pn = getelementptr inbounds i64, ptr %next, i64 %w
  %slot = load i64, ptr %pn, align 8
  %slot1 = add i64 %slot, 1
  store i64 %slot1, ptr %pn, align 8
  %pp = getelementptr inbounds i64, ptr %perm, i64 %slot
  store i64 %k, ptr %pp, align 8
  %k1 = add nuw nsw i64 %k, 1
  %more = icmp slt i64 %k1, %n
  br i1 %more, label %body, label %exit
exit:
  ret void
}
"""

_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _compiled() -> tuple[object, object]:
    """The engine (kept alive with the function) and the function, compiled on first use.

    llvmlite is imported here, not with the module: the runtime imports this module, and
    importing the runtime must not load a code generator (tests/test_pipeline.py).
    """
    from .llvm.machines import jit_ir

    with _LOCK:
        engine = jit_ir(_IR)
        return engine, _SIGNATURE(engine.get_function_address("tcc_place_stable"))


def place_stable(src: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``perm`` with ``perm[starts[w] + r]`` = the position of the ``r``-th entry equal to ``w`` in ``src``.

    ``src`` is a validated 1-D int64 array and ``starts[w]`` the number of its
    entries below ``w`` (one per possible value): the stable order of ``src``.
    """
    src = np.ascontiguousarray(src, dtype=np.int64)
    nxt = np.array(starts, dtype=np.int64, copy=True)          # advanced in place: one cursor per bucket
    perm = np.empty(src.shape[0], dtype=np.int64)
    _, fn = _compiled()
    fn(src.ctypes.data, src.shape[0], nxt.ctypes.data, perm.ctypes.data)  # type: ignore[operator]
    return perm
