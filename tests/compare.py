"""Compiled code against the reference interpreter, shared by the compiled-code tests."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

import tcc
from tcc.index_inputs import random_index_inputs
from tcc.reference.fdcheck import sizes_for
from tcc.reference.interpreter import evaluate
from tcc.sizes import extents_shape

RTOL = {"float64": 1e-12, "float32": 1e-5}
#: an array's error is measured against at least this fraction of the largest finite magnitude
#: among all the program's results: an adjoint that is zero by cancellation (the stable
#: softmax's dmx = dp - dp) is rounding noise of the terms it cancels, and noise over noise is no
#: relative error
SCALE_FLOOR = 1e-3


def random_inputs(program: Any, sizes: Mapping[str, int] | None = None, seed: int = 0, dtype: str = "float64") -> dict[str, np.ndarray]:
    """Inputs in [0.25, 0.75) (log, sqrt and powers stay tame) for the given or default sizes;
    index inputs get valid random integers (sorted where they bound a sum)."""
    rng = np.random.default_rng(seed)
    sizes = dict(sizes) if sizes is not None else sizes_for(program)
    out = {
        d.name: rng.uniform(0.25, 0.75, extents_shape(d.extents, sizes)).astype(dtype)
        for d in program.caller_inputs() if not d.is_index
    }
    return {**out, **random_index_inputs(program, sizes, rng)}  # integers in their declared ranges


def assert_matches_interpreter(program: Any, sizes: Mapping[str, int] | None = None, dtype: str = "float64",
                               passes: Any = None, seed: int = 0, threads: int | None = None,
                               target: str = "cpu") -> dict[str, np.ndarray]:
    """Compile ``program`` and compare every definition with the interpreter (normwise relative error)."""
    inferred = tcc.transform(program, "infer-ranges")
    inputs = random_inputs(inferred, sizes, seed, dtype)
    compiled = tcc.compile(program, target, dtype=dtype, passes=passes, threads=threads)
    got = compiled(**inputs)
    want = evaluate(inferred, {k: v if v.dtype.kind == "i" else v.astype(np.float64) for k, v in inputs.items()}, np.float64)
    assert set(got) == {d.name for d in inferred.definitions}
    assert_results_close(got, want, dtype)
    return got


def assert_results_close(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], dtype: str) -> None:
    """The same definitions, each a NumPy array of ``want``'s shape and of ``dtype``: NaN exactly
    where the reference has NaN, the same infinity where it has one, and the finite entries within
    10 x RTOL[dtype] normwise relative error (the error over the largest finite magnitude, or over
    SCALE_FLOOR times the largest of all the results where that is larger).

    Programs may compute NaN or inf (``sqrt`` of a negative, ``1 / 0``, what the fuzzers build):
    compiled code must agree with the interpreter there too, and one NaN must not turn the
    error of the whole array into NaN."""
    assert set(got) == set(want)
    magnitudes = [float(np.max(np.abs(r[np.isfinite(r)]))) for r in want.values() if np.isfinite(r).any()]
    floor = SCALE_FLOOR * max(magnitudes, default=0.0)
    for name, ref in want.items():
        out = got[name]
        assert isinstance(out, np.ndarray), name
        assert out.shape == ref.shape, name
        assert out.dtype == np.dtype(dtype), name
        out64 = out.astype(np.float64)
        nan = np.isnan(ref)
        assert np.array_equal(np.isnan(out64), nan), f"{name}: NaN at {np.argwhere(np.isnan(out64) != nan)[:5].tolist()} ({dtype})"
        inf = np.isinf(ref)
        assert np.array_equal(out64[inf], ref[inf]), f"{name}: infinities differ ({dtype})"
        finite = ~(nan | inf)
        assert np.isfinite(out64[finite]).all(), f"{name}: inf where the reference is finite ({dtype})"
        if finite.any():
            scale = max(float(np.max(np.abs(ref[finite]))), floor, 1e-300)
            err = float(np.max(np.abs(out64[finite] - ref[finite]))) / scale
            assert err <= RTOL[dtype] * 10, f"{name}: relative error {err:.3e} ({dtype})"


def assert_compiled_matches(program: Any, inputs: Mapping[str, np.ndarray], dtype: str = "float64",
                            threads: int | None = None, passes: Any = None, results: list[str] | None = None,
                            given_outputs: bool = False) -> dict[str, np.ndarray]:
    """Compile ``program`` and compare the results a call returns with the interpreter on ``inputs``.

    ``given_outputs``: the call writes into NaN-filled arrays passed for every result, and must
    return those very arrays."""
    inferred = tcc.transform(program, "infer-ranges")
    f = tcc.compile(program, dtype=dtype, threads=threads, passes=passes, results=results)
    want = evaluate(inferred, {k: np.asarray(v, np.float64) for k, v in inputs.items()}, np.float64)
    want = {k: v for k, v in want.items() if k in f.results}
    if given_outputs:
        outs = {k: np.full(v.shape, np.nan, dtype) for k, v in want.items()}
        got = f(**inputs, **outs)
        assert all(got[k] is outs[k] for k in outs)
    else:
        got = f(**inputs)
    assert_results_close(got, want, dtype)
    return got
