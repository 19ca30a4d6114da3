"""The CUDA runtime (``tcc.backends.cuda``) end to end on the CPU, through ``tcc.compile(..., target="cuda")``.

PyCUDA is replaced by the test double in ``fake_pycuda.py`` (device memory
is host memory; a loaded PTX module runs as the program's cuda-sim twin; see
its docstring for what it checks and what it cannot).  Results are compared
with the reference interpreter.  What only a real GPU shows is in
``test_cuda_gpu.py``.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tcc
import tcc.backends.cuda as cuda
from compare import assert_results_close, random_inputs
from fake_pycuda import CAIArray, FakeCUDA
from tcc.runtime.compiled import CallError

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted(ROOT.joinpath("examples").glob("*.tcc"))
INSTALL = (
    "the CUDA target needs PyCUDA and an NVIDIA GPU with its driver: pip install 'tcc[cuda]' "
    "(which builds PyCUDA against the CUDA toolkit; see docs/cuda.md)"
)
SCALE = "input x[n]\ny[i] = 2 * x[i]\n"
CORR = "input x[n], w[m]\ny[i] = sum[k](x[i + k] * w[k])\n"
TWO = "input x[n]\noutput y[n], z[n]\ny[i] = x[i] + 1\nz[i] = x[i] * 3\n"
SUM_AND_MAP = "input x[n]\ns = sum[i](x[i])\nt[i] = x[i] * 2\n"


@pytest.fixture
def fake(monkeypatch):
    """The double, with the primary context current as a user's ``pycuda.autoprimaryctx`` makes it
    (the tests make device arrays of their own; tcc itself needs no current context)."""
    f = FakeCUDA(sms=2).install(monkeypatch)
    f.driver.init()
    ctx = f.driver.Device(0).retain_primary_context()
    ctx.push()
    yield f
    f.driver.Context.pop()
    assert not f.pending, "a call returned before its kernels ran"
    assert not f.violations, f.violations


@pytest.fixture
def bare(monkeypatch):
    """The double with no context current: tcc must push and pop the primary context itself."""
    f = FakeCUDA(sms=2).install(monkeypatch)
    yield f
    assert not f.pending and not f.violations


def host(value):
    """A result as NumPy: device arrays through their library's copy."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, CAIArray):
        return value.copy_to_host()
    return value.get()


def reference(program, inputs):
    return tcc.run(program, {k: v if v.dtype.kind == "i" else np.asarray(v, np.float64) for k, v in inputs.items()})


def index_uploads(program, inputs):
    """The host-to-device copies of a call's index arrays (given, and derived by the call): index
    inputs are NumPy arrays even when everything else lives on the device (docs/runtime.md)."""
    p = tcc.transform(program, "infer-ranges")
    sizes = tcc.compile(p, target="cuda-sim").bind(inputs)[0]
    from tcc.index_inputs import check_index_inputs

    arrays = check_index_inputs(p, inputs, sizes)
    return sorted(("htod", a.nbytes) for a in arrays.values())


def assert_close(got, want, dtype="float64"):
    assert_results_close({name: host(value) for name, value in got.items()}, want, dtype)


def programs(path):
    p = tcc.transform(tcc.parse(path), "infer-ranges")
    return [p] + [tcc.grad(p, of=of, wrt=[d.name for d in p.inputs if not d.is_index]) for of in p.results()]


def expected_launches(f, sizes):
    """The (symbol, grid, block) of every kernel launch the runtime should make for these sizes."""
    out = []
    for k in f.executable.kernels:
        blocks, threads = cuda.launch_shape(k.band, sizes, cuda.BLOCK, f.executable.max_blocks)
        if blocks:
            out.append((k.symbol, (blocks, 1), (threads, 1, 1)))
    return out


# ---------------------------------------------------------------------------
# Without PyCUDA
# ---------------------------------------------------------------------------


def test_import_tcc_never_imports_pycuda():
    script = textwrap.dedent(
        """
        import sys
        tried = []
        class Spy:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "pycuda":
                    tried.append(name)
                return None
        sys.meta_path.insert(0, Spy())
        import numpy as np
        import tcc
        src = "input x[n]\\ny[i] = 2 * x[i]\\n"
        assert tcc.compile(src)(x=np.ones(3))["y"].tolist() == [2.0] * 3
        assert tcc.compile(src, target="cuda-sim")(x=np.ones(3))["y"].tolist() == [2.0] * 3
        assert tried == [] and "pycuda" not in sys.modules, tried
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_cuda_without_pycuda_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pycuda", None)  # import pycuda fails as if absent
    monkeypatch.setattr(cuda, "_STATE", {})
    with pytest.raises(tcc.TccError) as info:
        tcc.compile(SCALE, target="cuda")
    assert info.value.message.startswith(INSTALL + " (importing pycuda failed: ")
    assert "pip install 'tcc[cuda]'" in str(info.value)


def test_driver_that_does_not_start_and_a_missing_device(monkeypatch):
    f = FakeCUDA(devices=0).install(monkeypatch)

    def broken_init(flags=0):
        raise f.driver.RuntimeError("cuInit failed: no CUDA-capable device is detected")

    monkeypatch.setattr(f.driver, "init", broken_init)
    with pytest.raises(tcc.TccError) as info:
        tcc.compile(SCALE, target="cuda")
    assert info.value.message == (
        INSTALL + " (the CUDA driver did not start: cuInit failed: no CUDA-capable device is detected)"
    )
    FakeCUDA(devices=1).install(monkeypatch)
    monkeypatch.setenv("TCC_CUDA_DEVICE", "1")
    with pytest.raises(tcc.TccError) as info:
        tcc.compile(SCALE, target="cuda")
    assert info.value.message == "no CUDA device 1: this machine has 1 (TCC_CUDA_DEVICE chooses one)"


# ---------------------------------------------------------------------------
# Every example and gradient
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_and_gradient_float64_numpy_gpuarray_and_cai(fake, path):
    for program in programs(path):
        f = fake.compile(program)
        inputs = random_inputs(program)
        want = reference(program, inputs)
        sizes, _ = f.bind(inputs)

        fake.launches.clear()
        got = f(**inputs)
        assert all(isinstance(v, np.ndarray) for v in got.values())
        assert_close(got, want)
        assert [(l.symbol, l.grid, l.block) for l in fake.launches] == expected_launches(f, sizes)

        on_host = {d.name for d in program.inputs if d.is_index}  # validated on the host, then uploaded
        uploads = index_uploads(program, inputs) if on_host else []
        device = {k: v if k in on_host else fake.gpuarray.to_gpu(v) for k, v in inputs.items()}
        fake.transfers.clear()
        got = f(**device)
        assert sorted(fake.transfers) == uploads, "device inputs were copied"
        assert all(isinstance(v, fake.gpuarray.GPUArray) for v in got.values())
        assert_close(got, want)

        other = {k: v if k in on_host else CAIArray(fake, v) for k, v in inputs.items()}
        fake.transfers.clear()
        got = f(**other)
        assert sorted(fake.transfers) == uploads and all(isinstance(v, fake.gpuarray.GPUArray) for v in got.values())
        assert_close(got, want)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_and_gradient_float32(fake, path):
    for program in programs(path):
        inputs = random_inputs(program, dtype="float32")
        assert_close(fake.compile(program, dtype="float32")(**inputs), reference(program, inputs), "float32")


def test_second_order_gradient(fake):
    g = tcc.grad(tcc.parse(ROOT / "examples" / "urban.tcc"), of="f", wrt=["a", "d"])
    h = tcc.grad(g, of="da", wrt=["a"])
    inputs = random_inputs(tcc.transform(h, "infer-ranges"))
    assert_close(fake.compile(h)(**inputs), reference(h, inputs))


# ---------------------------------------------------------------------------
# Kinds of arrays
# ---------------------------------------------------------------------------


def test_gpuarray_in_gpuarray_out_without_host_copies(fake):
    f = fake.compile(CORR)
    x, w = np.random.default_rng(1).random(9), np.random.default_rng(2).random(3)
    xd, wd = fake.gpuarray.to_gpu(x), fake.gpuarray.to_gpu(w)
    fake.transfers.clear()
    out = f(x=xd, w=wd)
    assert fake.transfers == []
    y = out["y"]
    assert isinstance(y, fake.gpuarray.GPUArray) and y.shape == (7,) and y.dtype == np.float64
    np.testing.assert_allclose(y.get(), np.correlate(x, w, mode="valid"), rtol=1e-13)
    np.testing.assert_array_equal(xd.get(), x)  # inputs untouched


def test_gpuarray_views_at_an_offset_are_inputs_too(fake):
    f = fake.compile(CORR)
    x = fake.gpuarray.to_gpu(np.arange(10.0))[3:]
    y = f(x=x, w=fake.gpuarray.to_gpu(np.ones(2)))["y"]
    assert y.get().tolist() == [7.0, 9.0, 11.0, 13.0, 15.0, 17.0]


def test_generic_cuda_array_interface_in_gpuarray_out(fake):
    f = fake.compile(CORR)
    x, w = np.arange(8.0), np.array([1.0, -1.0])
    xc, wc = CAIArray(fake, x), CAIArray(fake, w)
    fake.transfers.clear()
    out = f(x=xc, w=wc)
    assert fake.transfers == []
    assert isinstance(out["y"], fake.gpuarray.GPUArray)  # "a GPUArray for any other object"
    np.testing.assert_array_equal(out["y"].get(), np.correlate(x, w, mode="valid"))
    y = CAIArray(fake, np.zeros(7))
    fake.transfers.clear()
    assert f(x=xc, w=wc, y=y)["y"] is y and fake.transfers == []
    np.testing.assert_array_equal(y.copy_to_host(), np.correlate(x, w, mode="valid"))


def test_torch_and_cupy_arrays_get_results_of_their_kind(fake, monkeypatch):
    torch = fake.install_torch(monkeypatch)
    f = fake.compile(SUM_AND_MAP, dtype="float32")  # s needs a temporary (split reduction)
    x = np.arange(100, dtype=np.float32)
    xt = torch.tensor(x, device=torch.device(0))
    fake.transfers.clear()
    out = f(x=xt)
    assert fake.transfers == []
    assert all(type(v) is torch.Tensor for v in out.values())
    assert out["t"].device is xt.device
    assert host(out["s"]) == np.float32(x.sum()) and host(out["t"]).tolist() == (2 * x).tolist()

    cupy = fake.install_cupy(monkeypatch)
    out = f(x=cupy.asarray(x))
    assert all(type(v) is cupy.ndarray for v in out.values())
    assert host(out["t"]).tolist() == (2 * x).tolist()


def test_numpy_outputs_written_in_place(fake):
    f = fake.compile(CORR)
    x, w = np.arange(6.0), np.ones(2)
    y = np.full(5, np.nan)
    out = f(x=x, w=w, y=y)
    assert out["y"] is y and y.tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]


def test_gpuarray_outputs_written_in_place_even_as_views_of_one_allocation(fake):
    f = fake.compile(TWO)
    x = fake.gpuarray.to_gpu(np.arange(4.0))
    both = fake.gpuarray.zeros(8, np.float64)
    y, z = both[:4], both[4:]  # adjacent views of one allocation: no overlap
    out = f(x=x, y=y, z=z)
    assert out["y"] is y and out["z"] is z
    assert both.get().tolist() == [1.0, 2.0, 3.0, 4.0, 0.0, 3.0, 6.0, 9.0]


def test_gpuarray_output_with_numpy_inputs_makes_device_results(fake):
    f = fake.compile(TWO)
    y = fake.gpuarray.empty(3, np.float64)
    out = f(x=np.arange(3.0), y=y)
    assert out["y"] is y and isinstance(out["z"], fake.gpuarray.GPUArray)
    assert y.get().tolist() == [1.0, 2.0, 3.0] and out["z"].get().tolist() == [0.0, 3.0, 6.0]


def test_numpy_output_with_device_inputs_is_copied_back(fake):
    f = fake.compile(TWO)
    z = np.zeros(3)
    out = f(x=fake.gpuarray.to_gpu(np.arange(3.0)), z=z)
    assert out["z"] is z and z.tolist() == [0.0, 3.0, 6.0]
    assert isinstance(out["y"], fake.gpuarray.GPUArray) and out["y"].get().tolist() == [1.0, 2.0, 3.0]


def test_mixed_numpy_and_device_inputs(fake):
    f = fake.compile(CORR)
    x, w = np.arange(6.0), np.array([2.0, 1.0])
    wd = fake.gpuarray.to_gpu(w)
    fake.transfers.clear()
    out = f(x=x, w=wd)
    assert fake.transfers == [("htod", x.nbytes)]  # only the NumPy input is copied, the result stays
    assert isinstance(out["y"], fake.gpuarray.GPUArray)
    np.testing.assert_array_equal(out["y"].get(), np.correlate(x, w, mode="valid"))
    out = f(x=CAIArray(fake, x), w=np.ones(2))  # the first device argument chooses the kind
    assert isinstance(out["y"], fake.gpuarray.GPUArray)


def test_scalar_input_as_python_number_and_0d_result(fake):
    f = fake.compile("input x[n], s\ny[i] = s * x[i]\nt = sum[i](x[i]) * s\n")
    out = f(x=np.arange(3.0), s=2)
    assert out["y"].tolist() == [0.0, 2.0, 4.0] and out["t"].shape == () and float(out["t"]) == 6.0
    out = f(x=fake.gpuarray.to_gpu(np.arange(3.0)), s=fake.gpuarray.to_gpu(np.array(2.0)))
    assert out["t"].shape == () and float(out["t"].get()) == 6.0


# ---------------------------------------------------------------------------
# Sizes and launch shapes
# ---------------------------------------------------------------------------


def test_zero_extents(fake):
    f = fake.compile(CORR)
    fake.launches.clear()
    out = f(x=np.ones(3), w=np.ones(4))  # n - m + 1 = 0
    assert out["y"].shape == (0,) and fake.launches == []
    out = f(x=fake.gpuarray.to_gpu(np.ones(3)), w=fake.gpuarray.to_gpu(np.ones(4)))
    assert out["y"].shape == (0,) and out["y"].gpudata is None and out["y"].get().shape == (0,)

    g = fake.compile(SUM_AND_MAP)
    out = g(x=np.zeros(0))
    assert out["s"].shape == () and out["s"] == 0.0 and out["t"].shape == (0,)
    out = g(x=fake.gpuarray.to_gpu(np.zeros(0)))
    assert float(out["s"].get()) == 0.0 and out["t"].size == 0
    out = g(x=np.array([1.5]))
    assert out["s"] == 1.5 and out["t"].tolist() == [3.0]


def test_kernel_without_band_runs_on_one_thread(fake):
    f = fake.compile("input x[4]\ns = sum[i](x[i])\n")
    assert f.executable.kernels[0].band == ()
    fake.launches.clear()
    assert f(x=np.arange(4.0))["s"] == 6.0
    assert [(l.grid, l.block) for l in fake.launches] == [((1, 1), (1, 1, 1))]


def test_small_bands_get_warp_rounded_blocks(fake):
    f = fake.compile(SCALE)
    for n, shape in [(1, ((1, 1), (32, 1, 1))), (40, ((1, 1), (64, 1, 1))), (256, ((1, 1), (256, 1, 1))),
                     (600, ((3, 1), (256, 1, 1)))]:
        fake.launches.clear()
        assert f(x=np.arange(float(n)))["y"].tolist() == [2.0 * i for i in range(n)]
        assert [(l.grid, l.block) for l in fake.launches] == [shape], n


def test_grid_stride_loop_with_capped_grid(fake, monkeypatch):
    monkeypatch.setattr(cuda, "BLOCKS_PER_SM", 1)  # 2 SMs: at most 2 blocks of 256
    f = fake.compile(CORR)
    assert f.executable.max_blocks == 2
    x, w = np.random.default_rng(3).random(3001), np.random.default_rng(4).random(3)
    fake.launches.clear()
    y = f(x=fake.gpuarray.to_gpu(x), w=fake.gpuarray.to_gpu(w))["y"]
    assert [(l.grid, l.block) for l in fake.launches] == [((2, 1), (256, 1, 1))]  # 512 threads, 2999 outputs
    np.testing.assert_allclose(y.get(), np.correlate(x, w, mode="valid"), rtol=1e-13)


def test_call_returns_after_its_kernels_ran(fake):
    f = fake.compile(SUM_AND_MAP)
    out = f(x=fake.gpuarray.to_gpu(np.arange(5.0)))
    assert fake.pending == []  # synchronised: the device results are ready
    assert [l.symbol for l in fake.launches] == list(f.ptx.kernel_symbols)
    assert float(out["s"].get()) == 10.0


def test_compiled_program_is_cached_and_repr(fake):
    f = fake.compile(SCALE)
    g = fake.compile(SCALE)
    assert fake.modules_loaded == 1 and f.executable is g.executable
    assert repr(f).endswith("float64 on cuda (sm_80)>")
    assert f(x=np.ones(2))["y"].tolist() == [2.0, 2.0]


def test_ptx_the_driver_rejects_is_a_runtime_error(fake):
    with pytest.raises(RuntimeError) as info:
        fake.compile(SCALE, arch="sm_90")
    assert str(info.value).startswith(
        "the CUDA driver rejected tcc's PTX for sm_90 (a compiler bug, or a GPU older than sm_90): "
        "cuModuleLoadDataEx failed: a PTX JIT compilation failed"
    )


# ---------------------------------------------------------------------------
# Argument checking for device arrays
# ---------------------------------------------------------------------------


def call_error(f, **arrays):
    with pytest.raises(CallError) as info:
        f(**arrays)
    return info.value.message


def test_device_array_errors(fake):
    ga = fake.gpuarray
    f = fake.compile(CORR)
    x, w = ga.to_gpu(np.arange(6.0)), ga.to_gpu(np.ones(2))
    assert call_error(f, x=ga.to_gpu(np.arange(6, dtype=np.float32)), w=w) == (
        "input 'x' has dtype float32, but this program was compiled for float64 "
        "(compile with dtype='float32' or convert it to float64)"
    )
    # tcc compiles for float32 and float64 only: no 'compile with dtype=int64'
    assert call_error(f, x=ga.to_gpu(np.arange(6, dtype=np.int64)), w=w) == (
        "input 'x' has dtype int64, but this program was compiled for float64 (convert it to float64)"
    )
    assert call_error(f, x=ga.to_gpu(np.arange(6, dtype=np.complex128)), w=w) == (
        "input 'x' has dtype complex128, but this program was compiled for float64 "
        "(tcc computes with real numbers: pass the real and imaginary parts as separate inputs)"
    )
    assert call_error(f, x=ga.to_gpu(np.arange(12.0))[::2], w=w) == "input 'x' is not C-contiguous; pass a contiguous copy"
    assert call_error(f, x=CAIArray(fake, np.arange(12.0), shape=(6,), strides=(16,)), w=w) == (
        "input 'x' is not C-contiguous; pass a contiguous copy"
    )
    assert call_error(f, x=[1.0, 2.0], w=w) == (
        "input 'x' must be a NumPy array, a pycuda GPUArray or an object with __cuda_array_interface__ "
        "of float64, got list"
    )
    assert call_error(f, x=x, w=w, y=ga.empty(5, np.float32)) == "output 'y' has dtype float32, expected float64"
    assert call_error(f, x=x, w=w, y=ga.empty(4, np.float64)) == "output 'y' has shape (4,), expected (5,) for these inputs"
    assert call_error(f, x=x, w=w, y=ga.empty(10, np.float64)[::2]) == "output 'y' is not C-contiguous"
    assert call_error(f, x=x, w=w, y=CAIArray(fake, np.zeros(5), readonly=True)) == "output 'y' is read-only"
    assert call_error(f, x=x, w=w, y=x[:5]) == "output 'y' overlaps the memory of 'x'"
    assert call_error(f, x=x, w=w, y=x[1:]) == "output 'y' overlaps the memory of 'x'"
    g = fake.compile(TWO)
    xs, both = ga.to_gpu(np.arange(4.0)), ga.empty(7, np.float64)
    assert call_error(g, x=xs, y=both[:4], z=both[3:]) == "output 'y' overlaps the memory of 'z'"
    assert call_error(g, x=xs, y=xs, z=ga.empty(4, np.float64)) == "output 'y' overlaps the memory of 'x'"


def test_shape_errors_have_the_cpu_runtime_messages(fake):
    f = fake.compile(CORR)
    cpu = tcc.compile(CORR)
    ga = fake.gpuarray
    assert call_error(f, x=ga.to_gpu(np.ones((2, 3))), w=ga.to_gpu(np.ones(2))) == (
        "input 'x' must have 1 dimensions (x[n]), got 2"
    )
    for x, w in [(np.ones((2, 3)), np.ones(2)), (np.ones(3), np.ones(5)), (np.ones(()), np.ones(2))]:
        want = call_error(cpu, x=x, w=w)
        assert call_error(f, x=ga.to_gpu(x), w=ga.to_gpu(w)) == want
        assert call_error(f, x=CAIArray(fake, x), w=w) == want
    assert call_error(f, x=ga.to_gpu(np.ones(3)), w=ga.to_gpu(np.ones(1)), q=np.ones(1)) == call_error(
        cpu, x=np.ones(3), w=np.ones(1), q=np.ones(1)
    )


def test_cai_extent_one_axes_do_not_break_contiguity(fake):
    # a (1, 3) C-contiguous array whose first stride is arbitrary, as NumPy and PyCUDA allow
    f = fake.compile("input x[r, n]\ny[i, j] = x[i, j] + 1\n")
    x = CAIArray(fake, np.arange(3.0).reshape(1, 3), strides=(8, 8))
    assert host(f(x=x)["y"]).tolist() == [[1.0, 2.0, 3.0]]


# ---------------------------------------------------------------------------
# The context
# ---------------------------------------------------------------------------


def test_context_is_current_only_while_tcc_works(bare):
    fake = bare
    f = fake.compile(SCALE)  # loading needs the context (the fake refuses otherwise) ...
    assert fake.stack_depth() == 0  # ... and leaves nothing pushed
    assert f(x=np.arange(2.0))["y"].tolist() == [0.0, 2.0]  # allocating and launching need it too
    assert fake.stack_depth() == 0


def test_the_callers_primary_context_is_used_as_it_is(monkeypatch):
    fake = FakeCUDA().install(monkeypatch)
    fake.driver.init()
    own = fake.driver.Device(0).retain_primary_context()  # e.g. pycuda.autoprimaryctx
    own.push()
    f = fake.compile(SCALE)
    assert fake.stack_depth() == 1 and f(x=np.ones(1))["y"].tolist() == [2.0]
    assert fake.stack_depth() == 1 and fake.driver.Context.get_current() is own
    own.pop()


def test_calls_from_worker_threads_leave_no_context_behind(bare):
    fake = bare
    f = fake.compile(SCALE)
    results, errors = [], []

    def work():
        try:
            results.append(f(x=np.arange(3.0))["y"].tolist())
            results.append(fake.stack_depth())
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results.count([0.0, 2.0, 4.0]) == 2 and results.count(0) == 2
    assert fake.check_thread_exits() == []  # PyCUDA would abort for a thread ending with a context pushed


def test_process_exit_leaves_no_context_behind():
    script = textwrap.dedent(
        f"""
        import atexit, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        import numpy as np
        from fake_pycuda import FakeCUDA
        fake = FakeCUDA().install()
        atexit.register(fake.exit_check)  # PyCUDA's check runs after every atexit handler of tcc
        f = fake.compile({SCALE!r})
        print(f(x=np.arange(3.0))["y"].tolist())
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONFAULTHANDLER": ""})
    assert "PyCUDA ERROR" not in proc.stderr and proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0.0, 2.0, 4.0]"


# ---------------------------------------------------------------------------
# The test double refuses what a GPU would not survive
# ---------------------------------------------------------------------------


def test_the_fake_refuses_bad_launches(fake):
    import struct

    from fake_pycuda import FakeCheckError, LogicError

    f = fake.compile(SCALE)
    fn = f.executable.kernels[0].function
    x, y = fake.gpuarray.to_gpu(np.ones(4)), fake.gpuarray.empty(4, np.float64)
    args = (int(x.gpudata), int(y.gpudata), 4)
    for grid, block in [((0, 1), (32, 1, 1)), ((1, 1), (2048, 1, 1)), ((1, 1), (64, 32, 1)), ((1, 1), (0, 1, 1))]:
        with pytest.raises(LogicError, match="cuLaunchKernel failed: invalid argument"):
            fn.prepared_call(grid, block, *args)
    with pytest.raises(struct.error):
        fn.prepared_call((1, 1), (32, 1, 1), *args[:2])
    with pytest.raises(struct.error):
        fn.prepared_call((1, 1), (32, 1, 1), *args[:2], 4.0)
    with pytest.raises(FakeCheckError, match="not inside live device memory"):
        fn.prepared_call((1, 1), (32, 1, 1), np.ones(4).ctypes.data, args[1], 4)  # a host pointer
    with pytest.raises(FakeCheckError, match="not inside live device memory"):
        fn.prepared_call((1, 1), (32, 1, 1), *args[:2], 5)  # one element past the arrays
    with pytest.raises(FakeCheckError, match="overlaps"):
        fn.prepared_call((1, 1), (32, 1, 1), args[0], args[0], 4)
    with pytest.raises(FakeCheckError, match="index only x"):
        fn.prepared_call((1, 2), (32, 1, 1), *args)
    with pytest.raises(LogicError, match="named symbol not found"):
        f.executable.module.get_function("tcc_9_nothing")
    with pytest.raises(LogicError, match="cuMemAlloc failed: invalid argument"):
        fake.driver.mem_alloc(0)
    assert fake.pending == [] and fake.launches == []
    fn.prepared_call((1, 1), (32, 1, 1), *args)  # queued, runs at the next synchronisation
    assert len(fake.pending) == 1 and [(l.symbol, l.grid, l.block) for l in fake.launches] == [("tcc_0_y", (1, 1), (32, 1, 1))]
    fake.driver.Context.synchronize()
    assert y.get().tolist() == [2.0] * 4
    z = fake.gpuarray.empty(4, np.float64)
    fn.prepared_call((1, 1), (32, 1, 1), args[0], int(z.gpudata), 4)
    z.gpudata.free()  # before the launch ran: nothing says cuMemFree waits for it
    assert fake.violations[0].endswith("freed while queued launches of tcc_0_y still use it")
    fake.driver.Context.synchronize()
    assert fake.violations[1] == "tcc_0_y ran after buffer 'y' was freed"
    fake.violations.clear()


# ---------------------------------------------------------------------------
# Arguments other libraries refuse to export, producers' streams, bad settings
# ---------------------------------------------------------------------------


class _RequiresGrad:
    """Like a torch tensor with requires_grad=True: its interface refuses to export."""

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad. Use var.detach()")


def test_an_array_that_refuses_to_export_is_a_call_error(fake):
    f = fake.compile(SCALE)
    with pytest.raises(CallError) as info:
        f(x=_RequiresGrad())
    assert info.value.message == (
        "'x' cannot be read through __cuda_array_interface__: Can't get __cuda_array_interface__ on "
        "Variable that requires grad. Use var.detach()"
    )


def test_an_output_of_another_kind_names_every_accepted_kind(fake):
    f = fake.compile(SCALE)
    with pytest.raises(CallError) as info:
        f(x=np.ones(2), y=[0.0, 0.0])
    assert info.value.message == (
        "output 'y' must be a NumPy array, a pycuda GPUArray or an object with __cuda_array_interface__, got list"
    )


class _OnStream(CAIArray):
    """An array whose producer wrote it on a non-blocking stream (CAI v3 ``stream``)."""

    @property
    def __cuda_array_interface__(self):
        return {**super().__cuda_array_interface__, "stream": 0x7F00}


def test_a_producers_stream_is_waited_for(fake, monkeypatch):
    f = fake.compile(SCALE)
    syncs = []
    real = fake.driver.Context.synchronize
    monkeypatch.setattr(fake.driver.Context, "synchronize", staticmethod(lambda: (syncs.append(1), real())[1]))
    x = _OnStream(fake, np.arange(3.0))
    assert host(f(x=x)["y"]).tolist() == [0.0, 2.0, 4.0]
    assert len(syncs) == 2  # before the launches (the producer's stream) and at the end
    syncs.clear()
    f(x=CAIArray(fake, np.arange(3.0)))  # stream None: only the final synchronisation
    assert len(syncs) == 1


def test_a_device_number_that_is_not_a_number(monkeypatch):
    fake = FakeCUDA().install(monkeypatch)
    monkeypatch.setenv("TCC_CUDA_DEVICE", "first")
    with pytest.raises(tcc.TccError) as info:
        fake.compile(SCALE)
    assert info.value.message == "TCC_CUDA_DEVICE must be a device number, not 'first'"


@pytest.mark.parametrize("entry", [0, 2, 4])
def test_a_launch_bounded_by_an_index_input_reads_its_entries_on_the_host(fake, entry):
    """The gradient of ``e[s[0]]`` stores into ``de`` on the band ``max(0, s[0])..min(v - 1, s[0])``:
    sizing its grid reads ``s`` (it raised KeyError '#s' on cuda and cuda-sim before)."""
    program = tcc.grad("index s[1] < v\ninput e[v]\ny = e[s[0]]\n", of="y", wrt="e")
    inputs = {"s": np.array([entry]), "e": np.arange(5.0), "dy": np.array(2.5)}
    want = reference(program, inputs)
    assert_close(fake.compile(program)(**inputs), want)
    assert_close(tcc.compile(program, target="cuda-sim")(**inputs), want)
    assert [(l.grid, l.block) for l in fake.launches][-1] == ((1, 1), (32, 1, 1))  # one store: one warp
