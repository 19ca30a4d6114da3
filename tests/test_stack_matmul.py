"""Stacks of small products dealt over the thread team (tcc.runtime.externs.stack_matmul).

The contract: the same numbers as ``np.matmul`` (to rounding), the same bits
for every thread count, every layout NumPy accepts (transposed, broadcast,
strided members, a transposed result), and the dealing only where it pays.
End to end: the batched and multi-factor contractions that produce stacks,
against the interpreter.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tcc
import tcc.backends.thread_team as thread_team
import tcc.runtime.externs.stack_matmul as sm
from tests.compare import assert_compiled_matches


@pytest.fixture
def dealt(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The part counts of every stack matmul_stack dealt over the team."""
    from tcc.backends import gemm_loop as gl

    parts: list[int] = []
    real = gl.gemm_loop_parts

    def spy(*args):  # noqa: ANN002, ANN202
        ok = real(*args)
        if ok:
            parts.append(args[7])
        return ok

    monkeypatch.setattr(gl, "gemm_loop_parts", spy)
    return parts


def _operand(rng: np.random.Generator, shape: tuple[int, ...], transposed: bool, dtype: type) -> np.ndarray:
    if not transposed:
        return rng.standard_normal(shape).astype(dtype)
    return np.swapaxes(rng.standard_normal(shape[:-2] + shape[-2:][::-1]).astype(dtype), -1, -2)


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 9), m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 40),
       ta=st.booleans(), tb=st.booleans(), tout=st.booleans(), shared=st.sampled_from(["none", "a", "b"]),
       dtype=st.sampled_from([np.float64, np.float32]), seed=st.integers(0, 2**16))
def test_any_layout_same_numbers_and_same_bits_for_any_thread_count(
        count: int, m: int, n: int, k: int, ta: bool, tb: bool, tout: bool, shared: str, dtype: type,
        seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = _operand(rng, (m, k) if shared == "a" else (count, m, k), ta, dtype)
    b = _operand(rng, (k, n) if shared == "b" else (count, k, n), tb, dtype)
    want = np.matmul(a, b)
    results = []
    for threads in (1, 2, 3):  # deal even these small stacks (the threshold is read at each call)
        sm.MIN_SPLIT_MNK, saved = 0, sm.MIN_SPLIT_MNK
        out = np.swapaxes(np.full((count, n, m), np.nan, dtype), 1, 2) if tout else np.full((count, m, n), np.nan, dtype)
        try:
            sm.matmul_stack(a, b, out, threads)
        finally:
            sm.MIN_SPLIT_MNK = saved
        results.append(out.copy())
    for got in results:
        np.testing.assert_array_equal(got, results[0])
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(results[0], want, rtol=tol, atol=tol * k)


def test_small_members_are_dealt_large_ones_and_small_stacks_are_not(dealt: list[int]) -> None:
    if thread_team.team() is None:
        pytest.skip("the native team is x86-64 Linux only")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((48, 48, 48)), rng.standard_normal((48, 48))
    out = np.empty((48, 48, 48))
    sm.matmul_stack(a, b, out, 2)
    assert dealt == [8]  # 48 members of 48^3: 4 parts per thread
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    big = rng.standard_normal((3, 80, 80))
    sm.matmul_stack(big, big, np.empty((3, 80, 80)), 2)  # 80^3 > the BLAS threading threshold
    tiny = rng.standard_normal((4, 8, 8))
    sm.matmul_stack(tiny, tiny, np.empty((4, 8, 8)), 2)  # 2048 multiply-adds in all
    sm.matmul_stack(a, b, np.empty((48, 48, 48)), 1)  # one thread
    assert dealt == [8]


def test_without_a_team_the_stack_runs_on_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((20, 30, 40)), rng.standard_normal((20, 40, 50))
    with_team = np.empty((20, 30, 50))
    sm.matmul_stack(a, b, with_team, 2)
    monkeypatch.setattr(thread_team, "_SUPPORTED", False)
    monkeypatch.setattr(thread_team, "_TEAM", None)
    without = np.empty((20, 30, 50))
    sm.matmul_stack(a, b, without, 2)
    np.testing.assert_array_equal(with_team, without)


def test_integer_views_blas_cannot_take_fall_back_to_numpy() -> None:
    a = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    out = np.empty((2, 3, 3), dtype=a.dtype)
    sm.matmul_stack(a, np.swapaxes(a, 1, 2), out, 2)
    np.testing.assert_array_equal(out, a @ np.swapaxes(a, 1, 2))


CONTRACT3 = "input A[{n}, {n}, {n}], B[{n}, {n}], C[{n}, {n}]\nT[i, j, l] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])\n"
BATCHED_T = "input A[nb, nk, ni], B[nb, nj, nk]\nC[b, i, j] = sum[k](A[b, k, i] * B[b, j, k])\n"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_contract3_value_and_gradients_dealt_and_against_the_interpreter(dtype: type, dealt: list[int]) -> None:
    src = CONTRACT3.format(n=48)
    rng = np.random.default_rng(2)
    inputs = {"A": rng.standard_normal((48, 48, 48)), "B": rng.standard_normal((48, 48)),
              "C": rng.standard_normal((48, 48)), "dT": rng.standard_normal((48, 48, 48))}
    inputs = {k: v.astype(dtype) for k, v in inputs.items()}
    grad = tcc.grad(src, of="T", wrt=["A", "B", "C"], value=True)
    got = assert_compiled_matches(grad, inputs, dtype=np.dtype(dtype).name, threads=2)
    if thread_team.team() is not None:
        assert dealt, "no stack of contract3 was dealt"
    f = tcc.compile(grad, dtype=np.dtype(dtype).name, threads=1)
    one = f(**inputs)
    # the results of stacks (T: B^T times each T_ctr member; dB: a summed stack) are the same bits for
    # 1 and 2 threads; dC, one GEMM with K = 2304, is not in float32: OpenBLAS splits it differently
    for name in ("T", "dB"):
        np.testing.assert_array_equal(one[name], got[name])


@pytest.mark.parametrize("extents", [(2, 1, 1, 1), (5, 7, 3, 11), (13, 40, 17, 29), (3, 0, 4, 5)])
def test_batched_transposed_products_against_the_interpreter(extents: tuple[int, int, int, int]) -> None:
    b, k, i, j = extents
    rng = np.random.default_rng(3)
    inputs = {"A": rng.standard_normal((b, k, i)), "B": rng.standard_normal((b, j, k))}
    for threads in (1, 2):
        assert_compiled_matches(BATCHED_T, inputs, threads=threads)
