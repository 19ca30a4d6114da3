"""Fourier-Motzkin elimination with parametric right-hand sides.

The kernel coordinates ``z`` of ``alpha = I beta + K z`` must satisfy range
constraints ``K z >= 1 - I beta`` and ``-K z >= -N + I beta`` (eqs. 43-44).
The right-hand sides depend on the parameter index ``beta``, so elimination
is done once, symbolically: every right-hand side is a ``Linear`` form over
parameter symbols, and the result is a set of loop bounds (eq. 45) plus
feasibility conditions on the parameters alone (Algorithm 3's ``F b <= 0``).

Rows are kept integral in the variables.  Because both the variables and the
parameters are integers, rows are tightened (divide by the gcd, round the
constant) which both shrinks the loop ranges and lets dominance pruning find
duplicates.  Enumeration of the bounds is exact for integer points: every
original constraint ends up, possibly tightened, as a bound of its innermost
variable, and derived rows are only implied (redundant but tightening) ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Hashable, Iterable, Mapping, Sequence

from .integer_boxes import drop_implied, propagate, quick_feasible, single_box
from .linear import Linear, Scalar

__all__ = [
    "Constraint",
    "BoundTerm",
    "VariableBounds",
    "Projection",
    "MAX_ROWS",
    "eliminate",
    "enumerate_points",
    "bound_value",
    "integer_feasible",
    "OMEGA_BUDGET",
]

MAX_ROWS = 5000


@dataclass(frozen=True)
class Constraint:
    """``coeffs . x >= rhs`` with ``rhs`` a form over parameter symbols."""

    coeffs: tuple[int, ...]
    rhs: Linear


@dataclass(frozen=True)
class BoundTerm:
    """One bound term of variable ``x_k``.

    lower: ``x_k >= ceil((rhs + sum_j coeffs[j] x_j) / divisor)``;
    upper: ``x_k <= floor((rhs + sum_j coeffs[j] x_j) / divisor)``.
    ``coeffs`` has one entry per variable and is nonzero only for ``j > k``.
    """

    coeffs: tuple[int, ...]
    rhs: Linear
    divisor: int


@dataclass(frozen=True)
class VariableBounds:
    lower: tuple[BoundTerm, ...]  # x_k >= max(ceil(term))
    upper: tuple[BoundTerm, ...]  # x_k <= min(floor(term))


@dataclass(frozen=True)
class Projection:
    bounds: tuple[VariableBounds, ...]  # index k -> bounds of x_k
    feasibility: tuple[Linear, ...]  # each f must satisfy f >= 0
    infeasible: bool  # a constant contradiction (0 >= c > 0) was derived


# --------------------------------------------------------- normalisation --

def _ceil(q: Fraction) -> int:
    return -((-q.numerator) // q.denominator)


def _floor(q: Fraction) -> int:
    return q.numerator // q.denominator


def _symbolic_integral(form: Linear) -> bool:
    """Integer parameters map to integers under the symbolic part."""
    return all(c.denominator == 1 for _, c in form.terms)


def _normalise_row(coeffs: tuple[int, ...], rhs: Linear) -> tuple[tuple[int, ...], Linear]:
    """Divide out the content of a row and tighten its rhs constant.

    With integer x, ``coeffs . x`` is a multiple of g = gcd(coeffs).  If the
    symbolic part s of the rhs is integer-valued, the constant c can be
    rounded up (``g y >= s + c  <=>  g y >= s + ceil(c)``), and if g also
    divides s, dividing by g rounds once more: ``y >= s/g + ceil(c/g)``.
    The row is divided by g only when that is exact for the symbolic part
    (numerators divisible by g); otherwise g stays and later becomes the
    divisor of a bound term, keeping rhs forms integral where they were."""
    g = 0
    for a in coeffs:
        g = math.gcd(g, a)
    if g == 0:
        return coeffs, rhs
    c = rhs.const
    sym = rhs - c
    h = g if all(v.numerator % g == 0 for _, v in sym.terms) else 1
    if _symbolic_integral(rhs):
        rhs = sym / h + _ceil(c / h)
    elif h > 1:
        rhs = rhs / h
    if h > 1:
        coeffs = tuple(a // h for a in coeffs)
    return coeffs, rhs


def _normalise_condition(f: Linear) -> Linear:
    """Tighten a parameter-only condition ``f >= 0`` the same way: with an
    integral symbolic part of content g, ``s + c >= 0 <=> s/g + floor(c/g) >= 0``."""
    if f.is_constant() or not _symbolic_integral(f):
        return f
    g = 0
    for _, v in f.terms:
        g = math.gcd(g, int(v))
    c = f.const
    return (f - c) / g + _floor(c / g)


def _prune_max(items: Iterable[tuple[Hashable, Fraction, object]]) -> list[object]:
    """Keep, per dominance key, the item with the largest value (the tightest);
    it takes the slot of the key's first occurrence, so order stays stable."""
    slots: dict[Hashable, int] = {}
    kept: list[tuple[Fraction, object]] = []
    for key, value, item in items:
        idx = slots.get(key)
        if idx is None:
            slots[key] = len(kept)
            kept.append((value, item))
        elif value > kept[idx][0]:
            kept[idx] = (value, item)
    return [item for _, item in kept]


# ------------------------------------------------------------- internals --

@dataclass(frozen=True)
class _Row:
    coeffs: tuple[int, ...]
    rhs: Linear
    history: frozenset[int]  # original rows combined into this one (Chernikov)


def _make_row(coeffs: tuple[int, ...], rhs: Linear, history: frozenset[int]) -> _Row:
    c, r = _normalise_row(coeffs, rhs)
    return _Row(c, r, history)


class _Eliminator:
    """State of Algorithm 3: current rows and collected conditions."""

    def __init__(self, nvars: int) -> None:
        self.nvars = nvars
        self.feasibility: list[Linear] = []
        self.infeasible = False

    def prune(self, rows: Sequence[_Row]) -> list[_Row]:
        """Split off variable-free rows; drop duplicates and dominated rows."""
        live: list[_Row] = []
        for row in rows:
            if any(row.coeffs):
                live.append(row)
            elif row.rhs.is_constant():
                if row.rhs.const > 0:  # 0 >= positive: contradiction
                    self.infeasible = True
            else:
                self.feasibility.append(_normalise_condition(-row.rhs))
        self._prune_feasibility()
        # identical coeffs and symbolic rhs: the largest constant is tightest;
        # among equals prefer the shortest history (helps Chernikov pruning).
        slots: dict[tuple, int] = {}
        kept: list[_Row] = []
        for row in live:
            key = (row.coeffs, row.rhs.without_const())
            idx = slots.get(key)
            if idx is None:
                slots[key] = len(kept)
                kept.append(row)
                continue
            old = kept[idx]
            # The tighter row wins, with the shorter of the two histories: the
            # Chernikov test must not drop combinations of the tighter row that
            # it would keep for the looser one (integer rounding makes a
            # tighter row with a longer history, and dropping its combinations
            # lost, e.g., the only upper bound of an expression).
            tight = row if row.rhs.const > old.rhs.const else old
            short = row.history if len(row.history) < len(old.history) else old.history
            kept[idx] = tight if tight.history == short else _Row(tight.coeffs, tight.rhs, short)
        return kept

    def _prune_feasibility(self) -> None:
        # f >= 0 with equal symbolic parts: the smallest constant is tightest.
        self.feasibility = _prune_max(
            (f.without_const(), -f.const, f) for f in self.feasibility  # type: ignore[misc]
        )


def _bound_terms(rows: Iterable[_Row], k: int, nvars: int) -> tuple[list[BoundTerm], list[BoundTerm]]:
    """Solve each row for ``x_k`` (Algorithm 3 lines 7-10)."""
    lower: list[BoundTerm] = []
    upper: list[BoundTerm] = []
    for row in rows:
        a = row.coeffs[k]
        outer = tuple(-row.coeffs[j] if j > k else 0 for j in range(nvars))
        if a > 0:
            lower.append(BoundTerm(outer, row.rhs, a))
        elif a < 0:
            upper.append(BoundTerm(tuple(-c for c in outer), -row.rhs, -a))
    return lower, upper


def _prune_bounds(terms: Sequence[BoundTerm], upper: bool) -> tuple[BoundTerm, ...]:
    """Drop duplicate and dominated bound terms of one variable.

    Terms whose value ``(rhs + coeffs.x)/divisor`` differs only by a constant
    are comparable for every x; ceil/floor are monotone, so the larger (lower
    bounds) or smaller (upper bounds) constant wins."""
    def key(t: BoundTerm) -> tuple:
        return (
            tuple(Fraction(c, t.divisor) for c in t.coeffs),
            t.rhs.without_const() / t.divisor,
        )

    sign = -1 if upper else 1
    return tuple(
        _prune_max((key(t), sign * t.rhs.const / t.divisor, t) for t in terms)  # type: ignore[misc]
    )


def eliminate(constraints: Sequence[Constraint], nvars: int) -> Projection:
    """Algorithm 3 on ``A x >= b`` with parametric ``b``.

    ``x_0`` is eliminated first (innermost loop, bounds in ``x_1..`` and the
    parameters), ``x_{nvars-1}`` last (outermost, parameters only)."""
    state = _Eliminator(nvars)
    rows: list[_Row] = []
    for i, con in enumerate(constraints):
        if len(con.coeffs) != nvars:
            raise ValueError(f"constraint {i} has {len(con.coeffs)} coefficients, expected {nvars}")
        rhs = con.rhs if isinstance(con.rhs, Linear) else Linear.const_(con.rhs)
        rows.append(_make_row(tuple(int(a) for a in con.coeffs), rhs, frozenset((i,))))
    rows = state.prune(rows)

    bounds: list[VariableBounds] = []
    combined_steps = 0  # variables eliminated by combination (Chernikov bound)
    for k in range(nvars):
        pos = [r for r in rows if r.coeffs[k] > 0]
        neg = [r for r in rows if r.coeffs[k] < 0]
        zero = [r for r in rows if r.coeffs[k] == 0]
        lower, upper = _bound_terms(rows, k, nvars)
        bounds.append(VariableBounds(_prune_bounds(lower, False), _prune_bounds(upper, True)))
        if not pos and not neg:
            continue  # x_k does not occur
        if not pos or not neg:
            rows = zero  # one-sided: x_k can always be chosen (lines 12-13)
            continue
        if len(zero) + len(pos) * len(neg) > MAX_ROWS:
            raise ValueError(
                f"Fourier-Motzkin elimination of x_{k} would generate "
                f"{len(zero) + len(pos) * len(neg)} rows (limit {MAX_ROWS})"
            )
        combined_steps += 1
        new_rows = list(zero)
        for p in pos:
            for n in neg:
                history = p.history | n.history
                # Chernikov: a combination of more than (steps + 1) original
                # rows is implied by the others, so it can be skipped.
                if len(history) > combined_steps + 1:
                    continue
                a, b = p.coeffs[k], -n.coeffs[k]
                coeffs = tuple(b * cp + a * cn for cp, cn in zip(p.coeffs, n.coeffs))
                new_rows.append(_make_row(coeffs, p.rhs * b + n.rhs * a, history))
        rows = state.prune(new_rows)
    # every variable is eliminated now; remaining rows were split off by prune
    state.prune(rows)
    return Projection(tuple(bounds), tuple(state.feasibility), state.infeasible)


# ------------------------------------------------------------ enumeration --

def bound_value(
    term: BoundTerm,
    params: Mapping[Hashable, Scalar],
    outer: Mapping[int, int],
    upper: bool,
) -> int:
    """Integer value of one bound term: floor for upper, ceil for lower."""
    value = term.rhs.evaluate(params)
    for j, c in enumerate(term.coeffs):
        if c:
            value += c * outer[j]
    q = value / term.divisor
    return _floor(q) if upper else _ceil(q)


def enumerate_points(
    projection: Projection, params: Mapping[Hashable, Scalar]
) -> list[tuple[int, ...]]:
    """All integer x within the bounds, by nested loops (eq. 47), outermost
    ``x_{M-1}`` first: lexicographic in ``(x_{M-1}, ..., x_0)``."""
    if projection.infeasible:
        return []
    for vb in projection.bounds:
        if not vb.lower or not vb.upper:
            raise ValueError("unbounded")
    if any(f.evaluate(params) < 0 for f in projection.feasibility):
        return []
    nvars = len(projection.bounds)
    out: list[tuple[int, ...]] = []
    values: dict[int, int] = {}

    def loop(k: int) -> None:
        if k < 0:
            out.append(tuple(values[j] for j in range(nvars)))
            return
        vb = projection.bounds[k]
        lo = max(bound_value(t, params, values, False) for t in vb.lower)
        hi = min(bound_value(t, params, values, True) for t in vb.upper)
        for v in range(lo, hi + 1):
            values[k] = v
            loop(k - 1)
        values.pop(k, None)

    loop(nvars - 1)
    return out


# ------------------------------------------------------- integer (Omega) --
#
# Fourier-Motzkin over the rationals (``eliminate``) projects a polyhedron's
# *real* points: ``2q <= o <= 3, c <= 1, c + 2q >= 4`` has the real point
# q = 3/2 but no integer one, so a prover built on it alone refuses in-bounds
# accesses such as ``x[2*(o // 2) + c]``.  Pugh's Omega test decides integer
# feasibility exactly: equalities are solved over the integers (a unit
# coefficient is substituted; otherwise a "mod hat" substitution shrinks the
# coefficients), an inequality variable is eliminated exactly when every
# lower (or every upper) bound has coefficient 1, and otherwise the real
# shadow (no real point: no integer point), the dark shadow (an integer point
# of it lifts to one of the original) and, between the two, the "splinters"
# (an integer point must lie near one lower bound) decide.

#: A sparse integer row: ``sum(coeff * var) + const`` (``>= 0`` or ``== 0``).
IntRow = tuple[dict, int]

#: Work limit of one ``integer_feasible`` question (recursive calls); past it the answer is ``None``.
OMEGA_BUDGET = 4000
#: Rows the projections of one question may generate in all; past it the answer is ``None``.
#: The call budget alone let one exact projection chain of 27 rows grow to thousands (2 s).
OMEGA_ROWS = 20000


class _GiveUp(Exception):
    """The Omega test exceeded its work budget: the question stays undecided."""


def _content(coeffs: Mapping) -> int:
    g = 0
    for c in coeffs.values():
        g = math.gcd(g, c)
    return g


def _mod_hat(a: int, m: int) -> int:
    """``a`` reduced into ``(-m/2, m/2]``: Pugh's symmetric remainder."""
    return a - m * ((2 * a + m) // (2 * m))


def _substitute_row(row: IntRow, var: Hashable, by: IntRow) -> IntRow:
    """``row`` with ``var`` replaced by the form ``by``."""
    coeffs, k = row
    a = coeffs.get(var)
    if not a:
        return row
    out = {v: c for v, c in coeffs.items() if v != var}
    for v, c in by[0].items():
        s = out.get(v, 0) + a * c
        if s:
            out[v] = s
        else:
            out.pop(v, None)
    return out, k + a * by[1]


class _Omega:
    """One integer-feasibility question: fresh-variable counter and work budget."""

    def __init__(self, budget: int, rows: int = OMEGA_ROWS) -> None:
        self.budget = budget
        self.rows = rows
        self.fresh = 0
        self.memo: dict[frozenset, bool] = {}  # systems of inequalities decided so far

    def _tick(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise _GiveUp

    def feasible(self, eqs: list[IntRow], ineqs: list[IntRow]) -> bool:
        """Whether some integer point satisfies every equality and inequality."""
        self._tick()
        while True:
            live: list[IntRow] = []
            for coeffs, k in eqs:
                g = _content(coeffs)
                if g == 0:
                    if k != 0:
                        return False
                    continue
                if k % g:
                    return False  # no integer point on  g * (...) = -k
                live.append(({v: c // g for v, c in coeffs.items()}, k // g))
            if not live:
                return self._inequalities(ineqs)
            # the equality and variable with the smallest coefficient
            i, var = min(((i, v) for i, (c, _) in enumerate(live) for v in c),
                         key=lambda iv: (abs(live[iv[0]][0][iv[1]]), iv[0], str(iv[1])))
            coeffs, k = live[i]
            a = coeffs[var]
            if abs(a) == 1:  # var = -a * (rest + k)
                by = ({v: -a * c for v, c in coeffs.items() if v != var}, -a * k)
                rest = live[:i] + live[i + 1:]
            else:  # var = sign(a) * (-m*sigma + sum(mod_hat(c) x) + mod_hat(k)), sigma a new integer
                m = abs(a) + 1
                sign = 1 if a > 0 else -1
                self.fresh += 1
                sigma = ("%sigma", self.fresh)
                form = {v: sign * _mod_hat(c, m) for v, c in coeffs.items() if v != var}
                form[sigma] = -sign * m
                by = ({v: c for v, c in form.items() if c}, sign * _mod_hat(k, m))
                rest = live  # the equality itself shrinks under the substitution
            eqs = [_substitute_row(r, var, by) for r in rest]
            ineqs = [_substitute_row(r, var, by) for r in ineqs]

    def _inequalities(self, ineqs: list[IntRow]) -> bool:
        key = frozenset((frozenset(c.items()), k) for c, k in ineqs)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._decide(ineqs)
        return hit

    @staticmethod
    def _normalised(ineqs: list[IntRow]) -> dict[frozenset, tuple[dict, int]] | None:
        """The rows divided by their content and tightened, the tightest of each direction kept;
        None when a constant row is false."""
        rows: dict[frozenset, tuple[dict, int]] = {}
        for coeffs, k in ineqs:
            g = _content(coeffs)
            if g == 0:
                if k < 0:
                    return None
                continue
            norm = {v: c // g for v, c in coeffs.items()}
            k //= g  # integer tightening: g*y >= -k  <=>  y >= ceil(-k/g)
            key = frozenset(norm.items())
            old = rows.get(key)
            if old is None or k < old[1]:
                rows[key] = (norm, k)
        return rows

    def _spend_rows(self, n: int) -> None:
        self.rows -= n
        if self.rows < 0:
            raise _GiveUp

    def _reduced(self, ineqs: list[IntRow]) -> tuple[dict[frozenset, tuple[dict, int]], dict] | None:
        """The normalised rows with propagated variable bounds made explicit and the
        rows those bounds imply dropped (:mod:`.integer_boxes`), and the bounds;
        None when infeasible.

        The bounds are consequences of the rows and stay, so the integer points
        are the same; the projections then combine far fewer rows."""
        rows = self._normalised(ineqs)
        if rows is None:
            return None
        box = propagate(list(rows.values()), single_box(list(rows.values())))
        if box is None:
            return None
        extra = [({v: 1}, -lo) for v, (lo, _) in box.items() if lo is not None]
        extra += [({v: -1}, hi) for v, (_, hi) in box.items() if hi is not None]
        rows = self._normalised(list(rows.values()) + extra)
        kept = drop_implied(list(rows.values()), box) if rows is not None else None
        if kept is None:
            return None
        return {frozenset(c.items()): (c, k) for c, k in kept}, box

    def _decide(self, ineqs: list[IntRow]) -> bool:
        reduced = self._reduced(ineqs)
        if reduced is None:
            return False
        rows, _box = reduced
        # a pair f + k1 >= 0, -f + k2 >= 0 pins f: contradiction or an equality
        for key, (coeffs, k) in rows.items():
            neg = frozenset((v, -c) for v, c in coeffs.items())
            other = rows.get(neg)
            if other is None:
                continue
            if k + other[1] < 0:
                return False
            if k + other[1] == 0:
                rest = [r for kk, r in rows.items() if kk not in (key, neg)]
                return self.feasible([(coeffs, k)], rest)
        live = list(rows.values())
        while True:  # a variable bounded on one side only can always be chosen
            pos: set = set()
            neg_: set = set()
            for coeffs, _ in live:
                for v, c in coeffs.items():
                    (pos if c > 0 else neg_).add(v)
            free = pos ^ neg_
            if not free:
                break
            live = [r for r in live if not free & set(r[0])]
        if not live:
            return True

        def choice(v: Hashable) -> tuple:
            lows = [r[0][v] for r in live if r[0].get(v, 0) > 0]
            ups = [-r[0][v] for r in live if r[0].get(v, 0) < 0]
            exact = all(a == 1 for a in lows) or all(b == 1 for b in ups)
            return (not exact, len(lows) * len(ups) - len(lows) - len(ups), str(v))

        var = min(pos, key=choice)
        lower = [r for r in live if r[0].get(var, 0) > 0]
        upper = [r for r in live if r[0].get(var, 0) < 0]
        others = [r for r in live if not r[0].get(var, 0)]
        if len(others) + len(lower) * len(upper) > MAX_ROWS:
            raise _GiveUp

        def shadow(dark: bool) -> list[IntRow]:
            out = list(others)
            for lc, lk in lower:
                a = lc[var]
                for uc, uk in upper:
                    b = -uc[var]
                    coeffs = {}
                    for v in set(lc) | set(uc):
                        if v != var:
                            s = b * lc.get(v, 0) + a * uc.get(v, 0)
                            if s:
                                coeffs[v] = s
                    out.append((coeffs, b * lk + a * uk - ((a - 1) * (b - 1) if dark else 0)))
            self._spend_rows(len(out))
            return out

        if not choice(var)[0]:
            return self._inequalities(shadow(False))  # exact projection
        if not self._inequalities(shadow(False)):
            return False  # not even a real point
        if self._inequalities(shadow(True)):
            return True
        # An integer point lies within a bounded distance of some lower bound
        # (or, symmetrically, of some upper bound): try each, on the side with fewer.
        sides = []
        for near, far in ((lower, upper), (upper, lower)):
            fmax = max(abs(c[var]) for c, _ in far)
            sides.append([(c, k - gap) for c, k in near
                          for gap in range((fmax * abs(c[var]) - abs(c[var]) - fmax) // fmax + 1)])
        return any(self.feasible([eq], live) for eq in min(sides, key=len))


def integer_feasible(equalities: Iterable[IntRow], inequalities: Iterable[IntRow],
                     budget: int = OMEGA_BUDGET, quick: bool = True) -> bool | None:
    """Whether an integer point satisfies ``f == 0`` for every equality and
    ``f >= 0`` for every inequality (rows as ``({var: coeff}, const)``).

    Exact (the Omega test), or ``None`` when the work budget ran out.  First
    (unless ``quick=False``: the caller tried it) bound propagation and a
    search for a point (:func:`.integer_boxes.quick_feasible`) answer most
    questions in a few milliseconds where the projections took seconds.
    """
    eqs = [(dict(c), int(k)) for c, k in equalities]
    ineqs = [(dict(c), int(k)) for c, k in inequalities]
    if quick:
        answer = quick_feasible(eqs, ineqs)
        if answer is not None:
            return answer
    try:
        return _Omega(budget).feasible(eqs, ineqs)
    except _GiveUp:
        return None
