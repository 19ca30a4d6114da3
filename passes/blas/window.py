"""Stride-1 convolutions for ``blas``: ``contract`` with windows.

A sum over the product of two reads, one of which reads some axes at
``u + v`` or ``u - v`` (two index variables, coefficient 1 each, no
constant) and is otherwise plain, the other plain:

    y[b, o, i, j] = sum[c, p, q](x[b, c, i + p, j + q] * w[o, c, p, q])               # forward
    dw[o, c, p, q] = sum[b, i, j](dy[b, o, i, j] * x[b, c, p + i, q + j])            # weight gradient
    dx[b, c, h, v] = sum[o, p: max(h - 31, 0)..min(h, 2), q: ...](dy[b, o, h - p, v - q] * w[o, c, p, q])

becomes ``D[...] = contract(A[..., u + v, ...], B[...])[...]``
(:mod:`tcc.ir.contraction`), which the runtime runs as one GEMM per kernel
offset over shifted views (``tcc.runtime.externs.window_kernel``).  The three lines are a
convolution and both of its gradients as the derivative engine writes them.

**What must hold.** Each window pairs a summed variable with a free one;
every summed variable ranges over exactly the values at which all its
reads are in range: its extent (from the plain read that has it) clipped by
each window it is in -- the input gradient's ``max(h - 31, 0)..min(h, 2)``
is ``0..2`` clipped by ``0 <= h - p <= 31``.  That is the contraction's
meaning (terms reading outside ``A`` are left out), so nothing else is checked at
run time.  Bounds are compared as maxima and minima of affine terms, each
term bounded by one of the other side's, under the facts of the result's
index ranges.  The result's extents must be the contraction's (the valid
positions for ``u + v``, the full ones for ``u - v``).

**Cost model.** Each product is a GEMM whose dimensions are the
largest-extent index of each group (the positions merge into one axis,
``tcc.runtime.externs.window_kernel``).  A product with a dimension below
:data:`MIN_DIM` (16: the number of input channels of a first layer, say 3,
as the inner dimension) runs BLAS at a fraction of its speed -- the loop
nests of ``unroll-jam`` do as well -- so the sum stays loops; so does one
below ``min-work`` multiply-adds in all.  Symbolic extents count as large.
"""
from __future__ import annotations

import math

from tcc.ir.contraction import CONTRACT, check_spec, spec_extents, window, window_entry
from tcc.ir.contraction_sum import clipped_bounds
from tcc.ir.expr import Access, Binary, Expr, MatrixFn, Sum
from tcc.ir.index import Affine, Compare
from tcc.ir.window_plan import window_plan

__all__ = ["MIN_DIM", "window_contraction"]

#: the smallest GEMM dimension worth a windowed contraction
MIN_DIM = 16
#: a symbolic extent's stand-in for the cost model
_LARGE = 1 << 12


def _entry(ix: Affine, free: set[str]) -> str | None:
    """The spec entry of one index of a read: a plain name, ``u + v`` / ``u - v``, or ``None``."""
    if ix.const:
        return None
    terms = [(a, c) for a, c in ix.terms]
    if not all(isinstance(a, str) for a, _ in terms):
        return None
    if len(terms) == 1 and terms[0][1] == 1:
        return str(terms[0][0])
    if len(terms) != 2 or sorted(abs(c) for _, c in terms) != [1, 1] or all(c < 0 for _, c in terms):
        return None
    (a, ca), (b, cb) = terms
    if ca < 0 or cb < 0:  # u - v: u has the positive coefficient
        u, v = (a, b) if ca > 0 else (b, a)
        return window_entry(str(u), -1, str(v))
    u, v = (a, b) if a in free else (b, a)  # u + v: the free one first (it may have no plain read)
    return window_entry(str(u), 1, str(v))


def _peel(body: Expr) -> tuple[list[Sum], Expr]:
    sums = []
    while isinstance(body, Sum):
        sums.append(body)
        body = body.body
    return sums, body


def _covers(facts, small: tuple[Affine, ...], big: tuple[Affine, ...], op: str) -> bool:  # noqa: ANN001
    """Every term of ``small`` is ``op`` (``<=`` for lower bounds, ``>=`` for upper) some term of ``big``."""
    return all(any(facts.implies(Compare(op, s, b)) for b in big) for s in small)


def _bounds_match(facts, have_lo, have_hi, want_lo, want_hi) -> bool:  # noqa: ANN001
    """``max(have_lo) == max(want_lo)`` and ``min(have_hi) == min(want_hi)``, proved termwise."""
    return (_covers(facts, have_lo, want_lo, "<=") and _covers(facts, want_lo, have_lo, "<=")
            and _covers(facts, have_hi, want_hi, ">=") and _covers(facts, want_hi, have_hi, ">="))


def _gemm_dims(spec, ext) -> tuple[int, int, int] | None:  # noqa: ANN001
    """The GEMM dimensions of the runtime's plan, with constant stand-ins for symbolic extents."""
    ia, ib, _ = spec
    n = {x: (e.const if isinstance(e, Affine) and e.is_constant else e if isinstance(e, int) else _LARGE)
         for x, e in ext.items()}
    if any(v <= 0 for v in n.values()):
        return None
    shape_a = []
    for x in ia:
        w = window(x)
        if w is None:
            shape_a.append(n[x])
        else:
            u, sign, v = w
            shape_a.append(n[u] + n[v] - 1 if sign > 0 else max(n[u] - n[v] + 1, 1))
    shape_b = [n[x] for x in ib]
    plan = window_plan(spec, tuple(shape_a), tuple(shape_b))  # the runtime's own plan: the two agree
    return tuple(plan.ext[x] if x else 1 for x in plan.gemm_axes)  # type: ignore[return-value]


def window_contraction(out: tuple[str, ...], out_ext: tuple[Affine, ...], body: Expr, program, sizes: set[str],  # noqa: ANN001
                       facts, min_work: int) -> MatrixFn | None:  # noqa: ANN001
    """``contract(A[..., u + v, ...], B[...])`` computing ``body`` for the result indices ``out``, or
    ``None`` when ``body`` is not such a sum or the cost model keeps the loops."""
    sums, summand = _peel(body)
    if not sums or not (isinstance(summand, Binary) and summand.op == "*"):
        return None
    reads = [summand.lhs, summand.rhs]
    if not all(isinstance(f, Access) for f in reads):
        return None
    free = set(out)
    entries = [[_entry(ix, free) for ix in f.indices] for f in reads]  # type: ignore[union-attr]
    if any(x is None for es in entries for x in es):
        return None
    windowed = [any(" " in x for x in es) for es in entries]  # type: ignore[operator]
    if windowed.count(True) != 1:
        return None
    if windowed[1]:
        reads, entries = reads[::-1], entries[::-1]
    spec = (tuple(entries[0]), tuple(entries[1]), tuple(out))
    if check_spec(spec) is not None:  # type: ignore[arg-type]
        return None
    ea, eb = (program.extents_of(f.tensor) for f in reads)  # type: ignore[union-attr]
    if ea is None or eb is None:
        return None
    ext, bad = spec_extents(spec, tuple(ea), tuple(eb))  # type: ignore[arg-type]
    if bad is not None or tuple(ext[x] for x in out) != tuple(out_ext):
        return None
    summed = [s.var for s in sums]
    if len(set(summed)) != len(summed) or set(summed) != set(ext) - free:
        return None
    known = facts
    for x, e in zip(out, out_ext):
        known = known.with_range(x, (Affine.constant(0),), (e - 1,))
    want = clipped_bounds(spec, tuple(ea), tuple(eb))  # type: ignore[arg-type]
    for s in sums:
        if not _bounds_match(known, s.lo, s.hi, *want[s.var]):
            return None
    dims = _gemm_dims(spec, ext)
    if dims is None or min(dims) < MIN_DIM:
        return None
    work = [e for e in ext.values()]
    if all(isinstance(e, Affine) and e.is_constant for e in work) and math.prod(e.const for e in work) < min_work:
        return None
    return MatrixFn(CONTRACT, reads[0].tensor, reads[1].tensor, spec=spec)  # type: ignore[union-attr]
