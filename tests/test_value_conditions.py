"""Value conditions in ``where`` and element-wise ``max``/``min``.

``where(x[i] > 0, a, b)`` compares values: it is a :class:`~tcc.ir.expr.Select`
(eager: both branches are in bounds without the condition), ``and``/``or``/
``not`` nest selects; ``max(a, b, ...)``/``min`` are ``Binary`` nodes whose
derivative splits the adjoint equally between tied arguments.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError
from tcc.ir.expr import Select

SRC = """input x[n], y[n]
z[i] = where(x[i] > 0 and i < n - 1 or not abs(y[i]) <= 0.5, max(x[i], y[i], 0), min(x[i], 1))
h[i] = where(abs(x[i] - y[i]) <= 1, 0.5 * (x[i] - y[i])**2, abs(x[i] - y[i]) - 0.5)
l[i] = where(x[i] != y[i], x[i], -y[i])
"""


def reference(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    n = x.size
    i = np.arange(n)
    c = ((x > 0) & (i < n - 1)) | ~(np.abs(y) <= 0.5)
    r = x - y
    with np.errstate(invalid="ignore"):
        return {"z": np.where(c, np.maximum(np.maximum(x, y), 0), np.minimum(x, 1)),
                "h": np.where(np.abs(r) <= 1, 0.5 * r**2, np.abs(r) - 0.5),
                "l": np.where(x != y, x, -y)}


def edge_data(dtype: str, n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n) * 2, rng.standard_normal(n) * 2
    special = [np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, 0.5, -0.5]
    x[:8], y[:8] = special, special[::-1]
    x[8:12] = y[8:12]  # ties
    return x.astype(dtype), y.astype(dtype)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal element for element, NaN where NaN, and the same sign of every zero."""
    return bool(np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b)))


def test_parses_into_selects_and_prints_back() -> None:
    p = tcc.parse(SRC)
    text = str(p)
    assert str(tcc.parse(text)) == text
    z = p.definitions[0].body
    assert isinstance(z, Select) and z.op == ">"  # and/or/not became nested selects and an index where
    assert "where(x[i] != y[i], x[i], -y[i])" in text
    assert "max(max(x[i], y[i]), 0)" in text


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_semantics_on_edge_data(target: str, dtype: str) -> None:
    x, y = edge_data(dtype)
    want = reference(x.astype(np.float64), y.astype(np.float64))
    compiled = tcc.compile(SRC, target, dtype=dtype)(x=x, y=y)
    interpreted = tcc.run(tcc.parse(SRC), {"x": x, "y": y}, dtype)
    for name in ("z", "l"):  # selections only: bit-exact, NaN and the sign of zero included
        assert same(compiled[name], want[name].astype(dtype)), name
        assert same(interpreted[name], want[name].astype(dtype)), name
    tol = 1e-6 if dtype == "float32" else 1e-15
    np.testing.assert_allclose(compiled["h"], want["h"], rtol=tol)


def test_max_min_follow_numpy_at_signed_zeros_and_nan() -> None:
    src = "input x[n], y[n]\na[i] = max(x[i], y[i])\nb[i] = min(x[i], y[i])\n"
    x = np.array([-0.0, 0.0, np.nan, 1.0, np.nan, -np.inf])
    y = np.array([0.0, -0.0, 1.0, np.nan, np.nan, np.inf])
    for out in (tcc.compile(src)(x=x, y=y), tcc.compile(src, "cuda-sim")(x=x, y=y), tcc.run(tcc.parse(src), {"x": x, "y": y})):
        assert same(out["a"], np.maximum(x, y)) and same(out["b"], np.minimum(x, y))


CASES = [
    ("leaky relu", "input x[n]\ny[i] = where(x[i] > 0, x[i], 0.01 * x[i])\n", "y", "x"),
    ("huber", "input x[n], y[n]\nf = sum[i](where(abs(x[i] - y[i]) <= 0.2, 0.5 * (x[i] - y[i])**2, 0.2 * abs(x[i] - y[i]) - 0.02))\n", "f", "x,y"),
    ("clip", "input x[n]\ny[i] = min(max(x[i], 0.4), 0.6) * x[i]\n", "y", "x"),
    ("hinge", "input w[m], X[n, m], t[n]\nf = sum[i](max(0, 1 - t[i] * sum[j](X[i, j] * w[j])))\n", "f", "w,X"),
    ("mixed condition", "input x[n], y[n]\nz[i] = where(x[i] > 0.5 and i > 0 or y[i] < 0.4, x[i] * y[i], x[i]**2)\n", "z", "x,y"),
]


@pytest.mark.parametrize("name, src, of, wrt", CASES, ids=[c[0] for c in CASES])
def test_first_derivatives_against_finite_differences(name: str, src: str, of: str, wrt: str) -> None:
    for target in ("cpu", "cuda-sim"):
        results = tcc.check(tcc.parse(src), of=of, wrt=wrt, target=target)
        assert all(r.ok for r in results), [str(r) for r in results]


def test_second_derivative_away_from_kinks() -> None:
    src = "input x[n], y[n]\nf = sum[i](where(x[i] > y[i], x[i]**3, y[i] * x[i]**2) + max(x[i], y[i])**2)\n"
    x = np.array([0.3, 0.7, 0.55, 0.2])
    y = np.array([0.6, 0.1, 0.5, 0.9])
    h = tcc.hessian(tcc.parse(src), of="f", wrt="x")(x=x, y=y)
    want = np.diag(np.where(x > y, 6 * x + 2, 2 * y))  # d2/dx2 of x^3 + x^2 where x > y, of y x^2 (+ y^2) elsewhere
    np.testing.assert_allclose(h, want, rtol=1e-12)


def test_ties_split_the_gradient_equally() -> None:
    src = "input x[n], y[n], w[n]\nf = sum[i](max(x[i], y[i]) + min(x[i], w[i], y[i]))\n"
    g = tcc.compile(tcc.grad(tcc.parse(src), of="f", wrt="x,y,w"))
    x = np.array([1.0, 2.0, 3.0, 5.0])
    y = np.array([1.0, 1.0, 3.0, 5.0])
    w = np.array([0.0, 2.0, 3.0, 5.0])
    out = g(x=x, y=y, w=w, df=np.asarray(1.0))
    # max(x, y): ties at 0, 2, 3 -> 1/2 each; min(x, w, y): element 2 and 3 tie three ways -> 1/3 each
    np.testing.assert_allclose(out["dx"], [0.5 + 0.0, 1.0 + 0.0, 0.5 + 1 / 3, 0.5 + 1 / 3])
    np.testing.assert_allclose(out["dy"], [0.5 + 0.0, 0.0 + 1.0, 0.5 + 1 / 3, 0.5 + 1 / 3])
    np.testing.assert_allclose(out["dw"], [1.0, 0.0, 1 / 3, 1 / 3])
    # the first element: min(1, 0, 1) = w alone; max(1, 1) tied


def test_forward_mode_and_jacobian() -> None:
    src = "input x[n]\ny[i] = where(x[i] > 0.5, x[i]**2, -x[i]) + max(x[i], 0.45)\n"
    x = np.array([0.2, 0.7, 0.48, 0.9])
    jac = tcc.jacobian(tcc.parse(src), of="y", wrt="x")(x=x)
    want = np.diag(np.where(x > 0.5, 2 * x, -1.0) + (x > 0.45))
    np.testing.assert_allclose(jac, want, rtol=1e-13)
    jvp = tcc.jvp(tcc.parse(src), of="y", wrt="x")(x=x, dx=np.ones(4))
    np.testing.assert_allclose(jvp, np.diag(want), rtol=1e-13)


@pytest.mark.parametrize("text, message", [
    ("input x[n]\ny = sum[k: 0..x[0]](x[k])\n", "'x[...' is a value, but index expressions"),
    ("input x[n]\ny = sum[i | x[i] > 0](x[i])\n", "'x[...' is a value, but index expressions"),
    ("input x[n]\ny[i] = max(x[i])\n", "max(...) of values takes two or more arguments; max[k](...) is a reduction"),
    ("input x[n]\ny[i] = where(x[i] > 0 > 1, 1, 0)\n", "chained comparisons are not allowed; use 'and'"),
    ("input x[n]\nassume x[0] > 1\ny = x[0]\n", "'x[...' is a value, but index expressions"),
])
def test_values_where_only_indices_may_appear_are_errors(text: str, message: str) -> None:
    with pytest.raises(TccError) as info:
        tcc.parse(text)
    assert message in info.value.message and info.value.loc is not None


def test_a_comparison_naming_a_tensor_compares_values() -> None:
    """``s > 0`` with a scalar input ``s`` reads like an index comparison, but ``s`` is a value."""
    src = "input x[n], s\ny[i] = where(s > 0 and i > 0, x[i], 0)\n"
    p = tcc.parse(src)
    assert isinstance(p.definitions[0].body, Select)
    x = np.arange(1.0, 5.0)
    np.testing.assert_array_equal(tcc.compile(src)(x=x, s=1.0)["y"], [0.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(tcc.compile(src)(x=x, s=-1.0)["y"], np.zeros(4))
