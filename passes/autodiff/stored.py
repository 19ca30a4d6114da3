"""Forward values a derivative reads from memory instead of recomputing them (tcc issues 35, 36).

A local derivative reads the values of the forward computation: ``exp(u)``'s
rule multiplies by ``exp(u)``, ``x * y``'s by the other factor, ``max(x, y)``'s
compares each argument with the result.  Written as expressions those reads
are copies of the forward's subexpressions, and an adjoint in delta form puts
them inside its sums: the causal-attention gradient recomputed
``exp(0.125 * sum[k](Q * K))`` inside ``dQ``'s sum for each of its 64
columns, where the forward had already stored it as ``S``.  A copy is also
not the same number: a compiled sum is reassociated, peeled and unrolled
differently in each kernel, so ``max(sum, 0)``'s tie test compared a
recomputed sum with the stored result, both comparisons failed and the
split share was 0/0.  Two rules, used by both modes, remove the copies:

1. **Known values** (:func:`known_values`).  The value of a definition's
   body is the stored ``h[α]``; below a ``where`` (or a value ``select``)
   the value of a branch is that same element wherever the branch is taken,
   and the branch's adjoint is zero elsewhere.  Rules that only *multiply*
   by their value (``exp``, ``tan``, ``tanh``, ``relu``, ``sigmoid``,
   ``**``'s exponent) read it from there: ``dS * S`` instead of
   ``dS * exp(...)``.  Outside the branch the value is masked to 0 unless
   the other branch is a finite constant (then ``h[α]`` is that constant,
   and the zero adjoint times a finite number is 0).
2. **Stored parts** (:class:`StoredParts`).  A subexpression of a body,
   outside its sums, that contains a reduction (a sum, a constrained sum, a
   max/min) and that a derivative term reads becomes a definition of its own
   over the indices it needs (``h_v[α]``), placed before ``h``; ``h`` and
   every term read it.  So the forward and the derivative see the same bits
   (``max(y_v[i], 0)`` is exactly ``y_v[i]`` or 0, and the tie test
   compares ``y_v[i]`` with ``y[i]``), and a normaliser or contraction a
   term needs is computed once per point, not once per term element.  A
   part under ``where`` guards keeps them (its reads may be in bounds only
   there); a part at positions with different guards stays a copy.

Sum-free arithmetic is not stored: it rounds the same in every kernel (the
code generator reassociates accumulations only, docs/runtime.md), and storing
it would cost a tensor per operand.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

from tcc.ir.expr import (
    ZERO,
    Access,
    Binary,
    Const,
    CSum,
    Expr,
    MatrixFn,
    Reduce,
    Select,
    Step,
    Sum,
    Unary,
    Where,
    accessed_tensors,
    bound_vars,
    free_names,
    rebuild,
    trampoline,
)
from tcc.ir.index import Affine, Cond, conjuncts, make_and, negate
from tcc.ir.program import Definition

__all__ = ["known_values", "uses_known_value", "StoredParts"]

#: unary rules whose value enters only as a factor of the adjoint (rules.child_adjoints)
_PRODUCT_RULES = frozenset({"exp", "tan", "tanh", "relu", "sigmoid"})
_REDUCTIONS = (Sum, CSum, Reduce)


def uses_known_value(node: Expr) -> bool:
    """Whether ``node``'s rule may read a masked value (it multiplies the adjoint by a function of it)."""
    if isinstance(node, Unary):
        return node.op in _PRODUCT_RULES
    return isinstance(node, Binary) and node.op == "**"


def _level_nodes(root: Expr) -> list[Expr]:
    """The distinct nodes of ``root`` outside its reductions' bodies, every parent before its children."""
    seen: set[Expr] = set()
    out: list[Expr] = []
    stack: list[Expr | None] = [root]
    while stack:
        node = stack.pop()
        if node is None:
            out.append(stack.pop())  # type: ignore[arg-type]
            continue
        if node in seen:
            continue
        seen.add(node)
        stack += [node, None]
        if not isinstance(node, _REDUCTIONS):
            stack += [c for c in reversed(node.children()) if c not in seen]
    out.reverse()  # a postorder reversed: parents first
    return out


def _finite_const(e: Expr) -> bool:
    return isinstance(e, Const) and math.isfinite(e.value)


def _branch_values(node: Expr, value: Expr) -> list[Expr | None]:
    """The value of each child position of ``node`` (known to be ``value``), ``None`` where unknown."""
    if isinstance(node, Where):
        then = value if _finite_const(node.other) else Where(node.cond, value, ZERO)
        other = value if _finite_const(node.then) else Where(negate(node.cond), value, ZERO)
        return [then, other]
    if isinstance(node, Select):
        then = value if _finite_const(node.other) else Select(node.op, node.lhs, node.rhs, value, ZERO)
        other = value if _finite_const(node.then) else Select(node.op, node.lhs, node.rhs, ZERO, value)
        return [None, None, then, other]
    return [None] * len(node.children())


def known_values(root: Expr, root_value: Expr | None) -> dict[Expr, Expr]:
    """Nodes of ``root`` (outside its sums) whose value is the stored ``root_value``, masked to their branch.

    A node reached at several positions has a known value only if every
    position gives it the same one.
    """
    vals: dict[Expr, Expr | None] = {root: root_value}
    for node in _level_nodes(root):
        if isinstance(node, _REDUCTIONS):
            continue
        v = vals.get(node)
        derived = _branch_values(node, v) if v is not None else [None] * len(node.children())
        for child, d in zip(node.children(), derived):
            if child not in vals:
                vals[child] = d
            elif vals[child] is not d:
                vals[child] = None
    return {n: v for n, v in vals.items() if v is not None}


def _parts(body: Expr) -> dict[Expr, tuple[Cond, ...]]:
    """Subexpressions of ``body`` outside its sums that contain a reduction (the body itself not),
    with the guard conjuncts of their positions; parts at positions with different guards are left out."""
    order = _level_nodes(body)
    reduces: dict[Expr, bool] = {}
    for node in reversed(order):
        reduces[node] = isinstance(node, _REDUCTIONS) or any(reduces.get(c, False) for c in node.children())
    guards: dict[Expr, tuple[Cond, ...] | None] = {body: ()}
    for node in order:
        g = guards.get(node)
        if isinstance(node, _REDUCTIONS):
            continue
        for k, child in enumerate(node.children()):
            mine: tuple[Cond, ...] | None = g
            if g is not None and isinstance(node, Where):
                cond = node.cond if k == 0 else negate(node.cond)
                mine = g + tuple(c for c in conjuncts(cond) if c not in g)
            if child in guards and guards[child] != mine:
                mine = None
            guards[child] = mine
    return {n: g for n, g in guards.items() if n is not body and reduces[n] and g is not None}


class StoredParts:
    """The parts of the forward definitions that derivative terms read, stored once (rule 2 above).

    :meth:`mark` is called with every expression a term of ``h`` reads, then
    :meth:`definitions` names the parts that were read and :meth:`read`
    rewrites the terms; :meth:`forward` gives the forward definitions in
    program order with the parts placed before the definitions they come from.
    """

    def __init__(self, allocate: Callable[[str], str], definitions: Iterable[Definition]) -> None:
        self.allocate = allocate
        self.parts: dict[str, dict[Expr, tuple[Cond, ...]]] = {}
        self.defs: dict[str, Definition] = {}
        for h in definitions:
            if not isinstance(h.body, MatrixFn):
                self.parts[h.name] = _parts(h.body)
        self.needed: dict[str, dict[Expr, None]] = {name: {} for name in self.parts}
        self.reads: dict[str, dict[Expr, Expr]] = {}
        self.new: dict[str, list[Definition]] = {}

    def mark(self, h: Definition, exprs: Iterable[Expr]) -> None:
        """Record the parts of ``h`` that ``exprs`` read (the outermost part of each read)."""
        parts = self.parts.get(h.name)
        if not parts:
            return
        for e in exprs:
            trampoline(self._mark(e, frozenset(), parts, self.needed[h.name], set()))

    def mark_reductions(self, h: Definition, targets: set[str]) -> None:
        """Record the max/min reductions of ``h`` (outside its sums, not its body) that read ``targets``:
        their tie test compares each position with the reduction's value, which must be the stored one."""
        needed = self.needed.get(h.name)
        for part in self.parts.get(h.name, {}):
            if isinstance(part, Reduce) and set(accessed_tensors(part)) & targets:
                needed[part] = None  # type: ignore[index]

    def stored_reads(self, h: Definition) -> dict[Expr, Expr]:
        """The parts of ``h`` that are stored, each with its read (after :meth:`build`)."""
        return self.reads.get(h.name, {})

    def _mark(self, e: Expr, bound: frozenset[str], parts: dict, needed: dict, seen: set) -> Step:
        if (e, bound) in seen:
            return None
        seen.add((e, bound))
        if e in parts and not bound & set(free_names(e)):
            needed[e] = None
            return None
        inner = bound | frozenset(bound_vars(e))
        for c in e.children():
            yield self._mark(c, inner, parts, needed, seen)
        return None

    def build(self, program_definitions: Iterable[Definition]) -> list[Definition]:
        """Name the parts that were read and return the forward definitions with the parts in place."""
        out: list[Definition] = []
        for d in program_definitions:
            needed = self.needed.get(d.name)
            if needed:
                reads, new = self._store(d, needed)
                self.reads[d.name] = reads
                out += new
                d = d.with_body(self._replace(d.body, reads))
            out.append(d)
        return out

    def _store(self, h: Definition, needed: dict[Expr, None]) -> tuple[dict[Expr, Expr], list[Definition]]:
        """One definition per part of ``h`` that was read, inner parts first (an outer one reads them)."""
        assert h.extents is not None
        parts = self.parts[h.name]
        reads: dict[Expr, Expr] = {}
        new: list[Definition] = []
        ordered = [n for n in reversed(_level_nodes(h.body)) if n in needed]
        for part in ordered:
            guard = parts[part]
            names = set(free_names(part)) | {n for c in guard for n in c.names()}
            keep = [(i, e) for i, e in zip(h.indices, h.extents) if i in names]
            name = self.allocate(f"{h.name}_v")
            body = self._replace(part, reads)
            cond = make_and(list(guard))
            if cond is not None:
                body = Where(cond, body, ZERO)
            new.append(Definition(name, tuple(i for i, _ in keep), body, tuple(e for _, e in keep)))
            reads[part] = Access(name, tuple(Affine.var(i) for i, _ in keep))
        return reads, new

    def read(self, h: Definition, e: Expr) -> Expr:
        """``e`` with the stored parts of ``h`` read from their definitions."""
        reads = self.reads.get(h.name)
        return self._replace(e, reads) if reads else e

    @staticmethod
    def _replace(e: Expr, reads: dict[Expr, Expr]) -> Expr:
        if not reads:
            return e
        memo: dict[tuple[Expr, frozenset[str]], Expr] = {}

        def step(n: Expr, bound: frozenset[str]) -> Step:
            key = (n, bound)
            if key in memo:
                return memo[key]
            hit = reads.get(n)
            if hit is not None and not bound & set(free_names(n)):
                memo[key] = hit
                return hit
            inner = bound | frozenset(bound_vars(n))
            kids = n.children()
            new_kids = []
            for c in kids:
                new_kids.append((yield step(c, inner)))
            out = n if tuple(new_kids) == kids else rebuild(n, tuple(new_kids))
            memo[key] = out
            return out

        return trampoline(step(e, frozenset()))
