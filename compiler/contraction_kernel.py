"""Running ``extern contract(A[...], B[...]) -> C[...]``: transpose, reshape, one ``np.matmul`` (issue 13).

A contraction's indices fall into groups (:mod:`tcc.ir.contraction`): batch
``h``, left-free ``a``, right-free ``b`` and contracted ``z`` (each a tuple
of indices).  The kernel views

* ``A`` as a stack of ``(a, z)`` matrices over ``h`` (or of ``(z, a)``
  matrices, handed to BLAS with the transpose flag),
* ``B`` as a stack of ``(z, b)`` (or ``(b, z)``) matrices,
* ``C`` as a stack of ``(a, b)`` (or ``(b, a)``: then it computes
  ``B^T A^T``, the same numbers) matrices,

each by ``transpose`` + ``reshape`` of the stored array.  When a group is
contiguous and in the same order in the stored array, that is a view (no
copy) -- batch indices in any position included, since a batch axis may have
any stride.  Otherwise the operand is copied once into the needed layout
(``np.copyto`` of the transposed view into scratch space kept between calls:
memory traffic of the operand's size, which the ``blas`` pass's cost model weighed against the
loop nest before it made the call), and a result that cannot be viewed is
computed into a temporary and copied into ``C``.  The contracted group's order
is the one that needs the fewest copies.  Strided views that BLAS cannot take
(neither of the last two axes of unit stride) are copied too: NumPy would
otherwise fall back to its slow non-BLAS loop.
"""
from __future__ import annotations

import math
import threading
from typing import Sequence

import numpy as np

from tcc.ir.contraction import Spec, groups

__all__ = ["run_contract", "plan_copies"]

#: scratch space of at most this many bytes per slot is kept between calls
SCRATCH_BYTES = 1 << 26
_scratch = threading.local()  # per calling thread: slot -> flat array


def _scratch_array(slot: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A C-ordered array of ``shape`` in scratch space that persists between calls (per thread).

    A fresh NumPy array of a megabyte or more is fresh memory from the OS: its
    first writes page-fault, which measured 0.2 ms for 0.9 MB -- as much as the
    transposing copy itself and half the GEMM of the motivating gradient.
    Reusing the space keeps the copy at the cost of the copy.  Above
    :data:`SCRATCH_BYTES` an array is allocated per call and not kept.
    """
    n = math.prod(shape)
    if n * np.dtype(dtype).itemsize > SCRATCH_BYTES:
        return np.empty(shape, dtype)
    slots = getattr(_scratch, "slots", None)
    if slots is None:
        slots = _scratch.slots = {}
    flat = slots.get((slot, np.dtype(dtype)))
    if flat is None or flat.size < n:
        flat = slots[(slot, np.dtype(dtype))] = np.empty(n, dtype)
    return flat[:n].reshape(shape)


def _view(x: np.ndarray, perm: Sequence[int], shape: tuple[int, int, int]) -> np.ndarray | None:
    """``x.transpose(perm).reshape(shape)`` if that is a view BLAS can take, else ``None``."""
    y = x.transpose(perm)
    try:
        v = np.reshape(y, shape, copy=False)
    except ValueError:  # a copy would be needed
        return None
    except TypeError:  # NumPy < 2.1: no copy= (setting .shape refuses what needs a copy)
        v = y.view()
        try:
            v.shape = shape
        except AttributeError:
            return None
    item = v.itemsize
    ok = (v.strides[2] == item or shape[2] <= 1) and (v.strides[1] % item == 0) and (
        shape[1] <= 1 or v.strides[1] >= shape[2] * item)
    return v if ok else None


def _stack(x: np.ndarray, idx: tuple[str, ...], batch: tuple[str, ...], rows: tuple[str, ...],
           cols: tuple[str, ...], ext: dict[str, int], copy: int | None = 0) -> np.ndarray | None:
    """``x`` (axes named ``idx``) as a ``(batch, rows, cols)`` matrix stack: a view, a transposed view,
    or a transposing copy into scratch slot ``copy``; ``None`` where a copy is needed and ``copy`` is None."""
    pos = {v: k for k, v in enumerate(idx)}
    size = [math.prod(ext[v] for v in g) for g in (batch, rows, cols)]
    direct = _view(x, [pos[v] for v in batch + rows + cols], (size[0], size[1], size[2]))
    if direct is not None:
        return direct
    flipped = _view(x, [pos[v] for v in batch + cols + rows], (size[0], size[2], size[1]))
    if flipped is not None:
        return flipped.swapaxes(1, 2)  # BLAS reads it with the transpose flag
    if copy is None:
        return None
    # copy in the orientation that keeps the stored last axis last (runs of contiguous reads)
    flip = bool(idx) and idx[-1] in rows
    moved = x.transpose([pos[v] for v in batch + (cols + rows if flip else rows + cols)])
    into = _scratch_array(copy, moved.shape, x.dtype)
    np.copyto(into, moved)
    return into.reshape(size[0], size[2], size[1]).swapaxes(1, 2) if flip else into.reshape(size)


def _extents(spec: Spec, a: np.ndarray, b: np.ndarray) -> dict[str, int]:
    return {x: n for ix, arr in zip(spec[:2], (a, b)) for x, n in zip(ix, arr.shape)}


def plan_copies(spec: Spec, a: np.ndarray, b: np.ndarray) -> tuple[tuple[str, ...], int]:
    """The contracted group's order (that of ``A``, else ``B``) and how many operands it copies: the fewest."""
    g, ext = groups(spec), _extents(spec, a, b)
    orders = [g.contracted, tuple(x for x in spec[1] if x in g.contracted)]
    best: tuple[tuple[str, ...], int] | None = None
    for k in orders:
        n = sum(_stack(x, ix, g.batch, r, c, ext, copy=None) is None
                for x, ix, r, c in ((a, spec[0], g.left, k), (b, spec[1], k, g.right)))
        if best is None or n < best[1]:
            best = (k, n)
    assert best is not None
    return best


def run_contract(spec: Spec, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Write ``contract(A[...], B[...])`` into ``out`` (axes named ``spec[2]``) with one ``np.matmul``."""
    b = b.astype(a.dtype, copy=False)
    g, ext = groups(spec), _extents(spec, a, b)
    if out.size == 0:
        return
    if math.prod(ext[x] for x in g.contracted) == 0:  # an empty sum
        out[...] = 0
        return
    k, _ = plan_copies(spec, a, b)
    lhs = _stack(a, spec[0], g.batch, g.left, k, ext, 0)
    rhs = _stack(b, spec[1], g.batch, k, g.right, ext, 1)
    assert lhs is not None and rhs is not None
    res = _stack(out, spec[2], g.batch, g.left, g.right, ext, copy=None)
    if res is not None and res.flags.writeable and res.strides[2] == out.itemsize:
        np.matmul(lhs, rhs, out=res)
        return
    if res is not None:  # the result is stored the other way round: (B^T A^T) is C^T
        np.matmul(rhs.swapaxes(1, 2), lhs.swapaxes(1, 2), out=res.swapaxes(1, 2))
        return
    pos = {v: n for n, v in enumerate(spec[2])}
    view = out.transpose([pos[v] for v in g.batch + g.left + g.right])
    tmp = _scratch_array(2, (lhs.shape[0], lhs.shape[1], rhs.shape[2]), out.dtype)
    np.matmul(lhs, rhs, out=tmp)
    view[...] = tmp.reshape(view.shape)
