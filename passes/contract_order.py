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
``symbolic-size`` (or by the value option ``sizes`` gives it).  Where the
call's sizes change the answer, the runtime re-decides the order at call time
(:class:`OrderPlanner`, used by ``tcc.compile``: docs/runtime.md): it
compiles the program again with the call's sizes in ``sizes`` and runs that.

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
not stored but read inline by the next step.  Of the orders of least cost
the one whose loops read memory best is kept, and each intermediate's
indices are laid out to match (:meth:`_Rewriter.plan`, :func:`_goodness`):
``A[i, p, q] * C[q, l]`` gives ``T_ctr[i, p, l]``, whose innermost loop walks
``C`` and ``T_ctr`` with unit stride.  The last step replaces the
sum in place.  The result is again a program of the language: it prints,
parses back and runs in the interpreter.  ``blas``, which runs after this
pass in the CPU pipeline, turns the two-index intermediates that are matrix
products into ``matmul`` calls.
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, Mapping

from opt_einsum.helpers import flop_count
from opt_einsum.paths import DynamicProgramming

from tcc.ir.expr import (
    ONE,
    Access,
    Binary,
    CSum,
    Expr,
    FreshNames,
    MatrixFn,
    Sum,
    Unary,
    Where,
    free_names,
    postorder,
    transform,
)
from tcc.ir.diagnostics import TccError
from tcc.ir.index import Affine, Compare
from tcc.ir.polyhedra import Facts, program_facts
from tcc.ir.program import Definition, Program
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)

__all__ = [
    "ContractOrder", "OrderPlanner", "contract_order_program", "parse_sizes",
    "DEFAULT_MIN_GAIN", "DEFAULT_MIN_WORK", "DEFAULT_SYMBOLIC_SIZE",
]

#: multiply-adds of the written sum below which a constant-size sum stays as it is
DEFAULT_MIN_WORK = 32768
#: how many times cheaper (FLOPs) the chosen order must be than the written one
DEFAULT_MIN_GAIN = 2.0
#: up to this many factors every input order of the dynamic program is tried (24 runs at 4); beyond, 2k of them
MAX_PERMUTED = 4
#: at most this many layouts of the intermediates are compared for one order
MAX_LAYOUTS = 256
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


class _Rewriter(FreshNames):
    def __init__(self, program: Program, min_work: int, min_gain: float, minimize: str, symbolic_size: int,
                 known: Mapping[str, int] | None = None) -> None:
        self.program = program
        self.known = dict(known or {})
        self.min_work = min_work
        self.min_gain = min_gain
        self.minimize = minimize
        self.symbolic_size = symbolic_size
        self.sizes = set(program.sizes())
        self.facts: Facts = program_facts(self.sizes)
        self.taken = program.names_in_use()

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
        """An extent's value at compile time: a size name counts as its known value, else as ``symbolic-size``."""
        value = e.evaluate({n: self.known.get(n, self.symbolic_size) for n in e.names()})
        return max(int(value), 0)

    def plan(self, c: _Contraction) -> list[_Step] | None:
        """The cheapest order, or None when it is not worth it (module docstring).

        opt_einsum's dynamic program returns one optimal order; which one,
        among orders of equal cost, depends on the order of its inputs.  For
        up to :data:`MAX_PERMUTED` factors every input order is tried (for
        more, :func:`_rotations`), and of
        the cheapest orders found the one whose loops read memory best
        (:func:`_goodness`) is kept -- the first found on a tie, so the
        choice is deterministic.
        """
        order = c.out + c.summed
        sizes = {n: self.estimate(c.extent[n]) for n in order}
        if all(set(c.extent[n].names()) <= set(self.known) for n in order) and _volume(sizes) < self.min_work:
            return None
        label = {name: k for k, name in enumerate(order)}
        int_sizes = {label[n]: v for n, v in sizes.items()}
        sets = [frozenset(n for n in free_names(f) if n in label) for f in c.factors]
        inputs = [frozenset(label[n] for n in fs) for fs in sets]
        output = frozenset(label[n] for n in c.out)
        k = len(inputs)
        written = flop_count(frozenset(order), True, k, sizes)
        optimizer = DynamicProgramming(minimize=self.minimize)
        candidates: dict[tuple[tuple[int, ...], ...], int] = {}
        # the written order first: most sums are not worth it, and one run of the dynamic program says so
        perms = itertools.permutations(range(k)) if k <= MAX_PERMUTED else _rotations(k)
        for perm in perms:
            linear = optimizer([inputs[j] for j in perm], output, int_sizes)
            ssa = _to_ssa([tuple(step) for step in linear], list(perm), k)
            if ssa not in candidates:
                candidates[ssa] = _cost(_steps(ssa, sets, c), sizes)
            if len(candidates) == 1 and (candidates[ssa] * self.min_gain > written or candidates[ssa] >= written):
                return None
        best_cost = min(candidates.values())
        best = [_steps(ssa, sets, c) for ssa, cost in candidates.items() if cost == best_cost]
        best = [steps for steps in best if len(steps) >= 2 and any(st.gone for st in steps[:-1])]
        if not best:
            return None  # only element-wise steps before the last: a reordered product alone gains nothing
        return max(best, key=lambda steps: self.layouts(c, steps)[1])

    # -- rewriting -----------------------------------------------------------
    def layouts(self, c: _Contraction, steps: list[_Step]) -> tuple[dict[int, str | None], int]:
        """The last (contiguous) index of each stored intermediate, by step number, that reads memory best, and its score.

        Tries every choice (at most :data:`MAX_LAYOUTS`), the default layout
        of :func:`_layout` first, so a tie keeps it.
        """
        stored = [(number, _layout(_operands(c, steps, number), step.keep))
                  for number, step in enumerate(steps[:-1]) if step.gone]
        options = itertools.product(*[(lay[-1],) + lay[:-1] if lay else (None,) for _, lay in stored])
        best: tuple[dict[int, str | None], int] | None = None
        for pick in itertools.islice(options, MAX_LAYOUTS):
            lasts = {number: last for (number, _), last in zip(stored, pick)}
            score = self.build(c, steps, _placeholder(), lasts)[2]
            if best is None or score > best[1]:
                best = (lasts, score)
        assert best is not None
        return best

    def build(self, c: _Contraction, steps: list[_Step], namer: Callable[[], str],
              lasts: dict[int, str | None]) -> tuple[list[tuple[str, tuple[str, ...], Expr]], Expr, int]:
        """The intermediates ``(name, indices, body)``, the expression replacing the sum, and the order's score.

        ``lasts`` gives a stored intermediate's last (contiguous) index by
        step number; the score adds up :func:`_goodness` over the steps.
        """
        k = len(c.factors)
        operands: dict[int, list[tuple[int, Expr]]] = {j: [(j, f)] for j, f in enumerate(c.factors)}
        defs: list[tuple[str, tuple[str, ...], Expr]] = []
        score = 0
        for number, step in enumerate(steps):
            ops = sorted((op for t in step.terms for op in operands[t]), key=lambda op: op[0])
            exprs = [e for _, e in ops]
            gone = tuple(n for n in c.out + c.summed if n in step.gone)
            if number == len(steps) - 1:
                score += _goodness(exprs, gone, c.out)
                return defs, _wrap(c, gone, _product(exprs + c.scalars, c.negated)), score
            if not gone:  # an element-wise product: not stored, the next step reads it inline
                operands[k + number] = ops
                continue
            layout = _layout(exprs, step.keep, lasts.get(number))
            score += _goodness(exprs, gone, layout)
            name = namer()
            defs.append((name, layout, _wrap(c, gone, _product(exprs, False))))
            operands[k + number] = [(ops[0][0], Access(name, tuple(Affine.var(n) for n in layout)))]
        raise AssertionError("an order ends with its last step")

    def rewrite(self, d: Definition) -> list[Definition]:
        """``[d]`` unchanged, or the intermediates followed by ``d`` with its sums replaced."""
        if d.extents is None or isinstance(d.body, MatrixFn):
            return [d]
        out: list[Definition] = []
        replace: dict[Expr, Expr] = {}
        for s in _top_sums(d.body):
            c = self.collect(s, d)
            steps = None if c is None else self.plan(c)
            if c is None or steps is None:
                continue
            lasts, _ = self.layouts(c, steps)
            defs, replace[s], _ = self.build(c, steps, lambda: self.fresh(f"{d.name}_ctr"), lasts)
            out.extend(Definition(name, layout, body, tuple(c.extent[n] for n in layout), d.loc)
                       for name, layout, body in defs)
        if not replace:
            return [d]
        return out + [d.with_body(transform(d.body, lambda n: replace.get(n, n)))]


@dataclass(frozen=True)
class _Step:
    """One contraction of an order: the terms it multiplies, the indices it keeps and those it sums."""

    terms: tuple[int, ...]      # factor numbers 0..k-1, then k + the number of an earlier step
    keep: frozenset[str]
    gone: frozenset[str]


def _rotations(k: int) -> Iterator[tuple[int, ...]]:
    """The written order of ``k`` factors, its reverse, and their rotations: 2k input orders, the written one first."""
    for base in (list(range(k)), list(reversed(range(k)))):
        for r in range(k):
            yield tuple(base[r:] + base[:r])


def _to_ssa(linear: list[tuple[int, ...]], ids: list[int], k: int) -> tuple[tuple[int, ...], ...]:
    """An opt_einsum linear path (positions in a shrinking list, results appended) as term numbers."""
    ssa: list[tuple[int, ...]] = []
    for number, step in enumerate(linear):
        ssa.append(tuple(sorted(ids[j] for j in step)))
        for j in sorted(step, reverse=True):
            del ids[j]
        ids.append(k + number)
    return tuple(ssa)


def _steps(ssa: tuple[tuple[int, ...], ...], sets: list[frozenset[str]], c: _Contraction) -> list[_Step]:
    """Each step's kept and summed indices: what no later step and not the result needs is summed."""
    index_sets = {j: s for j, s in enumerate(sets)}
    live = set(index_sets)
    steps: list[_Step] = []
    for number, terms in enumerate(ssa):
        live -= set(terms)
        union = frozenset().union(*(index_sets[t] for t in terms))
        need = set(c.out).union(*(index_sets[t] for t in live))
        keep = frozenset(n for n in union if n in need)
        steps.append(_Step(terms, keep, union - keep))
        index_sets[len(sets) + number] = keep
        live.add(len(sets) + number)
    return steps


def _cost(steps: list[_Step], sizes: dict[str, int]) -> int:
    """opt_einsum's FLOP count of an order."""
    return sum(flop_count(st.keep | st.gone, bool(st.gone), len(st.terms), sizes) for st in steps)


def _operands(c: _Contraction, steps: list[_Step], number: int) -> list[Expr]:
    """The original factors under step ``number`` (what its layout looks at before intermediates exist)."""
    k = len(c.factors)
    found: list[int] = []
    stack = list(steps[number].terms)
    while stack:
        t = stack.pop()
        if t < k:
            found.append(t)
        else:
            stack.extend(steps[t - k].terms)
    return [c.factors[j] for j in sorted(found)]


def _placeholder() -> Callable[[], str]:
    """Names for a trial build whose definitions are thrown away."""
    counter = itertools.count()
    return lambda: f"_trial{next(counter)}"


def _wrap(c: _Contraction, gone: tuple[str, ...], body: Expr) -> Expr:
    """``sum[v: 0..N - 1]`` around ``body`` for each variable of ``gone``, the first outermost."""
    for v in reversed(gone):
        body = Sum(v, (Affine.constant(0),), (c.extent[v] - 1,), body)
    return body


def _last_is(f: Expr, name: str) -> bool:
    """Whether ``f`` is a read whose last (contiguous) index is exactly ``name``."""
    return isinstance(f, Access) and bool(f.indices) and f.indices[-1] == Affine.var(name)


def _goodness(operands: list[Expr], gone: tuple[str, ...], layout: tuple[str, ...]) -> int:
    """How well a contraction of ``operands`` into a result indexed ``layout`` runs, as the later passes run it.

    3: a matrix product ``P[a, z] * Q[z, b]`` into ``[a, b]``, which ``blas``
    hands to BLAS as it is (no transposed copy); 2: a summed index is the
    contiguous index of every operand that reads it (dot products:
    ``interchange`` and ``unroll-jam`` make them fast); 1: the result's
    contiguous index is also that of every operand that reads it
    (``reduce-in-place`` runs it innermost); 0: neither.
    """
    def contiguous(name: str) -> bool:
        return all(_last_is(f, name) for f in operands if name in free_names(f))

    if len(gone) == 1 and len(layout) == 2 and len(operands) == 2 and all(isinstance(f, Access) for f in operands):
        (a, b), z = layout, gone[0]
        want = ((Affine.var(a), Affine.var(z)), (Affine.var(z), Affine.var(b)))
        got = tuple(f.indices for f in operands)  # type: ignore[attr-defined]
        if got in (want, want[::-1]):
            return 3
    if any(contiguous(g) for g in gone):
        return 2
    return 1 if layout and contiguous(layout[-1]) else 0


def _layout(factors: list[Expr], keep: frozenset[str], last: str | None = None) -> tuple[str, ...]:
    """The index order of an intermediate over ``keep``, ending in ``last`` if given.

    Otherwise an index read as the last (contiguous) index of some factor
    comes last, one read second to last before it, and so on, so the
    innermost loop walks the operands with unit stride; indices read only
    through affine expressions or functions come first; ties keep the order
    in which the indices are first written.
    """
    seen: dict[str, None] = {}
    for f in factors:
        seen.update(dict.fromkeys(n for n in free_names(f) if n in keep))
    distance = {n: len(seen) for n in seen}  # from the end of a factor's index list: 0 is contiguous
    for f in factors:
        if isinstance(f, Access):
            for k, ix in enumerate(f.indices):
                name = ix.names()[0] if len(ix.names()) == 1 and ix == Affine.var(ix.names()[0]) else None
                if name in distance:
                    distance[name] = min(distance[name], len(f.indices) - 1 - k)
    first = {n: k for k, n in enumerate(seen)}
    order = sorted(seen, key=lambda n: (-distance[n], first[n]))
    if last is not None:
        order = [n for n in order if n != last] + [last]
    return tuple(order)


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


def parse_sizes(text: str) -> dict[str, int]:
    """The ``sizes`` option, ``n:100,m:5``, as a dict (an empty text: none)."""
    out: dict[str, int] = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, colon, value = item.partition(":")
        if not colon or not name.strip().isidentifier() or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"malformed size '{item}' (expected NAME:VALUE, e.g. n:100)")
        out[name.strip()] = int(value)
    return out


def contract_order_program(program: Program, min_work: int = DEFAULT_MIN_WORK, min_gain: float = DEFAULT_MIN_GAIN,
                           minimize: str = "combo", symbolic_size: int = DEFAULT_SYMBOLIC_SIZE,
                           sizes: Mapping[str, int] | None = None) -> Program:
    """Rewrite every candidate sum (see the module docstring)."""
    rw = _Rewriter(program, min_work, min_gain, minimize, symbolic_size, sizes)
    return program.expand_definitions(rw.rewrite)


class OrderPlanner:
    """Which order each candidate sum of ``program`` gets at given sizes, and what an order costs there.

    The runtime's side of the pass: ``program`` is what ``contract-order``
    sees in the pipeline.  :meth:`choose` is the pass's decision at the
    given sizes (a tuple with, per candidate sum, its steps or None for the
    written order), :meth:`cost` the FLOPs of such a decision at other
    sizes: a compiled order is replaced at call time only when it costs
    ``min-gain`` times more than the order the call's sizes choose.
    Candidates are collected once; both answers depend only on sizes.
    """

    def __init__(self, program: Program, pass_: "ContractOrder") -> None:
        self.pass_ = pass_
        self.program = program
        rw = _Rewriter(program, pass_.min_work, pass_.min_gain, pass_.minimize, pass_.symbolic_size)
        self.candidates: list[_Contraction] = []
        for d in program.definitions:
            if d.extents is None or isinstance(d.body, MatrixFn):
                continue
            for s in _top_sums(d.body):
                c = rw.collect(s, d)
                if c is not None:
                    self.candidates.append(c)
        self.sizes = sorted({n for c in self.candidates for e in c.extent.values() for n in e.names()})

    def choose(self, sizes: Mapping[str, int]) -> tuple[tuple[_Step, ...] | None, ...]:
        p = self.pass_
        rw = _Rewriter(self.program, p.min_work, p.min_gain, p.minimize, p.symbolic_size, sizes)
        out: list[tuple[_Step, ...] | None] = []
        for c in self.candidates:
            steps = rw.plan(c)
            out.append(None if steps is None else tuple(steps))
        return tuple(out)

    def cost(self, plan: tuple[tuple[_Step, ...] | None, ...], sizes: Mapping[str, int]) -> int:
        total = 0
        for c, steps in zip(self.candidates, plan):
            extents = {n: max(int(e.evaluate(dict(sizes))), 0) for n, e in c.extent.items()}
            order = c.out + c.summed
            total += (flop_count(frozenset(order), True, len(c.factors), extents) if steps is None
                      else _cost(list(steps), extents))
        return total


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
    # values of size names to estimate with instead (n:100,m:5): what the runtime passes when it re-decides at call time
    sizes: str = ""

    def run(self, program: Program, ctx: PassContext) -> Program:
        try:
            known = parse_sizes(self.sizes)
        except ValueError as exc:
            raise TccError(f"option 'sizes' of pass 'contract-order': {exc}") from None
        return contract_order_program(program, self.min_work, self.min_gain, self.minimize, self.symbolic_size, known)
