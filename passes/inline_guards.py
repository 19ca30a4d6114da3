"""``inline-guards``: substitute delta-shaped definitions into the definitions that read them.

A Jacobian seeded with Kronecker deltas (``autodiff{seed=delta}``) gives every
intermediate adjoint the function's indices in front, and where the function
reads that intermediate at one point the adjoint is zero off a diagonal::

    ddR[g0, g1, i, j] = where(i == g0, -V[j, g1] * M[g0, j], 0)       # m*r*m*n entries
    dU2[g0, g1, a, b] = sum[z](ddR[g0, g1, a, z] * 2 * M[a, z] * V[z, b])

Stored, such a tensor is as large as a dense Jacobian (for matrix
factorization at n = 1000, 5e9 entries).  Inlined, the guard reaches the
reader, ``simplify`` lifts it out of the sum, and the tensor disappears::

    dU2[g0, g1, a, b] = where(a == g0, sum[z](-V[z, g1] * M[g0, z] * 2 * M[a, z] * V[z, b]), 0)

A definition is inlined when it is not a result, its body is a guard
``where(c, e, 0)`` whose condition has an equality among its own indices
(or a sum or difference of such guards), and it contains no sum (so inlining never repeats a reduction).  Readers are
simplified again; nothing else changes.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from tcc.ir.expr import Binary, CSum, Expr, MatrixFn, Sum, Unary, is_guard, postorder
from tcc.ir.substitution import inline_reads
from tcc.ir.index import Compare, conjuncts
from tcc.ir.program import Definition, Program
from tcc.passes.pass_base import Level, Pass, PassContext
from tcc.passes.simplify import simplify_program

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)


def _delta_terms(e: Expr, own: set[str]) -> bool:
    """Whether ``e`` is a guard with an equality among ``own``, or a sum or difference of such (a negation of one too).

    A second-order adjoint is often the sum of two deltas (the layer norm's
    ``ddxc = where(6 equalities, 1, 0) + where(4 equalities, -1/12, 0)``):
    each term vanishes off its diagonal, so the sum does too, and inlined
    into a reader each term lifts out of the reader's sums on its own.
    """
    if isinstance(e, Binary) and e.op in ("+", "-"):
        return _delta_terms(e.lhs, own) and _delta_terms(e.rhs, own)
    if isinstance(e, Unary) and e.op == "neg":
        return _delta_terms(e.operand, own)
    if not is_guard(e):
        return False
    return any(isinstance(p, Compare) and p.op == "==" and own & set(p.names()) for p in conjuncts(e.cond))


def _delta_shaped(d: Definition) -> bool:
    if not _delta_terms(d.body, set(d.indices)):
        return False
    return not any(isinstance(n, (Sum, CSum, MatrixFn)) for n in postorder(d.body))


def inline_guards(program: Program) -> Program:
    """Inline until nothing changes: a reader simplified into a guard is inlined in turn."""
    for _ in range(len(program.definitions) + 1):
        new = _inline_once(program)
        if new is program:
            break
        program = new
    return program


def _inline_once(program: Program) -> Program:
    results = set(program.results())
    bodies: dict[str, Definition] = {}
    defs: list[Definition] = []
    changed = False
    for d in program.definitions:
        if bodies and not isinstance(d.body, MatrixFn):
            new, _ = inline_reads(d.body, bodies)
            if new is not d.body:
                changed = True
                d = d.with_body(new)
        if d.name not in results and _delta_shaped(d):
            bodies[d.name] = d
        defs.append(d)
    if not changed:
        return program
    return simplify_program(program.with_definitions(defs))


@dataclass(frozen=True)
class InlineGuards(Pass):
    name = "inline-guards"
    level = Level.INDEX
    summary = "substitute delta-shaped definitions (where(i == g, e, 0)) into their readers, then simplify"

    def run(self, program: Program, ctx: PassContext) -> Program:
        return inline_guards(program)
