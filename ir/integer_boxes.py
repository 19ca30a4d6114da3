"""Cheap integer reasoning in front of the Omega test: bound propagation, implied rows, witnesses.

The Omega test (:func:`.fourier_motzkin.integer_feasible`) is exact but its
projections square the number of rows at every step: a system of 27 rows in
13 variables (the second derivative of a fold, ``//`` atoms of flattened
indices) grew past 4000 rows and took two seconds for one question, and a
derivation asks hundreds.  Most of those rows are implied by the variables'
constant bounds, and most questions are answered by one integer point.  This
module gives both, on integer rows ``({var: coeff}, const)`` meaning
``sum(coeff * var) + const >= 0``:

* :func:`propagate` tightens constant bounds of single variables from every
  row (interval reasoning, rounded to integers), a few rounds: a contradiction
  proves infeasibility, and the bounds are sound consequences of the rows;
* :func:`drop_implied` removes rows that the single-variable rows alone imply
  (their minimum over the box is ``>= 0``): the single-variable rows stay, so
  the set of integer points is the same;
* :func:`find_point` looks for an integer point by assigning variables one at
  a time within their propagated bounds, with a small node budget: a point
  found proves feasibility, none found proves nothing.
"""
from __future__ import annotations

from typing import Hashable, Mapping, Sequence

#: A sparse integer row: ``sum(coeff * var) + const >= 0``.
Row = tuple[Mapping[Hashable, int], int]
#: Constant bounds per variable, ``None`` on an unbounded side.
Box = dict[Hashable, tuple[int | None, int | None]]

#: Rounds of :func:`propagate`: two bounds that chase each other (``x >= y + 1, y >= x + 1``)
#: tighten by one a round, so propagation stops after a few and leaves the rest to the exact test.
ROUNDS = 6
#: Assignments :func:`find_point` tries before it gives up (each costs one propagation).
POINT_NODES = 40


def single_box(rows: Sequence[Row]) -> Box | None:
    """The bounds that single-variable rows give; None when two of them contradict."""
    box: Box = {}
    for coeffs, k in rows:
        if len(coeffs) != 1:
            continue
        ((v, c),) = coeffs.items()
        _tighten(box, v, c, k)
        lo, hi = box[v]
        if lo is not None and hi is not None and lo > hi:
            return None
    return box


def _tighten(box: Box, v: Hashable, c: int, rest: int) -> bool:
    """Apply ``c*v + rest >= 0`` to ``v``'s bounds; whether they changed."""
    lo, hi = box.get(v, (None, None))
    if c > 0:
        new = -(rest // c)  # v >= ceil(-rest / c)
        if lo is None or new > lo:
            box[v] = (new, hi)
            return True
    else:
        new = rest // -c  # v <= floor(rest / -c)
        if hi is None or new < hi:
            box[v] = (lo, new)
            return True
    return False


def _term_max(box: Box, v: Hashable, c: int) -> int | None:
    lo, hi = box.get(v, (None, None))
    b = hi if c > 0 else lo
    return None if b is None else c * b


def _term_min(box: Box, v: Hashable, c: int) -> int | None:
    lo, hi = box.get(v, (None, None))
    b = lo if c > 0 else hi
    return None if b is None else c * b


def propagate(rows: Sequence[Row], box: Box | None = None, rounds: int = ROUNDS) -> Box | None:
    """Constant bounds of each variable implied by the rows (starting from ``box``);
    None when they prove that no integer (indeed no real) point exists."""
    box = dict(box or {})
    for _ in range(rounds):
        changed = False
        for coeffs, k in rows:
            total = k
            open_ = None  # the one term without a finite maximum, if any
            for v, c in coeffs.items():
                m = _term_max(box, v, c)
                if m is not None:
                    total += m
                elif open_ is None:
                    open_ = v
                else:
                    break
            else:
                if open_ is None and total < 0:
                    return None
                for v, c in coeffs.items():
                    if open_ is not None and v != open_:
                        continue
                    rest = total if open_ is not None else total - _term_max(box, v, c)  # type: ignore[operator]
                    if _tighten(box, v, c, rest):
                        changed = True
                        lo, hi = box[v]
                        if lo is not None and hi is not None and lo > hi:
                            return None
        if not changed:
            break
    return box


def drop_implied(rows: Sequence[Row], box: Box) -> list[Row] | None:
    """The rows without those that the single-variable rows imply; None when a row
    is violated everywhere in the box (no point at all).  ``box`` must come from
    the single-variable rows among ``rows`` (:func:`single_box`), which are kept."""
    out: list[Row] = []
    for row in rows:
        coeffs, k = row
        if len(coeffs) <= 1:
            out.append(row)
            continue
        low: int | None = k
        high: int | None = k
        for v, c in coeffs.items():
            a, b = _term_min(box, v, c), _term_max(box, v, c)
            low = None if low is None or a is None else low + a
            high = None if high is None or b is None else high + b
        if high is not None and high < 0:
            return None
        if low is None or low < 0:
            out.append(row)
    return out


def _satisfied(rows: Sequence[Row], point: Mapping[Hashable, int]) -> bool:
    return all(sum(c * point[v] for v, c in coeffs.items()) + k >= 0 for coeffs, k in rows)


def find_point(rows: Sequence[Row], box: Box, nodes: int = POINT_NODES) -> dict | None:
    """An integer point satisfying every row, or None (none found within ``nodes`` tries).

    Variables are fixed narrowest range first, each to its lower bound, upper
    bound or midpoint, propagating after every choice; a dead end backtracks."""
    variables = sorted({v for coeffs, _ in rows for v in coeffs}, key=str)
    budget = [nodes]

    def width(b: Box, v: Hashable) -> float:
        lo, hi = b.get(v, (None, None))
        return float("inf") if lo is None or hi is None else hi - lo

    def search(b: Box, todo: list) -> dict | None:
        if not todo:
            point = {v: b[v][0] for v in variables}
            return point if _satisfied(rows, point) else None
        v = min(todo, key=lambda u: (width(b, u), str(u)))
        rest = [u for u in todo if u != v]
        lo, hi = b.get(v, (None, None))
        if lo is None and hi is None:
            choices = [0]
        elif lo is None or hi is None:
            choices = [lo if hi is None else hi]
        else:
            choices = list(dict.fromkeys((lo, hi, (lo + hi) // 2)))
        for value in choices:
            budget[0] -= 1
            if budget[0] < 0:
                return None
            fixed = dict(b)
            fixed[v] = (value, value)
            narrowed = propagate(rows, fixed)
            if narrowed is None:
                continue
            found = search(narrowed, rest)
            if found is not None:
                return found
        return None

    return search(box, variables)


def quick_feasible(equalities: Sequence[Row], inequalities: Sequence[Row]) -> bool | None:
    """False when propagation refutes the system, True when a point is found, else None.

    An equality ``f == 0`` is the two rows ``f >= 0`` and ``-f >= 0``."""
    rows = list(inequalities)
    for coeffs, k in equalities:
        rows.append((coeffs, k))
        rows.append(({v: -c for v, c in coeffs.items()}, -k))
    for coeffs, k in rows:
        if not coeffs and k < 0:
            return False
    rows = [r for r in rows if r[0]]
    box = single_box(rows)
    box = propagate(rows, box) if box is not None else None
    if box is None:
        return False
    return True if find_point(rows, box) is not None else None
