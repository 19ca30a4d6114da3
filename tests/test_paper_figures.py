"""Figures 3 and 4 of Urban and van der Smagt end to end: the sums of the derivative enumerate exactly the preimages.

For ``f[α] = x[A·α + c]`` the gradient with ``df = 1`` is ``dx[β] = #{α in box : A·α + c = β}``,
so comparing ``dx`` with a brute-force count checks that index-solve and
range-bound enumerate exactly the right integer points for every β — not just
the paper's β = -1 (Fig. 3, three points) and β = 3 (Fig. 4, fifteen points).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import tcc


def _count(A, c, box, beta):
    return sum(
        1
        for a in itertools.product(*(range(n) for n in box))
        if sum(r * v for r, v in zip(A, a)) + c == beta
    )


@pytest.mark.parametrize(
    "A, box, beta, points",
    [
        ((1, -2), (5, 5), -1, 3),  # Fig. 3 (1-based box 1..5 shifted to 0..4, β shifted the same way)
        ((1, -2, -2), (15, 5, 5), 3, 15),  # Fig. 4 with the box N = (15, 5, 5)
    ],
)
def test_derivative_sums_enumerate_the_preimages(A, box, beta, points):
    names = "ijk"[: len(A)]
    # 1-based α = α0 + 1 in the paper: A·(α0 + 1) = β  <=>  A·α0 + sum(A) = β
    shift = sum(A)
    lo = sum(min(0, a * (n - 1)) for a, n in zip(A, box)) + shift
    hi = sum(max(0, a * (n - 1)) for a, n in zip(A, box)) + shift
    c = shift - lo  # x[A·α0 + shift - lo] is in bounds: 0..hi - lo
    terms = " + ".join(f"{a}*{n}" for a, n in zip(A, names)).replace("+ -", "- ")
    src = (
        f"input x[{hi - lo + 1}]\n"
        f"output f[{', '.join(map(str, box))}]\n"
        f"f[{', '.join(names)}] = x[{terms} + {c}]\n"
    )
    g = tcc.grad(src, of="f", wrt=["x"])
    text = str(g)
    assert "where(" not in text.split("dx[", 1)[1]  # a gather: no delta left
    dx = tcc.run(g, {"x": np.zeros(hi - lo + 1), "df": np.ones(box)})["dx"]
    want = [_count(A, c, box, b) for b in range(hi - lo + 1)]
    np.testing.assert_array_equal(dx, want)
    # the paper's β (1-based) is β0 = β - lo in our shifted x
    assert dx[beta - lo] == points
    # the kernel has dimension len(A) - 1: one nested sum per kernel direction
    assert text.split("dx[", 1)[1].count("dx_z") >= len(A) - 1


def test_figure4_inner_range_depends_on_outer():
    src = "input x[40]\noutput f[15, 5, 5]\nf[i, j, k] = x[i - 2*j - 2*k + 16]\n"
    g = str(tcc.grad(src, of="f", wrt=["x"]))
    body = g.split("dx[dx_0] = ", 1)[1]
    # two kernel sums; the inner one's bounds mention the outer variable
    assert body.startswith("sum[dx_z1: ")
    inner = body.split(", dx_z0: ", 1)[1].split("](", 1)[0]
    assert "dx_z1" in inner
