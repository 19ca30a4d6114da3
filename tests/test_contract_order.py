"""The ``contract-order`` pass: sums over products of three or more factors become pairwise contractions.

Checked through the public API: the order chosen on known cases (the issue's
``T = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])`` becomes two O(n^4)
contractions, a matrix chain is associated the cheap way), what the pass
must leave alone, random multi-factor contractions compiled (CPU and
cuda-sim, float32 and float64, extents 0, 1 and primes) against the
reference interpreter, and derivatives of such programs compiled with the
default pipelines, which run the pass.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import tcc
from tcc.build import DEFAULT_GPU_PIPELINE, DEFAULT_LOOP_PIPELINE
from tcc.ir.expr import Sum, postorder
from tcc.ir.verifier import verify

sys.path.insert(0, str(Path(__file__).parent))
from compare import assert_matches_interpreter, random_inputs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

T_SRC = """input A[n, n, n], B[n, n], C[n, n]
output T[n, n, n]
T[i, j, l] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])
"""
ALWAYS = "infer-ranges,contract-order{min-work=0 min-gain=1}"
# the CPU pipeline with the pass rewriting whatever it can (tiny sizes, any gain)
CPU_ALWAYS = DEFAULT_LOOP_PIPELINE.replace("contract-order", "contract-order{min-work=0 min-gain=1}")
GPU_ALWAYS = DEFAULT_GPU_PIPELINE.replace("contract-order", "contract-order{min-work=0 min-gain=1}")


def _order(src: str, passes: str = "infer-ranges,contract-order") -> str:
    return str(tcc.transform(src, passes))


def _loop_depths(program) -> dict[str, int]:
    """Per definition: how many index variables its loop nest has (its indices and every sum variable)."""
    return {d.name: len(d.indices) + sum(isinstance(n, Sum) for n in postorder(d.body)) for d in program.definitions}


# ---------------------------------------------------------------------------
# the order chosen on known cases
# ---------------------------------------------------------------------------


def test_issue_example_becomes_two_pairwise_contractions():
    order = [name.split("{")[0] for name in DEFAULT_LOOP_PIPELINE.split(",")]
    assert order.index("contract-order") < order.index("col2im") < order.index("im2col") < order.index("blas")
    assert DEFAULT_GPU_PIPELINE.startswith("infer-ranges,contract-order,lower-loops,")
    before = tcc.transform(T_SRC)
    assert _loop_depths(before) == {"T": 5}  # O(n^5) as written
    after = tcc.transform(T_SRC, "infer-ranges,contract-order")
    assert str(after) == (
        "input A[n, n, n], B[n, n], C[n, n]\n"
        "output T[n, n, n]\n"
        "local T_ctr[n, n, n]\n"
        "T_ctr[i, p, l] = sum[q: 0..n - 1](A[i, p, q] * C[q, l])\n"
        "T[i, j, l] = sum[p: 0..n - 1](T_ctr[i, p, l] * B[p, j])\n"
    )
    assert _loop_depths(after) == {"T_ctr": 4, "T": 4}  # two O(n^4) contractions
    verify(after)
    assert str(tcc.parse(str(after))) == str(after)
    loops = str(tcc.transform(T_SRC, DEFAULT_LOOP_PIPELINE))
    # with blas after it, both pairwise steps are (batched) BLAS calls: no loop nest is left
    assert "local T_ctr[n, n, n]" in loops
    assert "extern matmul(A, C) -> T_ctr" in loops and "extern matmul(transpose(B), T_ctr) -> T" in loops
    assert "for " not in loops


def test_matrix_chain_is_associated_the_cheap_way():
    # (A B) C costs 10*100*5 + 10*5*50 = 7500 multiply-adds, A (B C) 75000
    src = """input A[10, 100], B[100, 5], C[5, 50]
D[i, l] = sum[p, q](A[i, p] * B[p, q] * C[q, l])
"""
    assert _order(src).endswith(
        "D_ctr[i, q] = sum[p: 0..99](A[i, p] * B[p, q])\n"
        "D[i, l] = sum[q: 0..4](D_ctr[i, q] * C[q, l])\n")
    # the other shape goes the other way
    src2 = """input A[50, 5], B[5, 100], C[100, 10]
D[i, l] = sum[p, q](A[i, p] * B[p, q] * C[q, l])
"""
    assert _order(src2).endswith(
        "D_ctr[p, l] = sum[q: 0..99](B[p, q] * C[q, l])\n"
        "D[i, l] = sum[p: 0..4](A[i, p] * D_ctr[p, l])\n")


def test_ties_go_to_contiguous_loops():
    # dA: summing dA_z0 first or dA_z1 first costs the same; dA_z1 is contiguous in dT and C (a dot
    # product), and the intermediate puts dA_z0, summed next, last, so the second step is one too
    # (the sum autodiff makes of T's three factors; the grad pipeline now orders T first, so it is written out)
    grad = ("input A[n, n, n], B[n, n], C[n, n], dT[n, n, n]\noutput dA[n, n, n]\n"
            "dA[dA_0, dA_1, dA_2] = sum[dA_z1: 0..n - 1, dA_z0: 0..n - 1](dT[dA_0, dA_z0, dA_z1] * "
            "(C[dA_2, dA_z1] * B[dA_1, dA_z0]))\n")
    text = str(tcc.transform(grad, "infer-ranges,contract-order"))
    assert text.endswith(
        "dA_ctr[dA_0, dA_2, dA_z0] = sum[dA_z1: 0..n - 1](dT[dA_0, dA_z0, dA_z1] * C[dA_2, dA_z1])\n"
        "dA[dA_0, dA_1, dA_2] = sum[dA_z0: 0..n - 1](dA_ctr[dA_0, dA_2, dA_z0] * B[dA_1, dA_z0])\n")


def test_symbolic_chain_becomes_matmuls_after_blas():
    src = """input A[n, n], B[n, n], C[n, n], E[n, n]
D[i, l] = sum[p, q, r](A[i, p] * B[p, q] * C[q, r] * E[r, l])
"""
    text = _order(src, "infer-ranges,contract-order,blas")
    assert text.count("matmul(") == 3 and "sum[" not in text
    assert "_lhs" not in text and "_rhs" not in text  # every product in BLAS's orientation: no transposed copies
    assert_matches_interpreter(src, {"n": 7})


def test_scalars_negation_quotients_and_affine_reads():
    src = """input s, A[m, p], B[p, q], C[q, k], E[q], d[m + q]
T[i, l] = -(2 * sum[a, b](s * A[i, a] * B[a, b] * C[b, l] / E[b] * d[i + b]))
"""
    text = _order(src, ALWAYS)
    assert "T_ctr" in text and "s *" not in text.split("\n")[-3]  # the scalar stays in the last step
    assert text.split("\n")[-2].startswith("T[i, l] = -(2 * sum[")
    assert str(tcc.parse(text)) == text
    sizes = {"m": 3, "p": 5, "q": 4, "k": 2}
    for dtype in ("float64", "float32"):
        assert_matches_interpreter(src, sizes, dtype, passes=CPU_ALWAYS)


def test_sum_inside_element_wise_work_is_rewritten():
    src = """input A[n, n], B[n, n], C[n, n], b[n]
Y[i, l] = tanh(sum[p, q](A[i, p] * B[p, q] * C[q, l]) + b[l])
"""
    text = _order(src)
    assert "Y[i, l] = tanh(sum[p: 0..n - 1](A[i, p] * Y_ctr[p, l]) + b[l])" in text and "Y_ctr" in text
    assert_matches_interpreter(src, {"n": 5})


# ---------------------------------------------------------------------------
# what the pass leaves alone
# ---------------------------------------------------------------------------

ALONE = {
    "two factors": "input A[n, n], B[n, n]\nC[i, j] = sum[k](A[i, k] * B[k, j])\n",
    "a guarded factor": "input A[n, n], B[n, n], C[n, n]\n"
                        "T[i, l] = sum[p, q](where(p == q, A[i, p], 0) * B[p, q] * C[q, l])\n",
    "under a where": "input A[n, n], B[n, n], C[n, n]\n"
                     "T[i, l] = where(i > 0, sum[p, q](A[i, p] * B[p, q] * C[q, l]), 0)\n",
    "a triangular range": "input A[n, n], B[n, n], C[n, n]\n"
                          "T[i, l] = sum[p: 0..i](sum[q](A[i, p] * B[p, q] * C[q, l]))\n",
    "a factor with a sum": "input A[n, n], B[n, n], C[n, n], E[n, n]\n"
                           "T[i, l] = sum[p, q](A[i, p] * B[p, q] * sum[r](C[q, r] * E[r, l]))\n",
    "a sum inside a sum": "input A[n, n], B[n, n], C[n, n], x[n]\n"
                          "f = sum[i](x[i] * sum[p, q](A[i, p] * B[p, q] * C[q, i]))\n",
    "a range not from 0": "input A[n, n], B[n, n], C[n, n]\n"
                          "T[i, l] = sum[p: 0..n - 1, q: 1..n - 1](A[i, p] * B[p, q] * C[q, l])\n",
    "a range that may be empty": "input A[n, n], B[n, n], C[n, n]\n"
                                 "T[i, l] = sum[p: 0..n - 2, q: 0..n - 1](A[i, p] * B[p, q] * C[q, l])\n",
    "an unused summation variable": "input A[n, n], B[n, n], C[n, n]\n"
                                    "T[i, l] = sum[p, q, r: 0..n - 1](A[i, p] * B[p, q] * C[q, l])\n",
}


@pytest.mark.parametrize("name", sorted(ALONE))
def test_leaves_alone(name):
    src = ALONE[name]
    assert _order(src, ALWAYS) == _order(src, "infer-ranges")


def test_control_without_the_guard_is_rewritten():
    src = "input A[n, n], B[n, n], C[n, n]\nT[i, l] = sum[p, q](A[i, p] * B[p, q] * C[q, l])\n"
    assert "T_ctr" in _order(src)


def test_min_work_and_min_gain():
    small = T_SRC.replace("[n, n, n]", "[6, 6, 6]").replace("[n, n]", "[6, 6]")  # 6^5 < 32768
    assert "T_ctr" not in _order(small)
    assert "T_ctr" in _order(small, "infer-ranges,contract-order{min-work=7000}")
    # x^T A x: pairwise saves only a third of the multiplies, and hoist factors the written nest anyway
    quad = str(ROOT / "examples" / "quadratic_form.tcc")
    assert "f_ctr" not in _order(quad)
    assert "f_ctr[i] = sum[j: 0..n - 1](A[i, j] * x[j])" in _order(quad, "infer-ranges,contract-order{min-gain=1}")
    # a small symbolic estimate makes the T example not worth it
    assert "T_ctr" not in _order(T_SRC, "infer-ranges,contract-order{symbolic-size=2}")


def test_options_print_back_and_the_order_is_deterministic():
    from tcc.pipeline import format_pipeline, resolve_pipeline

    spec = "infer-ranges,contract-order{min-work=7 min-gain=1.5 minimize=flops symbolic-size=64}"
    assert format_pipeline(resolve_pipeline(spec)) == spec
    # square: every association of the chain costs the same, ties must break the same way every run
    src = """input A[n, n], B[n, n], C[n, n], E[n, n], F[n, n, n]
T[i, j, k] = sum[p, q, r](A[i, p] * B[p, q] * C[q, r] * E[r, j] * F[p, r, k])
"""
    outs = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        run = subprocess.run([sys.executable, "-m", "tcc", "compile", "-", "--passes", "infer-ranges,contract-order"],
                             input=src, capture_output=True, text=True, env=env, check=True)
        outs.add(run.stdout)
    assert len(outs) == 1 and "T_ctr" in outs.pop()


# ---------------------------------------------------------------------------
# random multi-factor contractions against the interpreter
# ---------------------------------------------------------------------------

LETTERS = "ijkpqrs"
EXTENTS = (0, 1, 2, 3, 5, 7)


@st.composite
def contractions(draw):
    """``T[out] = sum[summed](c * F0[...] * F1[...] * ...)``: 3-5 factors on random index subsets, each index a size of its own."""
    letters = draw(st.lists(st.sampled_from(LETTERS), min_size=2, max_size=5, unique=True))
    nfac = draw(st.integers(3, 5))
    factors = [draw(st.lists(st.sampled_from(letters), min_size=1, max_size=3, unique=True)) for _ in range(nfac)]
    used = [x for x in letters if any(x in f for f in factors)]
    out = [x for x in used if draw(st.booleans())]
    summed = [x for x in used if x not in out]
    if not summed:
        summed, out = out[-1:], out[:-1]
    inputs = ", ".join(f"F{k}[{', '.join('n' + x for x in f)}]" for k, f in enumerate(factors))
    reads = " * ".join(f"F{k}[{', '.join(f)}]" for k, f in enumerate(factors))
    prefix = draw(st.sampled_from(["", "-", "2 * ", "0.5 * -"]))
    lhs = f"T[{', '.join(out)}]" if out else "T"
    src = f"input {inputs}\n{lhs} = {prefix}sum[{', '.join(summed)}]({reads})\n"
    sizes = {"n" + x: draw(st.sampled_from(EXTENTS)) for x in used}
    return src, sizes


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(contractions(), st.sampled_from(["float64", "float32"]))
def test_random_contractions_match_the_interpreter(case, dtype):
    src, sizes = case
    note(src)
    note(_order(src, ALWAYS))
    rewritten = tcc.transform(src, ALWAYS)
    event("rewritten" if "T_ctr" in str(rewritten) else "left as written")
    verify(rewritten)
    assert str(tcc.parse(str(rewritten))) == str(rewritten)
    assert_matches_interpreter(src, sizes, dtype, passes=CPU_ALWAYS)


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(contractions())
def test_random_contractions_on_cuda_sim(case):
    src, sizes = case
    note(src)
    assert_matches_interpreter(src, sizes, "float64", passes=GPU_ALWAYS, target="cuda-sim")


def test_random_cases_are_rewritten_often():
    """Programs shaped as the generator's (4 indices, 3-5 factors, one free index) mostly gain an intermediate: the random tests exercise the rewrite."""
    rng = random.Random(0)
    rewritten = 0
    for _ in range(40):
        letters = rng.sample(LETTERS, 4)
        factors = [rng.sample(letters, rng.randint(1, 3)) for _ in range(rng.randint(3, 5))]
        used = [x for x in letters if any(x in f for f in factors)]
        inputs = ", ".join(f"F{k}[{', '.join('n' + x for x in f)}]" for k, f in enumerate(factors))
        reads = " * ".join(f"F{k}[{', '.join(f)}]" for k, f in enumerate(factors))
        src = f"input {inputs}\nT[{used[0]}] = sum[{', '.join(used[1:])}]({reads})\n"
        rewritten += "T_ctr" in _order(src, ALWAYS)
    assert rewritten >= 20


# ---------------------------------------------------------------------------
# derivatives: tcc.grad, then the default compile pipelines run the pass
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("wrt", ["A", "B", "C"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gradients_of_the_issue_example(wrt, dtype):
    grad = tcc.grad(T_SRC, "T", wrt)
    assert "_ctr" in str(tcc.transform(grad, "infer-ranges,contract-order"))
    for n in (0, 1, 5):
        assert_matches_interpreter(grad, {"n": n}, dtype)


def test_gradient_of_a_scalar_loss_over_a_chain():
    src = """input A[m, p], B[p, q], C[q, k], W[m, k]
f = sum[i, l](W[i, l] * sin(sum[a, b](A[i, a] * B[a, b] * C[b, l])))
"""
    sizes = {"m": 3, "p": 5, "q": 2, "k": 7}
    for wrt in ("A", "B", "C"):
        grad = tcc.grad(src, "f", wrt)
        assert_matches_interpreter(grad, sizes, passes=CPU_ALWAYS)
        assert_matches_interpreter(grad, sizes, passes=GPU_ALWAYS, target="cuda-sim")


def test_issue_example_on_cuda_sim():
    assert "T_ctr" in str(tcc.transform(T_SRC, DEFAULT_GPU_PIPELINE))
    for n in (1, 4):
        assert_matches_interpreter(T_SRC, {"n": n}, "float32", target="cuda-sim")


@pytest.mark.parametrize("threads", [1, 2])
def test_issue_example_with_threads_and_a_given_output(threads):
    program = tcc.transform(T_SRC)
    for n in (0, 7):
        inputs = random_inputs(program, {"n": n})
        want = tcc.run(T_SRC, inputs)["T"]
        out = np.full((n, n, n), np.nan)
        got = tcc.compile(T_SRC, threads=threads)(**inputs, T=out)
        assert got["T"] is out and set(got) == {"T"}  # the intermediate is a local: not returned
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(want).max(initial=0))))


def test_derivative_pipelines_order_first_so_value_and_gradients_share_products():
    """contract-order runs before autodiff: T_ctr = A C serves T and dB, dT_ctr = B dT serves dA and dC
    (six n^4 products where ordering each gradient on its own made eight)."""
    g = tcc.grad(T_SRC, "T", ["A", "B", "C"], value=True)
    text = str(g)
    assert "T_ctr[i, p, l] = sum[q: 0..n - 1](A[i, p, q] * C[q, l])" in text
    assert "dT_ctr" in text and "T_ctr[dB_z1, dB_0, dB_z0]" in text
    compiled = tcc.compile(g)
    externs = [k.extern.fn for k in compiled.loops.kernels if k.extern is not None]
    assert len(externs) == 6, externs
    for n in (0, 1, 6):
        assert_matches_interpreter(g, {"n": n})


def test_a_stacked_product_with_no_columns():
    """Found by the random test above: a stack of matrices times a matrix with no columns (``nj = 0``) made
    the runtime's one-GEMM reshape ``reshape(-1, 0)``, which NumPy cannot resolve; an empty result is now
    left as it is."""
    src = ("input F0[ni, nj], F1[nk], F2[ni, nk, np], F3[np, nj]\n"
           "T[j, k] = sum[i, p](F0[i, j] * F1[k] * F2[i, k, p] * F3[p, j])\n")
    for dtype in ("float64", "float32"):
        assert_matches_interpreter(src, {"ni": 1, "nj": 0, "nk": 1, "np": 1}, dtype, passes=CPU_ALWAYS)
