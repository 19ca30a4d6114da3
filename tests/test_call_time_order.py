"""Contraction orders re-decided at call time (tcc.runtime.call_orders): the call's sizes pick the order."""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError
from tcc.runtime.compiled import CallError

CHAIN = "input A[n, m], B[m, p], C[p, q]\nD[i, l] = sum[j, k](A[i, j] * B[j, k] * C[k, l])\n"
TALL = (200, 3, 200, 3)   # A (B C): sum k first
WIDE = (3, 200, 3, 200)   # (A B) C: sum j first


def inputs(n: int, m: int, p: int, q: int, seed: int = 0, dtype: str = "float64") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"A": rng.standard_normal((n, m)).astype(dtype), "B": rng.standard_normal((m, p)).astype(dtype),
            "C": rng.standard_normal((p, q)).astype(dtype)}


def intermediate(program) -> tuple[str, ...]:  # noqa: ANN001
    """The indices of the one contraction intermediate (which pair of factors is multiplied first)."""
    (ctr,) = [d for d in program.definitions if d.name.startswith("D_ctr")]
    return ctr.indices


def test_compile_time_order_is_kept_where_it_is_best() -> None:
    f = tcc.compile(CHAIN)
    x = inputs(*TALL)
    assert intermediate(f.program) == ("j", "l")  # B C first, as symbolic sizes (all 1000) tie and keep it
    assert f.variant_for(x) is None
    np.testing.assert_allclose(f(**x)["D"], x["A"] @ x["B"] @ x["C"], rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_sizes_that_prefer_another_order_run_a_variant(dtype: str, threads: int) -> None:
    f = tcc.compile(CHAIN, dtype=dtype, threads=threads)
    x = inputs(*WIDE, dtype=dtype)
    variant = f.variant_for(x)
    assert variant is not None and intermediate(variant.program) == ("i", "k")  # A B first
    got = f(**x)
    assert set(got) == {"D"}  # the variant's intermediate stays hidden, as the compiled one's does
    want = (x["A"].astype(np.float64) @ x["B"] @ x["C"])
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got["D"], want, rtol=tol, atol=tol * np.abs(want).max())  # norm-wise: sums cancel
    assert variant.threads == threads


def test_one_variant_per_order_not_per_size() -> None:
    f = tcc.compile(CHAIN)
    first = f.variant_for(inputs(3, 200, 3, 200))
    assert first is not None
    for shape in [(4, 150, 5, 300), (2, 500, 2, 90)]:
        assert f.variant_for(inputs(*shape)) is first
    assert f.variant_for(inputs(*TALL)) is None


def test_given_outputs_and_errors_go_through_the_variant() -> None:
    f = tcc.compile(CHAIN)
    x = inputs(*WIDE)
    out = np.empty((3, 200))
    res = f(**x, D=out)
    assert res["D"] is out
    np.testing.assert_allclose(out, x["A"] @ x["B"] @ x["C"], rtol=1e-12)
    with pytest.raises(CallError, match="output 'D' has shape"):
        f(**x, D=np.empty((200, 3)))
    with pytest.raises(CallError, match="input 'B' has dtype float32"):
        f(**{**x, "B": x["B"].astype(np.float32)})
    with pytest.raises(CallError, match="missing input 'C'"):
        f(A=x["A"], B=x["B"])


def test_empty_and_unit_extents() -> None:
    f = tcc.compile(CHAIN)
    for shape in [(0, 5, 7, 3), (3, 0, 7, 4), (1, 1, 1, 1), (5, 200, 1, 300), (7, 1, 200, 1)]:
        x = inputs(*shape)
        np.testing.assert_allclose(f(**x)["D"], x["A"] @ x["B"] @ x["C"], rtol=1e-12, atol=1e-12)


def test_gradient_program_reorders_too() -> None:
    g = tcc.compile(tcc.grad(tcc.parse(CHAIN), of="D", wrt="B"))
    for shape in (TALL, WIDE):
        x = inputs(*shape)
        dD = np.random.default_rng(5).standard_normal((shape[0], shape[3]))
        got = g(**x, dD=dD)["dB"]
        np.testing.assert_allclose(got, x["A"].T @ dD @ x["C"].T, rtol=1e-11)


def test_cuda_sim_target_reorders() -> None:
    f = tcc.compile(CHAIN, target="cuda-sim")
    x = inputs(3, 100, 3, 120)  # 108k multiply-adds as written: over min-work
    assert f.variant_for(x) is not None
    np.testing.assert_allclose(f(**x)["D"], x["A"] @ x["B"] @ x["C"], rtol=1e-12)


def test_programs_without_size_dependent_sums_pay_nothing() -> None:
    assert tcc.compile("input x[4], A[4, 4]\ny[i] = sum[j](A[i, j] * x[j])\n")._reorder is None
    f = tcc.compile("input x[n], A[n, n]\ny[i] = sum[j](A[i, j] * x[j])\n")
    assert f.variant_for({"x": np.ones(3), "A": np.ones((3, 3))}) is None  # no three-factor sum
    assert tcc.compile(CHAIN, passes="infer-ranges,lower-loops")._reorder is None  # no contract-order


def test_sizes_option_of_the_pass() -> None:
    p = tcc.parse(CHAIN)
    wide = tcc.transform(p, "infer-ranges,contract-order{sizes=n:3, m:200, p:3, q:200}")
    assert intermediate(wide) == ("i", "k")
    with pytest.raises(TccError, match=r"option 'sizes' of pass 'contract-order': malformed size 'n=3'"):
        tcc.transform(p, "infer-ranges,contract-order{sizes=n=3}")
