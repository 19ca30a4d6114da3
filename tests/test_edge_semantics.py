"""Edge cases where compiled code once disagreed with the reference interpreter.

Each test runs the program through the public API -- ``tcc.compile`` (CPU in
float64 and float32, and the GPU lowering in the ``cuda-sim`` simulator) and
``tcc.run`` (the interpreter) -- and compares them bit for bit where the
language pins the value down (the sign of a zero included), and with the
value the language documents (docs/language.md, "Edge cases").
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError

TARGETS = [("cpu", "float64"), ("cpu", "float32"), ("cuda-sim", "float64"), ("cuda-sim", "float32")]

EDGE = [-0.0, 0.0, -1.5, 2.0, math.nan, -math.inf, math.inf, 5e-324, -1e30]


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, NaN where NaN, and zeros of the same sign."""
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok], want[ok]), (got, want)
    assert np.array_equal(np.signbit(got[ok]), np.signbit(want[ok])), (got, want)


def _compiled_and_interpreted(src: str, inputs: dict[str, object], target: str, dtype: str) -> tuple[dict, dict]:
    arrays = {k: np.asarray(v, dtype=dtype) for k, v in inputs.items()}
    got = tcc.compile(src, target, dtype=dtype)(**arrays)
    want = tcc.run(tcc.transform(src, "infer-ranges"), arrays, dtype)
    return got, want


# ---------------------------------------------------------------------------
# sign and relu of -0


# fn -> its value at -0 and +0 (IEEE sqrt keeps the sign of zero; the others give +0)
AT_ZEROS = {"sign": (0.0, 0.0), "relu": (0.0, 0.0), "abs": (0.0, 0.0), "sqrt": (-0.0, 0.0)}


@pytest.mark.parametrize("target,dtype", TARGETS)
@pytest.mark.parametrize("fn", sorted(AT_ZEROS))
def test_functions_at_signed_zeros(fn: str, target: str, dtype: str) -> None:
    src = f"input x[{len(EDGE)}]\nf[i] = {fn}(x[i])\n"
    got, want = _compiled_and_interpreted(src, {"x": EDGE}, target, dtype)
    _same_bits(got["f"], want["f"])
    # the language's values at -0 and +0; NaN stays NaN
    _same_bits(want["f"][:2], np.asarray(AT_ZEROS[fn], dtype=dtype))
    assert np.isnan(want["f"][4])


# ---------------------------------------------------------------------------
# x ** 0.5 is pow, not sqrt: pow(-inf, 0.5) = +inf and pow(-0, 0.5) = +0 (C99 F.9.4.4)


POW_HALF = {
    "constant": ("input x[{n}]\nf[i] = x[i]**0.5\n", {}),
    "scalar input": ("input x[{n}], s\nf[i] = x[i]**s\n", {"s": 0.5}),
    "per element": ("input x[{n}], s[{n}]\nf[i] = x[i]**s[i]\n", {"s": [0.5] * len(EDGE)}),
}


@pytest.mark.parametrize("target,dtype", TARGETS)
@pytest.mark.parametrize("form", sorted(POW_HALF))
def test_power_one_half_is_ieee_pow_however_the_exponent_is_written(form: str, target: str, dtype: str) -> None:
    text, extra = POW_HALF[form]
    src = text.format(n=len(EDGE))
    got, want = _compiled_and_interpreted(src, {"x": EDGE, **extra}, target, dtype)
    _same_bits(got["f"], want["f"])
    expected = []
    for v in np.asarray(EDGE, dtype=dtype).tolist():
        try:
            expected.append(math.pow(v, 0.5))  # C99 pow
        except ValueError:  # a negative finite base
            expected.append(math.nan)
    _same_bits(want["f"], np.asarray(expected, dtype=dtype))
    assert want["f"][5] == np.inf and not np.signbit(want["f"][0])


# ---------------------------------------------------------------------------
# the derivatives of x ** y where the textbook rules multiply 0 by inf

POW_SRC = "input x[6], y[6]\nf[i] = x[i]**y[i]\n"
# (x, y): 0**2, 0**1, 0**0.5, 0**0, 2**0, 2**0.5
POW_X = [0.0, 0.0, 0.0, 0.0, 2.0, 2.0]
POW_Y = [2.0, 1.0, 0.5, 0.0, 0.0, 0.5]
# d/dx x**y = y x**(y-1):  0, 1, +inf (one-sided), 0 (x**0 is constant), 0, 0.5/sqrt(2)
WANT_DX = [0.0, 1.0, math.inf, 0.0, 0.0, 0.5 / math.sqrt(2.0)]
# d/dy x**y = x**y log x: 0 for x = 0 and y > 0 (0**y is constantly 0); 0 at (0, 0) as JAX; log 2; sqrt(2) log 2
WANT_DY = [0.0, 0.0, 0.0, 0.0, math.log(2.0), math.sqrt(2.0) * math.log(2.0)]


def _assert_close_with_edges(got: np.ndarray, want: np.ndarray, rtol: float) -> None:
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    assert np.array_equal(np.isinf(got), np.isinf(want)), (got, want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0)


@pytest.mark.parametrize("target,dtype", TARGETS)
def test_reverse_mode_derivatives_of_power_at_zero(target: str, dtype: str) -> None:
    grad = tcc.grad(POW_SRC, of="f", wrt=["x", "y"])
    inputs = {"x": POW_X, "y": POW_Y, "df": np.ones(6)}
    got, want = _compiled_and_interpreted(str(grad), inputs, target, dtype)
    rtol = 1e-12 if dtype == "float64" else 1e-6
    for name, expected in (("dx", WANT_DX), ("dy", WANT_DY)):
        _assert_close_with_edges(got[name], want[name], rtol)
        _assert_close_with_edges(want[name], np.asarray(expected, dtype=dtype), rtol)


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_forward_mode_derivatives_of_power_at_zero(target: str) -> None:
    # One tangent direction at a time: e_x gives d/dx, e_y gives d/dy.  Where one
    # partial is infinite (0**0.5) the zero tangent of that direction gives
    # 0 * inf = NaN in J v, as IEEE arithmetic must: those points are left out.
    both_finite = np.isfinite(WANT_DX) & np.isfinite(WANT_DY)
    compiled = tcc.jvp(POW_SRC, of="f", wrt=["x", "y"], target=target)
    (out,) = compiled.program.outputs
    for on, off, expected in (("dx", "dy", WANT_DX), ("dy", "dx", WANT_DY)):
        inputs = {"x": np.asarray(POW_X), "y": np.asarray(POW_Y), on: np.ones(6), off: np.zeros(6)}
        got = compiled(**inputs)
        want = tcc.run(compiled.program, inputs)[out]
        _assert_close_with_edges(got[both_finite], want[both_finite], 1e-12)
        _assert_close_with_edges(want[both_finite], np.asarray(expected)[both_finite], 1e-12)


def test_second_derivative_of_zero_to_the_y_is_zero() -> None:
    # d2/dy2 0**y = 0 for y > 0: differentiating the fixed rule again must not bring log(0) back
    grad = tcc.grad(POW_SRC, of="f", wrt=["y"])
    second = tcc.grad(grad, of="dy", wrt=["y"])
    inputs = {"x": np.zeros(6), "y": np.asarray([2.0, 1.0, 0.5, 3.0, 1.5, 4.0]), "df": np.ones(6), "ddy": np.ones(6)}
    want = tcc.run(second, inputs)
    got = tcc.compile(second)(**inputs)
    (name,) = second.outputs
    np.testing.assert_array_equal(want[name], np.zeros(6))
    np.testing.assert_array_equal(got[name], np.zeros(6))


# ---------------------------------------------------------------------------
# 64-bit index arithmetic


OVERFLOWING = [
    "input x[n]\nf[i] = where(i + 9223372036854775807 > n, x[i], 0)\n",
    "input x[4]\nf[i] = where(i + 9223372036854775807 > 5, x[i], 0)\n",
    "input x[4]\nf[i] = where(9223372036854775807*i >= 5, x[i], 0)\n",
    "input x[4]\nf[i] = where(i - 99999999999999999999 < 5, x[i], 0)\n",
    # never evaluated (the sum is empty): rejected all the same, by both
    "input x[4]\nf[i] = x[i] + sum[k: 1..0](where(k + 9223372036854775807 > 0, x[i], 0))\n",
]


@pytest.mark.parametrize("src", OVERFLOWING)
@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_index_arithmetic_that_may_overflow_int64_is_rejected_by_both(src: str, target: str) -> None:
    x = np.arange(4.0)
    with pytest.raises(TccError, match="may overflow 64-bit integer arithmetic"):
        tcc.run(tcc.transform(src, "infer-ranges"), {"x": x})
    with pytest.raises(TccError, match="may overflow 64-bit integer arithmetic"):
        tcc.compile(src, target)(x=x)


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_large_index_constants_within_range_agree(target: str) -> None:
    # 2**62 + i cannot overflow for indices below 2**40, so it is exact in both
    src = (
        "input x[n]\n"
        "f[i] = where(i + 4611686018427387904 > n + 4611686018427387904 - 3, x[i], -x[i])"
        " + where(3*i - 4611686018427387904 < 4 - 4611686018427387904, 1, 0)\n"
    )
    x = np.arange(1.0, 7.0)
    want = tcc.run(tcc.transform(src, "infer-ranges"), {"x": x})["f"]
    got = tcc.compile(src, target)(x=x)["f"]
    np.testing.assert_array_equal(want, [0.0, -1.0, -3.0, -4.0, 5.0, 6.0])
    np.testing.assert_array_equal(got, want)


def test_sizes_beyond_the_index_limit_are_refused() -> None:
    # an empty array can have a dimension of any length; 2**41 would break the range argument
    src = "input x[n, m]\nf[i, j] = x[i, j]\n"
    x = np.empty((2**41, 0))
    with pytest.raises(TccError, match="larger than 2\\*\\*40"):
        tcc.run(src, {"x": x})
    with pytest.raises(TccError, match="larger than 2\\*\\*40"):
        tcc.compile(src)(x=x)
