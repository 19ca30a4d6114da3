"""General contractions: ``contract(A[...], B[...])`` and what ``blas`` makes of sums.

Groups of indices -- batch anywhere, several contracted, several free per
side, results whose order interleaves the sides -- run as one ``np.matmul``
after a reshape (or a transposing copy the cost model accepted).  Every
compiled result is compared with the reference interpreter, whose
``contract`` is ``np.einsum`` (independent of the runtime's plan).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import tcc
from tcc.build import DEFAULT_LOOP_PIPELINE
from tcc.runtime.externs.contraction_kernel import run_contract
from tcc.runtime.externs.matrix_functions import einsum_contract
from tcc.ir.diagnostics import TccError
from tcc.ir.loops_parser import parse_loop_program
from tcc.runtime.externs.dispatch import blas_limit

sys.path.insert(0, str(Path(__file__).parent))
from compare import assert_matches_interpreter, assert_results_close, random_inputs  # noqa: E402

ALWAYS = DEFAULT_LOOP_PIPELINE.replace("blas", "blas{min-work=0 copy-cost=0}")
CONTRACT3 = """input A[48, 48, 48], B[48, 48], C[48, 48]
T[i, j, l] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])
"""


def _externs(f) -> list[str]:  # noqa: ANN001
    return [str(k.extern) for k in f.loops.kernels if k.extern is not None]


def test_contract_prints_parses_and_runs_in_l1_and_l2():
    text = "input A[5, 3, 4], B[5, 6, 4]\noutput D[3, 6]\nD[a, b] = contract(A[z, a, y], B[z, b, y])[a, b]\n"
    assert str(tcc.parse(text)) == text
    f = tcc.compile(text)
    loops = str(f.loops)
    assert "extern contract(A[z, a, y], B[z, b, y]) -> D[a, b]" in loops
    assert str(parse_loop_program(loops)) == loops
    got = assert_matches_interpreter(tcc.parse(text))
    rng = np.random.default_rng(1)
    a, b = rng.random((5, 3, 4)), rng.random((5, 6, 4))
    np.testing.assert_allclose(f(A=a, B=b)["D"], np.einsum("zay,zby->ab", a, b), rtol=1e-12)
    assert got["D"].shape == (3, 6)


@pytest.mark.parametrize("bad, why", [
    ("D[a, b] = contract(A[z, a, y], B[z, b, y])[a, b]\nE[a] = contract(A[z, a, z], B[z, a, z])[a]", "repeats"),
    ("D[a, b] = contract(A[z, a, y], B[z, b, w])[a, b]", "one argument only"),
    ("D[a, b] = contract(A[z, a, y], B[z, b])[a, b]", "dimensions"),
    ("D[a, b] = contract(A[z, a, y], B[z, y, b])[a, b]", "extents"),
])
def test_invalid_contractions_are_located_errors(bad, why):
    with pytest.raises(TccError, match=why):
        tcc.compile("input A[5, 3, 4], B[5, 6, 4]\n" + bad + "\n")


def test_the_motivating_gradient_contracts_over_two_indices():
    grad = tcc.grad(CONTRACT3, "T", "A,B,C")
    f = tcc.compile(grad)
    externs = _externs(f)
    assert [e.split(" -> ")[1] for e in externs if e.startswith("extern contract")] == [
        "dB[dB_0, dB_1]", "dC[dC_0, dC_1]"]
    for dtype in ("float64", "float32"):
        for threads in (1, 2):
            assert_matches_interpreter(grad, dtype=dtype, threads=threads)
    # the GPU pipeline has no blas: the same program stays loop nests there and still runs
    sim = tcc.compile(grad, "cuda-sim")
    assert not _externs(sim)
    assert_matches_interpreter(grad, target="cuda-sim")


def test_given_output_arrays_are_written_in_place():
    grad = tcc.grad(CONTRACT3, "T", "B")
    inputs = random_inputs(tcc.transform(grad, "infer-ranges"))
    f = tcc.compile(grad)
    out = np.full((48, 48), np.nan)
    res = f(**inputs, dB=out)
    assert res["dB"] is out
    np.testing.assert_allclose(out, tcc.compile(grad, passes="infer-ranges,lower-loops")(**inputs)["dB"], rtol=1e-10)


def test_non_leading_batch_and_interleaved_results():
    head = "input Q[7, 3, 5], K[4, 3, 5]\n"
    for lhs in ("S[h, i, j]", "S[i, h, j]", "S[j, i, h]"):
        text = head + f"{lhs} = sum[d](Q[i, h, d] * K[j, h, d])\n"
        f = tcc.compile(text, passes=ALWAYS)
        assert any(e.startswith("extern matmul") or e.startswith("extern contract") for e in _externs(f)), _externs(f)
        assert_matches_interpreter(tcc.parse(text), passes=ALWAYS)
        assert_matches_interpreter(tcc.parse(text), passes=ALWAYS, dtype="float32", threads=2)


def test_the_cost_model_keeps_the_loops_where_a_copy_costs_more():
    # A must be copied (its contracted indices straddle a); the other side's free extent is 4 < 8
    text = "input A[64, 64, 64], B[64, 4, 64]\nD[a, b] = sum[z, y](A[z, a, y] * B[z, b, y])\n"
    assert "contract" not in str(tcc.transform(text, "infer-ranges,blas"))
    wide = text.replace("B[64, 4, 64]", "B[64, 64, 64]")
    assert "contract(A[z, a, y], B[z, b, y])" in str(tcc.transform(wide, "infer-ranges,blas"))
    # no copy needed at all: taken whatever the extents (above min-work)
    cheap = "input A[64, 64, 64], B[64, 64, 2]\nD[a, b] = sum[z, y](A[a, z, y] * B[z, y, b])\n"
    assert "contract(A[a, z, y], B[z, y, b])" in str(tcc.transform(cheap, "infer-ranges,blas"))


def test_dense_layer_bias_gradient_reads_the_outlined_side():
    src = "input X[64, 128], W[96, 128], b[96]\nY[a, c] = tanh(sum[k](X[a, k] * W[c, k]) + b[c])\n"
    grad = tcc.grad(src, "Y", "X,W,b")
    got = str(tcc.transform(grad, "infer-ranges,blas"))
    assert "db[db_0] = sum[db_z0: 0..63](dX_lhs[db_z0, db_0])" in got
    assert "dW[dW_0, dW_1] = matmul(transpose(dX_lhs), X)[dW_0, dW_1]" in got
    for threads in (1, 2):
        assert_matches_interpreter(grad, threads=threads)
    assert_matches_interpreter(grad, dtype="float32")


def test_quadratic_form_is_a_matrix_vector_product_and_a_dot():
    src = "input x[n], A[n, n]\nf = sum[i](sum[j](x[i] * A[i, j] * x[j]))\n"
    got = str(tcc.transform(src, "infer-ranges,contract-order,blas"))
    assert "matmul(A, f_rhs)" in got and got.rstrip().endswith("f = sum[i: 0..n - 1](x[i] * f_mm[i, 0])")
    for n in (0, 1, 7, 300):
        assert_matches_interpreter(tcc.parse(src), sizes={"n": n})
    assert_matches_interpreter(tcc.parse(src), sizes={"n": 257}, dtype="float32", threads=2)


def test_blas_limit_caps_and_restores_the_blas_threads():
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    before = blas_threads()
    with blas_limit(1):
        assert all(n <= 1 for n in blas_threads())
    assert blas_threads() == before
    with blas_limit(None):
        assert blas_threads() == before


# -- generated contractions ---------------------------------------------------------------------

_NAMES = "abcdefghij"


@st.composite
def _contractions(draw):  # noqa: ANN001, ANN202
    """A contraction ``D[...] = sum[...](A[...] * B[...])`` with random groups, storage orders and extents."""
    counts = [draw(st.integers(0, 2)) for _ in range(4)]  # batch, left, right, contracted
    if counts[1] + counts[2] == 0:
        counts[1] = 1
    names = iter(_NAMES)
    batch, left, right, summed = ([next(names) for _ in range(c)] for c in counts)
    ext = {x: draw(st.sampled_from([0, 1, 2, 3, 5])) for x in batch + left + right + summed}
    ia = draw(st.permutations(batch + left + summed))
    ib = draw(st.permutations(batch + right + summed))
    out = draw(st.permutations(batch + left + right))
    epilogue = draw(st.sampled_from(["{s}", "2 * {s} + 1", "tanh({s})"]))

    def decl(n: str, ix: list[str]) -> str:
        return f"{n}[{', '.join(str(ext[x]) for x in ix)}]" if ix else n

    def read(n: str, ix: list[str]) -> str:
        return f"{n}[{', '.join(ix)}]" if ix else n

    body = f"A[{', '.join(ia)}] * B[{', '.join(ib)}]" if ia and ib else f"{read('A', ia)} * {read('B', ib)}"
    s = f"sum[{', '.join(summed)}]({body})" if summed else f"({body})"
    lhs = read("D", out)
    return f"input {decl('A', ia)}, {decl('B', ib)}\n{lhs} = {epilogue.format(s=s)}\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_contractions(), st.sampled_from(["float64", "float32"]), st.sampled_from([1, 2]))
def test_generated_contractions_match_the_interpreter(text, dtype, threads):
    note(text)
    program = tcc.parse(text)
    assert_matches_interpreter(program, passes=ALWAYS, dtype=dtype, threads=threads)


@settings(max_examples=60, deadline=None)
@given(_contractions(), st.integers(0, 3))
def test_run_contract_equals_einsum_on_any_strides(text, seed):
    """The runtime kernel alone, on transposed (non-contiguous) inputs and a strided output."""
    program = tcc.transform(tcc.parse(text), "infer-ranges,blas{min-work=0 copy-cost=0}")
    calls = [d for d in program.definitions if getattr(d.body, "spec", ())]
    note(str(program))
    if not calls:
        return
    spec, args = calls[0].body.spec, calls[0].body.args
    ext: dict[str, int] = {}
    for ix, name in zip(spec[:2], args):
        ext.update(zip(ix, (e.const for e in program.extents_of(name))))
    rng = np.random.default_rng(seed)
    # arrays stored in reversed axis order, read through transposed views
    a = rng.random(tuple(ext[x] for x in spec[0])[::-1]).T
    b = rng.random(tuple(ext[x] for x in spec[1])[::-1]).T
    out = np.full(tuple(ext[x] for x in spec[2])[::-1], np.nan).T
    run_contract(spec, a, b, out)
    assert_results_close({"D": np.ascontiguousarray(out)}, {"D": einsum_contract(spec, a, b)}, "float64")


def test_cuda_keeps_loops_for_blas_contractions_and_refuses_a_written_contract():
    from tcc.build import compile_pipeline
    from tcc.pipeline import run_pipeline

    # the GPU pipeline has no blas: the gradient's two-index contractions stay loop nests and lower to PTX
    grad = tcc.transform(tcc.grad(CONTRACT3, "T", "A,B,C"), "infer-ranges")
    module = run_pipeline(grad, compile_pipeline(None, "float64", "cuda", "sm_80", 0))
    assert "contract" not in str(module) and ".entry" in str(module)
    with pytest.raises(TccError, match=r"contract\(A, B\) \(definition 'D'\) is computed by BLAS"):
        tcc.compile("input A[5, 3, 4], B[5, 6, 4]\nD[a, b] = contract(A[z, a, y], B[z, b, y])[a, b]\n", target="cuda")


@st.composite
def _three_factor(draw):  # noqa: ANN001, ANN202
    """``T[...] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])`` with random storage orders and extents:
    ``contract-order`` makes it pairwise, ``blas`` takes the pairs (gradients included)."""
    ext = {x: draw(st.sampled_from([1, 2, 3, 4])) for x in "ijlpq"}
    a = draw(st.permutations("ipq"))
    b = draw(st.permutations("pj"))
    c = draw(st.permutations("ql"))
    out = draw(st.permutations("ijl"))

    def decl(n: str, ix: list[str]) -> str:
        return f"{n}[{', '.join(str(ext[x]) for x in ix)}]"

    return (f"input {decl('A', a)}, {decl('B', b)}, {decl('C', c)}\n"
            f"T[{', '.join(out)}] = sum[p, q](A[{', '.join(a)}] * B[{', '.join(b)}] * C[{', '.join(c)}])\n")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_three_factor(), st.sampled_from(["float64", "float32"]))
def test_generated_three_factor_contractions_and_gradients(text, dtype):
    note(text)
    grad = tcc.grad(text, "T", "A,B,C")
    note(str(tcc.transform(grad, "infer-ranges,contract-order,blas{min-work=0 copy-cost=0}")))
    assert_matches_interpreter(tcc.parse(text), passes=ALWAYS, dtype=dtype)
    assert_matches_interpreter(grad, passes=ALWAYS, dtype=dtype, threads=2)


@pytest.mark.parametrize("h, i, z, j", [(3, 5, 4, 2), (1, 1, 1, 1), (2, 0, 3, 4), (2, 3, 0, 4), (7, 13, 5, 11)])
def test_a_stack_times_one_matrix_is_one_gemm_on_the_stacked_rows(h, i, z, j):
    """``matmul(Q, W)`` and ``matmul(Q, transpose(V))`` with ``Q`` a stack: the runtime folds the stack."""
    text = (f"input Q[{h}, {i}, {z}], W[{z}, {j}], V[{j}, {z}]\n"
            "S[b, x, y] = sum[k](Q[b, x, k] * W[k, y])\nR[b, x, y] = sum[k](Q[b, x, k] * V[y, k])\n")
    f = tcc.compile(text, passes=ALWAYS)
    assert _externs(f) == ["extern matmul(Q, W) -> S", "extern matmul(Q, transpose(V)) -> R"]
    for dtype in ("float64", "float32"):
        assert_matches_interpreter(tcc.parse(text), passes=ALWAYS, dtype=dtype)


def test_reuse_needs_the_whole_range_of_the_outlined_side():
    text = ("input dY[64, 96], Y[64, 96], W[96, 128]\n"
            "dX[a, k] = sum[c](dY[a, c] * (1 - Y[a, c]**2) * W[c, k])\n"
            "db[c] = sum[a: 0..31](dY[a, c] * (1 - Y[a, c]**2))\n"
            "db2[c] = sum[a](dY[a, c] * (1 - Y[a, c]**2))\n")
    got = str(tcc.transform(text, "infer-ranges,blas"))
    assert "db[c] = sum[a: 0..31](dY[a, c] * (1 - Y[a, c]**2))" in got
    assert "db2[c] = sum[a: 0..63](dX_lhs[a, c])" in got
    assert_matches_interpreter(tcc.parse(text))


def test_derivatives_of_a_written_contract_are_its_sums_and_match_finite_differences():
    from tcc.reference.fdcheck import check_gradients

    src = ("input A[5, 3, 4], B[4, 6, 5]\n"
           "D[b, a] = contract(A[z, a, y], B[y, b, z])[b, a]\nf = sum[a, b](sin(D[b, a]))\n")
    grad = str(tcc.grad(src, "f", "A,B"))
    assert "contract" not in grad and "sum[" in grad
    for target in ("reference", "cpu"):
        results = check_gradients(tcc.parse(src), "f", ["A", "B"], target=target)
        assert all(r.ok for r in results), results
    jvp = tcc.grad(src, "f", "A", mode="forward")
    assert "contract" not in str(jvp)


# -- a contracted index as a batch index (compiler/runtime/externs/contraction_kernel.py plan_split) ----------
SPLIT_SPEC = (("z1", "b", "z0"), ("z1", "a", "z0"), ("a", "b"))  # contract3's dB: z1 leads both operands


@pytest.mark.parametrize("n", [0, 1, 2, 7, 31, 48])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_contracted_index_leading_both_operands_is_split_off_instead_of_copying(n, dtype):
    from tcc.runtime.externs.contraction_kernel import plan_copies, plan_split

    rng = np.random.default_rng(n)
    dT = rng.standard_normal((n, n + 1, n)).astype(dtype)
    T = rng.standard_normal((n, n + 2, n)).astype(dtype)
    k, copies = plan_copies(SPLIT_SPEC, dT, T)
    split = plan_split(SPLIT_SPEC, dT, T, k)
    assert copies == (2 if n >= 2 else 0)  # both operands would be copied (extents 0 and 1 are views)
    assert (split == ("z1", ("z0",))) == (n >= 31)  # below, the products are too small
    out = np.full((n + 2, n + 1), np.nan, dtype)
    run_contract(SPLIT_SPEC, dT, T, out)
    want = einsum_contract(SPLIT_SPEC, dT.astype(np.float64), T.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-12 if dtype == "float64" else 1e-4, atol=1e-10 if dtype == "float64" else 1e-3)
    transposed = np.full((n + 1, n + 2), np.nan, dtype)  # a result stored the other way round
    run_contract(((("z1", "b", "z0"), ("z1", "a", "z0"), ("b", "a"))), dT, T, transposed)
    np.testing.assert_allclose(transposed, want.T, rtol=1e-12 if dtype == "float64" else 1e-4, atol=1e-10 if dtype == "float64" else 1e-3)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_contract3_gradients_with_the_split_match_the_interpreter(threads):
    src = "input A[n, n, n], B[n, n], C[n, n]\noutput T[n, n, n]\nT[i, j, l] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])\n"
    grad = tcc.grad(src, of="T", wrt=["A", "B", "C"], value=True)
    assert "contract(dT[" in str(tcc.compile(grad).program)
    for n in (0, 1, 5, 40):
        assert_matches_interpreter(grad, {"n": n}, threads=threads)
