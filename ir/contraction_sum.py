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

from .contraction import groups, has_window, spec_extents, window
from .expr import Access, Binary, Expr, MatrixFn, Sum
from .index import Affine
from .program import Definition, Program

__all__ = ["expand_contractions"]


def _window_sum(d: Definition, program: Program) -> Definition:
    """A windowed ``contract`` as its clipped sum (the module docstring)."""
    body = d.body
    assert isinstance(body, MatrixFn)
    ia, ib, io = body.spec
    a, b = body.args
    ea, eb = program.extents_of(a), program.extents_of(b)
    assert ea is not None and eb is not None, "a windowed contraction needs its arguments' extents"
    ext, _ = spec_extents(body.spec, tuple(ea), tuple(eb))
    var = Affine.var
    lo: dict[str, list[Affine]] = {}
    hi: dict[str, list[Affine]] = {}
    entries = []
    for x, e in zip(ia, ea):
        w = window(x)
        if w is None:
            entries.append(var(x))
            continue
        u, sign, v = w
        pos = var(u) + var(v) if sign > 0 else var(u) - var(v)
        entries.append(pos)
        z, t = (v, var(u)) if u in io else (u, var(v))
        # 0 <= pos <= e - 1, solved for the summed z (coefficient sign of v, 1 of u)
        if z == v and sign < 0:
            lo.setdefault(z, []).append(t - (e - 1)), hi.setdefault(z, []).append(t)
        elif z == v or sign > 0:
            lo.setdefault(z, []).append(Affine.constant(0) - t), hi.setdefault(z, []).append(e - 1 - t)
        else:
            lo.setdefault(z, []).append(t), hi.setdefault(z, []).append(e - 1 + t)
    expr: Expr = Binary("*", Access(a, tuple(entries)), Access(b, tuple(var(x) for x in ib)))
    seen = [n for x in ia for n in ((window(x)[0], window(x)[2]) if window(x) else (x,))]  # type: ignore[index]
    for z in reversed([n for n in seen if n not in io]):
        expr = Sum(z, (Affine.constant(0), *lo.get(z, ())), (ext[z] - 1, *hi.get(z, ())), expr)
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
