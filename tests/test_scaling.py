"""Long chains of definitions: derivation and compilation must grow linearly.

The guards count work structurally (calls of a traversal, functions in the
LLVM module), never seconds: chains of 20 and 40 definitions must cost about
twice as much as chains of 10 and 20, not four times (issue 11, item 10;
docs/benchmarks.md has the timings of the same chains up to 400).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tcc
import tcc.passes.cse as cse


def matvec_chain(steps: int) -> str:
    lines = ["input x[n], A[n, n]", "h1[i] = sum[j](A[i, j] * x[j])"]
    lines += [f"h{k}[i] = sum[j](A[i, j] * tanh(h{k - 1}[j]))" for k in range(2, steps + 1)]
    return "\n".join(lines + [f"f = sum[i](h{steps}[i])"]) + "\n"


def elementwise_chain(steps: int) -> str:
    lines = ["input x[n]", "h1[i] = sin(x[i])"]
    lines += [f"h{k}[i] = sin(h{k - 1}[i]) * h{k - 1}[i]" for k in range(2, steps + 1)]
    return "\n".join(lines + [f"f = sum[i](h{steps}[i])"]) + "\n"


@pytest.mark.parametrize("chain", [matvec_chain, elementwise_chain])
def test_cse_traversals_grow_linearly_with_the_chain(chain, monkeypatch):
    calls = 0
    original = cse.postorder

    def counting(root):
        nonlocal calls
        calls += 1
        return original(root)

    monkeypatch.setattr(cse, "postorder", counting)
    counts = []
    for steps in (10, 20, 40):
        calls = 0
        tcc.grad(tcc.parse(chain(steps)), of="f", wrt="x")
        counts.append(calls)
    # linear: about 2x per doubling (it was 4x: every definition tried at every node)
    assert counts[1] <= 2.2 * counts[0] and counts[2] <= 2.2 * counts[1], counts


def test_chain_gradient_compiles_to_a_fixed_number_of_kernel_bodies():
    def shared_bodies(steps: int) -> tuple[int, int]:
        compiled = tcc.compile(tcc.grad(tcc.parse(matvec_chain(steps)), of="f", wrt="x"))
        text = str(compiled.llvm)
        kernels = len(re.findall(r"^define void @", text, re.M))
        bodies = len(re.findall(r"^define internal .*\.body", text, re.M))
        return kernels, bodies

    (k10, b10), (k20, b20) = shared_bodies(10), shared_bodies(20)
    assert k20 > k10  # more kernels ...
    assert 0 < b10 == b20  # ... but the same few shared bodies


def test_chain_gradient_with_shared_bodies_matches_the_interpreter():
    grad = tcc.grad(tcc.parse(matvec_chain(12)), of="f", wrt="x,A")
    rng = np.random.default_rng(7)
    nn = 11
    inputs = {"x": rng.uniform(-1, 1, nn), "A": rng.uniform(-0.5, 0.5, (nn, nn)), "df": np.float64(1.5)}
    expect = tcc.run(grad, inputs)
    got = tcc.compile(grad)(**inputs)
    for name in ("dx", "dA"):
        scale = np.max(np.abs(expect[name]))
        assert scale > 0
        np.testing.assert_allclose(got[name], expect[name], rtol=0, atol=1e-13 * scale)
