"""Zero fills of fresh results are skipped: the runtime allocates them zeroed (tcc.backends.zero_fill)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tcc
from compare import assert_matches_interpreter
from tcc.backends.zero_fill import zero_fills
from tcc.reference.interpreter import evaluate
from tcc.ir.loops_parser import parse_loop_program

ROOT = Path(__file__).resolve().parent.parent
DIAG = "input x[n]\noutput f[n, n]\nf[i, j] = where(i == j, exp(x[i]), 0)\n"


@pytest.mark.parametrize("n", [0, 1, 2, 7])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_guarded_result_is_allocated_zeroed_and_its_fill_skipped(n, threads):
    compiled = tcc.compile(DIAG, threads=threads)
    assert compiled.executable.zero_fills == {"f_fill": "f"}
    assert_matches_interpreter(DIAG, {"n": n}, threads=threads)


def test_a_given_output_is_still_filled():
    compiled = tcc.compile(DIAG)
    x = np.linspace(-1.0, 1.0, 6)
    out = np.full((6, 6), np.nan)
    compiled(x=x, f=out)
    again = compiled(x=x)["f"]  # and a fresh one after it: zeroed memory, not the last call's
    for f in (out, again):
        np.testing.assert_array_equal(f - np.diag(np.diag(f)), 0.0)  # off the diagonal: exactly 0
        np.testing.assert_allclose(np.diag(f), np.exp(x), rtol=1e-15)


def test_the_matrix_factorization_hessian_skips_its_fill():
    h = tcc.hessian(str(ROOT / "examples" / "matrix_factorization.tcc"), of="f", wrt="U")
    assert h.compiled.executable.zero_fills == {"dU2_fill": "dU2"}
    rng = np.random.default_rng(2)
    n, r = 9, 3
    arrays = {"T": rng.standard_normal((n, n)), "M": (rng.random((n, n)) < 0.5).astype(float),
              "U": rng.standard_normal((n, r)), "V": rng.standard_normal((n, r))}
    want = evaluate(tcc.transform(h.program, "infer-ranges"), arrays)["dU2"]
    np.testing.assert_allclose(h(**arrays), want, rtol=1e-12, atol=1e-12)


FILL = """# tcc loops
sizes n
input x[n]
output f[n, n]
{temps}
kernel first {{
{first}
}}

kernel f_fill {{
  for i in {lo}..n - 1 {{
    for j in 0..n - 1 {{
      {target}[i, j] = {value}
    }}
  }}
}}
"""


@pytest.mark.parametrize("case,expected", [
    ({}, {"f_fill": "f"}),
    ({"lo": "1"}, {}),                                   # not every element
    ({"value": "1"}, {}),                                # not zero
    ({"first": "  for i in 0..n - 1 {\n    f[i, i] = x[i]\n  }"}, {}),  # not the first writer
    ({"target": "t", "temps": "temp t[n, n]"}, {}),     # a temporary may share its storage
])
def test_what_counts_as_a_zero_fill(case, expected):
    fields = {"lo": "0", "value": "0", "target": "f", "temps": "",
              "first": "  for i in 0..n - 1 {\n    x2 = 0\n  }"} | case
    fields["first"] = fields["first"] if "first" in case else "  for i in 0..0 {\n  }"
    text = FILL.format(**fields)
    program = parse_loop_program(text)
    assert zero_fills(program) == expected
