"""The reference interpreter's values do not depend on how it blocks its work.

``tcc.run`` evaluates a definition in blocks of grid rows and of the summed
axis (``max_block`` bounds every intermediate), and a value is computed
again wherever a derivative needs it: the tie test of ``max`` compares a
recomputed sum with the stored forward value by ``==``.  Every reduction
therefore has one evaluation order (left to right over the summed index,
as the compiled loop adds), so one value is bit-identical in every block
size and in every grid; otherwise ties are lost and the tie count of a
``max`` derivative is 0 (NaN) where compiled code is finite.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.reference.interpreter import MAX_BLOCK, evaluate
from tcc.passes.infer_ranges import InferRanges
from tcc.pipeline import run_pipeline
from tcc.sizes import extents_shape

#: block sizes from "the whole grid at once" down to a few elements per block
BLOCKS = (MAX_BLOCK, 4096, 257, 31)

PROGRAMS = {
    "sum": ("input x[n, m]\ny[i] = sum[k](x[i, k] * x[i, k] + 0.1)\n", "y", ["x"]),
    "nested sums": (
        "input a[n, m], b[m, m]\ny[i] = sum[k](exp(sum[l](a[i, l] * b[l, k])) * a[i, k])\n", "y", ["a", "b"]
    ),
    "product over several indices": (
        "input a[n, m], b[m, m], c[m]\ns = sum[i, k, l](a[i, k] * b[k, l] * c[l])\n", "s", ["a", "b", "c"]
    ),
    "sum with where": (
        "input x[n], w[5]\n"
        "y[i] = max(sum[k: 0..4](where(i + k >= 2 and i + k <= n + 1, x[i + k - 2], 0) * w[k]), 0)\n",
        "y", ["x", "w"],
    ),
    "triangular sum": ("input a[n, n]\ny[i] = sum[j: 0..i](a[i, j] * a[j, i])\n", "y", ["a"]),
    "max of sums": ("input a[n, m], b[m, p]\ny[j] = max[i](sum[k](a[i, k] * b[k, j]))\n", "y", ["a", "b"]),
    "min of sums": ("input a[n, m], b[m, p]\ny[j] = min[i](sum[k](a[i, k] * b[k, j]) - sum[k](a[i, k]))\n", "y", ["a", "b"]),
    "logsumexp": (
        "input x[n, m]\nmx[i] = max[j](x[i, j])\ns[i] = mx[i] + log(sum[j](exp(x[i, j] - mx[i])))\n", "s", ["x"]
    ),
}

#: extents for the sizes the programs use: sums long enough for NumPy's pairwise summation (> 8 terms)
SIZES = {"n": 5, "m": 12, "p": 4}


def _prepared(program: tcc.ir.program.Program) -> tcc.ir.program.Program:
    return run_pipeline(program, [InferRanges()])


def _inputs(program: tcc.ir.program.Program, seed: int, integers: bool = False) -> dict[str, np.ndarray]:
    """Random inputs for every declared input (integer-valued ones, with many exact ties, if asked)."""
    rng = np.random.default_rng(seed)
    out = {}
    for d in program.inputs:
        shape = extents_shape(d.extents, SIZES)
        out[d.name] = rng.integers(-2, 3, shape).astype(float) if integers else rng.standard_normal(shape)
    return out


def _assert_same_in_every_blocking(program: tcc.ir.program.Program, inputs: dict[str, np.ndarray]) -> dict:
    runs = [evaluate(program, inputs, max_block=b) for b in BLOCKS]
    for block, got in zip(BLOCKS[1:], runs[1:]):
        for name, value in runs[0].items():
            assert np.array_equal(got[name], value, equal_nan=True), (
                f"'{name}' differs between max_block={BLOCKS[0]} and max_block={block}"
            )
    return runs[0]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_and_gradients_are_bit_identical_in_every_block_size(name: str) -> None:
    src, of, wrt = PROGRAMS[name]
    program = tcc.parse(src)
    forward = _prepared(program)
    _assert_same_in_every_blocking(forward, _inputs(forward, 0))
    derivative = _prepared(tcc.grad(program, of=of, wrt=wrt))
    got = _assert_same_in_every_blocking(derivative, _inputs(derivative, 1))
    for x in wrt:
        assert np.isfinite(got["d" + x]).all(), f"d{x} has NaN or inf"


def test_a_sum_is_bit_identical_in_grids_of_every_shape() -> None:
    """The same sum as a scalar (a grid of one point: its summed axis is contiguous), along a
    vector, and along either axis of a matrix gives the same bits at every point."""
    src = """input x[m], w[m]
output v[3], r[1, 5], c[4, 1]
s = sum[k](x[k] * w[k])
v[i] = sum[k](x[k] * w[k] + 0 * i)
r[i, j] = sum[k](x[k] * w[k] + 0 * j)
c[j, i] = sum[k](x[k] * w[k] + 0 * i)
"""
    program = _prepared(tcc.parse(src))
    rng = np.random.default_rng(2)
    for m in (9, 100, 1000):
        got = evaluate(program, {"x": rng.standard_normal(m), "w": rng.standard_normal(m)})
        for name in ("v", "r", "c"):
            assert np.array_equal(got[name], np.full(got[name].shape, got["s"])), f"'{name}' differs from 's' for m={m}"


def test_a_sum_adds_left_to_right() -> None:
    """The one order of addition is the plain loop's ``acc = acc + term`` from 0 (the compiled loop
    before passes that reassociate: vectorised or parallel reductions), not NumPy's pairwise sum."""
    program = tcc.parse("input x[m]\ns = sum[k](x[k] * x[k])\n")
    for dtype in (np.float64, np.float32):
        x = np.random.default_rng(3).standard_normal(1000).astype(dtype)
        want = dtype(0)
        for v in x:
            want = dtype(want + v * v)
        assert tcc.run(program, {"x": x}, dtype)["s"] == want


def test_max_of_sums_gradient_is_finite_and_matches_compiled_code() -> None:
    """The tie test of ``max[i](sum[k](...))``'s derivative recomputes the sum inside a sum over
    another index: before, it missed the stored maximum and the tie count 0 gave NaN (at the
    default block size for this shape; the smaller shape at smaller ones)."""
    src, of, wrt = PROGRAMS["max of sums"]
    derivative = tcc.grad(tcc.parse(src), of=of, wrt=wrt)
    compiled = tcc.compile(derivative)
    prepared = _prepared(derivative)
    for (n, m, p), blocks in (((12, 30, 20), BLOCKS[:2]), ((5, 12, 4), BLOCKS)):
        rng = np.random.default_rng(1)
        inputs = {"a": rng.standard_normal((n, m)), "b": rng.standard_normal((m, p)), "dy": rng.standard_normal(p)}
        want = compiled(**inputs)
        for block in blocks:
            got = evaluate(prepared, inputs, max_block=block)
            for x in ("da", "db"):
                assert np.isfinite(got[x]).all(), f"{x} has NaN at max_block={block} for shape {(n, m, p)}"
                np.testing.assert_allclose(got[x], want[x], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["max of sums", "sum with where", "logsumexp"])
def test_exact_ties_split_the_gradient_equally_in_every_block_size(name: str) -> None:
    """Integer-valued data make exact ties (equal sums, a sum equal to the 0 of ``max(., 0)``):
    every blocking finds the same ties, and the tied terms' shares add up to the adjoint."""
    src, of, wrt = PROGRAMS[name]
    program = tcc.parse(src)
    derivative = _prepared(tcc.grad(program, of=of, wrt=wrt))
    inputs = _inputs(derivative, 4, integers=True)
    got = _assert_same_in_every_blocking(derivative, inputs)
    compiled = tcc.compile(tcc.grad(program, of=of, wrt=wrt))(**inputs)
    for x in wrt:
        assert np.isfinite(got["d" + x]).all()
        np.testing.assert_allclose(got["d" + x], compiled["d" + x], rtol=0, atol=1e-12)


def test_tied_maxima_share_the_adjoint_equally() -> None:
    """``y[j] = max[i](sum[k](...))`` with columns whose maximum is reached by several rows: each
    tied row gets ``dy[j] / ties`` in every block size (the sums are exact: small integers)."""
    src, of, wrt = PROGRAMS["max of sums"]
    derivative = _prepared(tcc.grad(tcc.parse(src), of=of, wrt=["a"]))
    a = np.ones((6, 10))
    a[2] = a[4] = 2.0  # rows 2 and 4 tie for every column
    b = np.ones((10, 3))
    dy = np.array([1.0, 2.0, 4.0])
    for block in BLOCKS:
        da = evaluate(derivative, {"a": a, "b": b, "dy": dy}, max_block=block)["da"]
        want = np.zeros((6, 10))
        want[[2, 4]] = dy.sum() / 2
        assert np.array_equal(da, want), f"max_block={block}"
