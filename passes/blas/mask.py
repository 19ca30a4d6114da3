"""Masked products for ``blas``: a sum over part of an axis as a product over all of it (issue 35 item 1).

A causal attention's gradients sum over a triangle:

    dQ[a, i, c] = sum[z: 0..i](dS[a, i, z] * e[a, i, z] * K[a, z, c])
    dK[a, j, c] = sum[z: j..255](dS[a, z, j] * e[a, z, j] * Q[a, z, c])

The range of ``z`` depends on an index of the result, so the sum is no
matrix product as written.  Over the whole axis with the terms outside the
range masked to zero it is one,

    dQ[a, i, c] = sum[z: 0..255](dS[a, i, z] * where(z <= i, e[a, i, z], 0) * K[a, z, c])

and the mask goes with the side it is on (here the outlined left side):
the GEMM does twice the multiply-adds of the triangle, at BLAS speed.
:func:`widened` makes that sum when

* every occurrence of ``z`` in the summand is a plain index of a read, on
  axes of one extent ``E`` (so every read is in bounds on ``0..E - 1``),
  and no inner sum rebinds ``z`` or bounds its range by it;
* a factor of the summand (split at ``*`` and negation) mentions ``z``:
  the mask wraps the one that mentions the most of the range's variables,
  an expression before a plain read (a plain read stays a side BLAS reads
  in place where it can);
* a bound of the range depends on an index (a range over sizes only,
  ``1..k - 1``, stays as ``blas`` treats it);
* the range is not a narrow band: a range of constant width ``w`` is
  widened only if ``E <= 4 * w`` (a window of 3 over 256 stays loops).

Terms outside the range are multiplied by the mask's zero: where a factor
outside the mask is infinite or NaN there (an input holding ``inf`` at a
position the range skips), the product is NaN where the loops, which
never read it, gave a number.
"""
from __future__ import annotations

from tcc.ir.expr import (ZERO, Access, Binary, Expr, Sum, Unary, Where, bound_vars, free_names, local_index_names,
                         postorder)
from tcc.ir.index import Affine, And, Compare, Cond, of_sizes

__all__ = ["MAX_WIDENING", "widened"]

#: how many times the range's values a widened product may compute, for a range of constant width
MAX_WIDENING = 4


def _axis_extent(s: Sum, program) -> Affine | None:  # noqa: ANN001
    """The one extent of the axes that ``s``'s variable indexes, or ``None`` when it is not only
    ever a plain index of a read (or an inner sum rebinds it)."""
    z = s.var
    zv = Affine.var(z)
    extent: Affine | None = None
    for node in postorder(s.body):
        if z in bound_vars(node):
            return None
        if z not in local_index_names(node):
            continue
        if not isinstance(node, Access):
            return None  # a guard or an inner sum's bound
        ext = program.extents_of(node.tensor)
        if ext is None:
            return None
        for ix, e in zip(node.indices, ext):
            if z in ix.names():
                if ix != zv or (extent is not None and e != extent):
                    return None
                extent = e
    return extent


def _split(e: Expr) -> tuple[list[Expr], bool]:
    out: list[Expr] = []
    negated = False
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Binary) and x.op == "*":
            stack += [x.rhs, x.lhs]
        elif isinstance(x, Unary) and x.op == "neg":
            negated = not negated
            stack.append(x.operand)
        else:
            out.append(x)
    return out, negated


def _guard(s: Sum, extent: Affine) -> Cond | None:
    """The bounds of ``s`` that ``0 <= z <= extent - 1`` does not already give."""
    zv = Affine.var(s.var)
    parts: list[Cond] = [Compare("<=", lo, zv) for lo in s.lo if lo != Affine.constant(0)]
    parts += [Compare("<=", zv, hi) for hi in s.hi if hi != extent - 1]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def widened(s: Sum, program, sizes: set[str]) -> Sum | None:  # noqa: ANN001
    """``s`` as a sum over its variable's whole axis, the range a mask on one factor, or ``None``."""
    if not s.lo or all(of_sizes(b, sizes) for b in s.lo + s.hi):
        return None  # no range, or one over sizes (blas's own checks say why not): only a range an index bounds
    extent = _axis_extent(s, program)
    if extent is None:
        return None
    widths = [(hi - lo) for lo in s.lo for hi in s.hi]
    known = [w.const + 1 for w in widths if w.is_constant]
    if known and extent.is_constant and extent.const > MAX_WIDENING * max(min(known), 1):
        return None
    guard = _guard(s, extent)
    if guard is None:
        return Sum(s.var, (Affine.constant(0),), (extent - 1,), s.body)
    factors, negated = _split(s.body)
    names = set(guard.names())
    on_z = [k for k, f in enumerate(factors) if s.var in _names(f)]
    if not on_z:
        return None
    best = max(on_z, key=lambda k: (len(names & _names(factors[k])), not isinstance(factors[k], Access), -k))
    factors[best] = Where(guard, factors[best], ZERO)
    body = factors[0]
    for f in factors[1:]:
        body = Binary("*", body, f)
    return Sum(s.var, (Affine.constant(0),), (extent - 1,), Unary("neg", body) if negated else body)


def _names(e: Expr) -> set[str]:
    return set(free_names(e))
