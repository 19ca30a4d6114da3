"""``hoist``'s factor phase (step c): loop-invariant multipliers leave accumulations.

``acc += X * Y`` inside a loop where ``Y`` is invariant accumulates ``X`` and
multiplies by ``Y`` once after the loop; the product is formed only where
some term was added (:func:`runs_test`), since the interpreter's empty sum
is +0 for any ``Y`` and ``0 * inf`` is NaN.  See the package docstring.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from tcc.ir.expr import Access, Binary, Const, Expr, Unary, Where, fresh_name
from tcc.ir.index import Cond, make_and, negate
from tcc.ir.loop_analysis import all_writes, bound_inside, expr_names, outer_writes, read_names, rename_reads, walk_stmts
from tcc.ir.loops import Accumulate, For, If, Let, Local, Stmt
from tcc.ir.polyhedra import Facts

from .safety import BoundsChecker, nonempty_guard, with_negation


def _factors(e: Expr) -> tuple[int, list[tuple[Expr, int]]]:
    """``e`` as ``sign * prod(f ** p)`` with p = +1 (factor) or -1 (divisor)."""
    sign = 1
    out: list[tuple[Expr, int]] = []
    # left to right with an explicit stack: a long product is a deep tree
    stack: list[tuple[Expr, int]] = [(e, 1)]
    while stack:
        x, power = stack.pop()
        if isinstance(x, Unary) and x.op == "neg":
            sign = -sign
            stack.append((x.operand, power))
        elif isinstance(x, Binary) and x.op == "*":
            stack.append((x.rhs, power))
            stack.append((x.lhs, power))
        elif isinstance(x, Binary) and x.op == "/":
            stack.append((x.rhs, -power))
            stack.append((x.lhs, power))
        else:
            out.append((x, power))
    return sign, out


def _product(factors: Sequence[tuple[Expr, int]], sign: int = 1) -> Expr:
    """``sign * prod(f ** p)``, dropping factors 1, divisors last."""
    factors = [(f, p) for f, p in factors if not (isinstance(f, Const) and f.value == 1)]
    num = [f for f, p in factors if p > 0]
    den = [f for f, p in factors if p < 0]
    e: Expr | None = None
    for f in num:
        e = f if e is None else Binary("*", e, f)
    if e is None:
        e = Const(1)
    for f in den:
        e = Binary("/", e, f)
    return Unary("neg", e) if sign < 0 else e


class Factor:
    """Step c over one kernel; ``taken`` is shared so fresh names stay fresh."""

    def __init__(self, checker: BoundsChecker, taken: set[str]) -> None:
        self.checker = checker
        self.taken = taken
        self.tests: dict[int, If] = {}  # the ``if test { acc += t * Y }`` made here
        # those of them whose Y loads are in bounds only where the test holds: the test must stay
        self.guards_loads: set[int] = set()

    def block(self, body: tuple[Stmt, ...], facts: Facts, outer_locals: frozenset[str]) -> tuple[Stmt, ...]:
        out: list[Stmt] = []
        locals_ = set(outer_locals)
        rest = list(body)
        while rest:
            s = rest.pop(0)
            if isinstance(s, Local):
                locals_.add(s.name)
            if isinstance(s, For):
                for acc in sorted(locals_):
                    done = self.factor(s, acc, facts, out, rest)
                    if done is not None:
                        s, rest = done
                        locals_ |= {st.name for st in out if isinstance(st, Local)}
                inner = facts.with_range(s.var, s.lo, s.hi)
                s = replace(s, body=self.block(s.body, inner, frozenset(locals_)))
                for acc in sorted(locals_):
                    done = self.test_after(s, acc, out, rest)
                    if done is not None:
                        s, rest = done
            elif isinstance(s, If) and id(s) in self.tests:
                pass  # made here: one accumulate, nothing to factor
            elif isinstance(s, If):
                s = replace(
                    s,
                    then=self.block(s.then, facts.with_cond(s.cond), frozenset(locals_)),
                    orelse=self.block(s.orelse, with_negation(facts, s.cond), frozenset(locals_)),
                )
            out.append(s)
        return tuple(out)

    def factor(self, loop: For, acc: str, facts: Facts, out: list[Stmt], rest: list[Stmt]):
        """Rewrite ``loop`` (whose only write of ``acc`` is one accumulate)
        to accumulate the variant part; returns the new loop and the new rest
        of the block (with the multiplication in front), or None.

        The product is only formed when the accumulate ran at least once
        (:func:`runs_test`): an empty sum is exactly +0, as in the
        interpreter, even when the factor is inf or NaN (``0 * inf`` would
        be NaN).  Where that test cannot be written exactly, nothing is
        factored -- unless the factors are finite non-zero constants, whose
        product with an empty sum is a zero anyway."""
        accs = [s for s in walk_stmts(loop.body) if isinstance(s, Accumulate) and s.target == acc and not s.indices]
        if len(accs) != 1 or acc in read_names(loop.body) or acc in bound_inside(loop.body):
            return None
        (target,) = accs
        varying = bound_inside(loop.body) | all_writes(loop.body) | {loop.var}
        sign, factors = _factors(target.value)
        keep: list[tuple[Expr, int]] = []
        moved: list[tuple[Expr, int]] = []
        in_loop = facts.with_range(loop.var, loop.lo, loop.hi)
        loads_need_test = False  # some moved load is in bounds only where the loop runs
        for f, p in factors:
            if expr_names(f) & varying:
                keep.append((f, p))
            elif self.checker.expr_ok(f, facts):
                moved.append((f, p))
            elif self.checker.expr_ok(f, in_loop):
                # a load in bounds only where the loop runs is read only then:
                # the runs test below implies that the loop runs
                moved.append((f, p))
                loads_need_test = True
            else:
                keep.append((f, p))
        if not moved or all(isinstance(f, Const) and f.value == 1 for f, _ in moved):
            return None
        constants = [f.value for f, _ in moved if isinstance(f, Const)]
        finite = len(constants) == len(moved) and all(math.isfinite(c) and c != 0 for c in constants)
        if finite:
            # a finite multiplier keeps an empty sum a zero: no test needed
            guard: Cond | None = None
        else:
            ok, guard = runs_test(loop, target, facts)
            if not ok:
                return None
        # ``+ 0``: a sum that starts at +0 is never -0, but ``+0 * -y`` is;
        # not needed when the multiplier is a positive constant
        positive = finite and sum(c < 0 for c in constants) % 2 == 0
        x = _product(keep, sign)
        zero_start = _starts_at_zero(out, acc) and acc not in outer_writes(rest)
        part = acc if zero_start else fresh_name(acc, self.taken)
        self.taken.add(part)
        new_loop = _replace_stmt(loop, target, Accumulate(part, (), x))
        if zero_start:
            scaled = fresh_name(acc + "_s", self.taken)
            self.taken.add(scaled)
            value = _product([(Access(acc, ()), 1)] + moved)
            value = _where(guard, value if positive else Binary("+", value, Const(0)))
            tail = [Let(scaled, value)] + list(rename_reads(tuple(rest), acc, scaled))
            return new_loop, tail
        out.append(Local(part, Const(0)))
        update: Stmt = Accumulate(acc, (), _product([(Access(part, ()), 1)] + moved))
        if guard is None:
            return new_loop, [update] + rest
        test = If(guard, (update,))
        self.tests[id(test)] = test
        if loads_need_test:
            self.guards_loads.add(id(test))
        return new_loop, [test] + rest

    def test_after(self, loop: For, acc: str, out: list[Stmt], rest: list[Stmt]):
        """Move the test of an ``if test { acc += t * Y }`` made by
        :meth:`factor` after ``loop``, when ``loop`` does not change it and
        nothing else in ``loop`` writes ``acc``, which starts at 0 in front of
        it: ``acc += t * Y`` unconditionally, then ``let acc_g = where(test,
        acc, 0)`` -- where the test fails, no term was added in any iteration,
        and the interpreter's sum is 0.  One select after the nest instead
        of a branch in it, which LLVM would unswitch, changing how it
        vectorises the loops inside (the logistic-regression Hessian-vector
        product was 15% slower).  Not when ``Y`` reads memory that is in
        bounds only under the test (the test is then what keeps the load
        safe).  Returns the new loop and rest, or None."""
        accs = [s for s in walk_stmts(loop.body) if isinstance(s, Accumulate) and s.target == acc]
        tests = [s for s in walk_stmts(loop.body) if id(s) in self.tests and s.then[0] in accs]  # type: ignore[union-attr]
        if len(accs) != 1 or len(tests) != 1 or acc in read_names(loop.body) or acc in bound_inside(loop.body):
            return None
        test: If = tests[0]  # type: ignore[assignment]
        if set(test.cond.names()) & (bound_inside(loop.body) | {loop.var}):
            return None
        if id(test) in self.guards_loads:
            # a load of Y moved out of the factored loop is in bounds only where that loop
            # runs (``y[m - 1, l]`` needs m >= 1): without the test it would read out of bounds
            return None
        if not (_starts_at_zero(out, acc) and acc not in outer_writes(rest)):
            return None
        new_loop = _replace_stmt(loop, test, test.then[0])
        guarded = fresh_name(acc + "_g", self.taken)
        self.taken.add(guarded)
        tail = [Let(guarded, Where(test.cond, Access(acc, ()), Const(0)))]
        return new_loop, tail + list(rename_reads(tuple(rest), acc, guarded))


def runs_test(loop: For, target: Stmt, facts: Facts) -> tuple[bool, Cond | None]:
    """The test that ``target`` (a statement inside ``loop``) runs at least
    once when ``loop`` runs: ``(True, None)`` when the facts prove it always
    does, ``(True, cond)`` with an exact ``cond`` (true if and only if it
    runs), ``(False, None)`` when no exact test is found.

    The loops and ``if``s from ``loop`` down to ``target`` are walked; each
    contributes the tests its facts do not already prove (a loop: that it is
    nonempty; an ``if``: its condition on the taken branch).  The conjunction
    is exact when none of those tests mentions a variable of the walked loops
    (the iteration space is then a box times tests that do not vary in it).
    A triangular ``for b in 0..a`` inside ``for a in 0..n - 1`` adds nothing:
    ``a >= 0`` proves it nonempty.  A test such as ``b == a + 1`` cannot be
    written without a quantifier: refused."""
    path = _path_to(loop, target)
    if path is None:  # pragma: no cover - the caller found target inside loop
        return False, None
    inner = facts
    walked: set[str] = set()
    tests: list[Cond] = []
    for st, branch in path:
        if isinstance(st, For):
            new = nonempty_guard(st, inner)
            inner = inner.with_range(st.var, st.lo, st.hi)
            walked.add(st.var)
        else:
            c = st.cond if branch == "then" else negate(st.cond)  # type: ignore[union-attr]
            new = [] if inner.implies(c) else [c]
            inner = inner.with_cond(c)
        if any(set(c.names()) & walked for c in new):
            return False, None
        tests.extend(c for c in new if c not in tests)
    return True, make_and(tests)


def _path_to(root: Stmt, target: Stmt) -> list[tuple[Stmt, str]] | None:
    """The loops and branches of ``if``s from ``root`` (included) down to
    ``target``, outermost first."""
    if root is target:
        return []
    branches: list[tuple[str, tuple[Stmt, ...]]] = []
    if isinstance(root, For):
        branches = [("", root.body)]
    elif isinstance(root, If):
        branches = [("then", root.then), ("else", root.orelse)]
    for branch, body in branches:
        for s in body:
            sub = _path_to(s, target)
            if sub is not None:
                return [(root, branch)] + sub
    return None


def _where(cond: Cond | None, e: Expr) -> Expr:
    return e if cond is None else Where(cond, e, Const(0))


def _starts_at_zero(before: list[Stmt], acc: str) -> bool:
    """``local acc = 0`` is in ``before`` and nothing after it touches ``acc``."""
    for s in reversed(before):
        if isinstance(s, Local) and s.name == acc:
            return isinstance(s.init, Const) and s.init.value == 0
        if acc in read_names((s,)) or acc in all_writes((s,)):
            return False
    return False


def _replace_stmt(root: Stmt, old: Stmt, new: Stmt) -> Stmt:
    if root is old:
        return new
    if isinstance(root, For):
        return replace(root, body=tuple(_replace_stmt(s, old, new) for s in root.body))
    if isinstance(root, If):
        return replace(
            root,
            then=tuple(_replace_stmt(s, old, new) for s in root.then),
            orelse=tuple(_replace_stmt(s, old, new) for s in root.orelse),
        )
    return root
