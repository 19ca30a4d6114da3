"""Pictures of programs (``--emit dot``): the DOT text parsed back into a networkx graph and checked.

The parser below reads the subset of DOT that :mod:`tcc.ir.dot` writes
(quoted identifiers, ``subgraph`` clusters, attribute lists, ``->`` edges,
``#`` comment lines), so the tests need neither pydot nor Graphviz.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from tcc.cli.driver import main
from tcc.ir.dot import program_dot, quote
from tcc.ir.expr import postorder
from tcc.ir.graph import definition_graph, kernel_graph, live_definitions
from tcc.ir.parser import parse_source
from tcc.pipeline import run_pipeline

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
URBAN = EXAMPLES / "urban.tcc"
LAYER_NORM = EXAMPLES / "layer_norm.tcc"
SHARED = """input x[n]
output y[n]
y[i] = exp(x[i]) * exp(x[i]) + exp(x[i])
"""

# ---------------------------------------------------------------------------
# a parser for the DOT that tcc writes
# ---------------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<arrow>->)|(?P<punct>[{}\[\];,=])|(?P<id>[A-Za-z_][\w.]*))')


def _tokens(text: str) -> list[str]:
    text = "\n".join(line for line in text.splitlines() if not line.startswith("#"))  # dump headers
    out, pos = [], 0
    while text[pos:].strip():
        m = _TOKEN.match(text, pos)
        assert m is not None, f"cannot tokenize DOT at {text[pos:pos + 40]!r}"
        out.append(m.group(m.lastgroup))
        pos = m.end()
    return out


def _unquote(tok: str) -> str:
    if not tok.startswith('"'):
        return tok
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), tok[1:-1])


class _Reader:
    def __init__(self, tokens: list[str]) -> None:
        self.toks, self.pos = tokens, 0

    def next(self) -> str:
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def peek(self) -> str:
        return self.toks[self.pos]

    def attrs(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.peek() != "[":
            return out
        self.next()
        while self.peek() != "]":
            key = _unquote(self.next())
            assert self.next() == "="
            out[key] = _unquote(self.next())
            if self.peek() == ",":
                self.next()
        self.next()
        return out


def parse_dot(text: str) -> nx.MultiDiGraph:
    """The graph: nodes with their attributes and ``cluster`` (the subgraph they are drawn in),
    edges with theirs; ``graph.graph["clusters"]`` maps each cluster to its attributes."""
    r = _Reader(_tokens(text))
    assert r.next() == "digraph"
    g = nx.MultiDiGraph(name=_unquote(r.next()), clusters={})
    assert r.next() == "{"
    stack: list[str | None] = [None]
    while stack:
        tok = r.next()
        if tok == "}":
            stack.pop()
        elif tok == "subgraph":
            name = _unquote(r.next())
            assert r.next() == "{"
            g.graph["clusters"][name] = {}
            stack.append(name)
        elif tok in ("graph", "node", "edge"):
            r.attrs()
            assert r.next() == ";"
        else:
            first = _unquote(tok)
            if r.peek() == "=":  # a cluster attribute
                r.next()
                g.graph["clusters"][stack[-1]][first] = _unquote(r.next())
            elif r.peek() == "->":
                r.next()
                second = _unquote(r.next())
                g.add_edge(first, second, **r.attrs())
            else:
                g.add_node(first, cluster=stack[-1], **r.attrs())
            assert r.next() == ";"
    assert r.pos == len(r.toks), "text after the graph"
    return g


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def _in(g: nx.MultiDiGraph, cluster: str) -> list[str]:
    return [n for n, c in g.nodes(data="cluster") if c == cluster]


def _labels(g: nx.MultiDiGraph, nodes: list[str]) -> list[str]:
    return [g.nodes[n]["label"] for n in nodes]


def _cluster_reads(g: nx.MultiDiGraph) -> set[tuple[str, str]]:
    """(read definition, reading definition) for every edge drawn from a cluster's border."""
    return {(d["ltail"].removeprefix("cluster_"), g.nodes[v]["cluster"].removeprefix("cluster_"))
            for _, v, d in g.edges(data=True) if "ltail" in d}


def _program(path: Path, passes: str = "infer-ranges"):
    return run_pipeline(parse_source(path.read_text(), str(path)), passes)


# ---------------------------------------------------------------------------
# L1 pictures
# ---------------------------------------------------------------------------


def test_compile_emit_dot_urban(capsys):
    rc, out, err = _cli(["compile", str(URBAN), "--emit", "dot"], capsys)
    assert (rc, err) == (0, "")
    g = parse_dot(out)
    assert g.graph["clusters"] == {"cluster_f": {"label": "output f[i, j] : [3, 4]", "style": "rounded,filled",
                                                 "fillcolor": "#fbfbf5", "color": "#8c8c8c"}}
    inputs = [n for n, c in g.nodes(data="cluster") if c is None]
    assert _labels(g, inputs) == ["input a[3, 5]", "input b[4, 5]", "input c[3, 3]", "input d[8]"]
    body = _in(g, "cluster_f")
    assert len(body) == 14  # the distinct subexpressions of f
    assert [g.nodes[n]["label"] for n in g.successors("a")] == ["a[i, k]"]
    assert [g.nodes[n]["label"] for n in g.successors("d")] == ["d[i + k]"]
    (root,) = [n for n in body if g.nodes[n].get("peripheries") == "2"]
    assert g.nodes[root]["label"] == "exp" and g.out_degree(root) == 0
    # the power's operands are labelled: (a + b) is the base, 2 the exponent
    pow_edges = sorted((g.nodes[u]["label"], d["label"]) for u, v, d in g.edges(data=True)
                       if g.nodes[v]["label"] == "**" and g.nodes[u]["label"] in ("+", "2"))
    assert pow_edges == [("+", "base"), ("2", "exp")]


def test_shared_subexpression_drawn_once(tmp_path, capsys):
    src = tmp_path / "shared.tcc"
    src.write_text(SHARED)
    rc, out, _ = _cli(["compile", str(src), "--emit", "dot"], capsys)
    assert rc == 0
    g = parse_dot(out)
    body = _in(g, "cluster_y")
    assert sorted(_labels(g, body)) == ["*", "+", "exp", "x[i]"]  # exp(x[i]) three times in the text, one node
    (exp,) = [n for n in body if g.nodes[n]["label"] == "exp"]
    uses = sorted(g.nodes[v]["label"] for _, v in g.out_edges(exp))
    assert uses == ["*", "*", "+"]  # an edge per use: both operands of the product, one of the sum


def test_reads_of_definitions_are_edges_between_clusters(capsys):
    rc, out, _ = _cli(["compile", str(LAYER_NORM), "--emit", "dot"], capsys)
    assert rc == 0
    g = parse_dot(out)
    assert list(g.graph["clusters"]) == ["cluster_mu", "cluster_xc", "cluster_r", "cluster_Y"]
    assert g.graph["clusters"]["cluster_mu"]["label"] == "local mu[a] : [n]"
    assert _cluster_reads(g) == {("mu", "xc"), ("xc", "r"), ("xc", "Y"), ("r", "Y")}
    # drawn from the root of the read definition's DAG
    for u, _, d in g.edges(data=True):
        if "ltail" in d:
            assert g.nodes[u]["cluster"] == d["ltail"] and g.nodes[u]["peripheries"] == "2"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.tcc")), ids=lambda p: p.stem)
def test_every_example_one_node_per_distinct_subexpression(path):
    program = _program(path)
    g = parse_dot(program_dot(program))
    graph = definition_graph(program)
    for d in program.definitions:
        assert len(_in(g, f"cluster_{d.name}")) == len(postorder(d.body))
    defs = {d.name for d in program.definitions}
    value_reads = {(u, v) for u, v, how in graph.edges(data="how") if how == "value" and u in defs}
    assert _cluster_reads(g) == value_reads


def test_index_arrays_are_dashed_edges(capsys):
    rc, out, _ = _cli(["compile", str(EXAMPLES / "csr_spmv.tcc"), "--emit", "dot"], capsys)
    assert rc == 0
    g = parse_dot(out)
    assert g.nodes["ptr"]["label"] == "index ptr[m + 1] <= nnz"
    assert g.nodes["col"]["label"] == "index col[nnz] < n"
    dashed = sorted((u, g.nodes[v]["label"]) for u, v, d in g.edges(data=True) if d.get("style") == "dashed")
    assert dashed == [("col", "x[col[k]]"), ("ptr", "sum[k: ptr[i]..ptr[i + 1] - 1]")]


def test_grad_emit_dot(capsys):
    rc, out, err = _cli(["grad", str(URBAN), "--of", "f", "--wrt", "a,d", "--emit", "dot"], capsys)
    assert (rc, err) == (0, "")
    g = parse_dot(out)
    labels = {c: a["label"] for c, a in g.graph["clusters"].items()}
    assert labels == {"cluster_f": "local f[i, j] : [3, 4]", "cluster_da": "output da[da_0, da_1] : [3, 5]",
                      "cluster_dd": "output dd[dd_0] : [8]"}
    assert _cluster_reads(g) == {("f", "da"), ("f", "dd")}
    assert g.nodes["df"]["label"] == "input df[3, 4]"
    # the same program as text, drawn: the picture of the printed derivative
    rc, text, _ = _cli(["grad", str(URBAN), "--of", "f", "--wrt", "a,d"], capsys)
    assert program_dot(parse_source(text, "<grad>")) == out


def test_hessian_emit_dot(capsys):
    rc, out, err = _cli(["hessian", str(URBAN), "--of", "f", "--wrt", "d", "--emit", "dot"], capsys)
    assert (rc, err) == (0, "")
    assert len(parse_dot(out).graph["clusters"]) >= 2


def test_dump_after_as_dot(tmp_path, capsys):
    rc, out, err = _cli(["grad", str(URBAN), "--of", "f", "--wrt", "a", "--emit", "dot",
                         "--dump-after", "autodiff,simplify"], capsys)
    assert rc == 0
    parts = re.split(r"^(# -----// IR after .* //----- #)\n", err, flags=re.M)
    assert parts[0] == "" and [p.split(" ")[4] for p in parts[1::2]] == ["autodiff{of=f", "simplify"]
    after_autodiff, after_simplify = (parse_dot(p) for p in parts[2::2])
    assert "cluster_da" in after_autodiff.graph["clusters"] and "cluster_da" in after_simplify.graph["clusters"]
    parse_dot(out)
    # --dump-dir: numbered .dot files, each a graph (its header a comment line)
    dump = tmp_path / "dumps"
    rc, _, _ = _cli(["compile", str(URBAN), "--emit", "dot", "--dump-dir", str(dump)], capsys)
    assert rc == 0
    assert sorted(os.listdir(dump)) == ["00-input.dot", "01-infer-ranges.dot"]
    assert "cluster_f" in parse_dot((dump / "01-infer-ranges.dot").read_text()).graph["clusters"]


def test_deterministic_across_processes(tmp_path):
    """Byte-identical DOT from two processes with different string hashing."""
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run([sys.executable, "-m", "tcc", "grad", str(LAYER_NORM), "--of", "Y", "--wrt", "X,g",
                              "--emit", "dot"], capture_output=True, text=True, env=env, check=True)
        outs.append(res.stdout)
    assert outs[0] == outs[1] and outs[0].startswith('digraph "tcc" {')


# ---------------------------------------------------------------------------
# L2 pictures: kernels between buffers
# ---------------------------------------------------------------------------


def test_loops_emit_dot_kernels_and_buffers(capsys):
    rc, out, err = _cli(["compile", str(LAYER_NORM), "--emit", "dot", "--passes", "infer-ranges,lower-loops"], capsys)
    assert (rc, err) == (0, "")
    g = parse_dot(out)
    kernels = [n for n in g.nodes if n.startswith("kernel:")]
    assert kernels == ["kernel:mu", "kernel:xc", "kernel:r", "kernel:Y"]
    assert g.nodes["X"]["label"] == "input X[n, m]" and g.nodes["Y"]["label"] == "output Y[n, m]"
    assert sorted(g.predecessors("kernel:xc")) == ["X", "mu"]
    assert list(g.successors("kernel:xc")) == ["xc"]
    program = _program(LAYER_NORM, "infer-ranges,lower-loops")
    assert [(u, v, b) for u, v, b in kernel_graph(program).edges(data="buffers")] == [
        ("mu", "xc", ("mu",)), ("xc", "r", ("xc",)), ("xc", "Y", ("xc",)), ("r", "Y", ("r",))]


def test_loops_dot_after_fusion(capsys):
    rc, out, _ = _cli(["compile", str(LAYER_NORM), "--emit", "dot", "--passes",
                       "infer-ranges,lower-loops,fuse-rows,parallel"], capsys)
    assert rc == 0
    g = parse_dot(out)
    (kernel,) = [n for n in g.nodes if n.startswith("kernel:")]
    assert g.nodes[kernel]["label"] == "kernel mu_xc_r_Y (parallel)"
    assert sorted(g.successors(kernel)) == ["Y", "mu", "r", "xc"]


# ---------------------------------------------------------------------------
# errors, escaping, the graphs passes use
# ---------------------------------------------------------------------------


def test_emit_dot_refuses_llvm_level(capsys):
    rc, out, err = _cli(["compile", str(URBAN), "--emit", "dot", "--passes", "infer-ranges,lower-loops,lower-llvm"],
                        capsys)
    assert (rc, out) == (1, "")
    assert err == "error: --emit dot needs a pipeline that stays at the index level or ends at the loop level\n"
    rc, _, err = _cli(["grad", str(URBAN), "--of", "f", "--wrt", "a", "--emit", "loops"], capsys)
    assert rc == 1 and "argument --emit: invalid choice: 'loops'" in err and "Traceback" not in err


def test_program_dot_refuses_other_objects():
    from tcc.ir.diagnostics import TccError

    with pytest.raises(TccError) as info:
        program_dot("not a program")
    assert info.value.message == ("--emit dot draws index (L1) and loop (L2) programs, not str: "
                                  "end the pipeline before lower-llvm")


def test_quote_escapes_and_parses_back():
    text = 'sum "a\\l" \\n\nend'
    assert quote(text) == '"sum \\"a\\\\l\\" \\\\n\\nend"'
    assert _unquote(quote(text)) == text


def test_live_definitions_are_the_results_ancestors():
    program = parse_source("input x[n]\noutput y[n]\nlocal u[n], w[n], z[n]\nu[i] = x[i] + 1\nw[i] = u[i] * 2\n"
                           "z[i] = x[i]\ny[i] = w[i] + x[i]\n", "<p>")
    assert live_definitions(program) == {"u", "w", "y"}
    simplified = run_pipeline(program, "infer-ranges,simplify")
    assert [d.name for d in simplified.definitions] == ["u", "w", "y"]


def test_definition_graph_edges():
    program = _program(LAYER_NORM)
    g = definition_graph(program)
    assert list(g.nodes(data="kind")) == [("X", "input"), ("g", "input"), ("b", "input"), ("mu", "definition"),
                                          ("xc", "definition"), ("r", "definition"), ("Y", "definition")]
    assert sorted(g.edges) == [("X", "mu"), ("X", "xc"), ("b", "Y"), ("g", "Y"), ("mu", "xc"), ("r", "Y"),
                               ("xc", "Y"), ("xc", "r")]  # no node for `m` used as a number (#index)
    csr = definition_graph(_program(EXAMPLES / "csr_spmv.tcc"))
    assert sorted(csr.in_edges("y", data="how")) == [("col", "y", "index"), ("ptr", "y", "index"),
                                                     ("val", "y", "value"), ("x", "y", "value")]


@pytest.mark.parametrize("args, clusters", [
    (["compile", str(URBAN)], 1),
    (["grad", str(URBAN), "--of", "f", "--wrt", "a,d"], 3),
    (["compile", str(LAYER_NORM), "--passes", "infer-ranges,lower-loops"], 0),
], ids=["urban", "urban-grad", "layer_norm-kernels"])
def test_graphviz_renders_without_warnings(args, clusters, capsys):
    """Graphviz itself reads the text (clusters, compound edges) without a complaint; needs its `dot`."""
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed (apt install graphviz)")
    assert main([*args, "--emit", "dot"]) == 0
    res = subprocess.run(["dot", "-Tsvg"], input=capsys.readouterr().out, capture_output=True, text=True)
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout.count('class="cluster"') == clusters
