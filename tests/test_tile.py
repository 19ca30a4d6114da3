"""``tile``: column reductions strip-mined, the tile jammed through the reduction.

Checked against the reference interpreter (extents 0, 1, primes, symbolic,
non-square; float32 and float64; one and two threads; given output arrays;
NaN, inf and -0 data) and, bit for bit, against the same pipeline without
``tile``: each column's sum keeps its order.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tcc
from compare import assert_matches_interpreter, assert_results_close, random_inputs
from tcc.backends.builtin_targets import DEFAULT_GPU_PIPELINE, DEFAULT_LOOP_PIPELINE
from tcc.reference.interpreter import evaluate
from tcc.passes.tile import Tile, host_vector_bytes, tile_width
from tcc.pipeline import run_pipeline

NO_TILE = DEFAULT_LOOP_PIPELINE.replace(",tile,", ",")
# a fixed width, so the expected text does not depend on the machine running the tests
FIXED = DEFAULT_LOOP_PIPELINE.replace(",tile,", ",tile{vector-bytes=64},")
WIDTH4 = DEFAULT_LOOP_PIPELINE.replace(",tile,", ",tile{vector-bytes=16},")  # tiles of 4: remainders at small sizes

COLSUM = "input G[n, m]\nb[c] = sum[a](G[a, c])\n"
# an epilogue, two reductions in one kernel (after fuse: layernorm's dg_db), a factor on the row only
TWO = """input G[n, m], H[n, m], r[n]
output s[m], t[m]
s[c] = sum[a](G[a, c] * (H[a, c] * r[a]))
t[c] = 2 * sum[a](G[a, c]) + 1
"""
LAYERNORM = """input X[n, m], g[m], b[m]
local mu[n], xc[n, m], r[n]
output Y[n, m]
mu[a] = sum[c](X[a, c]) / 8
xc[a, c] = X[a, c] - mu[a]
r[a] = 1 / sqrt(sum[c](xc[a, c]**2) / 8 + 1e-05)
Y[a, c] = xc[a, c] * r[a] * g[c] + b[c]
"""
DENSE = """input X[n, k], W[m, k], b[m]
Y[a, c] = tanh(sum[z](X[a, z] * W[c, z]) + b[c])
"""


def _loops(program, passes: str) -> str:
    return str(run_pipeline(tcc.transform(program, "infer-ranges"), passes))


def _kernel(text: str, name: str) -> str:
    start = text.index(f"kernel {name} {{")
    return text[start : text.index("\n}\n", start) + 3]


def test_cost_model() -> None:
    assert tile_width(64, 2, 1, 32) == 16  # AVX-512: two registers of 8 doubles
    assert tile_width(64, 2, 2, 32) == 16  # two accumulator groups: 32 accumulators, still fits
    assert tile_width(64, 2, 3, 32) == 8  # halved until it fits
    assert tile_width(32, 2, 1, 32) == 8 and tile_width(16, 1, 1, 32) == 2
    assert tile_width(64, 2, 40, 32) == 1  # nothing fits: the pass leaves the kernel alone
    assert host_vector_bytes() in (16, 32, 64)
    assert host_vector_bytes("/nonexistent/cpuinfo") == 16
    with pytest.raises(ValueError):
        Tile(vectors=0)
    with pytest.raises(ValueError):
        Tile(vector_bytes=-8)


def test_column_sum_is_tiled_and_row_sum_is_not() -> None:
    # a short constant reduction: unroll-jam leaves it, tile makes 16 columns
    text = _loops(tcc.parse("input G[9, m]\nb[c] = sum[a](G[a, c])\n"), FIXED)
    kernel = _kernel(text, "b")
    assert "parallel for c_t in 0..m // 16 - 1 {" in kernel
    assert kernel.count("local b_acc_t") == 16 and kernel.count("for a in 0..8") == 1
    assert "b_acc_t15 += G[a, 16*c_t + 15]" in kernel and "b[16*c_t + 15] = b_acc_t15" in kernel
    assert "kernel b_rest {\n  parallel for c in max(0, 16*(m // 16))..m - 1 {" in text
    # a symbolic one: the same, and unroll-jam (after tile) does not strip the 16 accumulators again
    text = _loops(tcc.parse(COLSUM), FIXED)
    kernel = _kernel(text, "b")
    assert "parallel for c_t in 0..m // 16 - 1 {" in kernel and kernel.count("local b_acc_t") == 16
    assert "kernel b_rest {\n  parallel for c in max(0, 16*(m // 16))..m - 1 {" in text
    assert text.count("kernel b_rest") == 1
    for m in (0, 1, 3, 4, 31, 32, 33, 37, 64):
        assert_matches_interpreter(tcc.parse(COLSUM), {"n": 3, "m": m}, passes=FIXED)
    rows = "input G[n, m]\nb[a] = sum[c](G[a, c])\n"  # contiguous already: left to unroll-jam
    assert "_t0" not in _loops(tcc.parse(rows), FIXED)
    assert _loops(tcc.parse(rows), FIXED) == _loops(tcc.parse(rows), NO_TILE)


def test_constant_extent_that_the_tile_divides_has_no_remainder_kernel() -> None:
    text = _loops(tcc.parse("input G[512, 1024]\nb[c] = sum[a](G[a, c])\n"), FIXED)
    assert "parallel for c_t in 0..63 {" in text and "_rest" not in text
    text = _loops(tcc.parse("input G[5, 37]\nb[c] = sum[a](G[a, c])\n"), FIXED)
    assert "for c_t in 0..1 {" in text and "kernel b_rest {\n  parallel for c in 32..36 {" in text
    # fewer columns than one tile: nothing to tile
    assert "_t0" not in _loops(tcc.parse("input G[5, 15]\nb[c] = sum[a](G[a, c])\n"), FIXED)


def test_dense_and_layernorm_gradients_are_tiled() -> None:
    dense = tcc.grad(DENSE, of="Y", wrt="X,W,b")
    db = _kernel(_loops(dense, FIXED), "db")
    assert db.count("local db_acc_t") == 16 and db.count("for db_z0 in 0..n - 1 {") == 1
    # constant extents the tile divides: no remainders, so fuse joins the tiled dg and db again
    ln48 = tcc.grad(LAYERNORM.replace("[n, m]", "[6, 48]").replace("[m]", "[48]").replace("[n]", "[6]"), of="Y", wrt="X,g,b")
    text = _loops(ln48, FIXED)
    dg = _kernel(text, "dg_db")
    assert "parallel for dg_0_t in 0..2 {" in dg
    assert dg.count("local dg_acc_t") == 16 and dg.count("local db_acc_t") == 16
    assert dg.count("for dg_z0 in") == 1 and dg.count("for db_z0 in") == 1
    assert "mu_t" not in text and "r_t0" not in text and "_rest" not in text  # row reductions are not tiled
    assert_matches_interpreter(ln48, None, passes=FIXED, threads=2)
    ln = tcc.grad(LAYERNORM, of="Y", wrt="X,g,b")
    text = _loops(ln, FIXED)
    assert "dg_acc_t15 +=" in _kernel(text, "dg") and "db_acc_t15 +=" in _kernel(text, "db")
    for sizes in ({"n": 3, "m": 37}, {"n": 1, "m": 16}, {"n": 7, "m": 1}):
        assert_matches_interpreter(ln, sizes, passes=FIXED)
    assert_matches_interpreter(dense, {"n": 5, "k": 3, "m": 19}, passes=FIXED)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_extents_dtypes_threads(dtype: str, threads: int) -> None:
    p = tcc.parse(TWO)
    compiled = tcc.compile(p, dtype=dtype, passes=WIDTH4, threads=threads)
    inferred = tcc.transform(p, "infer-ranges")
    for n, m in [(0, 0), (0, 5), (5, 0), (1, 1), (1, 4), (2, 3), (7, 13), (13, 7), (3, 17), (11, 32)]:
        inputs = random_inputs(inferred, {"n": n, "m": m}, seed=n * 31 + m, dtype=dtype)
        want = evaluate(inferred, {k: v.astype(np.float64) for k, v in inputs.items()}, np.float64)
        assert_results_close(compiled(**inputs), want, dtype)


def test_results_are_bit_identical_to_the_untiled_kernel_and_given_outputs_are_filled() -> None:
    p = tcc.parse(TWO)
    inferred = tcc.transform(p, "infer-ranges")
    tiled = tcc.compile(p, passes=WIDTH4, threads=2)
    plain = tcc.compile(p, passes=NO_TILE, threads=2)
    inputs = random_inputs(inferred, {"n": 29, "m": 23}, seed=3)
    inputs["G"] = inputs["G"] * 1e8 - 0.5e8  # cancellation: a reordered sum would show
    a, b = tiled(**inputs), plain(**inputs)
    for name in ("s", "t"):
        assert np.array_equal(a[name], b[name])
    s, t = np.full(23, np.nan), np.full(23, np.nan)
    got = tiled(**inputs, s=s, t=t)
    assert got["s"] is s and np.array_equal(s, a["s"]) and np.array_equal(t, a["t"])


def test_nan_inf_and_negative_zero() -> None:
    p = tcc.parse(COLSUM)
    inferred = tcc.transform(p, "infer-ranges")
    g = np.full((4, 11), -0.0)
    g[1, 2] = np.nan
    g[0, 5], g[3, 5] = np.inf, 1.0
    g[2, 7], g[3, 7] = np.inf, -np.inf  # inf - inf: NaN
    g[:, 9] = -np.inf
    want = evaluate(inferred, {"G": g}, np.float64)
    for dtype in ("float64", "float32"):
        got = tcc.compile(p, dtype=dtype, passes=WIDTH4)(G=g.astype(dtype))
        assert_results_close(got, want, dtype)
        # a column of -0 sums to +0 from the accumulator's 0, as in the interpreter
        assert np.array_equal(np.signbit(got["b"]), np.signbit(want["b"]))


RACY = """# tcc loops
input G[4, 40]
output y[41]

kernel y {
  for c in 0..39 {
    local acc = 0
    for a in 0..3 {
      acc += G[a, c] * y[c + 1]
    }
    y[c] = acc
  }
}
"""


def test_kernel_whose_iterations_touch_each_others_elements_is_left_alone() -> None:
    from tcc.ir.loops_parser import parse_loop_program
    from tcc.passes.tile import tile_program

    racy = parse_loop_program(RACY)
    assert tile_program(racy, 64) == racy  # iteration c reads y[c + 1], which iteration c + 1 writes
    disjoint = parse_loop_program(RACY.replace("y[c + 1]", "G[a, 39 - c]"))
    assert "acc_t15" in str(tile_program(disjoint, 64))
    # reads of other columns of inputs are fine: the iterations stay independent
    mixed = "input G[n, m]\noutput y[m]\ny[c] = sum[a](G[a, c] * G[a, m - 1 - c])\n"
    assert "_t0" in _loops(tcc.parse(mixed), "lower-loops,tile{vector-bytes=16}")
    assert_matches_interpreter(tcc.parse(mixed), {"n": 3, "m": 9}, passes="infer-ranges,lower-loops,tile{vector-bytes=16}")


def test_gpu_pipeline_does_not_tile_but_a_tiled_program_runs_on_cuda_sim() -> None:
    assert "tile" not in DEFAULT_GPU_PIPELINE.split(",")
    p = tcc.parse(TWO)
    assert_matches_interpreter(p, {"n": 5, "m": 11}, target="cuda-sim")
    with_tile = DEFAULT_GPU_PIPELINE.replace("lower-loops,", "lower-loops,tile{vector-bytes=16},")
    assert_matches_interpreter(p, {"n": 5, "m": 11}, target="cuda-sim", passes=with_tile)


def test_tile_is_deterministic_and_verifies() -> None:
    ln = tcc.grad(LAYERNORM, of="Y", wrt="X,g,b")
    assert _loops(ln, FIXED) == _loops(ln, FIXED)
    from tcc.ir.loops_verifier import verify_loops

    verify_loops(run_pipeline(tcc.transform(ln, "infer-ranges"), FIXED))
    # the parallel loops of swept and jammed kernels pass the verifier's race test too
    conv = tcc.parse(CONV)
    for p in (conv, tcc.grad(conv, of="y", wrt="x,w"), tcc.parse("input A[n, m]\nB[j, i] = A[i, j]\n")):
        verify_loops(run_pipeline(tcc.transform(p, "infer-ranges"), FIXED))
        assert _loops(p, FIXED) == _loops(p, FIXED)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 9), m=st.integers(0, 21), body=st.sampled_from([
    "G[a, c]", "G[a, c] * G[a, c] - r[a]", "exp(G[a, c]) * r[a]", "G[a, c] / (1 + r[a])",
]), epilogue=st.sampled_from(["{}", "2 * {} + 1", "sqrt({})", "{} / 3"]), seed=st.integers(0, 3))
def test_hypothesis_column_reductions(n: int, m: int, body: str, epilogue: str, seed: int) -> None:
    src = f"input G[n, m], r[n]\noutput b[m]\nb[c] = {epilogue.format(f'sum[a]({body})')}\n"
    p = tcc.parse(src)
    assert_matches_interpreter(p, {"n": n, "m": m}, passes=WIDTH4, seed=seed, threads=2)


CONV = "input x[B, C, H, W], w[O, C, 3, 3]\ny[b, o, i, j] = sum[c, p, q](x[b, c, i + p, j + q] * w[o, c, p, q])\n"


# blas makes a convolution with symbolic (large) channel counts a windowed contraction (shifted GEMMs,
# tests/test_window_contract.py); these tests are about the loop nests it keeps elsewhere
CONV_LOOPS = FIXED.replace("blas,", "")


def test_convolution_row_is_accumulated_with_the_unit_stride_loop_innermost() -> None:
    text = _loops(tcc.parse(CONV.replace("W]", "34]")), CONV_LOOPS)
    assert "for j in 0..31 {\n          y[b, o, i, j] = 0\n" in text
    assert "for q in 0..2 {\n              for j in 0..31 {\n                y[b, o, i, j] += x[b, c, i + p, j + q] * w[o, c, p, q]" in text
    assert "y_acc" not in text and "parallel for b in" in text
    # an epilogue is applied in a third sweep over the row
    act = _loops(tcc.parse("input x[B, C, H, 20], w[O, C, 3, 3]\ny[b, o, i, j] = tanh(sum[c, p, q](x[b, c, i + p, j + q] * w[o, c, p, q]))\n"), CONV_LOOPS)
    assert "y[b, o, i, j] = tanh(y[b, o, i, j])" in act
    # a row shorter than a vector stays a reduction per element
    assert "y_acc" in _loops(tcc.parse(CONV.replace("W]", "7]")), CONV_LOOPS)
    # ... and so does a band LLVM unrolls whole (fewer than 32 iterations: 3 channels x 3 x 3)
    assert "y_acc" in _loops(tcc.parse(CONV.replace("W]", "34]").replace("C,", "3,")), CONV_LOOPS)
    assert "+= x[b, 4, i + p, j + q]" not in _loops(tcc.parse(CONV.replace("W]", "34]").replace("C,", "4,")), CONV_LOOPS)
    assert "y[b, o, i, j] += x[b, c, i + p, j + q]" in _loops(tcc.parse(CONV.replace("W]", "34]").replace("C,", "4,")), CONV_LOOPS)
    blur = open(pathlib.Path(__file__).resolve().parent.parent / "examples" / "box_blur.tcc").read()
    assert _loops(tcc.parse(blur), CONV_LOOPS) == _loops(tcc.parse(blur), NO_TILE)  # 3 taps: measured slower swept


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_convolution_and_its_gradients_match_the_interpreter(dtype: str) -> None:
    p = tcc.parse(CONV)
    for sizes in ({"B": 2, "C": 3, "H": 5, "W": 21, "O": 2}, {"B": 1, "C": 1, "H": 3, "W": 3, "O": 1},
                  {"B": 1, "C": 2, "H": 4, "W": 2, "O": 3}, {"B": 0, "C": 2, "H": 4, "W": 19, "O": 3}):
        assert_matches_interpreter(p, sizes, dtype=dtype, passes=FIXED, threads=2)
    fixed = tcc.parse("input x[2, 4, 7, 19], w[5, 4, 3, 3]\ny[b, o, i, j] = sum[c, p, q](x[b, c, i + p, j + q] * w[o, c, p, q])\n")
    assert_matches_interpreter(fixed, None, dtype=dtype, passes=FIXED, threads=1)
    assert_matches_interpreter(tcc.grad(fixed, of="y", wrt="x,w"), None, dtype=dtype, passes=FIXED, threads=2)
    assert_matches_interpreter(fixed, None, dtype=dtype, target="cuda-sim")


def test_convolution_with_nan_inf_and_given_output() -> None:
    p = tcc.parse("input x[1, 2, 3, 20], w[2, 2, 1, 3]\ny[b, o, i, j] = sum[c, p, q](x[b, c, i + p, j + q] * w[o, c, p, q])\n")
    inferred = tcc.transform(p, "infer-ranges")
    x = np.full((1, 2, 3, 20), -0.0)
    x[0, 0, 1, 4], x[0, 1, 2, 9], x[0, 1, 0, 15] = np.nan, np.inf, -np.inf
    w = np.full((2, 2, 1, 3), 0.5)
    w[1, 1, 0, 2] = -0.0
    want = evaluate(inferred, {"x": x, "w": w}, np.float64)
    y = np.full((1, 2, 3, 18), 7.0)  # garbage: every element must be overwritten
    got = tcc.compile(p, passes=FIXED)(x=x, w=w, y=y)
    assert got["y"] is y
    assert_results_close(got, want, "float64")
    assert np.array_equal(np.signbit(y[np.isfinite(y)]), np.signbit(want["y"][np.isfinite(want["y"])]))


def test_row_sweep_is_left_alone_when_the_reduction_reads_the_output() -> None:
    from tcc.ir.loops_parser import parse_loop_program
    from tcc.passes.tile import tile_program

    text = """# tcc loops
input x[4, 40]
output y[4, 40]

kernel y {
  for i in 0..3 {
    for j in 0..39 {
      local acc = 0
      for p in 0..15 {
        for q in 0..2 {
          acc += x[i, j] * y[q, j]
        }
      }
      y[i, j] = acc
    }
  }
}
"""
    racy = parse_loop_program(text)
    assert tile_program(racy, 64) == racy
    fine = tile_program(parse_loop_program(text.replace("y[q, j]", "x[q, j]")), 64)
    assert "y[i, j] += x[i, j] * x[q, j]" in str(fine)
    own = parse_loop_program(text.replace("x[i, j] * y[q, j]", "x[i, j] * acc"))
    assert tile_program(own, 64) == own  # the sum reads itself


TRANSPOSE = "input A[n, m]\nB[j, i] = A[i, j]\n"


def test_transpose_rows_are_jammed_so_each_load_uses_a_whole_cache_line() -> None:
    text = _loops(tcc.parse(TRANSPOSE), FIXED)
    kernel = _kernel(text, "B")
    assert "parallel for j_t in 0..m // 16 - 1 {\n    for i in 0..n - 1 {\n      B[16*j_t, i] = A[i, 16*j_t]\n" in kernel
    assert "B[16*j_t + 15, i] = A[i, 16*j_t + 15]" in kernel
    assert "kernel B_rest {\n  parallel for j in max(0, 16*(m // 16))..m - 1 {" in text
    # a copy that is already contiguous is left alone
    copy = "input A[n, m]\nB[i, j] = 2 * A[i, j]\n"
    assert _loops(tcc.parse(copy), FIXED) == _loops(tcc.parse(copy), NO_TILE)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_transpose_is_exact(dtype: str, threads: int) -> None:
    p = tcc.parse("input A[n, m], v[m]\nB[j, i] = A[i, j] * v[j] - 1\n")
    f = tcc.compile(p, dtype=dtype, passes=WIDTH4, threads=threads)
    rng = np.random.default_rng(1)
    for n, m in [(0, 0), (0, 3), (3, 0), (1, 1), (5, 4), (4, 5), (7, 13), (13, 7), (2, 33)]:
        a = rng.standard_normal((n, m)).astype(dtype)
        v = rng.standard_normal(m).astype(dtype)
        if a.size:
            a.flat[0], a.flat[-1] = np.nan, -np.inf
        want = (a * v).T - dtype_one(dtype)
        out = np.full((m, n), 7.0, dtype=dtype)
        got = f(A=a, v=v, B=out)["B"]
        assert got is out and np.array_equal(got, want, equal_nan=True)
    assert_matches_interpreter(p, {"n": 6, "m": 11}, dtype=dtype, passes=WIDTH4, threads=threads)


def dtype_one(dtype: str) -> np.generic:
    return np.dtype(dtype).type(1)


def test_transposed_convolution_row_sweep_projects_the_window() -> None:
    g = tcc.grad(CONV.replace("W]", "34]").replace("C,", "32,").replace(", 3, 3]", ", 3, 3]"), of="y", wrt="x")
    dx = _kernel(_loops(g, CONV_LOOPS), "dx")
    # the tap loop's bounds on the output column become the column's bounds inside the taps
    assert "for dx_z2 in 0..2 {" in dx
    assert "for dx_3 in max(0, dx_z2)..min(33, dx_z2 + 31) {\n" in dx
    assert "dx[dx_0, dx_1, dx_2, dx_3] += dy[dx_0, dx_z0, dx_2 - dx_z1, dx_3 - dx_z2]" in dx
    # symbolic extents, rows shorter than the taps, strided windows (floor division: left alone)
    for src in (CONV, CONV.replace("j + q", "2*j + q").replace("i + p", "2*i + p")):
        gx = tcc.grad(src, of="y", wrt="x,w")
        for sizes in ({"B": 1, "C": 2, "H": 5, "W": 13, "O": 2}, {"B": 1, "C": 1, "H": 3, "W": 2, "O": 1},
                      {"B": 2, "C": 2, "H": 4, "W": 29, "O": 3}):
            assert_matches_interpreter(gx, sizes, passes=FIXED, threads=2)
    strided = _loops(tcc.grad(CONV.replace("j + q", "2*j + q"), of="y", wrt="x"), FIXED)
    assert "dx_acc" in strided


def test_cli_dump_after_tile(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tcc.cli.driver import main

    src = tmp_path / "col.tcc"
    src.write_text("input G[5, 40]\nb[c] = sum[a](G[a, c])\n")
    assert main(["compile", str(src), "--emit", "loops", "--dump-after", "tile"]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "IR after tile" in text and "b_acc_t" in text
    assert main(["passes"]) == 0
    assert "tile" in capsys.readouterr().out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(1, 5), n=st.integers(0, 23), rows=st.integers(1, 3), lo=st.integers(0, 2),
       wrt=st.sampled_from(["x", "w", "x,w"]), dtype=st.sampled_from(["float64", "float32"]))
def test_hypothesis_windows_and_their_gradients(k: int, n: int, rows: int, lo: int, wrt: str, dtype: str) -> None:
    # correlations with a window of k taps starting at lo, over rows: forward (row sweep when long
    # enough), input gradient (windows on the output column), weight gradient (column-like reductions)
    src = f"input x[r, n], w[c, {k}]\ny[a, o, j] = sum[q: {lo}..{k - 1}](x[a, j + q] * w[o, q])\n"
    if lo > k - 1:
        return
    p = tcc.parse(src)
    sizes = {"r": rows, "n": n + k, "c": 3}
    assert_matches_interpreter(p, sizes, dtype=dtype, passes=WIDTH4, threads=2)
    assert_matches_interpreter(tcc.grad(p, of="y", wrt=wrt), sizes, dtype=dtype, passes=WIDTH4, threads=2)
