"""End to end through ``tcc.compile``: compiled results against the reference
interpreter, the call's argument checking, sizes, threads and the cache."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import tcc
from compare import assert_matches_interpreter, random_inputs
from tcc.runtime.compiled import CallError

EXAMPLES = sorted(pathlib.Path(__file__).resolve().parent.parent.joinpath("examples").glob("*.tcc"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_example_compiles_and_matches(path, dtype):
    assert_matches_interpreter(tcc.parse(path), dtype=dtype)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_gradient_compiles_and_matches(path):
    p = tcc.transform(tcc.parse(path), "infer-ranges")
    wrt = [d.name for d in p.inputs if not d.is_index]
    for of in p.results():
        assert_matches_interpreter(tcc.grad(p, of=of, wrt=wrt))


def test_urban_all_gradients_and_second_order():
    g = tcc.grad(tcc.parse("examples/urban.tcc"), of="f", wrt="a,b,c,d")
    assert_matches_interpreter(g)
    assert_matches_interpreter(tcc.grad(g, of="dd", wrt="d,c"))
    assert_matches_interpreter(tcc.grad(g, of="da", wrt="a,b"), dtype="float32")


def test_unoptimised_pipeline_gives_the_same_results():
    g = tcc.grad(tcc.parse("examples/urban.tcc"), of="f", wrt="a,b,c,d")
    fast = assert_matches_interpreter(g)
    plain = assert_matches_interpreter(g, passes="infer-ranges,lower-loops")
    for name in fast:
        np.testing.assert_allclose(fast[name], plain[name], rtol=1e-12, atol=1e-300)


SYMBOLIC = "input x[n], w[m]\ny[i] = sum[k](x[i + k] * w[k])\n"


@pytest.mark.parametrize("n,m", [(1, 1), (5, 1), (5, 5), (9, 3), (100, 7)])
def test_one_kernel_many_sizes(n, m):
    f = tcc.compile(SYMBOLIC)
    x, w = np.random.default_rng(n).random(n), np.random.default_rng(m).random(m)
    y = f(x=x, w=w)["y"]
    np.testing.assert_allclose(y, np.correlate(x, w, mode="valid"), rtol=1e-13)


def test_extent_zero():
    f = tcc.compile(SYMBOLIC)
    y = f(x=np.ones(3), w=np.ones(4))  # n - m + 1 = 0
    assert y["y"].shape == (0,)


def test_extent_zero_sum_and_extent_one():
    f = tcc.compile("input x[n]\ns = sum[i](x[i])\nt[i] = x[i] * 2\n")
    out = f(x=np.zeros(0))
    assert out["s"].shape == () and out["s"] == 0.0 and out["t"].shape == (0,)
    out = f(x=np.array([1.5]))
    assert out["s"] == 1.5 and out["t"].tolist() == [3.0]


def test_scalar_input_as_python_number():
    f = tcc.compile("input x[n], s\ny[i] = s * x[i]\n")
    assert f(x=np.arange(3.0), s=2)["y"].tolist() == [0.0, 2.0, 4.0]


def test_outputs_can_be_passed_in():
    f = tcc.compile(SYMBOLIC)
    x, w = np.arange(6.0), np.ones(2)
    y = np.full(5, np.nan)
    out = f(x=x, w=w, y=y)
    assert out["y"] is y and y.tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]


def test_threads_give_identical_results():
    src = "input A[n, m], x[m]\ny[i] = sum[j](A[i, j] * x[j])\n"
    a, x = np.random.default_rng(0).random((300, 17)), np.random.default_rng(1).random(17)
    one = tcc.compile(src, threads=1)(A=a, x=x)["y"]
    many = tcc.compile(src, threads=3)(A=a, x=x)["y"]
    assert np.array_equal(one, many)
    np.testing.assert_allclose(one, a @ x, rtol=1e-13)


def test_compiled_kernels_are_cached():
    a = tcc.compile(SYMBOLIC)
    b = tcc.compile(SYMBOLIC)
    assert a.executable is b.executable
    c = tcc.compile(SYMBOLIC, dtype="float32")
    assert c.executable is not a.executable


# ---------------------------------------------------------------------------
# Bad calls: every one names the tensor, none crashes
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corr():
    return tcc.compile(SYMBOLIC)


def _raises(f, message, **kw):
    with pytest.raises(CallError) as info:
        f(**kw)
    assert str(info.value.message) == message
    return info.value


def test_missing_input(corr):
    _raises(corr, "missing input 'w'", x=np.ones(4))


def test_unknown_argument(corr):
    _raises(corr, "unknown argument 'z' (inputs: x, w; results: y)", x=np.ones(4), w=np.ones(2), z=np.ones(1))


def test_wrong_dtype(corr):
    _raises(
        corr,
        "input 'x' has dtype int64, but this program was compiled for float64 "
        "(convert with .astype(np.float64))",
        x=np.ones(4, dtype=np.int64), w=np.ones(2),
    )


def test_float32_program_rejects_float64(corr):
    f = tcc.compile(SYMBOLIC, dtype="float32")
    e = _raises(
        f,
        "input 'w' has dtype float64, but this program was compiled for float32 "
        "(convert with .astype(np.float32) or compile with dtype='float64')",
        x=np.ones(4, dtype=np.float32), w=np.ones(2),
    )
    assert isinstance(e, ValueError)


def test_non_contiguous(corr):
    x = np.ones(8)[::2]
    _raises(corr, "input 'x' is not C-contiguous (strides (16,)); pass np.ascontiguousarray(x)", x=x, w=np.ones(2))


def test_wrong_rank(corr):
    _raises(corr, "input 'x' must have 1 dimensions (x[n]), got 2", x=np.ones((2, 2)), w=np.ones(2))


def test_negative_extent(corr):
    _raises(corr, "definition 'y' would have negative extent -1 (n - m + 1) for these sizes", x=np.ones(2), w=np.ones(4))


def test_conflicting_sizes():
    f = tcc.compile("input x[n], y[n]\nz[i] = x[i] * y[i]\n")
    _raises(f, "size 'n' is bound to 3 by 'x' but 'y' implies 4", x=np.ones(3), y=np.ones(4))


def test_not_an_array(corr):
    _raises(corr, ("input 'x' must be a NumPy array of float64 or an array object "
                  "(__array_interface__, __array__, the buffer protocol or DLPack), got list"), x=[1.0, 2.0], w=np.ones(2))


def test_bad_output_arrays(corr):
    x, w = np.ones(6), np.ones(2)
    _raises(corr, "output 'y' has shape (4,), expected (5,) for these inputs", x=x, w=w, y=np.empty(4))
    _raises(corr, "output 'y' has dtype float32, expected float64", x=x, w=w, y=np.empty(5, np.float32))
    _raises(corr, "output 'y' is not C-contiguous (strides (16,))", x=x, w=w, y=np.empty(10)[::2])
    ro = np.empty(5)
    ro.flags.writeable = False
    _raises(corr, "output 'y' is read-only", x=x, w=w, y=ro)
    big = np.ones(6)
    _raises(corr, "output 'y' overlaps the memory of 'x'", x=big, w=w, y=big[:5])


def test_bad_dtype_and_target_at_compile_time():
    with pytest.raises(tcc.TccError, match="unsupported dtype 'int32'"):
        tcc.compile(SYMBOLIC, dtype="int32")
    with pytest.raises(tcc.TccError, match="unknown target 'tpu'"):
        tcc.compile(SYMBOLIC, target="tpu")


def test_bad_thread_count(corr):
    with pytest.raises(ValueError, match="threads must be a positive integer, got 0"):
        corr.threads = 0


def test_out_of_bounds_program_is_rejected_before_codegen():
    with pytest.raises(tcc.TccError, match="out of bounds"):
        tcc.compile("input x[5]\noutput y[5]\ny[i] = x[i + 1]\n")
