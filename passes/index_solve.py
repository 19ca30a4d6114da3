"""``index-solve``: solve the delta of a constrained sum with the Smith normal form (sec. 4.1, 5.1).

A constrained sum ``sum[v | A·v == b(β), R·v >= r](body)`` enumerates the
``v`` with ``A·v = b``.  With ``U·A·V = S`` (S = diag(s_1..s_R, 0...)) and
``y = U·b``, the solutions are (eq. 41)::

    C·b == 0            (the last rows of y vanish: the cokernel condition)
    y_i % s_i == 0      (integrality of I·b, only where s_i > 1)
    v = V·(y_1 // s_1, ..., y_R // s_R, z_1, ..., z_κ)     (= I·b + K·z)

so the sum becomes ``where(conditions, sum[z | R·(I·b + K·z) >= r](body'), 0)``
over the κ kernel coordinates only: no Kronecker delta survives inside.  The
integrality test is written with ``%`` and the quotient with ``//``, which keeps
the IR integral where the paper's pseudo-inverse I is rational.

Range constraints that no longer involve any ``z`` are moved into the outer
condition; ``range-bound`` turns the remaining ones into loop bounds.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from tcc.ir.expr import ZERO, CSum, Expr, Where, all_names, transform
from tcc.ir.substitution import substitute
from tcc.ir.index import Affine, Compare, Cond, compare, conjuncts, make_and
from tcc.ir.constrained_sums import eliminate_var_atoms
from tcc.ir.program import Program
from tcc.ir.smith import SmithForm, solve_integer_system
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)


def _linear_split(a: Affine, variables: list[str]) -> tuple[list[int], Affine] | None:
    """Coefficients of ``a`` on the variables and the rest; None if a variable hides in an atom."""
    coeffs = [a.coeff(v) for v in variables]
    rest = a - Affine.of([(v, c) for v, c in zip(variables, coeffs)])
    if set(rest.names()) & set(variables):
        return None
    return coeffs, rest


def solve_csum(node: CSum, prefix: str, global_names: set[str]) -> Expr:
    """Eliminate the equalities of one constrained sum; returns an equivalent expression.

    Kernel coordinates are named ``<prefix>_z0, <prefix>_z1, ...`` afresh for
    every sum (sibling sums may reuse names, as in the paper's output).
    """
    taken = set(global_names) | set(all_names(node))
    node = eliminate_var_atoms(node, taken)
    variables = list(node.vars)
    eqs, others = _split_equalities(node.constraints, variables)
    if not eqs:
        return node
    rows: list[list[int]] = []
    rhs: list[Affine] = []
    for e in eqs:
        split = _linear_split(e.lhs - e.rhs, variables)
        if split is None:  # pragma: no cover - atoms over variables were eliminated above
            return node
        coeffs, rest = split
        rows.append(coeffs)
        rhs.append(-rest)
    sf = solve_integer_system(rows, len(variables)).smith
    solvable = _solvability(sf, rhs)
    if solvable is None:
        return ZERO
    conditions, quotients = solvable
    znames = _fresh_coordinates(prefix, len(variables) - sf.rank, taken)
    coords = quotients + [Affine.var(z) for z in znames]
    solution = {v: _combination(sf.V[j], coords) for j, v in enumerate(variables)}
    ranges = _substituted_ranges(others, solution, znames)
    if ranges is None:
        return ZERO
    inner, outer = ranges
    conditions += outer
    body = substitute(node.body, solution)
    result: Expr = CSum(tuple(znames), tuple(dict.fromkeys(inner)), body) if znames else body
    cond = make_and(conditions)
    return Where(cond, result, ZERO) if cond is not None else result


def _split_equalities(constraints: tuple[Cond, ...], variables: list[str]) -> tuple[list[Compare], list[Cond]]:
    """The equalities over the sum's variables (the delta to solve), and every other constraint."""
    eqs: list[Compare] = []
    others: list[Cond] = []
    for c in constraints:
        for part in conjuncts(c):
            if isinstance(part, Compare) and part.op == "==" and set(part.names()) & set(variables):
                eqs.append(part)
            else:
                others.append(part)
    return eqs, others


def _combination(row: Sequence[int], items: Sequence[Affine]) -> Affine:
    """``sum(row[k] * items[k])``, skipping zero coefficients."""
    acc = Affine()
    for k, item in enumerate(items):
        if row[k]:
            acc = acc + item * row[k]
    return acc


def _solvability(sf: SmithForm, rhs: list[Affine]) -> tuple[list[Cond], list[Affine]] | None:
    """With ``y = U·b``: the conditions for an integer solution (the cokernel
    rows of ``y`` vanish, ``s_i`` divides ``y_i``) and the quotients
    ``y_i // s_i``; None when a condition is false outright (the sum is empty)."""
    R, diag = sf.rank, sf.diagonal
    y = [_combination(sf.U[i], rhs) for i in range(len(rhs))]
    conditions: list[Cond] = []
    for i in range(R, len(rhs)):  # cokernel: C·b == 0
        if y[i].is_constant:
            if y[i].const != 0:
                return None
            continue
        conditions.append(compare("==", y[i]))
    quotients: list[Affine] = []
    for i in range(R):
        s = diag[i]
        if s > 1:
            m = y[i].mod(s)
            if m.is_constant:
                if m.const != 0:
                    return None
            else:
                conditions.append(Compare("==", m, Affine.constant(0)))
        quotients.append(y[i].floordiv(s))
    return conditions, quotients


def _fresh_coordinates(prefix: str, kappa: int, taken: set[str]) -> list[str]:
    """``kappa`` kernel coordinate names ``<prefix>_z<k>`` not in ``taken`` (which gains them)."""
    znames: list[str] = []
    k = 0
    while len(znames) < kappa:
        name = f"{prefix}_z{k}"
        k += 1
        if name in taken:
            continue
        taken.add(name)
        znames.append(name)
    return znames


def _substituted_ranges(
    others: list[Cond], solution: dict[str, Affine], znames: list[str]
) -> tuple[list[Cond], list[Cond]] | None:
    """The remaining constraints at the solution: those on the kernel
    coordinates (they stay on the sum) and the rest (they join the outer
    condition); None when one is false outright."""
    inner: list[Cond] = []
    outer: list[Cond] = []
    for c in others:
        new = c.substitute(solution)
        if isinstance(new, Compare):
            new = compare(new.op, new.lhs - new.rhs)  # readable: x >= 3 rather than 6 - x <= 3
        if set(new.names()) & set(znames):
            inner.append(new)
        elif isinstance(new, Compare) and new.lhs.is_constant and new.rhs.is_constant:
            if not new.evaluate({}):
                return None
        else:
            outer.append(new)
    return inner, outer


def solve(e: Expr, prefix: str, taken: set[str]) -> Expr:
    """Solve every constrained sum of ``e``, innermost first."""
    return transform(e, lambda n: solve_csum(n, prefix, taken) if isinstance(n, CSum) else n)


@dataclass(frozen=True)
class IndexSolve(Pass):
    name = "index-solve"
    level = Level.INDEX
    summary = "solve the index equations of constrained sums: Smith normal form -> I, K, C (sec. 4.1)"

    def run(self, program: Program, ctx: PassContext) -> Program:
        taken = program.names_in_use()
        defs = [d.with_body(solve(d.body, d.name, taken)) for d in program.definitions]
        return program.with_definitions(defs)
