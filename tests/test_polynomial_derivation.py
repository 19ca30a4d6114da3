"""Second-order derivation stays fast: cheap integer reasoning before the Omega test (issue 36).

The second derivative of a fold (col2im) with flattened indices asks the
prover hundreds of questions over ``//`` atoms; the Omega test's projections
took seconds each (17 s for the derivation).  Bound propagation and a search
for an integer point answer most of them in milliseconds.
"""
from __future__ import annotations

import time

import tcc
from tcc.ir.fourier_motzkin import integer_feasible
from tcc.ir.integer_boxes import drop_implied, find_point, propagate, quick_feasible, single_box

FOLD = """\
input cols[18, 42]
local img[2, 8, 9]
img[c, i, j] = sum[ki, kj, oi, oj | 0 <= ki, ki <= 2, 0 <= kj, kj <= 2, 0 <= oi, oi <= 5, 0 <= oj, oj <= 6, oi + ki == i, oj + kj == j](cols[9*c + 3*ki + kj, 7*oi + oj])
loss = sum[c, i, j](img[c, i, j] * img[c, i, j])
"""


def test_fold_second_derivative_is_fast_and_matches_finite_differences() -> None:
    first = tcc.parse(str(tcc.grad(FOLD, of="loss", wrt=["cols"])), filename="<first>")
    start = time.perf_counter()
    second = tcc.grad(first, of="dcols", wrt=["cols"])
    assert time.perf_counter() - start < 10.0  # was 17 s (loaded machine), 0.3 s after
    assert "dcols2" in str(second)
    (r,) = tcc.check(first, "dcols", ["cols"], target="reference")
    assert r.ok, str(r)


def test_quick_feasible_decides_by_propagation_and_points() -> None:
    # 1 <= 3x <= 2 with x in a box: no integer x, found by propagation
    assert quick_feasible([], [({"x": 3}, -1), ({"x": -3}, 2)]) is False
    # x + y >= 5, x <= 2, y <= 3: the point (2, 3)
    assert quick_feasible([], [({"x": 1, "y": 1}, -5), ({"x": -1}, 2), ({"y": -1}, 3)]) is True
    assert quick_feasible([], [({"x": 1, "y": 1}, -6), ({"x": -1}, 2), ({"y": -1}, 3)]) is False
    # 2x + 4y == 1 has no integer point, but propagation cannot tell: undecided, and Omega decides
    assert quick_feasible([({"x": 2, "y": 4}, -1)], []) is None
    assert integer_feasible([({"x": 2, "y": 4}, -1)], []) is False


def test_drop_implied_keeps_the_points() -> None:
    rows = [({"x": 1}, 0), ({"x": -1}, 4), ({"y": 1}, 0), ({"y": -1}, 4), ({"x": 1, "y": 1}, 1), ({"x": 1, "y": -1}, 2)]
    box = single_box(rows)
    kept = drop_implied(rows, box)
    assert ({"x": 1, "y": 1}, 1) not in kept  # x + y + 1 >= 1 everywhere in the box
    assert ({"x": 1, "y": -1}, 2) in kept
    points = lambda rs: {(x, y) for x in range(-6, 7) for y in range(-6, 7)
                         if all(sum(c * {"x": x, "y": y}[v] for v, c in co.items()) + k >= 0 for co, k in rs)}
    assert points(kept) == points(rows)
    assert drop_implied(rows + [({"x": -1, "y": -1}, -9)], box) is None  # x + y <= -9 nowhere
    assert propagate(rows, box) is not None
    assert find_point(rows, propagate(rows, box)) is not None
