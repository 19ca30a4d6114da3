"""``hoist``'s extract phase (step b): reductions and expensive lets that skip
an enclosing loop become kernels filling ``temp`` buffers.

``for i { for j { local s = 0; for k { s += A[j, k] } } }`` cannot move in
front of ``i`` without losing ``j``; a kernel run just before fills ``t[j]``
and the original place reads ``let s = t[j]``.  See the package docstring.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tcc.ir.expr import Access, Binary, Const, Expr, Unary, fresh_name, postorder
from tcc.ir.index import Affine, Compare, Cond, conjuncts, lookups, make_and, negate, of_sizes
from tcc.ir.loop_analysis import affine_names, expr_names, outer_writes, read_names, stored_buffers
from tcc.ir.loops import Buffer, For, If, Kernel, Let, Local, LoopProgram, Stmt, Store
from tcc.ir.index_range import cond_affines
from tcc.ir.polyhedra import Facts, expression_range, program_facts

from .safety import BoundsChecker, nonempty_guard
from .units import Unit, replace_unit, units

#: the ``hoist`` pass's logger (``tcc.passes.hoist``): at DEBUG, what stayed where it was and why
logger = logging.getLogger(__package__)


@dataclass
class _Frame:
    """One enclosing statement of a reduction: a loop, or a branch of a test."""

    stmt: Stmt
    branch: str = ""  # "then" / "else" for an If
    visible: tuple[Stmt, ...] = ()  # lets/locals declared before, in the block inside this frame


class Extract:
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
        for path, unit, block_before, block_after in reductions(kernel.body, lets=self.lets):
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

    def try_extract(self, kernel: Kernel, path: list[_Frame], unit: Unit, block_before: tuple[Stmt, ...], written: set[str]):
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
                    return self.keep(kernel, unit, "it reads a local, whose value changes as the kernel runs")
                needed.append(d)
                todo |= set(expr_names(d.value))
        if (free & self.buffers) & written:
            return self.keep(kernel, unit, "it reads %s, which this kernel writes: it cannot run before",
                             ", ".join(sorted((free & self.buffers) & written)))
        depends = free & loop_vars
        kept = [l for l in loops if l.var in depends]
        if len(kept) == len(loops):
            return self.keep(kernel, unit, "it depends on every enclosing loop")
        kept_vars = {l.var for l in kept}
        for l in kept:
            if not affine_names(l.lo + l.hi) <= self.sizes | kept_vars:
                return self.keep(kernel, unit, "the range of loop %s depends on a dropped loop", l.var)
        shape: list[Affine] = []
        index: list[Affine] = []
        for l in kept:
            lo = next((b for b in l.lo if of_sizes(b, self.sizes)), None)
            hi = next((b for b in l.hi if of_sizes(b, self.sizes)), None)
            if lo is None or hi is None:
                return self.keep(kernel, unit, "no box around the triangular range of loop %s", l.var)
            extent = hi - lo + 1
            if extent not in self.extents and not program_facts(self.program.sizes).implies(
                Compare(">=", extent, Affine.constant(0))
            ):
                return self.keep(kernel, unit, "the temp could get a negative extent %s", extent)
            shape.append(extent)
            index.append(Affine.var(l.var) - lo)
        lets = _in_order(needed, path, block_before)
        # first without, then with tests that the dropped loops run at all
        for guards in (False, True):
            nest, facts = self.nest(path, kept_vars, guards)
            if self.checker.stmts_ok(tuple(lets) + unit.stmts, facts):
                break
        else:
            return self.keep(kernel, unit, "a load is not provably in bounds in the new kernel")
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
        body = replace_unit(kernel.body, unit, read)
        return new_kernel, replace(kernel, body=body)

    def keep(self, kernel: Kernel, unit: Unit, why: str, *args: object) -> None:
        """Log (DEBUG) why ``unit`` stays in ``kernel``; ``None`` for ``return self.keep(...)``."""
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("kernel %s: %s %s not extracted: %s", kernel.name, unit.kind, unit.name, why % args)
        return None

    def nest(self, path: list[_Frame], kept_vars: set[str], guards: bool) -> tuple[list[Stmt], Facts]:
        """The new kernel's loops and tests (bodies left empty), outermost
        first, and the facts inside them.

        Kept loops are copied.  A test goes with the code as far as it can:
        each part of a conjunction that only needs sizes and kept loop
        variables is copied, and from a part that needs a dropped loop
        (``r[d] == i``, ``r[d] <= i`` with ``i`` dropped) the bounds it implies
        on the index-array reads it makes with kept variables alone are
        (``r[d] <= n - 1``: Fourier-Motzkin over the facts of the original
        place, so they hold wherever the reduction ran before).  The new
        kernel then computes at least wherever the temp is read, and its
        facts are only what it tests.  A copied test's own index-array reads
        must be in bounds outside it (a condition is evaluated whole); one
        that is in bounds only under the parts before it opens a nested
        ``if``.  With ``guards``, a dropped loop whose range only needs those
        becomes the test that it runs at least once, and its range becomes a
        fact (its variable then only stands for "some iteration"): a load
        that was in bounds because the loop ran stays in bounds.
        """
        facts = program_facts(self.program.sizes)
        full = facts  # the facts where the reduction is now
        for f in path:
            if isinstance(f.stmt, For):
                full = full.with_range(f.stmt.var, f.stmt.lo, f.stmt.hi)
            elif isinstance(f.stmt, If):
                full = full.with_cond(f.stmt.cond if f.branch == "then" else negate(f.stmt.cond))
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
            elif isinstance(st, If):
                c = st.cond if f.branch == "then" else negate(st.cond)
                facts = self._carry(c, known, facts, full, out)
        return out, facts

    def _carry(self, cond: Cond, known: set[str], facts: Facts, full: Facts, out: list[Stmt]) -> Facts:
        """Append to ``out`` the tests of ``cond`` (and those it implies) that
        the new kernel can make; return the facts inside them."""
        parts: list[Cond] = []
        for c in conjuncts(cond):
            if set(c.names()) <= known:
                parts.append(c)
                continue
            for lk in dict.fromkeys(lk for a in cond_affines(c) for lk in lookups(a)):
                if not set(lk.names()) <= known:
                    continue
                bounds = expression_range(full, Affine.atom(lk), sorted(self.sizes))
                if bounds is None:
                    continue
                lo, hi = bounds
                parts += [Compare(">=", Affine.atom(lk), b) for b in lo if of_sizes(b, self.sizes)]
                parts += [Compare("<=", Affine.atom(lk), b) for b in hi if of_sizes(b, self.sizes)]
        group: list[Cond] = []
        outside = facts
        for c in parts:
            if facts.implies(c):
                continue
            if not self.checker.cond_ok(c, outside):
                if group:
                    out.append(If(make_and(group), ()))
                    group, outside = [], facts
                if not self.checker.cond_ok(c, outside):
                    continue  # a read that is out of bounds even under the tests before it
            group.append(c)
            facts = facts.with_cond(c)
        if group:
            out.append(If(make_and(group), ()))
        return facts


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


def reductions(body: tuple[Stmt, ...], path: list[_Frame] | None = None, lets: bool = False):
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
                yield from reductions(s.body, path + [_Frame(s, "", visible)], lets)
            elif isinstance(s, If):
                yield from reductions(s.then, path + [_Frame(s, "then", visible)], lets)
                yield from reductions(s.orelse, path + [_Frame(s, "else", visible)], lets)
            before.append(s)
