"""Derivatives read the forward's stored values (passes/autodiff/stored.py; tcc issues 35, 36).

The tie test of ``max``/``min`` compares stored values with stored values, so
the compiled derivative has no 0/0 where the recomputed sum rounded
differently; a where branch's value is the stored element, so the attention
gradient reads ``S`` instead of recomputing ``exp`` per output column.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc

TIE = """input x[{n}], w[3]
y[i] = {fn}(sum[k: 0..2](where(i + k >= 1 and i + k <= {n}, x[i + k - 1], 0) * w[k]), 0)
"""
ATTENTION = """input Q[2, 8, 4]
input K[2, 8, 4]
S[a, i, j] = where(j <= i, exp(0.125 * sum[k](Q[a, i, k] * K[a, j, k])), 0)
r[a, i] = sum[j](S[a, i, j])
P[a, i, j] = S[a, i, j] / r[a, i]
"""


def _inputs(program, rng, **given):
    ins = dict(given)
    for d in tcc.transform(program).caller_inputs():
        if d.name not in ins:
            shape = tuple(int(str(e)) for e in d.extents)
            ins[d.name] = rng.uniform(0.25, 0.75, shape)
    return ins


def _compiled_equals_interpreter(g, ins):
    got, want = tcc.compile(g)(**ins), tcc.run(g, ins)
    for name in g.outputs:
        assert not np.isnan(got[name]).any(), name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12)
    return got


@pytest.mark.parametrize("n", [6, 50])
@pytest.mark.parametrize("fn", ["max", "min"])
@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_tie_test_of_a_sum_compares_stored_values(n, fn, mode):
    src = TIE.format(n=n, fn=fn)
    g = tcc.grad(src, of="y", wrt=["x", "w"], mode=mode)
    assert "== y[" in str(g) and "sum" not in str(g).split("y[i] =")[1].split("\n")[0]
    ins = _inputs(g, np.random.default_rng(0))
    _compiled_equals_interpreter(g, ins)
    if fn == "max":
        assert all(r.ok for r in tcc.check(src, "y", ["x", "w"], sizes=None))


def test_exact_ties_split_the_adjoint_without_nan():
    # w = (1, -1, 0) and x constant: every inner sum is exactly 0, tied with the 0 of max(., 0)
    src = TIE.format(n=6, fn="max")
    g = tcc.grad(src, of="y", wrt=["x", "w"])
    ins = {"x": np.full(6, 0.5), "w": np.array([1.0, -1.0, 0.0]), "dy": np.ones(5)}
    got = _compiled_equals_interpreter(g, ins)
    # y_v[i] = x[i-1] - x[i] is exactly 0 for i >= 1 (a tie: half of dy goes to the sum), -0.5 at i = 0
    want_dx = np.zeros(6)
    for i in range(1, 5):
        for k, wk in enumerate((1.0, -1.0, 0.0)):
            want_dx[i + k - 1] += 0.5 * wk
    np.testing.assert_allclose(got["dx"], want_dx)


def test_guarded_extreme_and_max_reduction_read_stored_parts():
    src = """input x[6, 4]
y[i] = where(i >= 1, max(sum[k](x[i - 1, k]), sum[k](x[i, k] * x[i, k])), 0) + log(max[k](x[i, k]) + 2)
"""
    g = tcc.grad(src, of="y", wrt=["x"])
    ins = _inputs(g, np.random.default_rng(1))
    _compiled_equals_interpreter(g, ins)
    assert all(r.ok for r in tcc.check(src, "y", ["x"]))
    ins["x"][2] = 0.5  # ties inside the max reduction
    _compiled_equals_interpreter(g, ins)


def test_where_branch_value_is_read_back():
    src = """input x[6]
y[i] = where(i >= 1, exp(x[i - 1]) * 2, tanh(x[i]))
z[i] = sigmoid(where(i <= 3, exp(x[i]), x[i]))
f[i] = y[i] * z[i]
"""
    g = tcc.grad(src, of="f", wrt=["x"])
    _compiled_equals_interpreter(g, _inputs(g, np.random.default_rng(2)))
    assert all(r.ok for r in tcc.check(src, "f", ["x"]))


def test_attention_derivative_reads_s():
    g = tcc.grad(ATTENTION, of="P", wrt=["Q", "K"])
    for name in ("dQ", "dK"):
        body = str(g.definition(name).body)
        assert "exp" not in body and "S[" in body, body
    loops = tcc.transform(g, "infer-ranges,lower-loops")
    assert str(loops).count("exp(") == 1  # S's own
    _compiled_equals_interpreter(g, _inputs(g, np.random.default_rng(3)))
    assert all(r.ok for r in tcc.check(ATTENTION, "P", ["Q", "K"]))
