"""``reduce-in-place``: a row of results accumulated in its buffer, output loop innermost."""
from __future__ import annotations

import tcc
from compare import assert_matches_interpreter
from tcc.pipeline import run_pipeline

URBAN = """input a[I, K], b[J, K], c[I, I], d[I + K - 1]
output f[I, J]
f[i, j] = exp(-sum[k: 0..K - 1]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
"""
SIZES = {"I": 5, "K": 4, "J": 3}


def _loops(program, passes):
    return str(run_pipeline(tcc.transform(program, "infer-ranges"), passes))


def test_urban_db_accumulates_rows_in_place():
    g = tcc.grad(URBAN, of="f", wrt="a,b,c,d")
    text = _loops(g, "lower-loops,interchange,hoist,reduce-in-place")
    db = text[text.index("kernel db"):text.index("kernel dc")]
    assert db == """kernel db {
  for db_0 in 0..J - 1 {
    for db_1 in 0..K - 1 {
      db[db_0, db_1] = 0
    }
    for db_z0 in 0..I - 1 {
      for db_1 in 0..K - 1 {
        db[db_0, db_1] += -(df[db_z0, db_0] * f[db_z0, db_0] * c[db_z0, db_z0] * (a[db_z0, db_1] + b[db_0, db_1]))
      }
    }
    for db_1 in 0..K - 1 {
      let db_acc_s = db[db_0, db_1] * 2
      db[db_0, db_1] = db_acc_s
    }
  }
}

"""
    assert_matches_interpreter(g, SIZES, passes="infer-ranges,lower-loops,interchange,hoist,reduce-in-place")
    assert_matches_interpreter(g, SIZES)


def test_outermost_loop_and_contiguous_reductions_are_left_alone():
    # the only output loop is the kernel's outermost (it must stay parallel)
    src = "input x[n, m]\ny[j] = sum[i](x[i, j])\n"
    assert _loops(tcc.parse(src), "lower-loops,reduce-in-place") == _loops(tcc.parse(src), "lower-loops")
    # the reduction already walks memory contiguously: nothing to gain
    src = "input A[n, m], x[m]\noutput y[n, 2]\ny[i, r] = sum[j](A[i, j] * x[j])\n"
    assert _loops(tcc.parse(src), "lower-loops,reduce-in-place") == _loops(tcc.parse(src), "lower-loops")


def test_matrix_product_becomes_row_updates():
    src = "input A[n, p], B[p, m]\nC[i, j] = sum[k](A[i, k] * B[k, j])\n"
    text = _loops(tcc.parse(src), "lower-loops,reduce-in-place")
    assert "for k in 0..p - 1 {\n      for j in 0..m - 1 {\n        C[i, j] += A[i, k] * B[k, j]" in text
    assert_matches_interpreter(tcc.parse(src), {"n": 3, "p": 4, "m": 5})
