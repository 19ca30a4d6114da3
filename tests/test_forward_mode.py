"""Forward mode: ``autodiff{mode=forward}`` (Jacobian-vector products) and its ``seed=delta`` Jacobians.

Every JVP is checked against central finite differences
``(f(x + eps v) - f(x - eps v)) / 2 eps`` and against reverse mode through the
adjoint identity ``<u, J v> = <J^T u, v>`` (random ``u``, ``v``); the
forward-mode Jacobians (``seed=delta``) against reverse mode's; random
programs come from the generators of ``test_autodiff_properties.py`` and are
also compiled.  Then names, errors, determinism and round trips, and the
matrix functions (det, logdet, inv, adj).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, note as hypothesis_note, settings
from hypothesis.control import currently_in_test_context

import tcc
from compare import assert_results_close, random_inputs
from tcc.ir.diagnostics import TccError
from tcc.reference.fdcheck import default_sizes
from tcc.passes.pass_base import PassContext
from tcc.pipeline import resolve_pipeline
from tcc.sizes import extents_shape
from test_autodiff_properties import SETTINGS, inferred_programs, programs

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.tcc"))
REVERSE = "sum-liberation,index-solve,range-bound,simplify,cse"


# ---------------------------------------------------------------------------
# helpers


def note(text: str) -> None:
    """Shown with a failing hypothesis example (and a no-op in plain tests)."""
    if currently_in_test_context():
        hypothesis_note(text)


def autodiff(of: str, wrt, mode: str = "forward", seed: str = "input") -> str:
    return f"autodiff{{of={of} wrt={','.join(wrt)} mode={mode} seed={seed}}}"


def forward(program, of: str, wrt, seed: str = "input", after: str = "simplify"):
    """``infer-ranges,autodiff{... mode=forward},<after>`` through the public API."""
    spec = ",".join(["infer-ranges", autodiff(of, wrt, seed=seed)] + ([after] if after else []))
    return tcc.transform(program, spec)


def tangent_inputs(source, derived) -> list[str]:
    """The inputs forward mode added (one tangent per wrt input, in wrt order)."""
    return [d.name for d in derived.inputs if source.input(d.name) is None]


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not want.size:
        return 0.0
    return float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-12)


def jvp_checks(text, of: str, wrt, sizes=None, fd: bool = True, compiled: bool = False, seed: int = 0):
    """JVP of ``of`` along random tangents: vs finite differences, vs reverse mode, vs compiled code."""
    src = tcc.transform(text, "infer-ranges")
    sizes = default_sizes(src.sizes()) if sizes is None else sizes
    inputs = random_inputs(src, sizes, seed)
    rng = np.random.default_rng(seed + 1)
    v = {x: rng.uniform(-1, 1, inputs[x].shape) for x in wrt}

    fwd = forward(src, of, wrt, after="simplify,cse")
    note(str(fwd))
    dnames = tangent_inputs(src, fwd)
    assert len(dnames) == len(wrt) and len(fwd.outputs) == 1
    values = tcc.run(fwd, {**inputs, **{d: v[x] for d, x in zip(dnames, wrt)}})
    jv = values[fwd.outputs[0]]
    f0 = tcc.run(src, inputs)[of]
    assert jv.shape == f0.shape

    if fd:
        eps = 1e-6
        plus = tcc.run(src, {**inputs, **{x: inputs[x] + eps * v[x] for x in wrt}})[of]
        minus = tcc.run(src, {**inputs, **{x: inputs[x] - eps * v[x] for x in wrt}})[of]
        assert rel_err(jv, (plus - minus) / (2 * eps)) < 1e-6

    # the adjoint identity <u, J v> = sum_x <J_x^T u, v_x> with reverse mode's gradients
    back = tcc.grad(src, of, wrt)
    (seed_name,) = [d.name for d in back.caller_inputs() if src.input(d.name) is None]
    u = rng.uniform(-1, 1, jv.shape)
    grads = tcc.run(back, {**inputs, seed_name: u})
    lhs = float(np.sum(u * jv))
    rhs = sum(float(np.sum(grads[g] * v[x])) for g, x in zip(back.outputs, wrt))
    scale = float(np.sum(np.abs(u * jv))) + sum(float(np.sum(np.abs(grads[g] * v[x]))) for g, x in zip(back.outputs, wrt))
    assert abs(lhs - rhs) <= 1e-12 * max(scale, 1.0), (lhs, rhs)

    if compiled:
        args = {**inputs, **{d: v[x] for d, x in zip(dnames, wrt)}}
        got = tcc.compile(fwd)(**args)
        assert_results_close(got, values, "float64")
    return fwd


def jacobians_agree(src, of: str, wrt, sizes=None):
    """Forward and reverse ``seed=delta`` Jacobians: the same outputs, shapes and values."""
    fwd = tcc.transform(src, ",".join(["infer-ranges", autodiff(of, wrt, seed="delta"), "simplify,cse"]))
    rev = tcc.transform(src, ",".join(["infer-ranges", autodiff(of, wrt, "reverse", "delta"), REVERSE]))
    assert fwd.outputs == rev.outputs
    for name in fwd.outputs:
        assert fwd.definition(name).extents == rev.definition(name).extents
    # inline-guards substitutes delta-shaped intermediate Jacobians into their readers
    inlined = tcc.transform(fwd, "simplify,inline-guards,simplify")
    base = tcc.transform(src, "infer-ranges")
    inputs = random_inputs(base, default_sizes(base.sizes()) if sizes is None else sizes)
    want = tcc.run(rev, inputs)
    for program in (fwd, inlined):
        got = tcc.run(program, inputs)
        for name in fwd.outputs:
            assert got[name].shape == want[name].shape
            assert rel_err(got[name], want[name]) < 1e-13, name
    return fwd


def first_result_and_inputs(path):
    program = tcc.parse(path)
    return program, program.results()[0], [d.name for d in program.inputs if not d.is_index]


# ---------------------------------------------------------------------------
# the examples


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_jvp(path):
    program, of, wrt = first_result_and_inputs(path)
    jvp_checks(program, of, wrt, compiled=True)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_forward_jacobian_equals_reverse(path):
    program, of, wrt = first_result_and_inputs(path)
    jacobians_agree(program, of, wrt)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
@pytest.mark.parametrize("seed", ["input", "delta"])
def test_example_deterministic_and_round_trips(path, seed):
    program, of, wrt = first_result_and_inputs(path)
    for after in ("", "simplify,cse"):
        first = forward(program, of, wrt, seed, after)
        again = forward(tcc.parse(path), of, wrt, seed, after)
        assert str(first) == str(again)
        reparsed = tcc.parse(str(first))
        assert str(reparsed) == str(first)
        assert reparsed == first  # the same IR: inputs, definitions (hash-consed bodies), outputs


def test_urban_tangent():
    p = tcc.parse(EXAMPLES[[x.stem for x in EXAMPLES].index("urban")])
    out = str(forward(p, "f", ["a", "d"], after=""))
    assert out.startswith("input a[3, 5], b[4, 5], c[3, 3], d[8], da[3, 5], dd[8]\noutput df[3, 4]\nlocal f[3, 4]\n")
    # the sum keeps its range; exp reuses f's value; no delta anywhere: a gather
    assert out.endswith(
        "df[i, j] = -sum[k: 0..4](da[i, k] * 2 * (a[i, k] + b[j, k])**(2 - 1) * c[i, i]"
        " + dd[i + k] * 3 * d[i + k]**(3 - 1)) * f[i, j]\n"
    )


def test_intermediate_tangents_in_program_order():
    p = tcc.parse(EXAMPLES[[x.stem for x in EXAMPLES].index("softmax_matmul")])
    out = forward(p, "y", ["a"], after="")
    names = [d.name for d in out.definitions]
    assert names == ["z", "e", "s", "y", "dz", "de", "ds", "dy"]
    assert out.outputs == ("dy",)
    assert str(out.definition("dz").body) == "sum[k: 0..p - 1](da[i, k] * b[k, j])"
    assert str(out.definition("de").body) == "dz[i, j] * e[i, j]"  # exp's value read back from e


def test_where_power_and_constants():
    src = (
        "input x[4], y[4]\n"
        "f[i] = where(i <= 1, x[i]**y[i], sin(y[i])) + 3 * sign(x[i])\n"
    )
    out = forward(src, "f", ["x", "y"], after="")
    # where(c, ta, tb); ** with a variable exponent differentiates both sides; sign and 3 give nothing
    assert str(out.definition("df").body) == (
        "where(i <= 1, dx[i] * y[i] * x[i]**(y[i] - abs(sign(y[i]))) + dy[i] * x[i]**y[i] * log(x[i] + (1 - abs(sign(x[i])))), "
        "dy[i] * cos(y[i]))"
    )
    jvp_checks(src, "f", ["x", "y"])


def test_unrelated_output_has_zero_tangent():
    src = "input x[3], y[2]\nf[i] = x[i]**2\n"
    out = forward(src, "f", ["y"], after="")
    assert str(out).endswith("output df[3]\nlocal f[3]\nf[i] = x[i]**2\ndf[i] = 0\n")
    jac = forward(src, "f", ["y"], seed="delta", after="")
    assert str(jac).endswith("output dy[3, 2]\nlocal f[3]\nf[i] = x[i]**2\ndy[i, dy_0] = 0\n")


@pytest.mark.parametrize("stem", ["matmul", "softmax_matmul", "logistic_regression"])
def test_forward_pipeline_compiles(stem):
    """``infer-ranges,autodiff{mode=forward},simplify,cse`` gives code that compiles, with no constrained sums."""
    program, of, wrt = first_result_and_inputs(EXAMPLES[[x.stem for x in EXAMPLES].index(stem)])
    for seed in ("input", "delta"):
        out = forward(program, of, wrt, seed, after="simplify,cse")
        assert "|" not in str(out)
        base = tcc.transform(program, "infer-ranges")
        inputs = random_inputs(out, default_sizes(base.sizes()))
        assert_results_close(tcc.compile(out)(**inputs), tcc.run(out, inputs), "float64")


def test_public_api_forward_mode():
    """``tcc.grad(mode="forward")`` runs the forward pipeline: the same values as the pass by hand."""
    program, of, wrt = first_result_and_inputs(EXAMPLES[[x.stem for x in EXAMPLES].index("softmax_matmul")])
    by_hand = forward(program, of, wrt, after="simplify,cse")
    api = tcc.grad(program, of, wrt, mode="forward")
    assert api.outputs == by_hand.outputs == ("dy",)
    assert [d.name for d in api.inputs] == [d.name for d in by_hand.inputs] == ["a", "b", "da", "db"]
    inputs = random_inputs(by_hand, {"n": 3, "p": 4, "m": 5})
    assert rel_err(tcc.run(api, inputs)["dy"], tcc.run(by_hand, inputs)["dy"]) < 1e-14
    jac = tcc.grad(program, of, wrt, mode="forward", seed="delta")
    assert jac.outputs == ("da", "db")


# ---------------------------------------------------------------------------
# random programs (the generators of the reverse-mode property tests)


@SETTINGS
@given(programs())
def test_random_programs_adjoint_identity(prog):
    text, wrt = prog
    note(text)
    jvp_checks(text, "f", wrt, fd=False, compiled=True)


@SETTINGS
@given(inferred_programs())
def test_inferred_programs_adjoint_identity(prog):
    text, wrt, sizes = prog
    note(text)
    try:
        src = tcc.transform(text, "infer-ranges")
    except TccError:
        assume(False)
        raise
    sizes = {k: v for k, v in sizes.items() if k in set(src.sizes())}
    for d in src.inputs + src.definitions:
        assume(all(s >= 1 for s in extents_shape(d.extents, sizes)))
    jvp_checks(text, "f", wrt, sizes=sizes, fd=False, compiled=True)


@settings(SETTINGS, max_examples=15)
@given(programs())
def test_random_programs_forward_jacobian_equals_reverse(prog):
    text, wrt = prog
    note(text)
    jacobians_agree(text, "f", wrt)


# ---------------------------------------------------------------------------
# seed=delta: Jacobians and Hessians


def test_delta_jacobian_eliminates_the_deltas_it_can():
    """Inside one definition simplify substitutes every sum[k](where(k == β, ...)); sums over another
    definition's Jacobian stay (that tangent is a tensor of its own)."""
    qf = EXAMPLES[[x.stem for x in EXAMPLES].index("quadratic_form")]
    out = str(forward(tcc.parse(qf), "f", ["x", "A"], seed="delta"))
    assert "output dx[n], dA[n, n]\n" in out
    assert "dx[dx_0] = sum[j: 0..n - 1](A[dx_0, j] * x[j]) + sum[i: 0..n - 1](x[i] * A[i, dx_0])\n" in out
    assert "dA[dA_0, dA_1] = x[dA_0] * x[dA_1]\n" in out
    urban = EXAMPLES[[x.stem for x in EXAMPLES].index("urban")]
    out = str(forward(tcc.parse(urban), "f", ["d"], seed="delta"))
    assert "dd[i, j, dd_0] = where(0 <= dd_0 - i and dd_0 - i <= 4, -(3 * d[dd_0]**2) * f[i, j], 0)\n" in out


def test_delta_jacobian_through_where_branches():
    """A where inside a sum is split into two guards, so the delta is found in either branch."""
    src = "input x[5], y[5]\noutput f[5]\nf[i] = sum[k: 0..4](where(k <= i, x[k] * y[k] + x[k]**2, sin(x[k])))\n"
    out = jacobians_agree(src, "f", ["x", "y"])
    assert str(out.definition("dx").body) == "where(dx_0 <= i, y[dx_0] + 2 * x[dx_0], 0) + where(dx_0 > i, cos(x[dx_0]), 0)"
    assert str(out.definition("dy").body) == "where(dy_0 <= i, x[dy_0], 0)"


def test_strided_delta_needs_the_index_solver():
    """simplify substitutes deltas with unit coefficients only; a strided one (3*k + 1 == β) is left
    to sum-liberation, index-solve and range-bound, which take forward mode's output as it is."""
    src = "input y[7]\noutput f[2]\nf[i] = sum[k: 0..1](y[3*k + i])\n"
    jac = forward(src, "f", ["y"], seed="delta")
    assert str(jac.definition("dy").body) == "sum[k: 0..1](where(i + 3*k == dy_0, 1, 0))"
    solved = tcc.transform(jac, REVERSE)
    assert str(solved.definition("dy").body) == "where((dy_0 - i) % 3 == 0 and (dy_0 - i) // 3 <= 1, 1, 0)"
    rev = tcc.transform(src, "infer-ranges," + autodiff("f", ["y"], "reverse", "delta") + "," + REVERSE)
    inputs = {"y": np.arange(7.0)}
    np.testing.assert_array_equal(tcc.run(solved, inputs)["dy"], tcc.run(rev, inputs)["dy"])
    np.testing.assert_array_equal(tcc.run(jac, inputs)["dy"], tcc.run(rev, inputs)["dy"])


def test_hessian_of_the_quadratic_form_forward_twice():
    qf = EXAMPLES[[x.stem for x in EXAMPLES].index("quadratic_form")]
    jac = autodiff("f", ["x"], seed="delta")
    hess = autodiff("dx", ["x"], seed="delta")
    out = tcc.transform(tcc.parse(qf), f"infer-ranges,{jac},simplify,{hess},simplify")
    assert str(out) == "input x[n], A[n, n]\noutput dx2[n, n]\ndx2[dx_0, dx2_0] = A[dx_0, dx2_0] + A[dx2_0, dx_0]\n"
    a = np.random.default_rng(0).uniform(size=(5, 5))
    np.testing.assert_allclose(tcc.run(out, {"x": np.ones(5), "A": a})["dx2"], a + a.T, rtol=0, atol=0)


@pytest.mark.parametrize("seed", ["input", "delta"])
def test_hessian_of_the_quadratic_form_forward_over_reverse(seed):
    qf = EXAMPLES[[x.stem for x in EXAMPLES].index("quadratic_form")]
    grad = autodiff("f", ["x"], "reverse", seed)
    hess = autodiff("dx", ["x"], seed="delta")
    out = tcc.transform(tcc.parse(qf), f"infer-ranges,{grad},{REVERSE},{hess},simplify")
    factor = " * df" if seed == "input" else ""
    assert str(out).endswith(f"dx2[dx_0, dx2_0] = A[dx2_0, dx_0]{factor} + A[dx_0, dx2_0]{factor}\n")


def test_hessian_of_logistic_regression_forward_over_forward():
    lr = EXAMPLES[[x.stem for x in EXAMPLES].index("logistic_regression")]
    jac = autodiff("f", ["w"], seed="delta")
    hess = autodiff("dw", ["w"], seed="delta")
    src = tcc.transform(tcc.parse(lr), "infer-ranges")
    out = tcc.transform(src, f"{jac},simplify,{hess},simplify,cse")
    inputs = random_inputs(src, {"m": 6, "n": 4})
    h = tcc.run(out, inputs)["dw2"]
    # H = X^T diag(y^2 s (1 - s)) X with s = sigmoid(-z)
    X, w, y = inputs["X"], inputs["w"], inputs["y"]
    s = 1 / (1 + np.exp(y * (X @ w)))
    np.testing.assert_allclose(h, X.T @ np.diag(y**2 * s * (1 - s)) @ X, rtol=1e-12)


def test_hessian_vector_product_forward_over_reverse():
    """Forward mode on reverse mode's gradient along v: H·v, without the Hessian."""
    lr = EXAMPLES[[x.stem for x in EXAMPLES].index("logistic_regression")]
    src = tcc.transform(tcc.parse(lr), "infer-ranges")
    grad = tcc.grad(src, "f", ["w"])
    hvp = tcc.transform(grad, autodiff("dw", ["w"]) + ",simplify,cse")
    assert [d.name for d in hvp.inputs] == ["X", "w", "y", "df", "dw2"] and hvp.outputs == ("ddw",)
    inputs = random_inputs(src, {"m": 6, "n": 4})
    v = np.random.default_rng(5).uniform(-1, 1, 4)
    got = tcc.run(hvp, {**inputs, "df": 1.0, "dw2": v})["ddw"]
    X, w, y = inputs["X"], inputs["w"], inputs["y"]
    s = 1 / (1 + np.exp(y * (X @ w)))
    np.testing.assert_allclose(got, X.T @ (y**2 * s * (1 - s) * (X @ v)), rtol=1e-12)
    assert_results_close(tcc.compile(hvp)(**inputs, df=np.float64(1.0), dw2=v), tcc.run(hvp, {**inputs, "df": 1.0, "dw2": v}), "float64")


def test_forward_over_constrained_sums():
    """A program that still holds constrained sums (after sum-liberation) has tangents too."""
    urban = tcc.parse(EXAMPLES[[x.stem for x in EXAMPLES].index("urban")])
    partial = tcc.transform(urban, "infer-ranges,autodiff{of=f wrt=d},sum-liberation," + autodiff("dd", ["d"]))
    assert "ddd[dd_0] = sum[i, j, k | " in str(partial)
    solved = tcc.transform(urban, f"infer-ranges,autodiff{{of=f wrt=d}},{REVERSE},{autodiff('dd', ['d'])},simplify")
    inputs = random_inputs(tcc.transform(urban, "infer-ranges"), {})
    rng = np.random.default_rng(7)
    inputs.update(df=rng.uniform(size=(3, 4)), dd2=rng.uniform(size=8))
    assert rel_err(tcc.run(partial, inputs)["ddd"], tcc.run(solved, inputs)["ddd"]) < 1e-13


def test_scalar_input():
    src = "input s, x[3]\nf[i] = exp(s * x[i]) + s**2\n"
    assert str(forward(src, "f", ["s"]).definition("df").body) == "ds * x[i] * exp(s * x[i]) + ds * 2 * s"
    assert str(forward(src, "f", ["s"], seed="delta").definition("ds").body) == "x[i] * exp(s * x[i]) + 2 * s"
    jvp_checks(src, "f", ["s", "x"])
    jacobians_agree(src, "f", ["s", "x"])


# ---------------------------------------------------------------------------
# names


def test_tangent_names_avoid_taken_names():
    src = "input x[3], dx[3]\nf[i] = x[i] * dx[i]\n"
    out = forward(src, "f", ["x"], after="")
    assert str(out).startswith("input x[3], dx[3], dx2[3]\noutput df[3]\n")
    both = forward(src, "f", ["x", "dx"], after="")
    assert [d.name for d in both.inputs] == ["x", "dx", "dx2", "ddx"]
    assert str(both.definition("df").body) == "dx2[i] * dx[i] + ddx[i] * x[i]"
    # seed=delta names its Jacobians as reverse mode does
    for wrt in (["x"], ["x", "dx"]):
        fwd = forward(src, "f", wrt, seed="delta", after="")
        rev = tcc.transform(src, "infer-ranges," + autodiff("f", wrt, "reverse", "delta"))
        assert fwd.outputs == rev.outputs


def test_intermediate_and_index_names():
    # an intermediate called like a tangent, an index called like a tangent
    src = "input x[3]\ndg[i] = exp(x[i])\ng[df] = dg[df] * x[df]\n"
    out = forward(src, "g", ["x"], after="")
    assert [d.name for d in out.definitions] == ["dg", "g", "ddg", "dg2"]
    assert out.outputs == ("dg2",)
    assert str(out.definition("dg2").body) == "ddg[df] * x[df] + dx[df] * dg[df]"
    jvp_checks(src, "g", ["x"])


# ---------------------------------------------------------------------------
# errors: the same checks and words as reverse mode


ERRORS = [
    ("autodiff{wrt=x mode=forward}", "autodiff needs the definition to differentiate: autodiff{of=NAME wrt=X,Y}"),
    ("autodiff{of=f mode=forward}", "autodiff needs at least one input to differentiate with respect to (wrt=...)"),
    ("autodiff{of=x wrt=x mode=forward}", "'x' is an input; --of must name a definition"),
    ("autodiff{of=nope wrt=x mode=forward}", "no definition named 'nope'"),
    ("autodiff{of=f wrt=g mode=forward}", "'g' is a definition; --wrt takes inputs of the program"),
    ("autodiff{of=f wrt=q mode=forward}", "no input named 'q'"),
    ("autodiff{of=f wrt=x,x mode=forward}", "--wrt names an input twice"),
    ("autodiff{of=f wrt=x mode=sideways}", "autodiff: mode must be 'reverse' or 'forward', not 'sideways'"),
    ("autodiff{of=f wrt=x mode=forward seed=ones}", "autodiff: seed must be 'input' or 'delta', not 'ones'"),
]
ERR_SRC = "input x[3]\ng[i] = x[i] + 1\nf[i] = g[i] * x[i]\n"


@pytest.mark.parametrize("spec,message", ERRORS, ids=[m for _, m in ERRORS])
def test_errors(spec, message):
    with pytest.raises(TccError, match=re.escape(message)):
        tcc.transform(ERR_SRC, "infer-ranges," + spec)
    # reverse mode says the same
    with pytest.raises(TccError, match=re.escape(message)):
        tcc.transform(ERR_SRC, "infer-ranges," + spec.replace("mode=forward", "mode=reverse"))


def test_error_without_extents():
    with pytest.raises(TccError, match=re.escape("autodiff needs the extents of 'g': run infer-ranges first")):
        tcc.transform(ERR_SRC, "autodiff{of=f wrt=x mode=forward}")


# ---------------------------------------------------------------------------
# matrix functions (run outside run_pipeline: the recorded-derivative test
# also assembles PTX for every recorded program, and the GPU target refuses
# matrix functions)


MATRIX_SRC = """\
input A[n, n]
B[i, j] = inv(A)[i, j]
s = det(A)
l = logdet(A)
C[i, j] = adj(A)[i, j]
f = sum[i, j](B[i, j] * C[j, i]) + s * l
"""


def unrecorded(program, spec: str):
    ctx = PassContext()
    for p in resolve_pipeline(spec):
        program = p.run(program, ctx)
    return program


def matrix_jvp(src: str, of: str, n: int = 4):
    """JVP along dA vs finite differences, vs reverse mode, vs compiled code; the forward Jacobian
    contracted with dA; forward and reverse Jacobians."""
    base = unrecorded(tcc.parse(src), "infer-ranges")
    rng = np.random.default_rng(3)
    other = random_inputs(base, {"n": n})
    a = rng.uniform(-1, 1, (n, n)) + 3 * np.eye(n)
    v = rng.uniform(-1, 1, (n, n))
    fwd = unrecorded(base, f"{autodiff(of, ['A'])},simplify,cse")
    values = tcc.run(fwd, {**other, "A": a, "dA": v})
    jv = values[fwd.outputs[0]]
    eps = 1e-6
    plus, minus = (tcc.run(base, {**other, "A": a + s * eps * v})[of] for s in (1, -1))
    assert rel_err(jv, (plus - minus) / (2 * eps)) < 1e-7, of
    assert_results_close(tcc.compile(fwd)(**{**other, "A": a, "dA": v}), values, "float64")
    # reverse mode: <u, J v> = <J^T u, v>
    back = unrecorded(base, f"{autodiff(of, ['A'], 'reverse')},{REVERSE}")
    u = rng.uniform(-1, 1, jv.shape)
    (seed_name,) = tangent_inputs(base, back)
    ga = tcc.run(back, {**other, "A": a, seed_name: u})[back.outputs[0]]
    assert abs(float(np.sum(u * jv)) - float(np.sum(ga * v))) < 1e-12 * max(1.0, float(np.sum(np.abs(u * jv))))
    # Jacobians
    jac = unrecorded(base, f"{autodiff(of, ['A'], seed='delta')},simplify,cse")
    j = tcc.run(jac, {**other, "A": a})[jac.outputs[0]]
    assert rel_err(np.tensordot(j, v, axes=([j.ndim - 2, j.ndim - 1], [0, 1])), jv) < 1e-12, of
    rjac = unrecorded(base, f"{autodiff(of, ['A'], 'reverse', 'delta')},{REVERSE}")
    assert rjac.outputs == jac.outputs
    assert rel_err(j, tcc.run(rjac, {**other, "A": a})[rjac.outputs[0]]) < 1e-12, of
    assert str(tcc.parse(str(fwd))) == str(fwd) and str(tcc.parse(str(jac))) == str(jac)
    return fwd, jac


@pytest.mark.parametrize("of", ["B", "s", "l", "C", "f"])
def test_matrix_function_jvp(of):
    matrix_jvp(MATRIX_SRC, of)


def test_matrix_function_rules_print():
    fwd, jac = matrix_jvp(MATRIX_SRC, "B")
    assert str(fwd.definition("dB").body) == "-sum[dB_p: 0..n - 1, dB_q: 0..n - 1](B[i, dB_p] * dA[dB_p, dB_q] * B[dB_q, j])"
    assert str(jac.definition("dA").body) == "-(B[i, dA_0] * B[dA_1, j])"
    # det reads the program's own inv(A) (B); logdet likewise
    fwd, jac = matrix_jvp(MATRIX_SRC, "s")
    assert str(jac.definition("dA").body) == "s * B[dA_1, dA_0]"
    fwd, jac = matrix_jvp(MATRIX_SRC, "l")
    assert str(jac.definition("dA").body) == "B[dA_1, dA_0]"


def test_matrix_function_helpers_are_added_once_before_first_use():
    src = "input A[n, n], A_inv[n]\nC[i, j] = adj(A)[i, j]\nt = logdet(A)\ng = t * sum[i, j](C[i, j])\n"
    fwd, _ = matrix_jvp(src, "g")
    # adj needs inv(A) and det(A): one new definition each (A_inv is taken: A_inv2), right after C
    assert [d.name for d in fwd.definitions] == ["C", "A_inv2", "A_det", "t", "dC", "dt", "dg"]
    assert str(fwd).count("= inv(A)") == 1 and str(fwd).count("= det(A)") == 1
    assert "A_inv2[i, j] = inv(A)[i, j]\nA_det = det(A)\n" in str(fwd)
    again, _ = matrix_jvp(src, "g")
    assert str(again) == str(fwd)
