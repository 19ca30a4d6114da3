"""Edge cases of the L2 passes interchange, peel, reduce-in-place, unroll-jam
(from an adversarial review).

Each program is lowered with the default L2 pipeline (``VerifyEach`` on), run
by the bounds-checking L2 evaluator of ``tests/loop_eval.py`` and compared
with the reference interpreter; a few are also compiled.  The L2 evaluator is
used for the failing cases on purpose: the compiled code of the strip-mining
bug writes out of bounds and can corrupt the test process's heap.

The first three groups were bugs the review found in ``unroll-jam`` (now
fixed); the comment above each says what went wrong.
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

import tcc
from compare import assert_matches_interpreter
from tcc.instruments import VerifyEach
from tcc.reference.interpreter import evaluate
from tcc.ir.loops_verifier import verify_loops
from tcc.pipeline import run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop_eval import run_loops  # noqa: E402

L2 = "infer-ranges,lower-loops,interchange,hoist,peel,reduce-in-place,unroll-jam,fuse,reuse-buffers,parallel"


def l2_matches(program, sizes, passes=L2, seed=0):
    """Lower through ``passes`` once (verifying after each), run on the L2 evaluator and
    compare with the interpreter for ``sizes`` (one dict or a list of them)."""
    if isinstance(program, str):
        program = tcc.parse(program)
    inferred = tcc.transform(program, "infer-ranges")
    loops = run_pipeline(program, passes, instruments=[VerifyEach()])
    verify_loops(loops)
    for sz in [sizes] if isinstance(sizes, dict) else sizes:
        rng = np.random.default_rng(seed)
        inputs = {
            d.name: rng.uniform(0.25, 0.75, tuple(int(e.evaluate(sz)) for e in d.extents)) for d in inferred.inputs
        }
        want = evaluate(inferred, inputs, np.float64)
        got = run_loops(loops, inputs, sizes=sz)
        for name, ref in want.items():
            if name not in got:
                continue
            assert got[name].shape == ref.shape, name
            if ref.size:
                err = np.max(np.abs(got[name] - ref)) / max(np.max(np.abs(ref)), 1e-300)
                assert err <= 1e-10, f"{name}: relative error {err:.3e} at {sz}"


def sweep(program, names, values, passes=L2):
    l2_matches(program, [dict(zip(names, vals)) for vals in itertools.product(values, repeat=len(names))], passes)


# ---------------------------------------------------------------------------
# Bugs
# ---------------------------------------------------------------------------

# peel splits off i in 0..min(1, n - 1) and leaves the interior `for i in 2..n - 1`
# (bounds folded to single terms), which unroll-jam's strip-mining then takes:
# main `for i_s in 0..(n - 2) // 4 - 1`, remainder `for i in 4*((n - 2) // 4) + 2..n - 1`.
# Was: for n = 0 or 1 the trip count n - 2 is negative, (n - 2) // 4 = -1, and
# the remainder kernel ran i = -2, -1 (and 0 again, with the interior's plain
# inner bound): out-of-bounds stores.  The remainder now starts at
# max(lo, lo + 4 * strips).
STRIP_NEG = "input x[m], w[n]\noutput y[n]\ny[i] = sum[k: max(0, 2 - i)..m - 1](x[k] * w[i])\n"



@pytest.mark.parametrize("n", [0, 1])
def test_strip_mining_negative_trip_count(n):
    l2_matches(STRIP_NEG, {"n": n, "m": 3})
    assert_matches_interpreter(tcc.parse(STRIP_NEG), {"n": n, "m": 3})


def test_strip_mining_negative_trip_count_bisect():
    # without unroll-jam the same sizes are fine; with it, n >= 2 is fine too
    l2_matches(STRIP_NEG, [{"n": n, "m": 3} for n in (0, 1)], passes=L2.replace("unroll-jam,", ""))
    l2_matches(STRIP_NEG, [{"n": n, "m": 3} for n in range(2, 11)])


# Was: the strip variable "i_s" could take a size's name, and the band
# `for k in 0..i_s - 1` then read the strip counter.  New names now avoid
# buffers, sizes and every name the kernel binds.
SIZE_COLLISION = "input x[n, i_s]\noutput y[n]\ny[i] = sum[k](x[i, k])\n"



def test_strip_variable_collides_with_size_name():
    l2_matches(SIZE_COLLISION, {"n": 9, "i_s": 5})
    assert_matches_interpreter(tcc.parse(SIZE_COLLISION), {"n": 9, "i_s": 5})


# Was: copies' scalars were renamed NAME_u0, NAME_u1, ... without checking the
# names, so copy 1's accumulator shadowed an input scalar called y_acc_u1.
SCALAR_COLLISION = "input x[n, m], y_acc_u1\noutput y[n]\ny[i] = sum[k](x[i, k]) * y_acc_u1\n"



def test_unrolled_scalar_names_collide_with_buffer():
    l2_matches(SCALAR_COLLISION, {"n": 9, "m": 5})
    assert_matches_interpreter(tcc.parse(SCALAR_COLLISION), {"n": 9, "m": 5})


# ---------------------------------------------------------------------------
# Checked and fine (things the existing tests do not cover)
# ---------------------------------------------------------------------------

PEEL_CASES = [
    # negative coefficient with stride 2: the interior bound needs a ceiling division of a negative number
    "input x[m], w[n]\noutput y[n]\ny[i] = sum[k: max(0, -2*i + m - 3)..m - 1](x[k] * w[i])\n",
    # L from the upper bound, U from the lower one, coefficients 2 and 3
    "input x[m], w[n]\noutput y[n]\ny[i] = sum[k: max(0, 2*i - n)..min(m - 1, 3*i - 2)](x[k] * w[i])\n",
    # two outer-dependent terms in one bound, one giving L and one U
    "input x[m], w[n]\noutput y[n]\ny[i] = sum[k: max(0, i - 2, 1 - i)..m - 1](x[k] * w[i])\n",
    # flipped reads x[n - 1 - k] and a window in n - 1 - i
    "input x[n]\noutput y[n]\ny[i] = sum[k: max(0, n - 3 - i)..min(n - 1, n + 1 - i)](x[n - 1 - k])\n",
    # two windowed sums in one kernel
    "input x[m], w[n]\noutput y[n]\ny[i] = sum[k: max(0, i - 2)..m - 1](x[k]) * sum[k: 0..min(m - 1, i)](x[k] * w[i])\n",
    # where guard around the windowed sum
    "input x[m], w[n]\noutput y[n]\ny[i] = where(i >= 1, sum[k: max(0, i - 2)..m - 1](x[k] * w[i]), 0)\n",
]


@pytest.mark.parametrize("src", PEEL_CASES)
def test_peel_bounds_in_every_size_regime(src):
    names = [s for s in ("n", "m") if s in src.split("\n")[0]]
    sweep(src, names, range(0, 7))


def test_peel_floor_division_compiled():
    # the head/interior split uses (m - 2) // 2 and the like: compiled floor division of negatives
    src = "input x[m], w[n]\noutput y[n]\ny[i] = sum[k: max(0, -2*i - 3 + m)..min(m - 1, 3*i - m)](x[k] * w[i])\n"
    for n, m in [(0, 0), (1, 0), (3, 1), (4, 2), (7, 5), (2, 7)]:
        assert_matches_interpreter(tcc.parse(src), {"n": n, "m": m})


REDUCE_CASES = [
    # the tail reads the accumulator twice
    "input a[p, m], b[p, n]\noutput d[n, m]\nd[j, k] = exp(sum[i](a[i, k] * b[i, j])) * sum[i](a[i, k] * b[i, j]) + 1\n",
    # where guards outside and inside the sum
    "input a[p, m], b[p, n]\noutput d[n, m]\nd[j, k] = where(j <= k, sum[i](a[i, k] * b[i, j]), 1)\n",
    "input a[p, m], b[p, n]\noutput d[n, m]\nd[j, k] = sum[i](where(i <= j, a[i, k] * b[i, j], 0))\n",
    # three output loops
    "input a[p, m], b[p, n]\noutput d[n, n, m]\nd[l, j, k] = sum[i](a[i, k] * b[i, j] * b[i, l])\n",
    # the reduction's bounds depend on the output loop (must be refused)
    "input a[p, m], b[p, n]\noutput d[n, m]\nd[j, k] = sum[i: 0..min(p - 1, k)](a[i, k] * b[i, j])\n",
    # nested sums
    "input a[p, m], b[p, n]\noutput d[n, m]\nd[j, k] = sum[i](a[i, k] * sum[q](b[q, j] * a[q, k]))\n",
]


@pytest.mark.parametrize("src", REDUCE_CASES)
def test_reduce_in_place_and_its_gradient(src):
    sweep(src, ["n", "m", "p"], [0, 1, 3])
    grad = tcc.grad(src, of="d", wrt="a,b")
    l2_matches(grad, [{"n": 1, "m": 3, "p": 2}, {"n": 3, "m": 1, "p": 3}, {"n": 2, "m": 3, "p": 1}])


def test_reduce_in_place_compiled():
    src = REDUCE_CASES[0]
    text = str(run_pipeline(tcc.parse(src), "infer-ranges,lower-loops,interchange,hoist,peel,reduce-in-place"))
    assert "d[j, k] += a[i, k] * b[i, j]" in text  # the pass fired
    assert_matches_interpreter(tcc.parse(src), {"n": 3, "m": 5, "p": 4})


@pytest.mark.parametrize("N", range(0, 10))
def test_unroll_jam_constant_trip_counts(N):
    # strip-mined kernel loops and unrolled inner loops with 0..9 iterations
    l2_matches(f"input x[{N}, m]\noutput y[{N}]\ny[i] = sum[k](x[i, k])\n", {"m": 3})
    if N:
        l2_matches(f"input x[p, m, {N}]\noutput y[p, {N}]\ny[j, i] = sum[k](x[j, k, i] * x[j, k, 0])\n", {"m": 3, "p": 2})


def test_fuse_after_strip_mining_with_cross_strip_reads():
    # B's strips read A[i - 1], written by the previous strip of A: fuse must not merge them
    src = ("input x[n, m]\noutput A[n], B[n]\nA[i] = sum[k](x[i, k])\n"
           "B[i] = sum[k](x[i, k]) * where(i >= 1, A[i - 1], 0)\n")
    sweep(src, ["n", "m"], [0, 1, 4, 5, 9])
    src2 = "input x[n, m]\noutput A[n], B[n]\nA[i] = sum[k](x[i, k])\nB[i] = sum[k](x[i, k] * A[n - 1 - i])\n"
    sweep(src2, ["n", "m"], [0, 3, 8])


def test_interchange_with_lets_and_the_gradient():
    src = "input a[p, m], b[m, p]\nf = sum[i, k](exp(a[i, k] * b[k, i]) * sin(a[i, k] + b[k, i]) + exp(a[i, k] * b[k, i]))\n"
    sweep(src, ["m", "p"], [0, 2, 3])
    sweep(tcc.grad(src, of="f", wrt="a,b"), ["m", "p"], [2, 3])
