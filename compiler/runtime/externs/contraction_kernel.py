"""Running ``extern contract(A[...], B[...]) -> C[...]``: transpose, reshape, one ``np.matmul``.

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
is the one that needs the fewest copies, and where copies remain, a contracted
index that both operands can take as a batch axis may be split off instead
(:func:`plan_split`: a stack of products, summed).  Strided views that BLAS cannot take
(neither of the last two axes of unit stride) are copied too: NumPy would
otherwise fall back to its slow non-BLAS loop.
"""
from __future__ import annotations

import math
import threading
from typing import Any, Sequence

import numpy as np

from tcc.ir.contraction import Spec, groups
from tcc.runtime.externs.stack_matmul import matmul_stack

__all__ = ["run_contract", "plan_copies", "plan_split"]

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


def run_contract(spec: Spec, a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int | None = None) -> None:
    """Write ``contract(A[...], B[...])`` into ``out`` (axes named ``spec[2]``) with one ``np.matmul``
    (a stack of small products dealt over ``threads``: :mod:`tcc.runtime.externs.stack_matmul`)."""
    b = b.astype(a.dtype, copy=False)
    g, ext = groups(spec), _extents(spec, a, b)
    if out.size == 0:
        return
    if math.prod(ext[x] for x in g.contracted) == 0:  # an empty sum
        out[...] = 0
        return
    k, split = _plan(spec, a, b)
    if split is not None:
        _run_split(spec, a, b, out, g, ext, split, threads)
        return
    lhs = _stack(a, spec[0], g.batch, g.left, k, ext, 0)
    rhs = _stack(b, spec[1], g.batch, k, g.right, ext, 1)
    assert lhs is not None and rhs is not None
    res = _stack(out, spec[2], g.batch, g.left, g.right, ext, copy=None)
    if res is not None and res.flags.writeable and res.strides[2] == out.itemsize:
        matmul_stack(lhs, rhs, res, threads)
        return
    if res is not None:  # the result is stored the other way round: (B^T A^T) is C^T
        matmul_stack(rhs.swapaxes(1, 2), lhs.swapaxes(1, 2), res.swapaxes(1, 2), threads)
        return
    view = _result_view(out, spec, g)
    tmp = _scratch_array(2, (lhs.shape[0], lhs.shape[1], rhs.shape[2]), out.dtype)
    matmul_stack(lhs, rhs, tmp, threads)
    view[...] = tmp.reshape(view.shape)


def _result_view(out: np.ndarray, spec: Spec, g: Any) -> np.ndarray:
    """``out`` with its axes in (batch, left, right) order: where a result that cannot be viewed as a
    matrix stack is copied into from scratch space."""
    pos = {v: n for n, v in enumerate(spec[2])}
    return out.transpose([pos[v] for v in g.batch + g.left + g.right])


#: a split's matrix products must each have at least this many multiply-adds: below, a stack of tiny
#: products runs at a fraction of one large product's rate and the copy is the cheaper way
SPLIT_MIN_WORK = 1 << 14


def plan_split(spec: Spec, a: np.ndarray, b: np.ndarray, k: tuple[str, ...]) -> tuple[str, tuple[str, ...]] | None:
    """A contracted index ``x`` that both operands can take as a *batch* index without a copy, and the
    order of the other contracted indices, when that is cheaper than the copies ``k`` needs.

    The products of the stack over ``x`` are summed afterwards, so the split writes and reads
    ``|x| * |batch| * |left| * |right|`` partial results where the copies move each copied operand
    once, at the cost of a transposition (strided reads: counted twice).  The contract3 gradient's
    ``dB[a, b] = sum[z1, z0](dT[z1, b, z0] * T_ctr[z1, a, z0])`` at 48 is the case: ``z1`` leads both
    operands, and splitting on it saved a third of the kernel's time against copying ``dT``.
    """
    g, ext = groups(spec), _extents(spec, a, b)
    sizes = {v: math.prod(ext[x] for x in grp) for v, grp in (("h", g.batch), ("l", g.left), ("r", g.right))}
    copied = sum(math.prod(x.shape) for x, ix, r, c in ((a, spec[0], g.left, k), (b, spec[1], k, g.right))
                 if _stack(x, ix, g.batch, r, c, ext, copy=None) is None)
    best: tuple[int, tuple[str, tuple[str, ...]]] | None = None
    for x in g.contracted:
        rest = tuple(v for v in g.contracted if v != x)
        work = sizes["l"] * sizes["r"] * math.prod(ext[v] for v in rest)
        extra = ext[x] * sizes["h"] * sizes["l"] * sizes["r"]
        if work < SPLIT_MIN_WORK or extra > 2 * copied:
            continue
        for order in (rest, tuple(v for v in spec[1] if v in rest)):
            batch = g.batch + (x,)
            if (_stack(a, spec[0], batch, g.left, order, ext, copy=None) is not None
                    and _stack(b, spec[1], batch, order, g.right, ext, copy=None) is not None
                    and (best is None or extra < best[0])):
                best = (extra, (x, order))
    return None if best is None else best[1]


#: plans by spec and operand layout (shapes and strides decide every view); bounded, cleared when full
_PLANS: dict[tuple, tuple[tuple[str, ...], tuple[str, tuple[str, ...]] | None]] = {}
_PLANS_MAX = 512


def _plan(spec: Spec, a: np.ndarray, b: np.ndarray) -> tuple[tuple[str, ...], tuple[str, tuple[str, ...]] | None]:
    """The contracted order and, where cheaper than its copies, a split: planned once per layout, as the
    planning tries every view (about 80 us of Python per call at contract3's sizes, a fifth of its kernels)."""
    key = (spec, a.shape, a.strides, b.shape, b.strides)
    plan = _PLANS.get(key)
    if plan is None:
        k, copies = plan_copies(spec, a, b)
        plan = (k, plan_split(spec, a, b, k) if copies else None)
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _run_split(spec: Spec, a: np.ndarray, b: np.ndarray, out: np.ndarray, g: Any, ext: dict[str, int],
               plan: tuple[str, tuple[str, ...]], threads: int | None) -> None:
    """``out`` as the sum over a contracted index of a stack of products of views (:func:`plan_split`)."""
    x, order = plan
    batch = g.batch + (x,)
    lhs = _stack(a, spec[0], batch, g.left, order, ext, copy=None)
    rhs = _stack(b, spec[1], batch, order, g.right, ext, copy=None)
    assert lhs is not None and rhs is not None
    h = math.prod(ext[v] for v in g.batch)
    parts = _scratch_array(3, (lhs.shape[0], lhs.shape[1], rhs.shape[2]), out.dtype)
    matmul_stack(lhs, rhs, parts, threads)
    summed = parts.reshape(h, ext[x], lhs.shape[1], rhs.shape[2])
    res = _stack(out, spec[2], g.batch, g.left, g.right, ext, copy=None)
    if res is not None and res.flags.writeable:
        np.sum(summed, axis=1, out=res)
        return
    view = _result_view(out, spec, g)
    view[...] = summed.sum(axis=1).reshape(view.shape)
