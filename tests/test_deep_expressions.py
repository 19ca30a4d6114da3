"""Long expressions: a flat sum of n terms is a left-deep tree n levels deep.

Every traversal (printer, verifier, passes, interpreter, loop lowering, LLVM
emission) must handle such trees without Python recursion, which overflows
at about a thousand levels.  Nesting that the *source*
writes (parentheses, function calls) is bounded by the parser instead and
reported as a TccError.

Sizes are well past the old limits
(about 330 terms for printing and deriving, 1,000 for interpreting) and
still run in seconds; the issue's 100,000 terms take tens of seconds (the
parser's constant factor) and are measured in docs/ir.md instead.  Compiled
sizes stay smaller: LLVM's own passes are superlinear in the size of one
basic block, which is not what these tests are about.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError
from tcc.ir.expr import Binary, Const, Unary, trampoline
from tcc.ir.parser import parse_program

pytestmark = pytest.mark.slow  # about 35 s: programs of 20,000 terms

X = np.array([1.0, -2.0, 0.5, 3.25])


def flat_sum(n: int, term: str = "x[i] * {k}") -> str:
    """``y[i] = x[i] * 0 + x[i] * 1 + ...``: the issue's program, written as the printer writes it."""
    body = " + ".join(term.format(k=k) for k in range(n))
    return f"input x[4]\noutput y[4]\ny[i] = {body}\n"


def left_fold(n: int, x: np.ndarray) -> np.ndarray:
    """The program's value in its own association order, ((x*0 + x*1) + x*2) + ..., in float64."""
    acc = x * 0.0
    for k in range(1, n):
        acc = acc + x * float(k)
    return acc


# ---------------------------------------------------------------------------
# parse, print, round trip, interpret
# ---------------------------------------------------------------------------


def test_flat_sum_of_20k_terms_round_trips_and_interprets() -> None:
    # 100,000 terms work too (docs/ir.md has the times) but take tens of seconds, mostly parsing
    n = 20_000
    text = flat_sum(n)
    program = tcc.parse(text)
    printed = str(program)
    assert printed == text  # the parser keeps the chain as written; the printer writes it back
    again = parse_program(printed)
    assert again.definitions[0].body is program.definitions[0].body  # hash-consed: the identical IR
    out = tcc.run(program, {"x": X})
    np.testing.assert_array_equal(out["y"], left_fold(n, X))


@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_long_left_chains_of_each_operator_print_and_interpret(op: str) -> None:
    n = 5_000
    factor = "x[i]" if op in "*/" else "x[i] * 2"
    text = f"input x[4]\noutput y[4]\ny[i] = {f' {op} '.join([factor] * n)}\n"
    program = tcc.parse(text)
    assert str(program) == text
    expected = X * 2 if op in "+-" else X.copy()
    with np.errstate(all="ignore"):  # powers of 2 and 0.5 over- and underflow, as in the program
        for _ in range(n - 1):
            expected = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[op](
                expected, X * 2 if op in "+-" else X
            )
    np.testing.assert_array_equal(tcc.run(program, {"x": X})["y"], expected)


def test_long_sum_inside_a_sum_infers_ranges_and_interprets() -> None:
    # infer-ranges rebuilds the sum's body; the body is a 5,000-term chain
    n = 5_000
    body = " + ".join(f"x[i + k] * w[k] * {k2}" for k2 in range(n))
    program = tcc.parse(f"input x[6], w[3]\noutput y[4]\ny[i] = sum[k]({body})\n")
    x, w = np.arange(6.0), np.array([1.0, -1.0, 0.5])
    ref = np.array([sum(x[i + k] * w[k] for k in range(3)) for i in range(4)]) * (n * (n - 1) / 2)
    np.testing.assert_allclose(tcc.run(program, {"x": x, "w": w})["y"], ref, rtol=1e-12)


def test_long_whole_tensor_expression_parses_and_interprets() -> None:
    # the whole-tensor front end infers axes and lowers to L1 by walking its own tree
    n = 5_000
    program = tcc.parse("input x[4], A[4, 4]\noutput v[4]\nv = " + " + ".join(["A *(ij,j->i) x - x"] * n) + "\n")
    a = np.arange(16.0).reshape(4, 4)
    expected = a @ X - X
    for _ in range(n - 1):
        expected = expected + a @ X - X
    np.testing.assert_allclose(tcc.run(program, {"x": X, "A": a})["v"], expected, rtol=1e-12)


def test_deep_expression_built_through_the_ir_prints_and_evaluates() -> None:
    # passes build IR directly: 100,000 nested negations never pass through the parser
    e = tcc.parse("input x[4]\ny[i] = x[i]\n").definitions[0].body
    for _ in range(100_000):
        e = Unary("neg", e)
    text = str(Binary("+", e, Const(1)))
    assert text == "-(" * 99_999 + "-x[i]" + ")" * 99_999 + " + 1"
    from tcc.reference.interpreter import evaluate_expr

    np.testing.assert_array_equal(evaluate_expr(e, {"x": X}, {"i": 4}), X)  # an even number of negations
    program = tcc.parse("input x[4]\noutput y[4]\ny[i] = x[i]\n")
    program = program.with_definitions([program.definitions[0].with_body(Unary("neg", e))])
    np.testing.assert_array_equal(tcc.compile(program)(x=X)["y"], -X)


# ---------------------------------------------------------------------------
# nesting written in the source: a clean error, never a RecursionError
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "(" * 100_000 + "x[i]" + ")" * 100_000,
        "exp(" * 100_000 + "x[i]" + ")" * 100_000,
        "-" * 100_000 + "x[i]",
        " ** ".join(["x[i]"] * 100_000),  # right-associative: nests to the right
        "x[" + "(" * 100_000 + "i" + ")" * 100_000 + "]",
    ],
    ids=["parentheses", "functions", "negations", "powers", "index"],
)
def test_deep_source_nesting_is_a_clean_error(body: str) -> None:
    with pytest.raises(TccError, match="nested too deeply"):
        tcc.parse(f"input x[4]\ny[i] = {body}\n")


def test_deep_source_nesting_is_a_clean_cli_error(tmp_path) -> None:
    path = tmp_path / "deep.tcc"
    path.write_text("input x[4]\ny[i] = " + "sin(" * 100_000 + "x[i]" + ")" * 100_000 + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "tcc", "compile", str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1
    assert "nested too deeply" in done.stderr
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------------------
# compile (CPU and the GPU simulator) and derive
# ---------------------------------------------------------------------------


def test_flat_sum_compiles_to_the_interpreters_values() -> None:
    n = 1_500  # 3,000 levels of + and -
    program = tcc.parse(flat_sum(n, "x[i] * {k} - x[i] / {k}.5"))
    ref = tcc.run(program, {"x": X})["y"]
    out = tcc.compile(program)(x=X)["y"]
    np.testing.assert_allclose(out, ref, rtol=1e-13)
    sim = tcc.compile(program, target="cuda-sim")(x=X)["y"]
    np.testing.assert_allclose(sim, ref, rtol=1e-13)


def test_long_product_in_a_contraction_compiles() -> None:
    # hoist factors loop-invariant multipliers out of the reduction by flattening the product
    n = 2_000
    program = tcc.parse(
        "input A[3, 4], B[4, 5]\noutput C[3, 5]\nC[i, j] = sum[k](A[i, k] * B[k, j] * " + " * ".join(["1.0001"] * n) + ")\n"
    )
    a, b = np.arange(12.0).reshape(3, 4), np.arange(20.0).reshape(4, 5) - 7
    ref = tcc.run(program, {"A": a, "B": b})["C"]
    np.testing.assert_allclose(tcc.compile(program)(A=a, B=b)["C"], ref, rtol=1e-12)
    np.testing.assert_allclose(ref, a @ b * 1.0001**n, rtol=1e-12)


def test_long_product_in_a_matrix_product_goes_to_blas() -> None:
    # the blas pass splits the contraction's product into the factors of each side
    from tcc.build import DEFAULT_LOOP_PIPELINE

    n = 2_000
    program = tcc.parse(
        "input A[4, 6], B[6, 5]\noutput C[4, 5]\nC[i, j] = sum[k](A[i, k] * B[k, j] * " + " * ".join(["1.0001"] * n) + ")\n"
    )
    assert "matmul(" in str(tcc.transform(program, "infer-ranges,blas{min-work=0}"))
    a, b = np.arange(24.0).reshape(4, 6), np.arange(30.0).reshape(6, 5) - 7
    out = tcc.compile(program, passes=DEFAULT_LOOP_PIPELINE.replace("blas", "blas{min-work=0}"))(A=a, B=b)["C"]
    np.testing.assert_allclose(out, a @ b * 1.0001**n, rtol=1e-12)


def test_gradient_of_a_flat_sum_derives_interprets_and_compiles() -> None:
    n = 3_000
    program = tcc.parse(flat_sum(n, "x[i] ** 2 * {k}"))
    grad = tcc.grad(program, of="y", wrt=["x"])
    again = parse_program(str(grad))
    assert str(again) == str(grad)
    seed = np.array([1.0, 2.0, -1.0, 0.5])
    expected = seed * 2 * X * (n * (n - 1) / 2)
    got = tcc.run(grad, {"x": X, "dy": seed})["dx"]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    np.testing.assert_allclose(tcc.compile(grad)(x=X, dy=seed)["dx"], got, rtol=1e-12)


def test_cse_shares_into_and_out_of_a_long_sum() -> None:
    # the derivative of exp(long sum) reads the forward value (an instance of y) and
    # cse gives the repeated factor a temporary: both rewrite the long chain
    n = 2_000
    program = tcc.parse("input x[4]\noutput y[4]\ny[i] = exp((" + " + ".join(f"x[i] * {k}" for k in range(n)) + ") / 1e6)\n")
    grad = tcc.grad(program, of="y", wrt=["x"])
    assert len(grad.definitions) > 2  # y itself, dx and at least one temporary
    seed = np.array([1.0, 2.0, -1.0, 0.5])
    s = n * (n - 1) / 2 / 1e6
    got = tcc.run(grad, {"x": X, "dy": seed})["dx"]
    np.testing.assert_allclose(got, seed * np.exp(s * X) * s, rtol=1e-10)


def test_forward_mode_jacobian_of_a_long_sum_in_a_sum_matches_reverse_mode() -> None:
    # forward mode with delta seeds splits a sum's body into its additive terms
    n = 2_000
    body = " + ".join(f"x[i, k] * {m}" for m in range(n))
    program = tcc.parse(f"input x[3, 4]\noutput y[3]\ny[i] = sum[k]({body})\n")
    forward = tcc.grad(program, of="y", wrt=["x"], mode="forward", seed="delta")
    reverse = tcc.grad(program, of="y", wrt=["x"], mode="reverse", seed="delta")
    x = np.arange(12.0).reshape(3, 4)
    jf, jr = tcc.run(forward, {"x": x})["dx"], tcc.run(reverse, {"x": x})["dx"]
    expected = np.einsum("ia,kb->ikab", np.eye(3), np.ones((1, 4)))[:, 0] * (n * (n - 1) / 2)
    np.testing.assert_allclose(jf, expected, rtol=1e-12)
    np.testing.assert_allclose(jr, expected, rtol=1e-12)


def test_cli_derives_and_runs_a_20k_term_sum(tmp_path) -> None:
    n = 20_000
    src = tmp_path / "long.tcc"
    src.write_text(flat_sum(n, "x[i] * {k}"))
    grad = subprocess.run(
        [sys.executable, "-m", "tcc", "grad", str(src), "--of", "y", "--wrt", "x"],
        capture_output=True, text=True, timeout=600,
    )
    assert grad.returncode == 0, grad.stderr[-2000:]
    derivative = parse_program(grad.stdout)
    seed = np.array([1.0, 2.0, -1.0, 0.5])
    dx = tcc.run(derivative, {"x": X, "dy": seed})["dx"]
    np.testing.assert_allclose(dx, seed * (n * (n - 1) / 2), rtol=1e-12)

    np.savez(tmp_path / "in.npz", x=X)
    run = subprocess.run(
        [sys.executable, "-m", "tcc", "run", str(src), "--inputs", str(tmp_path / "in.npz"),
         "--output", str(tmp_path / "out.npz"), "--reference"],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], left_fold(n, X))


# ---------------------------------------------------------------------------
# the trampoline itself
# ---------------------------------------------------------------------------


def test_trampoline_runs_deep_steps_and_passes_exceptions_up_through_finally() -> None:
    unwound: list[int] = []

    def depth(k: int):  # noqa: ANN202 - a generator step
        if k == 0:
            raise ValueError("bottom")
        try:
            return 1 + (yield depth(k - 1))
        finally:
            unwound.append(k)

    def count(k: int):  # noqa: ANN202
        return k if k == 0 else 1 + (yield count(k - 1))

    assert trampoline(count(200_000)) == 200_000
    with pytest.raises(ValueError, match="bottom"):
        trampoline(depth(50_000))
    assert unwound == list(range(1, 50_001))
