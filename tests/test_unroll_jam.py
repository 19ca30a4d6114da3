"""``unroll-jam``: short constant loops around reductions unrolled, the copies' reductions fused."""
from __future__ import annotations

import numpy as np

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


# ---------------------------------------------------------------------------
# Budgets: nested unrolling must not multiply code without bound
# ---------------------------------------------------------------------------

DEFAULT_L2 = "infer-ranges,blas,lower-loops,interchange,hoist,peel,reduce-in-place,unroll-jam,fuse,reuse-buffers,parallel"


def _kernel_stats(text: str) -> dict[str, tuple[int, int]]:
    """Per kernel of an L2 program: (statements, accumulators in its largest band).

    Statements count nested ones (the ``max-stmts`` measure); a band's
    accumulators are the copies jammed into it (the ``max-product`` measure).
    """
    from tcc.ir.loop_analysis import reduction_band, walk_stmts
    from tcc.ir.loops import Accumulate, For
    from tcc.ir.loops_parser import parse_loop_program

    stats: dict[str, tuple[int, int]] = {}
    for k in parse_loop_program(text).kernels:
        stmts = list(walk_stmts(k.body))
        widest = max(
            (sum(isinstance(s, Accumulate) for s in band[-1].body)
             for s in stmts if isinstance(s, For) for band in [reduction_band(s)] if band is not None),
            default=0,
        )
        stats[k.name] = (len(stmts), widest)
    return stats


# The rank-10 reduction over short constant extents: every output loop
# has at most 4 iterations, so each was unrolled and the copies jammed through
# the loops outside -- one band with 2*3*4*2*3*4*2*3*4 = 41472 accumulators,
# 41k lines of L2 and minutes in LLVM.
RANK10 = """input x[2, 3, 4, 2, 3, 4, 2, 3, 4, 4]
f[a, b, c, d, e, g, h, i, j] = sum[k](x[a, b, c, d, e, g, h, i, j, k] * x[a, b, c, d, e, g, h, i, j, k])
"""


def test_nested_short_loops_unroll_only_up_to_the_copy_budget():
    text = _loops(tcc.parse(RANK10), DEFAULT_L2.removeprefix("infer-ranges,"))
    stmts, widest = _kernel_stats(text)["f"]
    # the two innermost output loops (3 * 4 = 12 copies) are jammed; a third would make 24 > 16
    assert widest == 12
    assert text.count("local f_acc_u") == 12
    assert stmts == 7 + 12 + 1 + 12 + 12  # seven loops left, locals, the band, accumulates, stores
    assert "parallel for a in 0..1 {" in text  # the outer loop stays a loop, so it runs on threads
    assert_matches_interpreter(tcc.parse(RANK10), {})


def test_copy_budget_is_an_option_filled_from_the_innermost_loop_out():
    # loops c (4), b (3), a (2), decided in that order: each is unrolled if the copies
    # still fit; a loop that does not fit stays a loop, and the copies of a loop outside
    # it are jammed through it (budget 8: c and a unrolled around the loop over b)
    src = "input x[2, 3, 4, n]\ny[a, b, c] = sum[k](x[a, b, c, k])\n"
    p = tcc.parse(src)
    for budget, copies in ((1, 1), (4, 4), (7, 4), (8, 8), (11, 8), (12, 12), (23, 12), (24, 24)):
        spec = f"lower-loops,unroll-jam{{max-product={budget}}}"
        stmts, widest = _kernel_stats(_loops(p, spec))["y"]
        assert widest == copies, (budget, widest)
        if budget in (8, 12, 24):  # the three shapes the jam takes
            assert_matches_interpreter(p, {"n": 5}, passes=f"infer-ranges,{spec}")
    # max-product=1 leaves the pass without an effect on this kernel
    assert _loops(p, "lower-loops,unroll-jam{max-product=1}") == _loops(p, "lower-loops")


def test_strip_mining_counts_towards_the_copy_budget():
    # the 4 x 4 inner loops already give 16 copies: strip-mining the symbolic
    # outer loop by 4 on top of them would jam 64 accumulators into one band
    src = "input x[n, 4, 4, m]\ny[i, a, b] = sum[k](x[i, a, b, k])\n"
    p = tcc.parse(src)
    text = _loops(p, "lower-loops,unroll-jam")
    assert "_rest" not in text and "i_s in" not in text
    assert _kernel_stats(text)["y"][1] == 16
    # with room for 64 the kernel is strip-mined as before the budget existed
    wide = _loops(p, "lower-loops,unroll-jam{max-product=64}")
    assert "kernel y_rest" in wide and _kernel_stats(wide)["y"][1] == 64
    for n in (3, 5, 8):
        assert_matches_interpreter(p, {"n": n, "m": 3}, passes="infer-ranges,lower-loops,unroll-jam")


def test_statement_budget_bounds_the_kernel_and_unrolls_what_fits():
    src = "input x[3, 4, n]\ny[i, j] = sum[k](x[i, j, k])\n"
    p = tcc.parse(src)
    # 6 statements.  j is decided first: its 4 copies of 4 statements need 6 + 3 * 4 = 18
    # (the bound checked before building; they make 14).  Then i: 3 copies of its
    # body, 14 + 2 * 13 = 40 after j, or 6 + 2 * 5 = 16 with j left a loop.
    assert _kernel_stats(_loops(p, "lower-loops"))["y"] == (6, 1)
    assert _kernel_stats(_loops(p, "lower-loops,unroll-jam"))["y"] == (37, 12)
    for budget, expected in ((15, (6, 1)), (16, (11, 3)), (17, (11, 3)), (18, (14, 4)), (39, (14, 4)), (40, (37, 12))):
        spec = f"lower-loops,unroll-jam{{max-stmts={budget}}}"
        assert _kernel_stats(_loops(p, spec))["y"] == expected, budget
        assert budget >= expected[0]
        if budget in (16, 18, 40):
            assert_matches_interpreter(p, {"n": 3}, passes=f"infer-ranges,{spec}")


def test_budget_options_print_and_parse_back():
    from tcc.pipeline import parse_pipeline

    (p,) = parse_pipeline("unroll-jam{max-product=8 max-stmts=100 max-nodes=64}")
    assert (p.max_product, p.max_stmts, p.max_nodes) == (8, 100, 64)
    assert p.spec() == "unroll-jam{max-product=8 max-stmts=100 max-nodes=64}"
    (d,) = parse_pipeline("unroll-jam")
    assert (d.max_product, d.max_stmts, d.max_nodes) == (16, 512, 4096)


def test_node_budget_keeps_a_long_expression_from_being_copied():
    # one statement in the reduction, so the statement budget allows the 4 jammed copies of y[i]'s
    # loop; a body of 2,000 terms (about 8,000 nodes) is over the node budget, a short one is not
    def fors(p, spec="lower-loops,unroll-jam"):
        return sum(1 for line in _loops(p, spec).splitlines() if line.strip().startswith("for "))

    terms = " + ".join(f"x[i, k] * {k}" for k in range(2000))
    long = tcc.parse(f"input x[4, n]\ny[i] = sum[k]({terms})\n")
    short = tcc.parse("input x[4, n]\ny[i] = sum[k](x[i, k] * 2 + 1)\n")
    assert fors(short) == 1  # i unrolled and jammed: only the reduction loop is left
    assert fors(long) == 2   # i stays a loop
    assert fors(long, "lower-loops,unroll-jam{max-nodes=100000}") == 1
    assert_matches_interpreter(long, {"n": 3}, passes="infer-ranges,lower-loops,unroll-jam")


def test_layer_norm_hessian_stays_within_the_copy_budget():
    # every loop of the Hessian's 6-d result has 2 or 3 iterations: without the
    # budget, one band jammed 2 * 3 * 2 * 3 = 36 copies (at 3 x 4, 144 copies
    # and 1370 lines of L2 instead of 294)
    import numpy as np

    from compare import assert_results_close, random_inputs
    from tcc.reference.interpreter import evaluate
    from tcc.pipeline import run_pipeline

    ln = """input x[2, 3], g[2, 3], b[2, 3]
mu = sum[i, j](x[i, j]) / 6
var = sum[i, j]((x[i, j] - mu)**2) / 6
y[i, j] = (x[i, j] - mu) / sqrt(var + 0.00001) * g[i, j] + b[i, j]
"""
    H = tcc.hessian(ln, of="y", wrt="x")
    stats = _kernel_stats(str(run_pipeline(H.program, DEFAULT_L2)))
    assert max(widest for _, widest in stats.values()) <= 16
    assert max(stmts for stmts, _ in stats.values()) <= 512
    inputs = random_inputs(tcc.transform(H.program, "infer-ranges"), {})
    want = evaluate(tcc.transform(H.program, "infer-ranges"), inputs, np.float64)
    assert_results_close({"dx2": H(**inputs)}, {"dx2": want["dx2"]}, "float64")


def test_no_kernel_or_loop_for_a_provably_empty_remainder():
    # a long reduction per row: the row loop is strip-mined by 4; 8 rows leave no remainder
    rows = "input X[8, 1100]\nmu[a] = sum[c](X[a, c]) / 1100\n"
    text = _loops(tcc.parse(rows), "lower-loops,unroll-jam,parallel")
    assert "parallel for a_s in 0..1 {" in text and "_rest" not in text and "8..7" not in text
    odd = _loops(tcc.parse(rows.replace("X[8,", "X[9,")), "lower-loops,unroll-jam,parallel")
    assert "kernel mu_rest {\n  parallel for a in 8..8 {" in odd
    # the inner output loop of a convolution: 8 columns are two strips and no empty loop after them
    conv = "input x[2, 3, 6, 10], w[2, 3, 3, 3]\ny[b, o, i, j] = sum[c, p, q](x[b, c, i + p, j + q] * w[o, c, p, q])\n"
    text = _loops(tcc.parse(conv), "lower-loops,unroll-jam")
    assert "for j_s in 0..1 {" in text and "for j in" not in text
    for src in (rows, rows.replace("X[8,", "X[9,"), conv):
        for dtype in ("float64", "float32"):
            assert_matches_interpreter(tcc.parse(src), None, dtype=dtype, threads=2)


def test_kernels_over_a_zero_extent_are_dropped_and_results_stay_right():
    src = "input x[0, 3]\nb[c] = sum[a](x[a, c])\ny[a] = sum[c](x[a, c])\n"
    text = _loops(tcc.parse(src), "lower-loops,unroll-jam")
    assert "kernel y" not in text and "0..-1" not in text
    got = assert_matches_interpreter(tcc.parse(src), None, threads=2)
    assert got["y"].shape == (0,) and list(got["b"]) == [0.0, 0.0, 0.0]
    y = np.empty(0)
    assert tcc.compile(src)(x=np.zeros((0, 3)), y=y)["y"] is y
    # symbolic extents keep their loops: empty or not is only known at the call
    sym = "input x[n, m]\ny[a] = sum[c](x[a, c])\n"
    for n, m in ((0, 3), (3, 0), (5, 7)):
        assert_matches_interpreter(tcc.parse(sym), {"n": n, "m": m})
