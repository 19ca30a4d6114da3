"""The L2 optimisation passes: hoist, fuse, reuse-buffers, parallel.

Every transformed program is run by the small L2 evaluator of
``tests/loop_eval.py`` (bounds-checked loads, NaN-filled results and temps,
a race detector for parallel loops) and compared with the reference
interpreter on the L1 program; every one also passes ``verify_loops``.
The pass-specific tests check the printed L2, which is what a user sees with
``--emit loops``, and what each pass refuses to do.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings

import tcc
from tcc.ir.diagnostics import TccError
from tcc.index_inputs import random_index_inputs
from tcc.reference.interpreter import evaluate
from tcc.ir.loops import For, LoopProgram
from tcc.ir.loops_parser import parse_loop_program
from tcc.ir.loops_verifier import verify_loops
from tcc.passes.pass_base import Level
from tcc.pipeline import parse_pipeline, run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop_eval import run_loops  # noqa: E402
from test_autodiff_properties import inferred_programs, programs  # noqa: E402

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.tcc"))
SIZES = {"n": 4, "m": 3, "p": 2, "r": 2, "h": 5, "w": 6}

PIPELINES = [
    "lower-loops,fuse",
    "lower-loops,hoist",
    "lower-loops,hoist,fuse",
    "lower-loops,parallel",
    "lower-loops,hoist,fuse,reuse-buffers",
    "lower-loops,hoist,fuse,reuse-buffers,parallel",
]


def random_inputs(program, sizes=SIZES, seed=0):
    rng = np.random.default_rng(seed)
    sizes = {**{s: 3 for s in program.sizes()}, **sizes}  # the examples' other sizes (v, d, nnz, ...)
    out = {
        d.name: rng.uniform(0.25, 0.75, tuple(int(e.evaluate(sizes)) for e in d.extents))
        for d in program.inputs if not d.is_index
    }
    return {**out, **random_index_inputs(program, sizes, rng)}


def lower(program, passes: str) -> LoopProgram:
    return run_pipeline(program, passes)


def on_loops(loops: LoopProgram | str, passes: str) -> LoopProgram:
    if isinstance(loops, str):
        loops = parse_loop_program(loops)
    return run_pipeline(loops, passes, start=Level.LOOPS)


def assert_loops_match_interpreter(program, passes: str, sizes=SIZES, counts=None) -> LoopProgram:
    """Lower and optimise ``program``; its results must equal the interpreter's."""
    loops = lower(program, passes)
    verify_loops(loops)
    inputs = random_inputs(program, sizes)
    want = evaluate(program, inputs)
    got = run_loops(loops, inputs, counts=counts)
    assert set(got) == {b.name for b in loops.by_role("output", "local")}
    for name, value in got.items():
        np.testing.assert_allclose(value, want[name], rtol=1e-10, atol=1e-12, err_msg=f"{name} after {passes}")
    return loops


def kernel_text(loops: LoopProgram, name: str) -> str:
    text = str(loops)
    start = text.index(f"kernel {name} {{")
    return text[start : text.index("\n}\n", start) + 3]


def depth(stmts) -> int:
    return max((1 + depth(s.body) if isinstance(s, For) else 0 for s in stmts), default=0)


def _programs(path: Path):
    """An example, its gradient (first result, every input) and a second derivative."""
    p = run_pipeline(tcc.parse(path), "infer-ranges")
    g = tcc.grad(p, of=p.results()[0], wrt=[d.name for d in p.inputs if not d.is_index])
    h = tcc.grad(g, of=g.results()[0], wrt=[next(d.name for d in g.inputs if not d.is_index)])
    return [("f", p), ("grad", g), ("grad2", h)]


# ---------------------------------------------------------------------------
# Every example, its gradient and a second derivative, through every pipeline
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_and_derivatives_match_the_interpreter(path):
    for label, program in _programs(path):
        for passes in PIPELINES:
            assert_loops_match_interpreter(program, passes)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_loop_passes_are_idempotent_and_deterministic(path):
    tail = PIPELINES[-1].split(",", 1)[1]
    for _, program in _programs(path):
        once = lower(program, PIPELINES[-1])
        assert str(lower(program, PIPELINES[-1])) == str(once)
        assert str(on_loops(once, tail)) == str(once)


def test_pass_options_print_and_parse_back():
    for spec in ["hoist", "hoist{extract=false}", "hoist{factor=false licm=false}", "hoist{extract-lets=false}"]:
        (p,) = parse_pipeline(spec)
        assert p.spec() == spec
        assert p.level is Level.LOOPS


# ---------------------------------------------------------------------------
# hoist
# ---------------------------------------------------------------------------

# The logistic-regression loss with z = X w written inline: its gradient and
# Hessian-vector product copy the inner sum over j into every element.
INLINE_LOGISTIC = """
input X[m, n], w[n], y[m]
f = sum[i](log(1 + exp(-y[i] * sum[j](X[i, j] * w[j]))))
"""


def test_hoist_makes_the_logistic_regression_hessian_cheaper():
    p = tcc.parse(INLINE_LOGISTIC)
    g = tcc.grad(p, of="f", wrt="w")
    h = tcc.grad(g, of="dw", wrt="w")  # sum over dw2_z1 and dw2_z0 of ... sum[j] ...
    sizes = {"m": 3, "n": 6}
    plain, hoisted = {}, {}
    before = assert_loops_match_interpreter(h, "lower-loops", sizes, counts=plain)
    after = assert_loops_match_interpreter(h, "lower-loops,hoist", sizes, counts=hoisted)
    # before: one nest of depth 4 (dw2_0, dw2_z1, dw2_z0, j): O(m n^3)
    assert [k.name for k in before.kernels] == ["dw2"]
    assert depth(before.kernels[0].body) == 4
    # after: X w is its own kernel over the examples, O(m n); the Hessian
    # product is a nest of depth 3, O(m n^2), that reads it
    assert "temp dw2_t[m], dw2_t2[m]\n" in str(after)
    assert kernel_text(after, "dw2_t") == (
        "kernel dw2_t {\n"
        "  for dw2_z0 in 0..m - 1 {\n"
        "    local dw2_acc2 = 0\n"
        "    for j in 0..n - 1 {\n"
        "      dw2_acc2 += X[dw2_z0, j] * w[j]\n"
        "    }\n"
        "    dw2_t[dw2_z0] = dw2_acc2\n"
        "  }\n"
        "}\n"
    )
    # the exp of the margin depends on the example only: m exps, not m n^2
    assert kernel_text(after, "dw2_t2") == (
        "kernel dw2_t2 {\n"
        "  for dw2_z0 in 0..m - 1 {\n"
        "    let dw2_v = -y[dw2_z0]\n"
        "    let dw2_acc2 = dw2_t[dw2_z0]\n"
        "    let dw2_v3 = exp(dw2_v * dw2_acc2)\n"
        "    dw2_t2[dw2_z0] = dw2_v3\n"
        "  }\n"
        "}\n"
    )
    dw2 = kernel_text(after, "dw2")
    assert "let dw2_v3 = dw2_t2[dw2_z0]" in dw2
    assert "for j " not in dw2 and "exp(" not in dw2
    assert depth(after.kernels[-1].body) == 3
    # and ddw[dw2_z1] is multiplied once per dw2_z1, not once per (dw2_z1, dw2_z0)
    assert "dw2_acc += dw2_acc3 * ddw[dw2_z1]" in dw2
    m, n = sizes["m"], sizes["n"]
    assert plain["iterations"] > m * n**3
    assert hoisted["iterations"] < 2 * m * n**2


def test_hoist_logistic_regression_example_and_its_hessian():
    p = run_pipeline(tcc.parse(EXAMPLES[[x.stem for x in EXAMPLES].index("logistic_regression")]), "infer-ranges")
    g = tcc.grad(p, of="f", wrt="w")
    h = tcc.grad(g, of="dw", wrt="w")
    for program in (p, g, h):
        assert_loops_match_interpreter(program, "lower-loops,hoist", {"m": 3, "n": 5})
    # dw2 = sum over examples of dz2[i] * y[i] * X[i, k]: nothing left to hoist,
    # and nothing hoisted wrongly
    loops = lower(h, "lower-loops,hoist")
    assert not loops.by_role("temp")


def test_hoist_an_inner_sum_that_does_not_depend_on_the_element():
    """f[i, j] = x[i, j] * s with s = sum[k](w[k] * x[0, k]): the gradient
    reads s and a second full sum in every element; both become temps."""
    p = tcc.parse("input x[n, m], w[m]\nf[i, j] = x[i, j] * sum[k](w[k] * x[0, k])\n")
    g = tcc.grad(p, of="f", wrt="x,w")
    plain, hoisted = {}, {}
    assert_loops_match_interpreter(g, "lower-loops", counts=plain)
    loops = assert_loops_match_interpreter(g, "lower-loops,hoist", counts=hoisted)
    assert "temp dx_t, dx_t2, dw_t\n" in str(loops)
    # x[0, k] is only in bounds when n >= 1, which the dx loop nest implied
    assert kernel_text(loops, "dx_t") == (
        "kernel dx_t {\n"
        "  if n >= 1 {\n"
        "    local dx_acc = 0\n"
        "    for k in 0..m - 1 {\n"
        "      dx_acc += w[k] * x[0, k]\n"
        "    }\n"
        "    dx_t = dx_acc\n"
        "  }\n"
        "}\n"
    )
    # dw[b] = sum_{i,j} df[i, j] x[i, j] * x[0, b]: the double sum once, then O(m)
    assert kernel_text(loops, "dw") == (
        "kernel dw {\n"
        "  for dw_0 in 0..m - 1 {\n"
        "    let dw_acc = dw_t\n"
        "    let dw_acc_s = where(n >= 1, dw_acc * x[0, dw_0] + 0, 0)\n"
        "    dw[dw_0] = dw_acc_s\n"
        "  }\n"
        "}\n"
    )
    assert hoisted["iterations"] * 2 < plain["iterations"]


def test_hoist_factors_invariant_multipliers_out_of_gradient_sums():
    g = tcc.grad(tcc.parse(EXAMPLES[[x.stem for x in EXAMPLES].index("urban")]), of="f", wrt="d")
    loops = assert_loops_match_interpreter(g, "lower-loops,hoist{licm=false extract=false}")
    assert kernel_text(loops, "dd") == (
        "kernel dd {\n"
        "  for dd_0 in 0..7 {\n"
        "    local dd_acc = 0\n"
        "    for dd_z1 in max(dd_0 - 2, 0)..min(dd_0, 4) {\n"
        "      for dd_z0 in 0..3 {\n"
        "        dd_acc += -(df[dd_0 - dd_z1, dd_z0] * f[dd_0 - dd_z1, dd_z0])\n"
        "      }\n"
        "    }\n"
        # dd[7]: the sum is empty (the interpreter gives 0, not 0 * d[7]**2)
        "    let dd_acc_s = where(dd_0 <= 6, dd_acc * 3 * d[dd_0]**2 + 0, 0)\n"
        "    dd[dd_0] = dd_acc_s\n"
        "  }\n"
        "}\n"
    )


def test_factor_without_a_zero_start_uses_a_partial_sum():
    src = """sizes n
input x[n], y[n]
output z

kernel z {
  local acc = 1
  for i in 0..n - 1 {
    for j in 0..n - 1 {
      acc += x[j] * y[i]
    }
  }
  z = acc
}
"""
    out = on_loops(src, "hoist")
    # acc2 += x[j] in a loop over j alone, then (licm) out of the i loop: O(n)
    assert kernel_text(out, "z") == (
        "kernel z {\n"
        "  local acc2 = 0\n"
        "  for j in 0..n - 1 {\n"
        "    acc2 += x[j]\n"
        "  }\n"
        "  local acc = 1\n"
        "  for i in 0..n - 1 {\n"
        "    acc += acc2 * y[i]\n"
        "  }\n"
        "  z = acc\n"
        "}\n"
    )
    x, y = np.arange(1.0, 4.0), np.arange(2.0, 5.0)
    assert run_loops(out, {"x": x, "y": y})["z"] == pytest.approx(1 + x.sum() * y.sum())


def test_factor_refuses_when_the_accumulator_is_read_inside_the_loop():
    src = """sizes n
input x[n], y[n]
output z[n]

kernel z {
  for i in 0..n - 1 {
    local acc = 0
    for j in 0..n - 1 {
      acc += x[j] * y[i]
      z[j] = acc
    }
  }
}
"""
    assert "acc += x[j] * y[i]" in str(on_loops(src, "hoist"))


def test_licm_moves_a_let_out_and_guards_a_load_that_needs_the_loop_to_run():
    src = """sizes n, m
input x[n], A[n, m]
output y[n, n]

kernel y {
  for i in 0..n - 1 {
    for j in 0..i - 1 {
      let v = x[i - 1]
      let u = x[0] * 2
      local s = 0
      for k in 0..m - 1 {
        s += A[j, k] * A[i - 1, k]
      }
      y[i, j] = v * s * u
    }
  }
}
"""
    out = on_loops(src, "hoist")
    # x[i - 1] is out of bounds for i = 0, where the j loop does not run;
    # x[0] is in bounds wherever the i loop runs; s depends on j; u depends
    # on nothing, but the kernel is one loop nest that the runtime may split
    assert kernel_text(out, "y") == (
        "kernel y {\n"
        "  for i in 0..n - 1 {\n"
        "    let v = where(i >= 1, x[i - 1], 0)\n"
        "    let u = x[0] * 2\n"
        "    for j in 0..i - 1 {\n"
        "      local s = 0\n"
        "      for k in 0..m - 1 {\n"
        "        s += A[j, k] * A[i - 1, k]\n"
        "      }\n"
        "      y[i, j] = v * s * u\n"
        "    }\n"
        "  }\n"
        "}\n"
    )
    verify_loops(out)


def test_licm_keeps_what_reads_a_buffer_written_in_the_loop():
    src = """sizes n
input x[n]
output y[n, n]

kernel y {
  for i in 0..n - 1 {
    for j in 0..n - 1 {
      let v = y[i, 0]
      local s = 0
      for k in 0..n - 1 {
        s += y[k, 0]
      }
      y[i, j] = x[i] + v + s
    }
  }
}
"""
    src_loops = parse_loop_program(src)
    out = on_loops(src_loops, "hoist")
    assert str(out) == str(src_loops)


def test_extract_refuses_a_triangular_range_and_a_local_from_outside():
    src = """sizes n, m
input A[n, m]
output y[n, n]

kernel y {
  for i in 0..n - 1 {
    for j in 0..i {
      local s = 0
      for k in 0..m - 1 {
        s += A[j, k]
      }
      y[i, j] = s
    }
  }
}
"""
    # s depends on j but not on i; the range of j depends on i
    out = on_loops(src, "hoist")
    assert not out.by_role("temp")
    src2 = """sizes n, m
input A[n, m]
output y[n, n]

kernel y {
  for i in 0..n - 1 {
    local c = 0
    c += A[i, 0]
    for j in 0..n - 1 {
      local s = 0
      for k in 0..m - 1 {
        s += A[j, k] * c
      }
      y[i, j] = s
    }
  }
}
"""
    # factoring pulls c out, then s no longer needs it and becomes a temp
    out2 = on_loops(src2, "hoist")
    assert "temp y_t[n]" in str(out2)
    assert "s += A[j, k]\n" in str(out2)
    out3 = on_loops(src2, "hoist{factor=false}")
    assert not out3.by_role("temp")


def test_hoist_on_every_urban_gradient_is_what_the_paper_needs():
    g = tcc.grad(tcc.parse(EXAMPLES[[x.stem for x in EXAMPLES].index("urban")]), of="f", wrt="a,b,c,d")
    loops = assert_loops_match_interpreter(g, "lower-loops,hoist")
    # dc is nonzero on the diagonal only: its reduction runs once per row, not per element
    dc = kernel_text(loops, "dc")
    assert dc.index("local dc_acc = 0") < dc.index("for dc_1 in max(0, dc_0)..min(2, dc_0)")
    assert "let da_acc_s = da_acc * c[da_0, da_0] * 2" in kernel_text(loops, "da")


# ---------------------------------------------------------------------------
# fuse
# ---------------------------------------------------------------------------


def test_fuse_softmax_rows_into_one_nest():
    p = run_pipeline(tcc.parse(EXAMPLES[[x.stem for x in EXAMPLES].index("softmax_matmul")]), "infer-ranges")
    loops = assert_loops_match_interpreter(p, "lower-loops,hoist,fuse")
    # z, e and y are element-wise over (i, j); s reads the whole row i but
    # only row i: all four fuse over rows, z and e also over columns, and e
    # and s read what the same iteration just computed
    assert [k.name for k in loops.kernels] == ["z_e_s_y"]
    assert kernel_text(loops, "z_e_s_y") == (
        "kernel z_e_s_y {\n"
        "  for i in 0..n - 1 {\n"
        "    for j in 0..m - 1 {\n"
        "      local z_acc = 0\n"
        "      for k in 0..p - 1 {\n"
        "        z_acc += a[i, k] * b[k, j]\n"
        "      }\n"
        "      z[i, j] = z_acc\n"
        "      e[i, j] = exp(z_acc)\n"
        "    }\n"
        "    local s_acc = 0\n"
        "    for j in 0..m - 1 {\n"
        "      s_acc += e[i, j]\n"
        "    }\n"
        "    s[i] = s_acc\n"
        "    for j in 0..m - 1 {\n"
        "      y[i, j] = e[i, j] / s_acc\n"
        "    }\n"
        "  }\n"
        "}\n"
    )


def test_fuse_a_zero_fill_with_the_nest_that_fills_the_diagonal():
    g = tcc.grad(tcc.parse(EXAMPLES[[x.stem for x in EXAMPLES].index("urban")]), of="f", wrt="c")
    loops = assert_loops_match_interpreter(g, "lower-loops,hoist,fuse")
    # f, the zero fill of dc and the diagonal of dc all run over rows, and dc
    # reads row i of f only: one nest (dc's rows renamed to f's)
    assert [k.name for k in loops.kernels] == ["f_dc_fill_dc"]
    assert kernel_text(loops, "f_dc_fill_dc").endswith(
        "      f[i, j] = exp(-f_acc)\n"
        "    }\n"
        "    for dc_1 in 0..2 {\n"
        "      dc[i, dc_1] = 0\n"
        "    }\n"
        "    local dc_acc = 0\n"
        "    for dc_z1 in 0..4 {\n"
        "      for dc_z0 in 0..3 {\n"
        "        dc_acc += -(df[i, dc_z0] * f[i, dc_z0]) * (a[i, dc_z1] + b[dc_z0, dc_z1])**2\n"
        "      }\n"
        "    }\n"
        "    for dc_1 in max(0, i)..min(2, i) {\n"
        "      dc[i, dc_1] = dc_acc\n"
        "    }\n"
        "  }\n"
        "}\n"
    )


def test_fuse_refuses_to_read_another_iterations_element():
    # y reads x2 reversed: iteration i needs x2[n - 1 - i], written by another iteration
    p = tcc.parse("input x[n]\nlocal x2[n]\noutput y[n]\nx2[i] = x[i] * 2\ny[i] = x2[n - 1 - i]\n")
    loops = assert_loops_match_interpreter(run_pipeline(p, "infer-ranges"), "lower-loops,fuse")
    assert [k.name for k in loops.kernels] == ["x2", "y"]
    # the same at the same index fuses, and y reads the stored value
    q = tcc.parse("input x[n]\nlocal x2[n]\noutput y[n]\nx2[i] = x[i] * 2\ny[i] = x2[i] + 1\n")
    loops = assert_loops_match_interpreter(run_pipeline(q, "infer-ranges"), "lower-loops,fuse")
    assert kernel_text(loops, "x2_y") == (
        "kernel x2_y {\n"
        "  for i in 0..n - 1 {\n"
        "    let x2_v = x[i] * 2\n"
        "    x2[i] = x2_v\n"
        "    y[i] = x2_v + 1\n"
        "  }\n"
        "}\n"
    )


def test_fuse_refuses_an_anti_dependence_and_a_scalar_result():
    src = """sizes n
input x[n]
output y[n], t[n], s, u

kernel y {
  for i in 1..n - 1 {
    y[i] = t[i - 1]
  }
}

kernel t {
  for i in 1..n - 1 {
    t[i] = x[i]
  }
}

kernel s {
  for i in 0..n - 1 {
    s += x[i]
  }
}

kernel u {
  for i in 0..n - 1 {
    u += s * x[i]
  }
}
"""
    # fused, iteration i of y would read t[i - 1] after iteration i - 1 wrote it
    out = on_loops(src, "fuse")
    assert [k.name for k in out.kernels] == ["y", "t", "s", "u"]


def test_fuse_renames_what_would_clash():
    src = """sizes n
input x[n, n]
output y[n, n], z[n]

kernel y {
  for i in 0..n - 1 {
    let v = x[i, 0]
    for j in 0..n - 1 {
      y[i, j] = x[i, j] * v
    }
  }
}

kernel z {
  for a in 0..n - 1 {
    let v = 2
    local acc = 0
    for i in 0..n - 1 {
      acc += y[a, i] * v
    }
    z[a] = acc
  }
}
"""
    out = on_loops(src, "fuse")
    verify_loops(out)
    assert kernel_text(out, "y_z") == (
        "kernel y_z {\n"
        "  for i in 0..n - 1 {\n"
        "    let v = x[i, 0]\n"
        "    for j in 0..n - 1 {\n"
        "      y[i, j] = x[i, j] * v\n"
        "    }\n"
        "    let v2 = 2\n"
        "    local acc = 0\n"
        "    for i2 in 0..n - 1 {\n"
        "      acc += y[i, i2] * v2\n"
        "    }\n"
        "    z[i] = acc\n"
        "  }\n"
        "}\n"
    )
    x = np.arange(9.0).reshape(3, 3)
    got = run_loops(out, {"x": x})
    np.testing.assert_allclose(got["z"], 2 * (x * x[:, :1]).sum(axis=1))


# ---------------------------------------------------------------------------
# reuse-buffers
# ---------------------------------------------------------------------------


def test_reuse_buffers_shares_temps_with_disjoint_lifetimes():
    p = tcc.parse("input x[n, m], w[m]\nf[i, j] = x[i, j] * sum[k](w[k] * x[0, k])\n")
    g = tcc.grad(p, of="f", wrt="x,w")
    before = lower(g, "lower-loops,hoist,fuse")
    assert "temp dx_t, dx_t2, dw_t\n" in str(before)
    loops = assert_loops_match_interpreter(g, "lower-loops,hoist,fuse,reuse-buffers")
    # dx_t and dx_t2 are both alive in kernel dx; dw_t is born after dx_t died
    assert "temp dx_t, dx_t2\n" in str(loops)
    assert "  dx_t = dw_acc\n" in kernel_text(loops, "dw_t")
    assert "let dw_acc = dx_t\n" in kernel_text(loops, "dw")


def test_reuse_buffers_needs_equal_shapes_and_only_touches_temps():
    src = """sizes n, m
input x[n], y[m]
output r[n], q[m]
local l[n]
temp t1[n], t2[m], t3[n], t4[n]

kernel a {
  for i in 0..n - 1 {
    t1[i] = x[i]
  }
}

kernel b {
  for i in 0..n - 1 {
    l[i] = t1[i] + 1
  }
}

kernel c {
  for i in 0..m - 1 {
    t2[i] = y[i]
  }
}

kernel d {
  for i in 0..m - 1 {
    q[i] = t2[i] * 2
  }
}

kernel e {
  for i in 0..n - 1 {
    t3[i] = l[i] * 3
  }
}

kernel f {
  for i in 0..n - 1 {
    r[i] = t3[i] + x[i]
  }
}
"""
    out = on_loops(src, "reuse-buffers")
    verify_loops(out)
    # t3 takes t1's place; t2 has another shape; t4 is never used; l is a result
    assert "temp t1[n], t2[m]\n" in str(out)
    assert "local l[n]\n" in str(out)
    assert "t1[i] = l[i] * 3" in kernel_text(out, "e")
    assert "r[i] = t1[i] + x[i]" in kernel_text(out, "f")
    x, y = np.arange(3.0), np.arange(2.0)
    got = run_loops(out, {"x": x, "y": y})
    np.testing.assert_allclose(got["r"], (x + 1) * 3 + x)
    np.testing.assert_allclose(got["q"], 2 * y)


# ---------------------------------------------------------------------------
# parallel
# ---------------------------------------------------------------------------


def test_parallel_marks_every_gradient_kernel_of_urban():
    g = tcc.grad(tcc.parse(EXAMPLES[[x.stem for x in EXAMPLES].index("urban")]), of="f", wrt="a,b,c,d")
    loops = assert_loops_match_interpreter(g, "lower-loops,hoist,fuse,reuse-buffers,parallel")
    # gathers: one element (row) per iteration, reading inputs and f only
    assert all(k.parallel_loop is not None for k in loops.kernels)
    assert str(loops).count("parallel for") == len(loops.kernels) == 4


def test_parallel_leaves_a_scalar_reduction_serial():
    p = run_pipeline(tcc.parse(EXAMPLES[[x.stem for x in EXAMPLES].index("logistic_regression")]), "infer-ranges")
    loops = assert_loops_match_interpreter(p, "lower-loops,hoist,fuse,reuse-buffers,parallel")
    assert kernel_text(loops, "z").startswith("kernel z {\n  parallel for i in 0..m - 1 {\n")
    # f = sum[i](...) is one kernel of three statements (local, loop, store)
    assert "parallel" not in kernel_text(loops, "f")


RACY = {
    "two writes": "y[i] = x[i]\n    y[i + 1] = x[i]",
    "read of another element": "y[i] = x[i]\n    z[i] = y[i - 1]",
    "0-d result": "s += x[i]",
    "floor division": "y[i // 2] = x[i]",
    "inner variable": "for k in 0..1 {\n      y[i + k] = x[i]\n    }",
    "constant index": "y[0] = x[i]",
}


@pytest.mark.parametrize("body", list(RACY.values()), ids=list(RACY))
def test_parallel_refuses_racy_loops(body):
    src = f"""sizes n
input x[n]
output y[n + 1], z[n], s

kernel k {{
  for i in 1..n - 1 {{
    {body}
  }}
}}
"""
    out = on_loops(src, "parallel")
    assert "parallel" not in str(out)


def test_parallel_marks_only_one_loop_kernels_and_separating_indices():
    src = """sizes n
input x[n], A[n, n]
output y[n, n], z[n], t[n]

kernel a {
  for i in 0..n - 1 {
    for j in 0..n - 1 {
      y[j, 2*i - i] = A[i, j]
      y[j, i] += x[j] * y[j, i]
    }
  }
}

kernel b {
  local c = 0
  for i in 0..n - 1 {
    z[i] = x[i]
  }
}

kernel c {
  for i in 0..n - 1 {
    t[n - 1 - i] = x[i]
  }
}
"""
    out = on_loops(src, "parallel")
    verify_loops(out)
    assert kernel_text(out, "a").startswith("kernel a {\n  parallel for i in 0..n - 1 {\n")
    assert "parallel" not in kernel_text(out, "b")
    assert kernel_text(out, "c").startswith("kernel c {\n  parallel for i in 0..n - 1 {\n")


def test_the_evaluator_catches_a_race():
    from loop_eval import RaceError

    src = """sizes n
input x[n]
output y[n]

kernel k {
  parallel for i in 1..n - 1 {
    y[i] = x[i]
    y[i - 1] = x[i]
  }
}
"""
    with pytest.raises(RaceError):
        run_loops(parse_loop_program(src), {"x": np.ones(4)})


# ---------------------------------------------------------------------------
# All four together
# ---------------------------------------------------------------------------


def test_the_whole_l2_pipeline_on_the_logistic_regression_hessian():
    p = tcc.parse(INLINE_LOGISTIC)
    h = tcc.grad(tcc.grad(p, of="f", wrt="w"), of="dw", wrt="w")
    loops = assert_loops_match_interpreter(h, "lower-loops,hoist,fuse,reuse-buffers,parallel", {"m": 4, "n": 3})
    # hoist makes X w and exp(-y * X w) temps over the examples, fuse puts
    # both in one kernel and forwards X w to the exp, reuse-buffers drops the
    # temp for X w that nobody reads any more, parallel marks both kernels
    assert str(loops) == (
        "# tcc loops\n"
        "sizes m, n\n"
        "input X[m, n], w[n], y[m], df, ddw[n]\n"
        "output dw2[n]\n"
        "temp dw2_t2[m]\n"
        "\n"
        "kernel dw2_t_dw2_t2 {\n"
        "  parallel for dw2_z0 in 0..m - 1 {\n"
        "    local dw2_acc2 = 0\n"
        "    for j in 0..n - 1 {\n"
        "      dw2_acc2 += X[dw2_z0, j] * w[j]\n"
        "    }\n"
        "    let dw2_v = -y[dw2_z0]\n"
        "    let dw2_v3 = exp(dw2_v * dw2_acc2)\n"
        "    dw2_t2[dw2_z0] = dw2_v3\n"
        "  }\n"
        "}\n"
        "\n"
        "kernel dw2 {\n"
        "  parallel for dw2_0 in 0..n - 1 {\n"
        "    local dw2_acc = 0\n"
        "    for dw2_z1 in 0..n - 1 {\n"
        "      local dw2_acc3 = 0\n"
        "      for dw2_z0 in 0..m - 1 {\n"
        "        let dw2_v = -y[dw2_z0]\n"
        "        let dw2_v2 = X[dw2_z0, dw2_z1] * df * dw2_v\n"
        "        let dw2_v3 = dw2_t2[dw2_z0]\n"
        "        let dw2_v4 = 1 + dw2_v3\n"
        "        dw2_acc3 += (dw2_v2 * (1 / dw2_v4) + -(dw2_v2 * dw2_v3 / dw2_v4**2)) * dw2_v3 * dw2_v * X[dw2_z0, dw2_0]\n"
        "      }\n"
        "      dw2_acc += dw2_acc3 * ddw[dw2_z1]\n"
        "    }\n"
        "    let dw2_acc_g = where(m >= 1, dw2_acc, 0)\n"
        "    dw2[dw2_0] = dw2_acc_g\n"
        "  }\n"
        "}\n"
    )


def test_licm_leaves_names_that_are_declared_twice():
    # hand-written L2 may reuse a name in sibling blocks; both lets moving
    # into the i loop's body would declare v twice in one block
    src = """sizes n
input x[n]
output y[n, n], z[n, n]

kernel k {
  for i in 0..n - 1 {
    for j in 0..n - 1 {
      let v = x[i] * 2
      y[i, j] = v
    }
    for j in 0..n - 1 {
      let v = x[i] * 3
      z[i, j] = v
    }
  }
}
"""
    out = on_loops(src, "hoist")
    verify_loops(out)
    assert str(out) == str(parse_loop_program(src))


# ---------------------------------------------------------------------------
# Random programs (the generators of test_autodiff_properties)
# ---------------------------------------------------------------------------

RANDOM = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


def _random_case(text: str, wrt, sizes) -> None:
    note(text)
    p = run_pipeline(tcc.parse(text), "infer-ranges")
    g = tcc.grad(p, of="f", wrt=wrt)
    note(str(g))
    for program in (p, g):
        assert_loops_match_interpreter(program, PIPELINES[-1], sizes or {})


@RANDOM
@given(programs())
def test_random_programs_and_gradients_through_the_l2_passes(prog):
    text, wrt = prog
    _random_case(text, wrt, None)


@RANDOM
@given(inferred_programs())
def test_random_symbolic_programs_and_gradients_through_the_l2_passes(prog):
    text, wrt, sizes = prog
    try:
        tcc.transform(text, "infer-ranges")
    except TccError:
        assume(False)
    _random_case(text, wrt, sizes)
