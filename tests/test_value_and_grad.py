"""``tcc.grad(value=True)`` / ``tcc grad --value``: one program for a definition's value and its derivatives.

The value is the first output, equal to the forward program's; the
derivatives equal the plain gradient program's, in both modes and through
both compiled targets.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.cli.driver import main

QUADFORM = "input x[n], A[n, n]\nf = sum[i](sum[j](x[i] * A[i, j] * x[j]))\n"
LAYERNORM = """input X[6, 5], g[5], b[5]
local mu[6], xc[6, 5], r[6]
output Y[6, 5]
mu[a] = sum[c](X[a, c]) / 5
xc[a, c] = X[a, c] - mu[a]
r[a] = 1 / sqrt(sum[c](xc[a, c]**2) / 5 + 1e-05)
Y[a, c] = xc[a, c] * r[a] * g[c] + b[c]
"""


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
@pytest.mark.parametrize("src, of, wrt", [(QUADFORM, "f", ["x", "A"]), (LAYERNORM, "Y", ["X", "g", "b"])])
def test_value_and_gradients_equal_the_two_programs(target: str, src: str, of: str, wrt: list[str]) -> None:
    p = tcc.parse(src)
    both = tcc.grad(p, of=of, wrt=wrt, value=True)
    assert both.outputs == (of, *("d" + w for w in wrt))
    assert str(tcc.parse(str(both))) == str(both)  # prints and parses back
    rng = np.random.default_rng(4)
    sizes = {"x": (7,), "A": (7, 7), "X": (6, 5), "g": (5,), "b": (5,)}
    inputs = {d.name: rng.standard_normal(sizes[d.name]) for d in p.inputs}
    seed = {"d" + of: rng.standard_normal(tcc.run(p, inputs)[of].shape)}
    want_value = tcc.compile(p, target)(**inputs)[of]
    want_grads = tcc.compile(tcc.grad(p, of=of, wrt=wrt), target)(**inputs, **seed)
    got = tcc.compile(both, target)(**inputs, **seed)
    np.testing.assert_allclose(got[of], want_value, rtol=1e-13, atol=1e-13)
    for w in wrt:
        np.testing.assert_allclose(got["d" + w], want_grads["d" + w], rtol=1e-12, atol=1e-12)
    reference = tcc.run(both, {**inputs, **seed})
    for name in both.outputs:
        np.testing.assert_allclose(got[name], reference[name], rtol=1e-12, atol=1e-12)


def test_forward_mode_keeps_the_value_first() -> None:
    p = tcc.parse("input x[n]\ny[i] = sin(x[i]) * x[i]\n")
    both = tcc.grad(p, of="y", wrt="x", mode="forward", value=True)
    assert both.outputs == ("y", "dy")
    x, dx = np.linspace(-1, 1, 5), np.full(5, 0.5)
    got = tcc.compile(both)(x=x, dx=dx)
    np.testing.assert_allclose(got["y"], np.sin(x) * x, rtol=1e-15)
    np.testing.assert_allclose(got["dy"], (np.cos(x) * x + np.sin(x)) * dx, rtol=1e-14)


def test_without_value_the_outputs_are_the_gradients_only() -> None:
    p = tcc.grad(tcc.parse(QUADFORM), of="f", wrt="x")
    assert p.outputs == ("dx",) and "f" not in {d.name for d in p.definitions}


def test_cli_value_flag_and_pass_option(tmp_path, capsys) -> None:
    src = tmp_path / "q.tcc"
    src.write_text(QUADFORM)
    assert main(["grad", str(src), "--of", "f", "--wrt", "x", "--value"]) == 0
    printed = capsys.readouterr().out
    assert "output f, dx[n]" in printed
    spec = "infer-ranges,autodiff{of=f wrt=x value=true},simplify,cse"
    assert main(["grad", str(src), "--passes", spec]) == 0
    assert "output f, dx[n]" in capsys.readouterr().out
    assert main(["grad", str(src), "--of", "f", "--wrt", "x"]) == 0
    assert "output dx[n]" in capsys.readouterr().out
