"""``sum-liberation``: flatten a delta-form term into one constrained sum (Urban and van der Smagt, sec. 5.2).

``autodiff`` leaves each term as the paper's eq. (50) before liberation::

    sum[i, j](L0 * sum[k](L1 * where(i + k == β, L2, 0)))

Liberation removes the inner sum symbols, appends their indices to α and their
ranges to the constraints, and moves the convex conditions of the delta into
the constraint list::

    sum[i, j, k | 0 <= i, i <= 2, ..., i + k == β](L0 * L1 * L2)

Only sums that lead to a delta (a ``where(..., 0)`` whose condition has an
equality over the summation indices) are touched: an ordinary sum such as
``exp(-sum[k](...))`` keeps its structure, because pulling factors into it
would recompute them per iteration.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from tcc.ir.expr import ZERO, Binary, CSum, Expr, Step, Sum, Unary, Where, free_names, is_zero, rebuild, trampoline
from tcc.ir.index import Affine, Compare, Cond, conjuncts, lookups, make_and
from tcc.ir.program import Program
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)


@dataclass
class _Delta:
    vars: list[str]
    constraints: list[Cond]
    factors: list[Expr]
    guards: list[Cond]  # non-convex conditions, kept as a where in the body
    negate: bool = False


def _range_constraints(s: Sum) -> list[Cond]:
    v = Affine.var(s.var)
    return [Compare("<=", lo, v) for lo in s.lo] + [Compare("<=", v, hi) for hi in s.hi]


def _indirect(c: Cond) -> bool:
    """A comparison that reads an index input (``col[k] == x_0``): not a linear constraint.

    It stays a guard in the body: liberating it would hand the solvers an
    equation in an opaque atom (they would drop it), and the derivative it
    gives is a scan over the positions, correct and still a gather.
    """
    return isinstance(c, Compare) and bool(lookups(c.lhs) or lookups(c.rhs))


def _is_delta_cond(cond: Cond, bound: set[str]) -> bool:
    return any(
        isinstance(c, Compare) and c.op == "==" and set(c.names()) & bound and not _indirect(c) for c in conjuncts(cond)
    )


def _split(cond: Cond) -> tuple[list[Cond], list[Cond]]:
    convex, rest = [], []
    for c in conjuncts(cond):
        if isinstance(c, Compare) and c.op != "!=" and not _indirect(c):
            convex.append(c)
        else:
            rest.append(c)
    return convex, rest


class _Memo:
    """What one :func:`liberate` call has learnt, so no node is walked twice.

    ``none`` holds the (node, bound names) pairs that lead to no delta: that
    answer is a pure function of the pair, and ``liberate`` asks it again at
    every node of a product chain -- walking the rest of the chain each time
    made a product of n factors cost O(n^2) (O(n^3) for the n terms of its
    gradient).  A found ``_Delta`` is not kept: callers extend it in place.
    ``names`` is the shared :func:`free_names` memo of :func:`_captures`.
    """

    def __init__(self) -> None:
        self.none: dict[tuple[Expr, frozenset[str]], None] = {}
        self.names: dict[Expr, tuple[str, ...]] = {}


def _liberate(e: Expr, bound: set[str], memo: _Memo | None = None) -> Step:
    """The delta-form decomposition of ``e``, or None if ``e`` leads to no delta.

    A step for ``trampoline`` (it yields where it would recurse): a product
    of many factors is a tree as deep as it is long.  With ``memo``, a pair
    already known to give None is answered without walking it again.
    """
    if memo is None:
        memo = _Memo()
    key = (e, frozenset(bound))
    if key in memo.none:
        return None
    result = yield _liberate_step(e, bound, memo)
    if result is None:
        memo.none[key] = None
    return result


def _liberate_step(e: Expr, bound: set[str], memo: _Memo) -> Step:
    """One level of :func:`_liberate` (which memoises it)."""
    if isinstance(e, Sum) and any(lookups(b) for b in e.lo + e.hi):
        return None  # a CSR row sum (bounds read an index input) keeps its structure: see _indirect
    if isinstance(e, Sum) and e.has_range:
        inner = yield _liberate(e.body, bound | {e.var}, memo)
        if inner is None:
            return None
        return _Delta([e.var] + inner.vars, _range_constraints(e) + inner.constraints, inner.factors, inner.guards, inner.negate)
    if isinstance(e, CSum):
        inner = yield _liberate(e.body, bound | set(e.vars), memo)
        if inner is None:
            return None
        return _Delta(list(e.vars) + inner.vars, list(e.constraints) + inner.constraints, inner.factors, inner.guards, inner.negate)
    if isinstance(e, Where) and is_zero(e.other):
        inner = yield _liberate(e.then, bound, memo)
        convex, rest = _split(e.cond)
        if inner is not None:
            inner.constraints = convex + inner.constraints
            inner.guards = rest + inner.guards
            return inner
        if _is_delta_cond(e.cond, bound):
            then = e.then
            # guards directly under the delta bound the same sum: absorb them too
            while isinstance(then, Where) and is_zero(then.other):
                more_convex, more_rest = _split(then.cond)
                convex, rest, then = convex + more_convex, rest + more_rest, then.then
            return _Delta([], convex, [then], rest)
        return None
    if isinstance(e, Binary) and e.op == "*":
        left = yield _liberate(e.lhs, bound, memo)
        right = (yield _liberate(e.rhs, bound, memo)) if left is None else None
        if left is not None:
            if _captures(left, e.rhs, memo):
                return None
            left.factors = left.factors + [e.rhs]
            return left
        if right is not None:
            if _captures(right, e.lhs, memo):
                return None
            right.factors = [e.lhs] + right.factors
            return right
        return None
    if isinstance(e, Unary) and e.op == "neg":
        inner = yield _liberate(e.operand, bound, memo)
        if inner is not None:
            inner.negate = not inner.negate
        return inner
    return None


def _captures(d: _Delta, factor: Expr, memo: _Memo | None = None) -> bool:
    """Moving ``factor`` under the liberated sums must not capture its free names."""
    return bool(set(d.vars) & set(free_names(factor, memo.names if memo is not None else None)))


def _product(factors: list[Expr]) -> Expr:
    out = factors[0]
    for f in factors[1:]:
        out = Binary("*", out, f)
    return out


def liberate(e: Expr) -> Expr:
    """Rewrite every maximal delta-form subexpression of ``e`` into a constrained sum."""
    memo: dict[int, Expr] = {}
    known = _Memo()  # shared by every _liberate below: each (node, bound) is walked once

    def visit(n: Expr) -> Step:
        hit = memo.get(id(n))
        if hit is not None:
            return hit
        out: Expr
        d = (yield _liberate(n, set(), known)) if isinstance(n, (Sum, CSum, Where, Binary, Unary)) else None
        if d is not None and d.vars:
            factors = []
            for f in d.factors:
                factors.append((yield visit(f)))
            body = _product(factors)
            if d.negate:
                body = Unary("neg", body)
            guard = make_and(d.guards)
            if guard is not None:
                body = Where(guard, body, ZERO)
            out = CSum(tuple(d.vars), tuple(d.constraints), body)
        else:
            kids = n.children()
            new_kids = []
            for k in kids:
                new_kids.append((yield visit(k)))
            new = tuple(new_kids)
            out = rebuild(n, new) if new != kids else n
        memo[id(n)] = out
        return out

    return trampoline(visit(e))


@dataclass(frozen=True)
class SumLiberation(Pass):
    name = "sum-liberation"
    level = Level.INDEX
    summary = "flatten delta-form sums into constrained sums over all liberated indices (sec. 5.2)"

    def run(self, program: Program, ctx: PassContext) -> Program:
        return program.with_definitions(d.with_body(liberate(d.body)) for d in program.definitions)
