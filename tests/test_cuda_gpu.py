"""On a real GPU: programs compiled for ``cuda`` match the CPU backend.

Marked ``gpu``; every test here skips, with the reason, where PyCUDA or an
NVIDIA GPU is missing (CI, the development machine).  Run them on a GPU
machine with ``python -m pytest -q -m gpu``.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import tcc
from compare import assert_results_close, random_inputs
from tcc.reference.fdcheck import default_sizes


def _gpu_reason() -> str | None:
    try:
        import pycuda.driver as drv
    except ImportError:
        return "PyCUDA is not installed (pip install 'tcc[cuda]')"
    try:
        drv.init()
        if drv.Device.count() < 1:
            return "no CUDA GPU is present"
    except Exception as exc:  # noqa: BLE001 - no driver, no device
        return f"the CUDA driver did not start: {exc}"
    return None


REASON = _gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted(ROOT.joinpath("examples").glob("*.tcc"))


def gradients(path: pathlib.Path):
    p = tcc.transform(tcc.parse(path), "infer-ranges")
    return [tcc.grad(p, of=of, wrt=[d.name for d in p.inputs if not d.is_index]) for of in p.results()]


def assert_gpu_matches_cpu(program, sizes=None, dtype="float64", seed=0) -> dict:
    """``cuda`` against ``cpu`` on the same inputs, every definition, normwise relative error."""
    inferred = tcc.transform(program, "infer-ranges")
    inputs = random_inputs(inferred, sizes, seed, dtype)
    want = tcc.compile(program, "cpu", dtype=dtype)(**inputs)
    got = tcc.compile(program, "cuda", dtype=dtype)(**inputs)
    assert_results_close(got, want, dtype)
    return got


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_and_gradient_matches_the_cpu(path, dtype):
    for program in [tcc.parse(path), *gradients(path)]:
        assert_gpu_matches_cpu(program, dtype=dtype)


def test_urban_second_order_matches_the_cpu():
    g = tcc.grad(tcc.parse(ROOT / "examples" / "urban.tcc"), of="f", wrt=["a", "d"])
    h = tcc.grad(g, of="da", wrt=["a"])
    assert_gpu_matches_cpu(h)


@pytest.mark.parametrize("n,k", [(1, 1), (5, 5), (4, 5), (255, 5), (256, 1), (257, 5), (3_000_001, 5)])
def test_grid_stride_and_edges(n, k):
    # (4, 5): y is empty and dx's band too; 3e6 elements need the grid-stride loop
    src = "input x[n], w[k]\noutput y[n - k + 1]\ny[i] = sum[j](x[i + j] * w[j])\n"
    g = tcc.grad(tcc.parse(src), of="y", wrt=["x", "w"])
    assert_gpu_matches_cpu(g, sizes={"n": n, "k": k})


def test_scalar_reduction_on_one_thread():
    assert_gpu_matches_cpu(tcc.parse("input x[n]\noutput s\ns = sum[i](x[i] * x[i])\n"), sizes={"n": 10_000})


def test_gpuarray_in_gpuarray_out_no_copies():
    import pycuda.gpuarray as gpuarray

    f = tcc.compile(tcc.parse("input x[n]\noutput y[n]\ny[i] = exp(x[i]) * 2\n"), "cuda")
    x = np.linspace(-1, 1, 1000)
    out = f(x=gpuarray.to_gpu(x))["y"]
    assert isinstance(out, gpuarray.GPUArray)
    np.testing.assert_allclose(out.get(), np.exp(x) * 2, rtol=1e-14)
    given = gpuarray.empty(1000, np.float64)
    assert f(x=gpuarray.to_gpu(x), y=given)["y"] is given


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    f = tcc.compile(tcc.parse("input x[n, m]\noutput y[n, m]\ny[i, j] = x[i, j] * x[i, j]\n"), "cuda")
    x = torch.rand(64, 33, dtype=torch.float64, device="cuda")
    y = f(x=x)["y"]
    assert isinstance(y, torch.Tensor) and y.is_cuda
    torch.testing.assert_close(y, x * x, rtol=1e-15, atol=0)


def test_cupy_arrays_in_and_out():
    cupy = pytest.importorskip("cupy")
    f = tcc.compile(tcc.parse("input x[n]\noutput y[n]\ny[i] = tanh(x[i])\n"), "cuda", dtype="float32")
    x = cupy.linspace(-3, 3, 4097, dtype=cupy.float32)
    y = f(x=x)["y"]
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), np.tanh(cupy.asnumpy(x)), rtol=1e-6)


def test_finite_differences_on_the_gpu():
    results = tcc.check(tcc.parse(ROOT / "examples" / "urban.tcc"), "f", ["a", "b", "c", "d"], target="cuda")
    assert all(r.ok for r in results)


def test_default_arch_is_the_device():
    import pycuda.driver as drv

    from tcc.backends.ptx import default_arch

    major, minor = drv.Device(0).compute_capability()
    assert default_arch() == f"sm_{major}{minor}"
    f = tcc.compile(tcc.parse(ROOT / "examples" / "urban.tcc"), "cuda")
    assert f".target sm_{major}{minor}" in str(f.ptx)


def test_recorded_style_corpus_on_the_gpu():
    """The examples' gradients at default sizes (the recorded-derivative corpus runs in test_zz)."""
    for path in EXAMPLES:
        for g in gradients(path):
            assert_gpu_matches_cpu(g, default_sizes(tcc.transform(g, "infer-ranges").sizes()))
