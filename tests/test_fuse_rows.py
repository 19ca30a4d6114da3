"""``fuse-rows``: chains of row-wise kernels fuse over their outer loop.

Every test checks both what the pass did to the L2 program (which kernels
are left, so a pass that fused nothing, or everything, fails) and that the
compiled code still equals the reference interpreter: layer normalisation
and its gradient, chains that must not fuse (another row, a transposed read,
a column reduction), extents 0, 1 and primes, float32 and float64, one and
two threads, given output arrays, NaN and infinite data, the ``cuda-sim``
target, and hypothesis-generated chains.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import tcc
from tcc.backends.builtin_targets import DEFAULT_GPU_PIPELINE, DEFAULT_LOOP_PIPELINE
from tcc.reference.interpreter import evaluate
from tcc.ir.loops import LoopProgram
from tcc.ir.loops_parser import parse_loop_program
from tcc.ir.loops_verifier import verify_loops
from tcc.passes.pass_base import Level
from tcc.pipeline import run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import assert_matches_interpreter, assert_results_close, random_inputs  # noqa: E402
from loop_eval import run_loops  # noqa: E402

# layer normalisation over the rows of X[n, m] (the program with symbolic extents)
LAYERNORM = """input X[n, m], g[m], b[m]
local mu[n], xc[n, m], r[n]
output Y[n, m]
mu[a] = sum[c](X[a, c]) / 7
xc[a, c] = X[a, c] - mu[a]
r[a] = 1 / sqrt(sum[c](xc[a, c]**2) / 7 + 1e-05)
Y[a, c] = xc[a, c] * r[a] * g[c] + b[c]
"""

L2_UPTO_FUSE_ROWS = DEFAULT_LOOP_PIPELINE[: DEFAULT_LOOP_PIPELINE.index("fuse-rows") + len("fuse-rows")]


def loops(src: str | object, passes: str = DEFAULT_LOOP_PIPELINE) -> LoopProgram:
    program = tcc.parse(src) if isinstance(src, str) else src
    out = run_pipeline(program, passes)
    verify_loops(out)
    return out


def kernels(src: str | object, passes: str = DEFAULT_LOOP_PIPELINE) -> list[str]:
    return [k.name for k in loops(src, passes).kernels]


def grad_program() -> object:
    p = tcc.transform(LAYERNORM, "infer-ranges")
    return tcc.grad(p, of="Y", wrt=["X", "g", "b"])


# ---------------------------------------------------------------------------
# Where it sits
# ---------------------------------------------------------------------------


def test_fuse_rows_runs_before_unroll_jam_on_the_cpu_and_not_on_the_gpu():
    cpu = DEFAULT_LOOP_PIPELINE.split(",")
    assert cpu.index("reduce-in-place") < cpu.index("fuse-rows") < cpu.index("unroll-jam") < cpu.index("fuse")
    # the GPU gives every element its own thread: a row kernel would take that away
    assert "fuse-rows" not in DEFAULT_GPU_PIPELINE.split(",")


# ---------------------------------------------------------------------------
# Layer normalisation
# ---------------------------------------------------------------------------


def test_layernorm_is_one_parallel_loop_over_the_rows():
    out = loops(LAYERNORM)
    assert [k.name for k in out.kernels] == ["mu_xc_r_Y"]
    (kernel,) = out.kernels
    assert kernel.parallel_loop is not None and kernel.parallel_loop.var == "a"
    text = str(out)
    # the row's mean and deviation are forwarded as scalars; xc is still stored (a local is returned),
    # in the loop of r's sum (fuse-inner), which reads it through a let
    assert "xc[a, c] = xc_v" in text and "r_acc += xc_v**2" in text
    assert "Y[a, c] = xc[a, c] * r_v * g[c] + b[c]" in text
    assert "_rest" not in text and "a_s" not in text
    # without fuse-rows the same pipeline strip-mines the reductions and fuses nothing
    unfused = kernels(LAYERNORM, DEFAULT_LOOP_PIPELINE.replace("fuse-rows,", ""))
    assert unfused == ["mu", "mu_rest", "xc", "r", "r_rest", "Y"]


def test_fuse_rows_dump_is_the_fused_kernel():
    out = loops(LAYERNORM, L2_UPTO_FUSE_ROWS)
    assert [k.name for k in out.kernels] == ["mu_xc_r_Y"]
    assert out.kernels[0].body[0].parallel is False  # marking it is parallel's job, later


@pytest.mark.parametrize("n,m", [(0, 3), (3, 0), (1, 1), (1, 13), (7, 1), (13, 11), (5, 2)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_layernorm_matches_the_interpreter(n, m, dtype, threads):
    assert_matches_interpreter(tcc.parse(LAYERNORM), {"n": n, "m": m}, dtype, threads=threads)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_layernorm_writes_given_outputs_in_place(dtype):
    p = tcc.transform(LAYERNORM, "infer-ranges")
    f = tcc.compile(p, dtype=dtype, threads=2)
    inputs = random_inputs(p, {"n": 11, "m": 5}, seed=3, dtype=dtype)
    given_arrays = {name: np.full(shape, np.nan, dtype=dtype) for name, shape in (("Y", (11, 5)), ("xc", (11, 5)), ("mu", (11,)))}
    got = f(**inputs, **given_arrays)
    for name, arr in given_arrays.items():
        assert got[name] is arr
    want = evaluate(p, {k: v.astype(np.float64) for k, v in inputs.items()}, np.float64)
    assert_results_close(got, want, dtype)


@pytest.mark.parametrize("threads", [1, 2])
def test_layernorm_with_nan_and_inf_rows(threads):
    p = tcc.transform(LAYERNORM, "infer-ranges")
    inputs = random_inputs(p, {"n": 6, "m": 5}, seed=4)
    inputs["X"][1, 2] = np.nan
    inputs["X"][3, 0] = np.inf
    inputs["X"][4, :] = 0.0  # a constant row: r is 1 / sqrt(eps)
    inputs["g"][4] = -np.inf
    got = tcc.compile(p, threads=threads)(**inputs)
    want = evaluate(p, inputs, np.float64)
    assert np.isnan(want["Y"]).any() and np.isnan(want["Y"][0]).sum() == 0  # the data does reach NaN, row 0 does not
    assert_results_close(got, want, "float64")


# ---------------------------------------------------------------------------
# The gradient
# ---------------------------------------------------------------------------


def test_layernorm_gradient_fuses_its_row_chain():
    g = grad_program()
    names = kernels(g)
    # forward chain and the backward chain dr, dxc_t, dxc, dmu, dX share the row loop;
    # dg and db reduce over the rows (columns of dY), so they stay apart (unroll-jam strip-mines them)
    assert names[0] == "mu_xc_r_dr_dxc_t_dxc_dmu_dX"
    assert names[1:] and all(n.split("_")[0] in ("dg", "db") for n in names[1:])
    for n, m in ((1, 1), (7, 5), (2, 13)):
        assert_matches_interpreter(g, {"n": n, "m": m})
    assert_matches_interpreter(g, {"n": 7, "m": 5}, "float32", threads=2)


def test_the_gradient_sums_each_row_of_squares_once():
    # dxc_t = sqrt(sum[c](xc[a, c]**2) / 7 + eps) repeats r's sum: once they share the row loop, it is r's
    program = tcc.grad(tcc.parse(LAYERNORM), of="Y", wrt=["X", "g", "b"], value=True)
    for results in (None, ["Y", "dX", "dg", "db"]):   # with results=, rematerialize inlines xc: (X - mu_v)**2
        text = str(tcc.compile(program, results=results).loops)
        row = text[text.index("kernel mu_"): text.index("\n}\n")]
        assert "let dxc_t_acc = r_acc" in row
        assert row.count("**2\n") == 1   # one pass over the row for both sums (r_acc += xc_v**2 or (X - mu_v)**2)
    assert_matches_interpreter(program, {"n": 5, "m": 7}, threads=2)
    assert_matches_interpreter(program, {"n": 1, "m": 1}, "float32")


SHARED = """input X[4, 8]
output s[4], u[4], w[4, 8]

kernel s {{
  parallel for a in 0..3 {{
    local s_acc = 0
    for c in 0..7 {{
      s_acc += X[a, c] * X[a, c]
    }}
    s[a] = s_acc
    {between}
    local u_acc = 0
    for k in 0..{hi} {{
      u_acc += X[a, k] * X[a, k]
    }}
    u[a] = u_acc
  }}
}}
"""


@pytest.mark.parametrize("between, hi, shared", [
    ("w[a, 0] = 1", 7, True),                    # writes nothing the sum reads
    ("", 6, False),                              # another range
    ("s_acc += 1", 7, False),                    # the first accumulator changes
])
def test_a_repeated_reduction_is_shared_only_when_it_is_the_same_value(between: str, hi: int, shared: bool):
    from tcc.passes.fuse_rows import share_reductions

    program = parse_loop_program(SHARED.format(between=between, hi=hi))
    out = share_reductions(program.kernels[0])
    assert ("let u_acc = s_acc" in str(replace_kernels(program, out))) is shared
    if shared:
        verify_loops(replace_kernels(program, out))


def test_a_write_between_to_what_the_sum_reads_keeps_both():
    from tcc.passes.fuse_rows import share_reductions

    src = SHARED.format(between="for c2 in 0..7 {\n      w[a, c2] = 1\n    }", hi=7).replace(
        "X[a, k] * X[a, k]", "w[a, k] * w[a, k]").replace("X[a, c] * X[a, c]", "w[a, c] * w[a, c]")
    program = parse_loop_program(src)
    assert share_reductions(program.kernels[0]) == program.kernels[0]


def replace_kernels(program: LoopProgram, kernel) -> LoopProgram:
    from dataclasses import replace

    return replace(program, kernels=(kernel,))


def test_cuda_sim_keeps_one_kernel_per_nest():
    p = tcc.transform(LAYERNORM, "infer-ranges")
    gpu = [k.name for k in run_pipeline(p, DEFAULT_GPU_PIPELINE).kernels]
    assert "xc" in gpu and "Y" in gpu  # the element-wise nests keep one thread per element
    assert_matches_interpreter(p, {"n": 5, "m": 7}, target="cuda-sim")
    assert_matches_interpreter(grad_program(), {"n": 3, "m": 4}, target="cuda-sim")


# ---------------------------------------------------------------------------
# What must not fuse
# ---------------------------------------------------------------------------

HEAD = "input X[n, n]\nlocal mu[n]\n"
HEAD2 = "input X[n, n]\nlocal mu[n], xc[n, n]\n"
NEGATIVE = {
    # another row of mu: iteration a would need mu[n - 1 - a] before the loop got there
    "reversed row": (HEAD + "output y[n, n]\nmu[a] = sum[c](X[a, c])\ny[a, c] = X[a, c] * mu[n - 1 - a]\n", ["mu", "y"]),
    # the next row: also a different range (a in 0..n-2)
    "next row": (HEAD + "output y[n - 1, n]\nmu[a] = sum[c](X[a, c])\ny[a, c] = X[a, c] * mu[a + 1]\n", ["mu", "y"]),
    # the transposed row
    "transposed": (HEAD2 + "output y[n, n]\nmu[a] = sum[c](X[a, c])\nxc[a, c] = X[a, c] - mu[a]\ny[a, c] = xc[c, a]\n", ["mu_xc", "y"]),
    # a column reduction over what the rows wrote (same range: the matrix is square)
    "column sum": (HEAD2 + "output s[n]\nmu[a] = sum[c](X[a, c])\nxc[a, c] = X[a, c] - mu[a]\ns[c] = sum[a](xc[a, c])\n", ["mu_xc", "s"]),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_chains_reading_other_rows_do_not_fuse(case):
    src, want = NEGATIVE[case]
    names = kernels(src, L2_UPTO_FUSE_ROWS)
    assert names == want
    assert_matches_interpreter(tcc.parse(src), {"n": 5}, threads=2)
    assert_matches_interpreter(tcc.parse(src), {"n": 1}, "float32")


def test_the_next_row_over_the_same_range_does_not_fuse():
    # the L1 program above gives the two loops different ranges; here they are equal, so
    # only the dependence test (mu[a + 1] is written by the next iteration) keeps them apart
    src = """sizes n
input X[n, n]
output mu[n], y[n, n]

kernel mu {
  for a in 0..n - 2 {
    mu[a + 1] = X[a, 0]
  }
}

kernel y {
  for a in 0..n - 2 {
    y[a, 0] = mu[a + 1] + mu[a]
  }
}
"""
    program = parse_loop_program(src)
    assert [k.name for k in run_pipeline(program, "fuse-rows", start=Level.LOOPS).kernels] == ["mu", "y"]
    # reading only mu[a + 1], the element this very iteration wrote, is a chain
    same = parse_loop_program(src.replace(" + mu[a]", ""))
    assert [k.name for k in run_pipeline(same, "fuse-rows", start=Level.LOOPS).kernels] == ["mu_y"]


def test_independent_neighbours_are_left_to_fuse():
    # y and z only share an input: no chain, fuse-rows leaves them, the later fuse takes them
    src = "input X[n, m]\noutput y[n], z[n]\ny[a] = sum[c](X[a, c])\nz[a] = sum[c](X[a, c]**2)\n"
    assert kernels(src, L2_UPTO_FUSE_ROWS) == ["y", "z"]
    assert_matches_interpreter(tcc.parse(src), {"n": 5, "m": 3})


def test_a_chain_that_would_lose_its_parallel_loop_does_not_fuse():
    # k1 accumulates a column sum h[c] over the rows (its row loop is not race-free);
    # the chain through t would make the row loop of u sequential too
    src = """sizes n, m
input X[n, m]
output t[n], u[n], h[m]

kernel k1 {
  for a in 0..n - 1 {
    local acc = 0
    for c in 0..m - 1 {
      acc += X[a, c]
      h[c] += X[a, c]
    }
    t[a] = acc
  }
}

kernel k2 {
  for a in 0..n - 1 {
    u[a] = t[a] * 2
  }
}
"""
    program = parse_loop_program(src)
    # fuse alone would fuse them (the dependence through t stays in the row) ...
    assert [k.name for k in run_pipeline(program, "fuse", start=Level.LOOPS).kernels] == ["k1_k2"]
    # ... fuse-rows keeps the parallel k2
    assert [k.name for k in run_pipeline(program, "fuse-rows", start=Level.LOOPS).kernels] == ["k1", "k2"]


# ---------------------------------------------------------------------------
# Generated chains
# ---------------------------------------------------------------------------


@st.composite
def chains(draw):
    """A chain of row reductions and element-wise definitions over X[n, m], each reading
    earlier ones at its own row (sometimes at another column), some at another row
    (``n - 1 - a``).  Returns the source and the kernel groups fuse-rows must make."""
    defs: list[tuple[str, bool]] = []  # (name, is a matrix)
    lines, groups = [], []
    group: set[str] = set()
    for k in range(draw(st.integers(2, 6))):
        name, matrix = f"t{k}", draw(st.booleans())
        terms = [draw(st.sampled_from(["X[a, c]", "X[a, m - 1 - c]", "1.5 * X[a, c]"]))]
        chained = broken = False
        # mostly the previous definition (a chain), sometimes older ones too, or none
        reads = draw(st.lists(st.sampled_from(defs), max_size=2, unique=True)) if defs else []
        if defs and defs[-1] not in reads and draw(st.integers(0, 4)):
            reads.append(defs[-1])
        for prev, pm in reads:
            row = draw(st.sampled_from(["a", "a", "a", "n - 1 - a"]))
            col = draw(st.sampled_from(["c", "m - 1 - c"]))
            terms.append(f"{prev}[{row}, {col}]" if pm else f"{prev}[{row}]")
            if prev in group:
                chained = True
                broken |= row != "a"
        ops = [draw(st.sampled_from([" + ", " * ", " - "])) for _ in terms[1:]]
        body = terms[0] + "".join(o + t for o, t in zip(ops, terms[1:]))
        if matrix:
            lines.append(f"{name}[a, c] = {draw(st.sampled_from(['', 'tanh', 'exp']))}({body})")
        else:
            lines.append(f"{name}[a] = sum[c]({body}) / 2.5")  # never m: no exact cancellation
        if group and (not chained or broken):
            groups.append(sorted(group))
            group = set()
        group.add(name)
        defs.append((name, matrix))
    groups.append(sorted(group))
    decls = [f"{n}[n, m]" if mtx else f"{n}[n]" for n, mtx in defs]
    src = "input X[n, m]\nlocal " + ", ".join(decls[:-1] or ["z0[n]"]) + "\noutput " + decls[-1] + "\n"
    if len(decls) == 1:
        src += "z0[a] = X[a, 0]\n"
    return src + "\n".join(lines) + "\n", groups


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(chains(), st.sampled_from([(4, 3), (1, 1), (5, 7), (0, 2)]), st.sampled_from(["float64", "float32"]))
def test_generated_chains_fuse_exactly_where_rows_allow(chain, sizes, dtype):
    src, groups = chain
    note(src)
    out = loops(src, L2_UPTO_FUSE_ROWS)
    made = [sorted(n for n in k.name.split("_")) for k in out.kernels]
    assert made == groups, str(out)
    n, m = sizes
    program = tcc.parse(src)
    inputs = random_inputs(tcc.transform(program, "infer-ranges"), {"n": n, "m": m})
    # the L2 evaluator checks bounds and races of the fused program; compiled code the rest
    full = loops(src)
    want = evaluate(tcc.transform(program, "infer-ranges"), inputs, np.float64)
    got = run_loops(full, inputs)
    for name, value in got.items():
        np.testing.assert_allclose(value, want[name], rtol=1e-10, atol=1e-12, err_msg=name)
    assert_matches_interpreter(program, {"n": n, "m": m}, dtype, threads=2)


# ---------------------------------------------------------------------------
# Every example and its derivatives: the L2 evaluator (bounds, NaN-filled
# results, races of parallel loops) against the interpreter; deterministic
# ---------------------------------------------------------------------------

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.tcc"))
ROW_PIPELINES = ["lower-loops,fuse-rows", "lower-loops,hoist,fuse-rows,fuse,reuse-buffers,parallel",
                 DEFAULT_LOOP_PIPELINE.removeprefix("infer-ranges,contract-order,col2im,im2col,blas,")]


@pytest.mark.parametrize("path", EXAMPLES + ["layernorm"], ids=[p.stem for p in EXAMPLES] + ["layernorm"])
def test_examples_and_gradients_through_fuse_rows(path):
    p = tcc.transform(LAYERNORM if path == "layernorm" else tcc.parse(path), "infer-ranges")
    g = tcc.grad(p, of=p.results()[0], wrt=[d.name for d in p.inputs if not d.is_index])
    sizes = {"n": 4, "m": 3, "p": 2, "r": 2, "h": 5, "w": 6}
    for program in (p, g):
        inputs = random_inputs(program, {s: sizes.get(s, 3) for s in program.sizes()})
        want = evaluate(program, inputs, np.float64)
        for passes in ROW_PIPELINES:
            out = run_pipeline(program, passes)
            verify_loops(out)
            assert str(run_pipeline(program, passes)) == str(out)  # deterministic
            got = run_loops(out, inputs)
            for name, value in got.items():
                np.testing.assert_allclose(value, want[name], rtol=1e-10, atol=1e-12, err_msg=f"{name} after {passes}")
        # fuse-rows twice changes nothing more
        once = run_pipeline(program, "lower-loops,fuse-rows")
        assert str(run_pipeline(once, "fuse-rows", start=Level.LOOPS)) == str(once)


def test_a_row_accumulated_in_place_joins_the_chain():
    # reduce-in-place (before fuse-rows) turns s into row updates s[j, :] += ...; the row sum t
    # and the normalised y read row j of s only, so all three run per row j
    src = ("input X[m, n], Y[m, p]\nlocal s[n, p], t[n]\noutput y[n, p]\n"
           "s[j, k] = sum[i](sqrt(X[i, j] + Y[i, k]))\nt[j] = sum[k](s[j, k])\ny[j, k] = s[j, k] / t[j]\n")
    before = loops(src, L2_UPTO_FUSE_ROWS.replace(",fuse-rows", ""))
    assert "s[j, k] += sqrt(X[i, j] + Y[i, k])" in str(before)  # reduce-in-place did its part
    out = loops(src)
    assert [k.name for k in out.kernels] == ["s_t_y"] and out.kernels[0].parallel_loop is not None
    for sizes in ({"m": 3, "n": 5, "p": 7}, {"m": 0, "n": 2, "p": 3}, {"m": 2, "n": 1, "p": 1}):
        assert_matches_interpreter(tcc.parse(src), sizes, threads=2)
        assert_matches_interpreter(tcc.parse(src), sizes, "float32", threads=1)


def test_a_temp_read_only_at_its_row_is_forwarded_and_dropped():
    # hoist makes X w a temp dw2_t[m] filled by its own kernel, read by the kernel of exp(-y X w);
    # fuse-rows joins them per row, the read becomes the stored scalar, and reuse-buffers drops dw2_t
    p = tcc.parse("input X[m, n], w[n], y[m]\nf = sum[i](log(1 + exp(-y[i] * sum[j](X[i, j] * w[j]))))\n")
    g = tcc.grad(p, of="f", wrt="w")
    h = tcc.grad(g, of="dw", wrt="w")
    without = str(loops(h, DEFAULT_LOOP_PIPELINE.replace("fuse-rows,", "")))
    assert "temp dw2_t[m], dw2_t2[m]" in without
    text = str(loops(h))
    assert "temp dw2_t2[m]\n" in text and "dw2_t[" not in text and "kernel dw2_t_dw2_t2 {" in text
    for sizes in ({"m": 7, "n": 5}, {"m": 1, "n": 2}, {"m": 0, "n": 3}):
        assert_matches_interpreter(h, sizes, threads=2)
