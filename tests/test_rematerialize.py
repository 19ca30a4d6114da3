"""``tcc.compile(..., results=...)``: the ``rematerialize`` pass (passes/rematerialize.py) and the kept
memory of intermediates (compiler/runtime/scratch_pool.py), against the reference interpreter."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import tcc
from compare import assert_results_close, random_inputs
from tcc.reference.interpreter import evaluate

LAYERNORM = """input X[A, C], g[C], b[C]
local mu[A], xc[A, C], r[A]
output Y[A, C]
mu[a] = sum[c](X[a, c]) / C
xc[a, c] = X[a, c] - mu[a]
r[a] = 1 / sqrt(sum[c](xc[a, c]**2) / C + 1e-05)
Y[a, c] = xc[a, c] * r[a] * g[c] + b[c]
"""


def _remat(src: str) -> str:
    return str(tcc.transform(src, "infer-ranges,rematerialize"))


def _check(program, results, sizes, dtype="float64", threads=None, target="cpu", seed=0, **compile_kw):
    """Compile with ``results``; the call returns exactly those, equal to the interpreter's."""
    inferred = tcc.transform(program, "infer-ranges")
    inputs = random_inputs(inferred, sizes, seed, dtype)
    f = tcc.compile(program, target, dtype=dtype, threads=threads, results=results, **compile_kw)
    want = evaluate(inferred, {k: v.astype(np.float64) for k, v in inputs.items()}, np.float64)
    for _ in range(2):  # the second call runs on the first one's kept intermediates
        got = f(**inputs)
        assert list(got) == list(f.results) == list(results)
        assert_results_close(got, {k: want[k] for k in results}, dtype)
    return f, inputs


# -- the pass -------------------------------------------------------------
def _locals(program) -> set[str]:
    return {d.name for d in program.definitions} - set(program.results())


def test_layernorm_gradients_keep_no_full_size_intermediate():
    """At fixed sizes, cse leaves dxc cheap arithmetic and both n x m locals go; with symbolic sizes dxc
    holds sqrt(dxc_t[a] / C + 1e-05) and stays stored."""
    fixed = LAYERNORM.replace("[A, C]", "[6, 7]").replace("[A]", "[6]").replace("[C]", "[7]").replace("/ C", "/ 7")
    grad = tcc.grad(fixed, of="Y", wrt=["X", "g", "b"])
    out = tcc.transform(grad, "infer-ranges,rematerialize")
    assert _locals(out) == {"mu", "r", "dr", "dxc_t", "dmu"}
    assert "dX[dX_0, dX_1] = dY[dX_0, dX_1] * g[dX_1] * r[dX_0]" in str(out)
    f, _ = _check(grad, ["dX", "dg", "db"], {})
    assert {b.name for b in f.loops.buffers} == {"X", "g", "b", "dY", "dX", "dg", "db", "mu", "r", "dr", "dxc_t", "dmu"}
    symbolic = tcc.transform(tcc.grad(LAYERNORM, of="Y", wrt=["X", "g", "b"]), "infer-ranges,rematerialize")
    assert _locals(symbolic) == {"mu", "r", "dr", "dxc_t", "dxc", "dmu"}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sizes", [{"A": 0, "C": 3}, {"A": 1, "C": 1}, {"A": 5, "C": 13}, {"A": 17, "C": 4}])
def test_layernorm_value_and_gradients_against_the_interpreter(sizes, threads, dtype):
    vg = tcc.grad(LAYERNORM, of="Y", wrt=["X", "g", "b"], value=True)
    _check(vg, ["Y", "dX", "dg", "db"], sizes, dtype, threads)
    _check(vg, ["dg"], sizes, dtype, threads)  # dX's chain is dropped, not computed


def test_a_transposed_injective_read_is_recomputed():
    src = "input A[n, m], c[m]\nlocal T[n, m]\noutput R[m, n]\nT[i, j] = A[i, j] * c[j] + 1\nR[j, i] = T[i, j] * 2\n"
    assert _remat(src).endswith("R[j, i] = (A[i, j] * c[j] + 1) * 2\n")
    _check(src, ["R"], {"n": 3, "m": 5})


@pytest.mark.parametrize("reader, why", [
    ("sum[k](T[i, k] * B[k, j])", "a contraction operand: read once per j"),
    ("T[i, j] + T[i, 0]", "a constant index"),
    ("sum[k: 0..2](T[i, j])", "a sum around the read that the read does not vary with"),
])
def test_reads_that_would_recompute_an_element_several_times_keep_it_stored(reader, why):
    src = f"input A[n, n], B[n, n]\nlocal T[n, n]\noutput R[n, n]\nT[i, j] = A[i, j] - A[j, i]\nR[i, j] = {reader}\n"
    assert "T[i, j] = A[i, j] - A[j, i]" in _remat(src), why
    _check(src, ["R"], {"n": 4})


def test_two_injective_reads_of_a_two_read_body_are_recomputed():
    """2 reads x (2 - 1) <= 2 + 2: reading A twice per read moves no more than storing T."""
    src = "input A[n, n]\nlocal T[n, n]\noutput R[n, n]\nT[i, j] = A[i, j] - A[j, i]\nR[i, j] = T[i, j] * T[j, i]\n"
    assert "T[" not in _remat(src)
    _check(src, ["R"], {"n": 4})


@pytest.mark.parametrize("body", [
    "exp(A[i, j])",                      # a transcendental: recomputing costs more than a store
    "sqrt(A[i, j])",
    "where(i == j, A[i, j], 0)",         # a guard
    "sum[k](A[i, k]) * A[i, j]",         # a sum
    "A[i, j]**4",
])
def test_bodies_that_are_not_cheap_arithmetic_stay(body):
    src = f"input A[n, n]\nlocal T[n, n]\noutput R[n, n]\nT[i, j] = {body}\nR[i, j] = T[i, j] * 2\n"
    assert f"T[i, j] = " in _remat(src)
    _check(src, ["R"], {"n": 3})


def test_many_reads_of_a_body_with_several_full_reads_keep_it_stored():
    """Three full reads in the body, read at three places: 3 * 2 > 3 + 2 (the store moves less memory)."""
    src = ("input A[n], B[n], C[n]\nlocal T[n]\noutput R[n], S[n], U[n]\n"
           "T[i] = A[i] * B[i] + C[i]\nR[i] = T[i] + 1\nS[i] = T[i] * 2\nU[i] = T[i] - 3\n")
    assert "T[i] = A[i] * B[i] + C[i]" in _remat(src)
    src2 = "input A[n], B[n], C[n]\nlocal T[n]\noutput R[n]\nT[i] = A[i] * B[i] + C[i]\nR[i] = T[i] + T[i]**2\n"
    assert "T[" not in _remat(src2)
    _check(src, ["R", "S", "U"], {"n": 6})
    _check(src2, ["R"], {"n": 6})


def test_a_matrix_function_reading_the_local_keeps_it():
    src = "input A[n, n], B[n, n]\nlocal T[n, n]\noutput R[n, n]\nT[i, j] = A[i, j] + 1\nR[i, j] = matmul(T, B)[i, j]\n"
    assert "T[i, j] = A[i, j] + 1" in _remat(src)
    _check(src, ["R"], {"n": 5})


def test_results_and_programs_without_outputs_are_never_touched():
    no_outputs = "input A[n]\nT[i] = A[i] + 1\nR[i] = T[i] * 2\n"
    assert _remat(no_outputs) == str(tcc.transform(no_outputs, "infer-ranges"))
    both = "input A[n]\noutput T[n], R[n]\nT[i] = A[i] + 1\nR[i] = T[i] * 2\n"
    assert _remat(both) == str(tcc.transform(both, "infer-ranges"))


def test_locals_no_result_reads_are_dropped():
    src = "input A[n]\nlocal U[n], V[n]\noutput R[n]\nU[i] = exp(A[i])\nV[i] = U[i] * 3\nR[i] = A[i] + 1\n"
    out = _remat(src)
    assert "U[" not in out and "V[" not in out
    _check(src, ["R"], {"n": 4})


# -- tcc.compile(results=...) ----------------------------------------------
@pytest.mark.parametrize("results, message", [
    (["Z"], "results=: 'Z' is not a definition of the program (definitions: mu, xc, r, Y)"),
    (["X"], "results=: 'X' is not a definition of the program (inputs are not results; definitions: mu, xc, r, Y)"),
    ([], "results= names no definition: a call would return nothing"),
    (["Y", "Y"], "results=: Y, Y names a definition twice"),
])
def test_bad_results_are_refused_with_the_reason(results, message):
    with pytest.raises(tcc.TccError) as err:
        tcc.compile(LAYERNORM, results=results)
    assert err.value.message == message


def test_results_of_a_loop_program_are_refused():
    from tcc.build import build

    loops = tcc.transform(LAYERNORM, "infer-ranges,lower-loops")
    with pytest.raises(tcc.TccError, match="results= needs a program in the tensor language .L1., got LoopProgram"):
        build(loops, results=["Y"])


def test_a_comma_separated_string_names_several_results():
    f = tcc.compile(LAYERNORM, results="r, Y")
    assert f.results == ("r", "Y")


def test_intermediates_are_not_arguments_and_results_may_be_given():
    f, inputs = _check(LAYERNORM, ["Y"], {"A": 4, "C": 6})
    with pytest.raises(tcc.CallError, match="unknown argument 'mu'"):
        f(**inputs, mu=np.zeros(4))
    out = np.full((4, 6), np.nan)
    got = f(**inputs, Y=out)
    assert got["Y"] is out and np.isfinite(out).all()


def test_the_default_pipeline_gains_rematerialize_and_a_given_one_is_kept():
    f = tcc.compile(LAYERNORM, results=["Y"])
    assert "xc" not in {b.name for b in f.loops.buffers}
    g = tcc.compile(LAYERNORM, results=["Y"], passes="infer-ranges,lower-loops")
    assert "xc" in {b.name for b in g.loops.buffers} and g.results == ("Y",)
    assert_results_close(g(**random_inputs(g.program, {"A": 3, "C": 2})),
                         f(**random_inputs(f.program, {"A": 3, "C": 2})), "float64")


def test_cuda_sim_runs_the_rematerialized_program():
    grad = tcc.grad(LAYERNORM, of="Y", wrt=["X", "g", "b"])
    _check(grad, ["dX", "dg", "db"], {"A": 3, "C": 5}, target="cuda-sim")


# -- the kept intermediates --------------------------------------------------
def test_intermediates_are_kept_between_calls_and_results_are_new():
    f, inputs = _check(LAYERNORM, ["Y"], {"A": 8, "C": 8}, passes="infer-ranges,lower-loops")
    assert len(f._pool) == 1
    kept = f._pool._sets[0]
    assert set(kept) == {"mu", "xc", "r"}
    first = f(**inputs)["Y"]
    assert f._pool._sets[0]["xc"] is kept["xc"]
    assert not np.shares_memory(first, f(**inputs)["Y"])
    f.release_scratch()
    assert len(f._pool) == 0
    np.testing.assert_array_equal(f(**inputs)["Y"], first)


def test_kept_intermediates_follow_the_sizes_of_each_call():
    f = tcc.compile(LAYERNORM, results=["Y"], passes="infer-ranges,lower-loops")
    inferred = tcc.transform(LAYERNORM, "infer-ranges")
    for sizes in ({"A": 3, "C": 4}, {"A": 7, "C": 2}, {"A": 0, "C": 5}, {"A": 3, "C": 4}):
        inputs = random_inputs(inferred, sizes, seed=sizes["A"])
        np.testing.assert_allclose(f(**inputs)["Y"], evaluate(inferred, inputs)["Y"], rtol=1e-12, atol=1e-12)


def test_calls_from_several_threads_each_get_their_own_intermediates():
    f = tcc.compile(LAYERNORM, results=["Y"], passes="infer-ranges,lower-loops", threads=1)
    inferred = tcc.transform(LAYERNORM, "infer-ranges")
    cases = [random_inputs(inferred, {"A": 64, "C": 96}, seed=s) for s in range(4)]
    wants = [evaluate(inferred, c)["Y"] for c in cases]
    errors: list[str] = []

    def work(k: int) -> None:
        for _ in range(25):
            got = f(**cases[k])["Y"]
            if not np.allclose(got, wants[k], rtol=1e-12, atol=1e-12):
                errors.append(f"thread {k}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_zero_filled_intermediate_starts_at_zero_in_every_call():
    src = "input A[n, n]\nlocal D[n, n]\noutput R[n, n]\nD[i, j] = where(i == j, exp(A[i, j]), 0)\nR[i, j] = sum[k](D[i, k] * A[k, j])\n"
    inferred = tcc.transform(src, "infer-ranges")
    f = tcc.compile(src, results=["R"])
    for seed in range(3):
        inputs = random_inputs(inferred, {"n": 5}, seed)
        np.testing.assert_allclose(f(**inputs)["R"], evaluate(inferred, inputs)["R"], rtol=1e-12)


# -- generated programs ------------------------------------------------------
_READS = ["T[i, j]", "T[j, i]", "sum[k](T[i, k] * B[k, j])", "sum[k](T[k, j])", "T[i, j]**2", "2 * T[i, j]"]


@st.composite
def _programs(draw):
    body = draw(st.sampled_from(["A[i, j] - c[i]", "A[i, j] * c[j] + c[i]", "-A[j, i] / 2", "abs(A[i, j])",
                                 "A[i, j] * B[i, j]", "exp(A[i, j])"]))
    n_readers = draw(st.integers(1, 3))
    readers = [" + ".join(draw(st.lists(st.sampled_from(_READS), min_size=1, max_size=3))) for _ in range(n_readers)]
    lines = ["input A[n, n], B[n, n], c[n]", "local T[n, n]",
             "output " + ", ".join(f"R{k}[n, n]" for k in range(n_readers)), f"T[i, j] = {body}"]
    lines += [f"R{k}[i, j] = {r}" for k, r in enumerate(readers)]
    return "\n".join(lines) + "\n", [f"R{k}" for k in range(n_readers)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_programs(), st.integers(0, 6), st.sampled_from(["float64", "float32"]), st.sampled_from([1, 2]))
def test_generated_programs_keep_their_values(case, n, dtype, threads):
    src, results = case
    note(src)
    note(_remat(src))
    _check(src, results, {"n": n}, dtype, threads)


# -- found in review ---------------------------------------------------------
@pytest.mark.parametrize("src, sizes", [
    ("input x[m], y[k]\nlocal T[m]\noutput R\nT[i] = x[i] * k\nR = sum[k](T[k])\n", {"m": 5, "k": 3}),
    ("input x[n], y[k]\nlocal T[n - k]\noutput R\nT[i] = x[i + k] * 2\nR = sum[k](T[k])\n", {"n": 40, "k": 1}),
])
def test_a_sum_named_like_a_size_of_the_body_is_renamed_before_the_local_is_recomputed(src, sizes):
    """Recomputed under the reader's ``sum[k]``, the body's size ``k`` would become the loop variable:
    infer-ranges renames the sum (``k2``) first, and rematerialize refuses a capture in any case."""
    out = _remat(src)
    assert "sum[k2: " in out and "T[" not in out
    _check(src, ["R"], sizes)
    from tcc.passes.rematerialize import rematerialize

    shadowed = tcc.parse(src)  # not through infer-ranges: the pass itself must keep T stored
    assert shadowed.definition("T").extents is not None
    assert rematerialize(shadowed).definition("T") is not None


def test_results_may_be_any_iterable_and_variants_use_them_too():
    src = ("input A[n, P, Q], B[P, m], C[Q, r], s[n]\nlocal T[n, m, r]\noutput U[n, m, r]\n"
           "T[i, j, l] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])\nU[i, j, l] = T[i, j, l] * s[i] + 1\n")
    f = tcc.compile(src, results=(n for n in ["U"]))
    inferred = tcc.transform(src, "infer-ranges")
    for n, P, Q, m, r in [(8, 4, 200, 100, 4), (8, 200, 4, 4, 100)]:
        inputs = random_inputs(inferred, {"n": n, "P": P, "Q": Q, "m": m, "r": r})
        got = f(**inputs)
        assert list(got) == ["U"]
        np.testing.assert_allclose(got["U"], evaluate(inferred, inputs)["U"], rtol=1e-12)
    variants = list(f._reorder.variants.values())
    assert variants and all(v.results == ("U",) for v in variants)  # the second call ran another order
    f.release_scratch()
    assert all(len(v._pool) == 0 for v in [f, *variants])
