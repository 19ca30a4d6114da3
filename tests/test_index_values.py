"""Sizes and indices in value expressions: ``sum[j](x[a, j]) / m``, ``x[i] * sin(0.3 * i)``.

A size or an index written alone in a value is its integer value converted
to the element type.  The parser reads it as ``#index[e]``
(:data:`tcc.ir.expr.INDEX_VALUE`), an access of a pseudo-tensor, so every
pass treats it as a read indexed by ``e``; the printer writes it back as
``e``.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError
from tcc.ir.expr import INDEX_VALUE, Access, index_value
from tcc.ir.index import Affine

SRC = """input x[n, m]
y[i, j] = x[i, j] * sin(0.3 * i + 0.1 * j) / m - 2 * i + n
s[i] = sum[j](x[i, j] * j) / m
c[i] = sum[k: 0..i](k * s[k])
"""


def reference(x: np.ndarray) -> dict[str, np.ndarray]:
    n, m = x.shape
    i, j = np.meshgrid(np.arange(n), np.arange(m), indexing="ij")
    with np.errstate(invalid="ignore"):  # m = 0: the mean of nothing is 0 / 0
        s = (x * j).sum(1) / m
    return {"y": x * np.sin(0.3 * i + 0.1 * j) / max(m, 1) - 2 * i + n, "s": s, "c": np.cumsum(np.arange(n) * s)}


def test_parses_as_index_values_and_prints_back() -> None:
    p = tcc.parse(SRC)
    assert str(p) == SRC
    y = p.definitions[0].body
    assert Access(INDEX_VALUE, (Affine.var("m"),)) in _nodes(y)
    assert str(tcc.parse(str(tcc.transform(p, "infer-ranges")))) == str(tcc.transform(p, "infer-ranges"))


def _nodes(e):  # noqa: ANN001, ANN202
    from tcc.ir.expr import postorder
    return postorder(e)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
@pytest.mark.parametrize("shape", [(5, 7), (1, 1), (0, 3), (3, 0), (13, 2)])
def test_compiled_and_interpreted_agree_with_numpy(target: str, dtype: str, shape: tuple[int, int]) -> None:
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    src = SRC
    want = reference(x.astype(np.float64))
    tol = 1e-5 if dtype == "float32" else 1e-12
    for got in (tcc.compile(src, target, dtype=dtype)(x=x), tcc.run(tcc.parse(src), {"x": x}, dtype)):
        for name, arr in got.items():
            scale = max(1.0, np.nanmax(np.abs(want[name]), initial=0))
            np.testing.assert_allclose(arr, want[name], rtol=tol, atol=tol * scale)


def test_derivatives() -> None:
    g = tcc.grad(tcc.parse(SRC), of="y", wrt="x")
    assert "dx[dx_0, dx_1] = dy[dx_0, dx_1] / m * sin(0.3 * dx_0 + 0.1 * dx_1)" in str(g)
    for of in ("y", "s", "c"):
        assert all(r.ok for r in tcc.check(tcc.parse(SRC), of=of, wrt="x"))
    second = "input x[n]\nf = sum[i](i * x[i]**3)\n"
    h = tcc.hessian(tcc.parse(second), of="f", wrt="x")(x=np.arange(1.0, 5.0))
    np.testing.assert_allclose(h, np.diag(6 * np.arange(4) * np.arange(1.0, 5.0)), rtol=1e-13)
    jvp = tcc.jvp(tcc.parse(second), of="f", wrt="x")
    out = jvp(x=np.arange(1.0, 5.0), dx=np.ones(4))
    assert float(out) == pytest.approx(float(np.sum(3 * np.arange(4) * np.arange(1.0, 5.0) ** 2)))


def test_substituted_indices_print_as_they_parse() -> None:
    """Passes substitute into an index value (``i`` -> ``j + 1``); it prints as the parser's tree for ``j + 1``."""
    e = Access(INDEX_VALUE, (Affine.var("j") * 2 - Affine.var("k") + 1,))
    assert str(e) == "2 * j - k + 1"
    assert str(index_value(Affine.var("j") * 2 - Affine.var("k") + 1)) == "2 * j - k + 1"
    assert str(index_value(Affine.constant(-3))) == "-3"
    src = "input x[n]\ny[i] = x[i] * (2 * i - n + 1)\n"
    assert str(tcc.parse(src)).endswith("y[i] = x[i] * (2 * i - n + 1)\n")


def test_values_need_bound_names() -> None:
    with pytest.raises(TccError, match="undeclared tensor 'q'"):
        tcc.transform(tcc.parse("input x[n]\ny[i] = x[i] * q\n"), "infer-ranges")
    # an index used only in a value is not summed implicitly: only reads make implicit sums
    with pytest.raises(TccError, match="undeclared tensor 'k'"):
        tcc.transform(tcc.parse("input x[n]\ny[i] = x[i] * k\n"), "infer-ranges")


def test_an_index_value_alone_needs_a_declared_extent() -> None:
    with pytest.raises(TccError, match="cannot infer the extent of 'y' along index 'i'"):
        tcc.transform(tcc.parse("input x[n]\ny[i] = i\n"), "infer-ranges")
    f = tcc.compile("input x[n]\noutput y[n]\ny[i] = i * i\n")
    np.testing.assert_array_equal(f(x=np.zeros(4))["y"], [0.0, 1.0, 4.0, 9.0])


def test_large_index_values_convert_exactly_as_integers_do() -> None:
    f = tcc.compile("input x[n]\ny = n * 1.0\n", dtype="float32")
    assert f(x=np.zeros(16_777_217, dtype=np.float32))["y"] == np.float32(16_777_217)
