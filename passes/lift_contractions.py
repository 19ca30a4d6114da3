"""``lift-contractions``: every contraction worth a GEMM becomes a local definition of its own (issue 35 item 1).

``blas`` matches definitions, and the sums of a definition whose free
indices are the definition's own (its epilogue split).  A contraction
anywhere else stayed a loop nest: under a ``where`` (a causal mask),
inside a user function's inlined body that a derivative program nests in
another sum (``dX[a, c] = sum[z](gelu'(sum[k](X[a, k] * W[z, k]) + b[z]) *
...)``: the inner sum's ``z`` is bound by the outer one), inside a ``max``
reduction, once per definition that repeats it (cosine similarity's
gradients).  This pass brings all of these to one normal form before
``blas`` runs: each such sum

    sum[k1..](c * P[...] * Q[...] ...)        # plain reads, c free of indices

becomes a read ``c * T[v...]`` of a new local

    T[v...] = sum[k1..](P[...] * Q[...] ...)

over the whole extents of the axes its free indices ``v`` read, which
``blas`` then turns into a ``matmul`` (or ``contract``) like any
definition.  The rest of the expression -- the mask, the activation, the
normalisation -- is element-wise work on ``T``.

**What is lifted.**  A ``sum`` (a nest of sums) each over ``0..N - 1``
with ``N`` over sizes, whose summand is a product (``*``, negation, a
division by something free of indices) of two reads and of factors
free of indices; every index of a read is a plain variable, no
variable twice in a read; at least two free index variables (a
matrix-vector product, one free index, is ``blas``'s ``matvec`` where it
stands).  Each free variable reads axes of one extent ``E``; ``T`` is
defined on ``0..E - 1`` there, so every read of ``T``'s own body is in
bounds, and every read of ``T`` is too: it happens exactly where the
original sum was evaluated, where the original reads were in bounds.  A
sum that is a factor of its definition's body over the definition's own
indices is left to ``blas``, which takes the other factors into the
product.

**The normal form.**  The reads are ordered by tensor name; ``T``'s
indices are the variables that several reads share (the batch) in order
of appearance, then the others in order of appearance -- the order
``blas`` wants: batch first, the two sides last.  Two sums that are the
same contraction up to the names of their variables and the order of
their factors are one ``T`` (the derivative program's ``dQ``, ``dK`` and
the forward scores read one ``S_mm``), and a sum equal to an earlier
definition's whole body (over the same extents) reads that definition.

**When not.**  ``T`` computes ``prod(E)`` values; the loops evaluate the
sum only where it stands: over the ranges of the definition's indices
and of the enclosing sums and reductions, and only where the enclosing
``where`` guards hold.  The pass estimates that count (an enclosing range
of constant width counts its width, one bounded by another index half
the axis; a guard ``i == j`` between two of the sum's free indices keeps
``1 / E`` of the points -- a Hessian's block diagonal --, an inequality
between two of them half, one against a constant its share) and lifts
only when ``T`` computes at most ``max-waste`` (default 8, about what a
GEMM gains over the loop nests) times as many values.  A causal mask
(``j <= i``) computes the full product: twice the values, at BLAS speed.
Products below ``min-work`` multiply-adds (constant extents) stay loops,
as in ``blas``.  ``tcc -v`` logs (logger ``tcc.passes.lift_contractions``)
why each sum over a product was not lifted.

The pass runs in the CPU pipeline right before ``blas``.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from tcc.ir.expr import (
    ONE,
    RANGED,
    Access,
    Binary,
    Expr,
    MatrixFn,
    Select,
    Sum,
    Unary,
    Where,
    free_names,
    fresh_name,
    transform,
)
from tcc.ir.index import Affine, And, Compare, Cond, Not, Or, of_sizes
from tcc.ir.program import Definition, Program
from tcc.passes.pass_base import Level, Pass, PassContext

__all__ = ["DEFAULT_MAX_WASTE", "LiftContractions", "lift_program"]

#: the pass's logger: at DEBUG why a sum over a product stayed where it is, at INFO what was lifted
logger = logging.getLogger(__name__)

#: multiply-adds below which a product with constant extents stays loops (blas's min-work)
DEFAULT_MIN_WORK = 32768
#: values the lifted definition may compute per value the loops evaluate
DEFAULT_MAX_WASTE = 8.0


class _Decline(Exception):
    """Why a sum is not lifted (%-format and arguments, built only when logged)."""

    def __init__(self, fmt: str, *args: object) -> None:
        super().__init__(fmt, *args)
        self.fmt, self.fmt_args = fmt, args

    def __str__(self) -> str:
        return self.fmt % self.fmt_args


def _show(e: Expr, limit: int = 70) -> str:
    text = str(e)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _plain(acc: Access) -> tuple[str, ...] | None:
    """The variable names of a read whose indices are distinct plain variables, else ``None``."""
    names = []
    for ix in acc.indices:
        vs = ix.names()
        if len(vs) != 1 or ix != Affine.var(vs[0]):
            return None
        names.append(vs[0])
    return tuple(names) if len(set(names)) == len(names) else None


@dataclass(frozen=True)
class _Contraction:
    """A liftable sum: its nest of summed variables, its reads, and what scales it."""

    summed: tuple[tuple[str, Affine], ...]   # (variable, N) outermost first
    reads: tuple[Access, ...]                # ordered by tensor name (stable): the key's order
    written: tuple[Access, ...]              # as the program writes them: T's body
    scale: tuple[Expr, ...]                  # factors free of indices
    negated: bool
    order: tuple[str, ...]                   # the free variables in T's index order
    extents: tuple[Affine, ...]              # T's extents, one per variable of ``order``

    def key(self) -> tuple:
        """The contraction up to the names of its variables: equal keys are one ``T``."""
        canon = {v: f"f{k}" for k, v in enumerate(self.order)}
        canon.update({v: f"s{k}" for k, (v, _) in enumerate(self.summed)})
        reads = tuple((r.tensor, tuple(canon[ix.names()[0]] for ix in r.indices)) for r in self.reads)
        return reads, tuple(n for _, n in self.summed), self.extents

    def body(self) -> Expr:
        """``sum[k..](P[...] * Q[...] ...)``: ``T``'s body over the variables of ``order``."""
        e: Expr = self.written[0]
        for r in self.written[1:]:
            e = Binary("*", e, r)
        for var, n in reversed(self.summed):
            e = Sum(var, (Affine.constant(0),), (n - 1,), e)
        return e

    def read(self, name: str, axes: tuple[int, ...]) -> Expr:
        """``c * name[...]``: what replaces the sum, ``axes`` the position in ``order`` of each axis."""
        e: Expr = Access(name, tuple(Affine.var(self.order[k]) for k in axes))
        for f in self.scale:
            e = Binary("*", f, e)
        return Unary("neg", e) if self.negated else e


def _factors(e: Expr, sizes: set[str]) -> tuple[list[Expr], bool]:
    """``e`` split at ``*``, negation and division by factors free of indices: (factors, negated)."""
    out: list[Expr] = []
    negated = False
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Binary) and x.op == "*":
            stack += [x.rhs, x.lhs]
        elif isinstance(x, Unary) and x.op == "neg":
            negated = not negated
            stack.append(x.operand)
        elif isinstance(x, Binary) and x.op == "/" and not set(free_names(x.rhs)) - sizes:
            out.append(Binary("/", ONE, x.rhs))
            stack.append(x.lhs)
        else:
            out.append(x)
    return out, negated


def _peel(s: Sum, sizes: set[str]) -> tuple[list[tuple[str, Affine]], Expr]:
    """The summed variables of a nest of sums over ``0..N - 1`` (``N`` over sizes) and its summand."""
    summed: list[tuple[str, Affine]] = []
    body: Expr = s
    while isinstance(body, Sum):
        if body.lo != (Affine.constant(0),) or len(body.hi) != 1 or not of_sizes(body.hi[0], sizes):
            raise _Decline("sum[%s]'s range is not 0..N - 1 with N over sizes", body.var)
        if body.var in dict(summed):
            raise _Decline("sum[%s] is nested in a sum over the same name", body.var)
        summed.append((body.var, body.hi[0] + 1))
        body = body.body
    return summed, body


def _index_order(reads: list[Access], summed: set[str]) -> tuple[str, ...]:
    """``T``'s indices: the free variables several reads share, then the others, each in order of appearance."""
    seen: list[str] = []
    count: dict[str, int] = {}
    for r in reads:
        for v in dict.fromkeys(ix.names()[0] for ix in r.indices):
            if v not in summed:
                count[v] = count.get(v, 0) + 1
                if v not in seen:
                    seen.append(v)
    return tuple(v for v in seen if count[v] > 1) + tuple(v for v in seen if count[v] == 1)


def contraction_of(s: Sum, program: Program, sizes: set[str]) -> _Contraction:
    """``s`` as a liftable contraction, or :class:`_Decline` with the reason."""
    summed, summand = _peel(s, sizes)
    factors, negated = _factors(summand, sizes)
    reads: list[Access] = []
    scale: list[Expr] = []
    for f in factors:
        if not set(free_names(f)) - sizes:
            scale.append(f)
        elif isinstance(f, Access) and _plain(f) is not None and program.extents_of(f.tensor) is not None:
            reads.append(f)
        else:
            raise _Decline("the factor %s is neither a plain read nor free of indices", _show(f, 40))
    if len(reads) != 2:
        raise _Decline("%d reads, not two (contract-order pairs longer products)", len(reads))
    written = tuple(reads)
    reads.sort(key=lambda r: r.tensor)
    inner = {v for v, _ in summed}
    order = _index_order(reads, inner)
    if len(order) < 2:
        raise _Decline("%d free index: not a matrix product", len(order))
    axis: dict[str, Affine] = {}
    for r in reads:
        for ix, e in zip(r.indices, program.extents_of(r.tensor) or ()):
            v = ix.names()[0]
            if axis.setdefault(v, e) != e:
                raise _Decline("%s reads axes of extents %s and %s", v, axis[v], e)
    if inner - set(axis):
        raise _Decline("a summed variable is read by no factor")
    extents = tuple(axis[v] for v in order)
    return _Contraction(tuple(summed), tuple(reads), written, tuple(scale), negated, order, extents)


# --------------------------------------------------------------------------
# how many values the loops evaluate where the sum stands
# --------------------------------------------------------------------------
def _const(e: Affine) -> int | None:
    return e.const if e.is_constant else None


def _range_size(lo: tuple[Affine, ...], hi: tuple[Affine, ...], full: float, sizes: set[str]) -> float:
    """Values an enclosing range visits: a constant width, its constant bounds, else half the axis
    (``0..i``) or the whole of it (bounds over sizes)."""
    widths = [_const(h - lo_) for lo_ in lo for h in hi]
    known = [w + 1 for w in widths if w is not None]
    if known:
        return float(max(min(known), 0))
    if all(of_sizes(b, sizes) for b in lo + hi):
        return full
    return full / 2


def _fraction(cond: Cond, size: dict[str, float], free: set[str], sizes: set[str]) -> float:
    """The share of the sum's points (over its free variables) where ``cond`` holds, estimated."""
    if isinstance(cond, And):
        return math.prod(_fraction(p, size, free, sizes) for p in cond.parts)
    if isinstance(cond, Or):
        return min(1.0, sum(_fraction(p, size, free, sizes) for p in cond.parts))
    if isinstance(cond, Not):
        return max(1.0 - _fraction(cond.part, size, free, sizes), 0.5)
    if not isinstance(cond, Compare):
        return 1.0
    names = set(cond.names()) - sizes
    if not names or not names <= free:
        return 1.0  # a guard on another variable selects among evaluations of the same values
    if cond.op == "==":
        return 1.0 / max(max(size.get(v, 1.0) for v in names), 1.0)
    if cond.op == "!=":
        return 1.0
    if len(names) == 1:
        (v,) = names
        diff = cond.lhs - cond.rhs if cond.op in ("<", "<=") else cond.rhs - cond.lhs  # diff <(=) 0
        strict = int(cond.op in ("<", ">"))
        terms = dict(diff.terms)
        n = size.get(v, 0.0)
        if len(terms) == 1 and abs(terms.get(v, 0)) == 1 and n > 0:
            if terms[v] == 1:  # v <= -const - strict
                inside = -diff.const - strict + 1
            else:  # v >= const + strict
                inside = n - (diff.const + strict)
            return min(max(float(inside), 0.0), n) / n
    return 0.5


@dataclass(frozen=True)
class _Scope:
    """Where a node stands: the ranges of the variables in scope and the guards that hold."""

    ranges: tuple[tuple[str, tuple[Affine, ...], tuple[Affine, ...]], ...]
    guards: tuple[Cond, ...]

    def inner(self, node: Expr, child: Expr) -> "_Scope":
        if isinstance(node, RANGED):
            return _Scope(self.ranges + ((node.var, node.lo, node.hi),), self.guards)
        if isinstance(node, Where):
            cond = node.cond if child is node.then else Not(node.cond)
            return _Scope(self.ranges, self.guards + (cond,))
        return self


def _evaluated(c: _Contraction, scope: _Scope, sizes: set[str]) -> float:
    """Values of the sum the loops evaluate where it stands (over its free variables)."""
    full = {v: float(e.const) if e.is_constant else 4096.0 for v, e in zip(c.order, c.extents)}
    size: dict[str, float] = {}
    for var, lo, hi in scope.ranges:  # innermost last: it shadows
        if var in full:
            size[var] = min(_range_size(lo, hi, full[var], sizes), full[var])
    every = {v: size.get(v, full[v]) for v in c.order}
    points = math.prod(every.values())
    for g in scope.guards:
        points *= _fraction(g, every, set(c.order), sizes)
    return points


# --------------------------------------------------------------------------
# the rewrite
# --------------------------------------------------------------------------
class Lifter:
    """Lifts the contractions of one program's definitions, in order (see the module docstring)."""

    def __init__(self, program: Program, min_work: int, max_waste: float) -> None:
        self.program = program
        self.min_work = min_work
        self.max_waste = max_waste
        self.sizes = set(program.sizes())
        self.taken = program.names_in_use()
        # contraction key -> (definition, position in the contraction's order of each of its axes)
        self.defined: dict[tuple, tuple[str, tuple[int, ...]]] = {}

    def whole_body(self, d: Definition, s: Sum) -> bool:
        """Whether ``s`` is a factor of ``d``'s body over ``d``'s own indices: ``blas`` takes the other
        factors into the product (``u[i] * sum[z](...) * v[j]``), or splits the sum out itself."""
        factors, _ = _factors(d.body, self.sizes)
        return s in factors and set(free_names(s)) - self.sizes == set(d.indices)

    def register(self, d: Definition) -> None:
        """An existing definition ``D[v...] = sum[..](P * Q)`` over the contraction's extents: later
        sums equal to its body read it."""
        if not isinstance(d.body, Sum) or d.extents is None:
            return
        try:
            c = contraction_of(d.body, self.program, self.sizes)
        except _Decline:
            return
        if c.scale or c.negated or set(c.order) != set(d.indices):
            return
        axes = tuple(c.order.index(v) for v in d.indices)
        if tuple(c.extents[k] for k in axes) == tuple(d.extents):
            self.defined.setdefault(c.key(), (d.name, axes))

    def worth(self, d: Definition, c: _Contraction, scope: _Scope) -> None:
        """Raise :class:`_Decline` when the lifted product is tiny or computes too much."""
        work = [e for e in c.extents] + [n for _, n in c.summed]
        if all(e.is_constant for e in work) and math.prod(e.const for e in work) < self.min_work:
            raise _Decline("tiny: %d multiply-adds < min-work %d", math.prod(e.const for e in work), self.min_work)
        full = math.prod(float(e.const) if e.is_constant else 4096.0 for e in c.extents)
        used = _evaluated(c, scope, self.sizes)
        if used <= 0 or full / used > self.max_waste:
            raise _Decline("it would compute %.0f values where the loops evaluate about %.0f "
                           "(max-waste %g)", full, used, self.max_waste)

    def rewrite(self, d: Definition) -> list[Definition]:
        """``[d]``, or the new definitions ``T`` followed by ``d`` reading them."""
        if d.extents is None or isinstance(d.body, MatrixFn):
            return [d]
        out: list[Definition] = []
        mapping: dict[Expr, Expr] = {}
        top = _Scope(tuple((v, (Affine.constant(0),), (e - 1,)) for v, e in zip(d.indices, d.extents)), ())
        stack: list[tuple[Expr, _Scope]] = [(d.body, top)]
        seen: set[Expr] = set()
        parents: dict[Expr, list[Expr]] = {}  # a sum nested right in a sum is part of that nest's contraction
        while stack:
            e, scope = stack.pop()
            if e in seen:
                continue
            seen.add(e)
            nested = isinstance(e, Sum) and any(isinstance(n, Sum) and n.body is e for n in parents.get(e, ()))
            if isinstance(e, Sum) and not nested and not self.whole_body(d, e):
                lifted = self.lift(d, e, scope, out)
                if lifted is not None:
                    mapping[e] = lifted
                    continue
            for k in reversed(e.children()):
                parents.setdefault(k, []).append(e)
                stack.append((k, scope.inner(e, k)))
        self.register(d)
        if not mapping:
            return [d]
        logger.info("%s: reads %s", d.name, ", ".join(sorted({n.tensor for e in mapping.values() for n in _reads(e)})))
        return out + [d.with_body(transform(d.body, lambda n: mapping.get(n, n)))]

    def lift(self, d: Definition, s: Sum, scope: _Scope, out: list[Definition]) -> Expr | None:
        """The read that replaces ``s`` (defining ``T`` into ``out`` when it is new), or ``None``."""
        try:
            c = contraction_of(s, self.program, self.sizes)
            if set(free_names(s)) - self.sizes - set(c.order):
                raise _Decline("it depends on %s outside its reads", ", ".join(
                    sorted(set(free_names(s)) - self.sizes - set(c.order))))
            bound = {v for v, _, _ in scope.ranges}
            if set(c.order) - bound:
                raise _Decline("%s has no range here", ", ".join(sorted(set(c.order) - bound)))
            found = self.defined.get(c.key())
            if found is None:
                self.worth(d, c, scope)
        except _Decline as why:
            if isinstance(s.body, Binary) or isinstance(s.body, Sum):  # a sum over a product: say why
                logger.debug("%s: %s not lifted: %s", d.name, _show(s), why)
            return None
        if found is None:
            name = fresh_name(f"{d.name}_mm", self.taken)
            self.taken.add(name)
            axes = _layout(c, d.indices)
            found = self.defined[c.key()] = (name, axes)
            out.append(Definition(name, tuple(c.order[k] for k in axes), c.body(),
                                  tuple(c.extents[k] for k in axes), d.loc))
        return c.read(*found)


def _reads(e: Expr) -> list[Access]:
    """The reads in a lifted sum's replacement (``c * T[...]``)."""
    while isinstance(e, (Unary, Binary)):
        e = e.operand if isinstance(e, Unary) else e.rhs
    return [e] if isinstance(e, Access) else []


def _layout(c: _Contraction, indices: tuple[str, ...]) -> tuple[int, ...]:
    """``T``'s axes as positions in ``c.order``: the batch (variables several reads share) first,
    then the others in the order of the definition's indices (then as they appear), so that the
    definition that first reads ``T`` reads it as stored."""
    shared = {v for v in c.order if sum(v in {ix.names()[0] for ix in r.indices} for r in c.reads) > 1}
    rest = [k for k, v in enumerate(c.order) if v not in shared]
    rest.sort(key=lambda k: (indices.index(c.order[k]) if c.order[k] in indices else len(indices), k))
    return tuple(k for k, v in enumerate(c.order) if v in shared) + tuple(rest)


def lift_program(program: Program, min_work: int = DEFAULT_MIN_WORK, max_waste: float = DEFAULT_MAX_WASTE) -> Program:
    """Every contraction worth a GEMM lifted into a local definition (see the module docstring)."""
    return program.expand_definitions(Lifter(program, min_work, max_waste).rewrite)


@dataclass(frozen=True)
class LiftContractions(Pass):
    """Sums over products of plain reads, wherever they stand, become local definitions that ``blas`` matches."""

    name = "lift-contractions"
    level = Level.INDEX
    summary = ("every contraction worth a GEMM (a sum over plain reads, under a where, a user function, "
               "an outer sum or reduction) becomes a local definition of its own, for blas")

    # multiply-adds below which a product with constant extents stays loops
    min_work: int = DEFAULT_MIN_WORK
    # values the lifted definition may compute per value the loops evaluate
    max_waste: float = DEFAULT_MAX_WASTE

    def run(self, program: Program, ctx: PassContext) -> Program:
        return lift_program(program, self.min_work, self.max_waste)
