"""The runtime splits a parallel kernel over threads only when it has enough iterations.

Handing parts to the pool costs tens of microseconds, more than a small
kernel; ``tcc.backends.cpu.PARALLEL_GRAIN`` (``TCC_PARALLEL_GRAIN``) is the
iteration count below which the calling thread runs the kernel alone.  The
suite sets it to 0 (tests/conftest.py); these tests set it back.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
import tcc.backends.cpu as cpu
from tcc.backends.cpu import iterations

SRC = "input x[n], w[m]\ny[i] = sum[k](x[i + k] * w[k])\n"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The default grain, and the part counts of every split the runtime makes (on the thread team
    or the Python pool: both go through ``split_kernel``)."""
    monkeypatch.setattr(cpu, "PARALLEL_GRAIN", 32_768)
    calls: list[int] = []
    real = cpu.split_kernel

    def spy(entry, ptrs, sizes, threads, fallback):  # noqa: ANN001
        calls.append(threads)
        real(entry, ptrs, sizes, threads, fallback)

    monkeypatch.setattr(cpu, "split_kernel", spy)
    return calls


def test_small_kernels_run_on_the_calling_thread(counted: list[int]) -> None:
    f = tcc.compile(SRC, threads=2)
    assert f.executable.kernels[0].parallel
    x, w = np.arange(40.0), np.arange(5.0)
    got = f(x=x, w=w)["y"]
    np.testing.assert_array_equal(got, np.correlate(x, w, mode="valid"))
    assert counted == []  # 36 x 5 iterations: not split


def test_large_kernels_are_split(counted: list[int]) -> None:
    f = tcc.compile(SRC, threads=2)
    rng = np.random.default_rng(0)
    x, w = rng.random(20_000), rng.random(9)
    got = f(x=x, w=w)["y"]
    np.testing.assert_allclose(got, np.correlate(x, w, mode="valid"), rtol=1e-13)
    assert counted == [2]  # 19 992 x 9 iterations


def test_the_decision_follows_each_calls_sizes(counted: list[int]) -> None:
    f = tcc.compile(SRC, threads=2)
    rng = np.random.default_rng(1)
    for n, m in ((100, 3), (50_000, 3), (100, 3), (5_000, 10)):
        f(x=rng.random(n), w=rng.random(m))
    assert counted == [2, 2]  # 149 994 and 49 910 iterations; 294 twice is not


def test_iteration_estimate_of_a_nest() -> None:
    f = tcc.compile("input A[n, m]\nr[i] = sum[j](A[i, j])\nt[i, j] = A[j, i]\n", threads=2)
    bodies = [k.kernel.body for k in f.executable.kernels if k.kernel is not None]
    env = {"n": 30, "m": 70}
    counts = [iterations(b, env) for b in bodies]
    assert sum(counts) >= 30 * 70 + 70 * 30  # every element of both nests (plus the per-row stores)
    assert iterations(bodies[0], {"n": 0, "m": 70}) == 0
