"""Matrix functions det, logdet, inv, adj: interpreter, derivatives, external kernels, errors.

A matrix function is a definition of its own (``B[i, j] = inv(A)[i, j]``,
``s = det(A)``).  The interpreter computes it with numpy.linalg, autodiff has
a reverse rule for each, lower-loops makes it an external kernel
(``extern inv(A) -> B``) that the runtime runs with LAPACK through NumPy
between the compiled kernels, and target cuda refuses it.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tcc
from tcc.cli.driver import main
from tcc.runtime.externs.matrix_functions import matrix_function

sys.path.insert(0, str(Path(__file__).parent))
from compare import assert_matches_interpreter, assert_results_close  # noqa: E402
from loop_eval import run_loops  # noqa: E402

# the argument is itself computed (symmetric part plus a diagonal shift: well conditioned for
# inputs in [0.25, 0.75), the range of tcc.check and compare.random_inputs), and the results
# are read by later element-wise definitions
PROGRAM = """input X[n, n], W[n, n]
A[i, j] = X[i, j] + 2 * X[j, i] + where(i == j, 4, 0)
B[i, j] = inv(A)[i, j]
C[i, j] = adj(A)[i, j]
s = det(A)
l = logdet(A)
G[i, j] = B[i, j] * W[i, j] + C[j, i] / s
f = sum[i, j](G[i, j]) + s + l
"""

SHIFTED = "A[i, j] = X[i, j] + 2 * X[j, i] + where(i == j, 4, 0)\n"

# one scalar function per matrix function, for first and second derivatives
SCALAR = {
    "inv": SHIFTED + "B[i, j] = inv(A)[i, j]\nf = sum[i, j](B[i, j] * W[i, j])\n",
    "det": SHIFTED + "s = det(A)\nf = s * sum[i](W[i, i])\n",
    "logdet": SHIFTED + "s = logdet(A)\nf = s * s + sum[i, j](A[i, j] * W[i, j])\n",
    "adj": SHIFTED + "C[i, j] = adj(A)[i, j]\nf = sum[i, j](C[i, j] * W[j, i])\n",
}


def scalar_program(fn: str) -> str:
    return "input X[n, n], W[n, n]\n" + SCALAR[fn]


def _numpy_reference(X: np.ndarray, W: np.ndarray) -> dict[str, np.ndarray]:
    A = X + 2 * X.T + 4 * np.eye(len(X))
    B = np.linalg.inv(A)
    s = np.linalg.det(A)
    C = s * B
    G = B * W + C.T / s
    return {"A": A, "B": B, "C": C, "s": s, "l": np.log(abs(s)), "G": G, "f": G.sum() + s + np.log(abs(s))}


def _close(got, want, rtol=1e-10):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-300)
    err = float(np.max(np.abs(got - want))) / scale if want.size else 0.0
    assert err <= rtol, f"relative error {err:.2e}"


# ---------------------------------------------------------------------------
# the interpreter
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 17])
def test_interpreter_matches_numpy(n):
    rng = np.random.default_rng(n)
    X, W = rng.uniform(0.25, 0.75, (n, n)), rng.standard_normal((n, n))
    got = tcc.run(PROGRAM, {"X": X, "W": W})
    for name, want in _numpy_reference(X, W).items():
        _close(got[name], want)
        assert got[name].dtype == np.float64 and got[name].shape == np.shape(want)


def test_interpreter_float32():
    rng = np.random.default_rng(3)
    X, W = (rng.uniform(0.25, 0.75, (5, 5)).astype(np.float32) for _ in range(2))
    got = tcc.run(PROGRAM, {"X": X, "W": W}, np.float32)
    want = _numpy_reference(X.astype(np.float64), W.astype(np.float64))
    for name in want:
        assert got[name].dtype == np.float32
        _close(got[name], want[name], 1e-5)


def test_matrix_function_values():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 6))
    _close(matrix_function("inv", a), np.linalg.inv(a))
    _close(matrix_function("det", a), np.linalg.det(a))
    _close(matrix_function("logdet", a), np.log(abs(np.linalg.det(a))))
    _close(matrix_function("adj", a), np.linalg.det(a) * np.linalg.inv(a), 1e-12)
    for fn in ("inv", "adj"):
        assert matrix_function(fn, np.zeros((0, 0))).shape == (0, 0)
    assert matrix_function("det", np.zeros((0, 0))) == 1.0
    assert matrix_function("adj", np.array([[-3.0]])).tolist() == [[1.0]]


def _cofactors(m: np.ndarray) -> np.ndarray:
    n = len(m)
    out = np.zeros_like(m)
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(m, i, 0), j, 1)
            out[j, i] = (-1) ** (i + j) * np.linalg.det(minor)
    return out


def test_singular_matrices():
    """adj is defined for every matrix (through the SVD); det is 0 and logdet -inf; inv is an error."""
    rank2 = np.array([[1.0, 2, 3], [4, 5, 6], [7, 8, 9]])
    _close(matrix_function("adj", rank2), _cofactors(rank2), 1e-12)
    assert np.abs(matrix_function("adj", np.outer([1.0, 2, 3], [4.0, 5, 6]))).max() < 1e-12  # rank 1: 0
    src = "input M[n, n]\nC[i, j] = adj(M)[i, j]\ns = det(M)\nl = logdet(M)\n"
    got = tcc.run(src, {"M": rank2})
    _close(got["C"], _cofactors(rank2), 1e-12)
    assert abs(float(got["s"])) < 1e-12
    compiled = tcc.compile(src)(M=rank2)
    _close(compiled["C"], got["C"])
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    assert tcc.run(src, {"M": singular})["l"] == -np.inf
    inv = "input M[n, n]\nB[i, j] = inv(M)[i, j]\n"
    with pytest.raises(tcc.TccError, match=r"inv of a singular matrix in definition 'B'"):
        tcc.run(inv, {"M": singular})
    with pytest.raises(tcc.TccError, match=r"inv of a singular matrix in definition 'B'"):
        tcc.compile(inv)(M=singular)


# ---------------------------------------------------------------------------
# compiled code: external kernels between compiled kernels
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n", [1, 2, 5, 17])
def test_compiled_matches_interpreter(n, dtype):
    assert_matches_interpreter(tcc.parse(PROGRAM), {"n": n}, dtype)


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_compiled_pipelines_and_threads(target):
    """Every L2 pass of the CPU and GPU pipelines leaves external kernels alone."""
    assert_matches_interpreter(tcc.parse(PROGRAM), {"n": 9}, target=target, threads=3)
    assert_matches_interpreter(tcc.parse(PROGRAM), {"n": 6}, target=target, passes="infer-ranges,lower-loops")


def test_external_kernels_in_the_loop_program():
    f = tcc.compile(PROGRAM)
    externs = [(k.name, str(k.body[0])) for k in f.loops.kernels if k.extern is not None]
    assert [name for name, _ in externs] == ["B", "C", "s", "l"]
    text = str(f.loops)
    for line in ("extern inv(A) -> B", "extern adj(A) -> C", "extern det(A) -> s", "extern logdet(A) -> l"):
        assert f"kernel {line.split()[-1]} {{\n  {line}\n}}" in text
    # nothing is fused across an external kernel: A's nest and G's nest stay apart
    names = [k.name for k in f.loops.kernels]
    assert names.index("A") < names.index("B") < names.index("l") < min(i for i, n in enumerate(names) if "G" in n)
    # the LLVM module has no function for them, and says so
    llvm = str(f.llvm)
    assert "; kernel B: extern inv(A) -> B runs on the host" in llvm
    assert "define void @tcc_1_B" not in llvm and "@tcc_0_A" in llvm


def test_given_output_arrays_are_written_in_place():
    f = tcc.compile(PROGRAM)
    rng = np.random.default_rng(2)
    X, W = rng.uniform(0.25, 0.75, (4, 4)), rng.standard_normal((4, 4))
    B, s = np.zeros((4, 4)), np.zeros(())
    out = f(X=X, W=W, B=B, s=s)
    assert out["B"] is B and out["s"] is s
    want = _numpy_reference(X, W)
    _close(B, want["B"])
    _close(s, want["s"])


def test_loop_program_round_trip_and_l2_evaluator():
    from tcc.ir.loops_parser import parse_loop_program
    from tcc.ir.loops_verifier import verify_loops

    grad = tcc.grad(PROGRAM, "f", "X,W")
    loops = tcc.compile(grad).loops
    text = str(loops)
    again = parse_loop_program(text)
    assert str(again) == text and again == loops
    verify_loops(again)
    rng = np.random.default_rng(4)
    inputs = {"X": rng.uniform(0.25, 0.75, (4, 4)), "W": rng.standard_normal((4, 4)), "df": np.array(0.7)}
    got = run_loops(again, inputs)
    want = tcc.run(grad, inputs)
    assert_results_close({k: got[k] for k in want}, want, "float64")


def test_loops_verifier_rejects_bad_externs():
    from tcc.ir.loops_parser import parse_loop_program
    from tcc.ir.loops_verifier import verify_loops

    head = "sizes n, m\ninput A[n, n], R[n, m]\noutput B[n, n], s, t[n]\n\n"
    cases = {
        "kernel k {\n  extern inv(R) -> B\n}\n": "in kernel 'k': inv needs a square matrix: 'R' is n x m",
        "kernel k {\n  extern det(A) -> B\n}\n": "in kernel 'k': 'B' is n x n, but det(A) is 0-d",
        "kernel k {\n  extern inv(A) -> t\n}\n": "in kernel 'k': 't' is n, but inv(A) is n x n",
        "kernel k {\n  extern inv(t) -> B\n}\n": "in kernel 'k': inv needs a matrix: 't' has 1 dimension",
        "kernel k {\n  extern inv(B) -> A\n}\n": "in kernel 'k': cannot write to input 'A': extern inv(B) -> A",
        "kernel k {\n  extern inv(Z) -> B\n}\n": "in kernel 'k': undeclared buffer 'Z' in 'extern inv(Z) -> B'",
        "kernel k {\n  s = 0\n  extern det(A) -> s\n}\n": "in kernel 'k': 'extern det(A) -> s' must be the only statement of its kernel",
    }
    for body, message in cases.items():
        with pytest.raises(tcc.TccError) as exc:
            verify_loops(parse_loop_program(head + body, "bad.loops"))
        assert exc.value.message == message
    with pytest.raises(tcc.TccError, match="expected '->'"):
        parse_loop_program(head + "kernel k {\n  extern inv(A) B\n}\n")


# ---------------------------------------------------------------------------
# derivatives
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fn", ["inv", "det", "logdet", "adj"])
def test_first_derivatives(fn):
    for r in tcc.check(scalar_program(fn), "f", "X,W", sizes={"n": 4}):
        assert r.ok, str(r)
        assert r.max_rel_error < 1e-7, str(r)


def test_first_derivatives_of_everything_together():
    for r in tcc.check(PROGRAM, "f", "X,W", sizes={"n": 3}):
        assert r.max_rel_error < 1e-7, str(r)


@pytest.mark.parametrize("fn", ["inv", "det", "logdet", "adj"])
def test_second_derivatives_grad_of_grad(fn):
    grad = tcc.grad(scalar_program(fn), "f", "X")
    for r in tcc.check(grad, "dX", "X,W", sizes={"n": 3}):
        assert r.max_rel_error < 1e-6, str(r)


def test_derivative_rules_as_printed():
    """The rules read h itself and inv(A): an existing inv(A) definition, else a new A_inv."""
    grad = tcc.grad(scalar_program("inv"), "f", "X")
    assert "dA[dA_0, dA_1] = -sum[i: 0..n - 1](B[i, dA_0] * sum[j: 0..n - 1](df * W[i, j] * B[dA_1, j]))" in str(grad)  # dB inlined (factor-linear)
    det = tcc.grad(scalar_program("det"), "f", "X")
    lines = str(det).splitlines()
    assert "s = det(A)" in lines and "A_inv[i, j] = inv(A)[i, j]" in lines
    assert lines.index("A_inv[i, j] = inv(A)[i, j]") == lines.index("s = det(A)") + 1
    assert "dA[dA_0, dA_1] = ds * (s * A_inv[dA_1, dA_0])" in lines
    both = tcc.grad(PROGRAM, "f", "X")
    assert "A_inv" not in str(both)  # B = inv(A) serves every rule


def test_matrix_function_of_a_matrix_function():
    src = "input X[n, n]\nA[i, j] = X[i, j] + where(i == j, 3, 0)\nB[i, j] = inv(A)[i, j]\nf = logdet(B) + det(B)\n"
    for r in tcc.check(src, "f", "X", sizes={"n": 3}):
        assert r.max_rel_error < 1e-7, str(r)


def _jacobian_fd(program, of: str, wrt: str, inputs, eps=1e-6):
    """d program[of] / d inputs[wrt] by central differences, of's indices first."""
    base = np.asarray(tcc.run(program, inputs)[of])
    x = inputs[wrt]
    out = np.zeros(base.shape + x.shape)
    for idx in np.ndindex(x.shape):
        plus, minus = dict(inputs), dict(inputs)
        plus[wrt], minus[wrt] = x.copy(), x.copy()
        plus[wrt][idx] += eps
        minus[wrt][idx] -= eps
        diff = np.asarray(tcc.run(program, plus)[of]) - np.asarray(tcc.run(program, minus)[of])
        out[(Ellipsis,) + idx] = diff / (2 * eps)
    return out


DELTA = "infer-ranges,autodiff{{of={of} wrt=X seed=delta}},sum-liberation,index-solve,range-bound,simplify"


@pytest.mark.parametrize("fn", ["inv", "det", "logdet", "adj"])
def test_hessian_with_delta_seeds(fn):
    src = scalar_program(fn)
    jac = tcc.transform(src, DELTA.format(of="f"))
    hess = tcc.transform(jac, DELTA.format(of="dX"))
    rng = np.random.default_rng(7)
    inputs = {"X": rng.uniform(0.25, 0.75, (3, 3)), "W": rng.standard_normal((3, 3))}
    got = tcc.run(hess, inputs)["dX2"]
    assert got.shape == (3, 3, 3, 3)
    _close(got, _jacobian_fd(jac, "dX", "X", inputs), 1e-7)
    # the Hessian program compiles, and prints and parses back
    assert_matches_interpreter(hess, {"n": 4})
    assert str(tcc.parse(str(hess))) == str(hess)


@pytest.mark.parametrize("of", ["B", "C", "s", "l"])
def test_jacobians_of_the_matrix_functions_themselves(of):
    """Seeding a matrix function's own definition with deltas collapses the rule's sums."""
    jac = tcc.transform(PROGRAM, DELTA.format(of=of))
    rng = np.random.default_rng(8)
    inputs = {"X": rng.uniform(0.25, 0.75, (3, 3)), "W": rng.standard_normal((3, 3))}
    got = tcc.run(jac, inputs)["dX"]
    _close(got, _jacobian_fd(tcc.transform(PROGRAM), of, "X", inputs), 1e-7)


def test_every_grad_pipeline_step_computes_the_same_gradient():
    """sum-liberation, index-solve, range-bound, simplify and cse keep the rule's terms correct."""
    rng = np.random.default_rng(9)
    inputs = {"X": rng.uniform(0.25, 0.75, (4, 4)), "W": rng.standard_normal((4, 4)), "df": np.array(1.3)}
    steps = ["infer-ranges", "autodiff{of=f wrt=X,W}", "sum-liberation", "index-solve", "range-bound", "simplify", "cse"]
    want = None
    for k in range(2, len(steps) + 1):
        got = tcc.run(tcc.transform(PROGRAM, ",".join(steps[:k])), inputs)
        if want is None:
            want = got
        for name in ("dX", "dW"):
            _close(got[name], want[name], 1e-12)


def test_print_parse_round_trip_of_derivatives():
    grad = tcc.grad(scalar_program("adj"), "f", "X,W")
    second = tcc.grad(grad, "dX", "X")
    for p in (tcc.transform(PROGRAM), grad, second, tcc.transform(PROGRAM, DELTA.format(of="f"))):
        text = str(p)
        again = tcc.parse(text)
        assert str(again) == text
        assert again.definitions == p.definitions


def test_simplify_and_cse_keep_matrix_definitions():
    src = (
        "input X[n, n]\nA[i, j] = X[i, j] + 0\nB[i, j] = inv(A)[i, j]\nD[i, j] = inv(A)[i, j]\n"
        "output f\nf = sum[i, j](B[i, j] + D[i, j])\n"
    )
    p = tcc.transform(src, "infer-ranges,simplify,cse")
    text = str(p)
    assert "B[i, j] = inv(A)[i, j]" in text and "D[i, j] = inv(A)[i, j]" in text
    assert "A[i, j] = X[i, j]\n" in text  # A is read only as inv's argument, and kept
    dead = tcc.transform("input X[n, n]\nA[i, j] = X[i, j]\nB[i, j] = inv(A)[i, j]\noutput s\ns = sum[i](X[i, i])\n",
                         "infer-ranges,simplify")
    assert [d.name for d in dead.definitions] == ["s"]


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "src, message",
    [
        ("input X[n, m]\nB[i, j] = inv(X)[i, j]\n", "<string>:2:15: error: inv needs a square matrix: 'X' is n x m"),
        ("input X[3, 4]\nB[i, j] = adj(X)[i, j]\n", "<string>:2:15: error: adj needs a square matrix: 'X' is 3 x 4"),
        ("input X[n, n]\nA[i, j] = X[i, j + 1]\nB[i, j] = adj(A)[i, j]\n",
         "<string>:3:15: error: adj needs a square matrix: 'A' is n x n - 1"),
        ("input x[n]\nB[i, j] = inv(x)[i, j]\n", "<string>:2:15: error: inv needs a matrix (2 dimensions): 'x' has 1 dimension"),
        ("input x[n]\nt = x[0]\nB[i, j] = inv(t)[i, j]\n",
         "<string>:3:15: error: inv needs a matrix (2 dimensions): 't' has 0 dimensions"),
        ("input X[3, 3]\nB[i, j] = inv(t)[i, j]\nt[i, j] = X[i, j]\n", "<string>:2:15: error: 't' is used before its definition"),
        ("input X[3, 3]\nB[i, j] = inv(Y)[i, j]\n", "<string>:2:15: error: undeclared tensor 'Y'"),
        ("input X[3, 3]\noutput B[2, 2]\nB[i, j] = inv(X)[i, j]\n", "<string>:3:1: error: 'B' is declared 2 x 2, but inv(X) is 3 x 3"),
    ],
)
def test_semantic_errors(src, message):
    with pytest.raises(tcc.TccError) as exc:
        tcc.transform(src)
    assert str(exc.value).splitlines()[0] == message


def test_verifier_on_ir_built_by_passes():
    """Scalar matrix functions and index counts of definitions that passes build (not parsed)."""
    from tcc.ir.expr import MatrixFn
    from tcc.ir.index import Affine
    from tcc.ir.program import Definition, Program, TensorDecl
    from tcc.ir.verifier import verify

    n, m = Affine.var("n"), Affine.var("m")
    square, wide, vec = TensorDecl("X", (n, n)), TensorDecl("R", (n, m)), TensorDecl("x", (n,))

    def message(inputs, d):
        with pytest.raises(tcc.TccError) as exc:
            verify(Program(inputs, (d,)))
        return exc.value.message

    assert message((wide,), Definition("s", (), MatrixFn("det", "R"))) == "det needs a square matrix: 'R' is n x m"
    assert message((vec,), Definition("s", (), MatrixFn("logdet", "x"))) == (
        "logdet needs a matrix (2 dimensions): 'x' has 1 dimension"
    )
    assert message((square,), Definition("s", ("i",), MatrixFn("det", "X"))) == (
        "det gives a scalar: 's' must have 0 indices, not 1 (write 's = det(X)')"
    )
    assert message((square,), Definition("B", ("i",), MatrixFn("inv", "X"))) == (
        "inv gives a matrix: 'B' must have 2 indices, not 1 (write 'B[i, j] = inv(X)[i, j]')"
    )
    from tcc.ir.expr import Binary, Const

    inside = Definition("f", (), Binary("+", MatrixFn("det", "X"), Const(1)))
    assert message((square,), inside) == "det(X) is not element-wise: it can only be the whole body of a definition"
    verify(Program((square,), (Definition("s", (), MatrixFn("det", "X"), ()),)))
    p = tcc.transform(Program((square,), (Definition("s", (), MatrixFn("logdet", "X")),)))
    assert p.definitions[0].extents == ()


CUDA_REFUSAL = (
    "inv(A) (definition 'B') is computed by LAPACK on the host; the cuda target does not support "
    "matrix functions yet: compile for the cpu"
)


def test_cuda_target_refuses_matrix_functions():
    # before PyCUDA is needed, with the definition's location
    with pytest.raises(tcc.TccError) as exc:
        tcc.compile(PROGRAM, target="cuda")
    assert exc.value.message == CUDA_REFUSAL
    assert str(exc.value).startswith("<string>:3:1: error: ")
    # the lowering refuses the L2 form too
    from tcc.build import compile_pipeline

    with pytest.raises(tcc.TccError) as exc:
        tcc.transform(PROGRAM, compile_pipeline(None, "float64", "cuda"))
    assert exc.value.message == CUDA_REFUSAL


# ---------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------


@pytest.fixture
def program_file(tmp_path):
    path = tmp_path / "mf.tcc"
    path.write_text(PROGRAM)
    return str(path)


def test_cli_emit_loops_llvm_and_run(program_file, tmp_path, capsys):
    assert main(["compile", program_file, "--emit", "loops", "--passes", "infer-ranges,lower-loops"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "kernel B {\n  extern inv(A) -> B\n}\n\nkernel C {\n  extern adj(A) -> C\n}" in out
    assert "kernel s {\n  extern det(A) -> s\n}\n\nkernel l {\n  extern logdet(A) -> l\n}" in out
    assert main(["compile", program_file, "--emit", "llvm"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("; kernel B: extern inv(A) -> B runs on the host (LAPACK through NumPy)")
    rng = np.random.default_rng(5)
    X, W = rng.uniform(0.25, 0.75, (5, 5)), rng.standard_normal((5, 5))
    np.savez(tmp_path / "in.npz", X=X, W=W)
    assert main(["run", program_file, "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as data:
        for name, want in _numpy_reference(X, W).items():
            _close(data[name], want)


def test_cli_grad_prints_a_program_with_matrix_functions(program_file, capsys):
    assert main(["grad", program_file, "--of", "f", "--wrt", "X"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "B[i, j] = inv(A)[i, j]" in out
    assert str(tcc.parse(out)) == out


def test_cli_cuda_refusal(program_file, capsys):
    assert main(["compile", program_file, "--emit", "ptx"]) == 1
    err = capsys.readouterr().err
    assert CUDA_REFUSAL in err and "Traceback" not in err
