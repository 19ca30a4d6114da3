"""General contractions for ``blas``: ``contract(A[...], B[...])`` with index groups.

What :mod:`.match` leaves -- several contracted indices, several free
indices per side, batch indices anywhere, a result whose index order
interleaves the sides -- is taken here when the summand is the product of two
plain reads:

    D[o...] = sum[z1, ..., zk](P[...] * Q[...])

every index of the reads a plain variable (no offsets, no repeats), each
read covering its whole tensor (its extents are the ranges of its indices),
each summed variable in both reads, each index of ``D`` in at least one.
The result is ``D[o...] = contract(P[...], Q[...])[o...]`` (:mod:`tcc.ir.contraction`).

**The cost model.**  The runtime makes one BLAS call on matrix stacks; an
operand whose groups are not contiguous (and in the same order) in storage is
first copied into that layout, and so is a result that cannot be viewed
either way round.  A copy moves ``size(X)`` elements; the loop nest does
``W`` = (product of all extents) multiply-adds at loop speed.  ``W / size(P)``
is the product of the extents ``P`` lacks (the other side's free group;
likewise for ``Q``; for the result, the contracted group), so the rule is

    sum over copied X of  size(X) / W  <=  1 / COPY_COST

with ``COPY_COST`` = 8 (a strided copy of one element costs about as much as
eight multiply-adds of the loop nest: measured ~1 ns against ~0.13 ns per
multiply-add at the loops' 15 GFLOP/s; the GEMM itself then runs 5-10x
faster than the loops, which the rule does not even credit).  Symbolic
extents count as large, as for ``min-work``; ``min-work`` applies too.
No copy is needed for the motivating cases' ``Q[i, h, d] * K[j, h, d]``
(batch ``h`` in the middle: a strided view).
"""
from __future__ import annotations

import math
from fractions import Fraction

from tcc.ir.contraction import CONTRACT, check_spec, groups
from tcc.ir.expr import Access, Binary, Expr, MatrixFn, Sum
from tcc.ir.index import Affine, Compare, of_sizes

__all__ = ["COPY_COST", "contraction", "needs_copy"]

#: multiply-adds of a loop nest worth one element moved by a transposing copy
COPY_COST = 8


def needs_copy(stored: tuple[str, ...], batch: tuple[str, ...], rows: tuple[str, ...], cols: tuple[str, ...]) -> bool:
    """Whether a C-ordered tensor with axes ``stored`` must be copied to be a BLAS stack of
    ``(rows, cols)`` matrices over ``batch`` (or of ``(cols, rows)`` ones, read transposed):
    each group contiguous and in order, the columns (rows) last."""

    def block(g: tuple[str, ...]) -> bool:
        k = stored.index(g[0]) if g else 0
        return stored[k:k + len(g)] == g

    if len(batch) > 1 and not block(batch):
        return True
    for r, c in ((rows, cols), (cols, rows)):
        if block(r) and block(c) and (not c or stored[len(stored) - len(c):] == c):
            return False
    return True


def _plain(f: Expr) -> tuple[str, ...] | None:
    """The index names of a read whose indices are distinct plain variables, else ``None``."""
    if not isinstance(f, Access):
        return None
    names = []
    for ix in f.indices:
        vs = ix.names()
        if len(vs) != 1 or ix != Affine.var(vs[0]):
            return None
        names.append(vs[0])
    return tuple(names) if len(set(names)) == len(names) else None


def _peel(body: Expr, sizes: set[str], facts) -> tuple[dict[str, Affine], Expr] | None:  # noqa: ANN001
    """The summed variables with their extents and the summand of ``sum[z1..](F)``, ranges ``0..N - 1``."""
    ext: dict[str, Affine] = {}
    zero = Affine.constant(0)
    while isinstance(body, Sum):
        if body.lo != (zero,) or len(body.hi) != 1 or not of_sizes(body.hi[0], sizes):
            return None
        q = body.hi[0] + 1
        if body.var in ext or not facts.implies(Compare(">=", q, zero)):
            return None
        ext[body.var] = q
        body = body.body
    return (ext, body) if ext else None


def _ratio(extents: dict[str, Affine], names: tuple[str, ...]) -> Fraction:
    """``1 / prod(extents of names)``: a copy's share of the work (0 where one is symbolic: large)."""
    es = [extents[x] for x in names]
    if not all(e.is_constant for e in es):
        return Fraction(0)
    p = math.prod(e.const for e in es)
    return Fraction(1, p) if p > 0 else Fraction(0)


def contraction(out: tuple[str, ...], out_ext: tuple[Affine, ...], body: Expr, program, sizes: set[str],  # noqa: ANN001
                facts, min_work: int, copy_cost: float = COPY_COST) -> MatrixFn | None:  # noqa: ANN001
    """``contract(P[...], Q[...])`` computing ``body`` for the result indices ``out``, or ``None``
    when ``body`` is not such a contraction or the cost model keeps the loops."""
    peeled = _peel(body, sizes, facts)
    if peeled is None:
        return None
    summed, summand = peeled
    if not (isinstance(summand, Binary) and summand.op == "*"):
        return None
    reads = (summand.lhs, summand.rhs)
    spec_args = [_plain(f) for f in reads]
    if any(ix is None for ix in spec_args) or set(summed) & set(out):
        return None
    ia, ib = spec_args[0], spec_args[1]
    assert ia is not None and ib is not None
    spec = (ia, ib, tuple(out))
    if check_spec(spec) is not None or set(ia) | set(ib) != set(out) | set(summed):
        return None
    extents = {**dict(zip(out, out_ext)), **summed}
    for f, ix in zip(reads, (ia, ib)):
        assert isinstance(f, Access)
        if tuple(program.extents_of(f.tensor) or ()) != tuple(extents[x] for x in ix):
            return None
    work = list(extents.values())
    if all(e.is_constant for e in work) and math.prod(e.const for e in work) < min_work:
        return None
    g = groups(spec)
    if not g.left and not g.right:
        return None  # a (batched) dot product: memory-bound, the loop nest reads each operand once too
    k_orders = [g.contracted, tuple(x for x in ib if x in g.contracted)]
    share = min(
        (_ratio(extents, g.right) if needs_copy(ia, g.batch, g.left, k) else 0)
        + (_ratio(extents, g.left) if needs_copy(ib, g.batch, k, g.right) else 0)
        for k in k_orders)
    if needs_copy(tuple(out), g.batch, g.left, g.right):
        share += _ratio(extents, g.contracted)
    if share * Fraction(copy_cost) > 1:
        return None  # the copies cost more than the loop nest
    return MatrixFn(CONTRACT, reads[0].tensor, reads[1].tensor, spec=spec)  # type: ignore[union-attr]
