"""Constrained sums: from ``sum[v | constraints](body)`` to nested ranged sums.

``csum_to_sums`` is the heart of ``range-bound`` (Fourier–Motzkin bounds,
eq. 45–47 of Urban and van der Smagt) and how the reference interpreter evaluates a
constrained sum.  ``eliminate_var_atoms`` gives ``//``/``%`` atoms over the
summation variables symbols of their own, so that both ``index-solve`` and
Fourier–Motzkin only ever see linear constraints.  ``rewrite_indices`` applies
a function to every index expression of an expression.
"""
from __future__ import annotations

from typing import Callable

from .expr import RANGED, ZERO, Access, CSum, Expr, Reduce, Sum, Where, all_names, fresh_name, postorder, transform
from .fourier_motzkin import eliminate
from .index import Affine, And, Atom, Compare, Cond, FloorDiv, Lookup, Mod, Not, Or, conjuncts, make_and
from .polyhedra import AtomTable, Row, bound_affine, compare_rows, rows_to_constraints


def eliminate_var_atoms(node: CSum, taken: set[str]) -> CSum:
    """Give every ``//``/``%`` atom over the sum's own variables a variable of its own.

    ``q = e // d`` becomes an extra summation variable constrained by
    ``d*q <= e <= d*q + d - 1`` (exactly one value); the body and constraints
    use ``q``.  Aux variables are innermost (first), so outer bounds never
    depend on them.
    """
    own = set(node.vars)
    found: dict[FloorDiv, str] = {}

    def visit_affine(a: Affine) -> None:
        for atom, _ in a.terms:
            if isinstance(atom, (FloorDiv, Mod)):
                visit_affine(atom.num)
                if set(atom.num.names()) & own:
                    fd = FloorDiv(atom.num, atom.den)
                    if fd not in found:
                        name = fresh_name(f"{node.vars[0]}_q", taken)
                        taken.add(name)
                        found[fd] = name

    for c in node.constraints:
        for cmp in _compares(c):
            visit_affine(cmp.lhs)
            visit_affine(cmp.rhs)
    for sub in _accesses_and_conds(node.body):
        for a in sub:
            visit_affine(a)
    if not found:
        return node

    def rewrite(a: Affine) -> Affine:
        def on_atom(atom: Atom) -> Affine:
            if isinstance(atom, str):
                return Affine.var(atom)
            if isinstance(atom, Lookup):
                return Affine.atom(Lookup(atom.tensor, tuple(rewrite(i) for i in atom.indices), atom.hi))
            inner = rewrite(atom.num)
            fd = FloorDiv(atom.num, atom.den)
            if fd in found:
                q = Affine.var(found[fd])
                return q if isinstance(atom, FloorDiv) else inner - q * atom.den
            return inner.floordiv(atom.den) if isinstance(atom, FloorDiv) else inner.mod(atom.den)

        return a.map_atoms(on_atom)

    new_cons: list[Cond] = [_rewrite_cond(c, rewrite) for c in node.constraints]
    for fd, q in found.items():
        e = rewrite(fd.num)
        new_cons.append(Compare("<=", Affine.var(q) * fd.den, e))
        new_cons.append(Compare("<=", e, Affine.var(q) * fd.den + (fd.den - 1)))
    body = rewrite_indices(node.body, rewrite)
    return CSum(tuple(found.values()) + node.vars, tuple(new_cons), body)


def _compares(c: Cond) -> list[Compare]:
    if isinstance(c, Compare):
        return [c]
    if isinstance(c, (And, Or)):
        return [x for p in c.parts for x in _compares(p)]
    if isinstance(c, Not):
        return _compares(c.part)
    return []


def _rewrite_cond(c: Cond, fn: Callable[[Affine], Affine]) -> Cond:
    if isinstance(c, Compare):
        return Compare(c.op, fn(c.lhs), fn(c.rhs))
    if isinstance(c, And):
        return And(tuple(_rewrite_cond(p, fn) for p in c.parts))
    if isinstance(c, Or):
        return Or(tuple(_rewrite_cond(p, fn) for p in c.parts))
    if isinstance(c, Not):
        return Not(_rewrite_cond(c.part, fn))
    raise TypeError(c)


def _accesses_and_conds(e: Expr) -> list[list[Affine]]:
    out: list[list[Affine]] = []
    for n in postorder(e):
        if isinstance(n, Access):
            out.append(list(n.indices))
        elif isinstance(n, Where):
            out.append([x for c in _compares(n.cond) for x in (c.lhs, c.rhs)])
        elif isinstance(n, RANGED):
            out.append(list(n.lo + n.hi))
        elif isinstance(n, CSum):
            out.append([x for c in n.constraints for cmp in _compares(c) for x in (cmp.lhs, cmp.rhs)])
    return out


def rewrite_indices(e: Expr, fn: Callable[[Affine], Affine]) -> Expr:
    """Apply ``fn`` to every index expression (accesses, conditions, bounds)."""

    def visit(n: Expr) -> Expr:
        if isinstance(n, Access):
            return Access(n.tensor, tuple(fn(i) for i in n.indices))
        if isinstance(n, Where):
            return Where(_rewrite_cond(n.cond, fn), n.then, n.other)
        if isinstance(n, Sum):
            return Sum(n.var, tuple(fn(b) for b in n.lo), tuple(fn(b) for b in n.hi), n.body)
        if isinstance(n, Reduce):
            return Reduce(n.op, n.var, tuple(fn(b) for b in n.lo), tuple(fn(b) for b in n.hi), n.body)
        if isinstance(n, CSum):
            return CSum(n.vars, tuple(_rewrite_cond(c, fn) for c in n.constraints), n.body)
        return n

    return transform(e, visit)


class UnboundedSum(ValueError):
    pass


def csum_to_sums(node: CSum, taken: set[str] | None = None) -> Expr:
    """Nested ranged sums equal to a constrained sum (Fourier–Motzkin, eq. 45).

    Variable ``vars[0]`` becomes the innermost sum.  Constraints that mention
    none of the summation variables become an outer ``where``; constraints that
    are not convex (``!=``, ``or``) stay as a ``where`` inside.
    """
    taken = set(taken or ()) | set(all_names(node))
    node = eliminate_var_atoms(node, taken)
    own = set(node.vars)
    atoms = AtomTable()
    outer: list[Cond] = []
    inner: list[Cond] = []
    rows: list[Row] = []
    for c in node.constraints:
        for part in conjuncts(c):
            if not (set(part.names()) & own):
                outer.append(part)
                continue
            r = compare_rows(part, atoms) if isinstance(part, Compare) else None
            if r is None:
                inner.append(part)
            else:
                rows.extend(r)
    variables = list(node.vars)
    proj = eliminate(rows_to_constraints(rows, variables), len(variables))
    body = node.body
    inner_cond = make_and(inner)
    if inner_cond is not None:
        body = Where(inner_cond, body, ZERO)
    if proj.infeasible:
        return ZERO
    for k, var in enumerate(variables):
        vb = proj.bounds[k]
        if not vb.lower or not vb.upper:
            raise UnboundedSum(f"the constrained sum over {', '.join(node.vars)} is unbounded in {var}")
        lo = tuple(dict.fromkeys(bound_affine(atoms, b.rhs, b.coeffs, variables, b.divisor, upper=False) for b in vb.lower))
        hi = tuple(dict.fromkeys(bound_affine(atoms, b.rhs, b.coeffs, variables, b.divisor, upper=True) for b in vb.upper))
        body = Sum(var, lo, hi, body)
    outer_cond = make_and(outer)
    if outer_cond is not None:
        body = Where(outer_cond, body, ZERO)
    return body
