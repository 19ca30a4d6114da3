"""``C = A @ B + beta * C`` on strided 2-D views, by the BLAS that NumPy links.

NumPy's ``matmul`` has no ``beta``: accumulating a product into ``C`` takes
a temporary and an addition, a second pass over ``C``.  A convolution run
as shifted GEMMs (``tcc.runtime.externs.window_kernel``) accumulates one product per kernel
offset, 9 for a 3x3 kernel, so that pass would cost more than the products'
own memory traffic.  This module calls ``cblas_dgemm`` / ``cblas_sgemm``
of NumPy's own BLAS library directly (found with threadpoolctl, already a
dependency for thread limits: its ``filepath``), with the leading
dimensions of the views: no copy, no temporary, ``beta = 1``.

Which symbol: NumPy's wheels bundle scipy-openblas with prefixed ILP64
names (``scipy_cblas_dgemm64_``); older wheels have ``cblas_dgemm64_`` or
plain ``cblas_dgemm``.  Integers are passed as 64-bit values; the plain
symbol is used only on x86-64 Linux, where a 32-bit ``int`` parameter reads
the low half of the same register or 8-byte stack slot.  The first use runs
a small product and compares it with NumPy's; if no symbol is found, or the
check fails, :func:`gemm` falls back to ``np.matmul`` and an addition (the
same numbers, slower).
"""
from __future__ import annotations

import ctypes
import platform
import sys
import threading
from typing import Any

import numpy as np

__all__ = ["gemm", "gemm_args", "native"]

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
#: NumPy's type character -> BLAS's (float32 is NumPy's ``f``, BLAS's ``s``)
_BLAS_CHAR = {"d": "d", "f": "s"}
_lock = threading.Lock()
_fns: dict[str, Any] | None = None


def _numpy_blas_info() -> dict[str, Any] | None:
    """threadpoolctl's description of NumPy's BLAS library (``filepath``, ``internal_api``, ...), or None."""
    from threadpoolctl import threadpool_info

    libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    mine = [i for i in libs if "numpy" in str(i.get("filepath", ""))]
    return (mine or libs)[0] if (mine or libs) else None


def _numpy_blas_path() -> str | None:
    info = _numpy_blas_info()
    return None if info is None else str(info["filepath"])


def _load() -> dict[str, Any]:
    """The GEMM entry points by dtype character (``d``, ``s``), checked; empty where none is usable."""
    np.dot(np.ones((2, 2)), np.ones((2, 2)))  # makes sure NumPy's BLAS is loaded
    path = _numpy_blas_path()
    if path is None:
        return {}
    lib = ctypes.CDLL(path)
    plain_ok = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fns: dict[str, Any] = {}
    for ch, real in (("d", ctypes.c_double), ("s", ctypes.c_float)):
        for prefix, suffix in (("scipy_", "64_"), ("", "64_"), ("", "")):
            if not suffix and not plain_ok:
                continue
            f = getattr(lib, f"{prefix}cblas_{ch}gemm{suffix}", None)
            if f is None:
                continue
            f.argtypes = [i64, i64, i64, i64, i64, i64, real, ptr, i64, ptr, i64, real, ptr, i64]
            f.restype = None
            fns[ch] = f
            break
    for ch, dt in (("d", np.float64), ("s", np.float32)):
        if ch in fns and not _works(fns[ch], dt):
            del fns[ch]
    return fns


def _works(f: Any, dtype: Any) -> bool:
    a = np.arange(6, dtype=dtype).reshape(2, 3)
    b = np.arange(12, dtype=dtype).reshape(3, 4)
    c = np.ones((2, 4), dtype)
    config = _config(a, b, c)
    assert config is not None
    _invoke(f, *config, a, b, c, 1.0)
    return bool(np.array_equal(c, a @ b + 1))


def native() -> dict[str, Any]:
    """The checked BLAS entry points (loaded on first use)."""
    global _fns
    if _fns is None:
        with _lock:
            if _fns is None:
                try:
                    _fns = _load()
                except (OSError, AttributeError, ImportError, IndexError):  # no usable library: NumPy fallback
                    _fns = {}
    return _fns


def _layout(x: np.ndarray) -> tuple[int, int] | None:
    """``(transpose flag, leading dimension)`` of a 2-D view for a row-major BLAS call, or ``None``."""
    item = x.itemsize
    r, c = x.shape
    s0, s1 = x.strides
    if (s1 == item or c <= 1) and s0 % item == 0 and s0 // item >= max(c, 1):
        return _NO_TRANS, s0 // item
    if (s0 == item or r <= 1) and s1 % item == 0 and s1 // item >= max(r, 1):
        return _TRANS, s1 // item
    if r <= 1 and c <= 1:
        return _NO_TRANS, 1
    return None


def _config(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[tuple[int, ...], bool] | None:
    """``((transA, transB, M, N, K, lda, ldb, ldc), swapped)`` of the row-major call computing
    ``c = a @ b (+ c)`` -- with ``swapped``, the call's first matrix is ``b`` and its second ``a``
    (``c^T = b^T a^T``, where ``c``'s unit stride is along its rows) -- or ``None`` where BLAS cannot
    take the views."""
    m, n = c.shape
    if c.strides[1] != c.itemsize and n > 1:
        config = _config(b.T, a.T, c.T)
        return None if config is None else (config[0], not config[1])
    la, lb = _layout(a), _layout(b)
    if la is None or lb is None or not (m == 1 or (c.strides[0] % c.itemsize == 0 and c.strides[0] // c.itemsize >= n)):
        return None
    return (la[0], lb[0], m, n, a.shape[1], la[1], lb[1], max(c.strides[0] // c.itemsize, n, 1)), False


def _invoke(f: Any, cfg: tuple[int, ...], swapped: bool, a: np.ndarray, b: np.ndarray, c: np.ndarray,
            beta: float) -> None:
    ta, tb, m, n, k, lda, ldb, ldc = cfg
    first, second = (b, a) if swapped else (a, b)
    f(_ROW_MAJOR, ta, tb, m, n, k, 1.0, first.ctypes.data, lda, second.ctypes.data, ldb, beta, c.ctypes.data, ldc)


def gemm_args(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[Any, tuple[int, ...], bool] | None:
    """``(entry point, (transA, transB, M, N, K, lda, ldb, ldc), swapped)`` of the row-major BLAS
    call computing ``c = a @ b (+ c)`` (:func:`_config`), or ``None`` where :func:`gemm` would not
    call BLAS (no entry point for the dtype, a view BLAS cannot take, an empty product)."""
    m, n = c.shape
    if m == 0 or n == 0 or a.shape[1] == 0:
        return None
    f = native().get(_BLAS_CHAR.get(c.dtype.char, ""))
    config = None if f is None else _config(a, b, c)
    return None if config is None else (f, *config)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, beta: float) -> None:
    """``c[...] = a @ b + beta * c`` (``beta`` 0 or 1; ``c`` is not read when 0) for 2-D views of one
    dtype, each with a unit stride along one axis (``a`` and ``b`` may be read transposed)."""
    if c.size and a.shape[1] == 0:
        if beta == 0:
            c[...] = 0
        return
    args = gemm_args(a, b, c)
    if args is not None:
        _invoke(*args, a, b, c, beta)
    elif c.size == 0:
        return
    elif beta == 0:
        np.matmul(a, b, out=c)
    else:
        c += a @ b
