"""End-to-end derivatives: the examples of the Urban paper (sec. 1, 5, 6).

Every derivative is checked twice: structurally (the printed program has the
form the paper states -- a sum appears or disappears, a Kronecker delta
``where(.. == .., ..)`` appears, indices are substituted) and numerically
(central finite differences through :func:`tcc.check`).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tcc
from tcc.cli.driver import main
from tcc.instruments import BaseInstrument
from tcc.reference.interpreter import evaluate
from tcc.pipeline import grad_pipeline, run_pipeline

URBAN = """\
input  a[3, 5], b[4, 5], c[3, 3], d[8]
output f[3, 4]
f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
"""

TOL = 1e-6


# ---------------------------------------------------------------------------
# helpers


def grad_text(src: str, of: str, wrt) -> str:
    return str(tcc.grad(src, of=of, wrt=wrt))


def line_of(text: str, name: str) -> str:
    """The defining line of ``name`` (``name[...] = ...`` or ``name = ...``)."""
    for line in text.splitlines():
        if re.match(rf"{re.escape(name)}(\[[^\]]*\])? = ", line):
            return line
    raise AssertionError(f"no definition of {name} in:\n{text}")


def rhs_of(text: str, name: str) -> str:
    return line_of(text, name).split(" = ", 1)[1]


def decl(text: str, kind: str) -> str:
    """The ``input`` / ``output`` / ``local`` declaration line (empty if absent)."""
    for line in text.splitlines():
        if line.startswith(kind + " "):
            return line
    return ""


def assert_check(src, of, wrt, sizes=None, seed=0, tol=TOL):
    results = tcc.check(src, of, wrt, sizes=sizes, seed=seed, tol=tol)
    assert [r.wrt for r in results] == list(wrt)
    for r in results:
        assert r.ok and r.max_rel_error < tol, str(r)
    return results


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def urban_file(tmp_path):
    path = tmp_path / "urban.tcc"
    path.write_text(URBAN)
    return str(path)


# ---------------------------------------------------------------------------
# Urban sec. 6


class TestUrbanSection6:
    @pytest.fixture
    def grad(self, capsys, urban_file):
        code, out, err = cli(capsys, "grad", urban_file, "--of", "f", "--wrt", "a,b,c,d")
        assert code == 0, err
        assert err == ""
        return out

    def test_declarations(self, grad):
        assert decl(grad, "input") == "input a[3, 5], b[4, 5], c[3, 3], d[8], df[3, 4]"
        assert decl(grad, "output") == "output da[3, 5], db[4, 5], dc[3, 3], dd[8]"

    def test_check_cli(self, capsys, urban_file):
        code, out, err = cli(capsys, "check", urban_file, "--of", "f", "--wrt", "a,b,c,d")
        assert code == 0, out + err
        m = re.search(r"worst relative error (\S+) \(tol 1e-06\) ok", out)
        assert m, out
        assert float(m.group(1)) < 1e-6
        for g in ("da", "db", "dc", "dd"):
            assert re.search(rf"^{g}: max relative error \S+ \(\d+ elements checked\) ok$", out, re.M), out

    @pytest.mark.parametrize("x", ["a", "b", "c", "d"])
    def test_check_each(self, x):
        (r,) = assert_check(URBAN, "f", [x])
        assert r.gradient == "d" + x

    def test_da_db_sum_over_other_index(self, grad):
        da, db = rhs_of(grad, "da"), rhs_of(grad, "db")
        # da sums over j (4 values), db over i (3 values), as in the paper
        assert da.startswith("sum[da_z0: 0..3](")
        assert db.startswith("sum[db_z0: 0..2](")
        assert "df[da_0, da_z0]" in da
        assert "df[db_z0, db_0]" in db
        assert line_of(grad, "da").startswith("da[da_0, da_1] = ")
        assert line_of(grad, "db").startswith("db[db_0, db_1] = ")

    def test_dc_diagonal_delta(self, grad):
        dc = line_of(grad, "dc")
        assert dc.startswith("dc[dc_0, dc_1] = where(dc_0 == dc_1, ")
        assert dc.endswith(", 0)")
        # the sums over k and j both survive inside the delta
        assert re.search(r"sum\[dc_z\d: 0..4, dc_z\d: 0..3\]", dc), dc

    def test_dd_bounds(self, grad):
        dd = line_of(grad, "dd")
        m = re.match(r"dd\[dd_0\] = sum\[(dd_z\d): max\(([^()]*)\)\.\.min\(([^()]*)\)", dd)
        assert m, dd
        assert sorted(s.strip() for s in m.group(2).split(",")) == sorted(["dd_0 - 2", "0"])
        assert sorted(s.strip() for s in m.group(3).split(",")) == sorted(["dd_0", "4"])
        z = m.group(1)
        # the substituted index i = dd_0 - z
        assert f"df[dd_0 - {z}, " in dd
        assert "d[dd_0]**2" in dd

    def test_no_where_outside_dc(self, grad):
        for g in ("da", "db", "dd"):
            assert "where" not in line_of(grad, g)

    def test_power_simplified(self, grad):
        assert "**(2 - 1)" not in grad
        assert "**(3 - 1)" not in grad
        assert "(2 - 1)" not in grad and "(3 - 1)" not in grad

    def test_round_trip_exact(self, grad):
        text = str(tcc.parse(grad, filename="<grad>"))
        assert text.rstrip("\n") == grad.rstrip("\n")
        # and the parsed program evaluates like the original
        again = str(tcc.parse(text, filename="<again>"))
        assert again == text

    def test_output_file(self, capsys, urban_file, tmp_path, grad):
        out_path = tmp_path / "g.tcc"
        code, out, err = cli(capsys, "grad", urban_file, "--of", "f", "--wrt", "a,b,c,d", "-o", str(out_path))
        assert code == 0 and out == "" and err == ""
        assert out_path.read_text() == grad


# ---------------------------------------------------------------------------
# the examples of sec. 1 and 5


class TestPaperExamples:
    def test_broadcast_square(self):
        # f_ij = x_i^2: dx_i = sum_j df_ij 2 x_i
        src = "input x[4]\noutput f[4, 3]\nf[i, j] = x[i]**2\n"
        g = grad_text(src, "f", ["x"])
        dx = rhs_of(g, "dx")
        assert dx.startswith("sum[dx_z0: 0..2](")
        assert "df[dx_0, dx_z0]" in dx
        assert "x[dx_0]" in dx
        assert "where" not in dx
        assert "**" not in dx  # x**(2-1) -> x
        assert_check(src, "f", ["x"])

    @pytest.mark.parametrize("power", [2, 3])
    def test_diagonal(self, power):
        # f_i = x_ii^p: dx_ij = delta_ij df_i p x_ii^(p-1)
        src = f"input x[4, 4]\nf[i] = x[i, i]**{power}\n"
        g = grad_text(src, "f", ["x"])
        line = line_of(g, "dx")
        assert line.startswith("dx[dx_0, dx_1] = where(dx_0 == dx_1, ")
        assert line.endswith(", 0)")
        assert "sum[" not in line
        assert "df[dx_0]" in line or "df[dx_1]" in line
        assert f"({power} - 1)" not in line
        if power == 3:
            assert re.search(r"x\[dx_(0|1), dx_(0|1)\]\*\*2", line), line
        assert_check(src, "f", ["x"])

    def test_scaled_product(self):
        # f_ij = x_i y_ij: dx_i = sum_j df_ij y_ij, dy_ij = df_ij x_i
        src = "input x[4], y[4, 3]\nf[i, j] = x[i] * y[i, j]\n"
        g = grad_text(src, "f", ["x", "y"])
        dx, dy = rhs_of(g, "dx"), rhs_of(g, "dy")
        assert dx.startswith("sum[dx_z0: 0..2](")
        assert "df[dx_0, dx_z0]" in dx and "y[dx_0, dx_z0]" in dx
        assert "sum[" not in dy and "where" not in dy
        assert "df[dy_0, dy_1]" in dy and "x[dy_0]" in dy
        assert_check(src, "f", ["x", "y"])

    def test_matrix_product(self):
        # dx_ik = sum_j df_ij y_kj ; dy_kj = sum_i df_ij x_ik
        src = "input x[4, 5], y[5, 3]\nf[i, j] = sum[k](x[i, k] * y[k, j])\n"
        g = grad_text(src, "f", ["x", "y"])
        dx, dy = rhs_of(g, "dx"), rhs_of(g, "dy")
        assert dx.count("sum[") == 1 and dy.count("sum[") == 1
        assert dx.startswith("sum[dx_z0: 0..2](")  # over j
        assert dy.startswith("sum[dy_z0: 0..3](")  # over i
        assert "df[dx_0, dx_z0]" in dx and "y[dx_1, dx_z0]" in dx
        assert "df[dy_z0, dy_1]" in dy and "x[dy_z0, dy_0]" in dy
        assert "where" not in g
        assert_check(src, "f", ["x", "y"])

    def test_sum_of_indices(self):
        # f_ij = exp(x_{i+j}): dx_k = sum_i df_{i, k-i} exp(x_k) with a proper range
        src = "input x[7]\noutput f[4, 4]\nf[i, j] = exp(x[i + j])\n"
        g = grad_text(src, "f", ["x"])
        dx = rhs_of(g, "dx")
        assert dx.count("sum[") == 1
        m = re.match(r"sum\[(dx_z0): max\(([^()]*)\)\.\.min\(([^()]*)\)\]", dx)
        assert m, dx
        assert sorted(s.strip() for s in m.group(2).split(",")) == ["0", "dx_0 - 3"]
        assert sorted(s.strip() for s in m.group(3).split(",")) == ["3", "dx_0"]
        assert "df[dx_0 - dx_z0, dx_z0]" in dx
        assert "where" not in dx
        assert_check(src, "f", ["x"])

    def test_linear_combination_bijection(self):
        # f_ij = exp(x_{M i + j}), j in 0..M-1: the map is a bijection, no sum is left
        src = "input x[12]\noutput f[4, 3]\nf[i, j] = exp(x[3*i + j])\n"
        g = grad_text(src, "f", ["x"])
        dx = rhs_of(g, "dx")
        assert "sum[" not in dx
        assert "where" not in dx
        assert "dx_0 // 3" in dx
        assert_check(src, "f", ["x"])
        # numerically: dx[p] = df[p // 3, p % 3] * exp(x[p])
        rng = np.random.default_rng(1)
        x, df = rng.uniform(size=12), rng.uniform(size=(4, 3))
        got = tcc.run(g, {"x": x, "df": df})["dx"]
        np.testing.assert_allclose(got, df.reshape(-1) * np.exp(x), rtol=1e-14)

    def test_linear_combination_not_surjective(self):
        # x has more elements than the map reaches: the tail gets a zero gradient
        src = "input x[14]\noutput f[4, 3]\nf[i, j] = exp(x[3*i + j])\n"
        g = grad_text(src, "f", ["x"])
        assert "sum[" not in rhs_of(g, "dx")
        assert_check(src, "f", ["x"])
        rng = np.random.default_rng(2)
        x, df = rng.uniform(size=14), rng.uniform(size=(4, 3))
        got = tcc.run(g, {"x": x, "df": df})["dx"]
        want = np.zeros(14)
        want[:12] = df.reshape(-1) * np.exp(x[:12])
        np.testing.assert_allclose(got, want, rtol=1e-14)

    def test_elementwise_sin(self):
        # f1_i = sin x_i: dx_i = df_i cos x_i, no sum, no delta
        src = "input x[5]\nf[i] = sin(x[i])\n"
        g = grad_text(src, "f", ["x"])
        dx = rhs_of(g, "dx")
        assert "sum[" not in dx and "where" not in dx
        assert "cos(x[dx_0])" in dx and "df[dx_0]" in dx
        assert_check(src, "f", ["x"])


# ---------------------------------------------------------------------------
# symbolic sizes

SYMBOLIC = [
    ("input x[n], z[m]\noutput f[n, m]\nf[i, j] = x[i]**2\n", ["x"], {"n": 3, "m": 5}, {"n": 6, "m": 1}),
    ("input x[n, n]\nf[i] = x[i, i]**2\n", ["x"], {"n": 2}, {"n": 5}),
    ("input x[n, n]\nf[i] = x[i, i]**3\n", ["x"], {"n": 1}, {"n": 6}),
    ("input x[n], y[n, m]\nf[i, j] = x[i] * y[i, j]\n", ["x", "y"], {"n": 2, "m": 7}, {"n": 5, "m": 3}),
    ("input x[n, p], y[p, m]\nf[i, j] = sum[k](x[i, k] * y[k, j])\n", ["x", "y"], {"n": 2, "m": 7, "p": 1},
     {"n": 4, "m": 3, "p": 6}),
    ("input x[n], y[m]\noutput f[n - m + 1, m]\nf[i, j] = exp(x[i + j])\n", ["x"], {"n": 9, "m": 3},
     {"n": 4, "m": 4}),
    ("input x[n], y[m]\nf[i, j] = exp(x[i + j]) * y[j]\n", ["x", "y"], {"n": 9, "m": 3}, {"n": 5, "m": 5}),
    ("input x[n]\nf[i] = x[2*i] * x[n - 1 - i]\n", ["x"], {"n": 7}, {"n": 8}),
]


class TestSymbolicSizes:
    @pytest.mark.parametrize("src,wrt,s1,s2", SYMBOLIC, ids=[s[0].splitlines()[-1] for s in SYMBOLIC])
    def test_two_bindings(self, src, wrt, s1, s2):
        assert_check(src, "f", wrt, sizes=s1)
        assert_check(src, "f", wrt, sizes=s2)

    def test_structure_is_symbolic(self):
        g = grad_text(SYMBOLIC[0][0], "f", ["x"])
        assert decl(g, "output") == "output dx[n]"
        assert rhs_of(g, "dx").startswith("sum[dx_z0: 0..m - 1](")
        g = grad_text(SYMBOLIC[1][0], "f", ["x"])
        assert decl(g, "output") == "output dx[n, n]"
        assert rhs_of(g, "dx").startswith("where(dx_0 == dx_1, ")
        g = grad_text(SYMBOLIC[5][0], "f", ["x"])
        dx = rhs_of(g, "dx")
        m = re.match(r"sum\[dx_z0: max\(([^()]*)\)\.\.min\(([^()]*)\)\]", dx)
        assert m, dx
        assert "m" in m.group(1) + m.group(2) and "n" in m.group(1) + m.group(2)

    def test_default_sizes(self):
        # tcc.check binds unbound sizes to 5, 4, 6, ... on its own
        assert_check("input x[n], y[n, m]\nf[i, j] = x[i] * y[i, j]\n", "f", ["x", "y"])


# ---------------------------------------------------------------------------
# programs with several definitions

SOFTMAX = """\
input x[n, m], w[m, p]
y[i, j] = sum[k](x[i, k] * w[k, j])
e[i, j] = exp(y[i, j])
s[i] = sum[j](e[i, j])
f[i, j] = e[i, j] / s[i]
"""

BLUR = """\
input x[6, 7]
h[i, j] = sum[k: 0..2](x[i + k, j])
f[i, j] = sum[k: 0..2](h[i, j + k]) / 9
"""


class TestMultiDefinition:
    def test_softmax_check(self):
        assert_check(SOFTMAX, "f", ["x", "w"], sizes={"n": 3, "m": 4, "p": 5})
        assert_check(SOFTMAX, "f", ["x", "w"], sizes={"n": 2, "m": 1, "p": 3}, seed=7)

    def test_softmax_declarations(self):
        g = grad_text(SOFTMAX, "f", ["x", "w"])
        assert decl(g, "input") == "input x[n, m], w[m, p], df[n, p]"
        assert decl(g, "output") == "output dx[n, m], dw[m, p]"
        local = decl(g, "local")
        assert local.startswith("local ")
        local_names = {re.match(r"\s*(\w+)", part).group(1) for part in local[len("local "):].split("],")}
        # intermediate adjoints are locals, never outputs
        assert {"dy", "de", "ds"} <= local_names
        assert "dx" not in local_names and "dw" not in local_names
        assert "f" not in decl(g, "output").split()
        # the gradients read the adjoint of y
        assert "dy[" in rhs_of(g, "dx") and "dy[" in rhs_of(g, "dw")

    def test_softmax_rows_sum_to_zero(self):
        # sum_j f_ij = 1 for every x, so a seed constant along rows gives a zero gradient
        rng = np.random.default_rng(3)
        x, w = rng.uniform(size=(3, 4)), rng.uniform(size=(4, 5))
        df = np.repeat(rng.uniform(size=(3, 1)), 5, axis=1)
        out = tcc.run(grad_text(SOFTMAX, "f", ["x", "w"]), {"x": x, "w": w, "df": df})
        np.testing.assert_allclose(out["dx"], 0, atol=1e-14)
        np.testing.assert_allclose(out["dw"], 0, atol=1e-14)

    def test_blur_check(self):
        assert_check(BLUR, "f", ["x"])

    def test_blur_structure(self):
        g = grad_text(BLUR, "f", ["x"])
        assert decl(g, "input") == "input x[6, 7], df[4, 5]"
        assert decl(g, "output") == "output dx[6, 7]"
        assert re.match(r"local .*\bdh\[4, 7\]", decl(g, "local"))
        for name in ("dh", "dx"):
            rhs = rhs_of(g, name)
            assert rhs.count("sum[") == 1 and "max(" in rhs and "min(" in rhs, rhs
            assert "where" not in rhs
        # numerically: the adjoint of a 3x3 box filter is the full correlation with the box
        rng = np.random.default_rng(4)
        x, df = rng.uniform(size=(6, 7)), rng.uniform(size=(4, 5))
        got = tcc.run(g, {"x": x, "df": df})["dx"]
        want = np.zeros((6, 7))
        for i in range(4):
            for j in range(5):
                want[i : i + 3, j : j + 3] += df[i, j] / 9
        np.testing.assert_allclose(got, want, rtol=1e-13)


# ---------------------------------------------------------------------------
# every pass preserves the semantics


class Collect(BaseInstrument):
    def __init__(self):
        self.states = []

    def after_pass(self, pass_, index, program):
        self.states.append((pass_.name, program))


def _random_inputs(program, sizes, rng):
    from tcc.sizes import extents_shape

    return {d.name: rng.uniform(0.25, 0.75, size=extents_shape(d.extents, sizes)) for d in program.inputs}


@pytest.mark.parametrize(
    "src,wrt,sizes",
    [
        (URBAN, ["a", "b", "c", "d"], {}),
        ("input x[n]\nf[i] = x[2*i] * x[n - 1 - i]\n", ["x"], {"n": 9}),
        ("input x[n]\nf[i] = x[2*i] * x[n - 1 - i]\n", ["x"], {"n": 6}),
        (SOFTMAX, ["x", "w"], {"n": 3, "m": 4, "p": 2}),
        (BLUR, ["x"], {}),
    ],
    ids=["urban", "strided-flipped-odd", "strided-flipped-even", "softmax", "blur"],
)
def test_every_pass_preserves_semantics(src, wrt, sizes):
    program = tcc.parse(src)
    collect = Collect()
    run_pipeline(program, grad_pipeline("f", wrt), instruments=[collect])
    names = [n for n, _ in collect.states]
    assert names == ["infer-ranges", "contract-order", "autodiff", "sum-liberation", "index-solve", "range-bound", "simplify", "factor-linear", "inverse-index", "cse"]
    deriv0 = collect.states[2][1]  # after autodiff
    rng = np.random.default_rng(0)
    inputs = _random_inputs(deriv0, sizes, rng)  # includes the seed df
    grads = ["d" + x for x in wrt]
    reference = None
    for name, state in collect.states[2:]:
        # each intermediate is an executable program, also after printing and parsing it back
        for prog in (state, tcc.parse(str(state), filename=f"<{name}>")):
            if prog is not state:
                prog = run_pipeline(prog, "infer-ranges")
            values = evaluate(prog, inputs)
            if reference is None:
                reference = {g: values[g] for g in grads}
                assert all(np.any(v != 0) for v in reference.values())
                continue
            for g in grads:
                scale = max(np.max(np.abs(reference[g])), 1e-300)
                err = np.max(np.abs(values[g] - reference[g])) / scale
                assert err < 1e-12, f"{g} after {name}: relative deviation {err:.2e}"


# ---------------------------------------------------------------------------
# strided access, naming, determinism, zero gradients


def test_strided():
    src = "input x[7]\nf[i] = x[2*i]\n"
    g = grad_text(src, "f", ["x"])
    assert decl(g, "input") == "input x[7], df[4]"
    dx = rhs_of(g, "dx")
    assert "dx_0 % 2 == 0" in dx
    assert "df[dx_0 // 2]" in dx
    assert "sum[" not in dx
    assert_check(src, "f", ["x"])
    rng = np.random.default_rng(5)
    df = rng.uniform(size=4)
    got = tcc.run(g, {"x": rng.uniform(size=7), "df": df})["dx"]
    np.testing.assert_array_equal(got, [df[0], 0, df[1], 0, df[2], 0, df[3]])


def test_strided_with_offset():
    src = "input x[8]\nf[i] = x[2*i + 1]**2\n"
    g = grad_text(src, "f", ["x"])
    dx = rhs_of(g, "dx")
    assert "% 2" in dx and "// 2" in dx and "sum[" not in dx
    assert_check(src, "f", ["x"])


class TestNaming:
    def test_dx_taken(self):
        src = "input x[4], dx[4]\nf[i] = x[i] * dx[i]\n"
        g = grad_text(src, "f", ["x"])
        assert decl(g, "input") == "input x[4], dx[4], df[4]"
        assert decl(g, "output") == "output dx2[4]"
        assert line_of(g, "dx2").startswith("dx2[dx2_0] = ")
        assert_check(src, "f", ["x"])

    def test_dx_and_dx2_taken(self):
        src = "input x[4], dx[4], dx2[4]\nf[i] = x[i] * dx[i] * dx2[i]\n"
        g = grad_text(src, "f", ["x"])
        assert decl(g, "output") == "output dx3[4]"
        assert_check(src, "f", ["x"])

    def test_df_taken(self):
        src = "input x[4], df[4]\nf[i] = x[i] * df[i]\n"
        g = grad_text(src, "f", ["x"])
        assert decl(g, "input") == "input x[4], df[4], df2[4]"
        assert decl(g, "output") == "output dx[4]"
        assert "df2[dx_0]" in rhs_of(g, "dx")
        assert_check(src, "f", ["x"])

    def test_dx_is_a_definition(self):
        src = "input x[4]\ndx[i] = x[i]**2\nf[i] = sin(dx[i])\n"
        g = grad_text(src, "f", ["x"])
        assert decl(g, "output") == "output dx2[4]"
        assert "dx[i] = x[i]**2" in g
        assert_check(src, "f", ["x"])

    def test_an_index_named_like_the_gradient(self):
        # names share one namespace: the gradient cannot be called dx when dx is an index
        src = "input x[4]\nf[dx] = x[dx]**2\n"
        g = grad_text(src, "f", ["x"])
        assert decl(g, "output") == "output dx2[4]"
        assert_check(src, "f", ["x"])

    def test_both_taken(self):
        src = "input x[4], dx[4], df[4]\nf[i] = x[i] * dx[i] + df[i]\n"
        g = grad_text(src, "f", ["x", "dx", "df"])
        assert decl(g, "input") == "input x[4], dx[4], df[4], df2[4]"
        assert decl(g, "output") == "output dx2[4], ddx[4], ddf[4]"
        assert_check(src, "f", ["x", "dx", "df"])


class TestDeterminism:
    def test_subprocesses(self, urban_file):
        outs = []
        for seed in ("0", "1", "12345"):
            env = {**os.environ, "PYTHONHASHSEED": seed}
            proc = subprocess.run(
                [sys.executable, "-m", "tcc", "grad", urban_file, "--of", "f", "--wrt", "a,b,c,d"],
                capture_output=True,
                env=env,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr.decode()
            outs.append(proc.stdout)
        assert outs[0] and outs[0] == outs[1] == outs[2]

    def test_in_process(self):
        assert grad_text(URBAN, "f", "a,b,c,d") == grad_text(URBAN, "f", ["a", "b", "c", "d"])
        assert grad_text(SOFTMAX, "f", "x,w") == grad_text(SOFTMAX, "f", "x,w")

    def test_wrt_order(self):
        # the gradients follow the order of --wrt, each the same as alone
        g = grad_text(URBAN, "f", ["d", "a"])
        assert decl(g, "output") == "output dd[8], da[3, 5]"
        assert line_of(g, "dd") == line_of(grad_text(URBAN, "f", ["d"]), "dd")


def test_independent_input_zero():
    src = "input x[4], y[3]\nf[i] = x[i]**2\n"
    g = grad_text(src, "f", ["x", "y"])
    assert line_of(g, "dy") == "dy[dy_0] = 0"
    assert decl(g, "output") == "output dx[4], dy[3]"
    results = assert_check(src, "f", ["x", "y"])
    assert np.all(results[1].analytic == 0)
    out = tcc.run(g, {"x": np.ones(4), "y": np.ones(3), "df": np.ones(4)})
    assert out["dy"].shape == (3,) and np.all(out["dy"] == 0)


def test_scalar_output():
    src = "input x[4]\nf = sum[i](x[i]**3)\n"
    g = grad_text(src, "f", ["x"])
    assert decl(g, "input") == "input x[4], df"
    assert "sum[" not in rhs_of(g, "dx")
    assert_check(src, "f", ["x"])


def test_scalar_input():
    src = "input x[4], s\nf[i] = s * x[i]**2\n"
    g = grad_text(src, "f", ["x", "s"])
    assert decl(g, "output") == "output dx[4], ds"
    assert line_of(g, "ds").startswith("ds = sum[")
    assert_check(src, "f", ["x", "s"])


def test_simplify_single_point_sum_may_be_empty():
    src = "input x[5]\noutput g[6]\ng[p] = sum[z: max(0, p)..min(3, p)](x[z])\n"
    program = tcc.transform(src, "infer-ranges,simplify")
    x = np.arange(1.0, 6.0)
    np.testing.assert_array_equal(evaluate(program, {"x": x})["g"], [1, 2, 3, 4, 0, 0])


def test_guarded_rank_deficient_single_element():
    # found by test_autodiff_properties.py::test_rank_deficient_2d
    src = "input x[1], y[1, 1]\noutput f[1, 1]\nf[i, j] = where(i <= j, exp(x[i + 2*j]), y[i, j])\n"
    g = grad_text(src, "f", ["x", "y"])
    out = tcc.run(g, {"x": np.array([0.5]), "y": np.ones((1, 1)), "df": np.full((1, 1), 2.0)})
    np.testing.assert_allclose(out["dx"], [2.0 * np.exp(0.5)], rtol=1e-15)
    assert_check(src, "f", ["x", "y"])
