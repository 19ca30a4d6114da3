"""A stack of small matrix products dealt over the thread team (issue 13: batched contractions).

``np.matmul`` on a stack calls BLAS once per member, one after another.  A
member below OpenBLAS's own threading threshold (``M N K <= 4 * 65536``: its
``GEMM_MULTITHREAD_THRESHOLD`` times ``SMP_THRESHOLD_MIN``) runs on one
thread, so the whole stack -- the contract3 family's 48 products of 48^3 --
ran on one core of two.  JAX (Eigen) and torch deal a batch over their
threads; so does this.  The members' BLAS calls are made from native loops
(:func:`tcc.backends.gemm_loop.gemm_loop_parts`), one contiguous run of
members per part on the thread team, so no Python and no GIL sits between
them.  Dealing them over Python threads instead measured slower than the
unsplit stack (the wake-ups, docs/runtime.md#threads).

Every stack whose members BLAS can take runs from that native loop, dealt or
not, so a member is the same BLAS call for any thread count: the results do
not depend on it.  Not dealt (one loop on the calling thread): members above
the threshold (BLAS threads each itself), stacks whose work is too small to
pay for the hand-off, and wherever there is no team.  Views BLAS cannot take
and dtypes without a BLAS entry point run as ``np.matmul``.
"""
from __future__ import annotations

import ctypes

import numpy as np

from tcc.runtime.externs.blas_gemm import gemm_args

__all__ = ["BLAS_THREADED_MNK", "MIN_SPLIT_MNK", "matmul_stack", "split_parts"]

#: OpenBLAS threads a GEMM above this ``M * N * K`` (interface/gemm.c); below it a member runs on one thread
BLAS_THREADED_MNK = 4 * 65536
#: a stack is dealt only when its members' ``M * N * K`` add up to this much (about 30 us of work)
MIN_SPLIT_MNK = 1 << 19
#: parts per thread: finer than one run per thread, so a worker that wakes late takes fewer members
PARTS_PER_THREAD = 4


def split_parts(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int | None) -> int:
    """How many parts ``out = a @ b`` (``out`` a 3-D stack) is dealt in: 1 (not dealt) or more."""
    if threads is None or threads < 2 or out.ndim != 3 or out.shape[0] < 2:
        return 1
    member = out.shape[1] * out.shape[2] * a.shape[-1]
    if member == 0 or member > BLAS_THREADED_MNK or member * out.shape[0] < MIN_SPLIT_MNK:
        return 1
    return min(out.shape[0], PARTS_PER_THREAD * threads)


def _members(x: np.ndarray, count: int) -> np.ndarray:
    """``x`` as ``count`` matrices (NumPy's broadcasting: a 2-D operand is every member's)."""
    return np.broadcast_to(x, (count,) + x.shape[-2:]) if x.ndim == 2 or x.shape[0] == 1 else x


def matmul_stack(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int | None) -> None:
    """``np.matmul(a, b, out=out)``; a stack's members are BLAS calls from one native loop, dealt over the
    thread team when they are small (:func:`split_parts`), so the same calls run for any thread count."""
    plan = _plan(a, b, out)
    if plan is None:
        np.matmul(a, b, out=out)
        return
    from tcc.backends.gemm_loop import gemm_loop, gemm_loop_parts

    parts = split_parts(a, b, out, threads)
    if parts > 1 and gemm_loop_parts(*plan, parts, threads):
        return
    gemm_loop(*plan)


#: plans by the operands' layouts (shapes, strides, dtype): everything but the three base addresses
_PLANS: dict[tuple, tuple[str, int, np.ndarray, np.ndarray, bool] | None] = {}
_PLANS_MAX = 256


def _plan(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> tuple[str, int, np.ndarray, np.ndarray, int, int, int] | None:
    """The arguments of :func:`tcc.backends.gemm_loop.gemm_loop` computing the stack ``out = a @ b``
    (``out`` 3-D, two members or more), or None where BLAS cannot take the members' views.  The
    layout's part is kept per layout: working it out costs some 30 us, a tenth of a 48^3 stack."""
    key = (a.shape, a.strides, b.shape, b.strides, out.shape, out.strides, out.dtype.char, a.dtype.char,
           b.dtype.char)
    if key in _PLANS:
        layout = _PLANS[key]
    else:
        layout = _layout(a, b, out)
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = layout
    if layout is None:
        return None
    ch, fn, cfg, offs, swapped = layout
    first, second = (b, a) if swapped else (a, b)
    return ch, fn, cfg, offs, first.ctypes.data, second.ctypes.data, out.ctypes.data


def _layout(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> tuple[str, int, np.ndarray, np.ndarray, bool] | None:
    """What :func:`_plan` keeps: the dtype character, BLAS entry point, call configuration, the members'
    byte offsets, and whether the call's first matrix is ``b``'s."""
    if out.ndim != 3 or out.shape[0] < 2 or out.size == 0 or a.shape[-1] == 0:
        return None
    count = out.shape[0]
    a3, b3 = _members(a, count), _members(b, count)
    if a3.shape[0] != count or b3.shape[0] != count or a3.dtype != out.dtype or b3.dtype != out.dtype:
        return None
    args = gemm_args(a3[0], b3[0], out[0])
    if args is None:
        return None
    f, cfg, swapped = args
    steps = np.arange(count, dtype=np.int64)
    first, second = (b3, a3) if swapped else (a3, b3)
    offs = np.stack([steps * first.strides[0], steps * second.strides[0], steps * out.strides[0],
                     np.zeros(count, np.int64)], axis=1)
    return (out.dtype.char, ctypes.cast(f, ctypes.c_void_p).value or 0, np.array(cfg, dtype=np.int64),
            np.ascontiguousarray(offs), swapped)
