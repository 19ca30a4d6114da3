"""A bounded constrained sum also ranges only where its accesses are in bounds.

``sum[x, y | x + y >= 2, y - x <= 4, x + y <= 10, x - y <= 4](inp[x, y])``
over a 7x7 input: the four constraints bound a diamond reaching -1 and 7, and
the program was rejected although any three of the constraints were accepted
(then the ranges came from ``inp``).  ``infer-ranges`` now intersects every
constrained sum with the ranges its accesses allow.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError

CONSTRAINTS = ["x + y >= 2", "y - x <= 4", "x + y <= 10", "x - y <= 4"]
TESTS = {
    "x + y >= 2": lambda x, y: x + y >= 2, "y - x <= 4": lambda x, y: y - x <= 4,
    "x + y <= 10": lambda x, y: x + y <= 10, "x - y <= 4": lambda x, y: x - y <= 4,
}


def reference(inp: np.ndarray, chosen: tuple[str, ...]) -> float:
    return sum(inp[x, y] for x in range(7) for y in range(7) if all(TESTS[c](x, y) for c in chosen))


@pytest.mark.parametrize("count", [2, 3, 4])
def test_any_subset_of_the_constraints_is_accepted_and_agrees(count: int) -> None:
    inp = np.random.default_rng(count).standard_normal((7, 7))
    for chosen in itertools.combinations(CONSTRAINTS, count):
        src = f"input inp[7, 7]\nf = sum[x, y | {', '.join(chosen)}](inp[x, y])\n"
        want = reference(inp, chosen)
        assert tcc.run(tcc.parse(src), {"inp": inp})["f"] == pytest.approx(want, rel=1e-13, abs=1e-13)
        for target in ("cpu", "cuda-sim"):
            got = tcc.compile(src, target)(inp=inp)["f"]
            assert got == pytest.approx(want, rel=1e-13, abs=1e-13)


def test_the_clipped_sum_prints_and_parses_back() -> None:
    src = f"input inp[7, 7]\nf = sum[x, y | {', '.join(CONSTRAINTS)}](inp[x, y])\n"
    inferred = tcc.transform(tcc.parse(src), "infer-ranges")
    text = str(inferred)
    assert "0 <= x, x <= 6, 0 <= y, y <= 6" in text
    assert str(tcc.transform(tcc.parse(text), "infer-ranges")) == text


def test_a_sum_inside_the_array_gains_nothing() -> None:
    src = "input inp[7, 7]\nf = sum[x, y | 0 <= y, y <= x, x <= 6](inp[x, y])\n"
    inferred = str(tcc.transform(tcc.parse(src), "infer-ranges"))
    assert "sum[x, y | 0 <= y, y <= x, x <= 6](inp[x, y])" in inferred


def test_the_sum_is_empty_where_no_point_has_every_access_in_bounds() -> None:
    # y + 7 <= 6 needs y <= -1, the constraints need y >= 0: no term, as sum[k] over an empty range
    src = "input inp[7, 7]\nf = sum[x, y | 0 <= x, x <= 3, 0 <= y, y <= 3](inp[x, y] * inp[y + 7, x])\n"
    inp = np.ones((7, 7))
    assert "y + 7 <= 6" in str(tcc.transform(tcc.parse(src), "infer-ranges"))
    assert tcc.run(tcc.parse(src), {"inp": inp})["f"] == 0.0
    assert tcc.compile(src)(inp=inp)["f"] == 0.0


def test_a_read_out_of_bounds_for_a_written_range_is_still_reported() -> None:
    # the constrained sum is clipped to y <= 6; x's written range is the user's word, and reads inp[7]
    src = "input inp[7]\nf = sum[x: 0..7](sum[y | 0 <= y, y <= x](inp[y]) * inp[x])\n"
    with pytest.raises(TccError, match=r"access inp\[x\] is out of bounds: x ranges over 0..7"):
        tcc.transform(tcc.parse(src), "infer-ranges")
