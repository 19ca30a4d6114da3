"""``contract(A[...], B[...])`` written back as the sum it means (for the passes that know only sums).

``D[o...] = contract(A[ia...], B[ib...])[o...]`` is ``D[o...] = sum[z...](A[ia...] *
B[ib...])`` over the contracted indices ``z`` (in ``A``'s order), each over
``0..N - 1`` with ``N`` its extent in ``A`` (an inferred range while ``A``'s
extents are unknown).  Differentiation uses it: the derivative of a
contraction is an ordinary sum, and ``blas`` makes contractions of the
derivative's sums again.
"""
from __future__ import annotations

from .contraction import groups
from .expr import Access, Binary, MatrixFn, Sum
from .index import Affine
from .program import Definition, Program

__all__ = ["expand_contractions"]


def _as_sum(d: Definition, program: Program) -> Definition:
    body = d.body
    assert isinstance(body, MatrixFn) and body.spec
    ia, ib, _ = body.spec
    a, b = body.args
    expr = Binary("*", Access(a, tuple(Affine.var(x) for x in ia)), Access(b, tuple(Affine.var(x) for x in ib)))
    ext = program.extents_of(a)
    for z in reversed(groups(body.spec).contracted):
        if ext is None:
            expr = Sum(z, (), (), expr)
        else:
            expr = Sum(z, (Affine.constant(0),), (ext[ia.index(z)] - 1,), expr)
    return d.with_body(expr)


def expand_contractions(program: Program) -> Program:
    """``program`` with every ``contract`` definition written as its sum (the same program if none)."""
    if not any(isinstance(d.body, MatrixFn) and d.body.spec for d in program.definitions):
        return program
    return program.with_definitions(
        _as_sum(d, program) if isinstance(d.body, MatrixFn) and d.body.spec else d for d in program.definitions)
