"""Matrix-vector products through BLAS: the ``blas`` pass on contractions with one free index.

``y[i] = sum[j](A[i, j] * x[j])`` and the column read ``g[j] = sum[i](x[i] *
A[i, j])`` -- alone or inside element-wise work, like the quadratic form's
gradient -- become ``matmul`` of the matrix (read transposed in place for the
column read) with the vector stored as an ``m x 1`` matrix, which NumPy runs
as one BLAS call instead of a loop nest striding through ``A``.  Everything
goes through the public API and is compared with the reference interpreter.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import tcc
from tcc.backends.builtin_targets import DEFAULT_LOOP_PIPELINE

sys.path.insert(0, str(Path(__file__).parent))
from compare import RTOL, assert_matches_interpreter, random_inputs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ALWAYS = "infer-ranges,blas{min-work=0}"
HEAD = "input A[n, m], x[m], w[n]\n"
_EXTENTS = st.sampled_from([0, 1, 2, 7, 13])


#: the CPU pipeline without matvec-pair, which makes one loop nest of A u and A^T v
NO_PAIR = DEFAULT_LOOP_PIPELINE.replace(",matvec-pair,", ",")


def _externs(f) -> list[str]:
    return [str(k.extern) for k in f.loops.kernels if k.extern is not None]


def test_matvec_and_vecmat_as_printed():
    text = HEAD + "y[i] = sum[j](A[i, j] * x[j])\ng[j] = sum[i](w[i] * A[i, j])\n"
    got = str(tcc.transform(text, ALWAYS))
    assert got == (
        "input A[n, m], x[m], w[n]\n"
        "output y[n], g[m]\n"
        "local y_rhs[m, 1], y_mm[n, 1], g_rhs[n, 1], g_mm[m, 1]\n"
        "y_rhs[j, _u] = x[j]\n"
        "y_mm[i, _u] = matmul(A, y_rhs)[i, _u]\n"
        "y[i] = y_mm[i, 0]\n"
        "g_rhs[i, _u2] = w[i]\n"
        "g_mm[j, _u2] = matmul(transpose(A), g_rhs)[j, _u2]\n"
        "g[j] = g_mm[j, 0]\n"
    )
    assert str(tcc.parse(got)) == got
    f = tcc.compile(text, passes=NO_PAIR)
    assert _externs(f) == ["extern matmul(A, y_rhs) -> y_mm", "extern matmul(transpose(A), g_rhs) -> g_mm"]
    assert _externs(tcc.compile(text)) == []  # matvec-pair: one pass over A for both (test_matvec_pair.py)


def test_factors_on_the_free_index_alone_scale_the_result():
    got = str(tcc.transform(HEAD + "y[i] = sum[j](w[i] * A[i, j] * -x[j] / w[i])\n", ALWAYS))
    assert "y_rhs[j, _u] = -x[j]\n" in got and "y_mm[i, _u] = matmul(A, y_rhs)[i, _u]\n" in got
    assert got.endswith("y[i] = y_mm[i, 0] * w[i] * (1 / w[i])\n")


_FORMS = [
    "y[i] = sum[j](A[i, j] * x[j])",
    "y[j] = sum[i](w[i] * A[i, j])",
    "y[i] = 2 * sum[j](A[i, j] * -x[j]) + w[i]",
    "y[i] = tanh(sum[j](w[i] * A[i, j] * exp(x[j]) / 3)) * w[i]",
    "y[j] = sum[i](w[i] * A[i, j]) - sum[i](-A[i, j] / x[j] * w[i] * w[i])",
]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_FORMS), _EXTENTS, _EXTENTS, st.sampled_from(["float64", "float32"]), st.sampled_from([1, 2]))
def test_forms_compiled_match_the_interpreter(form, n, m, dtype, threads):
    text = HEAD + form + "\n"
    note(text)
    split = str(tcc.transform(text, "infer-ranges,blas"))
    assert "matmul(" in split and "sum[" not in split.split("\ny[")[1]
    f = tcc.compile(text, dtype=dtype, threads=threads)
    assert any(e.startswith("extern matmul(") for e in _externs(f))
    sizes = {"n": n, "m": m}
    assert_matches_interpreter(tcc.parse(text), sizes, dtype, threads=threads)
    # a given output array is written in place
    inputs = random_inputs(tcc.transform(text), sizes, seed=1, dtype=dtype)
    y = np.full(n if form.startswith("y[i]") else m, np.nan, dtype=dtype)
    assert f(**inputs, y=y)["y"] is y
    want = tcc.run(text, {k: v.astype(np.float64) for k, v in inputs.items()})["y"]
    np.testing.assert_allclose(y, want, rtol=RTOL[dtype], atol=RTOL[dtype] * max(1.0, float(np.abs(want).max(initial=0))))


def test_quadratic_form_gradient_is_two_blas_calls():
    g = tcc.grad(str(ROOT / "examples" / "quadratic_form.tcc"), "f", "x")
    f = tcc.compile(g, passes=NO_PAIR)
    assert _externs(f) == ["extern matmul(transpose(A), dx_rhs) -> dx_mm", "extern matmul(A, dx_rhs) -> dx_mm2"]
    assert _externs(tcc.compile(g)) == []  # matvec-pair: one pass over A for both
    assert "sum[" not in str(tcc.transform(g, "infer-ranges,blas"))
    for n in (0, 1, 2, 11, 200):
        for dtype in ("float64", "float32"):
            assert_matches_interpreter(g, {"n": n}, dtype, threads=2)
    assert_matches_interpreter(g, {"n": 5}, target="cuda-sim")


def test_quadratic_form_value_and_gradient_share_a_x():
    """value=True: f = x^T (A x) and df * (A^T x + A x) need A x once -- two gemv calls in all, as the
    peers' x @ (A @ x) and its vjp; the seed df scales the products instead of a copy of x."""
    g = tcc.grad(str(ROOT / "examples" / "quadratic_form.tcc"), "f", "x", value=True)
    f = tcc.compile(g, passes=NO_PAIR)
    assert _externs(f) == ["extern matmul(A, f_rhs) -> f_mm", "extern matmul(transpose(A), f_rhs) -> dx_mm"]
    assert _externs(tcc.compile(g)) == []  # matvec-pair: one pass over A for both
    for n in (0, 1, 2, 11, 200):
        for dtype in ("float64", "float32"):
            assert_matches_interpreter(g, {"n": n}, dtype, threads=2)
    assert_matches_interpreter(g, {"n": 5}, target="cuda-sim")
    for r in tcc.check(g, "dx", "x", sizes={"n": 4}):
        assert r.ok, str(r)


def test_derivatives_through_the_rewritten_program():
    text = HEAD + "y[i] = sum[j](A[i, j] * x[j])\ng[j] = sum[i](w[i] * A[i, j])\nf = sum[i](y[i] * y[i]) + sum[j](g[j] * x[j])\n"
    rewritten = tcc.transform(text, ALWAYS)
    assert "matmul(" in str(rewritten)
    for sizes in ({"n": 3, "m": 4}, {"n": 1, "m": 1}, {"n": 5, "m": 2}):
        for r in tcc.check(rewritten, "f", "A,x,w", sizes=sizes):
            assert r.ok and r.max_rel_error < 1e-7, str(r)


def test_min_work_and_left_alone():
    text = "input A[4, 5], x[5]\ny[i] = sum[j](A[i, j] * x[j])\n"
    assert "matmul" not in str(tcc.transform(text, "infer-ranges,blas"))
    assert "matmul" not in str(tcc.transform(text, "infer-ranges,blas{min-work=21}"))
    assert "matmul(A, y_rhs)" in str(tcc.transform(text, "infer-ranges,blas{min-work=20}"))
    for body in ("sum[j](sin(A[i, j] * x[j]))", "sum[j](exp(A[i, j]) * x[j])", "sum[j](A[i, j] * A[i, j] * x[j])", "sum[j](A[i, j] + x[j])", "sum[j](A[i, j])", "sum[j](x[j] * x[j]) * w[i]",
                 "sum[j: 0..i](A[i, j] * x[j])"):
        text = f"input A[n, n], x[n], w[n]\ny[i] = {body}\n"
        out = str(tcc.transform(text, ALWAYS))
        assert "matmul" not in out, body
        assert_matches_interpreter(tcc.parse(text), {"n": 4})


def test_cuda_sim_still_runs_matvecs():
    text = HEAD + "y[i] = sum[j](A[i, j] * x[j]) + sum[j](A[j, i] * x[j])\n"
    assert_matches_interpreter(tcc.parse(text.replace("x[m]", "x[n]").replace("A[n, m]", "A[n, n]")), {"n": 6, "m": 6},
                               target="cuda-sim")
