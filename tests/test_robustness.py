"""Bad input never crashes: random, mostly ill-formed programs through the whole pipeline.

Programs are built from a small grammar with random names, arities, index
expressions, ranges and guards, so most of them are wrong in some way
(undeclared tensors, wrong arity, unbound or shadowing indices, out-of-bounds
reads, uninferable extents).  Parsing, inference and differentiation must
either succeed or raise :class:`TccError` — never another exception.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

import tcc
from tcc.ir.diagnostics import TccError

NAMES = ["x", "y", "s", "f", "g"]
INDICES = ["i", "j", "k", "n"]


@st.composite
def index_exprs(draw) -> str:
    terms = draw(st.lists(st.tuples(st.integers(-3, 3), st.sampled_from(INDICES)), min_size=0, max_size=2))
    const = draw(st.integers(-3, 3))
    text = " + ".join(f"{c}*{v}" for c, v in terms if c) or "0"
    text = f"{text} + {const}"
    if draw(st.booleans()):
        text = f"({text}) // {draw(st.integers(1, 3))}"
    return text


@st.composite
def exprs(draw, depth: int = 0) -> str:
    choice = draw(st.integers(0, 6 if depth < 3 else 1))
    if choice == 0:
        return str(draw(st.integers(0, 3)))
    if choice == 1:
        name = draw(st.sampled_from(NAMES))
        arity = draw(st.integers(0, 2))
        if arity == 0:
            return name
        return f"{name}[{', '.join(draw(index_exprs()) for _ in range(arity))}]"
    if choice == 2:
        op = draw(st.sampled_from(["+", "-", "*", "/", "**"]))
        return f"({draw(exprs(depth + 1))} {op} {draw(exprs(depth + 1))})"
    if choice == 3:
        fn = draw(st.sampled_from(["exp", "log", "sin", "tanh", "sigmoid", "relu", "abs"]))
        return f"{fn}({draw(exprs(depth + 1))})"
    if choice == 4:
        var = draw(st.sampled_from(["k", "l", "i"]))
        if draw(st.booleans()):
            return f"sum[{var}]({draw(exprs(depth + 1))})"
        lo, hi = draw(st.integers(-1, 2)), draw(st.integers(0, 4))
        return f"sum[{var}: {lo}..{hi}]({draw(exprs(depth + 1))})"
    if choice == 5:
        op = draw(st.sampled_from(["==", "<=", "<", "!="]))
        cond = f"{draw(index_exprs())} {op} {draw(index_exprs())}"
        return f"where({cond}, {draw(exprs(depth + 1))}, {draw(exprs(depth + 1))})"
    var = draw(st.sampled_from(["k", "l"]))
    return f"sum[{var} | {var} >= 0, {var} < 3]({draw(exprs(depth + 1))})"


@st.composite
def programs(draw) -> str:
    lines = []
    decls = []
    for name in ("x", "y", "s"):
        if draw(st.booleans()):
            dims = draw(st.lists(st.sampled_from(["3", "4", "n", "n + 1"]), min_size=0, max_size=2))
            decls.append(f"{name}[{', '.join(dims)}]" if dims else name)
    if decls:
        lines.append("input " + ", ".join(decls))
    if draw(st.booleans()):
        lines.append(f"output f[{draw(st.sampled_from(['3', 'n', '2, 2']))}]")
    lhs = draw(st.sampled_from(["f[i]", "f[i, j]", "f", "f[i, i]"]))
    lines.append(f"{lhs} = {draw(exprs())}")
    if draw(st.booleans()):
        lines.append(f"g = {draw(exprs())}")
    return "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_pipeline_raises_only_tcc_errors(text):
    try:
        program = tcc.parse(text)
        inferred = tcc.transform(program, "infer-ranges")
        wrt = [d.name for d in inferred.inputs if not d.is_index]
        if wrt:
            tcc.grad(inferred, of=inferred.definitions[0].name, wrt=wrt)
    except TccError:
        pass
