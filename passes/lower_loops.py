"""``lower-loops``: L1 index expressions -> L2 loop nests, one nest per definition.

Each definition ``d[i, j] = body`` becomes a kernel ``for i { for j { ...;
d[i, j] = v } }`` over its extents.  A ``sum`` becomes a reduction: a
``local`` accumulator, a ``for`` over the sum's range and ``acc += body``.

``where`` guards are where the derivative programs spend their time, so they
get the most care.  A zero-guard ``where(c, x, 0)`` (the form ``simplify``
leaves deltas and ranges in) is turned, conjunct by conjunct, into *tightened
loop bounds* when the conjunct is linear in a loop variable with only outer
variables beside it: ``where(i == j, ..., 0)`` over ``j`` runs one iteration,
not ``n``.  A conjunct that cannot become a bound (``!=``, ``%``, an ``or``) is
tested as an ``if`` at the outermost loop where all its variables are known,
so a false test skips whole inner loops.  For a definition, tightening means
the elements outside the new bounds must still be written: a zero-fill nest
runs first.  Any other ``where`` is lowered lazily: an ``if`` when a branch
needs statements (a sum), else a ``Where`` expression that the LLVM lowering
turns into control flow (its untaken branch may read out of bounds).

A node used more than once in a body (hash-consing makes repeats the same
object) is computed once into a ``let``: LLVM would merge repeated arithmetic
itself, but not repeated reductions or libm calls.

A matrix-function definition (``B[i, j] = inv(A)[i, j]``, ``s = det(A)``) is
not a loop nest: it becomes an *external kernel* whose whole body is
``extern inv(A) -> B``, run by the runtime with LAPACK through NumPy.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from tcc.ir.diagnostics import TccError
from tcc.ir.constrained_sums import UnboundedSum, csum_to_sums
from tcc.ir.user_functions import Call
from tcc.ir.expr import (
    Access, Binary, Const, CSum, Expr, MatrixFn, Reduce, Select, Step, Sum, Unary, Where, all_names, fresh_name, is_zero, postorder,
    trampoline,
)
from tcc.ir.index import Affine, Compare, Cond, conjuncts, make_and
from tcc.ir.loops import Accumulate, Buffer, Extern, For, If, Kernel, Let, Local, LoopProgram, Stmt, Store
from tcc.ir.program import Definition, Program
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)

ZERO = Affine.constant(0)


# ---------------------------------------------------------------------------
# Conditions -> loop bounds
# ---------------------------------------------------------------------------


def _nonneg_forms(c: Compare) -> list[Affine] | None:
    """``c`` as forms ``e >= 0`` (all must hold), or None when it is not a conjunction of those."""
    d = c.lhs - c.rhs
    if c.op == ">=":
        return [d]
    if c.op == ">":
        return [d - 1]
    if c.op == "<=":
        return [-d]
    if c.op == "<":
        return [-d - 1]
    if c.op == "==":
        return [d, -d]
    return None


def _as_bound(form: Affine, var: str, allowed: set[str]) -> tuple[str, Affine] | None:
    """``form >= 0`` as ``("lo", b)`` (var >= b) or ``("hi", b)`` (var <= b).

    Only when ``var`` occurs linearly (not inside ``//`` or ``%``) and every
    other name is in ``allowed`` (outer loop variables and sizes).
    """
    c = form.coeff(var)
    if c == 0:
        return None
    rest = form - Affine.var(var, c)
    if var in rest.names() or not set(rest.names()) <= allowed:
        return None
    if c > 0:  # c*v + rest >= 0  <=>  v >= ceil(-rest / c)
        return ("lo", (-rest).ceildiv(c))
    return ("hi", rest.floordiv(-c))  # -|c| v + rest >= 0  <=>  v <= floor(rest / |c|)


def _bounds_for(cond: Cond, var: str, allowed: set[str]) -> tuple[list[Affine], list[Affine]] | None:
    """Bounds on ``var`` equivalent to ``cond``, or None if it is not exactly expressible."""
    if not isinstance(cond, Compare):
        return None
    forms = _nonneg_forms(cond)
    if forms is None:
        return None
    if cond.op == "==" and abs((cond.lhs - cond.rhs).coeff(var)) != 1:
        return None  # 2*v == b also needs b even: keep it as a test
    lo: list[Affine] = []
    hi: list[Affine] = []
    for f in forms:
        b = _as_bound(f, var, allowed)
        if b is None:
            return None
        (lo if b[0] == "lo" else hi).append(b[1])
    return lo, hi


def _zero_guards(e: Expr) -> tuple[list[Cond], Expr]:
    """Peel ``where(c1, where(c2, x, 0), 0)`` into ``([c1, c2], x)``."""
    conds: list[Cond] = []
    while isinstance(e, Where) and is_zero(e.other):
        conds.extend(conjuncts(e.cond))
        e = e.then
    return conds, e


def _add_bound(existing: tuple[Affine, ...], new: list[Affine]) -> tuple[Affine, ...]:
    out = list(existing)
    for b in new:
        if b not in out:
            out.append(b)
    return tuple(out)


@dataclass
class _LoopSpec:
    var: str
    lo: tuple[Affine, ...]
    hi: tuple[Affine, ...]


def _place_conditions(
    loops: list[_LoopSpec], conds: list[Cond], outer: set[str]
) -> tuple[list[_LoopSpec], dict[int, list[Cond]], bool]:
    """Tighten ``loops`` (outermost first) with ``conds``.

    Returns the tightened loops, the remaining tests keyed by the loop depth
    at which all their variables are known (0 = before the first loop), and
    whether any bound was tightened.
    """
    loops = [_LoopSpec(l.var, l.lo, l.hi) for l in loops]
    depth_of = {l.var: d + 1 for d, l in enumerate(loops)}
    tests: dict[int, list[Cond]] = {}
    tightened = False
    for c in conds:
        depth = max((depth_of.get(n, 0) for n in c.names()), default=0)
        placed = False
        if depth > 0:
            loop = loops[depth - 1]
            allowed = outer | {l.var for l in loops[: depth - 1]}
            bounds = _bounds_for(c, loop.var, allowed)
            if bounds is not None:
                loop.lo = _add_bound(loop.lo, bounds[0])
                loop.hi = _add_bound(loop.hi, bounds[1])
                placed = tightened = True
        if not placed:
            tests.setdefault(depth, []).append(c)
    return loops, tests, tightened


def _nest(loops: list[_LoopSpec], tests: dict[int, list[Cond]], inner: list[Stmt]) -> tuple[Stmt, ...]:
    """Build the loop nest, inserting each test at its depth."""
    body: tuple[Stmt, ...] = tuple(inner)
    for depth in range(len(loops), -1, -1):
        cond = make_and(tests.get(depth, []))
        if cond is not None:
            body = (If(cond, body),)
        if depth > 0:
            l = loops[depth - 1]
            body = (For(l.var, l.lo, l.hi, body),)
    return body


# ---------------------------------------------------------------------------
# Expressions -> statements
# ---------------------------------------------------------------------------


class _BodyLowering:
    """Lowers one definition's body; owns its fresh names and let-memo."""

    def __init__(self, definition: Definition, taken: set[str], sizes: set[str], uses: Counter) -> None:
        self.d = definition
        self.taken = taken
        self.sizes = sizes
        self.uses = uses
        self.scopes: list[dict[Expr, Expr]] = [{}]

    def fresh(self, suffix: str) -> str:
        name = fresh_name(f"{self.d.name}_{suffix}", self.taken)
        self.taken.add(name)
        return name

    def lookup(self, e: Expr) -> Expr | None:
        for scope in reversed(self.scopes):
            hit = scope.get(e)
            if hit is not None:
                return hit
        return None

    # The lowering steps are generators run by ``trampoline`` (they yield the
    # steps they would call): a flat sum of many terms is a tree as deep as
    # it is long, too deep for recursion.
    def scoped(self, e: Expr) -> Step:
        """Lower in a new scope: lets made inside are not visible after it."""
        self.scopes.append({})
        try:
            out: list[Stmt] = []
            value = yield self.value(e, out)
            return out, value
        finally:
            self.scopes.pop()

    def value(self, e: Expr, out: list[Stmt]) -> Step:
        hit = self.lookup(e)
        if hit is not None:
            return hit
        v = yield self._value(e, out)
        if self.uses[e] > 1 and isinstance(e, (Unary, Binary)) and not isinstance(v, (Const, Access)):
            name = self.fresh("v")
            out.append(Let(name, v))
            v = Access(name, ())
        self.scopes[-1][e] = v
        return v

    def _value(self, e: Expr, out: list[Stmt]) -> Step:
        if isinstance(e, (Const, Access)):
            return e
        if isinstance(e, Unary):
            return Unary(e.op, (yield self.value(e.operand, out)))
        if isinstance(e, Binary):
            lhs = yield self.value(e.lhs, out)
            rhs = yield self.value(e.rhs, out)
            return Binary(e.op, lhs, rhs)
        if isinstance(e, Call):  # a user function with custom derivatives: from here on, its body
            return (yield self.value(e.value(), out))
        if isinstance(e, Select):  # eager: all four operands are in bounds
            kids = []
            for c in e.children():
                kids.append((yield self.value(c, out)))
            return Select(e.op, *kids)
        if isinstance(e, Where):
            return (yield self.where(e, out))
        if isinstance(e, (Sum, Reduce)):
            return (yield self.sum(e, out))
        if isinstance(e, CSum):
            try:
                lowered = csum_to_sums(e, set(self.taken) | set(all_names(e)))
            except UnboundedSum as exc:
                raise TccError(f"cannot lower '{self.d.name}': {exc}") from None
            return (yield self.value(lowered, out))
        if isinstance(e, MatrixFn):
            raise TccError(f"cannot lower '{self.d.name}': {e} is not element-wise (only a whole definition can be one)")
        raise TypeError(f"cannot lower {type(e).__name__}")

    def where(self, e: Where, out: list[Stmt]) -> Step:
        t_stmts, t = yield self.scoped(e.then)
        o_stmts, o = yield self.scoped(e.other)
        if not t_stmts and not o_stmts:
            return Where(e.cond, t, o)
        name = self.fresh("w")
        out.append(Local(name, Const(0)))
        out.append(If(e.cond, tuple(t_stmts) + (Accumulate(name, (), t),), tuple(o_stmts) + (Accumulate(name, (), o),)))
        return Access(name, ())

    def sum(self, e: Sum | Reduce, out: list[Stmt]) -> Step:
        acc = self.fresh("acc")
        # a max (min) starts at -inf (+inf), written -1.0 / 0.0: the language has no literal for it
        init = Const(0) if isinstance(e, Sum) else Binary("/", Const(-1.0 if e.op == "max" else 1.0), Const(0.0))
        out.append(Local(acc, init))
        yield self.reduce(e, acc, out)
        return Access(acc, ())

    def reduce(self, e: Sum | Reduce, acc: str, out: list[Stmt]) -> Step:
        """Emit the loops adding ``e`` into ``acc`` (``acc = max(acc, ...)`` for a max); directly nested
        reductions of the same kind share it."""
        if not e.has_range:
            raise TccError(f"cannot lower '{self.d.name}': sum over '{e.var}' has no range (run infer-ranges first)")
        # zero guards become loop conditions only in a sum: a max over where(c, v, 0) sees the zeros
        conds, body = _zero_guards(e.body) if isinstance(e, Sum) else ([], e.body)
        same = (lambda n: isinstance(n, Sum)) if isinstance(e, Sum) else (lambda n: isinstance(n, Reduce) and n.op == e.op)
        outer = self.sizes | set(self.loop_vars)
        loops, tests, _ = _place_conditions([_LoopSpec(e.var, e.lo, e.hi)], conds, outer)
        self.loop_vars.append(e.var)
        self.scopes.append({})
        try:
            stmts: list[Stmt] = []
            if same(body) and self.lookup(body) is None:
                yield self.reduce(body, acc, stmts)
            elif isinstance(e, Sum):
                stmts.append(Accumulate(acc, (), (yield self.value(body, stmts))))
            else:
                value = yield self.value(body, stmts)
                stmts.append(Store(acc, (), Binary(e.op, Access(acc, ()), value)))
        finally:
            self.scopes.pop()
            self.loop_vars.pop()
        out.extend(_nest(loops, tests, stmts))

    loop_vars: list[str]


def _use_counts(root: Expr) -> Counter:
    """How many parents each node has in the DAG of ``root``."""
    uses: Counter = Counter()
    for n in postorder(root):
        for c in n.children():
            uses[c] += 1
    return uses


def lower_definition(d: Definition, taken: set[str], sizes: set[str]) -> list[Kernel]:
    """The kernels computing ``d`` (a zero-fill kernel first when its guard tightened the nest)."""
    if d.extents is None:
        raise TccError(f"cannot lower '{d.name}': its extents are unknown (run infer-ranges first)")
    if isinstance(d.body, MatrixFn):
        return [Kernel(d.name, (Extern(d.body.fn, d.name, d.body.args, d.body.transposed, d.body.spec),))]
    idx = [Affine.var(v) for v in d.indices]
    loops = [_LoopSpec(v, (ZERO,), (e - 1,)) for v, e in zip(d.indices, d.extents)]
    conds, body = _zero_guards(d.body)
    loops_t, tests, tightened = _place_conditions(loops, conds, sizes)
    lowering = _BodyLowering(d, taken, sizes, _use_counts(d.body))
    lowering.loop_vars = list(d.indices)
    stmts, v = trampoline(lowering.scoped(body))
    kernels: list[Kernel] = []
    if tightened:
        kernels.append(Kernel(f"{d.name}_fill", _nest(loops, {}, [Store(d.name, tuple(idx), Const(0))])))
        kernels.append(Kernel(d.name, _nest(loops_t, tests, stmts + [Store(d.name, tuple(idx), v)])))
    elif conds:
        # no bound could be tightened: test inside the nest, store 0 otherwise
        inner = (If(make_and(conds), tuple(stmts) + (Store(d.name, tuple(idx), v),), (Store(d.name, tuple(idx), Const(0)),)),)
        kernels.append(Kernel(d.name, _nest(loops, {}, list(inner))))
    else:
        kernels.append(Kernel(d.name, _nest(loops, {}, stmts + [Store(d.name, tuple(idx), v)])))
    return kernels


def lower_program(program: Program) -> LoopProgram:
    sizes = program.sizes()
    size_set = set(sizes)
    taken = program.names_in_use()
    results = set(program.results())
    # index inputs first: L2 prints them on an `index` line before the `input` line, and parses them back in that order
    ordered = sorted(program.inputs, key=lambda i: not i.is_index)
    buffers: list[Buffer] = [Buffer(i.name, i.extents, "input", i.bound, i.derived) for i in ordered]
    kernels: list[Kernel] = []
    for d in program.definitions:
        if d.extents is None:
            raise TccError(f"cannot lower '{d.name}': its extents are unknown (run infer-ranges first)")
        buffers.append(Buffer(d.name, d.extents, "output" if d.name in results else "local"))
        kernels.extend(lower_definition(d, taken, size_set))
    return LoopProgram(sizes, tuple(buffers), tuple(kernels), source=program.source)


@dataclass(frozen=True)
class LowerLoops(Pass):
    """L1 -> L2: one loop nest per definition, guards as bounds or tests."""

    name = "lower-loops"
    level = Level.INDEX
    produces = Level.LOOPS
    summary = "one loop nest per definition; sums become reductions, where-guards tightened loop bounds"

    def run(self, program: Program, ctx: PassContext) -> LoopProgram:
        return lower_program(program)
