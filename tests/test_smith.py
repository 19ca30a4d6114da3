"""Property and example tests for the Smith normal form (sec. 4.1)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tcc.ir.smith import (
    IntegerSolution,
    SmithForm,
    extended_gcd,
    smith_normal_form,
    solve_integer_system,
)

SETTINGS = settings(max_examples=300, deadline=None)


# ------------------------------------------------------------ utilities --

def matmul(A, B, inner: int):
    """Product of row-tuple matrices; ``inner`` disambiguates empty shapes."""
    n = len(A)
    m = len(B[0]) if B else 0
    return tuple(tuple(sum(A[i][k] * B[k][j] for k in range(inner)) for j in range(m)) for i in range(n))


def matvec(A, x):
    return tuple(sum(a * v for a, v in zip(row, x)) for row in A)


def bareiss_det(M) -> int:
    """Exact integer determinant (fraction-free Bareiss with row pivoting)."""
    n = len(M)
    if n == 0:
        return 1
    A = [list(r) for r in M]
    sign, prev = 1, 1
    for k in range(n - 1):
        if A[k][k] == 0:
            swap = next((i for i in range(k + 1, n) if A[i][k] != 0), None)
            if swap is None:
                return 0
            A[k], A[swap] = A[swap], A[k]
            sign = -sign
        for i in range(k + 1, n):
            for j in range(k + 1, n):
                A[i][j] = (A[i][j] * A[k][k] - A[i][k] * A[k][j]) // prev
        prev = A[k][k]
    return sign * A[n - 1][n - 1]


def exact_rank(A, ncols: int) -> int:
    rows = [[Fraction(x) for x in r] for r in A]
    rank = 0
    for c in range(ncols):
        piv = next((i for i in range(rank, len(rows)) if rows[i][c] != 0), None)
        if piv is None:
            continue
        rows[rank], rows[piv] = rows[piv], rows[rank]
        for i in range(len(rows)):
            if i != rank and rows[i][c] != 0:
                f = rows[i][c] / rows[rank][c]
                rows[i] = [a - f * b for a, b in zip(rows[i], rows[rank])]
        rank += 1
    return rank


def rational_inverse(M):
    """Exact inverse via Gauss-Jordan (used to express x in V's basis)."""
    n = len(M)
    A = [[Fraction(x) for x in r] + [Fraction(int(i == j)) for j in range(n)] for i, r in enumerate(M)]
    for c in range(n):
        piv = next(i for i in range(c, n) if A[i][c] != 0)
        A[c], A[piv] = A[piv], A[c]
        p = A[c][c]
        A[c] = [x / p for x in A[c]]
        for i in range(n):
            if i != c and A[i][c] != 0:
                f = A[i][c]
                A[i] = [a - f * b for a, b in zip(A[i], A[c])]
    return tuple(tuple(r[n:]) for r in A)


# ----------------------------------------------------------- strategies --

@st.composite
def dense_matrices(draw):
    n = draw(st.integers(0, 5))
    m = draw(st.integers(0, 5))
    rows = tuple(tuple(draw(st.integers(-6, 6)) for _ in range(m)) for _ in range(n))
    return rows, m


@st.composite
def low_rank_matrices(draw):
    """Products of thin matrices: rank-deficient on purpose."""
    n = draw(st.integers(0, 5))
    m = draw(st.integers(0, 5))
    r = draw(st.integers(0, 2))
    P = tuple(tuple(draw(st.integers(-3, 3)) for _ in range(r)) for _ in range(n))
    Q = tuple(tuple(draw(st.integers(-3, 3)) for _ in range(m)) for _ in range(r))
    rows = tuple(tuple(sum(P[i][k] * Q[k][j] for k in range(r)) for j in range(m)) for i in range(n))
    return rows, m


matrices = st.one_of(dense_matrices(), low_rank_matrices())


# ------------------------------------------------------- SNF properties --

def check_smith(A, m: int) -> SmithForm:
    n = len(A)
    sf = smith_normal_form(A, ncols=m)
    S, U, V, R = sf.S, sf.U, sf.V, sf.rank
    assert len(S) == n and all(len(r) == m for r in S)
    assert len(U) == n and all(len(r) == n for r in U)
    assert len(V) == m and all(len(r) == m for r in V)
    assert matmul(matmul(U, A, n), V, m) == S
    for i in range(n):
        for j in range(m):
            if i != j or i >= R:
                assert S[i][j] == 0
    assert all(d > 0 for d in sf.diagonal) and len(sf.diagonal) == R
    for a, b in zip(sf.diagonal, sf.diagonal[1:]):
        assert b % a == 0
    assert bareiss_det(U) in (1, -1)
    assert bareiss_det(V) in (1, -1)
    assert R == exact_rank(A, m)
    if n and m:
        assert R == np.linalg.matrix_rank(np.array(A, dtype=float))
    return sf


@SETTINGS
@given(matrices)
def test_smith_properties(Am):
    A, m = Am
    check_smith(A, m)


@SETTINGS
@given(matrices, st.data())
def test_solution_matrices(Am, data):
    A, m = Am
    n = len(A)
    sol = solve_integer_system(A, ncols=m)
    R = sol.smith.rank
    I, K, C = sol.pseudo_inverse, sol.kernel, sol.cokernel
    assert len(I) == m and all(len(r) == n for r in I)
    assert len(K) == m and all(len(r) == m - R for r in K)
    assert len(C) == n - R and all(len(r) == n for r in C)
    # A I A = A
    assert matmul(matmul(A, I, m), A, n) == tuple(tuple(Fraction(x) for x in r) for r in A)
    # A K = 0 and C A = 0
    assert all(v == 0 for r in matmul(A, K, m) for v in r)
    assert all(v == 0 for r in matmul(C, A, n) for v in r)
    # for b = A x: C b = 0 and x - I b lies in the integer span of K
    x = tuple(data.draw(st.integers(-5, 5)) for _ in range(m))
    b = matvec(A, x)
    assert all(v == 0 for v in matvec(C, b))
    ib = matvec(I, b)
    assert all(v.denominator == 1 for v in ib)
    d = tuple(xi - v for xi, v in zip(x, ib))
    if m:
        coords = matvec(rational_inverse(sol.smith.V), d)
        assert all(c == 0 for c in coords[:R])
        assert all(c.denominator == 1 for c in coords[R:])
        # and the kernel coordinates reproduce x exactly
        assert tuple(v + sum(K[i][j] * coords[R + j] for j in range(m - R)) for i, v in enumerate(ib)) == x


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_solution_set_matches_brute_force(data):
    n = data.draw(st.integers(1, 3))
    m = data.draw(st.integers(1, 3))
    A = tuple(tuple(data.draw(st.integers(-3, 3)) for _ in range(m)) for _ in range(n))
    b = tuple(data.draw(st.integers(-4, 4)) for _ in range(n))
    box = range(-3, 4)
    brute = {x for x in itertools.product(box, repeat=m) if matvec(A, x) == b}

    sol = solve_integer_system(A)
    R = sol.smith.rank
    got: set[tuple[int, ...]] = set()
    ib = matvec(sol.pseudo_inverse, b)
    if all(v == 0 for v in matvec(sol.cokernel, b)) and all(v.denominator == 1 for v in ib):
        # z = (V^-1 (x - I b))[R:], so this bound covers every x in the box
        Vinv = rational_inverse(sol.smith.V)
        zmax = [
            int(sum(abs(Vinv[i][j]) * (3 + abs(ib[j])) for j in range(m))) + 1 for i in range(R, m)
        ]
        K = sol.kernel
        for z in itertools.product(*(range(-zm, zm + 1) for zm in zmax)):
            x = tuple(int(ib[i] + sum(K[i][j] * z[j] for j in range(m - R))) for i in range(m))
            if all(-3 <= v <= 3 for v in x):
                got.add(x)
    else:
        assert not brute
    assert got == brute


# -------------------------------------------------------------- examples --

def test_paper_sec6_example():
    sol = solve_integer_system([[1, 0, 1]])
    assert sol.smith.U == ((1,),)
    assert sol.smith.V == ((1, 0, -1), (0, 1, 0), (0, 0, 1))
    assert sol.pseudo_inverse == ((1,), (0,), (0,))
    assert sol.kernel == ((0, -1), (1, 0), (0, 1))
    assert sol.cokernel == ()


def test_paper_figure3():
    sol = solve_integer_system([[1, -2]])
    assert [r[0] for r in sol.pseudo_inverse] == [1, 0]  # I^T = (1 0)
    assert [r[0] for r in sol.kernel] == [2, 1]  # K^T = (2 1), not its negation


def test_paper_figure4():
    sol = solve_integer_system([[1, -2, -2]])
    assert [r[0] for r in sol.pseudo_inverse] == [1, 0, 0]
    assert sol.kernel == ((2, 2), (1, 0), (0, 1))


def test_diagonal_access_cokernel():
    """c[i,i]: A = [[1,0,0],[1,0,0]] is solvable only for b0 == b1."""
    sol = solve_integer_system([[1, 0, 0], [1, 0, 0]])
    assert sol.smith.rank == 1
    assert len(sol.cokernel) == 1
    (c,) = sol.cokernel
    assert c in ((1, -1), (-1, 1))
    assert c == (-1, 1)  # what Algorithm 1 produces deterministically


def test_empty_and_zero_shapes():
    sf = smith_normal_form((), ncols=3)
    assert sf.rank == 0 and sf.S == () and sf.U == ()
    assert sf.V == ((1, 0, 0), (0, 1, 0), (0, 0, 1))
    sol = solve_integer_system((), ncols=3)
    assert sol.pseudo_inverse == ((), (), ())
    assert sol.kernel == ((1, 0, 0), (0, 1, 0), (0, 0, 1))
    sf = smith_normal_form([[], []])
    assert sf.S == ((), ()) and sf.V == () and sf.rank == 0
    assert solve_integer_system([[], []]).cokernel == ((1, 0), (0, 1))
    sf = smith_normal_form([[0, 0], [0, 0]])
    assert sf.rank == 0 and sf.U == ((1, 0), (0, 1))
    with pytest.raises(ValueError):
        smith_normal_form(())
    with pytest.raises(ValueError):
        smith_normal_form([[1, 2], [3]])


def test_divisibility_repair():
    """diag(6, 4) needs steps 30-37: the invariant factors are (2, 12)."""
    sf = check_smith(((6, 0), (0, 4)), 2)
    assert sf.diagonal == (2, 12)
    sf = check_smith(((-2, 0, 0), (0, 3, 0), (0, 0, 5)), 3)
    assert sf.diagonal == (1, 1, 30)


def test_extended_gcd_signs():
    for a in range(-7, 8):
        for b in range(-7, 8):
            g, x, y = extended_gcd(a, b)
            assert g >= 0 and g == abs(np.gcd(a, b)) and a * x + b * y == g


def test_deterministic():
    A = ((4, -6, 2), (3, 9, -12), (0, 5, 5))
    assert smith_normal_form(A) == smith_normal_form(A)
    assert isinstance(solve_integer_system(A), IntegerSolution)
