"""``peel``: edges of a windowed sum split off so the interior has plain bounds."""
from __future__ import annotations

import tcc
from compare import assert_matches_interpreter
from tcc.pipeline import run_pipeline

CORR = "input x[n], w[m]\ny[i] = sum[k](x[i + k] * w[k])\n"


def _loops(program, passes):
    return str(run_pipeline(tcc.transform(program, "infer-ranges"), passes))


def test_correlation_input_gradient_gets_a_plain_interior():
    g = tcc.grad(CORR, of="y", wrt="x,w")
    text = _loops(g, "lower-loops,peel")
    assert "kernel dx_head {\n  for dx_0 in 0..min(n - 1, m - 2) {\n    local dx_acc = 0\n    for dx_z0 in max(dx_0 + m - n, 0)..min(dx_0, m - 1) {" in text
    assert "kernel dx {\n  for dx_0 in max(0, m - 1)..min(n - 1, n - m) {\n    local dx_acc = 0\n    for dx_z0 in 0..m - 1 {" in text
    assert "kernel dx_tail {\n  for dx_0 in max(0, m - 1, n - m + 1)..n - 1 {" in text
    # every size regime: no interior, interior only at one point, long interior, m > n - m
    for n, m in [(1, 1), (3, 3), (5, 2), (9, 4), (20, 3), (7, 5)]:
        assert_matches_interpreter(g, {"n": n, "m": m}, passes="infer-ranges,lower-loops,peel")


def test_constant_sizes_fold():
    g = tcc.grad("input x[50], w[5]\ny[i] = sum[k](x[i + k] * w[k])\n", of="y", wrt="x,w")
    text = _loops(g, "lower-loops,peel")
    assert "for dx_0 in 0..3 {" in text and "for dx_0 in 4..45 {" in text and "for dx_0 in 46..49 {" in text
    assert_matches_interpreter(g, {})


def test_kernels_without_outer_dependent_bounds_are_left_alone():
    src = "input x[n], w[m]\ny[i] = sum[k](x[i + k] * w[k])\n"
    assert _loops(tcc.parse(src), "lower-loops,peel") == _loops(tcc.parse(src), "lower-loops")
