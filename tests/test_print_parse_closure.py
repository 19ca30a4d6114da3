"""Printing is closed over the whole language: every program tcc prints parses back to itself.

For random programs of tests/fuzz_programs.py (seeded, so a failure is one
seed), for their derivatives (``tcc.grad``) and for their second
derivatives (``tcc.grad`` of the parsed first derivative):

- ``print -> parse -> print`` is a fixed point (the text is stable), and
- ``parse(print(p)) == p`` structurally: the same declarations, the same
  definitions with the same bodies (nodes are hash-consed, so equal bodies
  are the same object) and the same outputs and assumptions.

The first property alone misses a printed text that parses to another
program printing the same way; the second alone misses nothing but says
less when it fails, so both are asserted, the text first.

CI runs ``CLOSURE_CI_EXAMPLES`` seeds; ``TCC_FUZZ_LONG=1`` runs
``CLOSURE_LONG_EXAMPLES``.  The generator's known-defect exclusions
(:data:`fuzz_programs.CI_EXCLUSIONS`) apply: a derivative that tcc builds
wrongly (a free index name, flag ``floor_division_of_index_array``) does not
print back either, and is the builder's defect, not the printer's.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tcc
from fuzz_programs import CI_EXCLUSIONS, generate
from tcc.ir.program import Program

CLOSURE_CI_EXAMPLES = 40
CLOSURE_LONG_EXAMPLES = 400
LONG = os.environ.get("TCC_FUZZ_LONG", "") not in ("", "0")
EXAMPLES = CLOSURE_LONG_EXAMPLES if LONG else CLOSURE_CI_EXAMPLES


def assert_prints_back(program: Program, what: str) -> Program:
    """The printed ``program`` parses to a program that prints the same text and equals it."""
    text = str(program)
    again = tcc.parse(text, filename=f"<{what}>")
    assert str(again) == text, f"{what}: the printed text parses to another text:\n{text}\n---\n{again}"
    for mine, theirs in zip(program.definitions, again.definitions):
        assert mine == theirs, f"{what}: '{mine.name}' parses to another definition:\n{text}"
    assert again == program, f"{what}: the printed program parses to another program:\n{text}"
    return again


def first_and_second(seed: int) -> None:
    """The program of ``seed``, its derivative and the derivative's own derivative print back."""
    case = generate(seed, CI_EXCLUSIONS)
    program = assert_prints_back(tcc.parse(case.text), f"program of seed {seed}")
    first = tcc.grad(program, of=case.of, wrt=case.wrt)
    parsed = assert_prints_back(first, f"derivative of seed {seed}")
    wrt = case.wrt[0]
    second = tcc.grad(parsed, of="d" + wrt, wrt=[wrt])
    assert_prints_back(second, f"second derivative of seed {seed}")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6))
def test_programs_and_their_derivatives_print_back(seed: int) -> None:
    first_and_second(seed)


def test_known_closure_cases() -> None:
    """The issue's spellings: a strided read's quotient in a value, an index-array entry as a value,
    a value comparison whose left side reads as an index expression, each to second order."""
    sources = [
        ("input x[8]\ny[k] = x[2 * k] * cos(k)\n", "x"),
        ("index tok[n] < v\ninput emb[v, 3]\ny[i] = emb[tok[i], 0] * i\n", "emb"),
        ("input x[n], s\ny[i] = where(n < 3 / s, x[i] * s, x[i] ** 2)\n", "x"),
        ("input x[n], s\ny[i] = where(i - i < 1 / 2 * s, s * x[i], x[i] * x[i])\n", "s"),
    ]
    for src, wrt in sources:
        program = assert_prints_back(tcc.parse(src), src)
        first = assert_prints_back(tcc.grad(program, of="y", wrt=[wrt]), f"d {src}")
        assert_prints_back(tcc.grad(first, of="d" + wrt, wrt=[wrt]), f"d2 {src}")
