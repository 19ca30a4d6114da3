"""Proving that code moved by ``hoist`` reads memory only where it may.

Moving code must not make it run where it did not run before *and fail*:
scalar arithmetic cannot fail, loads can.  Every phase of the pass (factor,
licm, extract) asks the same question of the code it moves -- is every load in
bounds at the new place? -- and answers it with Fourier-Motzkin over the
enclosing loop ranges and tests (:class:`tcc.ir.polyhedra.Facts`); when a load
is safe only because a loop it leaves runs at least once, the phases keep that
test (:func:`nonempty_guard`).
"""
from __future__ import annotations

from typing import Sequence

from tcc.ir.expr import Access, Expr, Where
from tcc.ir.index import Affine, Compare, Cond, compare, negate
from tcc.ir.loops import Accumulate, For, If, Let, LoopProgram, Stmt, Store
from tcc.ir.polyhedra import Facts


class BoundsChecker:
    """Proves that every load of some statements stays inside its buffer."""

    def __init__(self, program: LoopProgram) -> None:
        self.shapes = {b.name: b.shape for b in program.buffers}

    def access_ok(self, a: Access, facts: Facts) -> bool:
        shape = self.shapes.get(a.tensor)
        if shape is None or not a.indices:
            return True  # a scalar (let/local or scalar buffer)
        for ix, ext in zip(a.indices, shape):
            if not facts.implies(Compare(">=", ix, Affine.constant(0))):
                return False
            if not facts.implies(Compare("<=", ix, ext - 1)):
                return False
        return True

    def expr_ok(self, e: Expr, facts: Facts) -> bool:
        if isinstance(e, Access):
            return self.access_ok(e, facts)
        if isinstance(e, Where):
            return self.expr_ok(e.then, facts.with_cond(e.cond)) and self.expr_ok(e.other, with_negation(facts, e.cond))
        return all(self.expr_ok(c, facts) for c in e.children())

    def stmts_ok(self, body: Sequence[Stmt], facts: Facts) -> bool:
        for s in body:
            if isinstance(s, For):
                inner = facts.with_range(s.var, s.lo, s.hi)
                if not self.stmts_ok(s.body, inner):
                    return False
            elif isinstance(s, If):
                if not self.stmts_ok(s.then, facts.with_cond(s.cond)):
                    return False
                if not self.stmts_ok(s.orelse, with_negation(facts, s.cond)):
                    return False
            elif isinstance(s, (Store, Accumulate)):
                name = s.buffer if isinstance(s, Store) else s.target
                if s.indices and not self.access_ok(Access(name, s.indices), facts):
                    return False
                if not self.expr_ok(s.value, facts):
                    return False
            else:
                e = s.value if isinstance(s, Let) else s.init  # type: ignore[union-attr]
                if not self.expr_ok(e, facts):
                    return False
        return True


def with_negation(facts: Facts, cond: Cond) -> Facts:
    try:
        return facts.with_cond(negate(cond))
    except TypeError:  # pragma: no cover - every Cond negates
        return facts


def nonempty_guard(loop: For, facts: Facts) -> list[Cond]:
    """The tests ``lo <= hi`` (over all bound pairs) that say ``loop`` runs at
    least once, less those the facts already prove; [] when it always runs."""
    out: list[Cond] = []
    for lo in loop.lo:
        for hi in loop.hi:
            c = compare(">=", hi - lo)
            if not facts.implies(c) and c not in out:
                out.append(c)
    return out
