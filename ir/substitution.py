"""Substitution of index names in expressions: ``substitute(e, {i: j + 1})``.

Renames bound sum variables that the substituted expressions would capture,
and runs as :func:`~tcc.ir.trampoline.trampoline` steps (a long sum is a tree
as deep as it is long).  Kept out of :mod:`tcc.ir.expr` so that module stays
the nodes, their traversal and their text.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from .expr import Access, Binary, Const, CSum, Expr, MatrixFn, Reduce, Select, Sum, Unary, Where, all_names, bound_vars, fresh_name, rebuild, transform
from .index import Affine
from .trampoline import Step, trampoline
from .user_functions import Call

if TYPE_CHECKING:
    from .program import Definition

__all__ = ["inline_reads", "substitute"]


def substitute(root: Expr, mapping: Mapping[str, Affine]) -> Expr:
    """Replace free index names by affine expressions, renaming bound variables that would capture."""
    if not mapping:
        return root
    incoming: set[str] = {n for a in mapping.values() for n in a.names()}
    return trampoline(_Substitution(incoming).run(root, dict(mapping)))


def inline_reads(root: Expr, bodies: Mapping[str, "Definition"]) -> tuple[Expr, set[str]]:
    """``root`` with every read of a definition in ``bodies`` replaced by that definition's body at
    the read's indices, and the names of the definitions it inlined (``inline-guards``,
    ``factor-linear``)."""
    used: set[str] = set()

    def inline(e: Expr) -> Expr:
        if isinstance(e, Access) and e.tensor in bodies:
            h = bodies[e.tensor]
            used.add(h.name)
            return substitute(h.body, dict(zip(h.indices, e.indices)))
        return e

    return transform(root, inline), used


class _Substitution:
    """One substitution; memoised per (node, mapping) since inner sums narrow the mapping.

    Its methods are steps for :func:`trampoline`: substitution reaches every
    node of a long sum, a tree as deep as it is long.
    """

    def __init__(self, incoming: set[str]) -> None:
        self.incoming = incoming
        self.memo: dict[tuple[int, frozenset], Expr] = {}

    def run(self, node: Expr, mapping: dict[str, Affine]) -> Step:
        return (yield self.visit(node, mapping, frozenset(mapping.items())))

    def visit(self, node: Expr, mapping: dict[str, Affine], key: frozenset) -> Step:
        hit = self.memo.get((id(node), key))
        if hit is None:
            hit = yield self._visit(node, mapping, key)
            self.memo[(id(node), key)] = hit
        return hit

    def _visit(self, node: Expr, mapping: dict[str, Affine], key: frozenset) -> Step:
        if isinstance(node, (Const, MatrixFn)):
            return node
        if isinstance(node, Access):
            return Access(node.tensor, tuple(i.substitute(mapping) for i in node.indices))
        if isinstance(node, Where):
            then = yield self.visit(node.then, mapping, key)
            other = yield self.visit(node.other, mapping, key)
            return Where(node.cond.substitute(mapping), then, other)
        if isinstance(node, (Unary, Binary, Select, Call)):
            kids = []
            for c in node.children():
                kids.append((yield self.visit(c, mapping, key)))
            return rebuild(node, tuple(kids))
        if not isinstance(node, (Sum, CSum, Reduce)):  # pragma: no cover - exhaustive
            raise TypeError(node)
        bound = bound_vars(node)
        body_map = {k: v for k, v in mapping.items() if k not in bound}
        captured = [v for v in bound if v in self.incoming]
        if captured:
            # a bound variable that appears in a substituted expression must be renamed
            taken = set(self.incoming) | set(all_names(node)) | set(body_map)
            for v in captured:
                fresh = fresh_name(v, taken)
                taken.add(fresh)
                body_map[v] = Affine.var(fresh)
                self.incoming.add(fresh)
        renamed = {v: str(body_map[v].terms[0][0]) if v in captured else v for v in bound}
        body = node.children()[0]
        if body_map:
            body = yield self.run(body, body_map)
        if isinstance(node, (Sum, Reduce)):
            lo = tuple(b.substitute(mapping) for b in node.lo)
            hi = tuple(b.substitute(mapping) for b in node.hi)
            if isinstance(node, Reduce):
                return Reduce(node.op, renamed[node.var], lo, hi, body)
            return Sum(renamed[node.var], lo, hi, body)
        return CSum(
            tuple(renamed[v] for v in node.vars),
            tuple(c.substitute(body_map) for c in node.constraints),
            body,
        )
