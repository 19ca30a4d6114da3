"""Running a windowed ``contract``: a stride-1 convolution as shifted GEMMs.

``y[b, o, i, j] = contract(x[b, c, i + p, j + q], w[o, c, p, q])[b, o, i, j]``
is, for each kernel offset ``(p, q)``, a plain contraction of the shifted
view ``x[:, :, p:, q:]`` with the matrix ``w[:, :, p, q]``; the products of
the offsets add up.  Each offset's product is a GEMM without any copy of
``x`` once its two position axes are one: in a C-ordered ``x`` of width
``W``, position ``(i, j)`` is element ``i * W + j`` of the shifted view, so
the view is a ``C x ((I - 1) * W + J)`` matrix with leading dimension
``H * W`` -- provided the *other* side holding the positions (here the
result) is laid out with width ``W`` too.  The result is therefore computed
into scratch space of width ``W`` (``W - J`` columns of it are never read)
and copied into ``y`` at the end; where the positions are summed (the
weight gradient ``contract(x[b, c, p + i, q + j], dy[b, o, i, j])``) the
other operand is copied into a zero-padded layout of width ``W`` instead.
``im2col`` would copy ``x`` once per kernel offset (9x its size for 3x3);
this copies one operand or the result once.

The steps of one call:

1. ``A`` is padded with zeros where a window reads outside it (a ``u - v``
   window, the input gradient: ``dy`` gets ``N - 1`` zeros on each side),
   into scratch space; otherwise it is used in place (a C-ordered copy if
   it is not C-ordered).
2. Each window's *offset* (the index looped over: the smaller extent, and
   ``v`` of ``u - v``) is fixed in turn; its other index, the *position*,
   stays an axis of the view.  Consecutive window axes merge into one
   position axis as above.
3. The indices fall into groups as for plain contractions (batch, left,
   right, contracted).  Per group, the index of largest extent is the
   GEMM's dimension; the others are looped over in Python.  ``B`` is
   copied once into a layout with the offsets and the looped indices first
   and the GEMM's two axes last (it is the kernel in the forward pass: a few
   KB); the result is computed into scratch space so laid out and copied
   into ``out`` at the end.  Where ``B`` holds the summed positions (the
   weight gradient), the innermost offset is folded into the GEMM's ``N``
   instead of looped over: ``B`` is copied once per value, shifted
   (:func:`tcc.ir.window_plan._fold`).
4. One GEMM per offset and looped index, ``beta = 1`` for every product
   added to an earlier one (NumPy's BLAS called directly:
   :mod:`tcc.runtime.externs.blas_gemm`), from one native loop (:mod:`tcc.backends.gemm_loop`)
   where every product has the same shapes and leading dimensions.  BLAS
   threads each product.  (Splitting the products over tcc's threads, each
   with a single-threaded BLAS, measured no faster here: 3.15-4.7 ms against
   2.7-3.5 ms for the two convolutions whose products split.)
"""
from __future__ import annotations

import ctypes
import functools
import math
from itertools import product
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tcc.ir.contraction import Spec
from tcc.ir.window_plan import MERGED, WindowPlan, window_plan

from tcc.backends.gemm_loop import gemm_loop

from .blas_gemm import gemm, gemm_args
from .contraction_kernel import _scratch_array
from .window_view import window_contract

__all__ = ["run_window"]

#: plans by spec and shapes (the plan tries views and groups: Python worth keeping across calls)
_plan = functools.lru_cache(maxsize=256)(window_plan)


def _positions(full: np.ndarray, order: tuple[str, ...], plan: WindowPlan) -> np.ndarray:
    """``full`` (axes ``order``, the merged positions widened) with each position cut to its extent."""
    if not (plan.merged and MERGED in order):
        return full
    k = order.index(MERGED)
    return full[(slice(None),) * k + tuple(slice(0, plan.ext[p]) for p in plan.merged)]


def _pack(x: np.ndarray, names: tuple[str, ...] | None, order: tuple[str, ...], plan: WindowPlan, slot: int,
          zero: bool) -> tuple[np.ndarray, np.ndarray]:
    """Scratch space laid out as ``order``, the merged positions widened to the padded widths of ``A``
    (zeros in the extra columns where ``zero``), with ``x`` (axes ``names``) copied in unless ``names``
    is None: the array, and its view with the positions merged into one axis."""
    shape: list[int] = []
    for x_ in order:
        if x_ == MERGED:
            shape += [plan.ext[plan.merged[0]], *plan.widths[1:]]
        else:
            shape.append(plan.ext[x_])
    full = _scratch_array(slot, tuple(shape), x.dtype)
    if not (plan.merged and MERGED in order):
        if names is not None:
            np.copyto(full, x.transpose([names.index(n) for n in order]))
        return full, full
    if zero and names is None:
        full.fill(0)
    elif zero:  # only the widened margins: the copy below writes everything else
        k0 = order.index(MERGED)
        for m in range(1, len(plan.merged)):
            axis = k0 + m
            full[(slice(None),) * axis + (slice(plan.ext[plan.merged[m]], None),)] = 0
    if names is not None:
        src_order = [n for o in order for n in (plan.merged if o == MERGED else (o,))]
        np.copyto(_positions(full, order, plan), x.transpose([names.index(n) for n in src_order]))
    k = order.index(MERGED)
    flat = full.reshape(shape[:k] + [-1] + shape[k + len(plan.merged):])
    return full, flat[(slice(None),) * k + (slice(0, plan.ext[MERGED]),)]


def run_window(spec: Spec, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = contract(A[...], B[...])`` for a spec whose first argument reads windows.

    The products run one after another on the calling thread; BLAS threads
    each of them (the caller sets its thread count: ``tcc.runtime.externs.dispatch.blas_limit``)."""
    ia, ib, io = spec
    if out.size == 0:
        return
    plan = _plan(spec, a.shape, b.shape)
    ext = plan.ext
    if any(ext[x] <= 0 for x in ext) or any(n == 0 for n in a.shape + b.shape):
        out[...] = 0
        return
    b = b.astype(out.dtype, copy=False)
    ap = a.astype(out.dtype, copy=False)
    if not _zeros_are_exact(plan, ap, b, io):
        np.copyto(out, window_contract(spec, ap, b, out.dtype))
        return
    if any(p != (0, 0) for p in plan.pads):
        src = ap
        ap = _scratch_array(20, tuple(n + lo + hi for n, (lo, hi) in zip(src.shape, plan.pads)), out.dtype)
        for k, (lo, hi) in enumerate(plan.pads):  # zeros on the borders only: the inside is copied next
            ap[(slice(None),) * k + (slice(0, lo),)] = 0
            ap[(slice(None),) * k + (slice(ap.shape[k] - hi, None),)] = 0
        ap[tuple(slice(lo, lo + n) for n, (lo, _) in zip(src.shape, plan.pads))] = src
    elif ap.strides != _natural_strides(ap):  # the views below take every stride as C order gives it
        ap = ap.copy(order="C")
    _, bp = _pack(b, ib, plan.b_order, plan, 21, zero=True)
    if plan.fold:  # one shifted copy per value of the folded offset (tcc.ir.window_plan._fold)
        nf, npos = plan.ext[plan.fold], plan.ext[MERGED]
        bf = _scratch_array(23, bp.shape[:-2] + (nf, bp.shape[-2], npos + nf - 1), out.dtype)
        for t in range(nf):  # each copy shifted by t, zeros before and after it (not a fill of all of bf)
            bf[..., t, :, :t] = 0
            bf[..., t, :, t:t + npos] = bp
            bf[..., t, :, t + npos:] = 0
        bp = bf.reshape(bp.shape[:-2] + (nf * bp.shape[-2], npos + nf - 1))
    full, op = _pack(out, None, plan.o_order, plan, 22, zero=False)
    _products(plan, ia, ap, bp, op)
    _unpack(plan, full, out, io)


def _natural_strides(x: np.ndarray) -> tuple[int, ...]:
    """The strides of a fresh C-ordered array of ``x``'s shape.  NumPy calls an array C-contiguous
    whatever the strides of its size-1 axes (``x[..., None]`` has stride 0 there), and the merged
    positions take their stride from the last window axis: found in review, it read outside ``x``."""
    return tuple(x.itemsize * math.prod(x.shape[k + 1:]) for k in range(x.ndim))


def _finite(x: np.ndarray) -> bool:
    """No inf or NaN in ``x`` (a sum: one pass, no temporary; an overflow to inf only costs the fallback)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.add.reduce(x, axis=None)))


def _zeros_are_exact(plan: WindowPlan, a: np.ndarray, b: np.ndarray, io: tuple[str, ...]) -> bool:
    """Whether the zeros the GEMMs multiply change nothing: padding of ``A`` meets ``B``'s values, and a
    widened ``B`` (summed positions) meets values of ``A`` -- ``0 * inf`` would be a NaN that the sum,
    which leaves those terms out, does not have."""
    if any(p != (0, 0) for p in plan.pads) and not _finite(b):
        return False
    widened_b = bool(plan.merged) and plan.merged[0] not in io
    return not widened_b or _finite(a)


def _a_view(plan: WindowPlan, ia: tuple[str, ...], ap: np.ndarray, at: dict[str, int]) -> np.ndarray:
    """The 2-D ``(M, K)`` view of the padded ``A`` at the offsets and looped indices ``at``."""
    item = ap.itemsize
    start = 0
    strides: dict[str, int] = {}
    wins = {w.axis: w for w in plan.windows}
    for k, x in enumerate(ia):
        s = ap.strides[k]
        w = wins.get(k)
        if w is None:
            start += at.get(x, 0) * s
            strides[x] = s
            continue
        start += (w.base + w.coef * at.get(w.off, 0)) * s  # a folded offset: 0 (B is shifted instead)
        name = MERGED if w.pos in plan.merged else w.pos
        start += at.get(name, 0) * s if name != MERGED else 0
        strides[name] = s  # for the merged block: the last window axis's stride wins (C order)
    start += at.get(MERGED, 0) * strides.get(MERGED, 0)
    m, kk, _ = plan.gemm_axes
    extra = plan.ext[plan.fold] - 1 if plan.fold else 0  # the positions one longer per folded value
    shape = (plan.ext[m] if m else 1, plan.ext[kk] + extra if kk else 1)
    st = (strides[m] if m else item, strides[kk] if kk else item)
    return as_strided(ap.reshape(-1)[start // item:], shape=shape, strides=st, writeable=False)


def _products(plan: WindowPlan, ia: tuple[str, ...], ap: np.ndarray, bp: np.ndarray, op: np.ndarray) -> None:
    """Every GEMM of the call, in order: natively (:func:`_native_calls`) where BLAS takes them all."""
    ext = plan.ext
    free = [range(ext[x]) for x in plan.free_loops]
    acc = [range(ext[x]) for x in plan.acc_loops]
    tuples = list(product(*free))
    m, kk, n = plan.gemm_axes
    b_lead = [x for x in plan.b_order if x not in (kk, n)]
    o_lead = [x for x in plan.o_order if x not in (m, n, plan.fold)]
    o_mn = [x for x in plan.o_order if x in (m, n)]

    def two_d(x: np.ndarray, lead: list[str], at: dict[str, int], rows: str, cols: str,
              stored: list[str]) -> np.ndarray:
        y = x[tuple(at[v] for v in lead) + (Ellipsis,)]
        if x is op and plan.fold:  # the result with a folded offset f: f and n (right after it) one axis
            k = [v for v in plan.o_order if v not in lead].index(plan.fold)
            y = y.reshape(y.shape[:k] + (y.shape[k] * y.shape[k + 1],) + y.shape[k + 2:])
        if not rows:
            y = y[None, :] if stored == [cols] else y
        if not cols:
            y = y[:, None] if stored == [rows] else y
        if len(stored) == 2 and stored[0] == cols:
            y = y.T
        if y.ndim == 0:
            y = y.reshape(1, 1)
        return y

    def views(t: tuple[int, ...]) -> Any:
        at0 = dict(zip(plan.free_loops, t))
        for i, s in enumerate(product(*acc)):
            at = {**at0, **dict(zip(plan.acc_loops, s))}
            yield (_a_view(plan, ia, ap, at), two_d(bp, b_lead, at, kk, n, [x for x in plan.b_order if x in (kk, n)]),
                   two_d(op, o_lead, at, m, n, o_mn), 0.0 if i == 0 else 1.0)

    native = _native_calls(plan, ap, bp, op, tuples, views)
    if native is not None:
        fn, ch, cfg, offs, swapped = native
        first, second = (bp, ap) if swapped else (ap, bp)

        gemm_loop(ch, fn, cfg, offs, first.ctypes.data, second.ctypes.data, op.ctypes.data)
        return
    for t in tuples:
        for a2, b2, c2, beta in views(t):
            gemm(a2, b2, c2, beta)


_CALLS: dict[Any, Any] = {}


def _native_calls(plan: WindowPlan, ap: np.ndarray, bp: np.ndarray, op: np.ndarray, tuples: list[Any],
                  views: Any) -> tuple[int, str, np.ndarray, np.ndarray, bool] | None:
    """The BLAS entry point, the call's fixed arguments, the ``(offsets, beta)`` rows for
    :func:`tcc.backends.gemm_loop.gemm_loop` and whether the call's first matrix is ``B``'s (then the
    offsets are of ``B``, ``A``, the result), or ``None`` where some product cannot be one BLAS call
    with the same arguments as the others.  A function of the plan and the three arrays' strides
    (their addresses enter as offsets), so it is kept per plan."""
    key = (id(plan), ap.dtype.char, ap.strides, bp.strides, op.strides)
    hit = _CALLS.get(key)
    if hit is not None and hit[0] is plan:
        return hit[1]
    fixed = None
    rows = []
    for t in tuples:
        for a2, b2, c2, beta in views(t):
            args = gemm_args(a2, b2, c2)
            if args is None or (fixed is not None and args != fixed):
                return None
            fixed = args
            oa, ob = a2.ctypes.data - ap.ctypes.data, b2.ctypes.data - bp.ctypes.data
            rows.append((ob, oa, c2.ctypes.data - op.ctypes.data, int(beta)) if args[2] else
                        (oa, ob, c2.ctypes.data - op.ctypes.data, int(beta)))
    if fixed is None:
        return None
    f, cfg, swapped = fixed
    result = (ctypes.cast(f, ctypes.c_void_p).value, ap.dtype.char, np.array(cfg, dtype=np.int64),
              np.array(rows, dtype=np.int64).reshape(-1, 4), swapped)
    if len(_CALLS) > 256:
        _CALLS.clear()
    _CALLS[key] = (plan, result)
    return result


def _unpack(plan: WindowPlan, full: np.ndarray, out: np.ndarray, io: tuple[str, ...]) -> None:
    """Copy the scratch result (``plan.o_order``, positions widened) into ``out``."""
    names = [n for o in plan.o_order for n in (plan.merged if o == MERGED else (o,))]
    np.copyto(out, _positions(full, plan.o_order, plan).transpose([names.index(x) for x in io]))
