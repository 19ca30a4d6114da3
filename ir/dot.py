"""Pictures of programs: networkx graphs of L1 and L2 programs, written as Graphviz DOT.

``tcc compile FILE --emit dot`` (and ``tcc grad ... --emit dot``, and dumps
under ``--emit dot``) print what :func:`program_dot` writes; Graphviz's ``dot``
renders it (docs/pictures.md).

**L1** (:func:`expression_picture`): each definition is a cluster holding its
expression DAG.  Expression nodes are hash-consed, so a subexpression used
twice is one object, and it is drawn once: one picture node per distinct
node of the body, found by :func:`~tcc.ir.expr.postorder`, with an edge for
each use (``x * x`` has two edges from ``x`` into ``*``).  Edges follow the
data: operand to operator, an input's node to each access reading it, the
root of a definition's cluster to each access of that definition in another
cluster (drawn from the cluster's border), an index array to each node whose
index expressions read it (dashed).  Operands whose order matters carry a
label (``lhs``/``rhs``, ``base``/``exp``, ``then``/``else``).

**L2** (:func:`loops_picture`): the kernel dependency picture, kernels as
boxes between the buffers they read and write (bipartite, in kernel order;
:func:`tcc.ir.graph.kernel_graph` is the same information as kernel to kernel
edges).  Loop bodies are not drawn: ``--emit loops`` prints them.

The text is written here, not through pydot (not a dependency): nodes,
clusters and edges in insertion order, which follows program order, and
every identifier and label quoted and escaped, so the same program gives
byte-identical DOT.
"""
from __future__ import annotations

from typing import Any, Mapping

import networkx as nx

from .diagnostics import TccError
from .expr import (
    INDEX_VALUE, RANGED, Access, Binary, Const, CSum, Expr, MatrixFn, Select, Sum, Unary, Where, format_const,
    format_matrix_call, postorder,
)
from .graph import index_reads, kernel_accesses, node_affines
from .index import Affine, format_affine, format_cond, format_conjunct
from .loops import LoopProgram
from .program import Program

__all__ = ["expression_picture", "loops_picture", "program_dot", "quote", "write_dot"]

#: Edge labels of operands whose order matters, by node kind (a commutative operator's are unlabelled).
_OPERANDS = {"-": ("lhs", "rhs"), "/": ("lhs", "rhs"), "**": ("base", "exp")}
_INPUT_STYLE = {"shape": "box", "style": "filled", "fillcolor": "#dce9f7"}
_INDEX_STYLE = {"shape": "box", "style": "filled,dashed", "fillcolor": "#f2f2f2"}
_CLUSTER_STYLE = {"style": "rounded,filled", "fillcolor": "#fbfbf5", "color": "#8c8c8c"}


def quote(text: str) -> str:
    """``text`` as a DOT quoted string: backslashes and double quotes escaped, line breaks as ``\\n``.

    Graphviz reads ``\\l``, ``\\N`` and the like inside labels as escapes, so a
    backslash is always doubled; nothing else needs escaping in a quoted
    string (no record or HTML labels are written).
    """
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "").replace("\n", "\\n")
    return f'"{escaped}"'


def _attrs(attrs: Mapping[str, Any]) -> str:
    items = [f"{k}={quote(str(v))}" for k, v in attrs.items() if not k.startswith("_")]
    return f" [{', '.join(items)}]" if items else ""


def write_dot(graph: nx.MultiDiGraph | nx.DiGraph, name: str = "tcc") -> str:
    """DOT text of a picture graph.

    Node and edge attributes are Graphviz attributes, except ``_cluster``
    (the cluster a node is drawn in); ``graph.graph["clusters"]`` maps a
    cluster's name to its attributes and ``graph.graph["dot"]`` holds the
    graph's own.  Nodes outside clusters come first, then each cluster with
    its nodes, then the edges, all in insertion order.
    """
    lines = [f"digraph {quote(name)} {{"]
    lines.append(f"  graph{_attrs(graph.graph.get('dot', {}))};")
    lines.append('  node [fontname="Helvetica", fontsize="11"];')
    lines.append('  edge [fontname="Helvetica", fontsize="9"];')
    members: dict[str, list[str]] = {c: [] for c in graph.graph.get("clusters", {})}
    for node, data in graph.nodes(data=True):
        cluster = data.get("_cluster")
        if cluster is None:
            lines.append(f"  {quote(node)}{_attrs(data)};")
        else:
            members[cluster].append(f"    {quote(node)}{_attrs(data)};")
    for cluster, attrs in graph.graph.get("clusters", {}).items():
        lines.append(f"  subgraph {quote(cluster)} {{")
        lines.extend(f"    {k}={quote(str(v))};" for k, v in attrs.items())
        lines.extend(members[cluster])
        lines.append("  }")
    for u, v, data in graph.edges(data=True):
        lines.append(f"  {quote(u)} -> {quote(v)}{_attrs(data)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _bounds(items: tuple[Affine, ...], fn: str) -> str:
    return format_affine(items[0]) if len(items) == 1 else f"{fn}({', '.join(format_affine(a) for a in items)})"


def node_label(node: Expr) -> str:
    """What a picture node says: the operator of an inner node, the text of a leaf."""
    if isinstance(node, Const):
        return format_const(node.value)
    if isinstance(node, Access):
        if node.tensor == INDEX_VALUE:
            return f"index {format_affine(node.indices[0])}"
        return node.tensor + (f"[{', '.join(format_affine(i) for i in node.indices)}]" if node.indices else "")
    if isinstance(node, MatrixFn):
        return format_matrix_call(node.fn, node.args, node.transposed, node.spec)
    if isinstance(node, Unary):
        return node.op  # "neg" for unary minus: "-" is the binary operator, with lhs and rhs
    if isinstance(node, Binary):
        return node.op
    if isinstance(node, Select):
        return f"where {node.op}"
    if isinstance(node, Where):
        return f"where({format_cond(node.cond)})"
    if isinstance(node, RANGED):
        kind = "sum" if isinstance(node, Sum) else node.op
        rng = f": {_bounds(node.lo, 'max')}..{_bounds(node.hi, 'min')}" if node.has_range else ""
        return f"{kind}[{node.var}{rng}]"
    if isinstance(node, CSum):
        return f"sum[{', '.join(node.vars)} | {', '.join(format_conjunct(c) for c in node.constraints)}]"
    return str(getattr(node, "fn", type(node).__name__))  # a user function's call: its name


def _operand_labels(node: Expr) -> tuple[str, ...]:
    if isinstance(node, Binary):
        return _OPERANDS.get(node.op, ())
    if isinstance(node, Select):
        return ("lhs", "rhs", "then", "else")
    if isinstance(node, Where):
        return ("then", "else")
    params = getattr(node, "params", None)  # a user function: its parameters
    return tuple(params) if isinstance(params, tuple) and len(node.children()) > 1 else ()


def _input_label(program: Program, name: str) -> str:
    decl = program.input(name)
    assert decl is not None
    text = name + (f"[{', '.join(format_affine(x) for x in decl.extents)}]" if decl.extents else "")
    if decl.derived is not None:
        return f"index {text} = {decl.derived[0]}({decl.derived[1]})"
    if decl.bound is not None:
        return f"index {text} {decl.bound[0]} {format_affine(decl.bound[1])}"
    return f"input {text}"


def expression_picture(program: Program) -> nx.MultiDiGraph:
    """The L1 picture (module docstring) as a networkx multigraph: one node per input and per
    distinct subexpression of each definition (ids ``name`` and ``definition:k``, ``k`` the node's
    position in :func:`~tcc.ir.expr.postorder`), edges along the data."""
    g = nx.MultiDiGraph(dot={"compound": "true", "fontname": "Helvetica", "fontsize": "12"}, clusters={})
    for decl in program.inputs:
        g.add_node(decl.name, label=_input_label(program, decl.name), **(_INDEX_STYLE if decl.is_index else _INPUT_STYLE))
        if decl.derived is not None:
            g.add_edge(decl.derived[1], decl.name, label=decl.derived[0], style="dashed")
    results = set(program.results())
    roots: dict[str, str] = {}
    for d in program.definitions:
        cluster = f"cluster_{d.name}"
        lhs = d.name + (f"[{', '.join(d.indices)}]" if d.indices else "")
        extents = f" : [{', '.join(format_affine(x) for x in d.extents)}]" if d.extents else ""
        role = "output" if d.name in results else "local"
        g.graph["clusters"][cluster] = {"label": f"{role} {lhs}{extents}", **_CLUSTER_STYLE}
        ids: dict[Expr, str] = {}
        for k, node in enumerate(postorder(d.body)):
            ids[node] = nid = f"{d.name}:{k}"
            g.add_node(nid, label=node_label(node), _cluster=cluster, **_node_style(node, node is d.body))
            names = _operand_labels(node)
            for pos, child in enumerate(node.children()):
                g.add_edge(ids[child], nid, **({"label": names[pos]} if pos < len(names) else {}))
            _read_edges(g, node, nid, program, roots)
        roots[d.name] = ids[d.body]
    return g


def _node_style(node: Expr, root: bool) -> dict[str, str]:
    if isinstance(node, Const):
        style = {"shape": "plaintext"}
    elif isinstance(node, (Access, MatrixFn)):
        style = {"shape": "box", "style": "rounded"}
    else:
        style = {"shape": "ellipse"}
    return {**style, "peripheries": "2"} if root else style


def _read_edges(g: nx.MultiDiGraph, node: Expr, nid: str, program: Program, roots: dict[str, str]) -> None:
    """Edges into ``nid`` from the tensors it reads: an input's node, or an earlier definition's root
    (drawn from its cluster's border), and dashed from the index arrays of its index expressions."""
    reads: tuple[str, ...] = ()
    if isinstance(node, Access) and node.tensor != INDEX_VALUE:
        reads = (node.tensor,)
    elif isinstance(node, MatrixFn):
        reads = tuple(dict.fromkeys(node.args))
    for name in reads:
        if name in roots:
            g.add_edge(roots[name], nid, ltail=f"cluster_{name}", color="#b04020", penwidth="1.5")
        elif program.input(name) is not None:
            g.add_edge(name, nid, color="#2060a0")
    for name in index_reads(node_affines(node)):
        if name in roots or program.input(name) is not None:
            g.add_edge(roots.get(name, name), nid, style="dashed", color="#606060")


def loops_picture(program: LoopProgram) -> nx.DiGraph:
    """The L2 picture: buffers (ids their names) and kernels (ids ``kernel:name``), an edge from each
    buffer a kernel reads (dashed: an index array read in index expressions) and to each it writes."""
    g = nx.DiGraph(dot={"fontname": "Helvetica", "fontsize": "12"}, clusters={})
    styles = {"input": _INPUT_STYLE, "output": {"shape": "box", "style": "filled", "fillcolor": "#fde3c8"},
              "local": {"shape": "box"}, "temp": {"shape": "box", "style": "dotted"}}
    for b in program.buffers:
        shape = f"[{', '.join(format_affine(x) for x in b.shape)}]" if b.shape else ""
        kind = "index" if b.bound is not None else b.role
        g.add_node(b.name, label=f"{kind} {b.name}{shape}", **(_INDEX_STYLE if b.bound is not None else styles[b.role]))
    names = {b.name for b in program.buffers}
    for k in program.kernels:
        kid = f"kernel:{k.name}"
        ext = k.extern
        what = str(ext) if ext is not None else f"kernel {k.name}" + (" (parallel)" if k.parallel_loop else "")
        g.add_node(kid, label=what, shape="component", style="filled", fillcolor="#eeeeee")
        reads, indexed, writes = kernel_accesses(k, names)
        for name in reads:
            g.add_edge(name, kid)
        for name in indexed:
            g.add_edge(name, kid, style="dashed")
        for name in writes:
            g.add_edge(kid, name, penwidth="1.5")
    return g


def program_dot(program: Any) -> str:
    """DOT of an L1 :class:`~tcc.ir.program.Program` or an L2 :class:`~tcc.ir.loops.LoopProgram`."""
    if isinstance(program, Program):
        return write_dot(expression_picture(program))
    if isinstance(program, LoopProgram):
        return write_dot(loops_picture(program))
    raise TccError(f"--emit dot draws index (L1) and loop (L2) programs, not {type(program).__name__}: "
                   "end the pipeline before lower-llvm")
