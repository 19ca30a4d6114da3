"""``fuse-inner``: neighbouring loops of one body with equal ranges become one loop.

Checked for what it prints (the attention and layer-norm gradients' row
bodies), for each refusal on hand-written loop programs (a scalar the first
loop completes, a read at another index, two sums into one scalar, other
ranges, a ``let`` or a dependent ``local`` between), against the reference
interpreter (float32 and float64, one and two threads, given outputs), and
on hypothesis-generated row bodies run by the loop evaluator before and
after the pass.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tcc
from compare import assert_compiled_matches
from family_sources import ATTENTION, LAYERNORM
from loop_eval import run_loops
from tcc.ir.loops_parser import parse_loop_program
from tcc.ir.loops_verifier import verify_loops
from tcc.passes.fuse_inner import fuse_inner


def _attention(B=8, I=32, J=64, D=16):
    return tcc.grad(tcc.parse(ATTENTION.format(B=B, I=I, J=J, D=D)), of="P", wrt=["Q", "K"], value=True)


def _body(text: str, start: str) -> str:
    at = text.index(start)
    return text[at: text.index("\n}\n", at)]


def test_the_attention_row_body_walks_each_row_three_times() -> None:
    text = str(tcc.compile(_attention(), results=["P", "dQ", "dK"]).loops)
    body = _body(text, "kernel e_s_")
    assert body.count("for j in 0..63 {") + body.count("for de_2 in 0..63 {") == 3
    assert "let e_v = exp(0.125 * e_mm[b, i, j])" in body and "s_acc += e_v" in body
    assert "let de_v = dP[b, i, de_2] / s_acc + ds_acc_s" in body   # de forwarded ...
    assert "de[" not in text                                           # ... and never stored


def test_the_layernorm_gradient_fuses_y_with_dr_and_dx_with_the_partial_rows() -> None:
    program = tcc.grad(tcc.parse(LAYERNORM.format(A=256, C=64)), of="Y", wrt=["X", "g", "b"], value=True)
    body = _body(str(tcc.compile(program, results=["Y", "dX", "dg", "db"]).loops), "kernel mu_")
    assert body.count("for c in 0..63 {") + body.count("for dmu_z0 in 0..63 {") + body.count("for dX_1 in 0..63 {") == 5
    y = body[body.index("Y[p + 32*t, c] ="):]
    assert y.splitlines()[1].strip().startswith("dr_acc += ")
    dx = body[body.index("dX[p + 32*t, dX_1] ="):]
    assert dx.splitlines()[1].strip().startswith("dg_part[p, dX_1] += ")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_matches_the_interpreter(dtype: str, threads: int) -> None:
    rng = np.random.default_rng(4)
    program = _attention(3, 5, 7, 2)
    inputs = {"Q": rng.uniform(-1, 1, (3, 5, 2)), "K": rng.uniform(-1, 1, (3, 7, 2)), "dP": rng.uniform(-1, 1, (3, 5, 7))}
    inputs = {k: v.astype(dtype) for k, v in inputs.items()}
    for given_outputs in (False, True):
        assert_compiled_matches(program, inputs, dtype, threads, results=["P", "dQ", "dK"], given_outputs=given_outputs)
        assert_compiled_matches(program, inputs, dtype, threads, given_outputs=given_outputs)


BODY = """input x[3, 6]
output y[3, 6], z[3, 6], s[3]

kernel k {{
  for a in 0..2 {{
{stmts}
  }}
}}
"""
FIRST = "    local acc = 0\n    for c in 0..5 {\n      y[a, c] = x[a, c] * 2\n      acc += x[a, c]\n    }"


@pytest.mark.parametrize("second, fused, why", [
    ("    for c in 0..5 {\n      z[a, c] = y[a, c] + 1\n    }\n    s[a] = acc", True, "same-index read: forwarded"),
    ("    local acc2 = 0\n    for c in 0..5 {\n      acc2 += y[a, c]\n    }\n    s[a] = acc + acc2", True,
     "a local between moves before the first loop"),
    ("    for c in 0..5 {\n      z[a, c] = y[a, c] * acc\n    }\n    s[a] = acc", False, "reads the first loop's sum"),
    ("    for c in 0..4 {\n      z[a, c] = y[a, c + 1]\n    }\n    s[a] = acc", False, "reads another iteration's element"),
    ("    for c in 0..5 {\n      acc += z[a, c]\n      z[a, c] = 1\n    }\n    s[a] = acc", False, "two sums into acc"),
    ("    for c in 0..4 {\n      z[a, c] = 1\n    }\n    s[a] = acc", False, "another range"),
    ("    let two = acc * 2\n    for c in 0..5 {\n      z[a, c] = x[a, c]\n    }\n    s[a] = two", False, "a let between"),
    ("    local acc2 = acc\n    for c in 0..5 {\n      acc2 += z[a, c]\n      z[a, c] = 1\n    }\n    s[a] = acc2", False,
     "a local whose initial value the first loop makes"),
])
def test_each_condition(second: str, fused: bool, why: str) -> None:
    program = parse_loop_program(BODY.format(stmts=FIRST + "\n" + second))
    out = fuse_inner(program)
    assert (out != program) is fused, why
    verify_loops(out)
    x = np.random.default_rng(1).standard_normal((3, 6))
    want, got = run_loops(program, {"x": x}), run_loops(out, {"x": x})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-14, equal_nan=True)


_STMT = st.sampled_from([
    "{w}[a, c] = x[a, c] * {k}",
    "{w}[a, c] = {r}[a, c] + x[a, c]",
    "{w}[a, c] = {r}[a, 5 - c]",
    "acc{k} += {r}[a, c]",
    "{w}[a, c] = {r}[a, c] * acc{k}",
])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loops=st.lists(st.tuples(_STMT, st.sampled_from("yz"), st.sampled_from("xyz"), st.integers(0, 1)),
                      min_size=2, max_size=5))
def test_random_row_bodies_compute_what_they_did(loops) -> None:
    lines = ["    local acc0 = 0", "    local acc1 = 0"]
    for stmt, w, r, k in loops:
        lines.append("    for c in 0..5 {\n      " + stmt.format(w=w, r=r, k=k) + "\n    }")
    lines.append("    s[a] = acc0 + acc1")
    program = parse_loop_program(BODY.format(stmts="\n".join(lines)))
    out = fuse_inner(program)
    verify_loops(out)
    x = np.random.default_rng(2).standard_normal((3, 6))
    want, got = run_loops(program, {"x": x}), run_loops(out, {"x": x})
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-12, equal_nan=True)


def test_a_sum_of_a_forwarded_value_still_vectorises() -> None:
    # s_acc += e_v reads a let of a unit-stride load: lower-llvm looks through the let and marks the sum
    # reassoc, as it did for s_acc += e[i, j] (without it the fused loop, exp included, stayed scalar)
    f = tcc.compile("input x[4, 64]\ne[i, j] = exp(x[i, j])\ns[i] = sum[j](e[i, j])\nP[i, j] = e[i, j] / s[i]\n",
                    results=["P"])
    assert "s_acc += e_v" in str(f.loops)
    assert "fadd reassoc" in f.llvm.module
    strided = tcc.compile("input x[64, 4]\ne[i, j] = exp(x[j, i])\ns[i] = sum[j](e[i, j])\nP[i, j] = e[i, j] / s[i]\n",
                          results=["P"])
    assert "fadd reassoc" not in strided.llvm.module   # a strided load behind the let: no reassoc, as before
