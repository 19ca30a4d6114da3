"""Property tests: random programs with random affine index maps.

Each generated program is differentiated with respect to all of its inputs
and the derivative is checked against central finite differences by
:func:`tcc.check` (normwise relative error < 1e-6).  The index maps cover the
cases of sec. 5 of the Urban paper: strided (``x[2*i + 1]``), flipped
(``x[n - 1 - i]``), diagonal (``x[i, i]``), rank-deficient (``x[i + j]``,
``x[i - j + 3]``), constant indices (``x[0, j]``), one argument used with
several maps, nested sums and ``where`` guards.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, assume, example, given, note, settings, strategies as st

import tcc
from tcc.ir.diagnostics import TccError
from tcc.pipeline import run_pipeline
from tcc.sizes import extents_shape

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure here is a bug, never flakiness
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

TOL = 1e-6
MAX_MAGNITUDE = 8.0  # keep values (and so finite-difference round-off) moderate


# ---------------------------------------------------------------------------
# affine index expressions


def fmt_affine(coefs: dict[str, int], const: int) -> str:
    """``2*i - j + 3`` from ``{"i": 2, "j": -1}`` and 3 (size names may appear as variables)."""
    parts: list[str] = []
    for v, c in coefs.items():
        if c == 0:
            continue
        mag = "" if abs(c) == 1 else f"{abs(c)}*"
        if not parts:
            parts.append(("-" if c < 0 else "") + mag + v)
        else:
            parts.append((" - " if c < 0 else " + ") + mag + v)
    if const or not parts:
        if not parts:
            parts.append(str(const))
        else:
            parts.append((" - " if const < 0 else " + ") + str(abs(const)))
    return "".join(parts)


@dataclass
class Gen:
    """Builds one program; tracks, per input dimension, the largest index read."""

    draw: object
    ranks: dict[str, int]
    need: dict[str, list[int]] = field(default_factory=dict)
    sum_vars: list[str] = field(default_factory=lambda: ["k", "l", "m"])

    def __post_init__(self):
        self.need = {t: [0] * r for t, r in self.ranks.items()}

    # one row of an index map over the variables in scope (each with its range lo..hi)
    def row(self, scope: dict[str, tuple[int, int]], kind: str) -> tuple[dict[str, int], int, int]:
        d = self.draw
        names = list(scope)
        coefs = {v: 0 for v in names}
        if kind == "const" or not names:
            c = d(st.integers(0, 2))
            return {}, c, c
        if kind == "stride":
            coefs[d(st.sampled_from(names))] = d(st.sampled_from([2, 3]))
        elif kind == "flip":
            coefs[d(st.sampled_from(names))] = -1
        elif kind == "plain":
            coefs[d(st.sampled_from(names))] = 1
        else:  # a random combination (rank-deficient ones like i + j, i - j included)
            for v in names:
                coefs[v] = d(st.sampled_from([0, 0, 1, 1, -1, 2]))
        lo = sum(c * (scope[v][0] if c > 0 else scope[v][1]) for v, c in coefs.items())
        hi = sum(c * (scope[v][1] if c > 0 else scope[v][0]) for v, c in coefs.items())
        const = -lo + d(st.integers(0, 1))
        return coefs, const, hi + const

    def access(self, scope: dict[str, tuple[int, int]]) -> str:
        d = self.draw
        t = d(st.sampled_from(sorted(self.ranks)))
        rank = self.ranks[t]
        kind = d(st.sampled_from(["plain", "plain", "stride", "flip", "mixed", "diag", "const"]))
        rows = []
        for dim in range(rank):
            if kind == "diag" and dim > 0:
                rows.append(rows[0])
                continue
            row_kind = kind
            if kind == "const" and dim == rank - 1 and rank > 1:
                row_kind = "plain"  # x[0, j]
            if kind == "diag":
                row_kind = "plain"
            rows.append(self.row(scope, row_kind))
        for dim, (_, _, hi) in enumerate(rows):
            self.need[t][dim] = max(self.need[t][dim], hi)
        return f"{t}[{', '.join(fmt_affine(c, k) for c, k, _ in rows)}]"

    def cond(self, scope: dict[str, tuple[int, int]]) -> str:
        d = self.draw
        names = list(scope)
        a = d(st.sampled_from(names))
        b = d(st.sampled_from(names))
        op = d(st.sampled_from(["<=", "<", "==", "!=", ">="]))
        off = d(st.integers(-1, 2))
        c = f"{a} {op} {fmt_affine({b: 1}, off) if b != a else str(off + 1)}"
        if d(st.booleans()) and len(names) > 1:
            c2 = f"{d(st.sampled_from(names))} >= {d(st.integers(0, 1))}"
            c = f"{c} {d(st.sampled_from(['and', 'or']))} {c2}"
        return c

    def expr(self, scope: dict[str, tuple[int, int]], depth: int) -> tuple[str, float]:
        """An expression and an upper bound of its magnitude."""
        d = self.draw
        if depth <= 0:
            return self.access(scope), 0.75
        kind = d(st.sampled_from(["access", "unary", "unary", "binary", "binary", "sum", "where"]))
        if kind == "access":
            return self.access(scope), 0.75
        if kind == "unary":
            e, m = self.expr(scope, depth - 1)
            fn = d(st.sampled_from(["exp", "sin", "tanh", "sigmoid", "sq", "cube"]))
            if fn == "exp":
                if m > math.log(MAX_MAGNITUDE):
                    fn = "tanh"
                else:
                    return f"exp({e})", math.exp(m)
            if fn in ("sq", "cube"):
                p = 2 if fn == "sq" else 3
                if m**p > MAX_MAGNITUDE:
                    return f"sin({e})", 1.0
                return f"({e})**{p}", m**p
            return f"{fn}({e})", 1.0
        if kind == "binary":
            a, ma = self.expr(scope, depth - 1)
            op = d(st.sampled_from(["+", "-", "*", "/"]))
            if op == "/":
                den = self.access(scope)
                u = d(st.sampled_from(["exp", "sigmoid", "tanh"]))
                return f"{a} / (1 + {u}({den}))", ma
            b, mb = self.expr(scope, depth - 1)
            if op == "*":
                if ma * mb > MAX_MAGNITUDE:
                    op = "+"
                else:
                    return f"{a} * ({b})", ma * mb
            return f"{a} {op} ({b})", ma + mb
        if kind == "sum":
            free = [v for v in self.sum_vars if v not in scope]
            if not free:
                return self.access(scope), 0.75
            k = free[0]
            lo = d(st.integers(0, 1))
            hi = lo + d(st.integers(0, 2))
            hi_text = str(hi)
            if scope and d(st.booleans()):
                # a triangular range: sum[k: lo..v + c] with v an enclosing index
                v = d(st.sampled_from(sorted(scope)))
                c = d(st.integers(0, 1))
                hi_text = fmt_affine({v: 1}, c)
                hi = max(lo, scope[v][1] + c)
            body, mb = self.expr({**scope, k: (lo, hi)}, depth - 1)
            n = hi - lo + 1
            if n * mb > MAX_MAGNITUDE:
                return f"sum[{k}: {lo}..{hi_text}]({body}) / {n}", mb
            return f"sum[{k}: {lo}..{hi_text}]({body})", n * mb
        # where
        if not scope:
            return self.access(scope), 0.75
        c = self.cond(scope)
        a, ma = self.expr(scope, depth - 1)
        b, mb = self.expr(scope, depth - 1) if d(st.booleans()) else ("0", 0.0)
        return f"where({c}, {a}, {b})", max(ma, mb)


@st.composite
def programs(draw):
    """A program with explicit, consistent extents: (text, wrt)."""
    n_inputs = draw(st.integers(1, 3))
    names = ["x", "y", "z"][:n_inputs]
    ranks = {t: draw(st.integers(1, 2)) for t in names}
    rank_f = draw(st.integers(0, 2))
    out_idx = ["i", "j"][:rank_f]
    out_ext = {v: draw(st.integers(1, 4)) for v in out_idx}
    g = Gen(draw, ranks)
    scope = {v: (0, e - 1) for v, e in out_ext.items()}
    depth = draw(st.integers(1, 3))
    body, _ = g.expr(scope, depth)
    # several uses of one argument: add a second term reading an input again
    if draw(st.booleans()):
        extra, _ = g.expr(scope, 1)
        body = f"{body} {draw(st.sampled_from(['+', '*']))} ({extra})"
    decls = []
    for t in names:
        exts = [hi + 1 + draw(st.integers(0, 1)) for hi in g.need[t]]
        decls.append(f"{t}[{', '.join(map(str, exts))}]")
    lines = ["input " + ", ".join(decls)]
    if rank_f:
        lines.append(f"output f[{', '.join(str(out_ext[v]) for v in out_idx)}]")
        lines.append(f"f[{', '.join(out_idx)}] = {body}")
    else:
        lines.append(f"f = {body}")
    return "\n".join(lines) + "\n", names


def check_all(text: str, wrt, sizes=None):
    note(text)
    results = tcc.check(text, "f", wrt, sizes=sizes, tol=TOL)
    failed = [r for r in results if not r.ok]
    if failed:
        # tell finite-difference noise from a wrong derivative: a right one passes at some step
        for eps in (1e-5, 1e-4):
            again = tcc.check(text, "f", [r.wrt for r in failed], sizes=sizes, tol=TOL, eps=eps)
            failed = [r for r in again if not r.ok]
            if not failed:
                break
    grad = str(tcc.grad(text, of="f", wrt=wrt))
    note(grad)
    assert not failed, "\n".join(str(r) for r in failed) + "\n" + grad
    # the derivative prints in the language and parses back to the same text
    assert str(tcc.parse(grad, filename="<grad>")) == grad
    return results


@SETTINGS
@given(programs())
def test_random_programs(prog):
    text, wrt = prog
    check_all(text, wrt)


# ---------------------------------------------------------------------------
# inferred extents and symbolic sizes


@st.composite
def inferred_programs(draw):
    """Programs without an output declaration over symbolic sizes: (text, wrt, sizes).

    infer-ranges picks f's extent (and the ranges of bare sums); programs it
    rejects are assumed away.
    """
    ranks = {"x": draw(st.integers(1, 2)), "y": draw(st.integers(1, 2))}
    size_of = {"x": ["n", "n"] if draw(st.booleans()) else ["n", "p"], "y": ["m", "m"] if draw(st.booleans()) else ["m", "n"]}
    rank_f = draw(st.integers(1, 2))
    out_idx = ["i", "j"][:rank_f]

    def access(scope):
        t = draw(st.sampled_from(["x", "y"]))
        rows = []
        kind = draw(st.sampled_from(["plain", "flip", "stride", "sum", "diff", "diag", "const"]))
        for dim in range(ranks[t]):
            v = draw(st.sampled_from(scope))
            if kind == "diag" and rows:
                rows.append(rows[0])
            elif kind == "flip":
                rows.append(f"{size_of[t][dim]} - 1 - {v}")
            elif kind == "stride":
                rows.append(f"2*{v} + {draw(st.integers(0, 1))}")
            elif kind == "sum" and len(scope) > 1:
                rows.append(" + ".join(scope))
            elif kind == "diff" and len(scope) > 1:
                rows.append(f"{scope[0]} - {scope[1]} + {draw(st.integers(2, 3))}")
            elif kind == "const" and dim == 0 and ranks[t] > 1:
                rows.append("0")
            else:
                rows.append(v)
        return f"{t}[{', '.join(rows)}]"

    def expr(scope, depth):
        if depth == 0:
            return access(scope)
        kind = draw(st.sampled_from(["fn", "bin", "sum", "where"]))
        if kind == "fn":
            fn = draw(st.sampled_from(["exp", "sin", "tanh", "sigmoid"]))
            return f"{fn}({expr(scope, depth - 1)})"
        if kind == "bin":
            op = draw(st.sampled_from(["+", "-", "*"]))
            return f"{expr(scope, depth - 1)} {op} ({expr(scope, depth - 1)})"
        if kind == "sum" and "k" not in scope:
            body = expr(scope + ["k"], depth - 1)
            if "k" not in body.replace("sigmoid", "").replace("tanh", ""):
                return body
            return f"tanh(sum[k]({body}))"
        if kind == "where" and len(scope) > 1:
            return f"where({scope[0]} <= {scope[1]}, {expr(scope, depth - 1)}, {access(scope)})"
        return f"({expr(scope, depth - 1)})**2"

    # every output index must be bounded by some access: start with a product of plain reads
    body = expr(out_idx, draw(st.integers(1, 2)))
    anchors = " * ".join(f"sigmoid(x[{v}])" if ranks["x"] == 1 else f"sigmoid(x[{v}, 0])" for v in out_idx)
    body = f"{anchors} * ({body})"
    decls = ", ".join(f"{t}[{', '.join(size_of[t][:ranks[t]])}]" for t in ("x", "y"))
    text = f"input {decls}\nf[{', '.join(out_idx)}] = {body}\n"
    sizes = {s: draw(st.integers(1, 5)) for s in ("n", "m", "p")}
    return text, ["x", "y"], sizes


@SETTINGS
@given(inferred_programs())
def test_inferred_extents(prog):
    text, wrt, sizes = prog
    note(text)
    try:
        program = run_pipeline(tcc.parse(text), "infer-ranges")
    except TccError as err:
        # a program infer-ranges rejects (an access it cannot prove in bounds, extents it cannot order)
        note(err.message)
        assume(False)
        raise
    used = set(program.sizes())
    sizes = {k: v for k, v in sizes.items() if k in used}
    note(str(program))
    note(repr(sizes))
    shapes = [extents_shape(d.extents, sizes) for d in program.definitions]
    assume(all(all(s >= 1 for s in shape) for shape in shapes))
    for decl in program.inputs:
        assume(all(s >= 1 for s in extents_shape(decl.extents, sizes)))
    check_all(text, wrt, sizes=sizes)


# ---------------------------------------------------------------------------
# targeted families with one free parameter each


@SETTINGS
@given(
    stride=st.integers(1, 3),
    offset=st.integers(0, 2),
    extra=st.integers(0, 2),
    fn=st.sampled_from(["exp", "sin", "tanh", "sigmoid"]),
    flip=st.booleans(),
)
def test_strided_flipped(stride, offset, extra, fn, flip):
    # f[i] = fn(x[s*i + o]) * x[N - 1 - i] (or x[i]) with a concrete N
    n_f = 3
    n = stride * (n_f - 1) + offset + 1 + extra
    second = f"x[{n - 1} - i]" if flip else "x[i]"
    text = f"input x[{n}]\noutput f[{n_f}]\nf[i] = {fn}(x[{fmt_affine({'i': stride}, offset)}]) * {second}\n"
    check_all(text, ["x"])


@SETTINGS
@given(
    a=st.integers(-2, 2),
    b=st.integers(-2, 2),
    fn=st.sampled_from(["exp", "sin", "tanh", "sigmoid", "sq", "cube"]),
    guard=st.sampled_from([None, "i <= j", "i == j", "i != j + 1", "i + j >= 2"]),
    ext=st.tuples(st.integers(1, 4), st.integers(1, 4)),
)
def test_rank_deficient_2d(a, b, fn, guard, ext):
    # f[i, j] = g(x[a*i + b*j + c]) with c shifting the range to start at 0
    assume(a != 0 or b != 0)
    ni, nj = ext
    lo = min(0, a * (ni - 1)) + min(0, b * (nj - 1))
    hi = max(0, a * (ni - 1)) + max(0, b * (nj - 1))
    idx = fmt_affine({"i": a, "j": b}, -lo)
    acc = f"x[{idx}]"
    body = {"sq": f"{acc}**2", "cube": f"{acc}**3"}.get(fn, f"{fn}({acc})")
    if guard:
        body = f"where({guard}, {body}, y[i, j])"
    text = f"input x[{hi - lo + 1}], y[{ni}, {nj}]\noutput f[{ni}, {nj}]\nf[i, j] = {body}\n"
    check_all(text, ["x", "y"])


@SETTINGS
@given(
    n=st.integers(1, 6),
    m=st.integers(1, 4),
    kind=st.sampled_from(["diag", "row0", "col_const", "transpose"]),
)
def test_matrix_maps_symbolic(n, m, kind):
    # maps of a matrix argument with symbolic sizes, checked at a random binding
    body = {
        "diag": "f[i] = sin(x[i, i]) * sum[k](x[i, k] * y[k])",
        "row0": "f[i] = exp(x[0, i]) + x[i, i]**2",
        "col_const": "f[i] = tanh(sum[k](x[k, i] * y[k])) * x[i, 0]",
        "transpose": "f[i, j] = x[i, j] * x[j, i]",
    }[kind]
    text = f"input x[n, n], y[n]\n{body}\n"
    check_all(text, ["x", "y"], sizes={"n": n})
    del m


@SETTINGS
@example(m=3, rows=4, extra=2, fn="exp")
@given(m=st.integers(1, 3), rows=st.integers(1, 4), extra=st.integers(0, 2), fn=st.sampled_from(["exp", "sin"]))
def test_linear_combination_bijection(m, rows, extra, fn):
    # sec. 5: f[i, j] = fn(x[M*i + j]) with j in 0..M-1, dx[p] = df[p // M, p % M] fn'(x[p])
    text = f"input x[{m * rows + extra}]\noutput f[{rows}, {m}]\nf[i, j] = {fn}(x[{fmt_affine({'i': m, 'j': 1}, 0)}])\n"
    grad = str(tcc.grad(text, of="f", wrt=["x"]))
    assert "sum[" not in grad.splitlines()[-1]
    check_all(text, ["x"])
