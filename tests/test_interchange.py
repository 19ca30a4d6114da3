"""``interchange``: reduction bands reordered by the stride model, results unchanged."""
from __future__ import annotations

import tcc
from compare import assert_matches_interpreter
from tcc.pipeline import run_pipeline

CONV = """input x[B, C, H, W], w[O, C, 3, 3]
y[b, o, i, j] = sum[c, p, q](x[b, c, 2*i + p, 2*j + q] * w[o, c, p, q])
"""


def _loops(program, passes):
    return str(run_pipeline(tcc.transform(program, "infer-ranges"), passes))


def test_weight_gradient_of_strided_conv_walks_the_image_innermost():
    g = tcc.grad(CONV, of="y", wrt="x,w")
    before = _loops(g, "lower-loops")
    after = _loops(g, "lower-loops,interchange")
    # range-bound's order: batch innermost (a whole image per step)
    assert "for dw_z2 in 0..(W - 1) // 2 - 1 {\n            for dw_z1 in 0..(H - 1) // 2 - 1 {\n              for dw_z0 in 0..B - 1 {" in before
    # interchanged: batch outermost, the image column innermost (stride 1 in dy, 2 in x)
    assert "for dw_z0 in 0..B - 1 {\n            for dw_z1 in 0..(H - 1) // 2 - 1 {\n              for dw_z2 in 0..(W - 1) // 2 - 1 {" in after
    # dx's window loops (bounds on dx_2, dx_3) stay outside the full-range channel loop
    assert "for dx_z0 in 0..O - 1 {\n                dx_acc +=" in after
    sizes = {"B": 2, "C": 2, "H": 9, "W": 7, "O": 3}
    assert_matches_interpreter(g, sizes, passes="infer-ranges,lower-loops,interchange")
    assert_matches_interpreter(g, sizes)


def test_band_with_dependent_bounds_is_left_alone():
    src = "input x[n, n]\ny[i] = sum[j](sum[k: 0..j](x[k, j] * x[i, 0]))\n"
    before = _loops(tcc.parse(src), "lower-loops")
    assert _loops(tcc.parse(src), "lower-loops,interchange") == before


def test_interchange_is_deterministic_and_idempotent():
    g = tcc.grad(CONV, of="y", wrt="x,w")
    once = _loops(g, "lower-loops,interchange")
    assert once == _loops(g, "lower-loops,interchange")
    assert once == _loops(g, "lower-loops,interchange,interchange")
