"""Smith normal form and the complete integer solution of ``A x = b``.

Derivatives of element-wise tensor definitions need, for an index map
``beta = A alpha``, all integer ``alpha`` belonging to a given ``beta``
(Urban & van der Smagt, sec. 4.1 and eq. 41).  The Smith normal form
``S = U A V`` yields everything at once: the cokernel ``C`` (solvability
condition ``C b = 0``), the pseudo-inverse ``I = V S^+ U`` (a particular
solution ``I b``) and the kernel ``K`` (all solutions ``I b + K z``).

The implementation follows Algorithm 1 (with Algorithm 2 for Bezout factors)
step by step, with one deterministic refinement: the pivot is the nonzero
entry of smallest magnitude (ties: lowest row, then lowest column).  This
keeps numbers small and makes the output reproducible, which downstream code
relies on (e.g. ``A = [[1, 0, 1]]`` gives exactly the kernel of the paper's
sec. 6 example).  Everything is exact: ``int`` and ``Fraction`` only.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

IntMatrix = tuple[tuple[int, ...], ...]
RatMatrix = tuple[tuple[Fraction, ...], ...]

__all__ = [
    "SmithForm",
    "IntegerSolution",
    "smith_normal_form",
    "solve_integer_system",
    "extended_gcd",
]


# ---------------------------------------------------------------- helpers --

def _identity(n: int) -> list[list[int]]:
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def _freeze(m: Sequence[Sequence[int]]) -> IntMatrix:
    return tuple(tuple(int(x) for x in row) for row in m)


def _normalise_input(A: Sequence[Sequence[int]], ncols: int | None) -> tuple[list[list[int]], int, int]:
    """Validate ``A`` and return (mutable copy, N, M).

    A matrix without rows cannot tell its column count, hence ``ncols``."""
    rows = [list(r) for r in A]
    n = len(rows)
    if ncols is None:
        if n == 0:
            raise ValueError("ncols is required when A has no rows")
        ncols = len(rows[0])
    if ncols < 0:
        raise ValueError("ncols must be non-negative")
    out: list[list[int]] = []
    for r in rows:
        if len(r) != ncols:
            raise ValueError(f"row {r!r} does not have {ncols} columns")
        if any(isinstance(x, (bool, float, Fraction)) for x in r):
            raise TypeError(f"integer entries required, got row {r!r}")
        # operator.index accepts int-like values (e.g. numpy integers) only.
        out.append([operator.index(x) for x in r])
    return out, n, ncols


def extended_gcd(a: int, b: int) -> tuple[int, int, int]:
    """Algorithm 2 (extended Euclid) lifted to signed inputs.

    Returns ``(g, x, y)`` with ``g = gcd(a, b) = a x + b y`` and ``g >= 0``.
    The paper states it for positive inputs; the pivot entries of Algorithm 1
    can be negative, so the signs are folded into the Bezout factors."""
    r0, r1 = abs(a), abs(b)
    s0, s1 = 1, 0
    t0, t1 = 0, 1
    while r1 != 0:
        q = r0 // r1
        r0, r1 = r1, r0 - q * r1
        s0, s1 = s1, s0 - q * s1
        t0, t1 = t1, t0 - q * t1
    x = s0 if a >= 0 else -s0
    y = t0 if b >= 0 else -t0
    return r0, x, y


# ------------------------------------------------------------- Smith form --

@dataclass(frozen=True)
class SmithForm:
    """``S = U A V`` with ``S`` diagonal, positive, ``s_i | s_{i+1}``."""

    S: IntMatrix  # N x M
    U: IntMatrix  # N x N, unimodular
    V: IntMatrix  # M x M, unimodular
    rank: int

    @property
    def diagonal(self) -> tuple[int, ...]:
        """The ``rank`` nonzero invariant factors."""
        return tuple(self.S[i][i] for i in range(self.rank))


class _State:
    """Mutable working copy of S, U, V with the elementary operations of
    Algorithm 1; every operation on S is mirrored on U (rows) or V (cols)."""

    def __init__(self, A: list[list[int]], n: int, m: int) -> None:
        self.S = A
        self.U = _identity(n)
        self.V = _identity(m)
        self.n = n
        self.m = m

    # row operations (mirrored on U)
    def swap_rows(self, i: int, j: int) -> None:
        if i != j:
            for M in (self.S, self.U):
                M[i], M[j] = M[j], M[i]

    def combine_rows(self, a: int, i: int, p: int, q: int, r: int, s: int) -> None:
        """Simultaneously row_a <- p row_a + q row_i, row_i <- r row_a + s row_i."""
        for M in (self.S, self.U):
            ra, ri = M[a], M[i]
            M[a] = [p * x + q * y for x, y in zip(ra, ri)]
            M[i] = [r * x + s * y for x, y in zip(ra, ri)]

    # column operations (mirrored on V)
    def swap_cols(self, i: int, j: int) -> None:
        if i != j:
            for M in (self.S, self.V):
                for row in M:
                    row[i], row[j] = row[j], row[i]

    def combine_cols(self, a: int, j: int, p: int, q: int, r: int, s: int) -> None:
        """Simultaneously col_a <- p col_a + q col_j, col_j <- r col_a + s col_j."""
        for M in (self.S, self.V):
            for row in M:
                x, y = row[a], row[j]
                row[a] = p * x + q * y
                row[j] = r * x + s * y

    def pivot(self, a: int) -> tuple[int, int] | None:
        """Smallest-magnitude nonzero entry of the active submatrix (ties:
        lowest row, then lowest column) -- deterministic and keeps entries
        small."""
        best: tuple[int, int, int] | None = None
        for i in range(a, self.n):
            row = self.S[i]
            for j in range(a, self.m):
                v = row[j]
                if v != 0 and (best is None or abs(v) < best[0]):
                    best = (abs(v), i, j)
        return None if best is None else (best[1], best[2])

    def clear_cross(self, a: int) -> None:
        """Steps 9-27: zero column ``a`` below and row ``a`` right of S_aa."""
        S = self.S
        changed = True
        while changed:
            changed = False
            # steps 10-14: make S_aa divide every entry below it
            while True:
                i = next((i for i in range(a + 1, self.n) if S[i][a] % S[a][a] != 0), None)
                if i is None:
                    break
                beta, sigma, tau = extended_gcd(S[a][a], S[i][a])
                gamma, alpha = S[i][a] // beta, S[a][a] // beta
                self.combine_rows(a, i, sigma, tau, -gamma, alpha)
                changed = True
            # steps 15-18: eliminate the entries below S_aa
            for i in range(a + 1, self.n):
                if S[i][a] != 0:
                    f = S[i][a] // S[a][a]
                    self.combine_rows(a, i, 1, 0, -f, 1)
                    changed = True
            # steps 19-23: make S_aa divide every entry right of it
            while True:
                j = next((j for j in range(a + 1, self.m) if S[a][j] % S[a][a] != 0), None)
                if j is None:
                    break
                beta, sigma, tau = extended_gcd(S[a][a], S[a][j])
                gamma, alpha = S[a][j] // beta, S[a][a] // beta
                self.combine_cols(a, j, sigma, tau, -gamma, alpha)
                changed = True
            # steps 24-27: eliminate the entries right of S_aa
            for j in range(a + 1, self.m):
                if S[a][j] != 0:
                    f = S[a][j] // S[a][a]
                    self.combine_cols(a, j, 1, 0, -f, 1)
                    changed = True

    def diagonalise(self, a: int) -> int:
        """Steps 4-29 starting at active index ``a``; returns the rank."""
        while True:
            piv = self.pivot(a)
            if piv is None:
                return a
            i, j = piv
            self.swap_cols(a, j)  # steps 5-6
            self.swap_rows(a, i)  # steps 7-8
            self.clear_cross(a)
            a += 1


def smith_normal_form(A: Sequence[Sequence[int]], ncols: int | None = None) -> SmithForm:
    """Algorithm 1: ``S = U A V`` for an integer matrix given as rows.

    ``ncols`` is needed only when ``A`` has no rows (its width is otherwise
    unknowable); the zero matrix and empty shapes are handled (rank 0)."""
    rows, n, m = _normalise_input(A, ncols)
    st = _State(rows, n, m)
    rank = st.diagonalise(0)
    # steps 30-37: positive diagonal and the divisibility chain
    a = 0
    while a < rank:
        S = st.S
        if S[a][a] < 0:  # steps 31-33
            for M in (st.S, st.V):
                for row in M:
                    row[a] = -row[a]
        if a + 1 < rank and S[a + 1][a + 1] % S[a][a] != 0:  # step 34
            # steps 35-36: col_a += col_{a+1}, then re-diagonalise (step 37).
            # Each restart strictly decreases |S_aa| with S_11..S_{a-1,a-1}
            # untouched, so the loop terminates (lexicographic descent).
            for M in (st.S, st.V):
                for row in M:
                    row[a] += row[a + 1]
            new_rank = st.diagonalise(a)
            assert new_rank == rank, "rank changed during divisibility repair"
            a = 0
            continue
        a += 1
    return SmithForm(S=_freeze(st.S), U=_freeze(st.U), V=_freeze(st.V), rank=rank)


# --------------------------------------------------------- solution set ----

@dataclass(frozen=True)
class IntegerSolution:
    """All integer solutions of ``A x = b``: solvable iff ``C b = 0`` and
    ``I b`` is integral; then ``x = I b + K z`` for ``z`` in Z^(M-R)."""

    smith: SmithForm
    pseudo_inverse: RatMatrix  # I = V S^+ U, M x N, A I A = A
    kernel: IntMatrix  # M x (M - R): columns R.. of V
    cokernel: IntMatrix  # (N - R) x N: rows R.. of U


def solve_integer_system(A: Sequence[Sequence[int]], ncols: int | None = None) -> IntegerSolution:
    """Pseudo-inverse, kernel and cokernel of ``A`` (sec. 4.1, eqs. 16-19)."""
    sf = smith_normal_form(A, ncols)
    n, m, r = len(sf.U), len(sf.V), sf.rank
    U, V = sf.U, sf.V
    diag = sf.diagonal
    # I = V S^+ U: only the first R columns of V and rows of U contribute.
    pinv = tuple(
        tuple(
            sum((Fraction(V[i][k] * U[k][j], diag[k]) for k in range(r)), Fraction(0))
            for j in range(n)
        )
        for i in range(m)
    )
    kernel = tuple(tuple(V[i][k] for k in range(r, m)) for i in range(m))
    cokernel = tuple(U[k] for k in range(r, n))
    return IntegerSolution(smith=sf, pseudo_inverse=pinv, kernel=kernel, cokernel=cokernel)
