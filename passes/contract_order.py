"""``contract-order``: a sum over a product of three or more factors becomes pairwise contractions in the cheapest order.

A definition such as

    T[i, j, l] = sum[p: 0..n - 1, q: 0..n - 1](A[i, p, q] * B[p, j] * C[q, l])

runs, as written, one loop nest over all five indices: O(n^5).  Summing ``q``
first and ``p`` afterwards costs O(n^4):

    local T_ctr[n, n, n]
    T_ctr[i, p, l] = sum[q: 0..n - 1](A[i, p, q] * C[q, l])
    T[i, j, l] = sum[p: 0..n - 1](T_ctr[i, p, l] * B[p, j])

The order is chosen by a dynamic program over the contraction graph
(``opt_einsum``'s ``DynamicProgramming``, which minimises FLOPs, the size of
the intermediates, or a combination -- option ``minimize``), with each
index's extent evaluated at compile time and symbolic sizes replaced by
``symbolic-size``.  The order is decided once, at compile time: re-deciding
it when the call's sizes would change the answer is not done.

**What is a candidate.**  A ``sum`` (a chain ``sum[p](sum[q](...))`` counts as
one sum over ``p, q``) that is reached from the definition's root through
arithmetic only -- not under a ``where``, another ``sum`` or a constrained
sum -- whose summand is a product (``*``, negation, and ``/`` split as ``x *
(1 / y)``) of factors such that

* every summation range is a full range ``0..N - 1`` with ``N`` over sizes
  only and ``N >= 0`` provable, and every summation variable occurs in some
  factor;
* the sum's free indices are indices of the definition (so each has the
  definition's extent);
* no factor contains a ``sum``, a constrained sum or a ``where`` (guarded
  products are the delta forms whose loops ``lower-loops`` tightens; a dense
  order would be slower), and at least three factors depend on an index.

Any other factor is a tensor over the indices it mentions: a plain read
``B[p, j]``, an affine read ``d[i + k]``, ``exp(x[i, p])``.  Every
intermediate is evaluated over a box of indices that the original sum visits
too, so each factor is evaluated at most as often as before and every access
stays in bounds.  Factors on no index (constants, scalar tensors, sizes) and a
negation stay in the last contraction.

**When it rewrites.**  Only when the chosen order has at least two steps and
costs at least ``min-gain`` (2) times fewer FLOPs (by ``opt_einsum``'s count)
than the written one -- so ``x[i] * A[i, j] * x[j]``, whose written nest
``hoist`` already factors, stays -- and, with
constant extents only, the written sum does at least ``min-work``
multiply-adds.

**What it makes.**  Each step except the last that sums over an index
becomes a new ``local`` definition ``<D>_ctr`` (fresh names as ``blas``
makes them, placed right before ``D``); a step that sums over nothing (an
element-wise product, which the dynamic program may schedule on its own) is
not stored but read inline by the next step.  An intermediate's indices are
the ones later steps still need, in the order they are first written in its
factors -- the storage order of its operands, so ``A[i, p, q] * C[q, l]``
gives ``T_ctr[i, p, l]``, a GEMM-shaped product.  The last step replaces the
sum in place.  The result is again a program of the language: it prints,
parses back and runs in the interpreter.  ``blas``, which runs after this
pass in the CPU pipeline, turns the two-index intermediates that are matrix
products into ``matmul`` calls.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from opt_einsum.helpers import flop_count
from opt_einsum.paths import DynamicProgramming

from tcc.ir.expr import (
    ONE,
    Access,
    Binary,
    CSum,
    Expr,
    MatrixFn,
    Sum,
    Unary,
    Where,
    free_names,
    fresh_name,
    postorder,
    transform,
)
from tcc.ir.index import Affine, Compare
from tcc.ir.polyhedra import Facts, program_facts
from tcc.ir.program import Definition, Program
from tcc.passes.pass_base import Level, Pass, PassContext

__all__ = ["ContractOrder", "contract_order_program", "DEFAULT_MIN_GAIN", "DEFAULT_MIN_WORK", "DEFAULT_SYMBOLIC_SIZE"]

#: multiply-adds of the written sum below which a constant-size sum stays as it is
DEFAULT_MIN_WORK = 32768
#: how many times cheaper (FLOPs) the chosen order must be than the written one
DEFAULT_MIN_GAIN = 2.0
#: the extent assumed for a size name when costs are estimated at compile time
DEFAULT_SYMBOLIC_SIZE = 1000

Minimize = Literal["flops", "size", "write", "combo"]


@dataclass
class _Contraction:
    """``sign * scalars * sum[vars](product of factors)`` with each index's extent."""

    out: tuple[str, ...]               # free indices of the sum, in the definition's order
    summed: tuple[str, ...]            # summation variables, outermost first
    extent: dict[str, Affine]          # every index above -> its extent
    factors: list[Expr] = field(default_factory=list)   # factors on at least one index
    scalars: list[Expr] = field(default_factory=list)   # factors on no index
    negated: bool = False


def _split_product(e: Expr, out: list[Expr]) -> bool:
    """Flatten ``e`` at ``*``, negation and ``/`` into ``out``; returns whether it is negated."""
    negated = False
    stack: list[Expr] = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Binary) and x.op == "*":
            stack.append(x.rhs)
            stack.append(x.lhs)
        elif isinstance(x, Binary) and x.op == "/" and x.lhs is not ONE:
            stack.append(Binary("/", ONE, x.rhs))
            stack.append(x.lhs)
        elif isinstance(x, Unary) and x.op == "neg":
            negated = not negated
            stack.append(x.operand)
        else:
            out.append(x)
    return negated


def _top_sums(body: Expr) -> list[Sum]:
    """The sums reached from ``body`` through arithmetic only (not under where, sum or CSum), in order."""
    found: list[Sum] = []
    seen: set[int] = set()
    stack: list[Expr] = [body]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Sum):
            found.append(x)
        elif isinstance(x, (Unary, Binary)):
            stack.extend(reversed(x.children()))
    return found


def _opaque(e: Expr) -> bool:
    """Whether a factor holds a sum, a guard or a matrix function (the pass then leaves the sum alone)."""
    return any(isinstance(n, (Sum, CSum, Where, MatrixFn)) for n in postorder(e))


class _Rewriter:
    def __init__(self, program: Program, min_work: int, min_gain: float, minimize: str, symbolic_size: int) -> None:
        self.program = program
        self.min_work = min_work
        self.min_gain = min_gain
        self.minimize = minimize
        self.symbolic_size = symbolic_size
        self.sizes = set(program.sizes())
        self.facts: Facts = program_facts(self.sizes)
        self.taken = program.names_in_use()

    def fresh(self, base: str) -> str:
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        return name

    # -- matching ----------------------------------------------------------
    def collect(self, s: Sum, d: Definition) -> _Contraction | None:
        """The contraction ``s`` is, or None when it is not a candidate (module docstring)."""
        assert d.extents is not None
        extent = dict(zip(d.indices, d.extents))
        summed: list[str] = []
        zero = Affine.constant(0)
        body: Expr = s
        while isinstance(body, Sum):
            if body.var in extent or body.lo != (zero,) or len(body.hi) != 1:
                return None
            if not set(body.hi[0].names()) <= self.sizes:
                return None
            n = body.hi[0] + 1
            if not self.facts.implies(Compare(">=", n, zero)):
                return None
            extent[body.var] = n
            summed.append(body.var)
            body = body.body
        factors: list[Expr] = []
        negated = _split_product(body, factors)
        out = tuple(i for i in d.indices if i in set(free_names(s)))
        if not set(free_names(s)) - self.sizes <= set(d.indices):
            return None
        c = _Contraction(out, tuple(summed), extent, negated=negated)
        used: set[str] = set()
        for f in factors:
            names = set(free_names(f)) - self.sizes
            if _opaque(f) or not names <= set(extent):
                return None
            (c.factors if names else c.scalars).append(f)
            used |= names
        if len(c.factors) < 3 or not set(summed) <= used:
            return None
        return c

    # -- planning ------------------------------------------------------------
    def estimate(self, e: Affine) -> int:
        """An extent's value at compile time: every size name counts as ``symbolic-size``."""
        value = e.evaluate({n: self.symbolic_size for n in e.names()})
        return max(int(value), 0)

    def plan(self, c: _Contraction) -> list[tuple[int, ...]] | None:
        """The order (``opt_einsum``'s linear path over ``c.factors``), or None when the written order is as cheap."""
        order = c.out + c.summed
        label = {name: k for k, name in enumerate(order)}
        sizes = {label[n]: self.estimate(c.extent[n]) for n in order}
        inputs = [frozenset(label[n] for n in free_names(f) if n in label) for f in c.factors]
        output = frozenset(label[n] for n in c.out)
        written = flop_count(frozenset(sizes), True, len(inputs), sizes)
        if all(c.extent[n].is_constant for n in order) and _volume(sizes) < self.min_work:
            return None
        path = [tuple(step) for step in DynamicProgramming(minimize=self.minimize)(inputs, output, sizes)]
        if len(path) < 2:
            return None
        cost = 0
        terms = list(inputs)
        for step in path:
            picked = [terms[k] for k in step]
            for k in sorted(step, reverse=True):
                del terms[k]
            union = frozenset().union(*picked)
            keep = union & (output.union(*terms) if terms else output)
            cost += flop_count(union, bool(union - keep), len(picked), sizes)
            terms.append(keep)
        return path if cost * self.min_gain <= written and cost < written else None

    # -- rewriting -----------------------------------------------------------
    def emit(self, c: _Contraction, path: list[tuple[int, ...]], d: Definition, out: list[Definition]) -> Expr:
        """Append the intermediate definitions to ``out``; returns the expression that replaces the sum."""
        order = c.out + c.summed
        # a term: (position of its first factor, expression, indices)
        terms: list[tuple[int, Expr, frozenset[str]]] = [
            (k, f, frozenset(n for n in free_names(f) if n in c.extent)) for k, f in enumerate(c.factors)]
        result: Expr | None = None
        for number, step in enumerate(path):
            picked = sorted((terms[k] for k in step), key=lambda t: t[0])
            for k in sorted(step, reverse=True):
                del terms[k]
            union = frozenset().union(*(t[2] for t in picked))
            need = set(c.out).union(*(t[2] for t in terms))
            factors = [t[1] for t in picked]
            keep = tuple(n for n in _appearance(factors) if n in need)
            gone = tuple(n for n in order if n in union and n not in need)
            if number == len(path) - 1:
                result = self.wrap(c, gone, _product(factors + c.scalars, c.negated))
                break
            if not gone:  # an element-wise product: no definition, the next step reads it inline
                terms.append((picked[0][0], _product(factors, False), union))
                continue
            name = self.fresh(f"{d.name}_ctr")
            body = self.wrap(c, gone, _product(factors, False))
            out.append(Definition(name, keep, body, tuple(c.extent[n] for n in keep), d.loc))
            access = Access(name, tuple(Affine.var(n) for n in keep))
            terms.append((picked[0][0], access, frozenset(keep)))
        assert result is not None
        return result

    @staticmethod
    def wrap(c: _Contraction, gone: tuple[str, ...], body: Expr) -> Expr:
        """``sum[v: 0..N - 1]`` around ``body`` for each variable of ``gone``, the first outermost."""
        for v in reversed(gone):
            body = Sum(v, (Affine.constant(0),), (c.extent[v] - 1,), body)
        return body

    def rewrite(self, d: Definition) -> list[Definition]:
        """``[d]`` unchanged, or the intermediates followed by ``d`` with its sums replaced."""
        if d.extents is None or isinstance(d.body, MatrixFn):
            return [d]
        out: list[Definition] = []
        replace: dict[Expr, Expr] = {}
        for s in _top_sums(d.body):
            c = self.collect(s, d)
            path = None if c is None else self.plan(c)
            if c is not None and path is not None:
                made = len(out)
                new = self.emit(c, path, d, out)
                if len(out) > made:  # not only element-wise steps: a reordered product alone gains nothing
                    replace[s] = new
        if not replace:
            return [d]
        return out + [d.with_body(transform(d.body, lambda n: replace.get(n, n)))]


def _appearance(factors: list[Expr]) -> tuple[str, ...]:
    """The index names of ``factors`` in the order they are first written (free sizes included)."""
    seen: dict[str, None] = {}
    for f in factors:
        seen.update(dict.fromkeys(free_names(f)))
    return tuple(seen)


def _volume(sizes: dict[int, int]) -> int:
    v = 1
    for s in sizes.values():
        v *= s
    return v


def _product(factors: list[Expr], negated: bool) -> Expr:
    body = factors[0]
    for f in factors[1:]:
        body = Binary("*", body, f)
    return Unary("neg", body) if negated else body


def contract_order_program(program: Program, min_work: int = DEFAULT_MIN_WORK, min_gain: float = DEFAULT_MIN_GAIN,
                           minimize: str = "combo", symbolic_size: int = DEFAULT_SYMBOLIC_SIZE) -> Program:
    """Rewrite every candidate sum (see the module docstring)."""
    rw = _Rewriter(program, min_work, min_gain, minimize, symbolic_size)
    defs: list[Definition] = []
    changed = False
    for d in program.definitions:
        new = rw.rewrite(d)
        changed |= new != [d]
        defs.extend(new)
    if not changed:
        return program
    # the new definitions are locals: fix the results before adding them
    return program.replace(definitions=tuple(defs), outputs=program.results())


@dataclass(frozen=True)
class ContractOrder(Pass):
    """Sums over products of three or more factors become pairwise contractions, in the cheapest order."""

    name = "contract-order"
    level = Level.INDEX
    summary = "a sum over a product of three or more factors becomes pairwise contractions (local definitions) in the cheapest order"

    # multiply-adds of a written sum with constant extents below which it stays
    min_work: int = DEFAULT_MIN_WORK
    # how many times fewer FLOPs the chosen order must cost than the written one
    min_gain: float = DEFAULT_MIN_GAIN
    # what the dynamic program minimises (opt_einsum: flops, size, write, combo = flops + 64 * write)
    minimize: Minimize = "combo"
    # the value assumed for every size name when costs are estimated at compile time
    symbolic_size: int = DEFAULT_SYMBOLIC_SIZE

    def run(self, program: Program, ctx: PassContext) -> Program:
        return contract_order_program(program, self.min_work, self.min_gain, self.minimize, self.symbolic_size)
