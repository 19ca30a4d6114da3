"""Reasoning about integer polyhedra given by index conditions.

This is the bridge from the IR's quasi-affine index expressions to the exact
solvers in :mod:`.fourier_motzkin` and :mod:`.linear`:

* ``e // d`` and ``e % d`` atoms become fresh integer symbols ``q`` with the two
  inequalities ``d*q <= e <= d*q + d - 1`` (``e % d`` is ``e - d*q``), so every
  question becomes linear;
* :class:`Facts` is what is known at a program point (size names are
  non-negative, index ranges, enclosing sum ranges and ``where`` guards) and
  answers "does this condition always hold / never hold here?" by asking
  Fourier–Motzkin whether the facts plus the negated goal are infeasible.  The
  answer is sound (a "yes" is a proof over the integers); "no" means "not
  proved";
* :func:`expression_range` gives the bounds of an index expression in terms of
  chosen parameters (used by range inference and error messages);
  :mod:`.constrained_sums` builds loop bounds on the same machinery.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Iterable, Sequence

from .fourier_motzkin import Constraint, IntRow, eliminate, integer_feasible
from .index import Affine, And, Atom, Compare, Cond, FloorDiv, Lookup, Mod, Not, Or, conjuncts
from .linear import Linear

# A linear constraint: (form, kind) meaning form >= 0 (kind ">=") or form == 0 (kind "==").
Row = tuple[Linear, str]


class AtomTable:
    """Fresh integer symbols for ``//``/``%`` atoms, with their defining rows."""

    def __init__(self) -> None:
        self.symbols: dict[FloorDiv, str] = {}
        self.atoms: dict[str, FloorDiv] = {}
        self.rows: list[Row] = []

    def linear(self, a: Affine) -> Linear:
        out = Linear.const_(a.const)
        for atom, c in a.terms:
            out = out + self.atom_linear(atom) * c
        return out

    def atom_linear(self, atom: Atom) -> Linear:
        if isinstance(atom, str):
            return Linear.symbol(atom)
        if isinstance(atom, Lookup):  # an index input's entry: a fresh variable in its declared 0..hi
            sym = self.symbols.get(atom)
            if sym is None:
                sym = self.symbols[atom] = f"%q{len(self.symbols)}"
                self.atoms[sym] = atom
                q = Linear.symbol(sym)
                self.rows.append((q, ">="))
                self.rows.append((self.linear(atom.hi) - q, ">="))
            return Linear.symbol(sym)
        fd = FloorDiv(atom.num, atom.den)
        sym = self.symbols.get(fd)
        if sym is None:
            sym = f"%q{len(self.symbols)}"
            self.symbols[fd] = sym
            self.atoms[sym] = fd
            num = self.linear(atom.num)
            q = Linear.symbol(sym)
            self.rows.append((num - q * atom.den, ">="))
            self.rows.append((q * atom.den + (atom.den - 1) - num, ">="))
        q = Linear.symbol(sym)
        if isinstance(atom, Mod):
            return self.linear(atom.num) - q * atom.den
        return q

    def to_affine(self, form: Linear) -> tuple[Affine, int]:
        """An integral ``Affine`` and a positive multiplier ``m`` with ``form = affine / m``."""
        m = _common_denominator([c for _, c in form.terms] + [form.const])
        terms = []
        for sym, c in form.terms:
            v = int(c * m)
            if sym in self.atoms:
                terms.append((self.atoms[sym], v))
            else:
                terms.append((sym, v))
        return Affine.of(terms, int(form.const * m)), m


def _common_denominator(values: Iterable[Fraction]) -> int:
    """The least common multiple of the denominators: scales a rational row to integers."""
    m = 1
    for v in values:
        m = m * v.denominator // math.gcd(m, v.denominator)
    return m




def compare_rows(c: Compare, atoms: AtomTable) -> list[Row] | None:
    """Rows for one comparison, or None when it is not convex (``!=``)."""
    diff = atoms.linear(c.lhs) - atoms.linear(c.rhs)
    op = c.op
    if op == "==":
        return [(diff, "==")]
    if op == ">=":
        return [(diff, ">=")]
    if op == ">":
        return [(diff - 1, ">=")]
    if op == "<=":
        return [(-diff, ">=")]
    if op == "<":
        return [(-diff - 1, ">=")]
    return None


def split_convex(cond: Cond, atoms: AtomTable) -> tuple[list[Row], list[Cond]]:
    """The convex conjuncts of ``cond`` as rows, and the rest as conditions."""
    rows: list[Row] = []
    rest: list[Cond] = []
    for part in conjuncts(cond):
        r = compare_rows(part, atoms) if isinstance(part, Compare) else None
        if r is None:
            rest.append(part)
        else:
            rows.extend(r)
    return rows, rest


# ---------------------------------------------------------------------------
# Feasibility
# ---------------------------------------------------------------------------

_CACHE: dict[frozenset, bool] = {}


def _substitute_equalities(rows: list[Row]) -> list[Row] | None:
    """Gaussian elimination on equalities with a unit coefficient; None if inconsistent."""
    rows = list(rows)
    changed = True
    while changed:
        changed = False
        for i, (form, kind) in enumerate(rows):
            if kind != "==":
                continue
            if form.is_constant():
                if form.const != 0:
                    return None
                rows.pop(i)
                changed = True
                break
            pivot = next((s for s, c in form.terms if abs(c) == 1), None)
            if pivot is None:
                continue
            c = form.coeff(pivot)
            # pivot = -(form - c*pivot)/c
            value = (form - Linear.symbol(pivot) * c) * Fraction(-1, 1) / c
            rows = [(f.substitute({pivot: value}), k) for j, (f, k) in enumerate(rows) if j != i]
            changed = True
            break
    return rows


def clear_cache() -> None:
    """Forget memoised proofs (benchmarks measure derivation without earlier runs' proofs)."""
    _CACHE.clear()


def infeasible(rows: Sequence[Row]) -> bool:
    """True if no integer point satisfies all rows (proved by Fourier–Motzkin)."""
    key = frozenset(rows)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    result = _infeasible(list(rows))
    if len(_CACHE) > 50000:
        _CACHE.clear()
    _CACHE[key] = result
    return result


def _implicit_equalities(rows: list[Row]) -> list[Row]:
    """``f >= 0`` together with ``-f >= 0`` is ``f == 0``: substituting it keeps integrality.

    Fourier–Motzkin over the rationals loses the integer rounding of an atom
    like ``(v + 2) // 3`` when ``v`` is pinned by two inequalities (an extent-1
    range); as an equality ``v`` is substituted away first.
    """
    ineqs = {f for f, k in rows if k == ">="}
    out: list[Row] = []
    done: set = set()
    for f, k in rows:
        if k == ">=" and -f in ineqs:
            key = f if str(f) < str(-f) else -f
            if key not in done:
                done.add(key)
                out.append((key, "=="))
            continue
        out.append((f, k))
    return out


def integer_rows(rows: Iterable[Row]) -> tuple[list[IntRow], list[IntRow]]:
    """Rows scaled to integer coefficients, as (equalities, inequalities) for the Omega test."""
    eqs: list[IntRow] = []
    ineqs: list[IntRow] = []
    for form, kind in rows:
        m = _common_denominator([c for _, c in form.terms] + [form.const])
        row = ({s: int(c * m) for s, c in form.terms}, int(form.const * m))
        (eqs if kind == "==" else ineqs).append(row)
    return eqs, ineqs


def _infeasible(rows: list[Row]) -> bool:
    """Rational Fourier–Motzkin first (cheap, and most proofs need nothing more);
    where it finds a real point, the Omega test asks whether an integer one exists.

    The second step is what makes ``//`` and ``%`` exact: their quotients are
    integers, and ``2q <= o <= 3, c <= 1, c + 2q >= 4`` has the real point
    ``q = 3/2`` but no integer one.
    """
    if _rational_infeasible(rows):
        return True
    return integer_feasible(*integer_rows(rows)) is False


def _rational_infeasible(rows: list[Row]) -> bool:
    reduced = _substitute_equalities(_implicit_equalities(rows))
    if reduced is None:
        return True
    ineqs: list[Linear] = []
    for form, kind in reduced:
        if kind == "==":
            ineqs.append(form)
            ineqs.append(-form)
        else:
            ineqs.append(form)
    symbols: dict = {}
    for f in ineqs:
        if f.is_constant():
            if f.const < 0:
                return True
            continue
        for s, _ in f.terms:
            symbols.setdefault(s, None)
    if not symbols:
        return False
    # eliminate cheap variables first (fewest generated rows)
    def cost(s: object) -> tuple:
        pos = sum(1 for f in ineqs if f.coeff(s) > 0)
        neg = sum(1 for f in ineqs if f.coeff(s) < 0)
        return (pos * neg - pos - neg, str(s))

    order = sorted(symbols, key=cost)
    cons = []
    for f in ineqs:
        if f.is_constant():
            continue
        m = _common_denominator([c for _, c in f.terms] + [f.const])
        cons.append(Constraint(tuple(int(f.coeff(s) * m) for s in order), Linear.const_(-f.const * m)))
    try:
        proj = eliminate(cons, len(order))
    except ValueError:
        return False
    if proj.infeasible:
        return True
    return any(f.is_constant() and f.const < 0 for f in proj.feasibility)


class Facts:
    """What holds at a program point; answers entailment questions soundly."""

    def __init__(self, rows: Sequence[Row] = (), atoms: AtomTable | None = None, exact: bool = True) -> None:
        self.atoms = atoms if atoms is not None else AtomTable()
        self.rows: tuple[Row, ...] = tuple(rows)
        #: False once a non-convex condition (``or``, ``!=``) was left out: the rows
        #: then describe a superset of the points, and a range over them is only "may".
        self.exact = exact
        self._box: dict | None = None

    def _intervals(self) -> dict:
        """Constant bounds of single symbols: the cheap first try before Fourier–Motzkin."""
        if self._box is None:
            box: dict = {}
            for form, kind in self.rows:
                if len(form.terms) != 1:
                    continue
                (sym, c), k = form.terms[0], form.const
                lo, hi = box.get(sym, (None, None))
                bound = -k / c  # c*s + k >= 0  <=>  s >= -k/c (c > 0) or s <= -k/c (c < 0)
                if c > 0 or kind == "==":
                    v = -((-bound.numerator) // bound.denominator)
                    lo = v if lo is None else max(lo, v)
                if c < 0 or kind == "==":
                    v = bound.numerator // bound.denominator
                    hi = v if hi is None else min(hi, v)
                box[sym] = (lo, hi)
            self._box = box
        return self._box

    def _range(self, form: Linear) -> tuple[Fraction | None, Fraction | None]:
        """Interval of a linear form from the single-symbol bounds (None: unbounded)."""
        box = self._intervals()
        lo: Fraction | None = form.const
        hi: Fraction | None = form.const
        for sym, c in form.terms:
            b = box.get(sym)
            if b is None:
                return None, None
            slo, shi = b
            if c > 0:
                lo = None if lo is None or slo is None else lo + c * slo
                hi = None if hi is None or shi is None else hi + c * shi
            else:
                lo = None if lo is None or shi is None else lo + c * shi
                hi = None if hi is None or slo is None else hi + c * slo
        return lo, hi

    def decide_quickly(self, cond: Compare) -> bool | None:
        """True/False if single-symbol intervals already decide ``cond``, else None."""
        rows = compare_rows(cond, self.atoms)
        if rows is None or any(not set(f.symbols()) <= set(self._intervals()) for f, _ in rows):
            return None
        verdict = True
        for form, kind in rows:
            lo, hi = self._range(form)
            if kind == "==":
                if lo is not None and hi is not None and lo == hi == 0:
                    continue
                if (lo is not None and lo > 0) or (hi is not None and hi < 0):
                    return False
                verdict = None
            else:
                if lo is not None and lo >= 0:
                    continue
                if hi is not None and hi < 0:
                    return False
                verdict = None
        return verdict

    # -- building -------------------------------------------------------
    def with_rows(self, rows: Iterable[Row]) -> "Facts":
        return Facts(self.rows + tuple(rows), self.atoms, self.exact)

    def with_cond(self, cond: Cond | None) -> "Facts":
        if cond is None:
            return self
        rows, rest = split_convex(cond, self.atoms)
        out = self.with_rows(rows) if rows else self
        if rest and out.exact:
            out = Facts(out.rows, out.atoms, exact=False)
        return out

    def with_range(self, var: str, lo: Sequence[Affine], hi: Sequence[Affine]) -> "Facts":
        v = Linear.symbol(var)
        rows = [(v - self.atoms.linear(b), ">=") for b in lo]
        rows += [(self.atoms.linear(b) - v, ">=") for b in hi]
        return self.with_rows(rows)

    def with_nonnegative(self, names: Iterable[str]) -> "Facts":
        return self.with_rows((Linear.symbol(n), ">=") for n in names)

    def _all_rows(self, extra: Sequence[Row]) -> list[Row]:
        # atom definitions are appended lazily: linearising may have added some
        return list(self.rows) + list(self.atoms.rows) + list(extra)

    # -- questions ------------------------------------------------------
    def consistent(self) -> bool:
        return not infeasible(self._all_rows(()))

    def implies(self, cond: Cond | None) -> bool:
        """Proved: cond holds at every point satisfying the facts."""
        if cond is None:
            return True
        if isinstance(cond, And):
            return all(self.implies(p) for p in cond.parts)
        if isinstance(cond, Or):
            # not(a or b) = not a and not b: one FM call when every negation is convex
            negs = [_negated_rows(p, self.atoms) for p in cond.parts]
            if all(r is not None and len(r) == 1 for r in negs):
                return infeasible(self._all_rows([row for r in negs for row in r[0]]))  # type: ignore[index]
            return any(self.implies(q) for q in cond.parts)
        if isinstance(cond, Not):
            return self.refutes(cond.part)
        if isinstance(cond, Compare) and self.decide_quickly(cond) is True:
            return True
        negated = _negated_rows(cond, self.atoms)
        if negated is None:
            return False
        return all(infeasible(self._all_rows(alt)) for alt in negated)

    def refutes(self, cond: Cond | None) -> bool:
        """Proved: cond holds at no point satisfying the facts."""
        if cond is None:
            return not self.consistent()
        if isinstance(cond, Or):
            return all(self.refutes(p) for p in cond.parts)
        if isinstance(cond, Not):
            return self.implies(cond.part)
        if isinstance(cond, Compare) and self.decide_quickly(cond) is False:
            return True
        rows, rest = split_convex(cond, self.atoms)
        if rows and infeasible(self._all_rows(rows)):
            return True
        return any(self.refutes(p) for p in rest if not isinstance(p, Compare))

    def entails_ge(self, a: Affine, b: Affine) -> bool:
        return self.implies(Compare(">=", a, b))


def _negated_rows(cond: Cond, atoms: AtomTable) -> list[list[Row]] | None:
    """Alternatives (a disjunction) of row sets whose union is ``not cond``."""
    if not isinstance(cond, Compare):
        return None
    diff = atoms.linear(cond.lhs) - atoms.linear(cond.rhs)
    op = cond.op
    if op == "==":
        return [[(diff - 1, ">=")], [(-diff - 1, ">=")]]
    if op == "!=":
        return [[(diff, "==")]]
    if op == ">=":
        return [[(-diff - 1, ">=")]]
    if op == ">":
        return [[(-diff, ">=")]]
    if op == "<=":
        return [[(diff - 1, ">=")]]
    if op == "<":
        return [[(diff, ">=")]]
    return None


def program_facts(sizes: Iterable[str], assumptions: Iterable[Any] = ()) -> Facts:
    """Facts true everywhere in a program: sizes are non-negative, and what its ``assume`` lines promise."""
    facts = Facts().with_nonnegative(sizes)
    for a in assumptions:
        facts = facts.with_cond(a.cond)
    return facts


def definition_facts(sizes: Iterable[str], indices: Sequence[str], extents: Sequence[Affine],
                     assumptions: Iterable[Any] = ()) -> Facts:
    facts = program_facts(sizes, assumptions)
    for name, ext in zip(indices, extents):
        facts = facts.with_range(name, [Affine.constant(0)], [ext - 1])
    return facts


# ---------------------------------------------------------------------------
# Ranges of expressions (for messages) and constrained sums
# ---------------------------------------------------------------------------


def rows_to_constraints(rows: Sequence[Row], variables: Sequence[str]) -> list[Constraint]:
    cons = []
    index = {v: k for k, v in enumerate(variables)}
    for form, kind in rows:
        coeffs = [Fraction(0)] * len(variables)
        rest = Linear.const_(form.const)
        for s, c in form.terms:
            if s in index:
                coeffs[index[s]] = c
            else:
                rest = rest + Linear.symbol(s) * c
        m = _common_denominator(coeffs + [c for _, c in rest.terms] + [rest.const])
        ints = tuple(int(c * m) for c in coeffs)
        # coeffs.x + rest >= 0  ->  coeffs.x >= -rest
        cons.append(Constraint(ints, -rest * m))
        if kind == "==":
            cons.append(Constraint(tuple(-c for c in ints), rest * m))
    return cons


def expression_range(facts: Facts, expr: Affine, parameters: Sequence[str]) -> tuple[list[Affine], list[Affine]] | None:
    """Lower and upper bounds (max/min lists) of ``expr`` over the facts, in the parameters."""
    t = "%t"
    rows = facts._all_rows([(facts.atoms.linear(expr) - Linear.symbol(t), "==")])
    syms: dict = {}
    for f, _ in rows:
        for s, _c in f.terms:
            syms.setdefault(s, None)
    params = set(parameters)
    variables = [s for s in syms if s not in params and s != t] + [t]
    try:
        proj = eliminate(rows_to_constraints(rows, variables), len(variables))
    except ValueError:
        return None
    vb = proj.bounds[-1]
    lo = [bound_affine(facts.atoms, b.rhs, b.coeffs, variables, b.divisor, upper=False) for b in vb.lower]
    hi = [bound_affine(facts.atoms, b.rhs, b.coeffs, variables, b.divisor, upper=True) for b in vb.upper]
    return lo, hi


def interval_bounds(facts: Facts, expr: Affine) -> tuple[int, int] | None:
    """Constant bounds of ``expr`` by interval arithmetic over the facts' single-name
    bounds: looser than Fourier–Motzkin's but never too large to compute (its
    elimination may exceed ``MAX_ROWS`` on deeply nested ``//`` and ``%``)."""
    box = facts._intervals()

    def bounds(e: Affine) -> tuple[int, int] | None:
        lo = hi = e.const
        for atom, c in e.terms:
            if isinstance(atom, str):
                b = box.get(atom)
                if b is None or b[0] is None or b[1] is None:
                    return None
            elif isinstance(atom, Lookup):
                h = bounds(atom.hi)
                if h is None:
                    return None
                b = (0, h[1])
            else:
                n = bounds(atom.num)
                if n is None:
                    return None
                if isinstance(atom, Mod):
                    same = n[0] // atom.den == n[1] // atom.den  # one period: no wrap-around
                    b = (n[0] % atom.den, n[1] % atom.den) if same else (0, atom.den - 1)
                else:
                    b = (n[0] // atom.den, n[1] // atom.den)
            lo, hi = (lo + c * b[0], hi + c * b[1]) if c > 0 else (lo + c * b[1], hi + c * b[0])
        return int(lo), int(hi)

    return bounds(expr)


def constant_range(facts: Facts, expr: Affine) -> tuple[int, int] | None:
    """The integer minimum and maximum of ``expr`` over the facts where both are
    constants: sound bounds first (Fourier–Motzkin's, else intervals), then
    :func:`integer_range`.  None where unbounded, empty or undecided."""
    bounds = []
    rng = expression_range(facts, expr, [])
    if rng is not None and rng[0] and rng[1] and all(a.is_constant for a in rng[0] + rng[1]):
        bounds.append((max(a.const for a in rng[0]), min(a.const for a in rng[1])))
    box = interval_bounds(facts, expr)
    if box is not None:
        bounds.append(box)
    if not bounds:
        return None
    lo, hi = max(b[0] for b in bounds), min(b[1] for b in bounds)
    return integer_range(facts, expr, lo, hi) if lo <= hi else None


def integer_range(facts: Facts, expr: Affine, lo: int, hi: int) -> tuple[int, int] | None:
    """The least and greatest integer value of ``expr`` over the facts' integer points,
    given sound constant bounds ``lo <= expr <= hi`` (from :func:`expression_range`).

    Fourier–Motzkin's bounds are those of the *real* points and may not be
    reached (``2*(o // 2) + c`` with ``o`` in 0..3 and ``c`` in 0..1 has the
    real bound 4 but the integer maximum 3); a binary search with the exact
    integer test finds the values really taken.  None when the facts have no
    integer point or the integer test gave up.
    """
    linear = facts.atoms.linear(expr)

    def reaches(row: Linear) -> bool | None:
        return integer_feasible(*integer_rows(facts._all_rows([(row, ">=")])))

    if reaches(linear - lo) is not True:  # the facts themselves: no point (or undecided)
        return None
    out = []
    for sign, a, b in ((1, lo, hi), (-1, -hi, -lo)):  # max of expr, then max of -expr
        # invariant: sign*expr >= a is reached, sign*expr >= b + 1 is not
        while a < b:
            mid = (a + b + 1) // 2
            got = reaches(linear * sign - mid)
            if got is None:
                return None
            a, b = (mid, b) if got else (a, mid - 1)
        out.append(sign * a)
    return out[1], out[0]


def bound_affine(atoms: AtomTable, rhs: Linear, coeffs: Sequence[int], variables: Sequence[str], divisor: int, upper: bool) -> Affine:
    num, m = atoms.to_affine(rhs)
    for name, c in zip(variables, coeffs):
        if c:
            num = num + Affine.var(name, c * m)
    div = divisor * m
    g = math.gcd(div, *[c for _, c in num.terms], num.const) if num.terms or num.const else div
    if g > 1:
        num = Affine.of([(a, c // g) for a, c in num.terms], num.const // g)
        div //= g
    if div == 1:
        return num
    if upper:
        return num.floordiv(div)
    return (num + (div - 1)).floordiv(div)
