"""Bounds proofs exact for quasi-affine indices: ``e // c`` and ``e % c`` by constants.

The quotient of ``e // c`` is an integer ``q`` with ``c*q <= e <= c*q + c - 1``
(``e % c`` is ``e - c*q``).  Fourier–Motzkin over the rationals lets ``q``
take fractional values, so ``2*(o // 2) + c`` with ``o`` in 0..3 and ``c`` in
0..1 seemed to reach 4 and in-bounds reads were refused -- with a message
("ranges over 0..3, but ... has extent 4") that contradicted itself.  The
prover now decides integer feasibility exactly (the Omega test), and a
refusal prints the range really reached.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tcc
from tcc.cli.driver import main
from tcc.ir.diagnostics import TccError
from tcc.ir.fourier_motzkin import integer_feasible
from tcc.ir.index import Affine, Compare, format_affine
from tcc.ir.polyhedra import Facts, constant_range, expression_range, integer_range
from tcc.ir.verifier import verify

MAX_POOL = """input x[2, 3, 6, 6]
output y[2, 3, 3, 3]
y[n, c, i, j] = max[p: 0..1, q: 0..1](x[n, c, 2*i + p, 2*j + q])
"""

GROUP_NORM = """input x[2, 16, 3, 3]
output y[2, 16, 3, 3]
mu[n, g] = sum[u: 0..7, i: 0..2, j: 0..2](x[n, 8*g + u, i, j]) / 72
var[n, g] = sum[u: 0..7, i: 0..2, j: 0..2]((x[n, 8*g + u, i, j] - mu[n, g])**2) / 72
y[n, c, i, j] = (x[n, c, i, j] - mu[n, c // 8]) / sqrt(var[n, c // 8] + 0.00001)
"""

#: the group mean written inside the normalisation: reads x[n, 8*(c // 8) + u, a, b]
GROUP_NORM_INLINE = """input x[2, 16, 3, 3]
output y[2, 16, 3, 3]
y[n, c, i, j] = x[n, c, i, j] - sum[u: 0..7, a: 0..2, b: 0..2](x[n, 8*(c // 8) + u, a, b]) / 72
"""

GROUPED_CONV = """input x[4], w[4, 2]
output y[4]
y[o] = sum[c: 0..1](x[2 * (o // 2) + c] * w[o, c])
"""

#: the same with each window shifted one to the right: o = 2, 3 read x[4]
GROUPED_CONV_OOB = GROUPED_CONV.replace("+ c]", "+ c + 1]")


def _arrays(shapes: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape) for name, shape in shapes.items()}


@pytest.mark.parametrize(
    "src, of, shapes",
    [
        (MAX_POOL, "y", {"x": (2, 3, 6, 6), "dy": (2, 3, 3, 3)}),
        (GROUP_NORM, "y", {"x": (2, 16, 3, 3), "dy": (2, 16, 3, 3)}),
        (GROUP_NORM_INLINE, "y", {"x": (2, 16, 3, 3), "dy": (2, 16, 3, 3)}),
        (GROUPED_CONV, "y", {"x": (4,), "w": (4, 2), "dy": (4,)}),
    ],
    ids=["max-pool", "group-norm", "group-norm-inline", "grouped-conv"],
)
def test_gradient_verifies_compiles_and_matches(src: str, of: str, shapes: dict) -> None:
    """The gradient (and the forward program) pass the bounds proof, compile,
    equal the interpreter, and equal finite differences."""
    forward = tcc.parse(src)
    verify(tcc.transform(forward, "infer-ranges"))
    g = tcc.grad(forward, of=of, wrt=["x"])
    verify(tcc.transform(g, "infer-ranges"))  # refused before: "ranges over 0..5, but ... has extent 6"
    inputs = _arrays({k: v for k, v in shapes.items() if k in {t.name for t in g.inputs}})
    want = tcc.run(g, inputs)
    got = tcc.compile(g)(**inputs)
    np.testing.assert_allclose(got["dx"], want["dx"], rtol=1e-12, atol=1e-12)
    fwd_inputs = {k: v for k, v in inputs.items() if k != "dy"}
    np.testing.assert_allclose(tcc.compile(forward)(**fwd_inputs)[of], tcc.run(forward, fwd_inputs)[of], rtol=1e-12)
    assert all(r.ok for r in tcc.check(forward, of, ["x"]))


def test_grouped_conv_values() -> None:
    """The grouped dilated convolution forward program against NumPy."""
    x, w = np.arange(4.0) + 1, np.arange(8.0).reshape(4, 2)
    want = np.array([x[2 * (o // 2)] * w[o, 0] + x[2 * (o // 2) + 1] * w[o, 1] for o in range(4)])
    np.testing.assert_array_equal(tcc.compile(GROUPED_CONV)(x=x, w=w)["y"], want)
    np.testing.assert_array_equal(tcc.run(tcc.parse(GROUPED_CONV), {"x": x, "w": w})["y"], want)


def test_cli_grad_then_compile_and_check(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = tmp_path / "pool.tcc"
    src.write_text(MAX_POOL)
    assert main(["grad", "--of", "y", "--wrt", "x", str(src)]) == 0
    derived = tmp_path / "dpool.tcc"
    derived.write_text(capsys.readouterr().out)
    assert main(["compile", str(derived)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "dx[" in out
    assert main(["check", "--of", "y", "--wrt", "x", str(src)]) == 0
    assert "ok" in capsys.readouterr().out
    conv = tmp_path / "conv.tcc"
    conv.write_text(GROUPED_CONV)
    assert main(["compile", str(conv)]) == 0


def test_out_of_bounds_quasi_affine_access_is_refused_with_a_reached_range(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(TccError) as info:
        tcc.compile(GROUPED_CONV_OOB)
    assert info.value.message == (
        "access x[c + 2*(o // 2) + 1] is out of bounds: c + 2*(o // 2) + 1 ranges over 1..4, but 'x' has extent 4"
    )
    path = tmp_path / "oob.tcc"
    path.write_text(GROUPED_CONV_OOB)
    assert main(["compile", str(path)]) != 0
    err = capsys.readouterr().err
    assert "error: access x[c + 2*(o // 2) + 1] is out of bounds" in err and "Traceback" not in err


def test_range_is_the_integer_one_not_the_rational_one() -> None:
    """The printed range is the one reached: ``2*c + 3*((2*o - c + 2) // 4) + 1``
    with o in 0..5, c in 0..2 takes 1..11; Fourier–Motzkin's real bound is 12
    (a fractional quotient), which no o, c gives."""
    src = ("input x[11], w[6, 3]\noutput y[6]\n"
           "y[o] = sum[c: 0..2](x[2*c + 3*((2*o - c + 2) // 4) + 1] * w[o, c])\n")
    with pytest.raises(TccError) as info:
        tcc.compile(src)
    assert info.value.message.endswith("ranges over 1..11, but 'x' has extent 11")
    tcc.compile(src.replace("x[11]", "x[12]"))  # and with one more element it is in bounds
    # o in 0..1, c in 0..1: the quotient of o // 2 is 0, the largest value 2 (rationally 3)
    f = Facts().with_range("o", [Affine.constant(0)], [Affine.constant(1)]) \
        .with_range("c", [Affine.constant(0)], [Affine.constant(1)])
    e = Affine.var("o").floordiv(2) * 2 + Affine.var("c") + 1
    assert integer_range(f, e, 1, 3) == (1, 2)


def test_a_range_over_left_out_conditions_is_a_may() -> None:
    """``o != 3`` is not convex and is left out of the facts: the range over
    the rest is a superset, and the message says so."""
    with pytest.raises(TccError) as info:
        tcc.compile("input x[4]\noutput y[4]\ny[o] = where(o != 3 and o >= 0, x[o + 1], 0)\n")
    assert info.value.message == (
        "access x[o + 1] may be out of bounds: o + 1 may range over 1..4, but 'x' has extent 4"
    )


def test_symbolic_extent_with_a_quotient() -> None:
    """``x[2*(o // 2) + c]`` with extent ``2*m``: in bounds for every m (the
    quotient is at most m - 1); with extent ``n`` it is not for odd n."""
    even = "input x[2*m], w[2*m, 2]\noutput y[2*m]\ny[o] = sum[c: 0..1](x[2 * (o // 2) + c] * w[o, c])\n"
    x, w = np.arange(6.0), np.ones((6, 2))
    np.testing.assert_array_equal(tcc.compile(even)(x=x, w=w)["y"], tcc.run(tcc.parse(even), {"x": x, "w": w})["y"])
    odd = "input x[n], w[n, 2]\noutput y[n]\ny[o] = sum[c: 0..1](x[2 * (o // 2) + c] * w[o, c])\n"
    with pytest.raises(TccError, match=r"access x\[c \+ 2\*\(o // 2\)\] may be out of bounds"):
        tcc.compile(odd)
    # with n even by assumption it is in bounds again
    tcc.compile("input x[n], w[n, 2]\noutput y[n]\nassume n % 2 == 0\n"
                "y[o] = sum[c: 0..1](x[2 * (o // 2) + c] * w[o, c])\n")


# ---------------------------------------------------------------------------
# The prover against brute force
# ---------------------------------------------------------------------------

NAMES = ("i", "j")


@st.composite
def quasi_affine(draw: st.DrawFn, depth: int = 2) -> Affine:
    """A random index expression in i, j: affine terms, ``// d`` and ``% d`` of
    sub-expressions (nested, of several variables, with negative numerators)."""
    e = Affine.constant(draw(st.integers(-4, 4)))
    for name in NAMES:
        e = e + Affine.var(name, draw(st.integers(-3, 3)))
    if depth > 0:
        for _ in range(draw(st.integers(0, depth))):  # at most 2 + 2*1 atoms: small, as derived indices are
            inner = draw(quasi_affine(depth - 1))
            d = draw(st.integers(2, 4))
            atom = inner.floordiv(d) if draw(st.booleans()) else inner.mod(d)
            e = e + atom * draw(st.sampled_from([-2, -1, 1, 2, 3]))
    return e


def _box_facts(box: dict[str, tuple[int, int]]) -> Facts:
    f = Facts()
    for name, (lo, hi) in box.items():
        f = f.with_range(name, [Affine.constant(lo)], [Affine.constant(hi)])
    return f


boxes = st.fixed_dictionaries({n: st.tuples(st.integers(-4, 3), st.integers(0, 3)) for n in NAMES}) \
    .map(lambda d: {n: (lo, lo + w) for n, (lo, w) in d.items()})


@settings(max_examples=120, deadline=None)
@given(quasi_affine(), boxes)
def test_prover_range_is_the_enumerated_one(e: Affine, box: dict) -> None:
    values = [e.evaluate(dict(zip(NAMES, pt))) for pt in itertools.product(*(range(lo, hi + 1) for lo, hi in (box[n] for n in NAMES)))]
    lo, hi = min(values), max(values)
    facts = _box_facts(box)
    rng = expression_range(facts, e, [])
    if rng is not None:  # None: the elimination would exceed MAX_ROWS (deeply nested atoms)
        real_lo, real_hi = max(a.const for a in rng[0]), min(a.const for a in rng[1])
        assert real_lo <= lo and hi <= real_hi  # Fourier–Motzkin's real bounds: a superset
    assert constant_range(facts, e) == (lo, hi)  # the integer ones: exact
    # an access over exactly this range is proved in bounds, and one a step narrower is not
    assert facts.implies(Compare(">=", e, Affine.constant(lo))) and facts.implies(Compare("<=", e, Affine.constant(hi)))
    assert not facts.implies(Compare("<=", e, Affine.constant(hi - 1)))
    assert not facts.implies(Compare(">=", e, Affine.constant(lo + 1)))


@settings(max_examples=25, deadline=None)
@given(quasi_affine(depth=1), boxes)
def test_program_reading_exactly_its_range_is_accepted(e: Affine, box: dict) -> None:
    """Through the language: ``y[a, b] = x[e - min]`` with ``x`` as long as the
    range is accepted; one element shorter, it is refused with the true range."""
    env_pts = list(itertools.product(*(range(lo, hi + 1) for lo, hi in (box[n] for n in NAMES))))
    values = [e.evaluate(dict(zip(NAMES, pt))) for pt in env_pts]
    lo, hi = min(values), max(values)
    shifted = e.substitute({n: Affine.var(n) + box[n][0] for n in NAMES}) - lo
    ext = hi - lo + 1
    wi, wj = (box[n][1] - box[n][0] + 1 for n in NAMES)
    src = f"input x[{ext}]\noutput y[{wi}, {wj}]\ny[i, j] = x[{format_affine(shifted)}]\n"
    verify(tcc.transform(src, "infer-ranges"))
    if ext > 1:
        with pytest.raises(TccError) as info:
            verify(tcc.transform(src.replace(f"x[{ext}]", f"x[{ext - 1}]"), "infer-ranges"))
        assert f"ranges over 0..{ext - 1}, but 'x' has extent {ext - 1}" in info.value.message


def test_omega_test_on_integer_gaps() -> None:
    """Systems with real but no integer points, and the converse, decided exactly."""
    # 2 <= 3x <= 4 (x = 2/3..4/3): x = 1
    assert integer_feasible([], [({"x": 3}, -2), ({"x": -3}, 4)]) is True
    # 1 <= 3x <= 2: no integer x
    assert integer_feasible([], [({"x": 3}, -1), ({"x": -3}, 2)]) is False
    # 2x + 4y == 1: no integer solution (gcd)
    assert integer_feasible([({"x": 2, "y": 4}, -1)], []) is False
    # 3x + 5y == 1 with 0 <= x, y <= 5: x = 2, y = -1 is outside; no point in the box
    box = [({v: 1}, 0) for v in "xy"] + [({v: -1}, 5) for v in "xy"]
    assert integer_feasible([({"x": 3, "y": 5}, -1)], box) is False
    assert integer_feasible([({"x": 3, "y": 5}, -13)], box) is True  # x = 1, y = 2
    # the Omega test's dark-shadow gap: 27 <= 11x + 13y <= 45, -10 <= 7x - 9y <= 4 has no integer point
    rows = [({"x": 11, "y": 13}, -27), ({"x": -11, "y": -13}, 45), ({"x": 7, "y": -9}, 10), ({"x": -7, "y": 9}, 4)]
    assert integer_feasible([], rows) is False
