"""``rematerialize``: cheap element-wise locals are recomputed where they are read, not stored.

A local intermediate such as layer normalisation's ``xc[a, c] = X[a, c] -
mu[a]`` costs one subtraction per element to compute, and a full tensor
written to memory (and read back) to store.  When no caller asks for it,
the store is what costs: at 512 x 1024 doubles it is 4 MB written and read
by every kernel that uses it, where recomputing reads ``X`` instead of
``xc`` -- the same bytes -- and writes nothing.  XLA's fusion and JAX's
``remat`` make the same trade.

The pass only touches definitions that are not in :meth:`Program.results`
(the declared outputs).  It is not in the default compile pipeline, whose
calls return every definition (``tcc run`` writes them all);
``tcc.compile(..., results=[...])`` makes the named definitions the
program's outputs and runs it (:mod:`tcc.build`).  Two rewrites:

1. **Recompute.**  A local whose body is element-wise arithmetic of reads
   and constants (no sum, reduction, selection or matrix function; only
   ``+ - * /``, ``neg``, ``abs`` and squares and cubes) is substituted into
   every reader, in program order, when
   (a) every read of it is *injective*: its indices are distinct plain
       variables that include every index of the reader and of each sum
       around the read, so each element is recomputed at most once per
       read -- a contraction operand such as ``L[i, k]`` in
       ``sum[k](L[i, k] * B[k, j])`` is read ``n_j`` times per element and
       stays stored (and stays a GEMM operand for ``blas``);
   (b) the recomputation moves no more memory than the store: with ``r``
       full-rank reads in the body and ``s`` reads of the local, storing
       costs ``r`` reads, a write (counted twice: the cache line is read
       first) and ``s`` reads, recomputing ``s * r`` reads, so
       ``s * (r - 1) <= r + 2``; and
   (c) the arithmetic stays small: at most ``MAX_OPS`` operations in the
       body and ``MAX_RECOMPUTED`` in all its copies.
   A matrix function reading the local (it reads it whole) keeps it stored.
2. **Prune.**  Locals that no result reads, directly or through other
   locals, are dropped: nobody sees them.

Values are unchanged: the recomputed expression is the stored one, at the
same indices.  The pass runs after ``contract-order`` (whose pairwise
intermediates hold sums and are never recomputed) and before ``blas``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from tcc.ir.expr import (
    RANGED, Access, Binary, Const, CSum, Expr, MatrixFn, Unary, accessed_tensors, bound_vars, free_names,
    postorder,
)
from tcc.ir.graph import live_definitions
from tcc.ir.program import Definition, Program
from tcc.ir.substitution import inline_reads
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)

#: most arithmetic operations in a recomputed body, and in all of its copies together
MAX_OPS = 12
MAX_RECOMPUTED = 24

_CHEAP_UNARY = ("neg", "abs")
_CHEAP_BINARY = ("+", "-", "*", "/")


def _ops(body: Expr) -> int | None:
    """Operations in an element-wise body of cheap arithmetic, or None where it has anything else."""
    ops = 0
    for n in postorder(body):
        if isinstance(n, (Access, Const)):
            continue
        if isinstance(n, Unary) and n.op in _CHEAP_UNARY:
            ops += 1
        elif isinstance(n, Binary) and n.op in _CHEAP_BINARY:
            ops += 1
        elif isinstance(n, Binary) and n.op == "**" and isinstance(n.rhs, Const) and n.rhs.value in (2, 3):
            ops += int(n.rhs.value) - 1
        else:
            return None
    return ops


def _full_reads(d: Definition) -> int:
    """Distinct reads in ``d``'s body that use every index of ``d``: what a recomputation reads at full size."""
    own = set(d.indices)
    return sum(1 for n in postorder(d.body)
               if isinstance(n, Access) and own and {x for ix in n.indices for x in ix.names()} >= own)


def _injective(read: Access, scope: frozenset[str]) -> bool:
    """Distinct plain iteration variables, one per index, covering ``scope`` (the reader's and the
    enclosing sums' indices): no element is read twice by one evaluation of the reader."""
    names = []
    for ix in read.indices:
        if ix.const != 0 or len(ix.terms) != 1 or ix.terms[0][1] != 1 or not isinstance(ix.terms[0][0], str):
            return False
        names.append(ix.terms[0][0])
    return len(set(names)) == len(names) and scope == set(names)


def _reads(body: Expr, name: str, indices: tuple[str, ...]) -> tuple[int, bool]:
    """How many times ``body`` reads ``name`` (each read under each distinct set of enclosing
    sums counted once), and whether every such read is injective."""
    seen: set[tuple[Expr, frozenset[str]]] = set()
    stack: list[tuple[Expr, frozenset[str]]] = [(body, frozenset(indices))]
    count, injective = 0, True
    while stack:
        node, scope = stack.pop()
        if (node, scope) in seen:
            continue
        seen.add((node, scope))
        if isinstance(node, Access):
            if node.tensor == name:
                count += 1
                injective = injective and _injective(node, scope)
            continue
        inner = scope
        if isinstance(node, RANGED):
            inner = scope | {node.var}
        elif isinstance(node, CSum):
            inner = scope | set(node.vars)
        stack.extend((c, inner) for c in node.children())
    return count, injective


def _recompute(d: Definition, readers: list[Definition]) -> bool:
    """Whether ``d`` is recomputed in ``readers`` rather than stored (the module docstring's rules)."""
    if d.extents is None or len(set(d.indices)) != len(d.indices):
        return False
    ops = _ops(d.body)
    if ops is None or ops > MAX_OPS:
        return False
    outside = set(free_names(d.body)) - set(d.indices)  # sizes (and values of them) the body reads
    sites = 0
    for r in readers:
        if isinstance(r.body, MatrixFn):
            return False
        if outside & _bound_names(r.body):  # a sum of the reader named like a size would capture it
            return False
        count, injective = _reads(r.body, d.name, r.indices)
        if not injective:
            return False
        sites += count
    full = _full_reads(d)
    return sites * ops <= MAX_RECOMPUTED and sites * (full - 1) <= full + 2


def _bound_names(body: Expr) -> set[str]:
    """The index names the sums and reductions of ``body`` bind."""
    return {v for n in postorder(body) for v in bound_vars(n)}


def _readers(defs: list[Definition], name: str) -> list[Definition]:
    return [r for r in defs if name in accessed_tensors(r.body)]


def _prune(program: Program, defs: list[Definition]) -> list[Definition]:
    """The definitions some result reads, directly or through others (``simplify``'s dead-code rule)."""
    live = live_definitions(program.with_definitions(defs))
    dropped = [d.name for d in defs if d.name not in live]
    if dropped:
        logger.info("no result reads %s: dropped", ", ".join(dropped))
    return [d for d in defs if d.name in live]


def rematerialize(program: Program) -> Program:
    if not program.outputs:  # every definition is a result: nothing may be dropped
        return program
    results = set(program.results())
    defs = list(program.definitions)
    changed = False
    for name in [d.name for d in program.definitions if d.name not in results]:
        (d,) = (x for x in defs if x.name == name)  # as earlier recomputations left it
        readers = [r for r in _readers(defs, d.name) if r is not d]
        if not readers or not _recompute(d, readers):
            continue
        logger.info("%s recomputed in %s", d.name, ", ".join(r.name for r in readers))
        bodies = {d.name: d}
        new = {r.name: r.with_body(inline_reads(r.body, bodies)[0]) for r in readers}
        defs = [new.get(x.name, x) for x in defs if x.name != d.name]
        changed = True
    kept = _prune(program, defs)
    if not changed and len(kept) == len(program.definitions):
        return program
    return program.with_definitions(kept)


@dataclass(frozen=True)
class Rematerialize(Pass):
    name = "rematerialize"
    level = Level.INDEX
    summary = ("cheap element-wise locals are recomputed in their readers instead of stored; "
               "locals no result reads are dropped")

    def run(self, program: Program, ctx: PassContext) -> Program:
        return rematerialize(program)
