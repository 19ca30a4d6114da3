"""``simplify``: fold constants, prune zeros and ones, decide conditions, drop dead definitions.

Two kinds of rewriting happen here:

* context-free folding (``2 - 1`` -> ``1``, ``x**1`` -> ``x``, ``x * 0`` -> ``0``,
  ``--x`` -> ``x``, ``where(c, a, a)`` -> ``a``) — the paper's output
  deliberately skipped this step (sec. 6), a compiler must not;
* folding *with facts*: at each position the index ranges, enclosing sum
  ranges and ``where`` guards are known, so a condition that the facts imply is
  dropped, one they refute selects the other branch, a sum whose range is
  provably empty is 0, a sum with a single point is substituted, and a sum over
  a Kronecker delta ``sum[k](where(k == e, body, 0))`` becomes
  ``where(lo <= e <= hi, body[k := e], 0)``.  Every decision is a proof by
  Fourier–Motzkin (:class:`tcc.ir.polyhedra.Facts`), never a guess.

Floating-point note: ``x * 0 -> 0`` assumes finite ``x``, as symbolic algebra
systems do.
"""
from __future__ import annotations

import logging
import math
import weakref
from dataclasses import dataclass

from tcc.ir.expr import (
    ONE,
    ZERO,
    Binary,
    Const,
    CSum,
    Expr,
    MatrixFn,
    Step,
    Sum,
    Unary,
    Where,
    is_guard,
    is_one,
    is_zero,
    postorder,
    rebuild,
    trampoline,
    transform,
)
from tcc.ir.graph import live_definitions
from tcc.ir.substitution import substitute
from tcc.ir.index import Affine, Compare, Cond, FloorDiv, Lookup, Mod, conjuncts, make_and, negate
from tcc.ir.constrained_sums import rewrite_indices
from tcc.ir.polyhedra import Facts, definition_facts, program_facts
from tcc.ir.program import Program
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# context-free folding of one node whose children are already folded
# ---------------------------------------------------------------------------


def _const_binary(op: str, a: int | float, b: int | float) -> Expr | None:
    try:
        if op == "+":
            r = a + b
        elif op == "-":
            r = a - b
        elif op == "*":
            r = a * b
        elif op == "/":
            if b == 0:
                return None
            if isinstance(a, int) and isinstance(b, int) and a % b == 0:
                r = a // b
            else:
                r = a / b
        elif op == "**":
            # b < 53 unless |a| <= 1: never compute a power of millions of digits to compare it
            if isinstance(a, int) and isinstance(b, int) and 0 <= b and (abs(a) <= 1 or b < 53) and abs(a) ** b < 2**53:
                r = a**b
            else:
                return None
        else:
            return None
    except (OverflowError, ZeroDivisionError):
        return None
    if isinstance(r, complex) or not _finite(r):
        return None
    return Const(r)


def _finite(value: int | float) -> bool:
    """Whether a folded constant is a finite float64, as every literal is (the lexer refuses others):
    an int past float range would print as a literal that does not parse, and no backend converts it."""
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond float range
        return False


#: Number of ``Const`` factors on the left spine of a ``*`` node (``x * 3 * y * 2`` has 2).
#: Keyed weakly by the (hash-consed, immutable) node, so it never outlives the IR.
_SPINE_CONSTS: "weakref.WeakKeyDictionary[Expr, int]" = weakref.WeakKeyDictionary()


def _spine_consts(n: Binary) -> int:
    """How many factors of the left-nested product chain ``n`` are constants, memoised.

    ``fold`` runs bottom-up, so at a ``*`` node its left operand's count is
    usually known already and the answer costs O(1); without it,
    :func:`_merge_constant_factors` walked the whole chain at every node of it,
    which is quadratic in the length of a long product.
    """
    memo = _SPINE_CONSTS
    spine: list[Binary] = []
    node: Expr = n
    while isinstance(node, Binary) and node.op == "*" and node not in memo:
        spine.append(node)
        node = node.lhs
    if isinstance(node, Binary) and node.op == "*":
        count = memo[node]
    else:
        count = 1 if isinstance(node, Const) else 0
    for b in reversed(spine):
        count += 1 if isinstance(b.rhs, Const) else 0
        memo[b] = count
    return count


def _merge_constant_factors(n: Binary) -> Expr:
    """``x * 3 * 2 * y`` -> ``x * 6 * y``: multiply the constants of a left-nested product chain."""
    if _spine_consts(n) < 2:
        return n  # nothing to merge: skip collecting the chain (linear, not quadratic, over a long product)
    factors: list[Expr] = []
    node: Expr = n
    while isinstance(node, Binary) and node.op == "*":
        factors.append(node.rhs)
        node = node.lhs
    factors.append(node)
    factors.reverse()
    consts = [i for i, f in enumerate(factors) if isinstance(f, Const)]
    if len(consts) < 2:
        return n
    value: int | float = 1
    try:
        for i in consts:
            value = value * factors[i].value  # type: ignore[union-attr]
    except OverflowError:  # an int product past float range, times a float
        return n
    if not _finite(value):
        return n
    kept = [f for i, f in enumerate(factors) if i not in consts[1:]]
    kept[consts[0]] = Const(value)
    out = kept[0]
    for f in kept[1:]:
        out = Binary("*", out, f)
    return fold(out)


def fold(n: Expr) -> Expr:
    """One local rewrite at ``n`` (its children are already folded).

    Zero-guards are lifted over ``neg``, ``*`` and the numerator of ``/``:
    ``where(c, a, 0) * b`` becomes ``where(c, a * b, 0)``.  The value is the
    same, but now ``b``'s reads are under the guard too -- a second-order
    derivative multiplies guarded adjoints by reads that are only in bounds
    where the guard holds, and compiled code must not execute them elsewhere.
    """
    if isinstance(n, Unary):
        return _fold_unary(n)
    if isinstance(n, Binary):
        return _fold_binary(n)
    if isinstance(n, Where):
        return _fold_where(n)
    if isinstance(n, (Sum, CSum)):
        if is_zero(n.children()[0]):
            return ZERO
        return n
    return n


def _fold_unary(n: Unary) -> Expr:
    u = n.operand
    if n.op == "neg":
        if isinstance(u, Unary) and u.op == "neg":
            return u.operand
        if isinstance(u, Const):
            return Const(-u.value)
        if is_guard(u):
            return fold(Where(u.cond, fold(Unary("neg", u.then)), ZERO))
    return n


def _fold_binary(n: Binary) -> Expr:
    """Lift zero-guards, fold two constants, and drop identities (``x + 0``, ``1 * x``, ``x ** 1``, ...)."""
    a, b = n.lhs, n.rhs
    if n.op in ("*", "/") and is_guard(a) and not is_zero(b):
        return fold(Where(a.cond, fold(Binary(n.op, a.then, b)), ZERO))
    if n.op == "*" and is_guard(b) and not is_zero(a):
        return fold(Where(b.cond, fold(Binary("*", a, b.then)), ZERO))
    if n.op in ("+", "-") and is_guard(a) and is_guard(b) and a.cond == b.cond:
        return fold(Where(a.cond, fold(Binary(n.op, a.then, b.then)), ZERO))
    if isinstance(a, Const) and isinstance(b, Const):
        r = _const_binary(n.op, a.value, b.value)
        if r is not None:
            return r
    op = n.op
    if op == "+":
        if is_zero(a):
            return b
        if is_zero(b):
            return a
        if a is b:  # hash-consed: the same subexpression twice (e.g. d(x*x)/dx)
            return Binary("*", Const(2), a)
    elif op == "-":
        if is_zero(b):
            return a
        if is_zero(a):
            return fold(Unary("neg", b))
    elif op == "*":
        if is_zero(a) or is_zero(b):
            return ZERO
        merged = _merge_constant_factors(n)
        if merged is not n:
            return merged
        if is_one(a):
            return b
        if is_one(b):
            return a
        if isinstance(a, Const) and a.value == -1:
            return fold(Unary("neg", b))
        if isinstance(b, Const) and b.value == -1:
            return fold(Unary("neg", a))
    elif op == "/":
        if is_zero(a):
            return ZERO
        if is_one(b):
            return a
    elif op == "**":
        if is_one(b):
            return a
        if is_zero(b):
            return ONE
    return n


def _fold_where(n: Where) -> Expr:
    if n.then is n.other:
        return n.then
    if isinstance(n.then, Where) and is_zero(n.other) and is_zero(n.then.other) and not _reads_through_entries(n.then.cond):
        cond = make_and([n.cond, n.then.cond])
        return Where(cond, n.then.then, ZERO) if cond is not None else n.then.then
    return n


def _reads_through_entries(c: Cond) -> bool:
    """Whether ``c`` reads an index array at a position that is itself an entry (``ptr[ptr_row[k] + 1]``).

    Such a read is in bounds only under the outer guard on the entry (``ptr_row[k] <= m - 1``, from
    the inverse-index pass), and a guard is a fact for its branch, not for the other conditions of
    one conjunction: the two ``where``s stay nested.
    """
    return any(isinstance(a, Lookup) for b in _cond_affines(c) for lk, _ in b.terms if isinstance(lk, Lookup)
               for ix in lk.indices for a, _ in ix.terms)


def _cond_affines(c: Cond) -> list[Affine]:
    if isinstance(c, Compare):
        return [c.lhs, c.rhs]
    return [b for p in getattr(c, "parts", (getattr(c, "part", None),)) if p is not None for b in _cond_affines(p)]


def _use_divisibility(e: Expr, cond: Cond) -> Expr:
    """Under a guard ``x % d == 0`` rewrite ``d*k*(x // d)`` to ``k*x`` and ``x % d`` to 0.

    index-solve writes the integral solution of ``A·α = β`` as ``β // s`` under
    ``β % s == 0``; substituted back, indices like ``x[2*(b // 2)]`` are just
    ``x[b]`` where the guard holds.
    """
    divisible: list[tuple[Affine, int]] = []
    for p in conjuncts(cond):
        if isinstance(p, Compare) and p.op == "==":
            diff = p.lhs - p.rhs
            if len(diff.terms) == 1 and diff.const == 0 and isinstance(diff.terms[0][0], Mod):
                m = diff.terms[0][0]
                divisible.append((m.num, m.den))
    if not divisible:
        return e

    def rewrite(a: Affine) -> Affine:
        out = Affine.constant(a.const)
        for atom, c in a.terms:
            done = False
            for num, d in divisible:
                if isinstance(atom, FloorDiv) and atom.num == num and atom.den == d and c % d == 0:
                    out = out + num * (c // d)
                    done = True
                elif isinstance(atom, Mod) and atom.num == num and atom.den == d:
                    done = True
                if done:
                    break
            if not done:
                out = out + Affine.of([(atom, c)])
        return out

    return rewrite_indices(e, rewrite)


def fold_all(e: Expr) -> Expr:
    return transform(e, fold)


# ---------------------------------------------------------------------------
# folding with facts
# ---------------------------------------------------------------------------


def _const_cond(c: Cond) -> bool | None:
    if isinstance(c, Compare) and c.lhs.is_constant and c.rhs.is_constant:
        return bool(c.evaluate({}))
    return None


def _delta_point(var: str, body: Expr) -> tuple[Affine, list[Cond]] | None:
    """``where(var == point and rest, e, 0)`` (unit coefficient): the point and the other conjuncts there."""
    if not (isinstance(body, Where) and is_zero(body.other)):
        return None
    for part in conjuncts(body.cond):
        if not (isinstance(part, Compare) and part.op == "=="):
            continue
        diff = part.lhs - part.rhs
        c = diff.coeff(var)
        if abs(c) != 1 or var in (diff - Affine.var(var, c)).names():
            continue
        point = (Affine.var(var, c) - diff) * c  # var = point
        return point, [p.substitute({var: point}) for p in conjuncts(body.cond) if p is not part]
    return None


class _Simplifier:
    # The caches are keyed by id() and also hold the key node: simplify builds
    # and drops temporary nodes (at_point, lifted guards), and a dropped node's
    # id may be reused by another node, which would then hit its entry.
    def __init__(self) -> None:
        self.memo: dict = {}
        self.context_free: dict[int, tuple[Expr, Expr]] = {}
        self.needs_facts: dict[int, tuple[Expr, bool]] = {}

    def needs(self, e: Expr) -> bool:
        """Whether facts can change ``e``: it holds a where or a sum."""
        hit = self.needs_facts.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        for node in postorder(e):  # bottom-up, not recursive: long sums are deep trees
            known = self.needs_facts.get(id(node))
            if known is None or known[0] is not node:
                value = isinstance(node, (Where, Sum, CSum)) or any(
                    self.needs_facts[id(c)][1] for c in node.children()
                )
                self.needs_facts[id(node)] = (node, value)
        return self.needs_facts[id(e)][1]

    # ``expr``, ``_expr``, ``sum`` and ``at_point`` are steps for
    # ``trampoline``: they yield where they would recurse, since a long sum
    # is a tree as deep as it is long.
    def expr(self, e: Expr, facts: Facts) -> Step:
        if not self.needs(e):
            hit = self.context_free.get(id(e))
            if hit is None or hit[0] is not e:
                hit = (e, fold_all(e))
                self.context_free[id(e)] = hit
            return hit[1]
        key = (id(e), facts.rows)
        got = self.memo.get(key)
        if got is not None and got[0] is e:
            return got[1]
        out = yield self._expr(e, facts)
        self.memo[key] = (e, out)
        return out

    def cond(self, c: Cond, facts: Facts) -> Cond | bool:
        """Simplified condition, or True/False when decided."""
        parts: list[Cond] = []
        for p in conjuncts(c):
            k = _const_cond(p)
            if k is True:
                continue
            if k is False:
                return False
            if facts.implies(p):
                continue
            if facts.refutes(p):
                return False
            parts.append(p)
        # drop conjuncts that the others imply (x >= 1 and x - 1 >= 1 -> x - 1 >= 1)
        for p in list(parts):
            others = [q for q in parts if q is not p]
            if others and facts.with_cond(make_and(others)).implies(p):
                parts.remove(p)
        out = make_and(parts)
        if out is None:
            return True
        if facts.refutes(out):
            return False
        return out

    def _expr(self, e: Expr, facts: Facts) -> Step:
        if isinstance(e, Where):
            c = self.cond(e.cond, facts)
            if c is True:
                return (yield self.expr(e.then, facts))
            if c is False:
                return (yield self.expr(e.other, facts))
            then = yield self.expr(_use_divisibility(e.then, c), facts.with_cond(c))
            other = yield self.expr(e.other, facts.with_cond(negate(c)))
            return fold(Where(c, then, other))
        if isinstance(e, Sum):
            return (yield self.sum(e, facts))
        if isinstance(e, CSum):
            inner = facts
            for c in e.constraints:
                inner = inner.with_cond(c)
            if not inner.consistent():
                return ZERO
            return fold(CSum(e.vars, e.constraints, (yield self.expr(e.body, inner))))
        kids = e.children()
        new_kids = []
        for k in kids:
            new_kids.append((yield self.expr(k, facts)))
        new = tuple(new_kids)
        return fold(rebuild(e, new) if new != kids else e)

    def sum(self, e: Sum, facts: Facts) -> Step:
        if not e.has_range:
            return fold(Sum(e.var, e.lo, e.hi, (yield self.expr(e.body, facts))))
        inner = facts.with_range(e.var, e.lo, e.hi)
        # cheap interval tests first: most ranges are plainly non-empty and wider than a point
        pairs = [(lo_, hi_) for lo_ in e.lo for hi_ in e.hi]
        nonempty = all(facts.decide_quickly(Compare("<=", a, b)) is True for a, b in pairs)
        wide = all(facts.decide_quickly(Compare("<", a, b)) is True for a, b in pairs)
        if not nonempty and not inner.consistent():
            return ZERO
        lo = self.prune_bounds(e.lo, facts, lower=True)
        hi = self.prune_bounds(e.hi, facts, lower=False)
        v = Affine.var(e.var)
        # a single point: substitute it
        for cand in () if wide else lo:
            if inner.implies(Compare("==", v, cand)):
                return (yield self.at_point(e.var, e.body, cand, [], lo, hi, facts))
        # a Kronecker delta on the summation index
        body = e.body
        delta = _delta_point(e.var, body)
        if delta is not None:
            return (yield self.at_point(e.var, body.then, delta[0], delta[1], lo, hi, facts))
        new_body = yield self.expr(body, inner)
        delta = _delta_point(e.var, new_body)  # a guard that folding made visible (where(..) * y)
        if delta is not None:
            return (yield self.at_point(e.var, new_body.then, delta[0], delta[1], lo, hi, facts))
        if is_guard(new_body):
            # a guard that does not depend on the summation index goes outside the sum
            # (a Jacobian's where(i == g, ..) must not be tested once per term)
            outer = [p for p in conjuncts(new_body.cond) if e.var not in p.names()]
            if outer:
                rest = make_and([p for p in conjuncts(new_body.cond) if e.var in p.names()])
                then = new_body.then if rest is None else Where(rest, new_body.then, ZERO)
                cond = make_and(outer)
                assert cond is not None
                return (yield self.expr(Where(cond, Sum(e.var, lo, hi, then), ZERO), facts))
        return fold(Sum(e.var, lo, hi, new_body))

    def at_point(
        self, var: str, body: Expr, point: Affine, extra: list[Cond], lo: tuple[Affine, ...], hi: tuple[Affine, ...], facts: Facts
    ) -> Step:
        """A sum whose only possible point is ``point``: the body there, if the range holds it."""
        cond = make_and(
            [Compare("<=", b, point) for b in lo if b != point] + [Compare("<=", point, b) for b in hi if b != point] + extra
        )
        sub = substitute(body, {var: point})
        return (yield self.expr(Where(cond, sub, ZERO) if cond is not None else sub, facts))

    def prune_bounds(self, bounds: tuple[Affine, ...], facts: Facts, lower: bool) -> tuple[Affine, ...]:
        """Drop candidates of a max (lower) / min (upper) that another candidate dominates."""
        kept = list(dict.fromkeys(bounds))
        for b in list(kept):
            others = [o for o in kept if o is not b]
            if lower and any(facts.entails_ge(o, b) for o in others):
                kept.remove(b)
            elif not lower and any(facts.entails_ge(b, o) for o in others):
                kept.remove(b)
        return tuple(kept)


def remove_dead(program: Program) -> Program:
    """Keep the results and what they read, transitively (a matrix function reads its argument):
    the results' ancestors in the definition graph (:func:`tcc.ir.graph.live_definitions`)."""
    live = live_definitions(program)
    return program.with_definitions(d for d in program.definitions if d.name in live)


def simplify_program(program: Program) -> Program:
    s = _Simplifier()
    sizes = program.sizes()
    defs = []
    for d in program.definitions:
        if isinstance(d.body, MatrixFn):  # a whole-matrix function: nothing to fold, never inlined
            defs.append(d)
            continue
        facts = (definition_facts(sizes, d.indices, d.extents, program.assumptions) if d.extents is not None
                 else program_facts(sizes, program.assumptions))
        defs.append(d.with_body(trampoline(s.expr(d.body, facts))))
    return remove_dead(program.with_definitions(defs))


@dataclass(frozen=True)
class Simplify(Pass):
    name = "simplify"
    level = Level.INDEX
    summary = "fold constants, prune zero/one, decide conditions by proof, eliminate deltas, drop dead definitions"

    def run(self, program: Program, ctx: PassContext) -> Program:
        return simplify_program(program)
