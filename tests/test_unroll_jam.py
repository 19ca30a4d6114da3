"""``unroll-jam``: short constant loops around reductions unrolled, the copies' reductions fused."""
from __future__ import annotations

import tcc
from compare import assert_matches_interpreter
from tcc.pipeline import run_pipeline

CONV = """input x[B, C, H, W], w[O, C, 3, 3]
y[b, o, i, j] = sum[c, p, q](x[b, c, 2*i + p, 2*j + q] * w[o, c, p, q])
"""
SIZES = {"B": 2, "C": 2, "H": 9, "W": 7, "O": 3}


def _loops(program, passes):
    return str(run_pipeline(tcc.transform(program, "infer-ranges"), passes))


def test_conv_weight_gradient_gets_nine_accumulators_in_one_nest():
    g = tcc.grad(CONV, of="y", wrt="x,w")
    text = _loops(g, "lower-loops,interchange,hoist,unroll-jam")
    dw = text[text.index("kernel dw"):]
    assert dw.count("local dw_acc_u") == 9
    assert dw.count("for dw_z2 in") == 1  # one reduction nest, not nine
    assert "dw_acc_u2_u2 += dy[dw_z0, dw_0, dw_z1, dw_z2] * x[dw_z0, dw_1, 2*dw_z1 + 2, 2*dw_z2 + 2]" in dw
    assert "dw[dw_0, dw_1, 2, 2] = dw_acc_u2_u2" in dw
    assert "for dw_2" not in dw and "for dw_3" not in dw
    assert_matches_interpreter(g, SIZES, passes="infer-ranges,lower-loops,interchange,hoist,unroll-jam")
    assert_matches_interpreter(g, SIZES)


def test_band_depending_on_the_unrolled_variable_is_left_alone():
    src = "input x[3]\noutput y[3]\ny[j] = sum[k: 0..j](x[k])\n"
    before = _loops(tcc.parse(src), "lower-loops")
    assert _loops(tcc.parse(src), "lower-loops,unroll-jam") == before
    assert_matches_interpreter(tcc.parse(src), {}, passes="infer-ranges,lower-loops,unroll-jam")


def test_long_or_symbolic_loops_are_not_unrolled():
    src = "input x[n, 5]\noutput y[5]\ny[j] = sum[k](x[k, j])\n"
    assert "for j in 0..4" in _loops(tcc.parse(src), "lower-loops,unroll-jam{strip=1}")
    # a long constant loop around a long reduction is strip-mined instead (one strip of 4, one rest)
    text = _loops(tcc.parse(src), "lower-loops,unroll-jam")
    assert "for j_s in 0..0 {" in text and "kernel y_rest {\n  for j in 4..4 {" in text
    # ... but not around a short constant reduction (the forward pass of a correlation)
    short = "input x[40], w[31]\ny[i] = sum[k](x[i + k] * w[k])\n"
    assert "_rest" not in _loops(tcc.parse(short), "lower-loops,unroll-jam")
    assert "_u0" in _loops(tcc.parse(src), "lower-loops,unroll-jam{max-trip=5}")
    sym = "input x[n, m]\ny[j] = sum[k](x[k, j])\n"
    assert "_u0" not in _loops(tcc.parse(sym), "lower-loops,unroll-jam{strip=1}")


CORR = "input x[n], w[m]\ny[i] = sum[k](x[i + k] * w[k])\n"


def test_symbolic_outer_loop_is_strip_mined_and_jammed():
    g = tcc.grad(CORR, of="y", wrt="x,w")
    text = _loops(g, "lower-loops,interchange,hoist,unroll-jam,fuse,reuse-buffers,parallel")
    assert "parallel for dw_0_s in 0..m // 4 - 1 {" in text
    assert "dw_acc_u3 += dy[dw_z0] * x[4*dw_0_s + dw_z0 + 3]" in text
    assert "dw[4*dw_0_s + 3] = dw_acc_u3" in text
    assert "kernel dw_rest {\n  parallel for dw_0 in max(0, 4*(m // 4))..m - 1 {" in text
    for m in (1, 3, 4, 5, 8, 11):  # no full strip, only strips, strips and a remainder
        assert_matches_interpreter(g, {"n": m + 6, "m": m})


def test_unroll_jam_is_deterministic():
    g = tcc.grad(CONV, of="y", wrt="x,w")
    assert _loops(g, "lower-loops,interchange,unroll-jam") == _loops(g, "lower-loops,interchange,unroll-jam")


def test_copies_are_not_jammed_when_a_band_reads_what_a_tail_writes():
    from tcc.ir.loops_parser import parse_loop_program
    from tcc.passes.unroll_jam import unroll_jam_program

    text = """# tcc loops
sizes n
input x[n]
output y[2]

kernel y {
  for j in 0..1 {
    local acc = 0
    for k in 0..n - 1 {
      acc += x[k] * y[0]
    }
    y[j] = acc
  }
}
"""
    program = parse_loop_program(text)
    assert unroll_jam_program(program) == program
    jammable = parse_loop_program(text.replace("x[k] * y[0]", "x[k] * x[0]"))
    assert "acc_u1 += x[k] * x[0]" in str(unroll_jam_program(jammable))


def test_copies_are_not_jammed_when_a_tail_accumulates_a_scalar_a_band_reads():
    from tcc.ir.loops_parser import parse_loop_program
    from tcc.passes.unroll_jam import unroll_jam_program

    text = """# tcc loops
sizes n
input x[n]
output y[2]

kernel y {
  local t = 1
  for j in 0..1 {
    local acc = 0
    for k in 0..n - 1 {
      acc += x[k] * t
    }
    y[j] = acc
    t += acc
  }
}
"""
    program = parse_loop_program(text)
    assert unroll_jam_program(program) == program


def test_inner_output_loop_is_strip_mined_when_its_reduction_shares_loads():
    # w[o, c, p, q] does not depend on j: four outputs along j share each w load
    text = _loops(tcc.parse(CONV), "lower-loops,unroll-jam")
    assert "for j_s in 0..((W - 1) // 2) // 4 - 1 {" in text
    assert "y_acc_u3 += x[b, c, 2*i + p, 8*j_s + q + 6] * w[o, c, p, q]" in text
    assert "for j in max(0, 4*(((W - 1) // 2) // 4))..(W - 1) // 2 - 1 {" in text
    for w in (3, 7, 9, 11, 17, 19):  # 1, 3, 4, 5, 8, 9 outputs along j
        assert_matches_interpreter(tcc.parse(CONV), {**SIZES, "W": w})
    # a reduction whose loads all depend on the output loop is left alone
    src = "input A[n, m], B[8, m]\noutput y[n, 8]\ny[i, r] = sum[j](A[i, j] * B[r, j])\n"
    assert "r_s in" not in _loops(tcc.parse("input A[n, m, k]\ny[i, r] = sum[j](A[i, r, j])\n"), "lower-loops,unroll-jam")
    assert "r_s in" in _loops(tcc.parse(src), "lower-loops,unroll-jam")  # A[i, j] is shared across r
