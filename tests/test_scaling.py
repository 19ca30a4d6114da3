"""Long chains of definitions: derivation and compilation must grow linearly.

The guards count work structurally (calls of a traversal, functions in the
LLVM module), never seconds: chains of 20 and 40 definitions must cost about
twice as much as chains of 10 and 20, not four times (docs/benchmarks.md has the timings of the same chains up to 400).
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


# ---------------------------------------------------------------------------
# One long product: its gradient has a term per factor, each
# a product of the other factors; as a DAG they share their prefixes and
# suffixes, so the passes must not re-walk the rest of the chain at every node.
# ---------------------------------------------------------------------------


def long_product(factors: int, constants: bool = False) -> str:
    """``y[i] = x[i] * x[i] * ...`` (with ``constants``, every third factor 2 or 0.5), ``f = sum[i](y[i])``."""
    terms = []
    for k in range(factors):
        if constants and k % 3 == 1:
            terms.append("2" if k % 2 else "0.5")
        else:
            terms.append("x[i]")
    return f"input x[n]\ny[i] = {' * '.join(terms)}\nf = sum[i](y[i])\n"


def _count_children(monkeypatch) -> list[int]:
    """Count every ``children()`` call (every traversal asks each node it enters for them)."""
    from tcc.ir import expr

    calls = [0]

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    for cls in (expr.Expr, *subclasses(expr.Expr)):
        original = cls.__dict__.get("children")
        if original is None:
            continue

        def counting(self, _original=original):
            calls[0] += 1
            return _original(self)

        monkeypatch.setattr(cls, "children", counting)
    return calls


def test_long_product_gradient_visits_grow_linearly(monkeypatch):
    calls = _count_children(monkeypatch)
    counts = []
    for factors in (50, 100, 200):
        calls[0] = 0
        tcc.grad(long_product(factors), of="f", wrt="x")
        counts.append(calls[0])
    # the gradient's DAG has O(factors) nodes: about 2x per doubling.  It was
    # 3.5x and growing: sum-liberation asked at every node of the product whether
    # it led to a delta (walking the rest of it), and cse re-proved every read
    # of a subexpression and re-measured it at each of its nodes
    assert counts[1] <= 2.2 * counts[0] and counts[2] <= 2.2 * counts[1], counts


def test_merging_constant_factors_does_not_rewalk_the_chain(monkeypatch):
    from tcc.ir.expr import Binary
    from tcc.passes.simplify import fold_all

    reads = [0]
    slot = Binary.__dict__["lhs"]

    def get(self):
        reads[0] += 1
        return slot.__get__(self, Binary)

    monkeypatch.setattr(Binary, "lhs", property(get, slot.__set__))
    counts = []
    for factors in (200, 400, 800):
        # one constant near the start: nothing to merge, but every node used to collect the chain below it
        body = tcc.parse(f"input x[n]\ny[i] = x[i] * 3 * {' * '.join(['x[i]'] * factors)}\n").definitions[0].body
        reads[0] = 0
        assert fold_all(body) is body
        counts.append(reads[0])
    assert counts[1] <= 2.2 * counts[0] and counts[2] <= 2.2 * counts[1], counts


@pytest.mark.parametrize("constants", [False, True])
def test_long_product_gradient_is_right(constants):
    factors = 45
    program = long_product(factors, constants)
    grad = tcc.grad(program, of="f", wrt="x")
    powers = sum(1 for k in range(factors) if not (constants and k % 3 == 1))
    scale = 1.0
    if constants:
        for k in range(1, factors, 3):
            scale *= 2.0 if k % 2 else 0.5
    x = np.linspace(0.9, 1.1, 7)
    got = tcc.run(grad, {"x": x, "df": np.float64(1.25)})["dx"]
    # d/dx_i of sum_i scale * x_i**powers, times the seed
    np.testing.assert_allclose(got, 1.25 * scale * powers * x ** (powers - 1), rtol=1e-12)
    # and central differences of the function itself, through the reference interpreter
    results = tcc.check(program, of="f", wrt="x", target="reference", low=0.9, high=1.1, sizes={"n": 5})
    assert all(r.ok for r in results), [r.checked() for r in results]


def test_matvec_pair_work_grows_near_linearly_with_the_chain(monkeypatch):
    """``matvec-pair`` decides which kernels move with each candidate pair; testing every
    kernel between against every other made the gradient of a 60-step chain spend 15 s there
    (N**4 dependency tests).  Count the Python calls made inside the pass instead of seconds."""
    import sys

    import tcc.passes.matvec_pair as mvp

    original = mvp._Pairing.run
    calls = 0

    def counted(self):  # noqa: ANN001, ANN202
        nonlocal calls

        def profile(frame, event, arg):  # noqa: ANN001, ANN202, ARG001
            nonlocal calls
            if event == "call":
                calls += 1

        sys.setprofile(profile)
        try:
            return original(self)
        finally:
            sys.setprofile(None)

    monkeypatch.setattr(mvp._Pairing, "run", counted)
    monkeypatch.setenv("TCC_CACHE_DIR", "")  # no disk cache hit: the pass must run
    counts = []
    for steps in (10, 20, 40):
        calls = 0
        # a program no other test compiles, so the in-memory cache cannot serve it either
        src = matvec_chain(steps).replace("x[", "u_mvp[")
        tcc.compile(tcc.grad(tcc.parse(src), of="f", wrt="u_mvp"))
        counts.append(calls)
    # about 2x per doubling (the pairs are tested in O(pairs) bit-set steps); it was ~16x
    assert counts[1] <= 3 * counts[0] and counts[2] <= 3 * counts[1], counts
