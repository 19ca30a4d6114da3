"""The inline, vectorisable ``exp`` of the CPU backend against NumPy's."""
from __future__ import annotations

import numpy as np
import pytest

import tcc

RANGES = {"float64": (-745.2, 709.8, 2.0), "float32": (-104.0, 88.7, 1.0)}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_exp_within_two_ulp_everywhere(dtype):
    lo, hi, max_ulp = RANGES[dtype]
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(lo, hi, 200_000), rng.uniform(-5, 5, 200_000)]).astype(dtype)
    y = tcc.compile("input x[n]\ny[i] = exp(x[i])\n", dtype=dtype)(x=x)["y"]
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype(np.float64))
    normal = (ref >= np.finfo(dtype).tiny) & (ref <= np.finfo(dtype).max)
    ulp = np.abs(y[normal] - ref[normal]) / np.spacing(ref[normal].astype(dtype)).astype(np.float64)
    assert ulp.max() <= max_ulp
    sub = (ref > 0) & (ref < np.finfo(dtype).tiny)
    assert np.all(np.abs(y[sub] - ref[sub]) <= np.finfo(dtype).smallest_subnormal * 1.0001)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_exp_special_values(dtype):
    x = np.array([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1000.0, -1000.0], dtype=dtype)
    y = tcc.compile("input x[n]\ny[i] = exp(x[i])\n", dtype=dtype)(x=x)["y"]
    assert y[0] == 1.0 and y[1] == 1.0
    assert y[2] == np.asarray(np.e, dtype=dtype)
    assert y[3] == np.inf and y[4] == 0.0 and np.isnan(y[5])
    assert y[6] == np.inf and y[7] == 0.0 and y[8] == np.inf and y[9] == 0.0


def test_exp_loop_is_vectorised():
    f = tcc.compile("input x[n]\ny[i] = 1 / (1 + exp(-x[i]))\n")
    text = str(f.llvm)
    assert "call double @exp" not in text and "x double>" in text


@pytest.mark.parametrize("fn", ["exp", "tanh"])
def test_exp_has_no_float_to_int_conversion(fn):
    """2^n is built from exponent bits by the shifter trick, not ``fptosi``: AVX2 has no vector
    conversion of doubles to 64-bit integers, so LLVM scalarised it (four ``cvttsd2si`` per vector)."""
    f = tcc.compile(f"input x[n]\ny[i] = {fn}(x[i])\n")
    assert "fptosi" not in str(f.llvm)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_tanh_within_three_ulp(dtype):
    """Uniform data, tiny arguments (where ``1 - exp(-2x)`` would cancel) and magnitudes down to 1e-300."""
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-20, 20, 100_000), rng.uniform(-1e-3, 1e-3, 50_000),
                        rng.uniform(-0.6, 0.6, 50_000),
                        10.0 ** rng.uniform(-300, 0, 50_000) * rng.choice([-1.0, 1.0], 50_000)])
    x = x[np.abs(x) >= np.finfo(dtype).tiny].astype(dtype)
    y = tcc.compile("input x[n]\ny[i] = tanh(x[i])\n", dtype=dtype)(x=x)["y"]
    ref = np.tanh(x.astype(np.float64))
    ulp = np.abs(y - ref) / np.spacing(np.abs(ref).astype(dtype)).astype(np.float64)
    assert ulp.max() <= 3.0


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_tanh_special_values_and_vectorised(dtype):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 19.5, -19.5, 1e-30], dtype=dtype)
    f = tcc.compile("input x[n]\ny[i] = tanh(x[i])\n", dtype=dtype)
    y = f(x=x)["y"]
    assert y[0] == 0.0 and not np.signbit(y[0]) and y[1] == 0.0 and np.signbit(y[1])
    assert y[2] == 1.0 and y[3] == -1.0 and np.isnan(y[4])
    assert y[5] == 1.0 and y[6] == -1.0 and y[9] == np.asarray(1e-30, dtype=dtype)
    assert abs(y[7] - np.tanh(x[7])) <= np.spacing(np.asarray(1.0, dtype=dtype))
    text = str(f.llvm)
    assert "@tanh" not in text and ("x double>" in text or "x float>" in text)
