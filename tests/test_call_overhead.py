"""What a call does besides its kernels: the sizes bound per input shapes, the buffers' addresses.

``CompiledProgram`` keeps the sizes and buffer shapes it bound for each tuple
of input shapes, and the CPU executable reads array addresses from NumPy's
object layout (:mod:`tcc.backends.array_address`).  Checked: calls that
alternate between shapes get each shape's sizes, an error is raised on every
bad call (never kept), and the fast address equals ``ctypes.data`` on every
kind of array a call can see.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.backends.array_address import data_address, data_addresses
from tcc.runtime.compiled import CallError

SRC = "input x[n], A[n, m]\ny[i] = sum[j](A[i, j] * x[i])\nz[j] = sum[i](A[i, j])\n"


def test_calls_alternating_between_shapes_bind_each_shape() -> None:
    f = tcc.compile(SRC)
    rng = np.random.default_rng(0)
    for n, m in [(3, 4), (5, 2), (3, 4), (0, 7), (5, 2), (1, 1)]:
        x, A = rng.standard_normal(n), rng.standard_normal((n, m))
        got = f(x=x, A=A)
        assert got["y"].shape == (n,) and got["z"].shape == (m,)
        np.testing.assert_allclose(got["y"], A.sum(1) * x, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(got["z"], A.sum(0), rtol=1e-12, atol=1e-15)


def test_a_bad_call_after_good_ones_is_still_refused() -> None:
    f = tcc.compile(SRC)
    f(x=np.ones(3), A=np.ones((3, 4)))
    for _ in range(2):  # the error is raised again, not remembered as a binding
        with pytest.raises(CallError, match="size 'n' is bound to 3 by 'x' but 'A' implies 2"):
            f(x=np.ones(3), A=np.ones((2, 4)))
    assert f(x=np.ones(3), A=np.ones((3, 4)))["z"].tolist() == [3.0] * 4


def test_a_violated_assumption_is_refused_on_every_call() -> None:
    f = tcc.compile("input x[n]\nassume n >= 2\ny[i] = x[i] * 2\n")
    assert f(x=np.ones(2))["y"].tolist() == [2.0, 2.0]
    for _ in range(2):
        with pytest.raises(CallError, match="these sizes violate 'assume n >= 2' \\(n = 1\\)"):
            f(x=np.ones(1))


class _Sub(np.ndarray):
    pass


@pytest.mark.parametrize("make", [
    lambda: np.arange(10.0),
    lambda: np.arange(10.0)[3:],
    lambda: np.arange(10.0)[::-2],
    lambda: np.zeros((4, 5), np.float32).T,
    lambda: np.empty(0),
    lambda: np.zeros((3, 0)),
    lambda: np.asfortranarray(np.ones((3, 2))),
    lambda: np.arange(6.0).view(_Sub),
    lambda: np.int64(3) * np.ones(2, np.int64),
])
def test_the_fast_address_is_ctypes_data(make) -> None:
    a = make()
    assert data_address(a) == a.ctypes.data
    assert data_addresses([a, a]) == [a.ctypes.data] * 2
