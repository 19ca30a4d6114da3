"""``gram(X, w)``: the weighted Gram matrix X^T diag(w) X (ir/gram.py, tcc.runtime.externs.gram_kernel, blas's symmetric rule).

The runtime gives it to BLAS's syrk when every weight is >= 0 and to GEMM
otherwise; both are checked against the interpreter's plain sum, on edge
data too.  The blas pass makes it from the symmetric product a second
derivative leaves (the logistic-regression Hessian).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import tcc
from compare import assert_matches_interpreter, assert_results_close
from tcc.reference.interpreter import evaluate
from tcc.ir.diagnostics import TccError

GRAM_SRC = "input X[m, n], w[m]\noutput G[n, n]\nG[a, b] = gram(X, w)[a, b]\n"
SUM_SRC = "input X[m, n], w[m]\noutput G[n, n]\nG[a, b] = sum[z](X[z, a] * w[z] * X[z, b])\n"


def _run_both(src: str, dtype: str = "float64", **arrays: np.ndarray) -> None:
    """Compiled (default CPU pipeline) against the interpreter on the written program."""
    program = tcc.transform(tcc.parse(src), "infer-ranges")
    got = tcc.compile(src, dtype=dtype)(**arrays)
    want = evaluate(program, {k: v.astype(np.float64) for k, v in arrays.items()}, np.float64)
    assert_results_close(got, want, dtype)


def test_gram_prints_and_parses_back():
    p = tcc.parse(GRAM_SRC)
    assert str(p) == GRAM_SRC
    assert str(tcc.parse(str(p))) == GRAM_SRC


@pytest.mark.parametrize("src,message", [
    ("input X[m, n], w[n]\noutput G[n, n]\nG[a, b] = gram(X, w)[a, b]\n",
     "gram needs one weight per row of 'X': 'X' is m x n, 'w' has n entries"),
    ("input X[m, n], w[m, n]\noutput G[n, n]\nG[a, b] = gram(X, w)[a, b]\n",
     "gram needs a matrix and a vector: 'w' has 2 dimensions"),
    ("input X[m, n], w[m]\noutput G[n, n]\nG[a, b] = gram(X)[a, b]\n",
     "gram takes a matrix and a vector: gram(X, w) (here: gram(X))"),
    ("input X[m, n], w[m]\noutput G[n, n]\nG[a, b] = 2 * gram(X, w)[a, b]\n",
     "gram is not element-wise: give it a definition of its own ('C[i, j] = gram(X, w)[i, j]') and read that"),
    ("input X[m, n], w[m]\noutput G[m, m]\nG[a, b] = gram(X, w)[a, b]\n",
     "'G' is declared m x m, but gram(X, w) is n x n"),
])
def test_malformed_gram_is_refused_with_the_reason(src, message):
    with pytest.raises(TccError) as err:
        tcc.compile(src)
    assert message in str(err.value)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("m,n", [(0, 3), (1, 1), (7, 5), (13, 2), (3, 11)])
@pytest.mark.parametrize("signs", ["nonnegative", "mixed"])
def test_compiled_gram_matches_the_interpreter(dtype, m, n, signs):
    rng = np.random.default_rng(m * 31 + n)
    w = rng.random(m) if signs == "nonnegative" else rng.standard_normal(m)
    _run_both(GRAM_SRC, dtype, X=rng.standard_normal((m, n)).astype(dtype), w=w.astype(dtype))


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf, -0.0, 0.0])
def test_gram_on_edge_weights_matches_the_interpreter(special):
    """A NaN or negative weight sends the call to GEMM; inf and -0 stay on syrk: the same values either way."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((6, 4))
    X[2, 1] = 0.0  # inf * 0 is NaN on both paths
    w = rng.random(6)
    w[2] = special
    _run_both(GRAM_SRC, X=X, w=w)


def test_gram_kernel_takes_both_paths():
    from tcc.runtime.externs.gram_kernel import run_gram

    rng = np.random.default_rng(5)
    X = rng.standard_normal((40, 9))
    for w in (rng.standard_normal(40), rng.random(40)):  # GEMM, then syrk
        out = np.empty((9, 9))
        run_gram(X, w, out)
        np.testing.assert_allclose(out, X.T @ (w[:, None] * X), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(out, out.T)  # syrk fills one triangle; NumPy mirrors it


@pytest.mark.parametrize("threads", [1, 2])
def test_blas_turns_the_weighted_symmetric_product_into_gram(threads):
    after = tcc.transform(SUM_SRC, "infer-ranges,blas")
    assert "G[a, b] = gram(X, w)[a, b]" in str(after)
    assert_matches_interpreter(SUM_SRC, {"m": 37, "n": 29}, threads=threads)


def test_blas_outlines_a_product_of_weights_with_its_sign():
    src = ("input X[m, n], y[m], v[m]\noutput G[n, n]\n"
           "G[a, b] = -sum[z](X[z, a] * y[z] * exp(v[z]) * X[z, b])\n")
    after = str(tcc.transform(src, "infer-ranges,blas"))
    assert "G_w[z] = -(y[z] * exp(v[z]))" in after
    assert "G[a, b] = gram(X, G_w)[a, b]" in after
    assert_matches_interpreter(src, {"m": 41, "n": 23})


@pytest.mark.parametrize("src", [
    # transposed reads, different tensors, unweighted (matmul(transpose(X), X) is syrk already), a batch
    "input X[n, m], w[m]\noutput G[n, n]\nG[a, b] = sum[z](X[a, z] * w[z] * X[b, z])\n",
    "input X[m, n], Y[m, n], w[m]\noutput G[n, n]\nG[a, b] = sum[z](X[z, a] * w[z] * Y[z, b])\n",
    "input X[m, n]\noutput G[n, n]\nG[a, b] = sum[z](X[z, a] * X[z, b])\n",
    "input X[h, m, n], w[m]\noutput G[h, n, n]\nG[c, a, b] = sum[z](X[c, z, a] * w[z] * X[c, z, b])\n",
])
def test_other_products_are_not_gram(src):
    after = str(tcc.transform(src, "infer-ranges,blas"))
    assert "gram(" not in after
    assert_matches_interpreter(src, {"m": 33, "n": 31, "h": 2})


def test_gradient_through_a_written_gram_matches_finite_differences():
    for result in tcc.check(GRAM_SRC, of="G", wrt="X,w", sizes={"m": 5, "n": 3}):
        assert result.ok, result


def test_the_cuda_target_refuses_gram_like_matmul():
    """As for matmul: the cuda target refuses a host BLAS call (before it needs PyCUDA); cuda-sim runs it."""
    with pytest.raises(TccError, match=r"gram\(X, w\) \(definition 'G'\) is computed by BLAS on the host"):
        tcc.compile(GRAM_SRC, target="cuda")
    assert_matches_interpreter(GRAM_SRC, {"m": 6, "n": 4}, target="cuda-sim")


def test_gram_extern_round_trips_through_the_loop_dump(tmp_path):
    from tcc.ir.loops_parser import parse_loop_program

    compiled = tcc.compile(GRAM_SRC)
    text = str(compiled.loops)
    assert "extern gram(X, w) -> G" in text
    assert str(parse_loop_program(text)) == text



_WEIGHTS = st.lists(st.sampled_from(["y[z]", "exp(v[z])", "y[z]**2", "(1 + v[z])", "2", "y[z] * v[z]"]),
                    min_size=1, max_size=3)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(weights=_WEIGHTS, negated=st.booleans(), outer=st.sampled_from(["", "2 * ", "-"]),
       m=st.sampled_from([0, 1, 2, 7, 40]), n=st.sampled_from([1, 3, 5, 33]),
       dtype=st.sampled_from(["float64", "float32"]), threads=st.sampled_from([1, 2]))
def test_generated_weighted_products_become_gram_and_match(weights, negated, outer, m, n, dtype, threads):
    summand = " * ".join(["X[z, a]"] + weights + ["X[z, b]"])
    src = (f"input X[m, n], y[m], v[m]\noutput G[n, n]\n"
           f"G[a, b] = {outer}sum[z]({'-' if negated else ''}{summand})\n")
    note(src)
    after = str(tcc.transform(src, "infer-ranges,blas{min-work=0}"))
    assert "gram(X, " in after
    assert_matches_interpreter(src, {"m": m, "n": n}, dtype, passes=None, threads=threads)
