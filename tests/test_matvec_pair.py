"""``matvec-pair``: ``A u`` and ``A^T v`` in one pass over ``A``.

Checked for the IR it prints (the quadratic form's gradient: one kernel over
``A``, no BLAS call left; the refusals), against the reference interpreter
(square and non-square matrices, row counts with every remainder modulo the
four jammed rows, float32 and float64, one and two threads, given output
arrays, NaN, inf and -0 data, hypothesis-generated shapes and part counts),
for bits that do not depend on the thread count, and under ``VerifyEach``.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tcc
from compare import assert_compiled_matches
from tcc.backends.builtin_targets import DEFAULT_LOOP_PIPELINE
from tcc.instruments import VerifyEach
from tcc.reference.interpreter import evaluate
from tcc.ir.loops_parser import parse_loop_program
from tcc.passes.matvec_pair import MatvecPair, matvec_pair

#: blas outlines matrix-vector products of any size (min-work counts p * N; small shapes test the edges)
ANY_SIZE = DEFAULT_LOOP_PIPELINE.replace("blas,", "blas{min-work=1},")
NO_PAIR = ANY_SIZE.replace(",matvec-pair,", ",")

QUADFORM = "input x[{n}], A[{n}, {n}]\nf = sum[i](sum[j](x[i] * A[i, j] * x[j]))\n"
BILINEAR = "input x[{m}], B[{m}, {n}], y[{n}]\nf = sum[i](sum[j](x[i] * B[i, j] * y[j]))\n"


def _quadform(n: int):
    return tcc.grad(tcc.parse(QUADFORM.format(n=n)), of="f", wrt=["x"], value=True)


def _bilinear(m: int, n: int):
    return tcc.grad(tcc.parse(BILINEAR.format(m=m, n=n)), of="f", wrt=["x", "y"], value=True)


def _check(program, passes: str = ANY_SIZE, dtype: str = "float64", threads: int | None = None,
           inputs: dict | None = None, given_outputs: bool = False, seed: int = 0) -> dict:
    if inputs is None:
        rng = np.random.default_rng(seed)
        inputs = {d.name: rng.uniform(-1, 1, tuple(int(e.const) for e in d.extents)).astype(dtype)
                  for d in tcc.transform(program, "infer-ranges").caller_inputs()}
    return assert_compiled_matches(program, inputs, dtype, threads, passes, given_outputs=given_outputs)


# ---------------------------------------------------------------------------
# what it prints
# ---------------------------------------------------------------------------


def test_quadratic_form_gradient_reads_the_matrix_in_one_kernel() -> None:
    text = str(tcc.compile(_quadform(256)).loops)       # the default pipeline: 256^2 >= min-work
    assert "extern matmul" not in text                   # both BLAS matrix-vector products are gone
    assert "temp dx_mm_part[8, 256]" in text
    one = text[text.index("kernel f_mm {"):]
    one = one[: one.index("\n}\n")]
    assert one.splitlines()[1].strip() == "parallel for p in 0..7 {"
    assert "for t in 0..(63 - p) // 8 {" in one                                   # 64 groups of 4 rows
    assert "f_mm_acc4 += A[4*p + 32*t + 3, c] * f_rhs[c, 0]" in one               # four rows share f_rhs[c]
    assert "dx_mm_part[p, c] += A[4*p + 32*t, c] * f_rhs_w + " in one             # ... and the partial row
    assert "dx_mm[c, 0] += dx_mm_part[q, c]" in text                               # the combine
    assert text.index("kernel dx_mm {") < text.index("kernel f {")                # moved up to the pass


def test_leftover_rows_get_a_kernel_of_their_own() -> None:
    text = str(tcc.compile(_bilinear(43, 10), passes=ANY_SIZE).loops)
    rest = text[text.index("kernel f_mm_rest {"):]
    rest = rest[: rest.index("\n}\n")]
    assert "for r in 40..42 {" in rest                       # 43 = 4 * 10 + 3
    assert "dy_mm_part[0, c] += B[r, c] * dy_rhs_w5" in rest  # into part 0, after the parts have run
    assert "kernel f_mm_rest" not in str(tcc.compile(_bilinear(44, 10), passes=ANY_SIZE).loops)


def test_symbolic_extents() -> None:
    program = tcc.grad(tcc.parse("input x[n], A[n, n]\nf = sum[i](sum[j](x[i] * A[i, j] * x[j]))\n"),
                       of="f", wrt=["x"], value=True)
    text = str(tcc.compile(program).loops)
    assert "extern matmul" not in text and "for t in 0..(n // 4 - p - 1) // 8 {" in text
    assert "for r in 4*(n // 4)..n - 1 {" in text
    rng = np.random.default_rng(2)
    for n in (0, 1, 3, 4, 5, 37, 64):
        _check(program, passes=None, inputs={"x": rng.standard_normal(n), "A": rng.standard_normal((n, n)),
                                             "df": np.array(1.5)}, threads=2)


def test_a_partial_row_over_max_row_bytes_keeps_both_calls() -> None:
    program = tcc.grad(tcc.parse(QUADFORM.format(n=9000)), of="f", wrt=["x"], value=True)
    with_pass = str(tcc.transform(program, ANY_SIZE))
    assert with_pass == str(tcc.transform(program, NO_PAIR))
    assert with_pass.count("extern matmul") == 2


L2_BETWEEN = """input A[8, 8], u[8, 1], x[8, 1]
output y[8, 1], v[8, 1], w[8, 1], z[8, 1]

kernel y {{
  extern matmul(A, u) -> y
}}

kernel v {{
  for i in 0..7 {{
    {between}
  }}
}}

kernel w {{
  for i in 0..7 {{
    w[i, 0] = y[i, 0] * 2
  }}
}}

kernel z {{
  extern matmul(transpose(A), {vec}) -> z
}}
"""


@pytest.mark.parametrize("between, vec", [
    ("v[i, 0] = y[i, 0]", "v"),   # the second product's vector needs the first product's result
    ("v[i, 0] = u[i, 0]", "y"),   # its vector is the first product's result
])
def test_a_product_that_needs_the_other_keeps_both_calls(between: str, vec: str) -> None:
    program = parse_loop_program(L2_BETWEEN.format(between=between, vec=vec))
    assert matvec_pair(program) == program


def test_the_kernels_the_second_product_needs_move_ahead_of_the_pair() -> None:
    program = parse_loop_program(L2_BETWEEN.format(between="v[i, 0] = x[i, 0] + u[i, 0]", vec="v"))
    out = matvec_pair(program, parts=2)
    assert [k.name for k in out.kernels] == ["v", "y", "z", "w"]   # v first; w (reads y) after the pair
    assert "extern" not in str(out)


def test_option_errors() -> None:
    with pytest.raises(ValueError, match="parts must be a positive integer, not 0"):
        MatvecPair(parts=0)
    with pytest.raises(ValueError, match="max-row-bytes must be a positive integer, not True"):
        MatvecPair(max_row_bytes=True)


def test_verify_each_accepts_the_pipeline() -> None:
    f = tcc.compile(_quadform(64), passes=ANY_SIZE, instruments=[VerifyEach()])
    assert "dx_mm_part" in str(f.loops)


# ---------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_quadratic_form_matches_the_interpreter(dtype: str, threads: int) -> None:
    _check(_quadform(67), dtype=dtype, threads=threads)
    _check(_quadform(67), dtype=dtype, threads=threads, given_outputs=True)


@pytest.mark.parametrize("m, n", [(1, 1), (2, 5), (3, 7), (4, 4), (5, 1), (33, 2), (64, 31), (8 * 4 * 3 + 2, 13)])
def test_bilinear_form_edge_extents(m: int, n: int) -> None:
    _check(_bilinear(m, n), threads=2)


def test_the_same_bits_on_one_and_two_threads() -> None:
    program = _quadform(203)
    rng = np.random.default_rng(5)
    inputs = {"x": rng.standard_normal(203), "A": rng.standard_normal((203, 203)), "df": np.array(0.5)}
    one = tcc.compile(program, threads=1)(**inputs)
    two = tcc.compile(program, threads=2)(**inputs)
    for k in one:
        assert np.array_equal(one[k], two[k]), k


def test_edge_data_nan_inf_and_negative_zero() -> None:
    program = _bilinear(37, 9)
    x = np.full(37, -0.0)
    B = np.ones((37, 9))
    y = np.linspace(-1, 1, 9)
    x[3] = 1.0
    B[5, 2], B[30, 2] = np.inf, -np.inf   # rows of different parts: inf - inf in the column sum is NaN
    B[7, 4] = np.nan
    got = _check(program, inputs={"x": x, "B": B, "y": y, "df": np.array(1.0)}, threads=2)
    assert np.isnan(got["dy"][4])
    assert np.signbit(got["dx"][0]) == np.signbit(evaluate(tcc.transform(program, "infer-ranges"),
                                                           {"x": x, "B": B, "y": y, "df": np.array(1.0)},
                                                           np.float64)["dx"][0])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 41), n=st.integers(1, 23), parts=st.sampled_from([1, 2, 3, 8]), seed=st.integers(0, 9))
def test_random_shapes_and_part_counts_match_the_interpreter(m: int, n: int, parts: int, seed: int) -> None:
    passes = ANY_SIZE.replace("matvec-pair", f"matvec-pair{{parts={parts}}}")
    _check(_bilinear(m, n), passes=passes, threads=2, seed=seed)
