"""``factor-linear``: definitions linear in one full-rank read, and single-use monomials inlined (passes/factor_linear.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import tcc
from compare import assert_matches_interpreter, random_inputs
from tcc.reference.interpreter import evaluate

ROOT = Path(__file__).resolve().parent.parent


def _factored(src: str) -> str:
    return str(tcc.transform(src, "infer-ranges,factor-linear"))


def _same_values(src: str, sizes: dict[str, int]) -> None:
    """The factored program computes the written one's results (the interpreter on both)."""
    before = tcc.transform(src, "infer-ranges")
    after = tcc.transform(src, "infer-ranges,factor-linear")
    arrays = random_inputs(before, sizes, 1)
    want, got = evaluate(before, arrays), evaluate(after, arrays)
    for name in before.results():
        np.testing.assert_allclose(got[name], want[name], rtol=1e-13, atol=1e-13)


LINEAR = ("input A[n, m], x[m]\noutput D[n, m]\n"
          "D[k, i] = -((-A[k, i] * (1 / (1 + exp(-x[i]))) + -(-A[k, i] * exp(-x[i]) / (1 + exp(-x[i]))**2)) * exp(-x[i]))\n")


def test_a_body_linear_in_a_full_rank_read_gets_a_lower_rank_coefficient():
    out = _factored(LINEAR)
    assert "D_c[i] = " in out and "D[k, i] = A[k, i] * D_c[i]" in out
    _same_values(LINEAR, {"n": 4, "m": 5})
    assert_matches_interpreter(LINEAR, {"n": 4, "m": 5})


@pytest.mark.parametrize("body", [
    "A[k, i]**2 * x[i]",            # degree 2
    "exp(A[k, i]) * x[i]",          # a function of the read
    "A[k, i] * x[i] + x[i]",        # not homogeneous
    "x[i] / A[k, i]",               # degree -1
    "A[k, i] * x[i]",               # already a product: nothing to compute fewer times
    "A[k, i] * exp(B[k, i])",       # the rest has the full rank too
])
def test_what_is_not_linear_or_gains_nothing_stays(body):
    src = f"input A[n, m], B[n, m], x[m]\noutput D[n, m]\nD[k, i] = {body}\n"
    assert _factored(src) == str(tcc.transform(src, "infer-ranges"))


def test_a_read_under_a_guard_stays_under_it():
    """where(j <= 0, df[i, j], 0) is linear in df, but the guard is what keeps df's read in bounds."""
    src = "input x[1, 2], df[1, 1]\noutput dx[1, 2]\ndx[i, j] = where(j <= 0, df[i, j] * exp(x[0, j]), 0)\n"
    assert _factored(src) == str(tcc.transform(src, "infer-ranges"))
    grad = tcc.grad("input x[1, 2]\noutput f[1, 1]\nf[i, j] = x[i, j]\n", of="f", wrt="x")
    assert "where(" in str(grad)
    assert_matches_interpreter(grad)


def test_a_zero_term_is_linear_of_any_degree():
    src = "input A[n, m], x[m]\noutput D[n, m]\nD[k, i] = A[k, i] * exp(x[i]) / (1 + x[i]) + 0 * x[i]\n"
    assert "D[k, i] = A[k, i] * D_c[i]" in _factored(src)
    _same_values(src, {"n": 3, "m": 4})


def test_single_use_monomials_are_inlined_and_dropped():
    src = ("input X[m, n], y[m], v[m]\noutput H[n, n]\nlocal P[n, m], Q[n, m]\n"
           "P[k, i] = X[i, k] * y[i]\nQ[k, i] = P[k, i] * (exp(v[i]) / (1 + v[i]) + 2 * exp(v[i]))\n"
           "H[k, j] = sum[i](Q[k, i] * X[i, j])\n")
    out = _factored(src)
    assert "P[" not in out and "Q[" not in out.split("\n", 3)[3].replace("Q_c", "")
    assert "H[k, j] = sum[i: 0..m - 1](X[i, k] * y[i] * Q_c[i] * X[i, j])" in out
    _same_values(src, {"m": 6, "n": 3})


def test_monomials_read_twice_or_results_are_kept():
    src = ("input X[m, n], y[m]\noutput H[n, n], P[n, m]\nlocal R[n, m]\n"
           "P[k, i] = X[i, k] * y[i]\nR[k, i] = X[i, k] * y[i] * y[i]\n"
           "H[k, j] = sum[i](P[k, i] * X[i, j] + R[k, i] * R[j, i])\n")
    assert _factored(src) == str(tcc.transform(src, "infer-ranges"))


def test_the_logistic_hessian_is_one_weighted_gram_matrix():
    """The n x m tangents are gone: a weight per example and one syrk-able product remain."""
    h = tcc.hessian(str(ROOT / "examples" / "logistic_regression.tcc"), of="f", wrt="w")
    text = str(h.program)
    assert "[n, m]" not in text.split("\n")[2]  # no local of the examples' size times the features'
    assert "sum[dw2_z0: 0..m - 1](X[dw2_z0, ddw_0] * y[dw2_z0] * dz2_c[dw2_z0] * y[dw2_z0] * X[dw2_z0, dw2_0])" in text
    assert "gram(X, dw2_w)" in str(h.compiled.program)
    rng = np.random.default_rng(41)
    n, m = 30, 60
    X, w, y = rng.standard_normal((m, n)) / np.sqrt(n), 0.1 * rng.standard_normal(n), rng.choice([-1.0, 1.0], m)
    s = 1 / (1 + np.exp(-(y * (X @ w))))
    np.testing.assert_allclose(h(X=X, w=w, y=y), X.T @ ((s * (1 - s))[:, None] * X), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["logistic_regression", "quadratic_form", "matrix_factorization", "urban"])
def test_example_hessians_and_gradients_still_check(name):
    src = (ROOT / "examples" / f"{name}.tcc").read_text()
    program = tcc.transform(tcc.parse(src), "infer-ranges")
    of = program.results()[-1]
    wrt = [d.name for d in program.inputs if not d.is_index]
    for result in tcc.check(src, of=of, wrt=wrt):
        assert result.ok, result


# ---------------------------------------------------------------------------
# generated bodies: linear or not in the full-rank read, always the same values
# ---------------------------------------------------------------------------


_LOW = st.sampled_from(["x[i]", "exp(x[i])", "(1 + x[i])", "2", "sin(x[i])", "x[i]**2"])


def _bodies(depth: int) -> st.SearchStrategy[str]:
    """Expressions over A[k, i] (full rank) and reads on i alone: linear in A often, not always."""
    leaf = st.one_of(st.just("A[k, i]"), _LOW)
    if depth == 0:
        return leaf
    sub = _bodies(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(["+", "-", "*", "/"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        sub.map(lambda e: f"-{e}"),
        sub.map(lambda e: f"exp({e} / 4)"),
    )


_SMOOTH = st.sampled_from(["exp(x[i])", "(1 + x[i])", "sin(x[i])", "(x[i] + 2)"])


def _linear(depth: int) -> st.SearchStrategy[str]:
    """Bodies linear in A[k, i] whose coefficient is never a plain product: always factored."""
    leaf = _SMOOTH.map(lambda c: f"A[k, i] * {c}")
    if depth == 0:
        return leaf
    sub = _linear(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(["+", "-"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        sub.map(lambda e: f"-{e}"),
        st.tuples(sub, _SMOOTH).map(lambda t: f"({t[0]} / {t[1]})"),
        st.tuples(_SMOOTH, sub).map(lambda t: f"({t[0]} * {t[1]})"),
    )


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(body=_linear(3))
def test_generated_linear_bodies_are_factored_and_keep_their_values(body):
    src = f"input A[n, m], x[m]\noutput D[n, m]\nD[k, i] = {body}\n"
    out = _factored(src)
    note(out)
    assert "D[k, i] = A[k, i] * D_c[i]" in out
    _same_values(src, {"n": 3, "m": 4})
    assert_matches_interpreter(tcc.transform(src, "infer-ranges,factor-linear"), {"n": 3, "m": 5})


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(body=_bodies(3))
def test_generated_bodies_keep_their_values(body):
    src = f"input A[n, m], x[m]\noutput D[n, m]\nD[k, i] = {body}\n"
    out = _factored(src)
    note(out)
    if "D_c[" in out:
        assert "D[k, i] = A[k, i] * D_c[" in out
    before = tcc.transform(src, "infer-ranges")
    after = tcc.transform(src, "infer-ranges,factor-linear")
    arrays = random_inputs(before, {"n": 3, "m": 4}, 5)
    want, got = evaluate(before, arrays)["D"], evaluate(after, arrays)["D"]
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-10, atol=1e-12)
