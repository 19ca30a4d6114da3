"""User functions ``def NAME(p, ...) = expr``: inlined at each call, derivatives from the body."""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError

SRC = """def softplus(t) = log(1 + exp(t))
def huber(r, d) = where(abs(r) <= d, 0.5 * r**2, d * (abs(r) - 0.5 * d))
def twice(u) = 2 * softplus(u)
input x[n], y[n]
f = sum[i](twice(x[i] - y[i]) + huber(x[i] - y[i], 0.1))
"""


def reference(x: np.ndarray, y: np.ndarray) -> float:
    r = x - y
    return float(np.sum(2 * np.log1p(np.exp(r)) + np.where(np.abs(r) <= 0.1, 0.5 * r**2, 0.1 * (np.abs(r) - 0.05))))


def test_calls_are_inlined_and_the_program_prints_back() -> None:
    p = tcc.parse(SRC)
    text = str(p)
    assert "def" not in text and "2 * log(1 + exp(x[i] - y[i]))" in text
    assert str(tcc.parse(text)) == text


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_values_and_gradients(target: str) -> None:
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(30), rng.standard_normal(30)
    got = tcc.compile(SRC, target)(x=x, y=y)["f"]
    assert float(got) == pytest.approx(reference(x, y), rel=1e-13)
    assert all(r.ok for r in tcc.check(tcc.parse(SRC), of="f", wrt="x,y", target=target))


@pytest.mark.parametrize("text, line, col, message", [
    ("def exp(t) = t\ninput x[n]\ny[i] = x[i]\n", 1, 5, "'exp' is a built-in; a user function needs another name"),
    ("def max(a, b) = a\ninput x[n]\ny[i] = x[i]\n", 1, 5, "'max' is a built-in; a user function needs another name"),
    ("def f(t) = f(t) + 1\ninput x[n]\ny[i] = x[i]\n", 1, 12, "'f' calls itself: user functions are inlined and cannot recurse"),
    ("def f(t) = t\ndef f(u) = u\ninput x[n]\ny[i] = x[i]\n", 2, 5, "function 'f' is already defined"),
    ("def f(t, t) = t\ninput x[n]\ny[i] = x[i]\n", 1, 10, "parameter 't' appears twice"),
    ("input x[n]\ndef f(t) = t * x[0]\ny[i] = x[i]\n", 2, 5, "the body of 'f' may use only its parameters (t), not 'x[0]'"),
    ("input x[n]\ndef f(t) = t * n\ny[i] = x[i]\n", 2, 5, "the body of 'f' may use only its parameters (t), not 'n'"),
    ("def f(a, b) = a * b\ninput x[n]\ny[i] = f(x[i])\n", 3, 8, "'f' takes 2 arguments, got 1"),
    ("input x[n]\ny[i] = g(x[i])\ndef g(t) = t\n", 2, 8, "unknown function 'g'"),
])
def test_bad_definitions_and_calls_are_located(text: str, line: int, col: int, message: str) -> None:
    with pytest.raises(TccError) as info:
        tcc.parse(text)
    assert info.value.message.startswith(message)
    assert (info.value.loc.line, info.value.loc.col) == (line, col)


def test_a_tensor_may_still_be_called_def() -> None:
    p = tcc.parse("input x[n]\ndef[i] = 2 * x[i]\n")
    assert [d.name for d in p.definitions] == ["def"]


CUSTOM = """def softplus(t) = log(1 + exp(t)) with d(t) = sigmoid(t)
def ste(u, s) = where(u > 0, s, 0) with d(s) = 1, d(u) = s
input x[n], y[n]
f = sum[i](softplus(x[i] * y[i]) + ste(x[i] - 0.5, y[i]))
"""


def test_custom_derivatives_print_as_calls_and_parse_back() -> None:
    p = tcc.parse(CUSTOM)
    text = str(p)
    assert text.startswith("def softplus(t) = log(1 + exp(t)) with d(t) = sigmoid(t)\n"
                           "def ste(u, s) = where(u > 0, s, 0) with d(u) = s, d(s) = 1\n")
    assert "softplus(x[i] * y[i]) + ste(x[i] - 0.5, y[i])" in text
    assert str(tcc.parse(text)) == text
    g = tcc.grad(p, of="f", wrt="x,y")
    assert str(tcc.parse(str(g))) == str(g)


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_values_use_the_body_and_gradients_the_custom_derivatives(target: str) -> None:
    rng = np.random.default_rng(5)
    x, y = rng.uniform(0, 1, 25), rng.uniform(-1, 1, 25)
    f = float(tcc.compile(CUSTOM, target)(x=x, y=y)["f"])
    want = np.sum(np.log1p(np.exp(x * y)) + np.where(x - 0.5 > 0, y, 0))
    assert f == pytest.approx(float(want), rel=1e-13)
    assert float(tcc.run(tcc.parse(CUSTOM), {"x": x, "y": y})["f"]) == pytest.approx(float(want), rel=1e-13)
    g = tcc.compile(tcc.grad(tcc.parse(CUSTOM), of="f", wrt="x,y"), target)(x=x, y=y, df=np.asarray(1.0))
    sig = 1 / (1 + np.exp(-x * y))
    # softplus: its true derivative; ste: the straight-through d(u) = s, d(s) = 1 (the body's would be 0 and a step)
    np.testing.assert_allclose(g["dx"], sig * y + y, rtol=1e-13)
    np.testing.assert_allclose(g["dy"], sig * x + 1, rtol=1e-13)


def test_custom_derivatives_are_differentiated_again() -> None:
    src = "def sp(t) = log(1 + exp(t)) with d(t) = sigmoid(t)\ninput x[n]\nf = sum[i](sp(2 * x[i]))\n"
    x = np.array([-1.0, 0.0, 0.5, 2.0])
    h = tcc.hessian(tcc.parse(src), of="f", wrt="x")(x=x)
    s = 1 / (1 + np.exp(-2 * x))
    np.testing.assert_allclose(h, np.diag(4 * s * (1 - s)), rtol=1e-12)
    jvp = tcc.jvp(tcc.parse(src), of="f", wrt="x")(x=x, dx=np.ones(4))
    assert float(jvp) == pytest.approx(float(np.sum(2 * s)), rel=1e-13)
    assert all(r.ok for r in tcc.check(tcc.parse(src), of="f", wrt="x"))


@pytest.mark.parametrize("text, message", [
    ("def f(a, b) = a * b with d(a) = b\ninput x[n]\ny[i] = x[i]\n",
     "'f' needs a custom derivative for every parameter; missing: d(b)"),
    ("def f(a) = a with d(q) = 1\ninput x[n]\ny[i] = x[i]\n", "'q' is not a parameter of 'f' (a)"),
    ("def f(a) = a with d(a) = 1, d(a) = 2\ninput x[n]\ny[i] = x[i]\n", "d(a) is given twice"),
    ("def f(a) = a with e(a) = 1\ninput x[n]\ny[i] = x[i]\n", "expected d(PARAMETER) = ..."),
])
def test_bad_custom_derivatives(text: str, message: str) -> None:
    with pytest.raises(TccError) as info:
        tcc.parse(text)
    assert info.value.message.startswith(message)
