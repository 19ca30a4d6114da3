"""lift-contractions: contractions become BLAS calls wherever they stand (issue 35 item 1).

Each case: the compiled program (default CPU pipeline) has the matmul
externs (structural), matches the reference interpreter, and its
gradients pass the finite-difference check.  Other spellings of the same
math (the mask as a multiplication, the scale on the other side, the
batch index first or last) are lifted too; a guard that selects a slice
(a Hessian's diagonal) is not.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

import tcc

sys.path.insert(0, str(Path(__file__).parent))
from compare import assert_matches_interpreter  # noqa: E402

ATTN = ("input Q[2, 40, 32], K[2, 40, 32]\nlocal S[2, 40, 40]\noutput P[2, 40, 40]\n"
        "S[a, i, j] = where(j <= i, exp(0.125 * sum[k](Q[a, i, k] * K[a, j, k])), 0)\n"
        "P[a, i, j] = S[a, i, j] / sum[l](S[a, i, l])\n")
GELU = ("input X[40, 32], W[36, 32], b[36]\n"
        "def gelu(u) = 0.5 * u * (1 + tanh(0.7978845608028654 * (u + 0.044715 * u**3)))\n"
        "Y[a, c] = gelu(sum[k](X[a, k] * W[c, k]) + b[c])\n")
COSINE = ("input a[40, 32], b[36, 32]\nlocal na[40], nb[36]\noutput C[40, 36]\n"
          "na[i] = sqrt(sum[k](a[i, k] * a[i, k]))\nnb[j] = sqrt(sum[k](b[j, k] * b[j, k]))\n"
          "C[i, j] = sum[k](a[i, k] * b[j, k]) / (na[i] * nb[j])\n")
XENT = ("input X[40, 32], W[36, 32]\nindex y[40] < 36\nlocal Z[40, 36], mx[40]\noutput L\n"
        "Z[i, j] = sum[k](X[i, k] * W[j, k])\nmx[i] = max[j](Z[i, j])\n"
        "L = sum[i](mx[i] + log(sum[j](exp(Z[i, j] - mx[i]))) - Z[i, y[i]]) / 40\n")
# the same math spelled otherwise
ATTN_MULMASK = ("input Q[2, 40, 32], K[2, 40, 32]\noutput S[2, 40, 40]\n"
                "S[a, i, j] = where(j <= i, 1, 0) * exp(sum[k](Q[a, i, k] * K[a, j, k]) * 0.125)\n")
ATTN_BATCH_LAST = ("input Q[40, 32, 2], K[40, 32, 2]\noutput S[40, 40, 2]\n"
                   "S[i, j, a] = where(i >= j, exp(sum[k](K[j, k, a] * Q[i, k, a]) / 8), 0)\n")
MAX_INSIDE = ("input X[40, 32], W[36, 32]\noutput m[40]\n"
              "m[i] = max[j](sum[k](X[i, k] * W[j, k]))\n")


def externs(program) -> list[str]:  # noqa: ANN001
    f = tcc.compile(program)
    return [str(k.extern) for k in f.loops.kernels if k.extern is not None]


def assert_check(src: str, of: str, wrt: list[str]) -> None:
    results = tcc.check(src, of, wrt, tol=1e-5)
    assert [r.wrt for r in results] == wrt
    for r in results:
        assert r.ok and r.max_rel_error < 1e-5, str(r)


@pytest.mark.parametrize("src, of, wrt, forward, backward", [
    (ATTN, "P", ["Q", "K"], 1, 3),
    (GELU, "Y", ["X", "W", "b"], 1, 3),
    (COSINE, "C", ["a", "b"], 1, 3),
    (XENT, "L", ["X", "W"], 1, 3),
])
def test_the_issue_cases_reach_blas(src, of, wrt, forward, backward):
    program = tcc.parse(src)
    assert sum("matmul" in e for e in externs(program)) >= forward
    grad = tcc.grad(program, of=of, wrt=wrt)
    assert sum("matmul" in e for e in externs(grad)) >= backward, externs(grad)
    assert_matches_interpreter(program)
    assert_matches_interpreter(grad)


@pytest.mark.parametrize("src, of, wrt", [(ATTN, "P", ["Q", "K"]), (COSINE, "C", ["a", "b"]),
                                          (GELU, "Y", ["b"])])
def test_gradients_pass_the_finite_difference_check(src, of, wrt):
    assert_check(src, of, wrt)


def test_causal_gradients_are_two_masked_gemms_sharing_one_side():
    grad = tcc.grad(tcc.parse(ATTN), of="P", wrt=["Q", "K"])
    ex = externs(grad)
    assert any(e.endswith("-> dQ") and e.startswith("extern matmul") for e in ex), ex
    assert any(e.endswith("-> dK") and e.startswith("extern matmul") for e in ex), ex
    assert len([e for e in ex if e.startswith("extern matmul(Q, transpose(K))")]) == 1  # scores once


@pytest.mark.parametrize("src", [ATTN_MULMASK, ATTN_BATCH_LAST, MAX_INSIDE])
def test_other_spellings_are_lifted(src):
    assert any("matmul" in e for e in externs(src)), externs(src)
    assert_matches_interpreter(src)


def test_a_diagonal_guard_stays_loops_and_says_why(caplog):
    src = ("input A[40, 40], B[40, 40]\noutput H[40, 40]\n"
           "H[i, j] = where(i == j, exp(sum[k](A[i, k] * B[k, j])), 0)\n")
    with caplog.at_level(logging.DEBUG, logger="tcc.passes.lift_contractions"):
        lifted = tcc.transform(src, "infer-ranges,lift-contractions")
    assert "H_mm" not in str(lifted)
    assert any("not lifted" in r.getMessage() and "max-waste" in r.getMessage() for r in caplog.records)
    assert_matches_interpreter(src)


def test_one_contraction_in_several_definitions_is_one_definition():
    src = ("input a[40, 32], b[36, 32]\noutput u[40], v[36]\n"
           "u[i] = sum[j](exp(sum[k](a[i, k] * b[j, k])))\n"
           "v[j] = sum[i](tanh(sum[k](b[j, k] * a[i, k])))\n")
    lifted = str(tcc.transform(src, "infer-ranges,lift-contractions"))
    assert lifted.count("= sum[k: 0..31]") == 1, lifted
    assert_matches_interpreter(src)
