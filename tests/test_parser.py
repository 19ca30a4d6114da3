"""Parser of the tcc language: structure, locations, errors, printer inversion, fuzzing."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tcc.ir.diagnostics import TccError
from tcc.ir.expr import UNARY_FUNCTIONS, Access, Binary, Const, CSum, Expr, Sum, Unary, Where, postorder
from tcc.ir.index import Affine, And, Compare, FloorDiv, Mod, Not, Or
from tcc.ir.parser import parse_cond, parse_expr, parse_index, parse_program
from tcc.ir.printer import format_expr, format_program
from tcc.ir.program import Loc

SEED = (
    "input  a[3, 5], b[4, 5], c[3, 3], d[8]\n"
    "output f[3, 4]\n"
    "f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))"
)
SEED_PRINTED = (
    "input a[3, 5], b[4, 5], c[3, 3], d[8]\n"
    "output f[3, 4]\n"
    "f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))\n"
)

V = Affine.var


def A(name: str, *idx: Affine) -> Access:
    return Access(name, tuple(idx))


# ---------------------------------------------------------------------------
# Structure
# ---------------------------------------------------------------------------


def test_seed_example_prints_exactly():
    p = parse_program(SEED, "urban.tcc")
    assert format_program(p) == SEED_PRINTED
    assert str(p) == SEED_PRINTED
    assert [d.name for d in p.inputs] == ["a", "b", "c", "d"]
    assert p.inputs[3].extents == (Affine.constant(8),)
    assert p.outputs == ("f",)
    (f,) = p.definitions
    assert f.name == "f" and f.indices == ("i", "j")
    assert f.extents == (Affine.constant(3), Affine.constant(4))
    i, j, k = V("i"), V("j"), V("k")
    inner = Binary(
        "+",
        Binary("*", Binary("**", Binary("+", A("a", i, k), A("b", j, k)), Const(2)), A("c", i, i)),
        Binary("**", A("d", i + k), Const(3)),
    )
    expected = Unary("exp", Unary("neg", Sum("k", (Affine.constant(0),), (Affine.constant(4),), inner)))
    assert f.body is expected


def test_seed_locations():
    p = parse_program(SEED, "urban.tcc")
    assert p.source.filename == "urban.tcc" and p.source.text == SEED
    assert [d.loc for d in p.inputs] == [Loc(1, 8), Loc(1, 17), Loc(1, 26), Loc(1, 35)]
    f = p.definitions[0]
    assert f.loc == Loc(3, 1)
    nodes = p.source.nodes
    sum_node = f.body.operand.operand
    assert nodes[sum_node] == Loc(3, 16)
    i, k = V("i"), V("k")
    assert nodes[A("a", i, k)] == Loc(3, 30)
    assert nodes[A("d", i + k)] == Loc(3, 64)
    assert p.loc_of(A("c", i, i)) == Loc(3, 54)


def test_hash_consing_shares_repeated_subexpressions():
    p = parse_program("input x[4]\nf[i] = x[i] * x[i]\n")
    body = p.definitions[0].body
    assert isinstance(body, Binary) and body.lhs is body.rhs
    # only the first occurrence is recorded
    assert p.source.nodes[body.lhs] == Loc(2, 8)


def test_first_location_of_shared_node_across_definitions():
    p = parse_program("input x\ng = x + 1\nh = 2 * x\n")
    assert p.source.nodes[Access("x", ())] == Loc(2, 5)


def test_negative_constants_and_precedence():
    x, y, z = Access("x", ()), Access("y", ()), Access("z", ())
    assert parse_expr("-3 * x") is Binary("*", Const(-3), x)
    assert parse_expr("x * -3") is Binary("*", x, Const(-3))
    assert parse_expr("(-3)**2") is Binary("**", Const(-3), Const(2))
    assert parse_expr("-3**2") is Unary("neg", Binary("**", Const(3), Const(2)))
    assert parse_expr("x**-1") is Binary("**", x, Const(-1))
    assert parse_expr("x**-1**2") is Binary("**", x, Unary("neg", Binary("**", Const(1), Const(2))))
    assert parse_expr("2 - -1") is Binary("-", Const(2), Const(-1))
    assert parse_expr("-0.5") is Const(-0.5)
    assert parse_expr("-x") is Unary("neg", x)
    assert parse_expr("--3") is Unary("neg", Const(-3))
    assert parse_expr("-(3)") is Unary("neg", Const(3))
    assert parse_expr("x - y - z") is Binary("-", Binary("-", x, y), z)
    assert parse_expr("x - (y - z)") is Binary("-", x, Binary("-", y, z))
    assert parse_expr("x / (y * z)") is Binary("/", x, Binary("*", y, z))
    assert parse_expr("x ** y ** z") is Binary("**", x, Binary("**", y, z))
    assert parse_expr("(x ** y) ** z") is Binary("**", Binary("**", x, y), z)
    assert parse_expr("-x * y") is Binary("*", Unary("neg", x), y)
    assert parse_expr("-x ** y") is Unary("neg", Binary("**", x, y))
    assert parse_expr("x + y * z") is Binary("+", x, Binary("*", y, z))


def test_numbers():
    assert parse_expr("3") is Const(3)
    for text, value in [("0.5", 0.5), ("1e-10", 1e-10), ("2.0", 2.0), ("2.", 2.0), (".5", 0.5), ("2.5E+2", 250.0)]:
        c = parse_expr(text)
        assert isinstance(c, Const) and isinstance(c.value, float) and c.value == value, text
    assert parse_expr("2.0") is not parse_expr("2")


def test_functions_where_and_sums():
    x = Access("x", ())
    for fn in UNARY_FUNCTIONS:
        assert parse_expr(f"{fn}(x)") is Unary(fn, x)
    i, j, b = V("i"), V("j"), V("b")
    e = parse_expr("sum[i, j | 0 <= i, i <= 2 or j > 1, i + j == b](x[i, j])")
    assert e is CSum(
        ("i", "j"),
        (
            Compare("<=", Affine.constant(0), i),
            Or((Compare("<=", i, Affine.constant(2)), Compare(">", j, Affine.constant(1)))),
            Compare("==", i + j, b),
        ),
        A("x", i, j),
    )
    e = parse_expr("sum[z1: max(0, b - 2)..min(4, b), z0: 0..z1](x[z1, z0])")
    z0, z1 = V("z0"), V("z1")
    assert e is Sum(
        "z1",
        (Affine.constant(0), b - 2),
        (Affine.constant(4), b),
        Sum("z0", (Affine.constant(0),), (z1,), A("x", z1, z0)),
    )
    assert parse_expr("sum[k](x[k])") is Sum("k", (), (), A("x", V("k")))
    e = parse_expr("where(not i == j and (i < 2 or i >= 3) and i != 0, 1, 0.0)")
    assert e is Where(
        And(
            (
                Not(Compare("==", i, j)),
                Or((Compare("<", i, Affine.constant(2)), Compare(">=", i, Affine.constant(3)))),
                Compare("!=", i, Affine.constant(0)),
            )
        ),
        Const(1),
        Const(0.0),
    )


def test_csum_without_constraints_reads_back():
    # the printer writes CSum(vars, (), body) as `sum[i | ](body)`; accept it so that it reads back
    e = CSum(("i",), (), A("x", V("i")))
    assert format_expr(e) == "sum[i | ](x[i])"
    assert parse_expr("sum[i | ](x[i])") is e


def test_index_expressions():
    i, j, n = V("i"), V("j"), V("n")
    assert parse_index("2*i - j + 1") == i * 2 - j + 1
    assert parse_index("i*2 + 3*(j - 1)") == i * 2 + j * 3 - 3
    assert parse_index("n - 1 - i") == n - 1 - i
    assert parse_index("-(i - j)") == j - i
    assert parse_index("(i + 1) // 2") == Affine.atom(FloorDiv(i + 1, 2))
    assert parse_index("i % 2") == Affine.atom(Mod(i, 2))
    assert parse_index("(2*i) // 2") == i  # folded by Affine.floordiv
    # a leading minus negates the whole term (that is how the printer writes it)
    assert parse_index("-(i + 1) // 2 + 3") == -Affine.atom(FloorDiv(i + 1, 2)) + 3
    assert parse_index("-i % 2") == -Affine.atom(Mod(i, 2))
    assert parse_index("(-i) % 2") == Affine.atom(Mod(-i, 2))


def test_parenthesised_conditions():
    i, j = V("i"), V("j")
    c = Compare("==", Affine.atom(FloorDiv(i + 1, 2)), j)
    assert parse_cond("(i + 1) // 2 == j") == c
    assert parse_cond("((i + 1) // 2 == j)") == c
    assert parse_cond("(((i)) + 1) // 2 == j") == c
    assert parse_cond("(i == j) and ((i) < 2)") == And((Compare("==", i, j), Compare("<", i, Affine.constant(2))))
    assert parse_cond("(a == b and c == d) and e == f") == And(
        (And((Compare("==", V("a"), V("b")), Compare("==", V("c"), V("d")))), Compare("==", V("e"), V("f")))
    )
    assert parse_cond("not not i == j") == Not(Not(Compare("==", i, j)))


def test_declarations_and_extents():
    p = parse_program(
        "# sizes are symbolic\n"
        "input x[n, m], s   # a scalar\n"
        "\n"
        "g = s * 2\n"
        "f[i] = x[i, 0] + h[i]\n"
        "h[i] = x[i, 1]\n"
        "local h[n - 1]\n"
        "output f, g\n"
        "u[i] = x[i, 2]\n"
        "output w[2*n + 1]\n"
        "w[i] = u[i]\n"
    )
    assert [(d.name, d.extents) for d in p.inputs] == [("x", (V("n"), V("m"))), ("s", ())]
    assert p.sizes() == ("n", "m")
    assert p.outputs == ("f", "g", "w")
    ext = {d.name: d.extents for d in p.definitions}
    assert ext == {"g": (), "f": None, "h": (V("n") - 1,), "u": None, "w": (V("n") * 2 + 1,)}
    assert [d.name for d in p.definitions] == ["g", "f", "h", "u", "w"]
    assert p.definition("g").body is Binary("*", Access("s", ()), Const(2))
    assert p.definition("g").indices == ()
    assert p.definition("h").loc == Loc(6, 1)
    assert p.inputs[1].loc == Loc(2, 16)
    assert str(p) == (
        "input x[n, m], s\n"
        "output f, g, w[2*n + 1]\n"
        "local h[n - 1]\n"
        "g = s * 2\n"
        "f[i] = x[i, 0] + h[i]\n"
        "h[i] = x[i, 1]\n"
        "u[i] = x[i, 2]\n"
        "w[i] = u[i]\n"
    )


def test_newlines_inside_brackets_and_crlf():
    p = parse_program("input x[\n  4]\r\nf[i] = exp(x[i]   # comment\n   + 1)\r\n\r\n")
    assert str(p) == "input x[4]\nf[i] = exp(x[i] + 1)\n"
    assert p.definitions[0].loc == Loc(3, 1)


def test_empty_program():
    p = parse_program("\n# nothing\n\n")
    assert p.inputs == () and p.definitions == () and p.outputs == ()


# ---------------------------------------------------------------------------
# Round trip print -> parse -> print
# ---------------------------------------------------------------------------

CORPUS = [
    SEED,
    "input x[n, m]\noutput y[n - 1, 2*n + 1]\ny[i, j] = x[i + 1, j // 2] * x[n - 1 - i, 0]",
    "input s\noutput g\ng = s * 2",
    "input s, t\ng = s ** t ** 2 - (s - t) / (s * t)",
    "input x[10]\nf[i] = where(i == 0 or i != 3 and not (i < 2 or i <= 1), x[i], -x[i])",
    "input x[10]\nf[i] = where((i > 1 and i >= 2) and i < 9, 1, 0) * where(not not i == 2, x[i], 0.5)",
    "input df[5]\ndx[dx_0] = where(dx_0 % 2 == 0, df[dx_0 // 2], 0)",
    "input x[5]\nf[i] = x[(i + 1) // 2] + x[i % 3] + x[2*((i + 1) // 2)] + x[-(i + 1) // 2 + 4]",
    "input x[5]\nf[i] = x[((i + 1) // 2) // 3] + x[(-i) % 2 + 1] + x[3 - i % 4]",
    "input x[5, 4], b\ng = sum[z1: max(0, b - 2)..min(4, b), z0: 0..3](x[z1, z0] * z)\ninput z",
    "input x[5]\ng = sum[k](x[k]) + sum[k, l](x[k] * x[l]) + sum[k: 0..2](sum[l](x[k + l]))",
    "input x[3, 3], b\ng = sum[i, j | 0 <= i, i <= 2, i + j == b](x[i, j])",
    "input x[3, 3], b\ng = sum[i, j | (0 <= i and i <= 2), not j > 2, (i == b or j == b)](x[i, j])",
    "input x\ng = -3 * x + x * -3 + (-3)**2 + -3**2 + x**-1 + (2 - -1) + x**-0.5 - -x",
    "input a, b, c\ng = a - (b - c) + a / (b * c) + (a ** b) ** c + a ** b ** c + (a - b) - c",
    "input x\ng = 0.5 + 1e-10 + 2.0 + 1e+16 + 123456789012345678901234567890 + -0.0",
    "input x\ng = exp(x) + log(x) + sqrt(x) + sin(x) + cos(x) + tan(x) + asin(x) + acos(x)\n"
    "h = atan(x) + sinh(x) + cosh(x) + tanh(x) + abs(x) + sign(x) + relu(x) + sigmoid(x)",
    "input x[n]\nlocal t[n]\nt[i] = x[i] * 2\noutput f[n]\nf[i] = t[i] + sum[j: 0..n - 1](t[j])",
    "input x[n]\nf[i] = -(-x[i]) + -(x[i] + 1) + (-x[i])**2 + -x[i]**2 + (-1)**i",
]


@pytest.mark.parametrize("text", CORPUS)
def test_round_trip(text):
    p1 = parse_program(text)
    s1 = format_program(p1)
    p2 = parse_program(s1)
    assert format_program(p2) == s1
    assert p2 == p1  # bodies compare by identity: hash-consing makes that structural
    assert [d.extents for d in p2.definitions] == [d.extents for d in p1.definitions]


def test_round_trip_canonical_text():
    p = parse_program("input x[n]\nf[i] = x[ - 1 + n -i ]*- 3+(x[i])")
    assert str(p) == "input x[n]\nf[i] = x[n - i - 1] * -3 + x[i]\n"


# ---------------------------------------------------------------------------
# Random expression trees: print, parse, same node
# ---------------------------------------------------------------------------

NAMES = ["x", "y2", "w_b"]
IDX = ["i", "j", "n", "z0"]
SUMVARS = ["s", "t", "u"]


@st.composite
def affines(draw, allow_atoms: bool = True):
    terms = draw(st.lists(st.tuples(st.sampled_from(IDX), st.integers(-3, 3)), max_size=3))
    a = Affine.of(terms, draw(st.integers(-4, 4)))
    if allow_atoms and draw(st.booleans()):
        inner = draw(affines(allow_atoms=False))
        d = draw(st.integers(1, 4))
        atom = inner.floordiv(d) if draw(st.booleans()) else inner.mod(d)
        a = a + atom * draw(st.integers(-2, 2))
    return a


conds = st.recursive(
    st.builds(Compare, st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), affines(), affines()),
    lambda c: st.one_of(
        st.builds(Not, c),
        st.builds(And, st.lists(c, min_size=2, max_size=3).map(tuple)),
        st.builds(Or, st.lists(c, min_size=2, max_size=3).map(tuple)),
    ),
    max_leaves=4,
)

leaves = st.one_of(
    st.integers(-20, 20).map(Const),
    st.floats(allow_nan=False, allow_infinity=False).map(Const),
    st.sampled_from(NAMES).map(lambda n: Access(n, ())),
    st.builds(Access, st.sampled_from(NAMES), st.lists(affines(), min_size=1, max_size=2).map(tuple)),
)


def _bound(e: Expr) -> set:
    out: set = set()
    for node in postorder(e):
        if isinstance(node, Sum):
            out.add(node.var)
        elif isinstance(node, CSum):
            out.update(node.vars)
    return out


def _extend(sub):
    ranges = st.one_of(
        st.just(((), ())),
        st.tuples(st.lists(affines(), min_size=1, max_size=2).map(tuple), st.lists(affines(), min_size=1, max_size=2).map(tuple)),
    )
    return st.one_of(
        st.builds(Unary, st.sampled_from(("neg",) + UNARY_FUNCTIONS), sub),
        st.builds(Binary, st.sampled_from(["+", "-", "*", "/", "**"]), sub, sub),
        st.builds(Where, conds, sub, sub),
        st.builds(
            lambda v, r, body: Sum(v, r[0], r[1], body), st.sampled_from(SUMVARS), ranges, sub
        ).filter(lambda s: s.var not in _bound(s.body)),
        st.builds(
            CSum,
            st.lists(st.sampled_from(SUMVARS), min_size=1, max_size=2, unique=True).map(tuple),
            st.lists(conds, min_size=1, max_size=2).map(tuple),
            sub,
        ).filter(lambda c: not set(c.vars) & _bound(c.body)),
    )


exprs = st.recursive(leaves, _extend, max_leaves=12)


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(exprs)
def test_random_expressions_print_parse_identity(e):
    text = format_expr(e)
    assert parse_expr(text) is e, text


def test_neg_of_nonnegative_constant_round_trips():
    # Unary('neg', Const(3)) must not print as the literal "-3" (that is Const(-3)).
    e = Unary("neg", Const(3))
    assert format_expr(e) == "-(3)"
    assert parse_expr(format_expr(e)) is e
    assert parse_expr("-3") is Const(-3)


def test_non_finite_constants_are_rejected():
    # the language has no literal for inf/nan, so such a node could not print back
    with pytest.raises(ValueError, match="finite"):
        Const(float("inf"))
    with pytest.raises(ValueError, match="finite"):
        Const(float("nan"))


# ---------------------------------------------------------------------------
# Errors: exact message and location
# ---------------------------------------------------------------------------

ERRORS = [
    # (source, message, line, col)
    ("input x[n]\noutput f[n]\nf[i] = x[i] + * 2\n", "expected an expression but found '*'", 3, 15),
    ("input x[4, 4]\nf[i, j] = x[i*j, 0]", "index expression is not affine: i*j", 2, 13),
    ("f[i] = x[2 + 3*i * (j + 1)]", "index expression is not affine: 3*i * (j + 1)", 1, 14),
    ("f[i] = x[i", "unexpected end of input", 1, 11),
    ("f[i] = exp(x[i]\n\n", "unexpected end of input", 1, 16),
    ("f = 2 $ 3", "unexpected character '$'", 1, 7),
    ("f = 2 ! 3", "unexpected character '!'", 1, 7),
    ("f[i] = where(i == 0, 1, 2, 3)", "expected ')' but found ','", 1, 26),
    ("f[i] = x[i] y", "expected end of line but found 'y'", 1, 13),
    ("f[i] = x[i] +\n", "expected an expression but found end of line", 1, 14),
    ("f[i] = x[i] + # oops\ng = 1", "expected an expression but found end of line", 1, 15),
    ("f[i = 1", "expected ']' but found '='", 1, 5),
    ("f[i, i] = x[i]", "index 'i' appears twice on the left-hand side", 1, 6),
    ("input a\ninput b, a", "'a' is already declared", 2, 10),
    ("input a[3]\noutput f\noutput f\nf = 1", "'f' is already declared", 3, 8),
    ("f = 1\n\nf = 2", "'f' is already defined", 3, 1),
    ("f = 1\ninput f", "'f' is already defined", 2, 7),
    ("input x\nx = 1", "cannot redefine input 'x'", 2, 1),
    ("f = 1\noutput f, g", "output 'g' has no definition", 2, 11),
    ("local t[3]\nf = 1", "local 't' has no definition", 1, 7),
    ("f[i] = x[i // j]", "the divisor of '//' must be a positive integer constant", 1, 15),
    ("f[i] = x[i % 0]", "the divisor of '%' must be a positive integer constant", 1, 14),
    ("f[i] = x[i // -2]", "the divisor of '//' must be a positive integer constant", 1, 15),
    ("f[i] = sum[i](x[i])", "sum index 'i' shadows an enclosing index", 1, 12),
    ("f = sum[k: 0..3](sum[k](x[k]))", "sum index 'k' shadows an enclosing index", 1, 22),
    ("f = sum[k, k](x[k])", "sum index 'k' shadows an enclosing index", 1, 12),
    ("f = sum[a, b | a == b, a < 3](sum[b](x))", "sum index 'b' shadows an enclosing index", 1, 35),
    ("sum = 1", "'sum' is a reserved word", 1, 1),
    ("f[exp] = 1", "'exp' is a reserved word", 1, 3),
    ("input max[3]", "'max' is a reserved word", 1, 7),
    ("f[i] = x[i + where]", "'where' is a reserved word", 1, 14),
    ("f = x + and", "'and' is a reserved word", 1, 9),
    ("f = 2x", "malformed number '2x'", 1, 5),
    ("f = 1e", "malformed number '1e'", 1, 5),
    ("f = 1.5.3", "malformed number '1.5.3'", 1, 5),
    ("f = 1e999", "number out of range '1e999'", 1, 5),
    ("f = where(0 <= i <= 2, 1, 0)", "chained comparisons are not allowed; use 'and'", 1, 18),
    ("f = where(i + 1, 1, 0)", "expected a comparison operator but found ','", 1, 16),
    ("f = where((i == 1) == 2, 1, 0)", "expected ',' but found '=='", 1, 20),
    ("f = sum[k: min(0, 1)..3](x[k])", "'min(...)' is only allowed in an upper bound", 1, 12),
    ("f = sum[k: 0..max(3, 4)](x[k])", "'max(...)' is only allowed in a lower bound", 1, 15),
    ("f = sum[k: 0..3, j | j == 0](x)", "expected ']' but found '|'", 1, 20),
    ("f = x[1.5]", "expected an index expression but found '1.5'", 1, 7),
    ("f = x[]", "expected an index expression but found ']'", 1, 7),
    ("(f) = 1", "expected a declaration or definition but found '('", 1, 1),
    ("f = (((((" + "(" * 200 + "x", "expression is nested too deeply", 1, 105),
]


@pytest.mark.parametrize("text,message,line,col", ERRORS)
def test_errors(text, message, line, col):
    with pytest.raises(TccError) as info:
        parse_program(text, "bad.tcc")
    err = info.value
    assert err.message == message
    assert (err.loc.line, err.loc.col) == (line, col)
    rendered = err.render().splitlines()
    assert rendered[0] == f"bad.tcc:{line}:{col}: error: {message}"
    assert rendered[1] == text.splitlines()[line - 1]
    assert rendered[2] == " " * (col - 1) + "^"


def test_parse_expr_checks_enclosing_indices_and_trailing_input():
    with pytest.raises(TccError, match="sum index 'i' shadows"):
        parse_expr("sum[i](x[i])", indices=("i",))
    with pytest.raises(TccError, match="expected end of input but found '\\)'"):
        parse_expr("x)")


def test_deep_nesting_is_an_error_not_a_crash():
    for text in ["f = " + "-" * 5000 + "x", "f = " + "x**" * 3000 + "x", "f = x[" + "(" * 3000 + "i",
                 "f = where(" + "not " * 3000 + "i == 0, 1, 0)", "f = where(" + "(" * 3000 + "i == 0, 1, 0)"]:
        with pytest.raises(TccError, match="nested too deeply"):
            parse_program(text)


# ---------------------------------------------------------------------------
# Fuzzing: only TccError, and whatever parses prints to a fixed point
# ---------------------------------------------------------------------------


def _check_parse(text: str) -> None:
    try:
        p = parse_program(text)
    except TccError as err:
        assert err.loc is not None
        err.render()
        return
    s1 = format_program(p)
    assert format_program(parse_program(s1)) == s1, (text, s1)


ALPHABET = "abijkxnfs0123456789 .,:;+-*/%()[]=<>!|#_\n\teE$" + "'\"\\é\x00"
WORDS = ["input ", "output ", "local ", "sum", "where", "max", "min", " and ", " or ", "not ", "exp", "..", "**", "//"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(list(ALPHABET)), st.sampled_from(WORDS)), max_size=40).map("".join))
def test_fuzz_random_text(text):
    _check_parse(text)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CORPUS), st.data())
def test_fuzz_mutations(text, data):
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(text)))
        kind = data.draw(st.sampled_from(["delete", "insert", "swap", "dup"]))
        if kind == "delete" and pos < len(text):
            text = text[:pos] + text[pos + 1:]
        elif kind == "insert":
            ch = data.draw(st.one_of(st.sampled_from(list(ALPHABET)), st.sampled_from(WORDS)))
            text = text[:pos] + ch + text[pos:]
        elif kind == "swap" and pos + 1 < len(text):
            text = text[:pos] + text[pos + 1] + text[pos] + text[pos + 2:]
        elif kind == "dup":
            end = data.draw(st.integers(pos, min(len(text), pos + 12)))
            text = text[:pos] + text[pos:end] * 2 + text[end:]
    _check_parse(text)
