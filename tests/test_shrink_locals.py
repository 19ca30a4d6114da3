"""``shrink-locals``: locals a nest writes and reads back row by row keep one row per outer iteration.

Checked for what it prints (the attention gradient's ``e`` and ``de`` become
``temp e[B, J]``; the refusals), against the reference interpreter (float32
and float64, one and two threads, given output arrays, constant and symbolic
extents including 0 and 1), and on hand-written loop programs for each
condition of the rule.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from compare import assert_compiled_matches
from family_sources import ATTENTION
from tcc.backends.builtin_targets import DEFAULT_LOOP_PIPELINE
from tcc.build import with_rematerialize
from tcc.ir.loops_parser import parse_loop_program
from tcc.passes.shrink_locals import shrink_locals

RESULTS = ["P", "dQ", "dK"]


def _grad(B="B", I="I", J="J", D="D"):
    return tcc.grad(tcc.parse(ATTENTION.format(B=B, I=I, J=J, D=D)), of="P", wrt=["Q", "K"], value=True)


def _check(program, sizes: dict, dtype: str = "float64", threads: int | None = None, given: bool = False) -> None:
    rng = np.random.default_rng(3)
    inputs = {d.name: rng.uniform(-1, 1, tuple(int(e.evaluate(sizes)) for e in d.extents)).astype(dtype)
              for d in tcc.transform(program, "infer-ranges").caller_inputs()}
    assert_compiled_matches(program, inputs, dtype, threads, results=RESULTS, given_outputs=given)


def test_the_attention_gradient_keeps_a_row_of_e_and_de() -> None:
    # without fuse-inner both e and de are written and read back in the row body
    passes = with_rematerialize(DEFAULT_LOOP_PIPELINE).replace("fuse-inner,", "")
    text = str(tcc.compile(_grad(8, 64, 32, 16), results=RESULTS, passes=passes).loops)
    assert "temp e[8, 32], de[8, 32]" in text
    assert "e[b, j] = exp(0.125 * e_mm[b, i, j])" in text
    assert "dQ_lhs[b, i, dQ_z0] = de[b, dQ_z0] * e[b, dQ_z0] * 0.125" in text
    assert "parallel for b in 0..7 {" in text             # each b has its own rows: still parallel
    assert "local e_mm[8, 64, 32]" in text                 # read by BLAS: stays
    assert "dQ_lhs[8, 64, 32]" in text                      # read by the products: stays
    # the default results= pipeline: fuse-inner forwards de, and e keeps its row
    text = str(tcc.compile(_grad(8, 64, 32, 16), results=RESULTS).loops)
    assert "temp e[8, 32]\n" in text and "de[" not in text


def test_without_results_every_local_is_returned_and_kept() -> None:
    f = tcc.compile(_grad(8, 64, 32, 16))
    assert "temp e[" not in str(f.loops)
    assert f(Q=np.ones((8, 64, 16)), K=np.ones((8, 32, 16)), dP=np.ones((8, 64, 32)))["e"].shape == (8, 64, 32)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_matches_the_interpreter(dtype: str, threads: int) -> None:
    _check(_grad(3, 5, 7, 2), {}, dtype, threads)
    _check(_grad(3, 5, 7, 2), {}, dtype, threads, given=True)


@pytest.mark.parametrize("sizes", [{"B": 1, "I": 1, "J": 1, "D": 1}, {"B": 2, "I": 3, "J": 0, "D": 2},
                                   {"B": 0, "I": 3, "J": 4, "D": 2}, {"B": 5, "I": 2, "J": 13, "D": 3}])
def test_symbolic_extents(sizes: dict) -> None:
    program = _grad()
    assert "temp e[B, J]\n" in str(tcc.compile(program, results=RESULTS).loops)
    _check(program, sizes, threads=2)


L2 = """input x[4, 5, 6]
output y[4, 5]
local t[4, 5, 6]

kernel y {{
  for a in 0..3 {{
    for b in 0..4 {{
      {first}
      local y_acc = 0
      for c in 0..5 {{
        y_acc += t[a, b, c]
      }}
      y[a, b] = y_acc{after}
    }}
  }}
}}
"""
WRITE = "for c in 0..5 {{\n        t[a, b, c] = x[a, b, c] * 2\n      }}"


@pytest.mark.parametrize("first, after, shrunk", [
    (WRITE, "", True),
    (WRITE.replace("0..5", "1..5"), "", False),                       # the row is not all written
    (WRITE.replace("t[a, b, c] = x[a, b, c] * 2", "if c > 2 {{\n          t[a, b, c] = x[a, b, c]\n        }}"),
     "", False),                                                        # written under a test
    (WRITE, "\n      t[a, b, 0] = 1", False),                          # written again after the reads
    (WRITE.replace("t[a, b, c] = x[a, b, c] * 2", "t[a, b, c] = x[a, b, c] * 2\n        y[a, b] = t[a, b, 5]"),
     "", False),                                                        # the writing loop reads the row too
    ("y[a, b] = t[a, b, 0]\n      " + WRITE, "", False),              # read before it is written
])
def test_each_condition_of_the_rule(first: str, after: str, shrunk: bool) -> None:
    program = parse_loop_program(L2.format(first=first.format(), after=after))
    out = shrink_locals(program)
    assert ("temp t[4, 6]" in str(out)) is shrunk
    if not shrunk:
        assert out == program


def test_a_local_read_by_another_kernel_stays() -> None:
    src = L2.format(first=WRITE.format(), after="") + "\nkernel z {\n  for a in 0..3 {\n    z[a] = t[a, 0, 0]\n  }\n}\n"
    src = src.replace("output y[4, 5]", "output y[4, 5], z[4]")
    program = parse_loop_program(src)
    assert shrink_locals(program) == program


def test_a_shrunk_local_computes_the_same_values() -> None:
    program = parse_loop_program(L2.format(first=WRITE.format(), after=""))
    out = shrink_locals(program)
    from loop_eval import run_loops

    x = np.random.default_rng(0).standard_normal((4, 5, 6))
    want = run_loops(program, {"x": x})["y"]
    got = run_loops(out, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_allclose(got, 2 * x.sum(2), rtol=1e-12)
