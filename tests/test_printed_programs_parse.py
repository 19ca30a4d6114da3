"""Every program tcc prints parses back to the same program.

Derivatives carry integer quantities into values: the quotient of a strided
read's inverse (``cos(k)`` of ``x[2*k]`` becomes ``cos((dx_0 // 2))``) and
the entries of index arrays (``emb[tok[i], 0] * i`` becomes ``... *
(tok_perm[i_p])``).  The parser reads both in values, so ``tcc grad`` of a
``tcc grad`` works, and a user may write them too.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tcc
from tcc.ir.diagnostics import TccError

STRIDED_VALUE = "input x[8]\ny[k] = x[2 * k] * cos(k)\n"
GATHER_VALUE = "index tok[n] < v\ninput emb[v, 3]\ny[i] = emb[tok[i], 0] * i\n"


def roundtrips(program: object) -> None:
    text = str(program)
    assert str(tcc.parse(text)) == text


@pytest.mark.parametrize("src,wrt", [(STRIDED_VALUE, "x"), (GATHER_VALUE, "emb")], ids=["quotient", "index-array"])
def test_second_derivative_through_the_cli(tmp_path, src: str, wrt: str) -> None:  # noqa: ANN001
    f = tmp_path / "f.tcc"
    f.write_text(src)
    g = tmp_path / "g.tcc"
    tcc_cli = [sys.executable, "-m", "tcc"]
    first = subprocess.run([*tcc_cli, "grad", str(f), "--of", "y", "--wrt", wrt, "-o", str(g)], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    roundtrips(tcc.parse(g.read_text()))
    second = subprocess.run([*tcc_cli, "grad", str(g), "--of", "d" + wrt, "--wrt", wrt], capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert "error" not in second.stderr


def test_parsed_derivatives_compute_what_the_derived_ones_do() -> None:
    rng = np.random.default_rng(0)
    for src, wrt, data in [
        (STRIDED_VALUE, "x", dict(x=rng.random(8), dy=rng.random(4))),
        (GATHER_VALUE, "emb", dict(tok=np.array([2, 0, 2, 1, 4]), emb=rng.random((5, 3)), dy=rng.random(5))),
    ]:
        g = tcc.grad(tcc.parse(src), of="y", wrt=[wrt])
        reparsed = tcc.parse(str(g))
        want = tcc.run(g, data)["d" + wrt]
        assert np.array_equal(tcc.compile(reparsed)(**data)["d" + wrt], want)
        assert np.array_equal(tcc.run(reparsed, data)["d" + wrt], want)


def test_integer_values_a_user_writes() -> None:
    src = ("index tok[n] < v\ninput emb[v, 3], w[n]\n"
           "y[i] = w[i] * tok[i] + emb[tok[i], 1] * (tok[i] // 2) - (2 * i + 1) % 3 * w[i]\n")
    p = tcc.parse(src)
    roundtrips(p)
    tok = np.array([3, 0, 2, 1, 3, 3])
    emb, w = np.random.default_rng(1).random((4, 3)), np.random.default_rng(2).random(6)
    i = np.arange(6)
    want = w * tok + emb[tok, 1] * (tok // 2) - (2 * i + 1) % 3 * w
    assert np.allclose(tcc.compile(p)(tok=tok, emb=emb, w=w)["y"], want, rtol=1e-14)
    assert np.allclose(tcc.run(p, dict(tok=tok, emb=emb, w=w))["y"], want, rtol=1e-14)
    for r in tcc.check(p, "y", ["emb", "w"], sizes=dict(n=6, v=4)):
        assert r.ok, r


@pytest.mark.parametrize("src,message", [
    ("input x[4]\ny[i] = x[i] // 2\n", "'//' takes integers (indices, sizes, integer literals): use '/' to divide values"),
    ("input x[4]\ny[i] = (i + 0.5) % 2\n", "'%' takes integers (indices, sizes, integer literals): use '/' to divide values"),
    ("input x[4]\ny[i] = x[i] * (i // 0)\n", "the divisor of '//' must be a positive integer constant"),
    ("input x[4]\ny[i] = x[i] * (i % x[0])\n", "the divisor of '%' must be a positive integer constant"),
])
def test_division_of_values_is_a_located_error(src: str, message: str) -> None:
    with pytest.raises(TccError) as info:
        tcc.parse(src)
    assert info.value.message == message and info.value.loc.line == 2


@settings(max_examples=40)
@given(stride=st.integers(2, 4), offset=st.integers(0, 3), fn=st.sampled_from(["cos", "exp", "sin"]),
       coeff=st.integers(-2, 3))
def test_strided_derivatives_print_programs_that_parse(stride: int, offset: int, fn: str, coeff: int) -> None:
    n = 12
    src = f"input x[{n * stride + offset}]\ny[k] = x[{stride} * k + {offset}] * {fn}(0.1 * k + {coeff} * k)\noutput y[{n}]\n"
    g = tcc.grad(tcc.parse(src), of="y", wrt=["x"])
    roundtrips(g)
    gg = tcc.grad(tcc.parse(str(g)), of="dx", wrt=["dy"])
    roundtrips(gg)


# -- value comparisons whose left side reads as an index expression (issue 36) ------------------
#: ``where(L op R, ...)`` with ``L`` an index expression (a size, ``i - i``, a literal) and ``R``
#: starting like one (``3 / s``, ``1 / 2``, ``3 ** 2``): the comparison is of values, because it
#: does not end where the index comparison ``L op 3`` would (docs/language.md, "Conditions")
VALUE_AFTER_INDEX = [
    ("n < 3 / s", lambda n, i, s: n < 3 / s),
    ("i - i < 1 / 2", lambda n, i, s: 0 < 0.5),
    ("1 <= 3 ** 2 * s", lambda n, i, s: 1 <= 9 * s),
    ("i >= 2 * s + 1", lambda n, i, s: i >= 2 * s + 1),
    ("i - 1 != n / 4", lambda n, i, s: i - 1 != n / 4),
    ("i < 3 / s and i >= 1", lambda n, i, s: (i < 3 / s) & (i >= 1)),
    ("not (2 * i > 7 ** 0.5)", lambda n, i, s: ~(2 * i > 7 ** 0.5)),
]


@pytest.mark.parametrize("cond,want", VALUE_AFTER_INDEX, ids=[c for c, _ in VALUE_AFTER_INDEX])
def test_value_comparison_after_an_index_lhs(cond: str, want) -> None:  # noqa: ANN001
    src = f"input x[n], s\ny[i] = where({cond}, x[i], 2 * x[i])\n"
    p = tcc.parse(src)
    roundtrips(p)
    assert str(tcc.parse(str(p))) == str(p)
    x, i = np.random.default_rng(3).random(7), np.arange(7)
    for s in (0.25, 1.5):
        expect = np.where(want(7, i, s), x, 2 * x)
        assert np.array_equal(tcc.run(p, dict(x=x, s=np.float64(s)))["y"], expect)
        assert np.array_equal(tcc.compile(p)(x=x, s=np.float64(s))["y"], expect)


def test_index_comparisons_stay_index_comparisons() -> None:
    """The same rule keeps ``where(i >= 1, x[i - 1], 0)`` an index condition: its untaken branch
    may read out of bounds, which only an index condition allows."""
    from tcc.ir.expr import Select, Where

    for cond in ("i >= 1", "(i + 1) // 2 >= 1", "i - 1 >= 0 and i < n", "(i >= 1)", "i >= 1 and (i > 3 or i < 2)"):
        p = tcc.parse(f"input x[n]\ny[i] = where({cond}, x[i - 1], 0)\n")
        assert isinstance(p.definitions[0].body, Where), cond
        roundtrips(p)
        x = np.arange(1.0, 6.0)
        assert np.array_equal(tcc.compile(p)(x=x)["y"], tcc.run(p, dict(x=x))["y"])
    assert isinstance(tcc.parse("input x[n]\ny[i] = where(not (i - i < 1 * 3), x[i], 0)\n").definitions[0].body, Where)
    assert isinstance(tcc.parse("input x[n], s\ny[i] = where(i < 3 / s, x[i], 0)\n").definitions[0].body, Select)


def test_derivative_of_a_value_comparison_after_an_index_lhs_parses() -> None:
    src = "input x[n], s\ny[i] = where(n < 3 / s, x[i] * s, x[i] ** 2)\n"
    g = tcc.grad(tcc.parse(src), of="y", wrt=["x", "s"])
    roundtrips(g)
    for r in tcc.check(src, "y", ["x", "s"], sizes=dict(n=5)):
        assert r.ok, r


@pytest.mark.parametrize("src", [
    "input x[n]\ny[i] = x[n - 1 - i] * i\n",              # i -> n - 1 - dx_0 in a value
    "input x[2 * n + 1]\ny[i] = x[2 * i + 1] * (i + 1)\n",  # a quotient plus one
    "input x[n + 2]\ny[i] = x[i + 2] * sin(0.5 * i) * -i\n",  # a negated index value
])
def test_index_values_a_pass_builds_parse_to_the_same_node(src: str) -> None:
    """A pass that substitutes into the value ``i`` builds one ``#index[n - 1 - dx_0]`` node; its text
    ``n - 1 - dx_0`` must parse to that node, not to a tree of three values that prints alike."""
    g = tcc.grad(tcc.parse(src), of="y", wrt=["x"])
    again = tcc.parse(str(g))
    assert str(again) == str(g)
    assert again == g
    assert tcc.parse("input x[n]\ny[i] = x[i] * (2 * i - n + 1)\n") == tcc.parse("input x[n]\ny[i] = x[i] * (1 - n + i * 2)\n")
