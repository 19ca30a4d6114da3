"""``inline-guards`` inlines sums of delta guards too.

The Hessian of a layer norm over ``I[2, 3, 4]`` stored an order-12
temporary: the second-order adjoint ``ddxc`` is ``where(6 equalities, 1, 0) +
where(4 equalities, -1/12, 0)``, a sum of two guards, which the pass did not
recognise as delta-shaped.
"""
from __future__ import annotations

import numpy as np

import tcc
from tcc.derivatives import hessian_program

LAYER_NORM = """input I[2, 3, 4]
local mu[2], xc[2, 3, 4], v[2]
mu[n] = sum[c, h](I[n, c, h]) / 12
xc[n, c, h] = I[n, c, h] - mu[n]
v[n] = sum[c, h](xc[n, c, h]**2) / 12
f[n, c, h] = xc[n, c, h] / sqrt(v[n] + 1e-05)
"""


def test_no_temporary_larger_than_the_hessian() -> None:
    program = hessian_program(tcc.parse(LAYER_NORM), of="f", wrt="I")
    orders = {d.name: len(d.indices) for d in program.definitions}
    assert max(orders.values()) == 9, orders  # the Hessian itself: f's 3 indices and I's twice


def test_hessian_against_finite_differences() -> None:
    I = np.random.default_rng(0).standard_normal((2, 3, 4))
    h = tcc.hessian(tcc.parse(LAYER_NORM), of="f", wrt="I")(I=I)
    f = tcc.compile(LAYER_NORM)
    eps = 1e-4
    num = np.zeros((2, 3, 4) * 3)
    for a in np.ndindex(2, 3, 4):
        for b in np.ndindex(2, 3, 4):
            def at(da: float, db: float) -> np.ndarray:
                J = I.copy()
                J[a] += da
                J[b] += db
                return f(I=J)["f"]
            num[(Ellipsis, *a, *b)] = (at(eps, eps) - at(eps, -eps) - at(-eps, eps) + at(-eps, -eps)) / (4 * eps * eps)
    np.testing.assert_allclose(h, num, atol=1e-6)


def test_a_sum_of_guards_with_a_sum_inside_stays() -> None:
    """Inlining must not repeat a reduction: a guard term holding a sum keeps its definition."""
    src = """input x[n], A[n, n]
local t[n, n]
t[i, j] = where(i == j, sum[k](A[i, k]), 0) + where(i == j, x[i], 0)
y[i] = sum[j](t[i, j] * x[j])
"""
    out = tcc.transform(tcc.parse(src), "infer-ranges,inline-guards")
    assert any(d.name == "t" for d in out.definitions)
