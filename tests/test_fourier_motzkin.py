"""Tests for parametric Fourier-Motzkin elimination (sec. 4.2, eqs. 41-47)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from tcc.ir.fourier_motzkin import (
    BoundTerm,
    Constraint,
    Projection,
    bound_value,
    eliminate,
    enumerate_points,
)
from tcc.ir.linear import Linear
from tcc.ir.smith import solve_integer_system

B = Linear.symbol("b")
BOX = 4


def const(c: int) -> Linear:
    return Linear.const_(c)


def box_constraints(m: int, lo: int = -BOX, hi: int = BOX) -> list[Constraint]:
    out = []
    for i in range(m):
        e = tuple(int(i == j) for j in range(m))
        out.append(Constraint(e, const(lo)))
        out.append(Constraint(tuple(-v for v in e), const(-hi)))
    return out


def satisfies(cons, x, params) -> bool:
    return all(sum(a * v for a, v in zip(c.coeffs, x)) >= c.rhs.evaluate(params) for c in cons)


def brute_force(cons, m, params, lo=-BOX, hi=BOX) -> set[tuple[int, ...]]:
    return {x for x in itertools.product(range(lo, hi + 1), repeat=m) if satisfies(cons, x, params)}


def check_structure(proj: Projection, m: int) -> None:
    assert len(proj.bounds) == m
    for k, vb in enumerate(proj.bounds):
        for t in vb.lower + vb.upper:
            assert len(t.coeffs) == m and t.divisor >= 1
            assert all(c == 0 for c in t.coeffs[: k + 1])


def check_enumeration(proj: Projection, cons, m: int, params) -> None:
    pts = enumerate_points(proj, params)
    brute = brute_force(cons, m, params)
    assert set(pts) == brute
    assert len(pts) == len(set(pts))
    assert pts == sorted(pts, key=lambda x: tuple(reversed(x)))
    if brute:  # derived conditions are implied, hence hold on any solution
        assert not proj.infeasible
        assert all(f.evaluate(params) >= 0 for f in proj.feasibility)


# ---------------------------------------------------------- random tests --

@st.composite
def polytopes(draw, parametric: bool):
    m = draw(st.integers(1, 3))
    n = draw(st.integers(1, 6))
    cons = []
    for _ in range(n):
        coeffs = tuple(draw(st.integers(-3, 3)) for _ in range(m))
        rhs = const(draw(st.integers(-5, 5)))
        if parametric:
            rhs = rhs + B * draw(st.integers(-2, 2))
        cons.append(Constraint(coeffs, rhs))
    return m, cons + box_constraints(m)


@settings(max_examples=200, deadline=None)
@given(polytopes(parametric=False))
def test_enumeration_matches_brute_force(mc):
    m, cons = mc
    proj = eliminate(cons, m)
    check_structure(proj, m)
    check_enumeration(proj, cons, m, {})


@settings(max_examples=120, deadline=None)
@given(polytopes(parametric=True))
def test_parametric_enumeration_matches_brute_force(mc):
    m, cons = mc
    proj = eliminate(cons, m)
    check_structure(proj, m)
    for b in range(-4, 5):
        check_enumeration(proj, cons, m, {"b": b})


@settings(max_examples=60, deadline=None)
@given(polytopes(parametric=True))
def test_elimination_is_deterministic(mc):
    """Projection is a pure function of its input (no set-order effects)."""
    m, cons = mc
    assert eliminate(cons, m) == eliminate(list(cons), m)


# ----------------------------------------------- the paper's examples ----

def kernel_constraints(A, N, beta_syms):
    """Eqs. 43-44: K z >= 1 - I beta and -K z >= -N + I beta."""
    sol = solve_integer_system(A)
    I, K = sol.pseudo_inverse, sol.kernel
    cons = []
    for i, row in enumerate(K):
        ib = Linear(list(zip(beta_syms, I[i])))
        cons.append(Constraint(tuple(row), 1 - ib))
        cons.append(Constraint(tuple(-v for v in row), ib - N[i]))
    return sol, cons


def alpha_of(sol, beta, z):
    I, K = sol.pseudo_inverse, sol.kernel
    return tuple(
        int(sum(I[i][j] * beta[j] for j in range(len(beta))) + sum(K[i][j] * z[j] for j in range(len(z))))
        for i in range(len(K))
    )


def brute_alpha(A, N, beta):
    return {
        a
        for a in itertools.product(*(range(1, n + 1) for n in N))
        if all(sum(r * v for r, v in zip(row, a)) == bj for row, bj in zip(A, beta))
    }


def test_figure3_line():
    A, N, beta = [[1, -2]], (5, 5), (-1,)
    sol, cons = kernel_constraints(A, N, ["beta"])
    proj = eliminate(cons, 1)
    zs = enumerate_points(proj, {"beta": -1})
    assert zs == [(1,), (2,), (3,)]  # Sigma(-1) = {1 <= z <= 3}, as in Fig. 3
    assert {alpha_of(sol, beta, z) for z in zs} == brute_alpha(A, N, beta)
    assert len(brute_alpha(A, N, beta)) == 3


def test_figure4_plane():
    """Box N = (15, 5, 5): the first box (by N_1, then N_2, N_3) with 15 points."""
    A, N, beta = [[1, -2, -2]], (15, 5, 5), (3,)
    sol, cons = kernel_constraints(A, N, ["beta"])
    proj = eliminate(cons, 2)
    zs = enumerate_points(proj, {"beta": 3})
    brute = brute_alpha(A, N, beta)
    assert len(brute) == 15 and len(zs) == 15
    assert {alpha_of(sol, beta, z) for z in zs} == brute
    outer, inner = proj.bounds[1], proj.bounds[0]
    assert all(t.coeffs == (0, 0) for t in outer.lower + outer.upper)
    assert any(t.coeffs[1] != 0 for t in inner.lower + inner.upper)


def test_sec6_dd_example():
    # alpha = (b - z1, z0, z1) with 0 <= alpha <= (2, 3, 4)
    cons = [
        Constraint((0, -1), -B),  # b - z1 >= 0
        Constraint((0, 1), B - 2),  # b - z1 <= 2
        Constraint((1, 0), const(0)),
        Constraint((-1, 0), const(-3)),
        Constraint((0, 1), const(0)),
        Constraint((0, -1), const(-4)),
    ]
    proj = eliminate(cons, 2)
    z0, z1 = proj.bounds
    assert z0.lower == (BoundTerm((0, 0), const(0), 1),)
    assert z0.upper == (BoundTerm((0, 0), const(3), 1),)
    assert set(z1.lower) == {BoundTerm((0, 0), const(0), 1), BoundTerm((0, 0), B - 2, 1)}
    assert set(z1.upper) == {BoundTerm((0, 0), const(4), 1), BoundTerm((0, 0), B, 1)}
    assert len(z1.lower) == 2 and len(z1.upper) == 2
    assert set(proj.feasibility) == {B, 6 - B}
    assert not proj.infeasible
    for b in range(-2, 9):
        check_enumeration(proj, cons, 2, {"b": b})


# --------------------------------------------------------------- pruning --

def test_dominated_constant_bounds():
    proj = eliminate([Constraint((1,), const(0)), Constraint((1,), const(-1)), Constraint((-1,), const(-5))], 1)
    assert proj.bounds[0].lower == (BoundTerm((0,), const(0), 1),)
    assert proj.bounds[0].upper == (BoundTerm((0,), const(5), 1),)


def test_dominated_parametric_bounds_keep_tightest():
    cons = [Constraint((1,), B - 3), Constraint((1,), B - 2), Constraint((1,), B - 2), Constraint((-1,), const(-9))]
    proj = eliminate(cons, 1)
    assert proj.bounds[0].lower == (BoundTerm((0,), B - 2, 1),)


def test_duplicate_rows_and_variable_free_rows():
    cons = [
        Constraint((0,), const(-1)),  # 0 >= -1: trivially true, dropped
        Constraint((0,), B - 1),  # 1 - b >= 0
        Constraint((0,), B - 3),  # 3 - b >= 0: implied by the previous one
        Constraint((1,), const(0)),
        Constraint((1,), const(0)),
        Constraint((-1,), const(-2)),
    ]
    proj = eliminate(cons, 1)
    assert proj.feasibility == (1 - B,)
    assert proj.bounds[0].lower == (BoundTerm((0,), const(0), 1),)
    assert not proj.infeasible
    assert enumerate_points(proj, {"b": 1}) == [(0,), (1,), (2,)]
    assert enumerate_points(proj, {"b": 2}) == []


def test_constant_contradiction():
    proj = eliminate([Constraint((0, 0), const(1))], 2)
    assert proj.infeasible
    assert enumerate_points(proj, {}) == []


def test_integer_tightening_detects_infeasibility():
    # 2x >= 1 and 2x <= 1 have a real solution (1/2) but no integer one
    proj = eliminate([Constraint((2,), const(1)), Constraint((-2,), const(-1))], 1)
    assert proj.infeasible
    assert proj.bounds[0].lower == (BoundTerm((0,), const(1), 1),)
    assert proj.bounds[0].upper == (BoundTerm((0,), const(0), 1),)


def test_parametric_tightening():
    # 2x >= 2b + 1  <=>  x >= b + 1 ; 2x >= b keeps divisor 2 (not exact)
    proj = eliminate([Constraint((2,), 2 * B + 1), Constraint((-1,), const(-9))], 1)
    assert proj.bounds[0].lower == (BoundTerm((0,), B + 1, 1),)
    proj = eliminate([Constraint((2,), B), Constraint((-1,), const(-9))], 1)
    assert proj.bounds[0].lower == (BoundTerm((0,), B, 2),)
    assert bound_value(proj.bounds[0].lower[0], {"b": 3}, {}, upper=False) == 2
    assert bound_value(proj.bounds[0].lower[0], {"b": -3}, {}, upper=False) == -1


def test_one_sided_and_absent_variables():
    # x0 only bounded below, x1 absent, x2 boxed
    cons = [Constraint((1, 0, 1), const(0)), Constraint((0, 0, 1), const(0)), Constraint((0, 0, -1), const(-1))]
    proj = eliminate(cons, 3)
    assert len(proj.bounds[0].lower) == 1 and proj.bounds[0].upper == ()
    assert proj.bounds[1].lower == () and proj.bounds[1].upper == ()
    assert proj.bounds[2].lower and proj.bounds[2].upper
    with pytest.raises(ValueError, match="unbounded"):
        enumerate_points(proj, {})


def test_bound_value_uses_outer_variables():
    t = BoundTerm((0, 3), B + 1, 2)
    assert bound_value(t, {"b": 0}, {1: 1}, upper=False) == 2  # ceil(4/2)
    assert bound_value(t, {"b": 0}, {1: 2}, upper=True) == 3  # floor(7/2)


def test_zero_variables():
    assert enumerate_points(eliminate([], 0), {}) == [()]
    proj = eliminate([Constraint((), B)], 0)
    assert proj.feasibility == (-B,)
    assert enumerate_points(proj, {"b": 0}) == [()]
    assert enumerate_points(proj, {"b": 1}) == []


def test_row_limit():
    # 80 lower and 80 upper bounds on x0 (distinct x1 slopes) -> 6400 rows
    cons = [Constraint((1, i), const(0)) for i in range(80)]
    cons += [Constraint((-1, i), const(-100)) for i in range(1000, 1080)]
    with pytest.raises(ValueError, match="limit"):
        eliminate(cons, 2)


# ---------------------------------------------------------------- Linear --

def test_linear_basics():
    from fractions import Fraction

    x, y = Linear.symbol("x"), Linear.symbol("y")
    e = 2 * x - y + 3
    assert e == Linear([("y", -1), ("x", 2)], 3)  # order-independent equality
    assert hash(e) == hash(Linear({"y": -1, "x": 2}, 3))
    assert e.terms == (("x", Fraction(2)), ("y", Fraction(-1)))  # first appearance
    assert (e - 2 * x).symbols() == ("y",)  # zero coefficients dropped
    assert (e / 2).coeff("x") == 1 and (e / 2).const == Fraction(3, 2)
    assert e.substitute({"x": y + 1}) == y + 5
    assert e.evaluate({"x": 1, "y": Fraction(1, 2)}) == Fraction(9, 2)
    assert Linear.const_(4).is_constant() and Linear.const_(4) == 4
    with pytest.raises(TypeError):
        Linear({"x": 0.5})
    with pytest.raises(KeyError):
        e.evaluate({"x": 1})
