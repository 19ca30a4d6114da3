"""How long NumPy's OpenBLAS threads spin after a threaded call (issue 13: BLAS and tcc's team share the cores).

OpenBLAS's worker threads, after a threaded GEMM, spin for ``2^28`` time-stamp
cycles (about 0.1 s here) before they sleep.  A tcc call runs external
kernels (BLAS) and its own parallel kernels (the thread team) one after
another, so every team kernel within 0.1 s of a threaded GEMM -- every one
after the first GEMM of a program -- runs beside a spinning OpenBLAS worker.
On this 2-core machine that took a core from the team: contract3's value and
gradients (six products of 48 x 48 matrices, two of them stacks dealt over
the team) took 1.4-2.4 ms per call, by process and bimodally, against a
steady 1.21-1.24 ms with a spin of ``2^20`` cycles (docs/runtime.md has the
measurements).  The spin is OpenBLAS's ``OPENBLAS_THREAD_TIMEOUT``
(``2^N`` cycles, ``4 <= N <= 30``), which it reads from the environment
when it loads -- before tcc runs, since NumPy loads it.

:func:`shorten_blas_spin` therefore sets it in-process, once, at an external
kernel tcc runs: it puts the value in the environment, has OpenBLAS read its
environment again (``openblas_read_env``), removes the value again (a
subprocess started afterwards inherits nothing; a forked child keeps the
short spin, since OpenBLAS restarts its threads after a fork with the value
it holds), and stops OpenBLAS's threads (``blas_thread_shutdown_``), which
its next threaded call starts again with the new limit: OpenBLAS reads the
limit only when it starts its threads.  What that costs and where it is
refused:

* a threaded BLAS call whose worker has gone to sleep pays a wake-up
  (``2^20`` cycles, the default, is 0.4 ms of spin: back-to-back calls, and
  the GEMMs of one external kernel, still find the worker awake);
* nothing is changed where the user set ``OPENBLAS_THREAD_TIMEOUT``
  (their choice stands), where ``TCC_BLAS_SPIN=off`` (or ``0``), or where
  NumPy's BLAS is not OpenBLAS or lacks the entry points;
* stopping OpenBLAS's threads while another thread is inside a threaded
  BLAS call hangs both threads for good.  So the change is made only at an
  external kernel whose calling thread is the only Python thread alive
  besides tcc's own workers (which run BLAS only inside that thread's
  call); while other threads live (a Dask worker's, a user's, a Jupyter
  kernel's), every external kernel checks again (``threading.enumerate``,
  about a microsecond) and leaves OpenBLAS alone.  tcc's own threads wait
  on a lock while the change is made.  Threads that C code starts without
  Python and that call NumPy's OpenBLAS are not seen: a program with such
  threads should set ``TCC_BLAS_SPIN=off`` or ``OPENBLAS_THREAD_TIMEOUT``.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from typing import Iterator

__all__ = ["DEFAULT_SPIN_LOG2", "OPENBLAS_DEFAULT_LOG2", "applied", "openblas_spin", "shorten_blas_spin",
           "spin_setting"]

#: OpenBLAS's ``OPENBLAS_THREAD_TIMEOUT`` that tcc sets: ``2^20`` cycles (0.4 ms at 2.6 GHz), a 250th of
#: OpenBLAS's own; long enough for the gaps between the GEMMs of one external kernel (a convolution's 72)
DEFAULT_SPIN_LOG2 = 20

#: OpenBLAS's own (its build's ``THREAD_TIMEOUT``): ``2^28`` cycles, about 0.1 s
OPENBLAS_DEFAULT_LOG2 = 28

_done = False
_lock = threading.Lock()
_applied: int | None = None


def spin_setting() -> int | None:
    """The ``OPENBLAS_THREAD_TIMEOUT`` exponent tcc would set (``TCC_BLAS_SPIN``, default
    :data:`DEFAULT_SPIN_LOG2`), or None where it leaves OpenBLAS alone."""
    if os.environ.get("OPENBLAS_THREAD_TIMEOUT"):
        return None
    raw = os.environ.get("TCC_BLAS_SPIN", "").strip().lower()
    if not raw:
        return DEFAULT_SPIN_LOG2
    if raw in ("off", "0", "no", "false"):
        return None
    try:
        value: int | None = int(raw)
    except ValueError:
        value = None
    if value is None or not 4 <= value <= 30:
        shown = repr(raw) if value is None else value
        raise ValueError(f"TCC_BLAS_SPIN must be 'off' or an integer from 4 to 30 (log2 of the spin in cycles), "
                         f"not {shown}")
    return value


def applied() -> int | None:
    """The exponent set in this process (None: not set, or left to OpenBLAS)."""
    return _applied


def shorten_blas_spin() -> None:
    """Set NumPy's OpenBLAS thread timeout once per process (see the module docstring); cheap after the first call."""
    global _done, _applied
    if _done:
        return
    with _lock:
        if _done:
            return
        value = spin_setting()  # a bad TCC_BLAS_SPIN raises here, on every call until it is mended
        if value is not None:
            if not _alone():
                return  # another thread might be inside BLAS: try again at a later external kernel
            if _set(value):
                _applied = value
        # only now: another thread's first external kernel waits on the lock instead of calling BLAS while
        # OpenBLAS's threads are being stopped
        _done = True


def _alone() -> bool:
    """Whether the calling thread is the only Python thread alive besides tcc's own workers (the thread
    team's and the pool's, named ``tcc-...``, which call BLAS only inside a call that this thread makes).
    Stopping OpenBLAS's threads while another thread is inside a threaded BLAS call hangs both for good
    (a busy worker never sees the stop, and the stop waits for it): found in review, 9 of 9 runs hung."""
    if threading.active_count() == 1:
        return True
    me = threading.current_thread()
    return all(t is me or t.name.startswith("tcc-") for t in threading.enumerate())


@contextlib.contextmanager
def openblas_spin(log2: int = OPENBLAS_DEFAULT_LOG2) -> Iterator[bool]:
    """Within the block, OpenBLAS's threads spin ``2^log2`` cycles (default: OpenBLAS's own); after it, as
    tcc set them (or OpenBLAS's default).  For measuring NumPy as it runs without tcc (benchmarks/): two
    restarts of OpenBLAS's threads, so no other thread may be using BLAS at either end of the block
    (the hang of :func:`_alone`).  Yields whether the spin could be set (NumPy's BLAS is OpenBLAS)."""
    if not 4 <= log2 <= 30:
        raise ValueError(f"log2 must be from 4 to 30, not {log2}")
    with _lock:
        ok = _set(log2)
    try:
        yield ok
    finally:
        if ok:
            with _lock:
                _set(_before())


def _before() -> int:
    """The spin outside :func:`openblas_spin`: tcc's, else the user's ``OPENBLAS_THREAD_TIMEOUT``, else
    OpenBLAS's default."""
    if _applied is not None:
        return _applied
    try:
        user = int(os.environ.get("OPENBLAS_THREAD_TIMEOUT", ""))
    except ValueError:
        user = 0
    return min(max(user, 4), 30) if user > 0 else OPENBLAS_DEFAULT_LOG2


def _set(log2: int) -> bool:
    """Have OpenBLAS's threads spin ``2^log2`` cycles from its next threaded call on; False where it cannot."""
    lib = _openblas()
    if lib is None:
        return False
    read_env, shutdown, timeout = lib
    saved = os.environ.get("OPENBLAS_THREAD_TIMEOUT")
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(log2)
    try:
        read_env()
    finally:
        if saved is None:
            del os.environ["OPENBLAS_THREAD_TIMEOUT"]
        else:
            os.environ["OPENBLAS_THREAD_TIMEOUT"] = saved
    if timeout() != log2:  # not the OpenBLAS this module was written against: leave its threads alone
        return False
    shutdown()
    return True


@functools.lru_cache(maxsize=1)
def _openblas() -> tuple[ctypes._CFuncPtr, ctypes._CFuncPtr, ctypes._CFuncPtr] | None:  # type: ignore[name-defined]
    """NumPy's OpenBLAS entry points ``openblas_read_env``, ``blas_thread_shutdown_`` and
    ``openblas_thread_timeout``, or None where NumPy's BLAS is another library or lacks one of them."""
    from tcc.runtime.externs.blas_gemm import _numpy_blas_info

    info = _numpy_blas_info()  # one scan of the loaded libraries (threadpoolctl) for the path and the kind
    if info is None or info.get("internal_api") != "openblas":
        return None
    try:
        lib = ctypes.CDLL(str(info["filepath"]))
        read_env, shutdown, timeout = lib.openblas_read_env, lib.blas_thread_shutdown_, lib.openblas_thread_timeout
    except (OSError, AttributeError):
        return None
    read_env.restype = None
    read_env.argtypes = []
    shutdown.restype = ctypes.c_int
    shutdown.argtypes = []
    timeout.restype = ctypes.c_uint
    timeout.argtypes = []
    return read_env, shutdown, timeout
