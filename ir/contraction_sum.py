"""``contract(A[...], B[...])`` written back as the sum it means (for the passes that know only sums).

``D[o...] = contract(A[ia...], B[ib...])[o...]`` is ``D[o...] = sum[z...](A[ia...] *
B[ib...])`` over the contracted indices ``z`` (in ``A``'s order), each over
``0..N - 1`` with ``N`` its extent in ``A`` (an inferred range while ``A``'s
extents are unknown).  Differentiation uses it: the derivative of a
contraction is an ordinary sum, and ``blas`` makes contractions of the
derivative's sums again.

A window ``u + v`` of ``A`` (a convolution) reads ``A[..., u + v, ...]``,
and its summed index ranges only where the read is in ``A``: reads outside
are left out, so the sum over ``v`` (or ``u``) is clipped, as the
derivative engine writes the input gradient of a convolution:
``sum[p: max(h - 31, 0)..min(h, 2)](dy[b, o, h - p] * w[o, c, p])``.
"""
from __future__ import annotations

from typing import Sequence

from .contraction import Spec, groups, has_window, index_names, spec_extents, window
from .expr import Access, Binary, Expr, MatrixFn, Sum
from .index import Affine
from .program import Definition, Program

__all__ = ["clipped_bounds", "expand_contractions"]


def clipped_bounds(spec: Spec, ea: Sequence[Affine], eb: Sequence[Affine]) -> dict[str, tuple[tuple[Affine, ...], ...]]:
    """Each summed index's range as ``(lows, highs)`` (a ``max`` and a ``min``): ``0..extent - 1``,
    clipped by every window it is in to where that read is in ``A`` (``ea``: ``A``'s extents).  The
    sum a windowed contraction means, and what ``blas`` proves a sum's bounds equal to."""
    ia, _, io = spec
    ext, _ = spec_extents(spec, tuple(ea), tuple(eb))
    var = Affine.var
    lo: dict[str, list[Affine]] = {}
    hi: dict[str, list[Affine]] = {}
    for x, e in zip(ia, ea):
        w = window(x)
        if w is None:
            continue
        u, sign, v = w
        z, t = (v, var(u)) if u in io else (u, var(v))
        # 0 <= u + sign * v <= e - 1, solved for the summed z
        if z == v and sign < 0:      # 0 <= t - z <= e - 1
            lo.setdefault(z, []).append(t - (e - 1)), hi.setdefault(z, []).append(t)
        elif sign < 0:               # 0 <= z - t <= e - 1
            lo.setdefault(z, []).append(t), hi.setdefault(z, []).append(e - 1 + t)
        else:                        # 0 <= t + z <= e - 1
            lo.setdefault(z, []).append(Affine.constant(0) - t), hi.setdefault(z, []).append(e - 1 - t)
    return {z: ((Affine.constant(0), *lo.get(z, ())), (ext[z] - 1, *hi.get(z, ())))
            for z in index_names(ia) if z not in io}


def _window_sum(d: Definition, program: Program) -> Definition:
    """A windowed ``contract`` as its clipped sum (the module docstring)."""
    body = d.body
    assert isinstance(body, MatrixFn)
    ia, ib, _ = body.spec
    a, b = body.args
    ea, eb = program.extents_of(a), program.extents_of(b)
    assert ea is not None and eb is not None, "a windowed contraction needs its arguments' extents"
    var = Affine.var
    entries = []
    for x in ia:
        w = window(x)
        entries.append(var(x) if w is None else var(w[0]) + var(w[2]) if w[1] > 0 else var(w[0]) - var(w[2]))
    expr: Expr = Binary("*", Access(a, tuple(entries)), Access(b, tuple(var(x) for x in ib)))
    for z, (lo, hi) in reversed(clipped_bounds(body.spec, ea, eb).items()):
        expr = Sum(z, lo, hi, expr)
    return d.with_body(expr)


def _as_sum(d: Definition, program: Program) -> Definition:
    body = d.body
    assert isinstance(body, MatrixFn) and body.spec
    if has_window(body.spec):
        return _window_sum(d, program)
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
