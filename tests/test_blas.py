"""Matrix products: ``matmul`` definitions and the ``blas`` pass (seed 002, sec. V: "BLAS for contractions").

``C[i, j] = matmul(A, B)[i, j]`` is a definition of its own (a two-argument
``MatrixFn``): the interpreter computes it with ``np.matmul``, autodiff has
reverse and forward rules for it, ``lower-loops`` makes it an external kernel
``extern matmul(A, B) -> C`` that the CPU runtime runs with NumPy's BLAS, and
target cuda refuses it.  The ``blas`` pass (in the CPU pipeline, before
``lower-loops``) rewrites contractions ``D[a, b] = sum[z](left * right)`` into
such definitions, so the logistic-regression Hessian's n x n x m contraction
runs through BLAS.  Everything here goes through the public API.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import tcc
from tcc.build import DEFAULT_GPU_PIPELINE, DEFAULT_LOOP_PIPELINE
from tcc.derivatives import hessian_program
from tcc.cli.driver import main
from tcc.ir.verifier import verify
from tcc.pipeline import format_pipeline, resolve_pipeline

sys.path.insert(0, str(Path(__file__).parent))
from compare import assert_matches_interpreter, random_inputs  # noqa: E402
from loop_eval import run_loops  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LOGISTIC = str(ROOT / "examples" / "logistic_regression.tcc")

MATMUL = """input A[p, q], B[q, r]
C[i, j] = matmul(A, B)[i, j]
f = sum[i, j](C[i, j] * sin(C[i, j]))
"""

ALWAYS = "infer-ranges,blas{min-work=0}"


def blas(src: str, passes: str = "infer-ranges,blas") -> str:
    return str(tcc.transform(src, passes))


def _close(got, want, rtol=1e-12):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, float(np.abs(want).max(initial=0))))


# ---------------------------------------------------------------------------
# the matmul definition: language, verifier, interpreter
# ---------------------------------------------------------------------------


def test_matmul_prints_and_parses_back():
    p = tcc.transform(MATMUL)
    text = str(p)
    assert "output C[p, r], f\nC[i, j] = matmul(A, B)[i, j]\n" in text
    again = tcc.parse(text)
    assert str(again) == text
    assert again.definition("C").body is p.definition("C").body  # hash-consed: the same node
    assert again.definition("C").body.args == ("A", "B")
    # the same tensor twice, and an earlier definition as an argument
    src = "input X[n, n]\nY[i, j] = X[i, j] + 1\nS[i, j] = matmul(Y, Y)[i, j]\nT[i, j] = matmul(S, X)[i, j]\n"
    text = str(tcc.transform(src))
    assert "S[i, j] = matmul(Y, Y)[i, j]\nT[i, j] = matmul(S, X)[i, j]" in text
    assert str(tcc.parse(text)) == text


# every way of reading the operands: A (p x q) or transpose(AT) with AT q x p, likewise B (q x r)
TRANSPOSED = {
    (ta, tb): "input {}, {}\nC[i, j] = matmul({}, {})[i, j]\nf = sum[i, j](C[i, j] * sin(C[i, j]))\n".format(
        "AT[q, p]" if ta else "A[p, q]", "BT[r, q]" if tb else "B[q, r]",
        "transpose(AT)" if ta else "A", "transpose(BT)" if tb else "B")
    for ta in (False, True) for tb in (False, True)
}


def _operands(ta: bool, tb: bool, A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    return {"AT" if ta else "A": A.T.copy() if ta else A, "BT" if tb else "B": B.T.copy() if tb else B}


@pytest.mark.parametrize("flags", list(TRANSPOSED))
def test_transposed_matmul_language_interpreter_and_derivatives(flags):
    src = TRANSPOSED[flags]
    p = tcc.transform(src)
    text = str(p)
    assert str(tcc.parse(text)) == text and tcc.parse(text).definition("C").body is p.definition("C").body
    assert p.definition("C").body.transposed == flags
    import pickle

    assert pickle.loads(pickle.dumps(p.definition("C").body)) is p.definition("C").body
    rng = np.random.default_rng(2)
    for shape in ((3, 4, 2), (1, 1, 1), (0, 3, 2), (2, 0, 5), (7, 5, 1)):
        A, B = rng.standard_normal(shape[:2]), rng.standard_normal(shape[1:])
        inputs = _operands(*flags, A, B)
        for dtype in ("float64", "float32"):
            out = tcc.run(src, inputs, dtype=dtype)
            _close(out["C"], A @ B, 1e-12 if dtype == "float64" else 1e-5)
            # compiled: one extern reading the stored arrays, with the flags
            f = tcc.compile(src, dtype=dtype)
            assert [k.extern.transposed for k in f.loops.kernels if k.extern is not None] == [flags if any(flags) else ()]
            _close(f(**{k: v.astype(dtype) for k, v in inputs.items()})["C"], A @ B, 1e-12 if dtype == "float64" else 1e-5)
    # reverse and forward mode against finite differences, and their compiled forms
    names = [d.name for d in p.inputs if not d.is_index]
    for r in tcc.check(src, "f", ",".join(names), sizes={"p": 3, "q": 4, "r": 2}):
        assert r.ok and r.max_rel_error < 1e-7, str(r)
    assert_matches_interpreter(tcc.grad(src, "f", ",".join(names)), {"p": 3, "q": 4, "r": 2})
    # forward mode: the directional derivative is the reverse gradient along the tangent
    inputs = _operands(*flags, rng.standard_normal((3, 4)), rng.standard_normal((4, 2)))
    tangents = {"d" + k: rng.standard_normal(v.shape) for k, v in inputs.items()}
    grads = tcc.run(tcc.grad(src, "f", ",".join(names)), {**inputs, "df": 1.0})
    jvp = tcc.run(tcc.grad(src, "f", ",".join(names), mode="forward"), {**inputs, **tangents})["df"]
    _close(jvp, sum(float((grads["d" + k] * tangents["d" + k]).sum()) for k in names), 1e-10)
    # the cuda target refuses it as it refuses every product, naming the call as written
    with pytest.raises(tcc.TccError, match=r"matmul\((transpose\()?A"):
        tcc.compile(src, target="cuda")


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 4, 3), (5, 1, 2), (3, 4, 1), (6, 7, 5), (0, 3, 2), (2, 0, 3)])
def test_interpreter_is_numpy_matmul(shape):
    p, q, r = shape
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((p, q)), rng.standard_normal((q, r))
    out = tcc.run(MATMUL, {"A": A, "B": B})
    _close(out["C"], A @ B)
    _close(out["f"], ((A @ B) * np.sin(A @ B)).sum())
    out32 = tcc.run(MATMUL, {"A": A, "B": B}, dtype=np.float32)
    assert out32["C"].dtype == np.float32
    _close(out32["C"], A @ B, 1e-5)


@pytest.mark.parametrize(
    "src, message",
    [
        ("input A[n, m], B[n, m]\nC[i, j] = matmul(A, B)[i, j]\n",
         "matmul needs the columns of 'A' to match the rows of 'B': 'A' is n x m, 'B' is n x m"),
        ("input A[3, 4], B[5, 2]\nC[i, j] = matmul(A, B)[i, j]\n",
         "matmul needs the columns of 'A' to match the rows of 'B': 'A' is 3 x 4, 'B' is 5 x 2"),
        ("input A[n, m], x[m]\nC[i, j] = matmul(A, x)[i, j]\n", "matmul needs a matrix (2 dimensions): 'x' has 1 dimension"),
        ("input A[n, m], B[m, k]\noutput C[n, n]\nC[i, j] = matmul(A, B)[i, j]\n",
         "'C' is declared n x n, but matmul(A, B) is n x k"),
        ("input A[n, m]\nC[i, j] = matmul(A, Z)[i, j]\n", "undeclared tensor 'Z'"),
        ("input A[n, m], B[m, k]\nC[i, j] = matmul(A, transpose(B))[i, j]\n",
         "matmul needs the columns of 'A' to match the rows of 'transpose(B)': 'A' is n x m, 'B' is m x k"),
        ("input A[n, m]\noutput C[n, n]\nC[i, j] = matmul(transpose(A), A)[i, j]\n",
         "'C' is declared n x n, but matmul(transpose(A), A) is m x m"),
        ("input A[b, n, m], B[c, m, k]\nC[h, i, j] = matmul(A, B)[h, i, j]\n",
         "matmul needs 'A' and 'B' to have the same batch extents (all but the last two): 'A' is b x n x m, "
         "'B' is c x m x k"),
        ("input A[b, n, m], B[m, k]\nC[i, j] = matmul(A, B)[i, j]\n",
         "matmul(A, B) has 3 dimensions: 'C' must have 3 indices, not 2"),
        ("input A[n, m], B[m, k]\nC[i, j] = matmul(A, transpose(B), A)[i, j]\n",
         "matmul takes two matrices: matmul(A, B) (here: matmul(A, transpose(B), A))"),
        ("input A[n, m], B[m, k]\nC[i, j] = matmul(A)[i, j]\n", "matmul takes two matrices: matmul(A, B) (here: matmul(A))"),
        ("input A[n, n]\nC[i, j] = inv(A, A)[i, j]\n", "inv takes one matrix: inv(A) (here: inv(A, A))"),
        ("input A[n, m], B[m, k]\nC[i] = matmul(A, B)[i]\n",
         "matmul gives a matrix; its definition is written 'C[i, j] = matmul(A, B)[i, j]' (here: 'C[i]' with indices [i])"),
        ("input A[n, m], B[m, k]\nC[i, j] = matmul(A, B)[j, i]\n",
         "matmul gives a matrix; its definition is written 'C[i, j] = matmul(A, B)[i, j]' (here: 'C[i, j]' with indices [j, i])"),
        ("input A[n, m], B[m, k]\nC[i, j] = matmul(A, B)[i, j] + 1\n",
         "a matrix product is a definition of its own: define 'C' as matmul(A, B) alone and use 'C' in other definitions"),
        ("input A[n, m], B[m, k]\nC[i, j] = 2 * matmul(A, B)[i, j]\n",
         "matmul is not element-wise: give it a definition of its own ('C[i, j] = matmul(A, B)[i, j]') and read that"),
        ("input A[n, m], B[m, k]\nC = matmul(A, B)\n",
         "matmul gives a matrix; its definition is written 'C[i, j] = matmul(A, B)[i, j]' (here: 'C' with indices [])"),
        ("input matmul[n]\n", "'matmul' is a reserved word"),
    ],
)
def test_errors(src, message):
    with pytest.raises(tcc.TccError) as exc:
        tcc.transform(src)
    assert exc.value.message == message


# ---------------------------------------------------------------------------
# the blas pass: what it rewrites
# ---------------------------------------------------------------------------


def test_logistic_hessian_ends_in_a_gram_matrix():
    """factor-linear leaves X[z, a] * <weights on z> * X[z, b]; blas makes it gram(X, W) (syrk at run time)."""
    h = hessian_program(LOGISTIC, "f", "w")
    before = str(tcc.transform(h, "infer-ranges"))
    assert ("dw2[ddw_0, dw2_0] = sum[dw2_z0: 0..m - 1](X[dw2_z0, ddw_0] * y[dw2_z0] * dz2_c[dw2_z0] * y[dw2_z0] "
            "* X[dw2_z0, dw2_0])") in before
    text = str(tcc.transform(h, "infer-ranges,blas"))
    assert text.endswith(
        "dw2_w[dw2_z0] = y[dw2_z0] * dz2_c[dw2_z0] * y[dw2_z0]\n"
        "dw2[ddw_0, dw2_0] = gram(X, dw2_w)[ddw_0, dw2_0]\n"
    )
    assert "output dw2[n, n]\n" in text and "dw2_w[m]" in text.split("\n")[2]  # a local
    assert str(tcc.parse(text)) == text
    # the CPU pipeline runs it right before lower-loops; the GPU pipeline does not
    assert ",blas,lower-loops," in DEFAULT_LOOP_PIPELINE and "blas" not in DEFAULT_GPU_PIPELINE.split(",")
    loops = str(tcc.transform(h, DEFAULT_LOOP_PIPELINE))
    assert "kernel dw2 {\n  extern gram(X, dw2_w) -> dw2\n}" in loops
    # the weights are an element-wise kernel over the examples, fused with z's nest and parallel
    assert "dw2_w[i] = y[i] * dz2_c_v2 * y[i]" in loops
    assert "kernel z_dz2_c_t_dz2_c_dw2_w {\n  parallel for i in 0..m - 1 {" in loops
    assert "extern" not in str(tcc.transform(h, DEFAULT_GPU_PIPELINE))


def _logistic_hessian_numpy(X, w, y):
    s = 1 / (1 + np.exp(-(y * (X @ w))))
    return (X.T * (s * (1 - s))) @ X


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n, m", [(1, 1), (1, 5), (4, 1), (3, 7), (7, 3), (20, 33)])
def test_logistic_hessian_compiled_matches_interpreter_and_numpy(n, m, dtype):
    H = tcc.hessian(LOGISTIC, of="f", wrt="w", dtype=dtype)
    assert any(k.extern is not None and k.extern.fn == "gram" for k in H.compiled.loops.kernels)
    rng = np.random.default_rng(n * 100 + m)
    X = rng.standard_normal((m, n))
    w = rng.standard_normal(n) * 0.3
    y = rng.choice([-1.0, 1.0], m)
    got = H(X=X.astype(dtype), w=w.astype(dtype), y=y.astype(dtype))
    assert got.shape == (n, n) and got.dtype == np.dtype(dtype)
    rtol = 1e-12 if dtype == "float64" else 2e-5
    _close(got, _logistic_hessian_numpy(X, w, y), rtol)
    _close(got, tcc.run(H.program, {"X": X, "w": w, "y": y})["dw2"], rtol)
    # every definition of the Hessian program, against the interpreter (the outlined factor is not returned)
    assert_matches_interpreter(H.program, {"n": n, "m": m}, dtype)


# each: a program, the definition blas rewrites, the lines it prints
REWRITES = {
    "plain": (
        "input A[n, k], B[k, m]\nC[i, j] = sum[z](A[i, z] * B[z, j])\n",
        ["C[i, j] = matmul(A, B)[i, j]"],
    ),
    "transposed": (
        "input X[m, n]\nH[a, b] = sum[z](X[z, a] * X[z, b])\n",
        ["output H[n, n]\nH[a, b] = matmul(transpose(X), X)[a, b]"],  # X^T read in place: no copy
    ),
    "both sides outlined": (
        "input A[n, k], B[m, k], u[k]\nC[i, j] = sum[z](exp(A[i, z]) * u[z] * B[j, z])\n",
        ["local C_lhs[n, k]", "C_lhs[i, z] = exp(A[i, z]) * u[z]", "C[i, j] = matmul(C_lhs, transpose(B))[i, j]"],
    ),
    "z-only factor moves right to keep a plain left": (
        "input A[n, k], B[m, k], u[k]\nC[i, j] = sum[z](A[i, z] * u[z] * exp(B[j, z]))\n",
        # defined the way round its operand is stored (a contiguous write), passed transposed
        ["C_rhs[j, z] = u[z] * exp(B[j, z])", "C[i, j] = matmul(A, transpose(C_rhs))[i, j]"],
    ),
    "a z-only factor stays left when both sides are plain reads": (
        "input A[n, k], B[m, k], u[k]\nC[i, j] = sum[z](A[i, z] * u[z] * B[j, z])\n",
        ["C_lhs[i, z] = A[i, z] * u[z]", "C[i, j] = matmul(C_lhs, transpose(B))[i, j]"],
    ),
    "transposed operands in every position": (
        "input A[k, n], B[m, k], E[n, k], F[k, m]\n"
        "C[i, j] = sum[z](A[z, i] * B[j, z]) + sum[t](A[t, i] * F[t, j]) + sum[s](E[i, s] * B[j, s])\n",
        ["C_mm[i, j] = matmul(transpose(A), transpose(B))[i, j]", "C_mm2[i, j] = matmul(transpose(A), F)[i, j]",
         "C_mm3[i, j] = matmul(E, transpose(B))[i, j]", "C[i, j] = C_mm[i, j] + C_mm2[i, j] + C_mm3[i, j]"],
    ),
    "a square tensor read transposed": (
        "input S[n, n], B[n, m]\nC[i, j] = sum[z](S[z, i] * B[z, j])\n",
        ["C[i, j] = matmul(transpose(S), B)[i, j]"],
    ),
    "constant and negation outside": (
        "input A[n, k], B[k, m]\nC[i, j] = -(2 * sum[z](A[i, z] * B[z, j]))\n",
        ["C_lhs[i, z] = -(2 * A[i, z])", "C[i, j] = matmul(C_lhs, B)[i, j]"],
    ),
    "factors on a and b outside": (
        "input A[n, k], B[k, m], u[n], v[m]\nC[i, j] = u[i] * sum[z](A[i, z] * B[z, j]) * v[j]\n",
        ["C_lhs[i, z] = u[i] * A[i, z]", "C_rhs[z, j] = B[z, j] * v[j]", "C[i, j] = matmul(C_lhs, C_rhs)[i, j]"],
    ),
    "division and negation inside": (
        "input A[n, k], B[k, m], s[n]\nC[i, j] = sum[z](-(A[i, z] * B[z, j]) / s[i])\n",
        ["C_lhs[i, z] = -(A[i, z] * (1 / s[i]))", "C[i, j] = matmul(C_lhs, B)[i, j]"],
    ),
    "a sub-range of the columns": (
        "input A[n, 4], B[4, m]\noutput C[n, m]\nC[i, j] = sum[z: 0..2](A[i, z] * B[z, j])\n",
        ["C_lhs[i, z] = A[i, z]", "C_rhs[z, j] = B[z, j]", "C[i, j] = matmul(C_lhs, C_rhs)[i, j]"],
    ),
    "a reduction inside a factor": (
        "input A[n, k], B[k, m], W[k, p]\nC[i, j] = sum[z](A[i, z] * B[z, j] * sum[t](W[z, t]))\n",
        ["C_lhs[i, z] = A[i, z] * sum[t: 0..p - 1](W[z, t])", "C[i, j] = matmul(C_lhs, B)[i, j]"],
    ),
    # the epilogue split: contractions inside element-wise work become definitions of their own
    "epilogue: the dense layer": (
        "input X[n, k], W[m, k], b[m]\nY[a, c] = tanh(sum[z](X[a, z] * W[c, z]) + b[c])\n",
        ["local Y_mm[n, m]", "Y_mm[a, c] = matmul(X, transpose(W))[a, c]", "Y[a, c] = tanh(Y_mm[a, c] + b[c])"],
    ),
    "epilogue: a scaled contraction minus a tensor": (
        "input A[n, k], B[k, m], D[n, m]\nC[i, j] = 2 * sum[z](A[i, z] * B[z, j]) - D[i, j]\n",
        ["C_mm[i, j] = matmul(A, B)[i, j]", "C[i, j] = 2 * C_mm[i, j] - D[i, j]"],
    ),
    "epilogue: a contraction plus a constant": (
        "input A[n, k], B[k, m]\nC[i, j] = sum[z](A[i, z] * B[z, j]) + 1\n",
        ["C_mm[i, j] = matmul(A, B)[i, j]", "C[i, j] = C_mm[i, j] + 1"],
    ),
    "epilogue: a sum of two contractions": (
        "input A[n, k], B[k, m], E[n, p], F[p, m]\nC[i, j] = sum[z](A[i, z] * B[z, j]) + sum[t](exp(E[i, t]) * F[t, j])\n",
        ["C_mm[i, j] = matmul(A, B)[i, j]", "C_mm2_lhs[i, t] = exp(E[i, t])", "C_mm2[i, j] = matmul(C_mm2_lhs, F)[i, j]",
         "C[i, j] = C_mm[i, j] + C_mm2[i, j]"],
    ),
    "epilogue: two sums over different variables": (
        "input A[n, k], B[k, m]\nC[i, j] = sum[z](A[i, z] * B[z, j]) * sum[t](A[i, t] * B[t, j])\n",
        ["C_mm[i, j] = matmul(A, B)[i, j]", "C_mm2[i, j] = matmul(A, B)[i, j]", "C[i, j] = C_mm[i, j] * C_mm2[i, j]"],
    ),
    "epilogue: the same contraction twice is one product": (
        "input A[n, k], B[k, m]\nC[i, j] = sum[z](A[i, z] * B[z, j]) * sum[z](A[i, z] * B[z, j])\n",
        ["local C_mm[n, m]", "C_mm[i, j] = matmul(A, B)[i, j]", "C[i, j] = C_mm[i, j] * C_mm[i, j]"],
    ),
    "epilogue: a contraction on two of three indices": (
        "input A[n, k], B[k, m], v[p]\nC[i, j, l] = sum[z](A[l, z] * B[z, i]) * v[j]\n",
        ["local C_mm[m, n]", "C_mm[i, l] = matmul(transpose(B), transpose(A))[i, l]", "C[i, j, l] = C_mm[i, l] * v[j]"],
    ),
    # batches of products: the definition's leading indices are the batch
    "batched: attention scores": (
        "input Q[b, n, d], K[b, m, d]\nS[h, i, j] = sum[z](Q[h, i, z] * K[h, j, z])\n",
        ["output S[b, n, m]\nS[h, i, j] = matmul(Q, transpose(K))[h, i, j]"],
    ),
    "batched: one matrix for the whole batch": (
        "input Q[b, n, d], W[d, m]\nS[h, i, j] = sum[z](Q[h, i, z] * W[z, j])\n",
        ["output S[b, n, m]\nS[h, i, j] = matmul(Q, W)[h, i, j]"],
    ),
    "batched: transposed batch members on both sides": (
        "input A[b, k, n], B[b, m, k]\nS[h, i, j] = sum[z](A[h, z, i] * B[h, j, z])\n",
        ["S[h, i, j] = matmul(transpose(A), transpose(B))[h, i, j]"],
    ),
    "batched: a factor on the batch only": (
        "input Q[b, n, d], K[b, m, d], s[b]\nS[h, i, j] = sum[z](Q[h, i, z] * K[h, j, z]) / s[h]\n",
        ["S_lhs[h, i, z] = Q[h, i, z] * (1 / s[h])", "S[h, i, j] = matmul(S_lhs, transpose(K))[h, i, j]"],
    ),
    "batched: a three-factor sum as a batch (the first index)": (
        "input A[n, k], B[k, m]\nC[i, j, l] = sum[z](A[i, z] * B[z, j] * A[l, z])\n",
        ["C_lhs[i, z, j] = A[i, z] * B[z, j]", "C[i, j, l] = matmul(transpose(C_lhs), transpose(A))[i, j, l]"],
    ),
    "batched: an epilogue on a batch of products": (
        "input Q[b, n, d], K[b, m, d], D[b, n, m]\nS[h, i, j] = exp(sum[z](Q[h, i, z] * K[h, j, z]) / 8) * D[h, i, j]\n",
        ["S_mm[h, i, j] = matmul(Q, transpose(K))[h, i, j]", "S[h, i, j] = exp(S_mm[h, i, j] / 8) * D[h, i, j]"],
    ),
    "batched: the batch index last in the definition": (
        "input Q[b, n, d], K[b, m, d]\nS[i, j, h] = sum[z](Q[h, i, z] * K[h, j, z]) + 1\n",
        ["S_mm[h, i, j] = matmul(Q, transpose(K))[h, i, j]", "S[i, j, h] = S_mm[h, i, j] + 1"],
    ),
    "batched: the same product for every batch member is one matrix": (
        "input A[n, k], B[k, m], u[p]\noutput C[p, n, m]\nC[l, i, j] = sum[z](A[i, z] * B[z, j])\n",
        ["C_mm[i, j] = matmul(A, B)[i, j]", "C[l, i, j] = C_mm[i, j]"],
    ),
    "epilogue: a contraction inside a sum that does not match": (
        "input A[n, k], B[k, m]\nC[i, j] = sum[t](exp(sum[z](A[i, z] * B[z, j])) * A[i, t])\n",
        ["C_mm[i, j] = matmul(A, B)[i, j]", "C[i, j] = sum[t: 0..k - 1](exp(C_mm[i, j]) * A[i, t])"],
    ),
}


@pytest.mark.parametrize("name", REWRITES)
def test_rewrites(name):
    src, lines = REWRITES[name]
    text = blas(src)
    for line in lines:
        assert line + "\n" in text, text
    assert str(tcc.parse(text)) == text
    p = tcc.transform(src)
    out = tcc.transform(p, "blas")
    verify(out)
    # the rewritten program computes what the original does, interpreted and compiled
    sizes = {"n": 5, "k": 4, "m": 3, "p": 2, "b": 3, "d": 2}
    inputs = random_inputs(p, sizes, seed=3)
    want = tcc.run(p, inputs)
    got = tcc.run(out, inputs)
    for d in p.definitions:
        _close(got[d.name], want[d.name])
    for dtype in ("float64", "float32"):
        assert_matches_interpreter(p, sizes, dtype)
        assert_matches_interpreter(p, dict.fromkeys(sizes, 1), dtype)
    assert_matches_interpreter(p, {**sizes, "b": 0, "k": 0}, threads=2)


# ---------------------------------------------------------------------------
# the epilogue split on generated programs: compiled against the interpreter
# ---------------------------------------------------------------------------

_HEAD = "input X[n, k], XT[k, n], W[k, m], WT[m, k], u[k], b[m], v[n], D[n, m]\n"
_LEFT = ("X[a, {z}]", "XT[{z}, a]", "exp(X[a, {z}])", "X[a, {z}] * u[{z}]", "-XT[{z}, a]")
_RIGHT = ("W[{z}, c]", "WT[c, {z}]", "u[{z}] * W[{z}, c]", "sin(WT[c, {z}])")
_EPILOGUES = (
    "tanh({0} + b[c])", "2 * {0} - D[a, c]", "{0} + {1}", "{0} * sigmoid({1})", "v[a] * {0} * b[c] + 1",
    "{0} / (1 + {0} * {0})", "relu({0} - {1}) + D[a, c]", "where(a <= c, D[a, c], 0) - {0}", "exp(-{0} / 8) * {0}",
)
_EXTENTS = st.sampled_from([0, 1, 2, 3, 5, 7, 11])


@st.composite
def epilogue_programs(draw) -> tuple[str, dict[str, int]]:
    """A definition wrapping one or two contractions (every operand layout) in element-wise work."""
    sums = [
        f"sum[{z}]({draw(st.sampled_from(_LEFT)).format(z=z)} * {draw(st.sampled_from(_RIGHT)).format(z=z)})"
        for z in ("z", "t")
    ]
    body = draw(st.sampled_from(_EPILOGUES)).format(*sums)
    text = _HEAD + f"Y[a, c] = {body}\n"
    if draw(st.booleans()):  # an element-wise consumer for the epilogue to fuse with
        text += "Z[a, c] = Y[a, c] * D[a, c] + 1\n"
    return text, {"n": draw(_EXTENTS), "k": draw(_EXTENTS), "m": draw(_EXTENTS)}


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(epilogue_programs(), st.sampled_from(["float64", "float32"]), st.sampled_from([1, 2]))
def test_epilogues_compiled_match_the_interpreter(prog, dtype, threads):
    text, sizes = prog
    note(text)
    split = str(tcc.transform(text, "infer-ranges,blas"))
    note(split)
    assert "Y_mm[a, c] = matmul(" in split and "Y[a, c] = " in split and "sum[" not in split.split("Y[a, c] = ")[1]
    assert str(tcc.parse(split)) == split
    loops = tcc.compile(text, dtype=dtype, threads=threads).loops
    assert any(k.extern is not None and k.extern.fn == "matmul" for k in loops.kernels)
    assert_matches_interpreter(tcc.parse(text), sizes, dtype, threads=threads)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["X[a, z]", "XT[z, a]"]), st.sampled_from(["W[z, c]", "WT[c, z]"]), _EXTENTS, _EXTENTS,
       _EXTENTS, st.sampled_from(["float64", "float32"]), st.sampled_from([1, 2]))
def test_transposed_operands_are_read_in_place(left, right, n, k, m, dtype, threads):
    """A product of two plain reads, each stored either way round, is one call and no copy."""
    text = _HEAD + f"Y[a, c] = sum[z]({left} * {right})\n"
    note(text)
    f = tcc.compile(text, dtype=dtype, threads=threads)
    flags = (left.startswith("XT"), right.startswith("WT"))
    assert [str(k.extern) for k in f.loops.kernels] == [
        f"extern matmul({'transpose(XT)' if flags[0] else 'X'}, {'transpose(WT)' if flags[1] else 'W'}) -> Y"]
    sizes = {"n": n, "k": k, "m": m}
    assert_matches_interpreter(tcc.parse(text), sizes, dtype, threads=threads)
    # a given output array is written in place
    inputs = random_inputs(tcc.transform(text), sizes, seed=1, dtype=dtype)
    Y = np.full((n, m), np.nan, dtype=dtype)
    assert f(**inputs, Y=Y)["Y"] is Y
    _close(Y, tcc.run(text, inputs, dtype=dtype)["Y"], 1e-12 if dtype == "float64" else 1e-5)


_BHEAD = "input Q[b, n, d], QT[b, d, n], P[n, d], K[b, m, d], KT[b, d, m], W[d, m], WT[m, d], D[b, n, m]\n"


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["Q[h, i, z]", "QT[h, z, i]", "exp(Q[h, i, z])", "P[i, z]"]),
       st.sampled_from(["K[h, j, z]", "KT[h, z, j]", "W[z, j]", "WT[j, z]", "K[h, j, z] * W[z, j]"]),
       st.sampled_from(["{0}", "exp({0} / 8)", "{0} * D[h, i, j] - 1"]),
       st.fixed_dictionaries({x: _EXTENTS for x in "bndm"}), st.sampled_from(["float64", "float32"]),
       st.sampled_from([1, 2]))
def test_batched_products_compiled_match_the_interpreter(left, right, epilogue, sizes, dtype, threads):
    """Batches of products S[h, i, j] = sum[z](L * R), with one side shared by the whole batch or not,
    read either way round, inside an epilogue or not."""
    text = _BHEAD + "output S[b, n, m]\nS[h, i, j] = " + epilogue.format(f"sum[z]({left} * {right})") + "\n"
    note(text)
    rewritten = str(tcc.transform(text, "infer-ranges,blas"))
    note(rewritten)
    assert "sum[" not in rewritten and str(tcc.parse(rewritten)) == rewritten
    f = tcc.compile(text, dtype=dtype, threads=threads)
    assert any(k.extern is not None and k.extern.fn == "matmul" for k in f.loops.kernels)
    got = assert_matches_interpreter(tcc.parse(text), sizes, dtype, threads=threads)
    # a given output array is written in place (by the extern itself when S is the product)
    inputs = random_inputs(tcc.transform(text), sizes, dtype=dtype)
    S = np.full((sizes["b"], sizes["n"], sizes["m"]), np.nan, dtype=dtype)
    assert f(**inputs, S=S)["S"] is S
    np.testing.assert_array_equal(S, got["S"])


ATTENTION = (
    "input Q[b, n, d], K[b, m, d], V[b, m, d]\n"
    "S[h, i, j] = exp(sum[z](Q[h, i, z] * K[h, j, z]) / 4)\n"
    "O[h, i, e] = sum[j](S[h, i, j] * V[h, j, e])\n"
    "f = sum[h, i, e](O[h, i, e] * O[h, i, e])\n"
)


def test_batched_matmul_language_derivatives_and_cuda_sim():
    src = "input Q[b, n, d], K[b, m, d]\nS[h, i, j] = matmul(Q, transpose(K))[h, i, j]\nf = sum[h, i, j](sin(S[h, i, j]))\n"
    text = str(tcc.transform(src))
    assert "output S[b, n, m], f\nS[h, i, j] = matmul(Q, transpose(K))[h, i, j]\n" in text
    assert str(tcc.parse(text)) == text
    rng = np.random.default_rng(8)
    Q, K = rng.standard_normal((3, 4, 2)), rng.standard_normal((3, 5, 2))
    _close(tcc.run(src, {"Q": Q, "K": K})["S"], Q @ np.swapaxes(K, 1, 2))
    f = tcc.compile(src)
    assert str(f.loops.kernels[0].extern) == "extern matmul(Q, transpose(K)) -> S"
    _close(f(Q=Q, K=K)["S"], Q @ np.swapaxes(K, 1, 2))
    for r in tcc.check(src, "f", "Q,K", sizes={"b": 2, "n": 3, "d": 2, "m": 4}):
        assert r.ok and r.max_rel_error < 1e-7, str(r)
    # forward mode along a tangent equals the reverse gradient's projection
    grads = tcc.run(tcc.grad(src, "f", "Q,K"), {"Q": Q, "K": K, "df": 1.0})
    dQ, dK = rng.standard_normal(Q.shape), rng.standard_normal(K.shape)
    jvp = tcc.run(tcc.grad(src, "f", "Q,K", mode="forward"), {"Q": Q, "K": K, "dQ": dQ, "dK": dK})["df"]
    _close(jvp, float((grads["dQ"] * dQ).sum() + (grads["dK"] * dK).sum()), 1e-10)
    # attention: every product of the forward program and of its gradient is a (batched) matmul
    grad = tcc.grad(ATTENTION, "f", "Q,K,V")
    for prog in (tcc.parse(ATTENTION), grad):
        externs = [k.extern for k in tcc.compile(prog).loops.kernels if k.extern is not None]
        assert externs and all(e.fn == "matmul" for e in externs)
        for sizes in ({"b": 2, "n": 3, "d": 5, "m": 7}, {"b": 1, "n": 1, "d": 1, "m": 1}, {"b": 0, "n": 2, "d": 3, "m": 2}):
            for dtype in ("float64", "float32"):
                assert_matches_interpreter(prog, sizes, dtype, threads=2)
        # the GPU pipeline keeps loop nests
        assert_matches_interpreter(prog, {"b": 2, "n": 3, "d": 2, "m": 3}, target="cuda-sim")
    # S = QKᵀ, O = SV recomputed, dS = dO Vᵀ, dQ = G K, dK = Gᵀ Q (one shared G), dV = Sᵀ dO
    assert len([k for k in tcc.compile(grad).loops.kernels if k.extern is not None]) == 6


DENSE = (
    "input X[n, k], W[m, k], b[m]\n"
    "Y[a, c] = tanh(sum[z](X[a, z] * W[c, z]) + b[c])\n"
    "f = sum[a, c](Y[a, c] * Y[a, c])\n"
)


@pytest.mark.parametrize("sizes", [{"n": 7, "k": 5, "m": 3}, {"n": 1, "k": 1, "m": 1}, {"n": 2, "k": 0, "m": 13}])
def test_dense_layer_and_its_gradients(sizes):
    compiled = tcc.compile(DENSE)
    # one call, W read transposed in place: no kernel copies it
    assert [str(k.extern) for k in compiled.loops.kernels if k.extern is not None] == [
        "extern matmul(X, transpose(W)) -> Y_mm"]
    grad = tcc.grad(DENSE, "f", "X,W,b")
    # three products, no copy: dX and dW read one outlined side G = dY * (2 * Y) * (1 - Y^2), stored
    # as G[a, c], both ways round; G is computed in the nest of the epilogue
    assert [str(k.extern) if k.extern else k.name for k in tcc.compile(grad).loops.kernels][:4] == [
        "extern matmul(X, transpose(W)) -> Y_mm", "Y_dY_dX_lhs", "extern matmul(dX_lhs, W) -> dX",
        "extern matmul(transpose(dX_lhs), X) -> dW"]
    for dtype in ("float64", "float32"):
        for threads in (1, 2):
            assert_matches_interpreter(tcc.parse(DENSE), sizes, dtype, threads=threads)
            assert_matches_interpreter(grad, sizes, dtype, threads=threads)
    # the GPU pipeline has no blas: the same programs stay loop nests there and still run
    for prog in (tcc.parse(DENSE), grad):
        assert_matches_interpreter(prog, sizes, target="cuda-sim")
        assert all(k.extern is None for k in tcc.compile(prog, target="cuda-sim").loops.kernels)
    # given output arrays are written in place
    inputs = random_inputs(tcc.transform(DENSE), sizes, seed=4)
    Y = np.full((sizes["n"], sizes["m"]), np.nan)
    out = compiled(**inputs, Y=Y)
    assert out["Y"] is Y
    _close(Y, tcc.run(DENSE, inputs)["Y"])


UNTOUCHED = {
    "a factor on a and b": "input A[n, k], B[k, m], W[n, m]\nC[i, j] = sum[z](A[i, z] * B[z, j] * W[i, j])\n",
    "a sum not starting at 0": "input A[n, k], B[k, m]\noutput C[n, m]\nC[i, j] = sum[z: 1..k - 1](A[i, z] * B[z, j])\n",
    "a guarded contraction (computed only where the guard holds)":
        "input A[n, k], B[k, m]\nC[i, j] = where(i <= j, sum[z](A[i, z] * B[z, j]), 0) + 1\n",
    "a dot product": "input x[k], w[k]\ny = sum[z](w[z] * x[z])\n",
    "a small constant-size contraction": "input A[16, 32], B[32, 63]\nC[i, j] = sum[z](A[i, z] * B[z, j])\n",
    "a range that depends on a": "input A[n, n], B[n, m]\nC[i, j] = sum[z: 0..i](A[i, z] * B[z, j])\n",
    "a range that may be empty": "input A[n, k], B[k, m]\noutput C[n, m]\nC[i, j] = sum[z: 0..k - 2](A[i, z] * B[z, j])\n",
    "a where mixing a and b": "input A[n, k], B[k, m]\nC[i, j] = sum[z](where(i == j, A[i, z], 0) * B[z, j])\n",
    "a function of the product": "input A[n, k], B[k, m]\nC[i, j] = sum[z](exp(A[i, z] * B[z, j]))\n",
    "no z on the right": "input A[n, k], v[m]\nC[i, j] = sum[z](A[i, z] * v[j])\n",
    "an epilogue around a contraction that does not match":
        "input A[n, k], B[k, m]\nC[i, j] = tanh(sum[z](exp(A[i, z] * B[z, j])) + 1)\n",
    "an epilogue around a small constant-size contraction":
        "input A[16, 32], B[32, 63], u[63]\nC[i, j] = tanh(sum[z](A[i, z] * B[z, j]) + u[j])\n",
    "a contraction that reads an outer sum's variable":
        "input A[n, k], B[k, m]\nC[i, j] = sum[t](exp(sum[z](A[i, z] * B[z, j] * A[t, z])))\n",
    "a double sum": "input A[n, k], B[k, m]\nC[i, j] = sum[z, t](A[i, z] * B[t, j])\n",
    "a matrix function": "input A[n, n]\nB[i, j] = inv(A)[i, j]\n",
}


@pytest.mark.parametrize("name", UNTOUCHED)
def test_patterns_left_alone(name):
    src = UNTOUCHED[name]
    p = tcc.transform(src)
    assert tcc.transform(p, "blas") is p
    assert "matmul" not in str(tcc.transform(src, DEFAULT_LOOP_PIPELINE))


def test_min_work():
    small = UNTOUCHED["a small constant-size contraction"]  # 16 * 32 * 63 = 32256 < 32768
    assert "matmul" not in blas(small)
    assert "C[i, j] = matmul(A, B)[i, j]" in blas(small, ALWAYS)
    big = small.replace("63", "64")  # 32768: worth a call
    assert "C[i, j] = matmul(A, B)[i, j]" in blas(big)
    assert "matmul" not in blas(big, "infer-ranges,blas{min-work=40000}")
    # symbolic extents count as large, whatever their values turn out to be
    assert "matmul" in blas("input A[n, 2], B[2, 3]\nC[i, j] = sum[z](A[i, z] * B[z, j])\n")
    assert format_pipeline(resolve_pipeline("infer-ranges,blas{min-work=7}")) == "infer-ranges,blas{min-work=7}"


def test_fresh_names_and_placement():
    src = (
        "input A[n, k], B[m, k]\n"
        "C_lhs[i, j] = A[i, j] + 1\n"
        "C[i, j] = sum[z](exp(C_lhs[i, z]) * B[j, z])\n"
        "D[i, j] = C[i, j] + 1\n"
    )
    text = blas(src)
    assert (
        "C_lhs2[i, z] = exp(C_lhs[i, z])\nC[i, j] = matmul(C_lhs2, transpose(B))[i, j]\n"
        "D[i, j] = C[i, j] + 1\n"
    ) in text
    assert "local C_lhs2[n, k]\n" in text and "output C_lhs[n, k], C[n, m], D[n, m]" in text


def test_compiled_results_are_the_given_definitions():
    src = REWRITES["factors on a and b outside"][0]
    f = tcc.compile(src)
    assert {k.name for k in f.loops.kernels} >= {"C_lhs", "C_rhs", "C"}
    inputs = random_inputs(tcc.transform(src), {"n": 3, "k": 4, "m": 5})
    out = f(**inputs)
    assert set(out) == {"C"} and f.results == ("C",)
    with pytest.raises(tcc.CallError, match="unknown argument 'C_lhs'"):
        f(**inputs, C_lhs=np.zeros((3, 4)))
    # a given output array is written in place by np.matmul
    C = np.zeros((3, 5))
    assert f(**inputs, C=C)["C"] is C
    _close(C, tcc.run(src, inputs)["C"])


def test_threads_and_cuda_sim():
    h = hessian_program(LOGISTIC, "f", "w")
    for threads in (1, 3):
        assert_matches_interpreter(h, {"n": 9, "m": 13}, threads=threads)
    assert_matches_interpreter(tcc.parse(MATMUL), {"p": 5, "q": 3, "r": 4}, target="cuda-sim")
    assert_matches_interpreter(tcc.parse(MATMUL), {"p": 5, "q": 3, "r": 4}, passes="infer-ranges,lower-loops")


def test_other_seed_004_hessians_are_unchanged():
    for path, of, wrt in (("quadratic_form.tcc", "f", "x"), ("matrix_factorization.tcc", "f", "U")):
        h = tcc.transform(hessian_program(str(ROOT / "examples" / path), of, wrt), "infer-ranges")
        assert tcc.transform(h, "blas") is h


# ---------------------------------------------------------------------------
# derivatives of matmul
# ---------------------------------------------------------------------------


def test_reverse_rule_as_printed():
    g = str(tcc.grad(MATMUL, "f", "A,B"))
    assert "dA[dA_0, dA_1] = sum[j: 0..r - 1](dC[dA_0, j] * B[dA_1, j])" in g
    assert "dB[dB_0, dB_1] = sum[i: 0..p - 1](A[i, dB_0] * dC[i, dB_1])" in g
    assert str(tcc.parse(g)) == g


@pytest.mark.parametrize("sizes", [{"p": 3, "q": 4, "r": 2}, {"p": 1, "q": 1, "r": 1}, {"p": 2, "q": 1, "r": 3}])
def test_gradients_against_finite_differences(sizes):
    for r in tcc.check(MATMUL, "f", "A,B", sizes=sizes):
        assert r.ok and r.max_rel_error < 1e-7, str(r)


def test_matmul_of_a_tensor_with_itself_and_of_definitions():
    src = (
        "input X[n, n], W[n, m]\n"
        "Y[i, j] = sin(X[i, j])\n"
        "S[i, j] = matmul(Y, Y)[i, j]\n"
        "T[i, j] = matmul(S, W)[i, j]\n"
        "f = sum[i, j](T[i, j] * T[i, j])\n"
    )
    for r in tcc.check(src, "f", "X,W", sizes={"n": 3, "m": 2}):
        assert r.ok and r.max_rel_error < 1e-7, str(r)
    # second order: grad of grad, and its compiled form (the gradient's contractions become matmuls)
    g = tcc.grad(src, "f", "X")
    for r in tcc.check(g, "dX", "X,W", sizes={"n": 3, "m": 2}):
        assert r.ok and r.max_rel_error < 1e-6, str(r)
    assert_matches_interpreter(tcc.grad(g, "dX", "X"), {"n": 4, "m": 3})


def _fd_directional(program, inputs, tangents, of, eps=1e-6):
    plus = {k: v + eps * tangents.get(k, 0) for k, v in inputs.items()}
    minus = {k: v - eps * tangents.get(k, 0) for k, v in inputs.items()}
    return (tcc.run(program, plus)[of] - tcc.run(program, minus)[of]) / (2 * eps)


def test_forward_mode_against_finite_differences():
    jvp = tcc.grad(MATMUL, "f", "A,B", mode="forward")
    text = str(jvp)
    assert "dC[i, j] = sum[dC_k: 0..q - 1](dA[i, dC_k] * B[dC_k, j]) + sum[dC_k: 0..q - 1](A[i, dC_k] * dB[dC_k, j])" in text
    assert str(tcc.parse(text)) == text
    rng = np.random.default_rng(5)
    inputs = {"A": rng.standard_normal((3, 4)), "B": rng.standard_normal((4, 2))}
    tangents = {"A": rng.standard_normal((3, 4)), "B": rng.standard_normal((4, 2))}
    got = tcc.run(jvp, {**inputs, "dA": tangents["A"], "dB": tangents["B"]})["df"]
    _close(got, _fd_directional(MATMUL, inputs, tangents, "f"), 1e-7)
    # compiled, and through tcc.jvp
    T = tcc.jvp(MATMUL, of="f", wrt="A,B")
    _close(T(**inputs, dA=tangents["A"], dB=tangents["B"]), got)
    # only one argument differentiated: one term
    one = str(tcc.grad(MATMUL, "f", "B", mode="forward"))
    assert "dC[i, j] = sum[dC_k: 0..q - 1](A[i, dC_k] * dB[dC_k, j])" in one


def test_jacobians_forward_equals_reverse_and_finite_differences():
    src = "input A[p, q], B[q, r]\nC[i, j] = matmul(A, B)[i, j]\n"
    rng = np.random.default_rng(6)
    inputs = {"A": rng.standard_normal((2, 3)), "B": rng.standard_normal((3, 4))}
    reverse = tcc.grad(src, "C", "A,B", seed="delta")
    forward = tcc.grad(src, "C", "A,B", seed="delta", mode="forward")
    A, B = inputs["A"], inputs["B"]
    want_a = np.einsum("il,kj->ijlk", np.eye(2), B)   # dC[i, j] / dA[l, k] = δ(i, l) B[k, j]
    want_b = np.einsum("il,kj->ijlk", A, np.eye(4))   # dC[i, j] / dB[l, k] = A[i, l] δ(k, j)
    for prog in (reverse, forward):
        out = tcc.run(prog, inputs)
        _close(out["dA"], want_a)
        _close(out["dB"], want_b)
        assert_matches_interpreter(prog, {"p": 2, "q": 3, "r": 4})
    # Jacobians of a function of a matmul: the compiled tcc.jacobian against finite differences
    J = tcc.jacobian(MATMUL, of="f", wrt="A")
    eps = 1e-6
    fd = np.zeros_like(A)
    for idx in np.ndindex(*A.shape):
        d = np.zeros_like(A)
        d[idx] = eps
        fd[idx] = (tcc.run(MATMUL, {"A": A + d, "B": B})["f"] - tcc.run(MATMUL, {"A": A - d, "B": B})["f"]) / (2 * eps)
    _close(J(**inputs), fd, 1e-7)


def test_hessian_through_a_matmul():
    src = "input A[p, q], B[q, r]\nC[i, j] = matmul(A, B)[i, j]\nf = sum[i, j](C[i, j] * C[i, j])\n"
    H = tcc.hessian(src, of="f", wrt="A")
    rng = np.random.default_rng(9)
    A, B = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    # f = |A B|^2: d2f / dA[i, k] dA[l, m] = 2 δ(i, l) (B Bᵀ)[k, m]
    want = 2 * np.einsum("il,km->iklm", np.eye(3), B @ B.T)
    _close(H(A=A, B=B), want)


# ---------------------------------------------------------------------------
# L2: the external kernel
# ---------------------------------------------------------------------------


def test_emit_loops_shows_the_extern(tmp_path, capsys):
    path = tmp_path / "h.tcc"
    path.write_text(str(hessian_program(LOGISTIC, "f", "w")))
    assert main(["compile", str(path), "--emit", "loops"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "kernel dw2 {\n  extern gram(X, dw2_w) -> dw2\n}" in out
    assert main(["compile", str(path), "--emit", "llvm"]) == 0
    out, _ = capsys.readouterr()
    # the first kernel is the forward matrix-vector product z = X w, the last the Hessian's product
    assert out.startswith("; kernel z_mm: extern matmul(X, z_rhs) -> z_mm runs on the host (BLAS through NumPy)")
    assert "; kernel dw2: extern gram(X, dw2_w) -> dw2 runs on the host (BLAS through NumPy)" in out
    # tcc run writes the program's definitions, not the outlined factor
    rng = np.random.default_rng(3)
    X, w, y = rng.standard_normal((6, 4)), rng.standard_normal(4), rng.choice([-1.0, 1.0], 6)
    np.savez(tmp_path / "in.npz", X=X, w=w, y=y)
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "c.npz")]) == 0
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "r.npz"),
                 "--reference"]) == 0
    with np.load(tmp_path / "c.npz") as c, np.load(tmp_path / "r.npz") as r:
        assert sorted(c.files) == sorted(r.files)
        for name in r.files:
            _close(c[name], r[name])
        _close(c["dw2"], _logistic_hessian_numpy(X, w, y))


def test_loop_program_round_trip_and_evaluator():
    for src, call in ((REWRITES["factors on a and b outside"][0], "matmul(C_lhs, C_rhs)"),
                      (REWRITES["both sides outlined"][0], "matmul(C_lhs, transpose(B))"),
                      (REWRITES["transposed"][0].replace("H[", "C["), "matmul(transpose(X), X)")):
        _loop_round_trip(src, call)


def _loop_round_trip(src: str, call: str) -> None:
    from tcc.ir.loops_parser import parse_loop_program
    from tcc.ir.loops_verifier import verify_loops

    loops = tcc.compile(src).loops
    text = str(loops)
    assert f"kernel C {{\n  extern {call} -> C\n}}" in text
    again = parse_loop_program(text)
    assert str(again) == text and again == loops
    verify_loops(again)
    inputs = random_inputs(tcc.transform(src), {"n": 3, "k": 4, "m": 5})
    got = run_loops(again, inputs)
    _close(got["C"], tcc.run(src, inputs)["C"])


def test_loops_verifier_rejects_bad_matmuls():
    from tcc.ir.loops_parser import parse_loop_program
    from tcc.ir.loops_verifier import verify_loops

    head = "sizes n, m, k\ninput A[n, m], B[m, k], x[m], T[n, n, m], U[k, m, k]\noutput C[n, k], D[n, n]\n\n"
    cases = {
        "extern matmul(A, A) -> C": "matmul needs the columns of 'A' to match the rows of 'A': 'A' is n x m, 'A' is n x m",
        "extern matmul(A, B) -> D": "'D' is n x n, but matmul(A, B) is n x k",
        "extern matmul(A, x) -> C": "matmul needs a matrix: 'x' has 1 dimension",
        "extern matmul(A) -> C": "matmul takes 2 buffers: 'extern matmul(A) -> C'",
        "extern inv(A, B) -> C": "inv takes 1 buffer: 'extern inv(A, B) -> C'",
        "extern matmul(A, B) -> A": "cannot write to input 'A': extern matmul(A, B) -> A",
        "extern matmul(A, Z) -> C": "undeclared buffer 'Z' in 'extern matmul(A, Z) -> C'",
        "extern matmul(transpose(A), B) -> C":
            "matmul needs the columns of 'transpose(A)' to match the rows of 'B': 'A' is n x m, 'B' is m x k",
        "extern matmul(A, transpose(A)) -> C": "'C' is n x k, but matmul(A, transpose(A)) is n x n",
        "extern inv(transpose(D)) -> D": "only matmul reads a buffer transposed: 'extern inv(transpose(D)) -> D'",
        "extern matmul(T, U) -> C": "matmul needs 'T' and 'U' to have the same batch extents: 'extern matmul(T, U) -> C'",
        "extern matmul(T, B) -> C": "'C' is n x k, but matmul(T, B) is n x n x k",
    }
    for line, message in cases.items():
        with pytest.raises(tcc.TccError) as exc:
            verify_loops(parse_loop_program(head + f"kernel k {{\n  {line}\n}}\n", "bad.loops"))
        assert exc.value.message == f"in kernel 'k': {message}"
    ok = parse_loop_program(head + "kernel k {\n  extern matmul(A, B) -> C\n}\n")
    verify_loops(ok)
    assert str(ok.kernels[0].extern) == "extern matmul(A, B) -> C" and ok.kernels[0].extern.args == ("A", "B")
    ok = parse_loop_program(head + "kernel k {\n  extern matmul(A, transpose(A)) -> D\n}\n")
    verify_loops(ok)
    assert str(ok.kernels[0].extern) == "extern matmul(A, transpose(A)) -> D"
    assert ok.kernels[0].extern.transposed == (False, True)


CUDA_REFUSAL = (
    "matmul(A, B) (definition 'C') is computed by BLAS on the host; the cuda target does not support "
    "matrix products yet: compile for the cpu"
)


def test_cuda_target_refuses_matmul():
    with pytest.raises(tcc.TccError) as exc:
        tcc.compile(MATMUL, target="cuda")
    assert exc.value.message == CUDA_REFUSAL
    assert str(exc.value).startswith("<string>:2:1: error: ")
    from tcc.build import compile_pipeline

    with pytest.raises(tcc.TccError) as exc:
        tcc.transform(MATMUL, compile_pipeline(None, "float64", "cuda"))
    assert exc.value.message == CUDA_REFUSAL
    # the GPU pipeline has no blas pass: a contraction stays a loop nest there
    sim = tcc.compile(hessian_program(LOGISTIC, "f", "w"), target="cuda-sim")
    assert all(k.extern is None for k in sim.loops.kernels)


def test_simplify_cse_and_inline_guards_keep_matmul_definitions():
    src = (
        "input X[n, k], W[k, m]\n"
        "A[i, j] = X[i, j] * 1 + 0\n"
        "C[i, j] = matmul(A, W)[i, j]\n"
        "f = sum[i, j](C[i, j] * C[i, j])\n"
    )
    out = str(tcc.transform(src, "infer-ranges,simplify,cse,inline-guards"))
    # A is read only by the product: dead-code removal keeps it, and nothing is folded into C
    assert "A[i, j] = X[i, j]\nC[i, j] = matmul(A, W)[i, j]\n" in out
    g = tcc.grad(src, "f", "X")  # the default grad pipeline (simplify, cse) on a program with a product
    assert "C[i, j] = matmul(A, W)[i, j]" in str(g)
    for r in tcc.check(src, "f", "X,W", sizes={"n": 2, "k": 3, "m": 4}):
        assert r.ok and r.max_rel_error < 1e-7, str(r)
