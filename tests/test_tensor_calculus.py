"""The tensor-calculus front end: Einstein products, Lippmann's input form, Jacobians and Hessians.

* every input of the appendix of Lippmann parses, and its full derivative
  tensor (``tcc grad`` of the file) matches central finite differences of
  the expression, interpreted and compiled;
* the Hessians of the three problems of Laue et al. match their closed forms,
  and the quadratic form's prints as ``A[i, j] + A[j, i]`` with no sum;
* Einstein products, broadcasting, ``delta(n)``, implicit summation and
  their errors, through ``tcc.parse`` / ``tcc.run`` and the command line.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError
from tcc.cli.driver import main
from tcc.ir.parser import parse_source

ROOT = Path(__file__).resolve().parent.parent
APPENDIX = [
    line.strip()
    for line in (Path(__file__).parent / "data" / "lippmann_appendix.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]
VALID = APPENDIX[:-1]  # the last one differentiates w.r.t. an undeclared name


def _inputs(program, sizes: dict[str, int], square_boost: bool, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for decl in program.inputs:
        shape = tuple(int(e.evaluate(sizes)) for e in decl.extents)
        a = rng.uniform(0.25, 0.75, size=shape)
        if square_boost and len(shape) == 2 and shape[0] == shape[1]:
            a = a + shape[0] * np.eye(shape[0])  # well conditioned for inv, det, adj
        out[decl.name] = a
    return out


def _fd_jacobian(program, of: str, wrt: str, inputs: dict[str, np.ndarray], eps: float = 1e-6) -> np.ndarray:
    base = np.asarray(tcc.run(program, inputs)[of])
    x = inputs[wrt]
    jac = np.zeros(base.shape + x.shape)
    for idx in np.ndindex(*x.shape) if x.shape else [()]:
        plus, minus = dict(inputs), dict(inputs)
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        plus[wrt], minus[wrt] = xp, xm
        diff = (np.asarray(tcc.run(program, plus)[of]) - np.asarray(tcc.run(program, minus)[of])) / (2 * eps)
        jac[(Ellipsis,) + tuple(idx)] = diff
    return jac


def _close(actual: np.ndarray, expected: np.ndarray, tol: float) -> None:
    assert actual.shape == expected.shape
    scale = max(float(np.linalg.norm(expected)), 1.0)
    err = float(np.linalg.norm(actual - expected)) / scale
    assert err <= tol, f"relative error {err:.2e}"


@pytest.mark.parametrize("text", VALID, ids=[f"appendix{k:02d}" for k in range(len(VALID))])
def test_appendix_example_derivative_matches_finite_differences(text):
    problem = parse_source(text)
    program = problem.program
    jp = tcc.grad(text, seed="delta")  # what `tcc grad FILE` prints for this form
    (out,) = jp.outputs
    sizes = {s: 3 for s in program.sizes()}
    inputs = _inputs(program, sizes, square_boost=bool(re.search(r"\b(det|inv|adj)\(", text)))
    expected = _fd_jacobian(program, problem.of, problem.wrt, inputs)
    interpreted = np.asarray(tcc.run(jp, inputs)[out])
    _close(interpreted, expected, 1e-6)
    compiled = tcc.compile(jp)(**inputs)[out]
    _close(compiled, interpreted, 1e-12)


def test_appendix_example_with_an_undeclared_argument_is_an_error():
    with pytest.raises(TccError) as info:
        parse_source(APPENDIX[-1])
    assert info.value.message == "'a' is not declared (declared: X)"
    assert info.value.loc.col == APPENDIX[-1].index("wrt a") + 5


def test_appendix_sizes_are_unified_by_the_expression():
    p = parse_source("declare A 2 x 1 expression (A + 1) *(ij,j->i) x derivative wrt A").program
    assert str(p).splitlines()[0] == "input A[n1, n2], x[n2]"
    jp = tcc.grad(p, of="f", wrt="A", seed="delta")
    assert str(jp).splitlines()[-1] == "dA[df_0, dA_0, dA_1] = where(dA_0 == df_0, x[dA_1], 0)"


def test_tcc_grad_of_a_lippmann_file_prints_the_full_derivative(tmp_path, capsys):
    path = tmp_path / "inv.tcc"
    path.write_text("declare A 2 expression inv(A) derivative wrt A\n")
    assert main(["grad", str(path)]) == 0
    out = capsys.readouterr().out
    assert "output dA[n1, n1, n1, n1]" in out
    assert out.rstrip().endswith("dA[df_0, df_1, dA_0, dA_1] = -(f[df_0, dA_0] * f[dA_1, df_1])")


# --------------------------------------------------------------------------
# Hessians of Laue et al.
# --------------------------------------------------------------------------
def test_quadratic_form_hessian_prints_without_a_sum(capsys):
    assert main(["hessian", str(ROOT / "examples" / "quadratic_form.tcc"), "--of", "f", "--wrt", "x"]) == 0
    out = capsys.readouterr().out
    assert "sum" not in out
    assert re.search(r"= A\[(\w+), (\w+)\] \+ A\[\2, \1\]$", out.strip()), out


def test_seed004_hessians_match_closed_forms():
    rng = np.random.default_rng(1)
    n, m, r = 7, 14, 3
    A = rng.normal(size=(n, n))
    x = rng.normal(size=n)
    H = tcc.hessian(ROOT / "examples" / "quadratic_form.tcc", of="f", wrt="x")
    np.testing.assert_allclose(H(x=x, A=A), A + A.T, rtol=1e-13, atol=1e-13)

    X = rng.normal(size=(m, n)) / np.sqrt(n)
    w = rng.normal(size=n)
    y = rng.choice([-1.0, 1.0], size=m)
    H = tcc.hessian(ROOT / "examples" / "logistic_regression.tcc", of="f", wrt="w")
    s = 1 / (1 + np.exp(-y * (X @ w)))
    np.testing.assert_allclose(H(X=X, w=w, y=y), (X.T * (s * (1 - s))) @ X, rtol=1e-12, atol=1e-13)
    g = tcc.jacobian(ROOT / "examples" / "logistic_regression.tcc", of="f", wrt="w")
    np.testing.assert_allclose(g(X=X, w=w, y=y), -X.T @ (y * (1 - s)), rtol=1e-12, atol=1e-13)

    T, M = rng.normal(size=(m, n)), (rng.random((m, n)) < 0.5) * 1.0
    U, V = rng.normal(size=(m, r)), rng.normal(size=(n, r))
    H = tcc.hessian(ROOT / "examples" / "matrix_factorization.tcc", of="f", wrt="U")
    assert "sum" in str(H.program) and str(H.program).count("\n") == 3  # one definition, no 4-D temporary
    expected = np.zeros((m, r, m, r))
    blocks = 2 * np.einsum("ij,jk,jl->ikl", M**2, V, V)
    for i in range(m):
        expected[i, :, i, :] = blocks[i]
    np.testing.assert_allclose(H(T=T, M=M, U=U, V=V), expected, rtol=1e-12, atol=1e-12)


def test_jacobian_with_several_inputs_returns_a_dict():
    J = tcc.jacobian("input x[n], A[n, n]\nv = A *(ij,j->i) x\n", of="v", wrt="x,A")
    rng = np.random.default_rng(2)
    A, x = rng.normal(size=(4, 4)), rng.normal(size=4)
    out = J(x=x, A=A)
    assert set(out) == {"x", "A"}
    np.testing.assert_allclose(out["x"], A)
    np.testing.assert_allclose(out["A"], np.einsum("ik,j->ikj", np.eye(4), x))


def test_hessian_of_several_inputs_is_refused():
    with pytest.raises(TccError, match=r"a Hessian is taken with respect to one input, not 2 \(x, A\)"):
        tcc.hessian(ROOT / "examples" / "quadratic_form.tcc", of="f", wrt="x,A")


# --------------------------------------------------------------------------
# Einstein products in the tcc language
# --------------------------------------------------------------------------
EINSTEIN = """\
input A[n, m], x[m], y[n], X[n, n]
v = A *(ij,j->i) x
s = x *(i,i->) x
T = A *(ij,->ji) 1
o = y *(i,j->ij) x
d = X *(ii,->i) 1
g = exp(-(y *(i,i->) y)) * 2 + v
I = delta(1) *(ij,ij->ij) X
e = det(X + 1) + logdet(inv(X)) * 2
"""


def test_einstein_products_compute_what_numpy_einsum_computes():
    rng = np.random.default_rng(3)
    A, x, y = rng.normal(size=(4, 3)), rng.normal(size=3), rng.normal(size=4)
    X = rng.normal(size=(4, 4)) + 4 * np.eye(4)
    p = tcc.parse(EINSTEIN)
    for values in (tcc.run(p, dict(A=A, x=x, y=y, X=X)), tcc.compile(p)(A=A, x=x, y=y, X=X)):
        np.testing.assert_allclose(values["v"], A @ x)
        np.testing.assert_allclose(values["s"], x @ x)
        np.testing.assert_allclose(values["T"], A.T)
        np.testing.assert_allclose(values["o"], np.outer(y, x))
        np.testing.assert_allclose(values["d"], np.diag(X))
        np.testing.assert_allclose(values["g"], np.exp(-(y @ y)) * 2 + A @ x)
        np.testing.assert_allclose(values["I"], np.diag(np.diag(X)))
        np.testing.assert_allclose(
            values["e"], np.linalg.det(X + 1) + 2 * np.log(abs(np.linalg.det(np.linalg.inv(X))))
        )


def test_einstein_program_prints_as_element_wise_definitions_and_parses_back():
    p = tcc.parse(EINSTEIN)
    text = str(p)
    assert "v[i] = sum[j: 0..m - 1](A[i, j] * x[j])" in text
    assert "T[i, j] = A[j, i]" in text
    assert "e_det = det(e_det_arg)" in text and "e_inv[i, j] = inv(X)[i, j]" in text
    assert tcc.parse(text) == p
    assert str(tcc.parse(EINSTEIN)) == text  # deterministic


@pytest.mark.parametrize(
    "src, message",
    [
        ("input A[n, m], x[n]\nv = A *(ij,j->i) x\n",
         "index 'j' of the product: axis 2 of 'A' has length m but axis 1 of 'x' has length n"),
        ("input A[n, m], x[m]\nv = A *(i,j->i) x\n",
         "the left operand of the product has order 2 but the index string 'i' has 1 letter"),
        ("input A[n, m], x[m]\nv = A + x\n",
         "the operands of '+' have orders 2 and 1: element-wise operations need equal orders or a scalar "
         "(an Einstein product combines other shapes)"),
        ("input A[n, m]\nv = A *(ij,->ii) 1\n", "the result index string 'ii' repeats a letter"),
        ("input A[n, m]\nv = inv(A)\n", "inv needs a square matrix: axis 1 of 'A' has length n but axis 2 of 'A' has length m"),
        ("input x[n]\nv = det(x)\n", "det needs a matrix (order 2), not a tensor of order 1"),
        ("input x[n]\nv = x *(i,->ij) 1\n", "cannot tell the length of axis 2 of 'v': no tensor of known shape shares it"),
        ("input x[n]\nv = x *(iJ,->i) 1\n", "index string 'iJ' must be lowercase letters a-z"),
        ("input x[n]\nv = x *(i,->i) q\n", "unknown tensor 'q'"),
        ("input x[n]\nv = x + x[0]\n",
         "'x[...]' in a whole-tensor expression: name the whole tensor ('x') and use an Einstein product to "
         "pick its axes, or write an element-wise definition"),
    ],
)
def test_einstein_errors(src, message):
    with pytest.raises(TccError) as info:
        tcc.parse(src)
    assert info.value.message == message
    assert info.value.loc is not None


def test_implicit_summation_sums_over_the_whole_right_hand_side():
    p = tcc.parse("input A[n, m], x[m], b[n]\ny[i] = A[i, j] * x[j] + b[i]\n")
    assert str(p).splitlines()[-1] == "y[i] = sum[j](A[i, j] * x[j] + b[i])"
    rng = np.random.default_rng(4)
    A, x, b = rng.normal(size=(3, 5)), rng.normal(size=5), rng.normal(size=3)
    np.testing.assert_allclose(tcc.compile(p)(A=A, x=x, b=b)["y"], A @ x + 5 * b)  # b is summed too (TC's rule)


def test_matrix_function_must_be_a_definition_of_its_own():
    with pytest.raises(TccError) as info:
        tcc.parse("input A[n, n]\ns[i] = exp(inv(A)[i, i])\n")
    assert info.value.message == (
        "inv is not element-wise: give it a definition of its own ('B[i, j] = inv(A)[i, j]') and read that"
    )


def test_cli_jacobian_and_hessian_of_a_lippmann_file(tmp_path, capsys):
    path = tmp_path / "q.tcc"
    path.write_text("declare x 1 A 2 expression x *(i,i->) (A *(ij,j->i) x) derivative wrt x\n")
    assert main(["jacobian", str(path)]) == 0
    jac = capsys.readouterr().out
    assert jac.startswith("input x[n1], A[n1, n1]\noutput dx[n1]\n")
    assert main(["hessian", str(path)]) == 0
    hes = capsys.readouterr().out
    assert "sum" not in hes and "output dx2[n1, n1]" in hes
    assert main(["hessian", str(path), "--wrt", "x,A"]) == 1
    assert "a Hessian is taken with respect to one input, not 2 (x, A)" in capsys.readouterr().err


# --------------------------------------------------------------------------
# regressions found by review
# --------------------------------------------------------------------------
def test_output_declaration_keeps_the_unified_extents_and_checks_declared_ones():
    p = tcc.parse("input y[n]\nI2 = delta(1) *(ij,i->ij) y\noutput I2")
    assert str(p).splitlines()[1] == "output I2[n, n]"
    np.testing.assert_allclose(tcc.run(p, {"y": np.arange(3.0)})["I2"], np.diag(np.arange(3.0)))
    with pytest.raises(TccError) as info:
        tcc.parse("input y[n], z[m]\nI2 = delta(1) *(ij,i->ij) y\noutput I2[n, m]")
    assert info.value.message == "output 'I2' is declared with extents [n, m] but its expression gives [n, n]"


def test_whole_tensor_expression_reads_a_declared_element_wise_definition():
    p = tcc.parse("input X[n, n], y[n]\nlocal M[n, n]\nM[i, j] = X[j, i]\nv = M *(ij,j->i) y\n")
    X, y = np.arange(9.0).reshape(3, 3), np.arange(3.0)
    np.testing.assert_allclose(tcc.run(p, {"X": X, "y": y})["v"], X.T @ y)


def test_outlined_names_avoid_later_definitions():
    p = tcc.parse("input X[n, n]\ne = 2 * det(X + 1)\ne_det = 3\noutput e, e_det\n")
    assert [d.name for d in p.definitions] == ["e_det2_arg", "e_det2", "e", "e_det"]


def test_hessian_of_det_has_no_delta_sum_left():
    text = str(tcc.hessian("input X[n, n]\nf = det(X)\n", of="f", wrt="X").program)
    assert "sum" not in text and "where" not in text


def test_caret_is_a_power_only_in_whole_tensor_expressions():
    with pytest.raises(TccError) as info:
        tcc.parse("input x[3]\nv[i] = x[i] ^ 2\n")
    assert info.value.message == "'^' is a power only in whole-tensor expressions: write '**'"


def test_hessian_command_sets_the_autodiff_options_of_a_passes_pipeline(tmp_path, capsys):
    path = tmp_path / "q.tcc"
    path.write_text("declare x 1 A 2 expression x *(i,i->) (A *(ij,j->i) x) derivative wrt x\n")
    assert main(["hessian", str(path), "--passes", "infer-ranges,autodiff,sum-liberation,index-solve,range-bound,simplify"]) == 0
    out = capsys.readouterr().out
    assert "output dx2[n1, n1]" in out and "sum" not in out and "df" not in out
