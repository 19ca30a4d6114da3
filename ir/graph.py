"""Dependency graphs of programs, as networkx graphs.

Which tensor a definition reads, and which buffer a kernel writes for a later
one, are graph questions: what a result needs is the set of its ancestors,
what an input influences the set of its descendants.  These functions build
the graphs once, with networkx (a dependency of tcc), so that passes ask
networkx instead of walking the definitions by hand, and the pictures
(:mod:`tcc.ir.dot`) draw the same graphs the passes use.

Node and edge insertion follows program order (inputs in declaration order,
then definitions or kernels as written), and networkx keeps insertion order,
so every traversal of these graphs is deterministic.
"""
from __future__ import annotations

from typing import Iterable

import networkx as nx

from .expr import INDEX_VALUE, RANGED, Access, CSum, Expr, MatrixFn, Where, accessed_tensors, postorder
from .index import Affine, lookups
from .index_range import cond_affines
from .loop_analysis import buffer_accesses
from .loops import Kernel, LoopProgram, lookup_tensors
from .program import Program

__all__ = [
    "definition_graph", "index_reads", "kernel_accesses", "kernel_graph", "live_definitions", "node_affines",
]


def node_affines(node: Expr) -> list[Affine]:
    """The index expressions a node holds itself (not its children's): where it may read index arrays."""
    if isinstance(node, Access):
        return list(node.indices)
    if isinstance(node, Where):
        return cond_affines(node.cond)
    if isinstance(node, RANGED):
        return list(node.lo + node.hi)
    if isinstance(node, CSum):
        return [a for c in node.constraints for a in cond_affines(c)]
    return []


def index_reads(affines: Iterable[Affine]) -> tuple[str, ...]:
    """The index arrays that ``affines`` read through :class:`~tcc.ir.index.Lookup` atoms, first use first."""
    out: dict[str, None] = {}
    for a in affines:
        for lk in lookups(a):
            out[lk.tensor] = None
    return tuple(out)


def _body_index_reads(body: Expr) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for node in postorder(body):
        out.update(dict.fromkeys(index_reads(node_affines(node))))
    return tuple(out)


def definition_graph(program: Program) -> nx.DiGraph:
    """Tensors as nodes, an edge ``u -> v`` when ``v`` reads ``u``.

    Nodes are the inputs (attribute ``kind``: ``"input"``, ``"index"`` for an
    index input, ``"derived"`` for an index array the call computes) and the
    definitions (``kind="definition"``).  An edge's ``how`` is ``"value"``
    (an access or a matrix function's argument), ``"index"`` (entries read
    inside index expressions only, ``x[col[k]]``) or the function deriving
    an index array (``"inverse_ptr"``).
    """
    g = nx.DiGraph()
    for decl in program.inputs:
        kind = "derived" if decl.is_derived else "index" if decl.is_index else "input"
        g.add_node(decl.name, kind=kind)
        if decl.derived is not None:
            g.add_edge(decl.derived[1], decl.name, how=decl.derived[0])
    for d in program.definitions:
        g.add_node(d.name, kind="definition")
        for name in _body_index_reads(d.body):
            g.add_edge(name, d.name, how="index")
        for name in accessed_tensors(d.body):
            if name != INDEX_VALUE:  # `#index[i]` is an index used as a number, no tensor
                g.add_edge(name, d.name, how="value")  # a value read wins over an index read of the same array
    return g


def live_definitions(program: Program) -> set[str]:
    """The results and every definition they read, transitively (what ``simplify`` keeps)."""
    g = definition_graph(program)
    live: set[str] = set()
    for name in program.results():
        if name in g and name not in live:
            live.add(name)
            live |= nx.ancestors(g, name)
    return {d.name for d in program.definitions if d.name in live}


def kernel_accesses(kernel: Kernel, buffers: set[str]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``(reads, index_reads, writes)`` of a kernel: buffer names, each in order of first access.

    ``index_reads`` are index arrays read only inside index expressions; an
    external kernel reads its arguments and writes its output.
    """
    ext = kernel.extern
    if ext is not None:
        return tuple(dict.fromkeys(ext.args)), (), (ext.out,)
    reads: dict[str, None] = {}
    writes: dict[str, None] = {}
    for name, _, is_write in buffer_accesses(kernel.body, buffers):
        (writes if is_write else reads)[name] = None
    indexed = sorted(n for n in lookup_tensors(kernel.body) if n in buffers and n not in reads)
    return tuple(reads), tuple(indexed), tuple(writes)


def kernel_graph(program: LoopProgram) -> nx.DiGraph:
    """Kernels as nodes (program order), an edge ``k1 -> k2`` when ``k2`` must run after ``k1``.

    ``k2`` depends on an earlier ``k1`` when it reads a buffer ``k1`` writes,
    writes one ``k1`` reads, or writes one ``k1`` writes; the edge's
    ``buffers`` are those buffers, sorted.  Kernels run in program order
    (:mod:`tcc.runtime.compiled`), which is one topological order of this graph.
    """
    buffers = {b.name for b in program.buffers}
    g = nx.DiGraph()
    seen: list[tuple[str, set[str], set[str]]] = []
    for k in program.kernels:
        reads, indexed, writes = kernel_accesses(k, buffers)
        r, w = set(reads) | set(indexed), set(writes)
        g.add_node(k.name)
        for name, r0, w0 in seen:
            shared = (w0 & (r | w)) | (r0 & w)
            if shared:
                g.add_edge(name, k.name, buffers=tuple(sorted(shared)))
        seen.append((k.name, r, w))
    return g
