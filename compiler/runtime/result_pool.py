"""Result arrays handed back to a compiled program once the caller has let go of them.

The caller owns a call's results, so :mod:`tcc.runtime.scratch_pool` never keeps
them: each call allocates them afresh.  For results of a few MB that costs
what the scratch pool saves on intermediates: glibc's ``malloc`` gives the
freed memory of the previous call's results back to the operating system
(the heap's top is trimmed once it exceeds twice the largest block it has
seen), and the next call's results are faulted in again, page by page.  On
this project's shared machine a minor page fault costs about 3.5 us: layer
normalisation's value and gradients (two 4 MB results) faulted in about
1000 pages, 3.5 ms, per call, three times its kernels' time.  Whether it
happens depends on everything else the process allocates, so timings
jumped between runs.

The pool keeps the arrays it allocated for results and, in a later call,
reuses one whose only remaining reference is the pool's own: the caller
dropped the result, every view of it (a view holds its base) and every
buffer export (``memoryview``, ``torch.from_numpy``, DLPack capsules hold
the array too).  That is decided by the array's reference count, which
CPython keeps exactly; the baseline count of an array held by the pool
alone is measured once (:data:`_ALONE`), not assumed.  A raw pointer kept
without the array (``a.ctypes.data`` as an integer) is not a reference, and
using it after dropping the array is a use-after-free with NumPy's own
allocator as well.  Nor is a ``weakref.ref``: where it went dead when the
caller dropped the result, it now stays alive, pointing at an array later
calls write into.

At most :data:`KEPT_PER_RESULT` arrays are kept per result name (a caller
that holds the previous call's result while making the next call uses two),
and :meth:`ResultPool.clear` (``CompiledProgram.release_scratch``) lets them
go.  Results that must start zeroed (``tcc.backends.zero_fill``) and empty
ones are not pooled.  Lookups and hand-outs hold a lock, so two threads
calling one program never get the same array.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable

import numpy as np

#: arrays kept per result name
KEPT_PER_RESULT = 2


def _count(arrays: list[np.ndarray], i: int) -> int:
    """The reference count of ``arrays[i]`` as :meth:`ResultPool.take` sees it."""
    return sys.getrefcount(arrays[i])


def _alone() -> int:
    """What :func:`_count` says of an array that only its list holds (the interpreter's own
    temporaries included: measured, so that it holds on every CPython version)."""
    arrays = [np.empty(1)]
    return _count(arrays, 0)


_ALONE = _alone()


class ResultPool:
    """Arrays allocated for results, by result name; one is reused once nothing else refers to it."""

    def __init__(self) -> None:
        self._kept: dict[str, list[np.ndarray]] = {}
        self._lock = threading.Lock()

    def take(self, name: str, shape: tuple[int, ...], dtype: np.dtype, allocate: Callable[[], np.ndarray]) -> np.ndarray:
        """A free kept array of this shape and dtype for result ``name``, else a new one from ``allocate``
        (kept for later calls while fewer than :data:`KEPT_PER_RESULT` are)."""
        with self._lock:
            arrays = self._kept.setdefault(name, [])
            for i in range(len(arrays)):
                if arrays[i].shape == shape and arrays[i].dtype == dtype and _count(arrays, i) == _ALONE:
                    arrays.append(arrays.pop(i))  # most recently handed out last: the others are freed first
                    return arrays[-1]
            arr = allocate()
            if isinstance(arr, np.ndarray) and arr.size:
                if len(arrays) >= KEPT_PER_RESULT:
                    self._drop_one(arrays)
                if len(arrays) < KEPT_PER_RESULT:
                    arrays.append(arr)
            return arr

    @staticmethod
    def _drop_one(arrays: list[np.ndarray]) -> None:
        """Let go of the oldest kept array the caller no longer holds (one of another shape, say)."""
        for i in range(len(arrays)):
            if _count(arrays, i) == _ALONE:
                del arrays[i]
                return

    def clear(self) -> None:
        """Let go of every kept array (memory the caller still holds stays the caller's)."""
        with self._lock:
            self._kept.clear()

    def __len__(self) -> int:
        return sum(len(a) for a in self._kept.values())
