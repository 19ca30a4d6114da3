"""``hoist``'s factoring against the interpreter on empty sums, inf, NaN and -0.

Factoring rewrites ``sum(x * y)`` as ``sum(x) * y`` for a ``y`` that does not
change in the sum.  With finite values that only reassociates (rounding), but
an empty sum -- an empty range, or every term excluded by a guard -- is 0 in
the interpreter, and ``0 * inf`` or ``0 * nan`` is NaN.  So the compiled code
must form the product only where some term was added, and the tests here
compare compiled results with the interpreter *exactly* on such data: NaN
where NaN, the same infinities, and +0 (never -0) where the interpreter has a
zero.  Finite non-zero values are compared with a relative tolerance
(reassociation changes the last bits, and float32 code is compared with the
float64 interpreter).

Every program runs through the public API (``tcc.compile``, ``tcc.grad``) on
the CPU in float64 and float32 and through the GPU pipeline in ``cuda-sim``.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Mapping

import numpy as np
import pytest

import tcc
from tcc.reference.interpreter import evaluate
from tcc.ir.loops_parser import parse_loop_program
from tcc.passes.pass_base import Level
from tcc.pipeline import run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop_eval import run_loops  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
INF, NAN = np.inf, np.nan

#: (target, dtype) of the compiled code; the interpreter always runs in float64.
TARGETS = [("cpu", "float64"), ("cpu", "float32"), ("cuda-sim", "float64")]
RTOL = {"float64": 1e-12, "float32": 1e-5}


def assert_same_ieee(got: np.ndarray, want: np.ndarray, dtype: str, name: str) -> None:
    """Same shape; NaN exactly where the interpreter has NaN; the same
    infinities; a zero exactly where it has a zero, with its sign; the rest
    within a relative tolerance (reassociation and float32 rounding)."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape, name
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{name}: NaN at {got} vs interpreter {want}"
    inf = np.isinf(want)
    assert np.array_equal(np.isinf(got), inf) and np.array_equal(got[inf], want[inf]), f"{name}: {got} vs {want}"
    zero = want == 0
    assert np.all(got[zero] == 0) and np.array_equal(np.signbit(got[zero]), np.signbit(want[zero])), (
        f"{name}: zeros (with their signs) differ: {got} vs interpreter {want}"
    )
    rest = np.isfinite(want) & ~zero
    np.testing.assert_allclose(got[rest], want[rest], rtol=RTOL[dtype], atol=0, err_msg=name)


def check(program: object, inputs: Mapping[str, np.ndarray], target: str, dtype: str) -> dict[str, np.ndarray]:
    """Compile ``program`` for ``target`` and ``dtype``, run it on ``inputs`` and
    compare every definition with the float64 interpreter (``assert_same_ieee``)."""
    if isinstance(program, str):
        program = tcc.parse(program)
    inferred = tcc.transform(program, "infer-ranges")
    want = evaluate(inferred, {k: np.asarray(v, np.float64) for k, v in inputs.items()}, np.float64)
    with np.errstate(all="ignore"):  # inf and NaN on purpose
        got = tcc.compile(program, target, dtype=dtype)(**{k: np.asarray(v, dtype) for k, v in inputs.items()})
    for name, ref in want.items():
        assert_same_ieee(got[name], ref, dtype, name)
    return want


def loops_text(program: str) -> str:
    """The default CPU L2 program, to see whether factoring still happens."""
    return str(tcc.compile(tcc.parse(program), dtype="float64").loops)


# ---------------------------------------------------------------------------
# Empty sums
# ---------------------------------------------------------------------------

# f[n - 1] sums nothing, and y[n - 1] = 0 makes the invariant 1 / y infinite
SUFFIX = "input x[n], y[n]\nf[i] = sum[k: i + 1..n - 1](x[k] / y[i])\n"


@pytest.mark.parametrize("target,dtype", TARGETS)
def test_empty_suffix_sum_times_an_infinite_invariant_is_zero(target: str, dtype: str) -> None:
    want = check(SUFFIX, {"x": np.ones(4), "y": np.array([1.0, 2.0, 4.0, 0.0])}, target, dtype)
    np.testing.assert_array_equal(want["f"], [3.0, 1.0, 0.25, 0.0])


@pytest.mark.parametrize("target,dtype", TARGETS)
def test_empty_suffix_sum_times_a_nan_invariant_is_zero(target: str, dtype: str) -> None:
    want = check(SUFFIX, {"x": np.ones(3), "y": np.array([NAN, 2.0, NAN])}, target, dtype)
    assert np.isnan(want["f"][0]) and want["f"][2] == 0


# an empty inner axis (p = 0) under a non-empty outer one: the sum over both
# is empty although the loop the invariant leaves runs
NESTED = "input x[m, p], y[n]\nf[i] = sum[k: 0..m - 1, l: 0..p - 1](x[k, l] * y[i])\n"


@pytest.mark.parametrize("target,dtype", TARGETS)
@pytest.mark.parametrize("p", [0, 2])
def test_empty_inner_axis_of_a_double_sum(target: str, dtype: str, p: int) -> None:
    x = np.arange(1.0, 3 * p + 1).reshape(3, p)
    check(NESTED, {"x": x, "y": np.array([INF, -INF, NAN, 0.0, -2.0])}, target, dtype)


# y[l] leaves the inner loop over k; the test "m >= 1" of that loop does not
# change in the loop over l, so it guards the whole double sum once, after it
ROW_SUMS = "input x[p, m], y[p]\nf = sum[l: 0..p - 1, k: 0..m - 1](x[l, k] * y[l])\n"


@pytest.mark.parametrize("target,dtype", TARGETS)
@pytest.mark.parametrize("m", [0, 2])
def test_empty_inner_sum_under_an_outer_one(target: str, dtype: str, m: int) -> None:
    assert "let f_acc_g = where(m >= 1, f_acc, 0)" in loops_text(ROW_SUMS)
    x = np.arange(1.0, 3 * m + 1).reshape(3, m)
    for y in ([INF, 1.0, 2.0], [NAN, 1.0, 2.0], [-0.0, 1.0, -1.0]):
        check(ROW_SUMS, {"x": x, "y": np.array(y)}, target, dtype)


# y[m - 1, l] is in bounds only where m >= 1, the test that the inner sum runs
LAST_ROW = "input x[p, m], y[m, p]\nf = sum[l: 0..p - 1, k: 0..m - 1](x[l, k] * y[m - 1, l])\n"


def test_a_load_kept_safe_by_the_runs_test_stays_under_it() -> None:
    """With m = 0 every y[m - 1, l] is out of bounds: moving the test after the outer
    loop (one select instead of a branch) read y at negative offsets, and at p = 10**8
    the process died with SIGSEGV.  The test stays in the loop; the process is separate
    so that a regression fails this test instead of killing the run."""
    text = loops_text(LAST_ROW)
    assert "if m >= 1 {\n      f_acc += f_acc2 * y[m - 1, l]" in text, text
    out = subprocess.run(
        [sys.executable, "-c", (
            "import numpy as np, tcc\n"
            f"src = {LAST_ROW!r}\n"
            "p = 10**8\n"
            "print(tcc.compile(src)(x=np.zeros((p, 0)), y=np.zeros((0, p)))['f'])\n"
        )],
        capture_output=True, text=True, timeout=300,
    )
    assert (out.returncode, out.stdout.strip()) == (0, "0.0"), out.stderr[-2000:]
    for m in (0, 2):
        x = np.arange(1.0, 3 * m + 1).reshape(3, m)
        check(LAST_ROW, {"x": x, "y": np.full((m, 3), np.inf)}, "cpu", "float64")


@pytest.mark.parametrize("target,dtype", TARGETS)
def test_softmax_gradient_with_an_empty_axis(target: str, dtype: str) -> None:
    # ds[i] = sum[j](-(dy[i, j] * e[i, j] / s[i]**2)) with s[i] = sum of
    # nothing = 0: the factored 1 / s[i]**2 is inf, the sum is empty
    g = tcc.grad(tcc.parse((EXAMPLES / "softmax_matmul.tcc").read_text()), of="y", wrt="a")
    rng = np.random.default_rng(0)
    n, p, m = 3, 2, 0
    inputs = {"a": rng.uniform(0.25, 0.75, (n, p)), "b": rng.uniform(0.25, 0.75, (p, m)), "dy": np.ones((n, m))}
    want = check(g, inputs, target, dtype)
    np.testing.assert_array_equal(want["ds"], np.zeros(n))


# ---------------------------------------------------------------------------
# Guards
# ---------------------------------------------------------------------------

# for n = m = 1 the only term of f[0] is excluded; the test k != i varies with
# the summation variable, so no exact "some term ran" test exists: not factored
OFF_DIAGONAL = "input x[m], y[n]\nf[i] = sum[k: 0..m - 1](where(k != i, x[k] * y[i], 0))\n"


@pytest.mark.parametrize("target,dtype", TARGETS)
def test_guard_that_excludes_every_term(target: str, dtype: str) -> None:
    want = check(OFF_DIAGONAL, {"x": np.array([2.0]), "y": np.array([INF, INF, NAN])}, target, dtype)
    np.testing.assert_array_equal(want["f"][:2], [0.0, INF])


# the same guard with a constant multiplier: a finite non-zero constant keeps
# an empty sum a zero, so this is factored without a test; f[2] sums 1 and -1
# (+0 in any order), and the factored (1 - 1) / -2 is -0 unless it is made +0
OFF_DIAGONAL_CONSTANT = "input x[m], y[n]\noutput f[n]\nf[i] = sum[k: 0..m - 1](where(k != i, x[k] / -2, 0))\n"


@pytest.mark.parametrize("target,dtype", TARGETS)
def test_guard_with_a_constant_multiplier(target: str, dtype: str) -> None:
    assert "f_acc += x[k]\n" in loops_text(OFF_DIAGONAL_CONSTANT)
    want = check(OFF_DIAGONAL_CONSTANT, {"x": np.array([1.0, -1.0]), "y": np.zeros(3)}, target, dtype)
    np.testing.assert_array_equal(want["f"], [0.5, -0.5, 0.0])
    check(OFF_DIAGONAL_CONSTANT, {"x": np.array([INF]), "y": np.zeros(2)}, target, dtype)


# a guard on the sizes only becomes a test around the loop, which the
# "some term ran" test takes in: factored, and exact
SIZE_GUARD = "input x[m], y[n]\nf[i] = sum[k: 0..m - 1](where(m >= 2, x[k] * y[i], 0))\n"


@pytest.mark.parametrize("target,dtype", TARGETS)
@pytest.mark.parametrize("m", [1, 2])
def test_guard_on_the_sizes(target: str, dtype: str, m: int) -> None:
    check(SIZE_GUARD, {"x": np.full(m, 3.0), "y": np.array([INF, NAN, -1.0])}, target, dtype)


# a range that depends on another summation variable: for k >= p - 1 the inner
# loop is empty; "some term ran" would need an exists over k: not factored
TRIANGLE = "input x[m, p], y[n]\nf[i] = sum[k: 0..m - 1, l: k + 1..p - 1](x[k, l] * y[i])\n"


@pytest.mark.parametrize("target,dtype", TARGETS)
@pytest.mark.parametrize("p", [1, 3])
def test_triangular_double_sum(target: str, dtype: str, p: int) -> None:
    x = np.arange(1.0, 2 * p + 1).reshape(2, p)
    check(TRIANGLE, {"x": x, "y": np.array([INF, NAN, 0.5])}, target, dtype)


# ---------------------------------------------------------------------------
# Non-empty sums with inf, NaN and zero invariants and signed zeros
# ---------------------------------------------------------------------------

FULL = "input x[m], y[n]\nf[i] = sum[k: 0..m - 1](x[k] * y[i])\n"


@pytest.mark.parametrize("target,dtype", TARGETS)
def test_nonempty_sum_times_inf_nan_and_zero_invariants(target: str, dtype: str) -> None:
    # terms of one sign, none zero: factoring is exact for y = +-inf and NaN
    check(FULL, {"x": np.array([1.0, 2.0, 0.5]), "y": np.array([INF, -INF, NAN, 0.0, -0.0, -3.0])}, target, dtype)


@pytest.mark.parametrize("target,dtype", TARGETS)
def test_nonempty_sum_with_infinite_terms_times_zero(target: str, dtype: str) -> None:
    # inf * 0 is NaN term by term and after factoring; inf - inf is NaN both ways
    check(FULL, {"x": np.array([INF, 1.0]), "y": np.array([0.0, -0.0, 2.0])}, target, dtype)
    check(FULL, {"x": np.array([INF, -INF]), "y": np.array([1.0, 0.0])}, target, dtype)


@pytest.mark.parametrize("target,dtype", TARGETS)
def test_a_factored_zero_is_positive(target: str, dtype: str) -> None:
    # x * y over x = [1, -1] is -1 + 1 = +0 in any order, but (1 - 1) * -1 is -0
    want = check(FULL, {"x": np.array([1.0, -1.0]), "y": np.array([-1.0, -0.0, 0.0])}, target, dtype)
    assert not np.signbit(want["f"]).any()


# ---------------------------------------------------------------------------
# Factoring is kept where it is safe
# ---------------------------------------------------------------------------


def test_factoring_is_kept_where_the_sum_is_known_to_run() -> None:
    # the invariant leaves the loop, and the product is guarded by the
    # loop's range test, not recomputed per term
    assert "let f_acc_s = where(n >= i + 2, f_acc / y[i] + 0, 0)" in loops_text(SUFFIX)
    assert "f_acc += x[k]\n" in loops_text(FULL)


# ---------------------------------------------------------------------------
# Hand-written L2: tests the front end does not produce
# ---------------------------------------------------------------------------

# the accumulate in the else branch of a size test (its negation is part of
# the runs test) and one behind a test on the summation variable (refused)
ELSE_BRANCH = """sizes n, m
input x[m], y[n]
output f[n], g[n]

kernel f {
  for i in 0..n - 1 {
    local acc = 0
    local acc2 = 0
    for k in 0..m - 1 {
      if m >= 3 {
        g[i] = x[k]
      } else {
        acc += x[k] * y[i]
      }
    }
    for k in 0..m - 1 {
      if k >= 1 {
        acc2 += x[k] * y[i]
      }
    }
    f[i] = acc + acc2
  }
}
"""


@pytest.mark.parametrize("m", [0, 1, 2, 3])
def test_runs_test_of_an_else_branch_and_a_refused_guard(m: int) -> None:
    program = parse_loop_program(ELSE_BRANCH)
    factored = run_pipeline(program, "hoist{licm=false extract=false}", start=Level.LOOPS)
    plain = run_pipeline(program, "hoist{factor=false licm=false extract=false}", start=Level.LOOPS)
    text = str(factored)
    assert "let acc_s = where(m >= 1 and m < 3, acc * y[i] + 0, 0)" in text  # "the loop and the else branch ran"
    assert "acc2 += x[k] * y[i]" in text  # k >= 1: "some term ran" needs an exists over k
    inputs = {"x": np.arange(1.0, m + 1), "y": np.array([INF, NAN, -0.0, 2.0])}
    got, want = run_loops(factored, inputs), run_loops(plain, inputs)
    assert_same_ieee(got["f"], want["f"], "float64", "f")
