"""The reference interpreter (tcc.reference.interpreter) and size binding (tcc.sizes) against plain NumPy."""
from __future__ import annotations

import time

import numpy as np
import pytest

from tcc.ir.diagnostics import TccError
from tcc.reference.interpreter import evaluate, evaluate_expr
from tcc.ir.expr import Access, Binary, Const, CSum, Sum, Unary, Where, UNARY_FUNCTIONS
from tcc.ir.index import Affine, And, Compare, Not, Or
from tcc.ir.program import Definition, Program, TensorDecl
from tcc.sizes import bind_sizes

RNG = np.random.default_rng(1234)


# -- tiny IR builders ---------------------------------------------------------

def V(name: str, c: int = 1) -> Affine:
    return Affine.var(name, c)


def C(k: int) -> Affine:
    return Affine.constant(k)


def X(tensor: str, *indices: Affine | int) -> Access:
    return Access(tensor, tuple(i if isinstance(i, Affine) else C(i) for i in indices))


def S(var: str, lo, hi, body) -> Sum:
    lo = lo if isinstance(lo, tuple) else (lo,)
    hi = hi if isinstance(hi, tuple) else (hi,)
    wrap = lambda t: tuple(a if isinstance(a, Affine) else C(a) for a in t)  # noqa: E731
    return Sum(var, wrap(lo), wrap(hi), body)


def B(op, a, b) -> Binary:
    return Binary(op, a, b)


def inp(name: str, *extents: Affine | int) -> TensorDecl:
    return TensorDecl(name, tuple(e if isinstance(e, Affine) else C(e) for e in extents))


def define(name: str, indices: str, body, *extents: Affine | int) -> Definition:
    idx = tuple(indices.split()) if indices else ()
    return Definition(name, idx, body, tuple(e if isinstance(e, Affine) else C(e) for e in extents))


def prog(inputs, *defs) -> Program:
    return Program(tuple(inputs), tuple(defs))


def run(program, block=None, **arrays):
    if block is None:
        return evaluate(program, arrays)
    return evaluate(program, arrays, max_block=block)


# -- products and sums --------------------------------------------------------

MATMUL = prog(
    [inp("a", V("n"), V("k")), inp("b", V("k"), V("m"))],
    define("c", "i j", S("l", 0, V("k") - 1, B("*", X("a", V("i"), V("l")), X("b", V("l"), V("j")))), V("n"), V("m")),
)


@pytest.mark.parametrize("shape", [(7, 5, 3), (1, 1, 1), (4, 9, 6)])
@pytest.mark.parametrize("block", [None, 5])
def test_matrix_product_symbolic_sizes(shape, block):
    n, k, m = shape
    a, b = RNG.standard_normal((n, k)), RNG.standard_normal((k, m))
    out = run(MATMUL, block, a=a, b=b)
    assert list(out) == ["c"]
    c = out["c"]
    assert c.shape == (n, m) and c.dtype == np.float64 and c.flags.c_contiguous
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)
    assert bind_sizes(MATMUL, {"a": a, "b": b}) == {"n": n, "k": k, "m": m}


def test_correlation_against_np_correlate():
    p = prog(
        [inp("x", V("n")), inp("w", V("m"))],
        define("y", "i", S("k", 0, V("m") - 1, B("*", X("x", V("i") + V("k")), X("w", V("k")))), V("n") - V("m") + 1),
    )
    x, w = RNG.standard_normal(50), RNG.standard_normal(7)
    y = run(p, x=x, w=w)["y"]
    np.testing.assert_allclose(y, np.correlate(x, w, mode="valid"), rtol=1e-12, atol=1e-12)
    y = run(p, block=3, x=x, w=w)["y"]
    np.testing.assert_allclose(y, np.correlate(x, w, mode="valid"), rtol=1e-12, atol=1e-12)


def test_sum_bounds_max_min_of_outer_index_with_empty_ranges():
    # f[b] = sum[z: max(0, b - 2)..min(4, b)](x[z] * y[b - z]), b up to 9: empty for b >= 7
    body = B("*", X("x", V("z")), X("y", V("b") - V("z")))
    p = prog(
        [inp("x", 5), inp("y", 3)],
        define("f", "b", S("z", (C(0), V("b") - 2), (C(4), V("b")), body), 10),
    )
    x, y = RNG.standard_normal(5), RNG.standard_normal(3)
    ref = np.zeros(10)
    for b in range(10):
        for z in range(max(0, b - 2), min(4, b) + 1):
            ref[b] += x[z] * y[b - z]
    for block in (None, 1, 4):
        np.testing.assert_allclose(run(p, block, x=x, y=y)["f"], ref, rtol=1e-12, atol=1e-14)
    assert np.all(ref[7:] == 0)


def test_nested_sums_triangular():
    # f[i] = sum[j: 0..i](sum[k: j..i](x[k] * j))
    inner = S("k", V("j"), V("i"), B("*", X("x", V("k")), Const(1)))
    body = S("j", 0, V("i"), B("*", inner, B("+", Const(0.5), Const(1))))
    p = prog([inp("x", V("n"))], define("f", "i", body, V("n")))
    x = RNG.standard_normal(9)
    ref = np.array([sum(x[k] * 1.5 for j in range(i + 1) for k in range(j, i + 1)) for i in range(9)])
    for block in (None, 2):
        np.testing.assert_allclose(run(p, block, x=x)["f"], ref, rtol=1e-12)


def test_sum_bound_depending_on_enclosing_sum_and_size():
    # f = sum[i: 0..n-1](sum[j: max(0, i - 1)..min(n - 1, i + 1)](a[i, j]))  (tridiagonal sum)
    p = prog(
        [inp("a", V("n"), V("n"))],
        define("f", "", S("i", 0, V("n") - 1, S("j", (C(0), V("i") - 1), (V("n") - 1, V("i") + 1), X("a", V("i"), V("j"))))),
    )
    a = RNG.standard_normal((6, 6))
    ref = sum(a[i, j] for i in range(6) for j in range(6) if abs(i - j) <= 1)
    out = run(p, a=a)["f"]
    assert out.shape == () and out.dtype == np.float64
    np.testing.assert_allclose(out, ref)


# -- scalar functions ---------------------------------------------------------

_NUMPY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "tanh": np.tanh, "abs": np.abs, "sign": np.sign, "relu": lambda v: np.maximum(v, 0),
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
}


@pytest.mark.parametrize("fn", UNARY_FUNCTIONS + ("neg",))
def test_unary_functions(fn):
    x = RNG.uniform(-0.99, 0.99, 40)
    if fn in ("log", "sqrt"):
        x = np.abs(x) + 0.01
    x[:3] = [0.0, 0.5, -0.5] if fn not in ("log", "sqrt") else [1.0, 0.5, 2.0]
    p = prog([inp("x", V("n"))], define("y", "i", Unary(fn, X("x", V("i"))), V("n")))
    ref = -x if fn == "neg" else _NUMPY[fn](x)
    np.testing.assert_allclose(run(p, x=x)["y"], ref, rtol=1e-13, atol=1e-15)


def test_sigmoid_is_stable_and_log_of_negative_is_nan_without_warnings():
    x = np.array([-1000.0, -40.0, 0.0, 40.0, 1000.0])
    p = prog([inp("x", 5)], define("s", "i", Unary("sigmoid", X("x", V("i"))), 5),
             define("l", "i", Unary("log", Unary("neg", X("x", V("i")))), 5))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = run(p, x=x)
    assert np.all(np.isfinite(out["s"]))
    np.testing.assert_allclose(out["s"], [0.0, 1 / (1 + np.exp(40)), 0.5, 1 / (1 + np.exp(-40)), 1.0], rtol=1e-12, atol=1e-300)
    assert np.isnan(out["l"][3:]).all() and out["l"][2] == -np.inf


def test_power_with_int_float_and_expression_exponents():
    x = RNG.uniform(0.1, 2.0, 8)
    e = RNG.uniform(-1.0, 1.0, 8)
    xi = X("x", V("i"))
    p = prog(
        [inp("x", 8), inp("e", 8)],
        define("a", "i", B("**", xi, Const(3)), 8),
        define("b", "i", B("**", xi, Const(-0.5)), 8),
        define("c", "i", B("**", xi, B("+", X("e", V("i")), Const(1))), 8),
        define("d", "i", B("**", Unary("neg", xi), Const(2)), 8),
        define("g", "i", B("/", B("-", xi, Const(1)), X("e", V("i"))), 8),
    )
    out = run(p, x=x, e=e)
    np.testing.assert_allclose(out["a"], x**3, rtol=1e-14)
    np.testing.assert_allclose(out["b"], x**-0.5, rtol=1e-14)
    np.testing.assert_allclose(out["c"], np.power(x, e + 1), rtol=1e-14)
    np.testing.assert_allclose(out["d"], x**2, rtol=1e-14)
    np.testing.assert_allclose(out["g"], (x - 1) / e, rtol=1e-14)


# -- where, strides, floor division -------------------------------------------

def test_where_with_and_or_not():
    i, j = V("i"), V("j")
    cond = Or((And((Compare("<", i, j), Compare("!=", i + 1, j))), Not(Compare(">=", i, C(2)))))
    p = prog(
        [inp("a", V("n"), V("n"))],
        define("f", "i j", Where(cond, X("a", i, j), Const(-1)), V("n"), V("n")),
        define("delta", "i j", Where(Compare("==", i, j), Const(1), Const(0)), V("n"), V("n")),
    )
    a = RNG.standard_normal((6, 6))
    I, J = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    mask = ((I < J) & (I + 1 != J)) | ~(I >= 2)
    out = run(p, a=a)
    np.testing.assert_array_equal(out["f"], np.where(mask, a, -1.0))
    np.testing.assert_array_equal(out["delta"], np.eye(6))


def test_strided_and_flipped_accesses():
    p = prog(
        [inp("x", V("n"))],
        define("flip", "i", X("x", V("n") - 1 - V("i")), V("n")),
    )
    p2 = prog(
        [inp("x", V("n", 2))],
        define("even", "i", X("x", V("i", 2)), V("n")),
        define("odd", "i", X("x", V("i", 2) + 1), V("n")),
    )
    x = RNG.standard_normal(10)
    np.testing.assert_array_equal(run(p, x=x)["flip"], x[::-1])
    out = run(p2, x=x)
    np.testing.assert_array_equal(out["even"], x[0::2])
    np.testing.assert_array_equal(out["odd"], x[1::2])
    assert bind_sizes(p2, {"x": x}) == {"n": 5}


def test_floordiv_and_mod_in_indices():
    b = V("b")
    upsample = Where(Compare("==", b.mod(2), C(0)), X("y", b.floordiv(2)), Const(0))
    p = prog(
        [inp("y", V("n")), inp("z", 3)],
        define("u", "b", upsample, V("n", 2)),
        define("w", "b", X("z", b.mod(3)), 7),
        define("q", "b", X("z", (b - 4).floordiv(3) + 2), 6),  # floor semantics for b < 4
    )
    y, z = RNG.standard_normal(5), RNG.standard_normal(3)
    out = run(p, y=y, z=z)
    ref = np.zeros(10)
    ref[0::2] = y
    np.testing.assert_array_equal(out["u"], ref)
    np.testing.assert_array_equal(out["w"], z[np.arange(7) % 3])
    np.testing.assert_array_equal(out["q"], z[(np.arange(6) - 4) // 3 + 2])


# -- programs -----------------------------------------------------------------

def test_scalar_definition_and_scalar_input():
    p = prog(
        [inp("x", V("n")), inp("alpha")],
        define("s", "", B("*", X("alpha"), S("i", 0, V("n") - 1, X("x", V("i"))))),
        define("y", "i", B("-", X("x", V("i")), X("s")), V("n")),
    )
    x = RNG.standard_normal(6)
    for alpha in (2.5, 3, np.float32(0.5), np.array(1.5)):
        out = run(p, x=x, alpha=alpha)
        assert list(out) == ["s", "y"]
        assert out["s"].shape == () and isinstance(out["s"], np.ndarray)
        np.testing.assert_allclose(out["s"], float(alpha) * x.sum())
        np.testing.assert_allclose(out["y"], x - float(alpha) * x.sum())


def test_definition_reading_earlier_definition():
    p = prog(
        [inp("x", V("n"))],
        define("sq", "i", B("*", X("x", V("i")), X("x", V("i"))), V("n")),
        define("cum", "i", S("k", 0, V("i"), X("sq", V("k"))), V("n")),
        define("tot", "", X("cum", V("n") - 1)),
    )
    x = RNG.standard_normal(12)
    out = run(p, x=x)
    np.testing.assert_allclose(out["cum"], np.cumsum(x**2), rtol=1e-12)
    np.testing.assert_allclose(out["tot"], np.sum(x**2), rtol=1e-12)


def test_reading_a_later_definition_is_an_error():
    p = prog([inp("x", 2)], define("f", "i", X("g", V("i")), 2), define("g", "i", X("x", V("i")), 2))
    with pytest.raises(TccError, match="'g'"):
        run(p, x=np.zeros(2))


def test_float32_dtype():
    p = prog([inp("x", V("n"))], define("y", "i", B("+", B("*", X("x", V("i")), Const(0.1)), Const(1)), V("n")))
    x = RNG.standard_normal(5).astype(np.float64)
    y = evaluate(p, {"x": x}, dtype=np.float32)["y"]
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, x.astype(np.float32) * np.float32(0.1) + np.float32(1))
    y64 = evaluate(MATMUL, {"a": np.ones((2, 3)), "b": np.ones((3, 2))}, dtype="float32")["c"]
    assert y64.dtype == np.float32 and np.all(y64 == 3)


def test_extent_zero_and_one():
    x0 = np.zeros(0)
    p = prog(
        [inp("x", V("n"))],
        define("y", "i", Unary("exp", X("x", V("i"))), V("n")),
        define("s", "", S("i", 0, V("n") - 1, X("x", V("i")))),
        define("z", "i j", X("x", V("j")), 3, V("n")),
    )
    out = run(p, x=x0)
    assert out["y"].shape == (0,) and out["z"].shape == (3, 0)
    assert out["s"] == 0.0
    out = run(p, x=np.array([2.0]))
    np.testing.assert_allclose(out["y"], [np.exp(2.0)])
    assert out["s"] == 2.0 and out["z"].shape == (3, 1)
    # an empty sum range: (2 x 0) @ (0 x 3) is all zeros
    np.testing.assert_array_equal(run(MATMUL, a=np.zeros((2, 0)), b=np.zeros((0, 3)))["c"], np.zeros((2, 3)))


# -- the out-of-bounds detector -------------------------------------------------

def test_unguarded_out_of_bounds_read_raises():
    p = prog([inp("x", V("n"))], define("f", "i", X("x", V("i") - 1), V("n")))
    with pytest.raises(RuntimeError, match=r"out-of-bounds read x\[i - 1\].*i=0"):
        run(p, x=np.ones(4))


def test_guarded_read_does_not_raise_and_memo_does_not_hide_a_bad_read():
    guarded = Where(Compare(">=", V("i"), C(1)), X("x", V("i") - 1), Const(0))
    p = prog([inp("x", V("n"))], define("f", "i", B("+", guarded, guarded), V("n")))
    x = RNG.standard_normal(4)
    np.testing.assert_array_equal(run(p, x=x)["f"], 2 * np.r_[0, x[:-1]])
    # the same node, once guarded and once not: the unguarded use must still be caught
    bad = prog([inp("x", V("n"))], define("f", "i", B("+", guarded, X("x", V("i") - 1)), V("n")))
    with pytest.raises(RuntimeError, match="out-of-bounds"):
        run(bad, x=x)


def test_out_of_bounds_only_in_active_sum_lanes():
    # sum[k: 0..i-1](x[i - 1 - k]) at i = 0 is empty: no read of x[-1]
    ok = prog([inp("x", V("n"))], define("f", "i", S("k", 0, V("i") - 1, X("x", V("i") - 1 - V("k"))), V("n")))
    x = RNG.standard_normal(5)
    np.testing.assert_allclose(run(ok, x=x)["f"], np.r_[0, np.cumsum(x)[:-1]])
    # one past the range: reads x[n] at the last point
    bad = prog([inp("x", V("n"))], define("f", "i", S("k", 0, V("i"), X("x", V("k") + 1)), V("n")))
    with pytest.raises(RuntimeError, match=r"out-of-bounds read x\[k \+ 1\].*i=4.*k=4"):
        run(bad, x=x)
    # reading an empty tensor in a lane that is never active is fine
    empty = prog([inp("x", V("n"))], define("f", "i", Where(Compare("<", V("i"), V("n")), X("x", V("i")), Const(7)), 2))
    np.testing.assert_array_equal(run(empty, x=np.zeros(0))["f"], [7, 7])


# -- size binding errors --------------------------------------------------------

TWO = prog([inp("a", 3, 5), inp("b", V("n"))], define("f", "i", X("b", V("i")), V("n")))


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"a": np.zeros((3, 5))}, "missing input 'b'"),
        ({"a": np.zeros(3), "b": np.zeros(2)}, r"input 'a' must have 2 dimensions \(a\[3, 5\]\), got 1"),
        ({"a": np.zeros((3, 4)), "b": np.zeros(2)}, r"input 'a' has shape \(3, 4\) but its declaration a\[3, 5\] requires \(3, 5\)"),
        ({"a": np.array([["u"] * 5] * 3), "b": np.zeros(2)}, "input 'a' must be a numeric array"),
        ({"a": np.zeros((3, 5)), "b": np.array([None, 1.0], dtype=object)}, "input 'b' must be a numeric array"),
        ({"a": np.zeros((3, 5)), "b": "hello"}, "input 'b'"),
    ],
)
def test_bind_sizes_input_errors(arrays, message):
    with pytest.raises(TccError, match=message):
        bind_sizes(TWO, arrays)
    with pytest.raises(TccError, match=message):
        evaluate(TWO, arrays)


def test_bind_sizes_conflict_and_undetermined():
    p = prog([inp("x", V("n")), inp("y", V("n"))], define("f", "i", X("x", V("i")), V("n")))
    with pytest.raises(TccError, match="size 'n' is bound to 4 by 'x' but 'y' implies 5"):
        bind_sizes(p, {"x": np.zeros(4), "y": np.zeros(5)})
    q = prog([inp("x", V("n") + V("m")), inp("y", 2)], define("f", "i", X("x", V("i")), V("n") + V("m")))
    with pytest.raises(TccError, match="size '[mn]' cannot be determined from the inputs"):
        bind_sizes(q, {"x": np.zeros(4), "y": np.zeros(2)})
    r = prog([inp("x", V("n")), inp("y", V("n") - V("m"))], define("f", "i", X("y", V("i")), V("n") - V("m")))
    assert bind_sizes(r, {"x": np.zeros(5), "y": np.zeros(2)}) == {"n": 5, "m": 3}  # bound in two rounds


def test_bind_sizes_affine_extents_and_chains():
    p = prog(
        [inp("x", V("n", 2)), inp("p", V("n") - 1), inp("q", V("n") + V("m")), inp("s")],
        define("f", "i", X("p", V("i")), V("n") - 1),
    )
    arrays = {"x": np.zeros(8), "p": np.zeros(3), "q": np.zeros(10), "s": 1.0, "extra": "ignored"}
    assert bind_sizes(p, arrays) == {"n": 4, "m": 6}
    with pytest.raises(TccError, match="input 'x'"):  # 2*n = 7 has no integer solution
        bind_sizes(p, {**arrays, "x": np.zeros(7)})
    with pytest.raises(TccError, match="size 'n' is bound to 4 by 'x' but 'p' implies 3"):
        bind_sizes(p, {**arrays, "p": np.zeros(2)})
    with pytest.raises(TccError, match=r"input 's' must have 0 dimensions"):
        bind_sizes(p, {**arrays, "s": np.zeros(1)})
    neg = prog([inp("x", V("n") + 2)], define("f", "i", X("x", V("i")), V("n")))
    with pytest.raises(TccError, match="input 'x'"):
        bind_sizes(neg, {"x": np.zeros(1)})


def test_negative_definition_extent():
    p = prog(
        [inp("x", V("n")), inp("w", V("m"))],
        define("f", "i", S("k", 0, V("m") - 1, X("x", V("i") + V("k"))), V("n") - V("m") + 1),
    )
    with pytest.raises(TccError, match=r"definition 'f' would have negative extent -2 \(n - m \+ 1\) for these sizes"):
        bind_sizes(p, {"x": np.zeros(3), "w": np.zeros(6)})


def test_unknown_extents_and_unranged_sum():
    p = Program((inp("x", 3),), (Definition("f", ("i",), X("x", V("i")), None),))
    with pytest.raises(TccError, match="definition 'f' has no known extents; run infer-ranges first"):
        evaluate(p, {"x": np.zeros(3)})
    q = prog([inp("x", 3)], define("g", "", Sum("k", (), (), X("x", V("k")))))
    with pytest.raises(TccError, match="run infer-ranges first"):
        evaluate(q, {"x": np.zeros(3)})


# -- scale -------------------------------------------------------------------------

def test_million_point_grid_is_fast():
    n = 1000
    i, j = V("i"), V("j")
    gauss = Unary("exp", Unary("neg", B("**", B("-", X("a", i), X("b", j)), Const(2))))
    body = B("+", gauss, S("k", (C(0), i - 2), (C(n - 1), i + 2), B("*", X("a", V("k")), X("b", j))))
    p = prog([inp("a", n), inp("b", n)], define("f", "i j", body, n, n))
    a, b = RNG.standard_normal(n), RNG.standard_normal(n)
    t0 = time.perf_counter()
    f = run(p, a=a, b=b)["f"]
    elapsed = time.perf_counter() - t0
    band = np.array([a[max(0, r - 2):r + 3].sum() for r in range(n)])
    np.testing.assert_allclose(f, np.exp(-(a[:, None] - b[None, :]) ** 2) + band[:, None] * b[None, :], rtol=1e-10, atol=1e-12)
    assert elapsed < 3.0, elapsed


def test_shared_subexpressions_are_memoised():
    # e_{t+1} = tanh(e_t * e_t + e_t): a tree of 2**60 nodes, a DAG of 180
    e = X("x", V("i"))
    ref = np.linspace(-1, 1, 50)
    want = ref.copy()
    for _ in range(60):
        e = Unary("tanh", B("+", B("*", e, e), e))
        want = np.tanh(want * want + want)
    body = S("k", 0, 2, B("*", e, Const(1)))  # inside a sum too
    p = prog([inp("x", V("n"))], define("f", "i", e, V("n")), define("g", "i", body, V("n")))
    out = run(p, x=ref)
    np.testing.assert_allclose(out["f"], want, rtol=1e-12)
    np.testing.assert_allclose(out["g"], 3 * want, rtol=1e-12)


# -- evaluate_expr and constrained sums ---------------------------------------------

def test_evaluate_expr_over_explicit_grid():
    e = B("*", X("x", V("i")), X("x", V("j")))
    x = np.arange(4.0)
    np.testing.assert_array_equal(evaluate_expr(e, {"x": x}, {"i": 4, "j": 2}), np.outer(x, x[:2]))


def test_csum_cumulative_sum_and_convolution():
    i = V("i")
    cum = CSum(("k",), (Compare(">=", V("k"), C(0)), Compare("<=", V("k"), i)), X("x", V("k")))
    conv = CSum(
        ("p", "q"),
        (
            Compare("==", V("p") + V("q"), i),
            Compare(">=", V("p"), C(0)), Compare("<=", V("p"), V("n") - 1),
            Compare(">=", V("q"), C(0)), Compare("<=", V("q"), V("m") - 1),
        ),
        B("*", X("x", V("p")), X("w", V("q"))),
    )
    p = prog(
        [inp("x", V("n")), inp("w", V("m"))],
        define("cum", "i", cum, V("n")),
        define("conv", "i", conv, V("n") + V("m") - 1),
    )
    x, w = RNG.standard_normal(9), RNG.standard_normal(4)
    out = run(p, x=x, w=w)
    np.testing.assert_allclose(out["cum"], np.cumsum(x), rtol=1e-12)
    np.testing.assert_allclose(out["conv"], np.convolve(x, w), rtol=1e-12, atol=1e-12)


# -- parsed programs (once the parser has landed) -----------------------------------

def test_parsed_urban_example():
    parser = pytest.importorskip("tcc.ir.parser")
    text = """
    input  a[3, 5], b[4, 5], c[3, 3], d[8]
    output f[3, 4]
    f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
    """
    program = parser.parse_program(text)
    a, b, c, d = (RNG.standard_normal(s) for s in [(3, 5), (4, 5), (3, 3), (8,)])
    f = evaluate(program, {"a": a, "b": b, "c": c, "d": d})["f"]
    ref = np.empty((3, 4))
    for i in range(3):
        for j in range(4):
            ref[i, j] = np.exp(-sum((a[i, k] + b[j, k]) ** 2 * c[i, i] + d[i + k] ** 3 for k in range(5)))
    np.testing.assert_allclose(f, ref, rtol=1e-12)


def test_parsed_guarded_sum_with_max_min_bounds():
    parser = pytest.importorskip("tcc.ir.parser")
    text = """
    input x[n], y[3]
    output f[n + 2]
    f[b] = where(b % 2 == 0 or b == 1, sum[z: max(0, b - 2)..min(n - 1, b)](x[z] * y[b - z]), -1)
    """
    program = parser.parse_program(text)
    x, y = RNG.standard_normal(6), RNG.standard_normal(3)
    f = evaluate(program, {"x": x, "y": y})["f"]
    ref = np.convolve(x, y)
    ref = np.where((np.arange(8) % 2 == 0) | (np.arange(8) == 1), ref, -1.0)
    np.testing.assert_allclose(f, ref, rtol=1e-12, atol=1e-12)


# -- property test: the vectorised interpreter against a scalar oracle ------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402



class _OutOfBounds(Exception):
    pass


def _scalar(node, env, tensors):
    """Plain-Python meaning of an expression at one point (the oracle)."""
    if isinstance(node, Const):
        return float(node.value)
    if isinstance(node, Access):
        arr = tensors[node.tensor]
        idx = tuple(int(e.evaluate(env)) for e in node.indices)
        if any(not 0 <= v < n for v, n in zip(idx, arr.shape)):
            raise _OutOfBounds(node)
        return float(arr[idx])
    if isinstance(node, Unary):
        v = _scalar(node.operand, env, tensors)
        return -v if node.op == "neg" else float(_NUMPY[node.op](np.float64(v)))
    if isinstance(node, Binary):
        a, b = _scalar(node.lhs, env, tensors), _scalar(node.rhs, env, tensors)
        return {"+": a + b, "-": a - b, "*": a * b}[node.op]
    if isinstance(node, Where):
        return _scalar(node.then if node.cond.evaluate(env) else node.other, env, tensors)
    if isinstance(node, Sum):
        lo = max(int(e.evaluate(env)) for e in node.lo)
        hi = min(int(e.evaluate(env)) for e in node.hi)
        return sum((_scalar(node.body, {**env, node.var: k}, tensors) for k in range(lo, hi + 1)), 0.0)
    raise TypeError(node)


@st.composite
def _affine(draw, names):
    e = Affine.constant(draw(st.integers(-2, 4)))
    for n in names:
        e = e + Affine.var(n, draw(st.sampled_from([0, 0, 1, -1, 2])))
    kind = draw(st.sampled_from(["plain", "plain", "div", "mod"]))
    if kind == "div":
        e = e.floordiv(draw(st.integers(2, 3)))
    elif kind == "mod":
        e = e.mod(draw(st.integers(2, 3)))
    return e


@st.composite
def _cond(draw, names):
    c = Compare(draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="])), draw(_affine(names)), draw(_affine(names)))
    k = draw(st.integers(0, 3))
    if k == 1:
        c = Not(c)
    elif k == 2:
        c = And((c, Compare(">=", draw(_affine(names)), C(0))))
    elif k == 3:
        c = Or((c, Compare("==", draw(_affine(names)), C(1))))
    return c


@st.composite
def _expr(draw, names, depth):
    kind = draw(st.sampled_from(["const", "x", "y"] + (["un", "bin", "bin", "where", "sum"] if depth else [])))
    if kind == "const":
        return Const(draw(st.sampled_from([0, 1, 2, -0.5, 1.5])))
    if kind == "x":
        return Access("x", (draw(_affine(names)),))
    if kind == "y":
        return Access("y", (draw(_affine(names)), draw(_affine(names))))
    if kind == "un":
        return Unary(draw(st.sampled_from(["neg", "tanh", "sin", "abs"])), draw(_expr(names, depth - 1)))
    if kind == "bin":
        return Binary(draw(st.sampled_from(["+", "-", "*"])), draw(_expr(names, depth - 1)), draw(_expr(names, depth - 1)))
    if kind == "where":
        return Where(draw(_cond(names)), draw(_expr(names, depth - 1)), draw(_expr(names, depth - 1)))
    var = draw(st.sampled_from(["k", "l"]))
    lo = tuple(draw(st.lists(_affine(names), min_size=1, max_size=2)))
    hi = tuple(draw(st.lists(_affine(names), min_size=1, max_size=2)))
    return Sum(var, lo, hi, draw(_expr(tuple(dict.fromkeys(names + (var,))), depth - 1)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_expr(("i", "j"), 3), n0=st.integers(0, 4), n1=st.integers(1, 3), block=st.sampled_from([1, 2, 5, 1 << 20]))
def test_property_matches_scalar_oracle(body, n0, n1, block):
    data = np.random.default_rng(7)
    tensors = {"x": data.standard_normal(6), "y": data.standard_normal((4, 4))}
    p = prog([inp("x", 6), inp("y", 4, 4)], define("f", "i j", body, n0, n1))
    ref = np.zeros((n0, n1))
    oob = False
    try:
        for i in range(n0):
            for j in range(n1):
                ref[i, j] = _scalar(body, {"i": i, "j": j}, tensors)
    except _OutOfBounds:
        oob = True
    if oob:
        with pytest.raises(RuntimeError, match="out-of-bounds read"):
            evaluate(p, tensors, max_block=block)
    else:
        got = evaluate(p, tensors, max_block=block)["f"]
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)


def test_parsed_correlation_scalar_input_and_undeclared_scalar_definition():
    parser = pytest.importorskip("tcc.ir.parser")
    program = parser.parse_program(
        """
        input x[n], w[m], s
        output y[n - m + 1]
        y[i] = s * sum[k: 0..m - 1](x[i + k] * w[k])
        t = sum[i: 0..n - m](y[i]**2)
        """
    )
    x, w = RNG.standard_normal(20), RNG.standard_normal(4)
    out = evaluate(program, {"x": x, "w": w, "s": 2, "unused": np.zeros(3)})
    y = 2 * np.correlate(x, w, mode="valid")
    np.testing.assert_allclose(out["y"], y, rtol=1e-12)
    np.testing.assert_allclose(out["t"], np.sum(y**2), rtol=1e-12)
    with pytest.raises(TccError, match=r"definition 'y' would have negative extent -2 \(n - m \+ 1\)"):
        evaluate(program, {"x": x[:3], "w": np.zeros(6), "s": 1.0})


def test_same_size_twice_in_one_tensor():
    p = prog([inp("a", V("n"), V("n"))], define("f", "i", X("a", V("i"), V("i")), V("n")))
    with pytest.raises(TccError, match=r"input 'a' has shape \(3, 4\) but its declaration a\[n, n\] requires \(3, 3\)"):
        bind_sizes(p, {"a": np.zeros((3, 4))})
    np.testing.assert_array_equal(run(p, a=np.arange(9.0).reshape(3, 3))["f"], [0, 4, 8])
