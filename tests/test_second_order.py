"""Second-order derivatives: ``tcc grad`` on the printed output of ``tcc grad``.

Derivation is closed (DESIGN.md): a derivative program is again a program in
the language, so differentiating it once more gives Hessian-vector products.
Each second derivative is checked by :func:`tcc.check` on the first derivative
program, whose inputs include the first seed ``df`` (drawn by the checker).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tcc
from tcc.cli.driver import main

URBAN = """\
input  a[3, 5], b[4, 5], c[3, 3], d[8]
output f[3, 4]
f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
"""


def first(src: str, of: str, wrt) -> str:
    """The printed first derivative, parsed again from its text."""
    text = str(tcc.grad(src, of=of, wrt=wrt))
    assert str(tcc.parse(text, filename="<first>")) == text
    return text


def decl(text: str, kind: str) -> str:
    for line in text.splitlines():
        if line.startswith(kind + " "):
            return line
    return ""


def rhs_of(text: str, name: str) -> str:
    for line in text.splitlines():
        if re.match(rf"{re.escape(name)}(\[[^\]]*\])? = ", line):
            return line.split(" = ", 1)[1]
    raise AssertionError(f"no definition of {name} in:\n{text}")


def assert_check(program_text, of, wrt, sizes=None, tol=1e-6):
    program = tcc.parse(program_text, filename="<first>")
    results = tcc.check(program, of, wrt, sizes=sizes, tol=tol)
    for r in results:
        assert r.ok and r.max_rel_error < tol, str(r)
    return results


@pytest.fixture(scope="module")
def urban_first():
    return first(URBAN, "f", ["a", "b", "c", "d"])


class TestUrban:
    def test_first_declares_seed(self, urban_first):
        assert decl(urban_first, "input") == "input a[3, 5], b[4, 5], c[3, 3], d[8], df[3, 4]"

    def test_da_wrt_a(self, urban_first):
        second = str(tcc.grad(tcc.parse(urban_first, filename="<first>"), of="da", wrt=["a"]))
        # seeded by dda, named da2 (da is taken)
        assert decl(second, "input") == "input a[3, 5], b[4, 5], c[3, 3], d[8], df[3, 4], dda[3, 5]"
        assert decl(second, "output") == "output da2[3, 5]"
        assert "dda[" in rhs_of(second, "da2") or "dda[" in second
        (r,) = assert_check(urban_first, "da", ["a"])
        assert r.gradient == "da2"

    def test_dd_wrt_d(self, urban_first):
        second = str(tcc.grad(tcc.parse(urban_first, filename="<first>"), of="dd", wrt=["d"]))
        assert decl(second, "output") == "output dd2[8]"
        assert "ddd" in decl(second, "input")
        # the range of the sum over i = dd2_0 - z survives the second derivation
        assert re.search(r"max\(dd2_0 - 2, 0\)\.\.min\(dd2_0, 4\)|max\(0, dd2_0 - 2\)\.\.min\(4, dd2_0\)",
                         rhs_of(second, "dd2"))
        (r,) = assert_check(urban_first, "dd", ["d"])
        assert r.gradient == "dd2"

    def test_dc_wrt_c_and_seed(self, urban_first):
        # c enters f linearly inside exp: the mixed derivative w.r.t. the seed df too
        results = assert_check(urban_first, "dc", ["c", "df"])
        assert [r.gradient for r in results] == ["dc2", "ddf"]

    def test_cross_derivatives(self, urban_first):
        results = assert_check(urban_first, "dd", ["a", "b", "c", "d", "df"])
        assert [r.gradient for r in results] == ["da2", "db2", "dc2", "dd2", "ddf"]

    def test_second_through_cli(self, capsys, tmp_path, urban_first):
        path = tmp_path / "first.tcc"
        path.write_text(urban_first)
        assert main(["grad", str(path), "--of", "da", "--wrt", "a"]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        assert out == str(tcc.grad(tcc.parse(urban_first, filename="<x>"), of="da", wrt=["a"]))
        assert main(["check", str(path), "--of", "da", "--wrt", "a"]) == 0
        out, _ = capsys.readouterr()
        assert re.search(r"worst relative error \S+ \(tol 1e-06\) ok", out)


def test_outer_product():
    src = "input x[5]\nf[i, j] = x[i] * x[j]\n"
    g1 = first(src, "f", ["x"])
    dx = rhs_of(g1, "dx")
    assert dx.count("sum[") == 2  # two uses of x with different maps, two terms
    g2 = str(tcc.grad(tcc.parse(g1, filename="<first>"), of="dx", wrt=["x"]))
    assert "ddx" in decl(g2, "input")
    assert decl(g2, "output") == "output dx2[5]"
    assert_check(g1, "dx", ["x", "df"])
    # H v for l = sum(df * f): dx2 = (df + df^T) ddx
    rng = np.random.default_rng(0)
    x, df, ddx = rng.uniform(size=5), rng.uniform(size=(5, 5)), rng.uniform(size=5)
    got = tcc.run(g2, {"x": x, "df": df, "ddx": ddx})["dx2"]
    np.testing.assert_allclose(got, (df + df.T) @ ddx, rtol=1e-13)


def test_scalar_cube():
    src = "input x[4]\nf = sum[i](x[i]**3)\n"
    g1 = first(src, "f", ["x"])
    assert decl(g1, "input") == "input x[4], df"
    g2 = str(tcc.grad(tcc.parse(g1, filename="<first>"), of="dx", wrt=["x"]))
    assert "sum[" not in rhs_of(g2, "dx2")  # the Hessian is diagonal
    assert_check(g1, "dx", ["x", "df"])
    rng = np.random.default_rng(1)
    x, ddx = rng.uniform(size=4), rng.uniform(size=4)
    got = tcc.run(g2, {"x": x, "df": 0.5, "ddx": ddx})["dx2"]
    np.testing.assert_allclose(got, 0.5 * 6 * x * ddx, rtol=1e-14)


def test_scalar_cube_symbolic():
    src = "input x[n]\nf = sum[i](x[i]**3)\n"
    g1 = first(src, "f", ["x"])
    for n in (1, 6):
        assert_check(g1, "dx", ["x", "df"], sizes={"n": n})


def test_strided_wrt_seed():
    src = "input x[7]\nf[i] = x[2*i]\n"
    g1 = first(src, "f", ["x"])
    assert "% 2 == 0" in rhs_of(g1, "dx")
    g2 = str(tcc.grad(tcc.parse(g1, filename="<first>"), of="dx", wrt=["df"]))
    assert decl(g2, "input") == "input x[7], df[4], ddx[7]"
    assert decl(g2, "output") == "output ddf[4]"
    ddf = rhs_of(g2, "ddf")
    assert "where" not in ddf and "sum[" not in ddf
    assert "ddx[2*ddf_0]" in ddf
    assert_check(g1, "dx", ["df"])


def test_third_order():
    src = "input x[6]\nf[i] = sin(x[i]) * x[5 - i]\n"
    g1 = first(src, "f", ["x"])
    g2 = str(tcc.grad(tcc.parse(g1, filename="<first>"), of="dx", wrt=["x"]))
    assert str(tcc.parse(g2, filename="<second>")) == g2
    assert_check(g1, "dx", ["x"])
    assert_check(g2, "dx2", ["x", "df", "ddx"])


def test_second_order_reads_stay_under_their_guards():
    """Found by the L2 property tests: d2 of x/(1+exp(x)) with a shorter output
    multiplied a guarded adjoint by df[k] read outside the guard, so the
    program could not be proved in bounds (and compiled code must not run
    that read).  simplify lifts zero-guards over * and /, so it compiles."""
    import numpy as np

    from compare import assert_matches_interpreter

    src = "input x[2]\noutput f[1]\nf[i] = x[i] / (1 + exp(x[i]))\n"
    g = tcc.grad(src, of="f", wrt="x")
    gg = tcc.grad(g, of="dx", wrt="x")
    tcc.transform(gg, "infer-ranges")  # every access proved in bounds
    out = assert_matches_interpreter(gg)
    assert np.isfinite(out["dx2"]).all()
