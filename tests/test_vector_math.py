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
