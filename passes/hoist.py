"""``hoist``: loop-invariant code motion on L2, in three steps.

``lower-loops`` writes every definition as it reads: a sum inside an element
is a reduction inside that element's loop nest, a factor of a summand is
multiplied in every iteration.  Derivative programs make this expensive,
because the chain rule copies forward subexpressions (``z = X w`` of a
logistic regression) into every element of the derivative.  This pass moves
work to the outermost place where its value is the same:

1. **factor** (step c): ``acc += X * Y`` inside a loop where ``Y`` is
   invariant accumulates ``X`` and multiplies by ``Y`` once after the loop.
   Gradient kernels have this shape all the time: ``dd_acc += -(df[..] *
   f[..]) * (3 * d[dd_0]**2)`` pays for the power in every iteration of two
   loops.  When ``acc`` was declared ``local acc = 0`` just before the loop,
   the product becomes a ``let`` that later reads use; otherwise a fresh
   partial sum ``local t = 0`` is added and ``acc += t * Y`` follows the loop
   (distributivity needs no zero start; the ``let`` form just reads better).
   The product is formed only where some term was added (:func:`runs_test`):
   the interpreter's empty sum is +0 for any ``Y``, ``0 * inf`` is NaN.  No
   exact test, no factoring (docs/passes.md, "Factoring and IEEE arithmetic").
2. **licm** (step a): a ``let``, or a *reduction* -- ``local acc = 0`` and
   the statements right after it that write nothing but ``acc`` -- whose value
   does not depend on a loop (it mentions neither the loop variable nor a
   name or buffer written inside the loop) moves in front of the loop,
   innermost loops first, so it travels outwards as far as it can.
3. **extract** (step b): a reduction that depends on an inner loop but not on
   an enclosing one -- ``for i { for j { local s = 0; for k { s += A[j, k] } } }``
   -- cannot move in front of ``i`` without losing ``j``.  It becomes its own
   kernel, run just before, that fills a new ``temp`` buffer over the loops it
   depends on (``t[j]``); the original place reads ``let s = t[j]``.  This is
   what makes the Hessian of a logistic regression O(m n^2) instead of
   O(m n^3).  A reduction that depends on no loop at all, in a kernel that is
   one loop nest, also becomes its own kernel (a scalar temp): moving it in
   front of the loop would keep the runtime from splitting that loop over
   threads (:attr:`Kernel.parallel_loop`).  An *expensive* ``let`` (a libm
   call such as ``exp``, or ``**`` with a non-integer exponent) that skips an
   enclosing loop is extracted the same way (option ``extract-lets``): in the
   logistic-regression Hessian ``exp(-y[i] * (X w)[i])`` then costs m calls,
   not m n^2.  Lets the reduction or let reads are recomputed in the new
   kernel; lets nobody reads any more afterwards are dropped.

Moving code must not make it run where it did not run before *and fail*:
code in front of a loop runs even when the loop runs zero times, and an
extracted reduction runs for every point of the loops it keeps, not only
where the dropped loops and tests let it run.  Scalar arithmetic cannot fail
(an ``inf`` nobody reads is harmless), loads can: every moved load is proved
in bounds at its new place with Fourier-Motzkin (:class:`tcc.ir.polyhedra.Facts`
from the enclosing loop ranges and tests, sizes >= 0).  A load that is in
bounds only because the loop it leaves runs at least once (``x[0, k]`` inside
``for i in 0..n - 1`` needs ``n >= 1``) keeps that as a test: ``let v =
where(n >= 1, ..., 0)``, an ``if`` around a reduction's loops or around the
extracted kernel's nest.  What cannot be proved even so stays where it is.

The steps run as licm, factor, licm again (a factor computed by a ``let``
inside the loop is only invariant once the let has moved out; what
factoring leaves behind may move further), then extract.

The dataflow helpers at the top of this module (names used, written and
defined by statements; access checks) are shared by the other L2 passes.
They see an external kernel's ``extern inv(A) -> B`` as reading ``A`` and
writing ``B``; the pass itself leaves external kernels alone.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

from tcc.ir.expr import Access, Binary, Const, Expr, Unary, Where, fresh_name, postorder, transform
from tcc.ir.index import Affine, Compare, Cond, compare, make_and, negate
from tcc.ir.loops import Accumulate, Buffer, Extern, For, If, Kernel, Let, Local, LoopProgram, Stmt, Store, children
from tcc.ir.polyhedra import Facts, program_facts
from tcc.passes.pass_base import Level, Pass, PassContext

# ---------------------------------------------------------------------------
# L2 dataflow helpers (shared by fuse, reuse-buffers and parallel)
# ---------------------------------------------------------------------------

_EXPR_NAMES: "weakref.WeakKeyDictionary[Expr, frozenset[str]]" = weakref.WeakKeyDictionary()


def expr_names(e: Expr) -> frozenset[str]:
    """Every name an L2 scalar expression reads: buffers, scalars, index and size names."""
    hit = _EXPR_NAMES.get(e)
    if hit is None:
        out: set[str] = set()
        for n in postorder(e):
            if isinstance(n, Access):
                out.add(n.tensor)
                for ix in n.indices:
                    out.update(ix.names())
            elif isinstance(n, Where):
                out.update(n.cond.names())
        hit = frozenset(out)
        _EXPR_NAMES[e] = hit
    return hit


def affine_names(items: Iterable[Affine]) -> set[str]:
    return {n for a in items for n in a.names()}


def read_names(body: Sequence[Stmt]) -> set[str]:
    """Names a statement list reads and does not bind itself (loop variables,
    ``let``/``local`` names declared in it are bound from their statement on).

    Targets of stores and accumulates are writes, not reads; their indices
    are reads.
    """
    free: set[str] = set()
    bound: set[str] = set()
    for s in body:
        if isinstance(s, For):
            used = affine_names(s.lo + s.hi) | (read_names(s.body) - {s.var})
        elif isinstance(s, If):
            used = set(s.cond.names()) | read_names(s.then) | read_names(s.orelse)
        elif isinstance(s, Let):
            used = set(expr_names(s.value))
        elif isinstance(s, Local):
            used = set(expr_names(s.init))
        elif isinstance(s, Store):
            used = affine_names(s.indices) | expr_names(s.value)
        elif isinstance(s, Accumulate):
            used = affine_names(s.indices) | expr_names(s.value)
        elif isinstance(s, Extern):
            used = set(s.args)
        else:  # pragma: no cover - closed set
            raise TypeError(s)
        free |= used - bound
        if isinstance(s, (Let, Local)):
            bound.add(s.name)
    return free


def outer_writes(body: Sequence[Stmt]) -> set[str]:
    """Names a statement list changes that are visible after it: stored or
    accumulated buffers, accumulated locals declared outside it, and the
    ``let``/``local`` names it declares at its top level."""
    out: set[str] = set()
    declared: set[str] = set()
    for s in body:
        if isinstance(s, (Let, Local)):
            out.add(s.name)
            declared.add(s.name)
        elif isinstance(s, Store):
            out.add(s.buffer)
        elif isinstance(s, Accumulate):
            out.add(s.target)
        elif isinstance(s, Extern):
            out.add(s.out)
        elif isinstance(s, For):
            out |= outer_writes(s.body) - _declared(s.body)
        elif isinstance(s, If):
            out |= (outer_writes(s.then) - _declared(s.then)) | (outer_writes(s.orelse) - _declared(s.orelse))
    return out


def _declared(body: Sequence[Stmt]) -> set[str]:
    return {s.name for s in body if isinstance(s, (Let, Local))}


def all_writes(body: Sequence[Stmt]) -> set[str]:
    """Every name a statement list assigns anywhere inside, declarations included."""
    out: set[str] = set()
    for s in _walk(body):
        if isinstance(s, (Let, Local)):
            out.add(s.name)
        elif isinstance(s, Store):
            out.add(s.buffer)
        elif isinstance(s, Accumulate):
            out.add(s.target)
        elif isinstance(s, Extern):
            out.add(s.out)
    return out


def bound_inside(body: Sequence[Stmt]) -> set[str]:
    """Loop variables and scalar names declared anywhere inside ``body``."""
    out: set[str] = set()
    for s in _walk(body):
        if isinstance(s, For):
            out.add(s.var)
        elif isinstance(s, (Let, Local)):
            out.add(s.name)
    return out


def _walk(body: Sequence[Stmt]) -> Iterable[Stmt]:
    for s in body:
        yield s
        yield from _walk(children(s))


def stored_buffers(body: Sequence[Stmt], buffers: set[str]) -> set[str]:
    """Buffers written (stored or accumulated) anywhere in ``body``."""
    return {n for n in all_writes(body) if n in buffers}


def loads(e: Expr) -> list[Access]:
    """The buffer loads of an expression (an ``Access`` with indices, or of a scalar buffer)."""
    return [n for n in postorder(e) if isinstance(n, Access)]


def map_exprs(body: Sequence[Stmt], fn: Callable[[Expr], Expr]) -> tuple[Stmt, ...]:
    """Apply ``fn`` to every scalar expression of a statement list."""
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, For):
            out.append(replace(s, body=map_exprs(s.body, fn)))
        elif isinstance(s, If):
            out.append(replace(s, then=map_exprs(s.then, fn), orelse=map_exprs(s.orelse, fn)))
        elif isinstance(s, Let):
            out.append(replace(s, value=fn(s.value)))
        elif isinstance(s, Local):
            out.append(replace(s, init=fn(s.init)))
        elif isinstance(s, (Store, Accumulate)):
            out.append(replace(s, value=fn(s.value)))
        elif isinstance(s, Extern):
            out.append(s)  # no scalar expressions
        else:  # pragma: no cover
            raise TypeError(s)
    return tuple(out)


def rename_reads(body: Sequence[Stmt], old: str, new: str) -> tuple[Stmt, ...]:
    """Reads of the scalar ``old`` become reads of ``new``."""
    target = Access(old, ())
    repl = Access(new, ())
    return map_exprs(body, lambda e: transform(e, lambda n: repl if n is target else n))


def program_names(program: LoopProgram) -> set[str]:
    """Every name a loop program uses (for fresh names): sizes, buffers,
    kernels, loop variables, scalars and index names."""
    names = set(program.sizes) | {b.name for b in program.buffers} | {k.name for k in program.kernels}
    for k in program.kernels:
        names |= bound_inside(k.body) | read_names(k.body) | all_writes(k.body)
    return names


# ---------------------------------------------------------------------------
# Proving loads in bounds at a new place
# ---------------------------------------------------------------------------


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
            return self.expr_ok(e.then, facts.with_cond(e.cond)) and self.expr_ok(e.other, _with_negation(facts, e.cond))
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
                if not self.stmts_ok(s.orelse, _with_negation(facts, s.cond)):
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


def _with_negation(facts: Facts, cond: Cond) -> Facts:
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


# ---------------------------------------------------------------------------
# Units: a let, a reduction, or any other statement
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Unit:
    stmts: tuple[Stmt, ...]
    kind: str  # "let", "reduction" or "other"

    @property
    def name(self) -> str:
        return self.stmts[0].name  # type: ignore[union-attr]


def units(body: Sequence[Stmt]) -> list[_Unit]:
    """Split a block into lets, reductions and other statements.

    A reduction is ``local acc = init`` followed by every statement right
    after it whose only visible effect is on ``acc`` (loops and tests that
    accumulate into it, with their own lets and locals inside).
    """
    out: list[_Unit] = []
    i = 0
    while i < len(body):
        s = body[i]
        if isinstance(s, Let):
            out.append(_Unit((s,), "let"))
            i += 1
        elif isinstance(s, Local):
            j = i + 1
            while j < len(body) and not isinstance(body[j], (Let, Local)) and outer_writes((body[j],)) == {s.name}:
                j += 1
            out.append(_Unit(tuple(body[i:j]), "reduction"))
            i = j
        else:
            out.append(_Unit((s,), "other"))
            i += 1
    return out


# ---------------------------------------------------------------------------
# Step c: factor loop-invariant multipliers out of accumulations
# ---------------------------------------------------------------------------


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


class _Factor:
    """Step c over one kernel; ``taken`` is shared so fresh names stay fresh."""

    def __init__(self, checker: BoundsChecker, taken: set[str]) -> None:
        self.checker = checker
        self.taken = taken
        self.changed = 0
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
                    orelse=self.block(s.orelse, _with_negation(facts, s.cond), frozenset(locals_)),
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
        accs = [s for s in _walk(loop.body) if isinstance(s, Accumulate) and s.target == acc and not s.indices]
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
        self.changed += 1
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
        accs = [s for s in _walk(loop.body) if isinstance(s, Accumulate) and s.target == acc]
        tests = [s for s in _walk(loop.body) if id(s) in self.tests and s.then[0] in accs]  # type: ignore[union-attr]
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


# ---------------------------------------------------------------------------
# Step a: move lets and reductions out of loops they do not depend on
# ---------------------------------------------------------------------------


class _Licm:
    """Step a over one kernel, innermost loops first.

    ``unique``: names declared exactly once in the kernel (lets, locals, loop
    variables).  Only those move: a name also declared in a sibling block
    could meet its twin in the block it moves to (``lower-loops`` makes every
    name unique, hand-written L2 need not).
    """

    def __init__(self, checker: BoundsChecker, body: tuple[Stmt, ...]) -> None:
        self.checker = checker
        self.moved = 0
        counts: dict[str, int] = {}
        for s in _walk(body):
            if isinstance(s, (Let, Local, For)):
                n = s.var if isinstance(s, For) else s.name
                counts[n] = counts.get(n, 0) + 1
        self.unique = {n for n, c in counts.items() if c == 1}

    def block(self, body: tuple[Stmt, ...], facts: Facts, pinned: bool = False) -> tuple[Stmt, ...]:
        """``pinned``: the block is a kernel body that is one loop nest; nothing
        may be hoisted out of that loop (it would stop the loop being split)."""
        out: list[Stmt] = []
        for s in body:
            if isinstance(s, For):
                inner = facts.with_range(s.var, s.lo, s.hi)
                s = replace(s, body=self.block(s.body, inner))
                if not pinned:
                    hoisted, s = self.out_of(s, facts)  # type: ignore[assignment]
                    at = _reduction_start(out, s) if s is not None else len(out)
                    out[at:at] = hoisted
                if s is None:
                    continue
            elif isinstance(s, If):
                s = replace(
                    s,
                    then=self.block(s.then, facts.with_cond(s.cond)),
                    orelse=self.block(s.orelse, _with_negation(facts, s.cond)),
                )
            out.append(s)
        return tuple(out)

    def out_of(self, loop: For, facts: Facts) -> tuple[list[Stmt], For | None]:
        parts = units(loop.body)
        writes = [outer_writes(u.stmts) for u in parts]
        staying = [True] * len(parts)
        hoisted: list[Stmt] = []
        for k, u in enumerate(parts):
            if u.kind == "other" or u.name not in self.unique:
                continue
            others = set().union(*(w for j, w in enumerate(writes) if staying[j] and j != k))
            used = read_names(u.stmts)
            if loop.var in used or used & others:
                continue
            if u.kind == "reduction" and u.name in others:
                continue  # the accumulator is also written elsewhere in the loop
            stmts = u.stmts
            if not self.checker.stmts_ok(stmts, facts):
                # the loads are safe only where the loop runs: keep that test
                if not self.checker.stmts_ok(stmts, facts.with_range(loop.var, loop.lo, loop.hi)):
                    continue
                stmts = _guarded(u, make_and(nonempty_guard(loop, facts)))
            staying[k] = False
            hoisted.extend(stmts)
            self.moved += 1
        body = tuple(s for k, u in enumerate(parts) if staying[k] for s in u.stmts)
        return hoisted, (replace(loop, body=body) if body else None)


def _guarded(u: _Unit, cond: Cond | None) -> tuple[Stmt, ...]:
    """A let or reduction that only computes where ``cond`` holds (a lazy
    ``where`` for a let, an ``if`` around the accumulation for a reduction)."""
    if cond is None:
        return u.stmts
    if u.kind == "let":
        let = u.stmts[0]
        return (Let(let.name, Where(cond, let.value, Const(0))),)  # type: ignore[union-attr]
    rest = u.stmts[1:]
    return (u.stmts[0], If(cond, rest)) if rest else u.stmts


def _reduction_start(out: list[Stmt], loop: For) -> int:
    """Where code hoisted out of ``loop`` goes: in front of the loop, or, when
    the loop continues a reduction (``local acc = 0`` and loops that only
    accumulate into ``acc``), in front of its ``local`` so the reduction stays
    one unit for later steps."""
    w = outer_writes((loop,))
    if len(w) != 1:
        return len(out)
    (acc,) = w
    j = len(out)
    while j > 0 and not isinstance(out[j - 1], (Let, Local)) and outer_writes((out[j - 1],)) == {acc}:
        j -= 1
    if j > 0 and isinstance(out[j - 1], Local) and out[j - 1].name == acc:  # type: ignore[union-attr]
        return j - 1
    return len(out)


# ---------------------------------------------------------------------------
# Step b: reductions that skip an enclosing loop become kernels
# ---------------------------------------------------------------------------


@dataclass
class _Frame:
    """One enclosing statement of a reduction: a loop, or a branch of a test."""

    stmt: Stmt
    branch: str = ""  # "then" / "else" for an If
    visible: tuple[Stmt, ...] = ()  # lets/locals declared before, in the block inside this frame


class _Extract:
    """Step b: split reductions off into kernels that fill temps."""

    def __init__(self, program: LoopProgram, checker: BoundsChecker, taken: set[str], lets: bool) -> None:
        self.program = program
        self.lets = lets
        self.sizes = set(program.sizes)
        self.buffers = {b.name for b in program.buffers}
        self.checker = checker
        self.taken = taken
        self.extents = {e for b in program.buffers for e in b.shape}
        self.temps: list[Buffer] = []

    def kernels(self, kernel: Kernel) -> list[Kernel]:
        """``kernel`` with its extractable reductions split off (those kernels first)."""
        before: list[Kernel] = []
        refused: dict[int, Stmt] = {}
        while True:
            found = self.find(kernel, refused)
            if found is None:
                return before + [kernel]
            new_kernel, kernel = found
            before.extend(self.kernels(new_kernel))

    def find(self, kernel: Kernel, refused: dict[int, Stmt]):
        written = stored_buffers(kernel.body, self.buffers)
        for path, unit, block_before, block_after in _reductions(kernel.body, lets=self.lets):
            if id(unit.stmts[0]) in refused:
                continue
            done = None
            if unit.name not in outer_writes(block_after):  # else the reduction goes on later
                done = self.try_extract(kernel, path, unit, block_before, written)
            if done is None:
                refused[id(unit.stmts[0])] = unit.stmts[0]  # kept alive: ids stay unique
                continue
            return done
        return None

    def try_extract(self, kernel: Kernel, path: list[_Frame], unit: _Unit, block_before: tuple[Stmt, ...], written: set[str]):
        loops = [f.stmt for f in path if isinstance(f.stmt, For)]
        if not loops:
            return None
        visible: dict[str, Stmt] = {}
        for f in path:
            for s in f.visible:
                visible[s.name] = s  # type: ignore[union-attr]
        for s in block_before:
            if isinstance(s, (Let, Local)):
                visible[s.name] = s
        loop_vars = {l.var for l in loops}
        # the reduction's free scalars must be lets that can be recomputed
        needed: list[Let] = []
        todo = set(read_names(unit.stmts))
        seen: set[str] = set()
        free = set()
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            free.add(n)
            if n in visible:
                d = visible[n]
                if not isinstance(d, Let):
                    return None  # a local: its value changes as the kernel runs
                needed.append(d)
                todo |= set(expr_names(d.value))
        if (free & self.buffers) & written:
            return None  # reads a buffer this kernel writes: it cannot run before
        depends = free & loop_vars
        kept = [l for l in loops if l.var in depends]
        if len(kept) == len(loops):
            return None  # nothing to gain: every enclosing loop matters
        kept_vars = {l.var for l in kept}
        for l in kept:
            if not affine_names(l.lo + l.hi) <= self.sizes | kept_vars:
                return None  # the range of a kept loop depends on a dropped one
        shape: list[Affine] = []
        index: list[Affine] = []
        for l in kept:
            lo = next((b for b in l.lo if set(b.names()) <= self.sizes), None)
            hi = next((b for b in l.hi if set(b.names()) <= self.sizes), None)
            if lo is None or hi is None:
                return None  # no box around a triangular range
            extent = hi - lo + 1
            if extent not in self.extents and not program_facts(self.program.sizes).implies(
                Compare(">=", extent, Affine.constant(0))
            ):
                return None  # the temp could get a negative extent
            shape.append(extent)
            index.append(Affine.var(l.var) - lo)
        lets = _in_order(needed, path, block_before)
        # first without, then with tests that the dropped loops run at all
        for guards in (False, True):
            nest, facts = self.nest(path, kept_vars, guards)
            if self.checker.stmts_ok(tuple(lets) + unit.stmts, facts):
                break
        else:
            return None
        # build the temp, the kernel filling it, and the read replacing the reduction
        acc = unit.name
        name = fresh_name(f"{kernel.name}_t", self.taken)
        self.taken.add(name)
        self.temps.append(Buffer(name, tuple(shape), "temp"))
        inner: tuple[Stmt, ...] = tuple(lets) + unit.stmts + (Store(name, tuple(index), Access(acc, ())),)
        for st in reversed(nest):
            inner = (replace(st, body=inner),) if isinstance(st, For) else (replace(st, then=inner),)
        new_kernel = Kernel(name, inner)
        read = Let(acc, Access(name, tuple(index)))
        body = _replace_unit(kernel.body, unit, read)
        return new_kernel, replace(kernel, body=body)

    def nest(self, path: list[_Frame], kept_vars: set[str], guards: bool) -> tuple[list[Stmt], Facts]:
        """The new kernel's loops and tests (bodies left empty), outermost
        first, and the facts inside them.

        Kept loops are copied; a test is copied when it only needs sizes and
        kept loop variables.  With ``guards``, a dropped loop whose range only
        needs those becomes the test that it runs at least once, and its range
        becomes a fact (its variable then only stands for "some iteration"):
        a load that was in bounds because the loop ran stays in bounds.
        """
        facts = program_facts(self.program.sizes)
        known = set(self.sizes)
        out: list[Stmt] = []
        for f in path:
            st = f.stmt
            if isinstance(st, For):
                if st.var in kept_vars:
                    out.append(replace(st, body=(), parallel=False))
                    facts = facts.with_range(st.var, st.lo, st.hi)
                    known.add(st.var)
                elif guards and affine_names(st.lo + st.hi) <= known:
                    cond = make_and(nonempty_guard(st, facts))
                    if cond is not None:
                        out.append(If(cond, ()))
                    facts = facts.with_range(st.var, st.lo, st.hi)
            elif isinstance(st, If) and set(st.cond.names()) <= known:
                c = st.cond if f.branch == "then" else negate(st.cond)
                out.append(If(c, ()))
                facts = facts.with_cond(c)
        return out, facts


def _in_order(needed: list[Let], path: list[_Frame], block_before: tuple[Stmt, ...]) -> list[Let]:
    """The needed lets in program order (they may read each other)."""
    order: list[Stmt] = [s for f in path for s in f.visible] + list(block_before)
    ids = {id(d) for d in needed}
    return [s for s in order if id(s) in ids]  # type: ignore[misc]


#: Unary functions that cost far more than a load (a libm call or more).
EXPENSIVE_FUNCTIONS = frozenset(
    {"exp", "log", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid"}
)


def expensive(e: Expr) -> bool:
    """Worth a temp: a libm function, or ``**`` with an exponent that is not a small integer."""
    for n in postorder(e):
        if isinstance(n, Unary) and n.op in EXPENSIVE_FUNCTIONS:
            return True
        if isinstance(n, Binary) and n.op == "**":
            if not (isinstance(n.rhs, Const) and float(n.rhs.value).is_integer() and abs(n.rhs.value) <= 4):
                return True
    return False


def _reductions(body: tuple[Stmt, ...], path: list[_Frame] | None = None, lets: bool = False):
    """Every reduction unit (and with ``lets``, every expensive let), pre-order,
    with its enclosing frames and the statements before and after it in its block."""
    path = path or []
    before: list[Stmt] = []
    parts = units(body)
    for k, u in enumerate(parts):
        if u.kind == "reduction" or (lets and u.kind == "let" and expensive(u.stmts[0].value)):  # type: ignore[union-attr]
            yield path, u, tuple(before), tuple(s for v in parts[k + 1 :] for s in v.stmts)
        for s in u.stmts:
            visible = tuple(x for x in before if isinstance(x, (Let, Local)))
            if isinstance(s, For):
                yield from _reductions(s.body, path + [_Frame(s, "", visible)], lets)
            elif isinstance(s, If):
                yield from _reductions(s.then, path + [_Frame(s, "then", visible)], lets)
                yield from _reductions(s.orelse, path + [_Frame(s, "else", visible)], lets)
            before.append(s)


def _replace_unit(body: tuple[Stmt, ...], unit: _Unit, new: Stmt) -> tuple[Stmt, ...]:
    first = unit.stmts[0]
    out: list[Stmt] = []
    i = 0
    while i < len(body):
        s = body[i]
        if s is first:
            out.append(new)
            i += len(unit.stmts)
            continue
        if isinstance(s, For):
            s = replace(s, body=_replace_unit(s.body, unit, new))
        elif isinstance(s, If):
            s = replace(s, then=_replace_unit(s.then, unit, new), orelse=_replace_unit(s.orelse, unit, new))
        out.append(s)
        i += 1
    return tuple(out)


# ---------------------------------------------------------------------------
# Dead scalars
# ---------------------------------------------------------------------------


def names_read_anywhere(body: Sequence[Stmt]) -> set[str]:
    """Every name any expression, index, bound or test in ``body`` mentions."""
    out: set[str] = set()
    for s in _walk(body):
        if isinstance(s, For):
            out |= affine_names(s.lo + s.hi)
        elif isinstance(s, If):
            out.update(s.cond.names())
        elif isinstance(s, Let):
            out |= expr_names(s.value)
        elif isinstance(s, Local):
            out |= expr_names(s.init)
        elif isinstance(s, (Store, Accumulate)):
            out |= expr_names(s.value) | affine_names(s.indices)
        elif isinstance(s, Extern):
            out.update(s.args)
    return out


def prune_dead(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """Drop lets and reductions whose value nobody reads (extraction leaves
    ``let s = t[j]`` behind when only an extracted let used ``s``)."""
    while True:
        read = names_read_anywhere(body)
        pruned = _prune(body, read)
        if pruned == body:
            return body
        body = pruned


def _prune(body: tuple[Stmt, ...], read: set[str]) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for u in units(body):
        if u.kind != "other" and u.name not in read:
            continue
        for s in u.stmts:
            if isinstance(s, For):
                s = replace(s, body=_prune(s.body, read))
            elif isinstance(s, If):
                s = replace(s, then=_prune(s.then, read), orelse=_prune(s.orelse, read))
            out.append(s)
    return tuple(out)


# ---------------------------------------------------------------------------
# The pass
# ---------------------------------------------------------------------------


def hoist_program(
    program: LoopProgram, factor: bool = True, licm: bool = True, extract: bool = True, extract_lets: bool = True
) -> LoopProgram:
    checker = BoundsChecker(program)
    taken = program_names(program)
    top = program_facts(program.sizes)
    kernels: list[Kernel] = []
    for k in program.kernels:
        if k.extern is not None:  # an external kernel: no loops, nothing to move
            kernels.append(k)
            continue
        body = k.body
        pinned = len(body) == 1 and isinstance(body[0], For)
        if licm:
            body = _Licm(checker, body).block(body, top, pinned=pinned)
        if factor:
            # after a first licm: a factor computed by a let inside the loop
            # (``let v = s[i]**2`` in a loop over j) is invariant only outside it
            body = _Factor(checker, taken).block(body, top, frozenset())
        if licm and factor:
            body = _Licm(checker, body).block(body, top, pinned=pinned)
        kernels.append(replace(k, body=body))
    temps: list[Buffer] = []
    if extract:
        ex = _Extract(program, checker, taken, extract_lets)
        out: list[Kernel] = []
        for k in kernels:
            out.extend([k] if k.extern is not None else ex.kernels(k))
        kernels = [replace(k, body=prune_dead(k.body)) for k in out]
        temps = ex.temps
    return replace(program, buffers=program.buffers + tuple(temps), kernels=tuple(kernels))


@dataclass(frozen=True)
class Hoist(Pass):
    """Loop-invariant code motion on L2: factor invariant multipliers out of
    accumulations, move invariant lets and reductions out of loops, and turn
    reductions that skip an enclosing loop into kernels filling temps.

    Each step can be switched off (``hoist{extract=false}``) to see what the
    others do on their own; ``extract-lets=false`` extracts reductions only.
    """

    name = "hoist"
    level = Level.LOOPS
    summary = "loop-invariant code motion: invariant factors, lets and reductions move out; skipped loops become temps"

    factor: bool = True
    licm: bool = True
    extract: bool = True
    extract_lets: bool = True

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return hoist_program(program, self.factor, self.licm, self.extract, self.extract_lets)
