"""Max and min reductions ``max[k](body)``, ``min[p: 0..1, q: 0..1](body)``.

A :class:`~tcc.ir.expr.Reduce` node: ranged and inferred as a sum, lowered
to ``acc = max(acc, ...)`` from ``-inf`` (empty: ``-inf``; ``min``: ``+inf``).
Its derivative is a gather: every position compares its value with the
result and the tied positions split the adjoint equally.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError

SRC = """input x[n, n]
m[i] = max[j](x[i, j])
y[i, j] = min[p: 0..1, q: 0..1](x[i + p, j + q])
e[i] = max[j: 0..i - 1](x[i, j])
s[i] = m[i] + log(sum[j](exp(x[i, j] - m[i])))
"""


def reference(x: np.ndarray) -> dict[str, np.ndarray]:
    n = x.shape[0]
    with np.errstate(invalid="ignore"):
        y = np.minimum(np.minimum(x[:-1, :-1], x[:-1, 1:]), np.minimum(x[1:, :-1], x[1:, 1:])) if n > 1 else np.zeros((0, 0))
        m = x.max(axis=1) if n else np.zeros(0)
        e = np.array([x[i, :i].max() if i else -np.inf for i in range(n)])
        s = m + np.log(np.exp(x - m[:, None]).sum(axis=1)) if n else np.zeros(0)
    return {"m": m, "y": y, "e": e, "s": s}


def test_prints_and_parses_back() -> None:
    p = tcc.parse(SRC)
    assert str(tcc.parse(str(p))) == str(p)
    inferred = str(tcc.transform(p, "infer-ranges"))
    assert "m[i] = max[j: 0..n - 1](x[i, j])" in inferred
    assert "y[i, j] = min[p: 0..1, q: 0..1](x[i + p, j + q])" in inferred
    assert "output m[n], y[n - 1, n - 1], e[n], s[n]" in inferred


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
@pytest.mark.parametrize("n", [1, 2, 5, 13])
def test_values_against_numpy(target: str, dtype: str, n: int) -> None:
    x = np.random.default_rng(n).standard_normal((n, n)).astype(dtype)
    want = reference(x.astype(np.float64))
    tol = 1e-6 if dtype == "float32" else 1e-14
    for got in (tcc.compile(SRC, target, dtype=dtype)(x=x), tcc.run(tcc.parse(SRC), {"x": x}, dtype)):
        for name in ("m", "y", "e"):
            np.testing.assert_array_equal(got[name], want[name].astype(dtype))
        np.testing.assert_allclose(got["s"], want["s"], rtol=tol)


def test_nan_propagates_and_an_empty_range_is_minus_infinity() -> None:
    x = np.arange(16.0).reshape(4, 4)
    x[2, 1] = np.nan
    for got in (tcc.compile(SRC)(x=x), tcc.compile(SRC, "cuda-sim")(x=x), tcc.run(tcc.parse(SRC), {"x": x})):
        assert np.isnan(got["m"][2]) and got["m"][3] == 15.0
        assert got["e"][0] == -np.inf and np.isnan(got["e"][2]) and got["e"][3] == 14.0
    mins = tcc.compile("input x[n]\nlo = min[k: 0..n - 1](x[k])\n")(x=np.zeros(0))["lo"]
    assert mins == np.inf


CASES = [("row max", "m"), ("2x2 min pool", "y"), ("stable log-sum-exp", "s")]


@pytest.mark.parametrize("name, of", CASES, ids=[c[0] for c in CASES])
def test_first_derivatives_against_finite_differences(name: str, of: str) -> None:
    src = SRC.replace("e[i] = max[j: 0..i - 1](x[i, j])\n", "")  # its first element is -inf
    for target in ("cpu", "cuda-sim"):
        assert all(r.ok for r in tcc.check(tcc.parse(src), of=of, wrt="x", target=target))


def test_ties_split_the_adjoint_equally() -> None:
    g = tcc.compile(tcc.grad(tcc.parse("input x[n, m]\ny[i] = max[j](x[i, j])\n"), of="y", wrt="x"))
    x = np.array([[1.0, 3.0, 3.0, 3.0], [2.0, 0.0, 2.0, -1.0], [-0.0, 0.0, -1.0, -2.0]])
    dx = g(x=x, dy=np.array([1.0, 2.0, 3.0]))["dx"]
    np.testing.assert_allclose(dx, [[0, 1 / 3, 1 / 3, 1 / 3], [1, 0, 1, 0], [1.5, 1.5, 0, 0]])


def test_second_derivative_of_the_stable_softmax() -> None:
    src = "input x[n]\nm = max[j](x[j])\nf = m + log(sum[j](exp(x[j] - m)))\n"
    x = np.array([0.3, -1.2, 0.8, 0.1])
    h = tcc.hessian(tcc.parse(src), of="f", wrt="x")(x=x)
    s = np.exp(x) / np.exp(x).sum()
    np.testing.assert_allclose(h, np.diag(s) - np.outer(s, s), atol=1e-15)


def test_forward_mode_and_jacobian() -> None:
    p = tcc.parse("input x[n, n]\ny[i, j] = min[p: 0..1, q: 0..1](x[i + p, j + q])\n")
    x = np.random.default_rng(1).standard_normal((4, 4))
    dx = np.random.default_rng(2).standard_normal((4, 4))
    jvp = tcc.jvp(p, of="y", wrt="x")(x=x, dx=dx)
    jac = tcc.jacobian(p, of="y", wrt="x")(x=x)
    f = tcc.compile(p)
    fd = (f(x=x + 1e-6 * dx)["y"] - f(x=x - 1e-6 * dx)["y"]) / 2e-6
    np.testing.assert_allclose(jvp, fd, atol=1e-8)
    np.testing.assert_allclose(np.tensordot(jac, dx, axes=2), fd, atol=1e-8)


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_constrained_reductions(target: str) -> None:
    """``max[j, k | j <= k, k <= i](...)`` is the max over the box of a guarded body (-inf outside)."""
    src = ("input x[n, n]\noutput m[n], q\nm[i] = max[j, k | j <= k, k <= i](x[j, k])\n"
           "q = min[a, b | a + b == 3](x[a, b] * 2)\n")
    p = tcc.parse(src)
    assert "m[i] = max[j, k](where(j <= k and k <= i, x[j, k], -1.0 / 0.0))" in str(p)
    assert str(tcc.parse(str(p))) == str(p)
    x = np.random.default_rng(0).standard_normal((5, 5))
    want_m = [max(x[j, k] for j in range(5) for k in range(5) if j <= k <= i) for i in range(5)]
    want_q = min(2 * x[a, b] for a in range(5) for b in range(5) if a + b == 3)
    for got in (tcc.compile(src, target)(x=x), tcc.run(p, {"x": x})):
        np.testing.assert_array_equal(got["m"], want_m)
        assert got["q"] == want_q
    assert all(r.ok for of in ("m", "q") for r in tcc.check(p, of=of, wrt="x", target=target))


@pytest.mark.parametrize("text, message", [
    ("input x[n]\ny = max[k]\n", "max[...] needs a body: max[k](...)"),
    ("input x[n]\ny = max[k](q[k])\n", "undeclared tensor 'q'"),
])
def test_bad_reductions(text: str, message: str) -> None:
    with pytest.raises(TccError) as info:
        tcc.transform(tcc.parse(text), "infer-ranges")
    assert message in info.value.message and info.value.loc is not None
