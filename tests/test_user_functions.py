"""User functions ``def NAME(p, ...) = expr`` (issue 14): inlined at each call, derivatives from the body."""
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
