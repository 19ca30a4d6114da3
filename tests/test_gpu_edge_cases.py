"""Edge cases of the GPU compiler parts (from an adversarial review):
``split-reduction``, ``parallel{depth}``, ``fuse{full=true}`` and the grid
lowering of ``backends/llvm/``.

Two ways of running a program are used:

* L1 programs go through ``tcc.compile(..., target="cuda-sim")`` and are
  compared with the reference interpreter (``compare.assert_matches_interpreter``):
  the exact GPU kernels run on the host, with blocks of 8 threads and at most
  3 blocks, so the grid-stride loop goes round.
* Hand-written L2 programs (shapes the L1 lowering never produces, but that
  ``.loops`` files and other pass orders can) are run before and after the
  passes by the bounds- and race-checking L2 evaluator of ``tests/loop_eval.py``,
  and after them as grid kernels on the host under several launch shapes
  (:func:`grid_runner`): one thread doing everything, and many threads going
  round the grid-stride loop in another order.

The first group is the one bug the review found in ``split-reduction`` (now
fixed); the rest are the edge cases that passed and are worth keeping.
"""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest

import tcc
from compare import assert_matches_interpreter
from tcc.backends import cpu
from tcc.backends.cuda import launch_shape
from tcc.backends.llvm import grid_band, lower_to_llvm
from tcc.instruments import VerifyEach
from tcc.ir.loops_parser import parse_loop_program
from tcc.ir.loops_verifier import verify_loops
from tcc.passes.pass_base import Level
from tcc.pipeline import run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop_eval import run_loops  # noqa: E402

BASE = "infer-ranges,lower-loops,hoist,fuse{full=true},reuse-buffers,parallel{depth=8}"
# split-reduction forced on small programs (test_compiled_properties.GPU_AGGRESSIVE)
AGGRESSIVE = BASE + ",split-reduction{threads=8 min-work=1}"
# P larger than most trip counts: many parts are empty
WIDE = BASE + ",split-reduction{threads=100000 min-work=1}"
# (threads per block, most blocks): sequential; the simulator's; odd shapes going round the grid
LAUNCHES = ((1, 1), (8, 3), (3, 5))


# ---------------------------------------------------------------------------
# Helpers for hand-written L2 programs
# ---------------------------------------------------------------------------


def grid_runner(loops, dtype="float64"):
    """Compile an L2 program's grid kernels (target cuda-sim) for the host; the result runs
    them as ``run(inputs, sizes, block, max_blocks)`` with that launch shape.

    Results and temps start as NaN, so an element no kernel wrote shows.
    """
    module = cpu.optimize(lower_to_llvm(loops, dtype, "cuda-sim", reassociate="never"), 3)
    executable = cpu.jit(module)

    def run(inputs, sizes, block=8, max_blocks=3):
        arrays = {}
        for b in loops.buffers:
            if b.role == "input":
                arrays[b.name] = np.ascontiguousarray(inputs[b.name], dtype=dtype)
            else:
                arrays[b.name] = np.full(tuple(int(e.evaluate(sizes)) for e in b.shape), np.nan, dtype=dtype)
        ptrs = (ctypes.c_void_p * max(1, len(loops.buffers)))(*[arrays[b.name].ctypes.data for b in loops.buffers])
        size_vals = (ctypes.c_int64 * max(1, len(loops.sizes)))(*[sizes[s] for s in loops.sizes])
        for entry, kernel in zip(executable.kernels, loops.kernels):
            blocks, threads = launch_shape(grid_band(kernel), sizes, block, max_blocks)
            if blocks:
                entry.fn(ptrs, size_vals, blocks, threads)
        return {b.name: arrays[b.name] for b in loops.by_role("output", "local")}

    return run


def random_l2_inputs(loops, sizes, seed=0):
    rng = np.random.default_rng(seed)
    return {
        b.name: rng.uniform(0.25, 0.75, tuple(int(e.evaluate(sizes)) for e in b.shape)) for b in loops.by_role("input")
    }


def same(got, want):
    """Equal up to rounding, NaN (never written) where the reference has NaN."""
    nan = np.isnan(want)
    return np.array_equal(nan, np.isnan(got)) and np.allclose(got[~nan], want[~nan], rtol=1e-12, atol=1e-12)


def l2_transform_matches(src, passes, sizes_list=({},), launches=LAUNCHES):
    """Run ``passes`` on the L2 program ``src`` (verifying after each) and compare the result,
    on the L2 evaluator and as grid kernels, with the L2 evaluator's run of ``src``."""
    before = parse_loop_program(src)
    verify_loops(before)
    after = run_pipeline(before, passes, instruments=[VerifyEach()], start=Level.LOOPS)
    verify_loops(after)
    run_grid = grid_runner(after)
    for sizes in sizes_list:
        inputs = random_l2_inputs(before, sizes)
        want = run_loops(before, inputs, sizes)
        got = run_loops(after, inputs, sizes)  # bounds and races checked
        for name, ref in want.items():
            assert same(got[name], ref), f"{name} at {sizes} (L2 evaluator): {got[name]} != {ref}"
        for block, blocks in launches:
            got = run_grid(inputs, sizes, block, blocks)
            for name, ref in want.items():
                assert same(got[name], ref), f"{name} at {sizes}, launch {block}x{blocks}: {got[name]} != {ref}"
    return after


def kernel_names(loops):
    return [k.name for k in loops.kernels]


# ---------------------------------------------------------------------------
# The bug: split-reduction split a loop that reads its accumulator
# ---------------------------------------------------------------------------

# ``acc += acc * 0.5 + x[k]`` is a recurrence, not a sum: each term depends on
# every earlier one.  The pass checked that the loop *writes* nothing but acc,
# never that it does not *read* it, so it made 8 partial "sums" (each part
# reading only its own partial value) and added them: s = 53.7 instead of
# 1.03e7.  Fixed: a loop that reads its accumulator is not a reduction.
RECURRENCES = {
    "accumulate": "acc += acc * 0.5 + x[k]",
    "let": "let t = acc * 0.5\n    acc += t + x[k]",
    "nested": "for j in 0..1 {\n      acc += where(j == 0, x[k], acc * 0.25)\n    }",
    "guarded": "if k % 2 == 0 {\n      acc += acc\n    }\n    acc += x[k]",
}


@pytest.mark.parametrize("body", RECURRENCES.values(), ids=RECURRENCES.keys())
def test_split_reduction_leaves_a_loop_that_reads_its_accumulator_alone(body):
    src = f"input x[40]\noutput s\n\nkernel s {{\n  local acc = 0\n  for k in 0..39 {{\n    {body}\n  }}\n  s = acc\n}}\n"
    after = l2_transform_matches(src, "split-reduction{threads=8 min-work=1}")
    assert kernel_names(after) == ["s"]


def test_split_reduction_still_splits_a_loop_that_reads_an_inner_sum():
    # reading a scalar declared inside the loop (an inner sum) is fine: still split
    src = """
input x[40, 3]
output s

kernel s {
  local acc = 0
  for k in 0..39 {
    local inner = 0
    for j in 0..2 {
      inner += x[k, j]
    }
    acc += inner * inner
  }
  s = acc
}
"""
    after = l2_transform_matches(src, "split-reduction{threads=8 min-work=1}")
    assert kernel_names(after) == ["s_part", "s"]


# ---------------------------------------------------------------------------
# split-reduction: shapes that pass
# ---------------------------------------------------------------------------

SPLITS = (
    "split-reduction{threads=8 min-work=1}",
    "split-reduction{threads=100000 min-work=1}",
    "split-reduction{threads=100000 min-work=3 max-parts=4}",
    # split twice: the partial-sum kernel and the final sum have the shape again
    "split-reduction{threads=64 min-work=1},split-reduction{threads=64 min-work=1}",
    "parallel{depth=8},split-reduction{threads=8 min-work=1}",
)

L2_SPLIT_CASES = {
    # a band with a non-zero lower bound (constant: a symbolic band is split only under a
    # reduction with more symbolic dimensions); reduction bounds from the band variable,
    # with max/min tuples
    "band-offset": ("""
sizes m
input x[7, m]
output y[7]

kernel y {
  parallel for i in 3..6 {
    local acc = 0
    for k in max(0, i - 3)..min(m - 1, i + 40, 2*i) {
      acc += x[i, k]
    }
    y[i] = acc * 2
  }
}
""", [{"m": m} for m in (0, 1, 5, 60)]),
    # `//` in the reduction bounds, a constant band starting at 3
    "floor-bounds": ("""
input x[8, 70]
output y[8]

kernel y {
  parallel for i in 3..5 {
    local acc = 0
    for k in (i + 1) // 2..69 - i {
      acc += x[i, k]
    }
    y[i] = acc
  }
}
""", [{}]),
    # a chain of two reduction loops (the inner one is split) whose bounds use the band
    # and the outer chain loop; a where guard on the chain variable
    "chain": ("""
input x[4, 5, 70]
output y[4, 5]

kernel y {
  parallel for i in 1..3 {
    parallel for j in 2..4 {
      local acc = 0
      for a in 0..i {
        for k in j..69 - i {
          acc += where(a == 1, x[i, j, k], 2 * x[a, j, k])
        }
      }
      y[i, j] = acc
    }
  }
}
""", [{}]),
    # a scalar, for trip counts 0, 1, 2, 3 (fewer than the parts: empty parts store 0) and 100
    "scalar": ("""
sizes n
input x[n]
output s

kernel s {
  local acc = 0
  for k in 0..n - 1 {
    acc += x[k]
  }
  s = acc
}
""", [{"n": n} for n in (0, 1, 2, 3, 100)]),
    # lets and an if inside the loop; an epilogue of lets, several stores and a second
    # reduction that reads the first's result
    "epilogue": ("""
sizes n
input x[n]
output s, t[3]

kernel s {
  local acc = 0
  for k in 0..n - 1 {
    let q = x[k] * 2
    if k % 3 == 1 {
      acc += q
    }
  }
  let w = acc * 3
  s = w
  t[0] = w + 1
  local acc2 = 0
  for k in 0..n - 1 {
    acc2 += x[k] * acc
  }
  t[1] = acc2
  t[2] = acc2
}
""", [{"n": n} for n in (0, 1, 2, 3, 100)]),
    # negative reduction bounds, guarded by an if; `%` and `//` of the split variable
    "negative-bounds": ("""
sizes n
input x[n + 48]
output y[48]

kernel y {
  parallel for i in 0..47 {
    local acc = 0
    for k in i - 40..i {
      if k >= 0 {
        acc += x[k] * where(k % 3 == 0, x[k // 3], 1)
      }
    }
    y[i] = acc
  }
}
""", [{"n": n} for n in (0, 1, 5)]),
    # the split loop is innermost of three; the inner bounds depend on the outer chain loop
    "inner-dependent": ("""
input x[12, 20]
output y[3]

kernel y {
  parallel for i in 0..2 {
    local acc = 0
    for k in 0..5 {
      for j in k..19 - i {
        for l in 0..k {
          acc += x[k + l, j]
        }
      }
    }
    y[i] = acc
  }
}
""", [{}]),
    # the reduction reads the buffer its epilogue writes, at its own band index
    "read-then-write": ("""
input x[6, 40]
output y[6]

kernel init {
  parallel for i in 0..5 {
    y[i] = x[i, 0]
  }
}

kernel y {
  parallel for i in 0..5 {
    local acc = 0
    for k in 0..39 {
      acc += x[i, k] * y[i]
    }
    y[i] = acc
  }
}
""", [{}]),
}


@pytest.mark.parametrize("name", L2_SPLIT_CASES)
def test_split_reduction_on_hand_written_kernels(name):
    src, sizes_list = L2_SPLIT_CASES[name]
    split = 0
    for passes in SPLITS:
        after = l2_transform_matches(src, passes, sizes_list)
        split += any(n.endswith("_part") for n in kernel_names(after))
    assert split, "the cases are about split kernels: at least one option must split"


def test_split_reduction_refuses_a_band_that_may_be_empty_with_a_negative_extent():
    # band extent n - m + 1 is negative for n < m - 1: a temp [n - m + 1, P] could not be allocated
    src = """
sizes n, m
input x[n, m], e[n + 1]
output y[n + 1]

kernel y {
  parallel for i in 0..n - m {
    local acc = 0
    for k in 0..m - 1 {
      acc += x[i + k, k]
    }
    y[i] = acc
  }
}
"""
    after = l2_transform_matches(
        src, "split-reduction{threads=100000 min-work=1}", [{"n": n, "m": m} for n in (0, 3, 10) for m in (1, 3, 10)]
    )
    assert kernel_names(after) == ["y"] and not after.by_role("temp")


@pytest.mark.parametrize("options", ["threads=1 min-work=1", "max-parts=1 min-work=1", "min-work=1000000"])
def test_split_reduction_options_at_their_extremes_split_nothing(options):
    src, sizes_list = L2_SPLIT_CASES["chain"]
    after = l2_transform_matches(src, f"split-reduction{{{options}}}", sizes_list, launches=((8, 3),))
    assert kernel_names(after) == ["y"]


# L1 programs through the GPU pipeline with forced splitting, in cuda-sim
L1_CASES = {
    # new names must avoid inputs, sizes and loop variables called p, y_part, k_t, p_t
    "names-inputs": ("input p[40], y_part[3]\noutput y[3]\ny[i] = sum[k](p[k] * y_part[i])\n", None),
    "names-sizes": ("input x[p, k_t]\noutput y[p]\ny[i] = sum[k](x[i, k])\n", {"p": 2, "k_t": 50}),
    "names-loop": ("input x[p2, p]\noutput y[p2]\ny[i] = sum[p_t](x[i, p_t])\n", {"p2": 2, "p": 50}),
    "names-output": (
        "input x[3, 50]\noutput y_part[3], y[3]\ny_part[i] = sum[k](x[i, k])\ny[i] = sum[k](x[i, k] * y_part[i])\n",
        None,
    ),
    # scalars: a chain of two, and one whose sum is empty or shorter than the parts
    "scalar-chain": ("input x[50]\noutput s, t\ns = sum[k](x[k])\nt = sum[k](x[k] * s)\n", None),
    "scalar-empty": ("input x[n]\noutput s\ns = exp(sum[k](x[k]))\n", {"n": 0}),
    "scalar-one": ("input x[n]\noutput s\ns = sum[k](x[k])\n", {"n": 1}),
    "no-rows": ("input x[n, m]\noutput s[n]\ns[i] = sum[k](x[i, k])\n", {"n": 0, "m": 5}),
    "no-columns": ("input x[n, m]\noutput s[n]\ns[i] = sum[k](x[i, k])\n", {"n": 3, "m": 0}),
    # windows, triangles, `//` and max/min bounds of the split loop
    "triangle-in-sum": ("input x[50]\noutput s\ns = sum[k: 0..49](sum[j: 0..k](x[j]) * x[k])\n", None),
    "window": ("input x[6, 40]\noutput s[6]\ns[i] = sum[k: max(0, i - 2)..min(39, 3 * i)](x[i, k])\n", None),
    "floor-bound": ("input x[6, 40]\noutput s[6]\ns[i] = sum[k: (i + 1) // 2..39 - i](x[i, k])\n", None),
    "empty-for-some-rows": ("input x[6, 40]\noutput s[6]\ns[i] = sum[k: 2 * i..i](x[i, k])\n", None),
    "guards": ("input x[4, 50]\noutput s[4]\ns[i] = sum[k: i..49 - i](where(k % 3 == i, x[i, k], x[i, 49 - k]))\n", None),
    "pairs": ("input x[6, 40]\noutput s[6, 6]\ns[i, j] = sum[k: i..j + 30](x[i, k] * x[j, k])\n", None),
    # fused, s's sum is split and t's stays in the epilogue, which stores both results
    "epilogue": ("input x[4, 50]\noutput s[4], t[4]\ns[i] = sum[k](x[i, k])\nt[i] = s[i] * 2 + sum[k](x[i, k] * x[i, k])\n", None),
    "product-of-sums": ("input x[40], y[40]\noutput s\ns = sum[k: 0..39](x[k]) * sum[k: 0..39](y[k])\n", None),
}


@pytest.mark.parametrize("name", L1_CASES)
def test_split_reduction_through_the_gpu_pipeline(name):
    src, sizes = L1_CASES[name]
    program = tcc.parse(src)
    for passes in (AGGRESSIVE, WIDE):
        assert_matches_interpreter(program, sizes, passes=passes, target="cuda-sim")
    assert_matches_interpreter(program, sizes, dtype="float32", passes=AGGRESSIVE, target="cuda-sim")


# ---------------------------------------------------------------------------
# parallel{depth}
# ---------------------------------------------------------------------------


def marks(loops, kernel=0):
    """The parallel flags of the perfectly nested loops at the top of a kernel."""
    out, body = [], loops.kernels[kernel].body
    while len(body) == 1 and hasattr(body[0], "parallel"):
        out.append(body[0].parallel)
        body = body[0].body
    return out


PARALLEL_CASES = {
    # reads the row's next element: the row loop is independent, the column loop is not
    "neighbour": ("""
sizes n, m
input x[n, m]
output y[n, m + 1]

kernel y {
  for i in 0..n - 1 {
    for j in 0..m - 1 {
      y[i, j] = x[i, j]
      y[i, j + 1] = y[i, j] + 1
    }
  }
}
""", [True, False]),
    # a triangular inner loop: marked, but its bounds keep it out of the grid band
    "triangle": ("""
sizes n
input x[n, n]
output y[n, n]

kernel y {
  for i in 0..n - 1 {
    for j in 0..i {
      for k in j..i {
        y[i, j] = x[i, k] * 2
      }
    }
  }
}
""", [True, True, False]),
    # one write per (i, j) through i + j at a position that separates j only once i is fixed
    "skewed": ("""
sizes n
input x[n, n]
output y[n, 2 * n]

kernel y {
  for i in 0..n - 1 {
    for j in 0..n - 1 {
      y[i, i + j] = x[i, j]
    }
  }
}
""", [True, True]),
    # a write that only the outer variable separates is not independent in the inner one
    "row-sum": ("""
sizes n
input x[n, n]
output y[n]

kernel init {
  for i in 0..n - 1 {
    y[i] = 0
  }
}

kernel y {
  for i in 0..n - 1 {
    for j in 0..n - 1 {
      y[i] += x[i, j]
    }
  }
}
""", [True, False]),
    # strip-mined offsets 0, 1 of 2*j: independent; offsets spanning 2*j and 2*j + 2 are not
    "strips": ("""
sizes n
input x[n, 2 * n + 1]
output y[n, 2 * n + 1]

kernel y {
  for i in 0..n - 1 {
    for j in 0..n - 1 {
      y[i, 2*j] = x[i, 2*j]
      y[i, 2*j + 1] = x[i, 2*j + 1]
    }
  }
}
""", [True, True]),
    "strips-overlapping": ("""
sizes n
input x[n, 2 * n + 1]
output y[n, 2 * n + 1]

kernel y {
  for i in 0..n - 1 {
    for j in 0..n - 1 {
      y[i, 2*j] = x[i, 2*j]
      y[i, 2*j + 2] = x[i, 2*j + 1]
    }
  }
}
""", [True, False]),
}


@pytest.mark.parametrize("name", PARALLEL_CASES)
def test_parallel_depth_marks_only_independent_loops(name):
    src, expected = PARALLEL_CASES[name]
    after = l2_transform_matches(src, "parallel{depth=8}", [{"n": n, "m": n + 1} for n in (0, 1, 5, 9)])
    assert marks(after, len(after.kernels) - 1) == expected


def test_parallel_depth_one_marks_only_the_outer_loop():
    src, _ = PARALLEL_CASES["skewed"]
    assert marks(run_pipeline(parse_loop_program(src), "parallel", start=Level.LOOPS)) == [True, False]


# ---------------------------------------------------------------------------
# Grid lowering
# ---------------------------------------------------------------------------

GRID_CASES = {
    # band bounds that are max/min tuples with non-zero lower bounds, empty or negative
    # for some sizes; a third parallel loop whose bounds use the band stays inside the thread
    "tuple-bounds": ("""
sizes n, m
input x[n, m + 3]
output y[n, m, 8]

kernel y {
  parallel for i in max(1, n - 5, 2*n - 20)..min(n - 1, 7) {
    parallel for j in max(m // 2 - 1, 0)..min(m - 1, (n + m) // 3) {
      parallel for k in 0..i {
        y[i, j, k] = x[i, j] + x[i, j + k % 3]
      }
    }
  }
}
""", [{"n": n, "m": m} for n in (0, 1, 2, 5, 9, 13) for m in (0, 1, 3, 30)]),
    # where-guarded loads at the borders, then a scalar sum on one thread
    "guards-and-scalar": ("""
sizes n
input x[n]
output y[n], z

kernel y {
  parallel for i in 0..n - 1 {
    y[i] = where(i >= 1 and i <= n - 2, x[i - 1] + x[i + 1], 0)
  }
}

kernel z {
  z = 0
  for i in 0..n - 1 {
    z += y[i]
  }
}
""", [{"n": n} for n in (0, 1, 2, 3, 24, 25, 50)]),
    # a kernel without a band whose body holds a parallel loop and a sequential one
    "no-band": ("""
sizes n
input x[n]
output y[n], s

kernel y {
  local t = 0
  parallel for i in 0..n - 1 {
    y[i] = x[i] * 2
  }
  for i in 0..n - 1 {
    t += y[i]
  }
  s = t
}
""", [{"n": n} for n in (0, 1, 30)]),
    # a band starting at a size, and one of constant extent 0
    "offset-and-empty": ("""
sizes n
input x[2 * n + 1]
output y[2 * n + 1]

kernel y {
  parallel for i in n..2 * n {
    y[i] = x[i] * 3
  }
}

kernel empty {
  parallel for i in 5..4 {
    y[i] = 0
  }
}
""", [{"n": n} for n in (0, 1, 7, 30)]),
}


@pytest.mark.parametrize("name", GRID_CASES)
def test_grid_kernels_cover_their_bands_exactly(name):
    src, sizes_list = GRID_CASES[name]
    l2_transform_matches(src, "parallel{depth=8}", sizes_list)


def test_grid_band_stops_at_a_loop_whose_bounds_use_the_band():
    loops = parse_loop_program(GRID_CASES["tuple-bounds"][0])
    assert [l.var for l in grid_band(loops.kernels[0])] == ["i", "j"]


# ---------------------------------------------------------------------------
# fuse{full=true}
# ---------------------------------------------------------------------------


def test_full_fusion_fuses_whole_nests_only():
    # f and g share both loops and fuse; the row sum shares only i and stays apart, and so
    # h after it (the CPU's partial fusion makes one kernel of all four, one thread per row)
    src = (
        "input a[n, m], b[m]\noutput f[n, m], g[n, m], h[n, m], r[n]\n"
        "f[i, j] = exp(a[i, j])\ng[i, j] = f[i, j] * b[j]\nr[i] = sum[j](g[i, j])\nh[i, j] = g[i, j] / r[i]\n"
    )
    program = tcc.parse(src)
    loops = run_pipeline(program, BASE)
    assert kernel_names(loops) == ["f_g", "r", "h"] and marks(loops, 0) == marks(loops, 2) == [True, True]
    assert kernel_names(run_pipeline(program, BASE.replace("{full=true}", ""))) == ["f_g_r_h"]
    for n, m in [(0, 3), (1, 1), (5, 40), (30, 2)]:
        for passes in (None, AGGRESSIVE):
            assert_matches_interpreter(program, {"n": n, "m": m}, passes=passes, target="cuda-sim")


# ---------------------------------------------------------------------------
# Derivatives through the GPU pipeline
# ---------------------------------------------------------------------------

GRAD_CASES = {
    "window": ("input x[n], w[k]\noutput y[n - k + 1]\ny[i] = sum[j](x[i + j] * w[j])\n", ["x", "w"], "y",
               [{"n": 30, "k": 7}, {"n": 7, "k": 7}, {"n": 3, "k": 1}]),
    "triangle": ("input x[n], a[n, n]\noutput f\nf = sum[i, j | i < j](a[i, j] * x[i] * x[j])\n", ["x", "a"], "f",
                 [{"n": 1}, {"n": 2}, {"n": 40}]),
    "floor-window": ("input x[n]\noutput f[n]\nf[i] = tanh(sum[k: (i + 1) // 2..i](x[k] * x[i]))\n", ["x"], "f",
                     [{"n": 1}, {"n": 9}, {"n": 33}]),
}


@pytest.mark.parametrize("name", GRAD_CASES)
def test_first_and_second_derivatives_in_the_simulator(name):
    src, wrt, of, sizes_list = GRAD_CASES[name]
    g = tcc.grad(tcc.parse(src), of=of, wrt=wrt)
    g2 = tcc.grad(g, of="d" + wrt[0], wrt=[wrt[0]])
    for program in (g, g2):
        for sizes in sizes_list:
            for passes in (None, AGGRESSIVE):
                assert_matches_interpreter(program, sizes, passes=passes, target="cuda-sim")


# ---------------------------------------------------------------------------
# Found on the way, outside the GPU parts (reported, not fixed here)
# ---------------------------------------------------------------------------


def test_gradient_of_a_floor_window_passes_its_own_bounds_check():
    # tcc.grad simplifies the adjoint's range for this small extent to
    # dy_0..2*((dy_0 + 1) // 2), which is within 0..2: the prover must treat the
    # quotient as an integer (a rational one reaches 3) to accept it.
    src = "input y[3]\noutput f[3]\nf[i] = tanh(sum[k: ((i + 1) // 2)..i](y[i] + y[k]))\n"
    g = tcc.grad(tcc.parse(src), of="f", wrt=["y"])
    assert_matches_interpreter(g, target="cuda-sim")
