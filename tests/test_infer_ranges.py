"""infer-ranges: Tensor Comprehensions' rule, in rounds, solved by Fourier–Motzkin.

Each case asserts the exact extents/ranges printed, and that the inferred
program evaluates like a hand-written NumPy reference where that is easy.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError
from tcc.ir.expr import RANGED, postorder


def inferred(src: str) -> str:
    return str(tcc.transform(src, "infer-ranges"))


@pytest.mark.parametrize(
    "src, lines",
    [
        # the seed example: i from a, c and d (d[i + k] with k <= 4 gives i <= 3; a gives i <= 2)
        (
            "input a[3, 5], b[4, 5], c[3, 3], d[8]\nf[i, j] = exp(-sum[k](((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3)))\n",
            ["output f[3, 4]", "sum[k: 0..4]"],
        ),
        # round one fixes k from w[k], round two i from x[i + k]: the "valid" correlation
        ("input x[n], w[m]\ny[i] = sum[k](x[i + k] * w[k])\n", ["output y[n - m + 1]", "sum[k: 0..m - 1]"]),
        # a flipped access
        ("input x[n]\nr[i] = x[n - 1 - i]\n", ["output r[n]"]),
        # a stride: 2*i + 1 <= n - 1
        ("input x[n]\ns[i] = x[2*i + 1]\n", ["output s[n // 2]"]),
        # the extent follows from the range of a summation index that depends on it
        ("input x[5]\nc[i] = sum[k: 0..i](x[k])\n", ["output c[5]"]),
        # floor division and modulo in an index
        ("input x[n]\nh[i] = x[(i + 1) // 2]\ng[i] = x[2*(i // 2) + i % 2]\n", ["output h[2*n - 1], g[n]"]),
        # a declared extent is kept, the sum range is still inferred
        ("input x[n], w[3]\noutput y[n - 2]\ny[i] = sum[k](x[i + k] * w[k])\n", ["output y[n - 2]", "sum[k: 0..2]"]),
        # intermediate definitions: the second reads the first
        ("input x[n]\nt[i] = x[i] * 2\nu[i] = t[i + 1] - t[i]\n", ["output t[n], u[n - 1]"]),
    ],
)
def test_inferred_extents(src, lines):
    text = inferred(src)
    for line in lines:
        assert line in text, text


def test_running_sum_values():
    program = tcc.transform("input x[5]\nc[i] = sum[k: 0..i](x[k])\n", "infer-ranges")
    x = np.arange(1.0, 6.0)
    np.testing.assert_allclose(tcc.run(program, {"x": x})["c"], np.cumsum(x))


def test_correlation_values_with_symbolic_sizes():
    program = tcc.transform("input x[n], w[m]\ny[i] = sum[k](x[i + k] * w[k])\n", "infer-ranges")
    rng = np.random.default_rng(0)
    x, w = rng.random(10), rng.random(3)
    np.testing.assert_allclose(tcc.run(program, {"x": x, "w": w})["y"], np.correlate(x, w, "valid"))


def test_program_without_outputs_declares_all_results():
    program = tcc.transform("input x[n]\nt[i] = x[i] * 2\nu[i] = t[i] + 1\n", "infer-ranges")
    assert program.outputs == ("t", "u")


def test_only_the_declared_outputs_are_results():
    program = tcc.transform("input x[n]\noutput u[n]\nt[i] = x[i] * 2\nu[i] = t[i] + 1\n", "infer-ranges")
    assert program.outputs == ("u",)
    assert "local t[n]" in str(program)


@pytest.mark.parametrize(
    "src, message",
    [
        (
            "input x[n], y[m]\nf[i] = x[i] + y[i]\n",
            "cannot infer the extent of 'f' along 'i': the bounds n - 1, m - 1 (from x[i], y[i]) "
            "cannot be ordered for all sizes; declare the extent explicitly",
        ),
        (
            "input x[n]\nf[i] = sum[k](x[k]) * 2\n",
            "cannot infer the extent of 'f' along index 'i': no access bounds it; declare it with 'output f[...]'",
        ),
        (
            "input x[n]\noutput f[n]\nf[i] = sum[k](2 * x[i])\n",
            "cannot infer the range of sum index 'k': no access bounds it; write sum[k: lo..hi]",
        ),
        (
            "input d[5]\noutput f[3]\nf[i] = sum[k: 0..4](d[i + k])\n",
            "access d[i + k] is out of bounds: i + k ranges over 0..6, but 'd' has extent 5",
        ),
        (
            "input x[n]\noutput f[n]\nf[i] = x[i + 1]\n",
            "access x[i + 1] may be out of bounds: i + 1 ranges over 1..n, but 'x' has extent n",
        ),
    ],
)
def test_inference_errors(src, message):
    with pytest.raises(TccError) as info:
        tcc.transform(src, "infer-ranges")
    assert info.value.message == message
    assert info.value.loc is not None


def test_guards_are_facts_for_the_bounds_proof():
    # x[i - 1] is only read where i >= 1
    src = "input x[n]\noutput f[n]\nf[i] = where(i >= 1, x[i - 1], 0)\n"
    program = tcc.transform(src, "infer-ranges")
    np.testing.assert_allclose(tcc.run(program, {"x": np.arange(1.0, 5.0)})["f"], [0, 1, 2, 3])


def test_unbounded_constrained_sum_gets_box_ranges_from_accesses():
    src = "input x[n], A[n, n]\nu = sum[i, j | i < j](A[i, j] * x[i] * x[j])\n"
    text = inferred(src)
    assert "u = sum[i, j | i < j, 0 <= i, i <= n - 1, 0 <= j, j <= n - 1](A[i, j] * x[i] * x[j])" in text
    rng = np.random.default_rng(3)
    x, A = rng.random(6), rng.random((6, 6))
    want = sum(A[i, j] * x[i] * x[j] for i in range(6) for j in range(i + 1, 6))
    np.testing.assert_allclose(tcc.run(tcc.parse(src), {"x": x, "A": A})["u"], want)
    # its gradient splits the triangle into two gathers, and dA keeps the strict triangle
    g = str(tcc.grad(src, of="u", wrt=["x", "A"]))
    assert "sum[dx_z0: 0..dx_0 - 1]" in g and "sum[dx_z0: dx_0 + 1..n - 1]" in g
    assert "dA[dA_0, dA_1] = where(dA_0 < dA_1, " in g
    assert all(r.ok for r in tcc.check(src, "u", ["x", "A"]))


def test_bounded_constrained_sum_is_left_alone_and_bounds_other_indices():
    src = "input x[n]\nf[p] = sum[i | 0 <= i, i <= 2](x[p + i])\n"
    text = inferred(src)
    assert "output f[n - 2]" in text
    assert "sum[i | 0 <= i, i <= 2](x[i + p])" in text


def test_constrained_sum_index_that_nothing_bounds():
    with pytest.raises(TccError) as info:
        tcc.transform("input x[n]\noutput f[n]\nf[p] = sum[i | i >= p](x[p])\n", "infer-ranges")
    assert info.value.message == (
        "cannot infer the range of sum index 'i': neither the constraints of the sum nor an access"
        " bound it; add bounds such as 0 <= i to the constraints"
    )


@pytest.mark.parametrize("src", [
    "input A[n, p, q], B[p, m], C[q, r]\noutput T[n, m, r]\nT[i, j, l] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])\n",
    "input A[n, p], x[p]\ny[i] = sum[p](A[i, p] * x[p]) + max[p](A[i, p])\n",
    "input x[n]\ny[i] = sum[n: 0..i](x[n] * n) + n\n",
])
def test_sums_named_like_sizes_are_renamed_and_compile_to_the_interpreters_values(src):
    """Inside ``sum[p]`` the name is the variable, in its bounds and outside it the size; blas moved such
    a body out of its sum and compiled wrong values before infer-ranges renamed the variable."""
    from compare import assert_matches_interpreter

    program = tcc.transform(src, "infer-ranges")
    sizes = set(program.sizes())
    bound = {n.var for d in program.definitions for n in postorder(d.body) if isinstance(n, RANGED)}
    assert bound and not bound & sizes
    assert_matches_interpreter(src, {s: 3 + k for k, s in enumerate(sorted(sizes))})
    assert str(tcc.transform(str(program), "infer-ranges")) == str(program)  # idempotent
