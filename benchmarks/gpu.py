"""tcc's CUDA kernels against jax.jit and PyTorch on the same NVIDIA GPU.

    python benchmarks/gpu.py [--quick] [--repeat N] [--case NAME[,NAME]] [--write]
    python benchmarks/gpu.py --sim [--quick]       # no GPU needed: a CPU smoke test of this script
    python benchmarks/gpu.py --check-scatter-ptx   # nvcc -ptx of the scatter kernel, no GPU needed

Cases (``--case``; default all):

* ``urban``             -- the Urban sec. 6 function of ``run.py`` scaled up for the
                           GPU, i, j = 2048, k = 64: forward, all four gradients
                           (forward+backward), and backward only.
* ``conv2d``            -- ``run.py``'s strided NCHW convolution scaled up: batch 32,
                           64 -> 64 channels, 128x128 images, 3x3 kernels, stride 2:
                           forward and gradients for x and w.
* ``gather-vs-scatter`` -- the gradient w.r.t. x of ``y[i] = sum[k](x[i + k] * w[k])``,
                           n = 2**24, k = 31, float64 and float32: tcc's derivative (a
                           gather, one thread per dx element, no atomics) against the
                           scatter form of the same derivative written by hand in CUDA C
                           (``scatter_kernels.cu``: one thread per dy element, k
                           ``atomicAdd``s each, dx zeroed first, the zeroing timed too),
                           and against jax.jit and torch.

Every array lives on the GPU before anything is timed, so no host <-> device
copy is in a measurement: tcc gets PyTorch CUDA tensors (``--arrays``; its
results come back as torch tensors, allocated by torch's caching allocator),
jax.jit gets ``jax.device_put`` arrays, torch its own tensors.  Everything is
float64 unless a row says float32 (JAX with ``jax_enable_x64``).

The problems of ``urban`` and ``conv2d`` and their three rows come from
``problems.py``, shared with ``run.py``.  Timing reuses ``harness.py`` (first
call and a warm-up excluded, candidates round-robin, medians of wall time);
on the GPU a call's wall time is only meaningful once the device has
finished, so every candidate synchronises before it returns: tcc's call
synchronises the context itself (see ``backends/cuda.py``), jax.jit results
are waited for with ``block_until_ready``, torch calls end with
``torch.cuda.synchronize()``, the scatter kernel with a context
synchronisation.  Every peer's results are
compared with tcc's before it is timed (norm-wise relative error <= 1e-9 in
float64, 1e-5 in float32), as in ``run.py``.  In addition each tcc kernel is
timed alone with CUDA events (device time, no launch overhead).

Without PyCUDA or a CUDA GPU the script prints one line saying so and exits
with status 2.  ``--sim`` runs tcc with ``target="cuda-sim"`` (the same grid
kernels, simulated on the CPU) at tiny sizes, and the peers on the CPU: a
smoke test of this script's logic, which claims no timings.  ``--write``
records a full GPU run in ``docs/benchmarks.md`` between the ``gpu-results``
markers (appended at the end of the file if absent).
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import harness as H  # noqa: E402
import problems as P  # noqa: E402
from problems import BO, FB, Peers, grad_case, jax_ready, unavailable  # noqa: E402

CASES = ("urban", "conv2d", "gather-vs-scatter")
FRAMEWORKS = ("tcc", "scatter", "jax.jit", "torch", "torch.compile")
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- gpu-results:begin (benchmarks/gpu.py --write) -->", "<!-- gpu-results:end -->"
SCATTER_SRC = HERE / "scatter_kernels.cu"
SCATTER_BLOCK = 256          # threads per block of the scatter kernel
CHECK_ARCH = "sm_80"         # what --check-scatter-ptx compiles for (float64 atomicAdd needs sm_60+)
# Problem sizes per case and mode.  Full: big enough that tcc's GPU kernels take a millisecond or more
# (a kernel of a few microseconds measures launch overhead, not code); sim: a CPU simulation runs each GPU
# thread one after another, so tiny.
SIZES: dict[str, dict[str, tuple[int, ...]]] = {
    "urban": {"full": (2048, 2048, 64), "quick": (1024, 1024, 64), "sim": (16, 16, 8)},            # I, J, K
    "conv2d": {"full": (32, 64, 64, 128, 3), "quick": (8, 64, 64, 128, 3), "sim": (1, 2, 3, 9, 3)},  # B, C, O, S, R
    "gather-vs-scatter": {"full": (2 ** 24, 31), "quick": (2 ** 22, 31), "sim": (2 ** 10, 31)},      # n, K
}

# JAX grabs 75 % of the GPU's memory at its first use unless told otherwise; torch and tcc need room too.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


class NoGpu(Exception):
    """No CUDA GPU could be used (PyCUDA missing, no driver, no device): the one-line reason."""


# --------------------------------------------------------------------------
# the device: a CUDA GPU through PyCUDA, or the CPU simulation
# --------------------------------------------------------------------------
@dataclass
class Device:
    """Where tcc runs and what kind of arrays it is given.

    ``arrays`` is ``torch`` (CUDA tensors), ``gpuarray`` (PyCUDA) or, in the
    simulation, ``numpy``.  ``facts`` are the report's lines about the GPU and
    its software.
    """

    sim: bool
    target: str                               # "cuda" or "cuda-sim"
    arrays: str
    ordinal: int = 0
    drv: Any = None                           # pycuda.driver (None in the simulation)
    name: str = "CPU (simulation)"
    arch: str = ""                            # sm_XY
    torch: Any = None                         # torch, when tcc's arrays are torch tensors
    facts: list[str] = field(default_factory=list)

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.ordinal}"

    def sync(self) -> None:
        if self.drv is not None:
            self.drv.Context.synchronize()

    def put(self, value: np.ndarray) -> Any:
        """``value`` on the device, as the kind of array tcc is given."""
        if self.arrays == "torch":
            return self.torch.from_numpy(np.ascontiguousarray(value)).to(self.torch_device)
        if self.arrays == "gpuarray":
            import pycuda.gpuarray as gpuarray

            return gpuarray.to_gpu(np.ascontiguousarray(value))
        return np.ascontiguousarray(value)

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        if self.arrays == "torch":
            return self.torch.empty(shape, dtype=getattr(self.torch, dtype), device=self.torch_device)
        if self.arrays == "gpuarray":
            import pycuda.gpuarray as gpuarray

            return gpuarray.empty(shape, dtype)
        return np.empty(shape, dtype)

    def release(self) -> None:
        """Give cached device memory back between cases (torch keeps freed blocks for itself)."""
        gc.collect()
        if self.torch is not None and not self.sim:
            self.torch.cuda.empty_cache()


def device_ptr(value: Any) -> int:
    """The device address of a torch tensor, a GPUArray or any ``__cuda_array_interface__`` object."""
    if hasattr(value, "data_ptr"):
        return int(value.data_ptr())
    if hasattr(value, "gpudata"):
        return int(value.gpudata) if value.size else 0
    return int(value.__cuda_array_interface__["data"][0] or 0)


def host(value: Any) -> np.ndarray:
    """A result as a NumPy array: torch tensors, GPUArrays, CuPy and jax arrays alike."""
    if hasattr(value, "detach"):                       # torch
        return H.to_numpy(value)
    if hasattr(value, "get") and not isinstance(value, (dict, np.ndarray)):   # GPUArray, CuPy
        return value.get()
    return np.asarray(value)


class OnHost(Mapping):
    """A call's results, copied to the host only when looked at.

    The harness checks a candidate's first result and times later calls of
    the same function; wrapping instead of copying keeps the copy out of the
    timed calls (wrapping costs nothing).
    """

    def __init__(self, results: Mapping[str, Any]) -> None:
        self._results = results

    def __getitem__(self, name: str) -> np.ndarray:
        return host(self._results[name])

    def __contains__(self, name: object) -> bool:
        return name in self._results

    def __iter__(self) -> Iterator[str]:
        return iter(self._results)

    def __len__(self) -> int:
        return len(self._results)


def on_host(results: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: host(v) for k, v in results.items()}


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else ""


def nvidia_driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        if out.strip():
            return out.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8")
        m = re.search(r"Kernel Module\s+(\S+)", text)
        if m:
            return m.group(1)
    except OSError:
        pass
    return "?"


def find_device(sim: bool, arrays: str) -> Device:
    """The GPU (raising :class:`NoGpu` with the reason when there is none), or the simulation."""
    if sim:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")      # the peers run on the CPU in the simulation
        dev = Device(sim=True, target="cuda-sim", arrays="numpy")
        dev.facts.append("SIMULATION (`--sim`): tcc ran with `target=\"cuda-sim\"` (its GPU kernels simulated on "
                         "the CPU) at tiny sizes and the peers ran on the CPU; this checks the script's logic "
                         "and claims no timings")
        return dev
    try:
        import pycuda
        import pycuda.driver  # noqa: F401
    except ImportError as exc:
        raise NoGpu(f"PyCUDA is not installed ({exc})") from None
    import atexit

    from tcc.backends.cuda import active
    from tcc.ir.diagnostics import TccError

    try:
        # The primary context of TCC_CUDA_DEVICE, current in this thread for the whole run (this
        # script allocates, copies and times with PyCUDA itself; tcc's calls find it current and
        # leave it), and popped at exit, as pycuda.autoprimaryctx does: PyCUDA aborts a process
        # that ends with a context on its stack.
        session = active()
        drv = session.__enter__()
        atexit.register(session.__exit__, None, None, None)
    except TccError as exc:
        raise NoGpu(first_line(getattr(exc, "message", None) or str(exc))) from None
    except Exception as exc:  # noqa: BLE001
        raise NoGpu(H.short_reason(exc, 200)) from None
    ordinal = int(os.environ.get("TCC_CUDA_DEVICE", "0"))
    gpu = drv.Context.get_device()
    major, minor = gpu.compute_capability()
    dev = Device(sim=False, target="cuda", arrays="gpuarray", ordinal=ordinal, drv=drv, name=gpu.name(),
                 arch=f"sm_{major}{minor}")
    if arrays in ("auto", "torch"):
        try:
            import torch

            if torch.cuda.is_available():
                dev.arrays, dev.torch = "torch", torch
            elif arrays == "torch":
                raise NoGpu("--arrays torch: torch has no CUDA device (torch.cuda.is_available() is False)")
        except ImportError:
            if arrays == "torch":
                raise NoGpu("--arrays torch: torch is not installed") from None
    sms = gpu.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    mem = gpu.total_memory() / 2 ** 30
    api = drv.get_driver_version()
    built = ".".join(str(v) for v in drv.get_version())
    dev.facts.append(f"GPU: **{dev.name}** ({dev.arch}, {sms} SMs, {mem:.1f} GiB), device {ordinal}")
    dev.facts.append(f"driver: NVIDIA {nvidia_driver_version()}, CUDA driver API {api // 1000}.{api % 1000 // 10}; "
                     f"PyCUDA {getattr(pycuda, 'VERSION_TEXT', '?')} (built against CUDA {built}); "
                     f"nvcc {nvcc_version()}")
    return dev


# --------------------------------------------------------------------------
# the hand-written scatter kernel (scatter_kernels.cu)
# --------------------------------------------------------------------------
def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return None


def nvcc_version() -> str:
    nvcc = nvcc_path()
    if nvcc is None:
        return "not found"
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    except Exception as exc:  # noqa: BLE001
        return f"failed ({H.short_reason(exc, 60)})"
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return m.group(2) if m else "?"


def nvcc_compile(arch: str, kind: str) -> bytes:
    """``scatter_kernels.cu`` compiled by nvcc to ``kind`` (``ptx`` or ``cubin``) for ``arch``."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise RuntimeError("nvcc not found (PATH, CUDA_HOME, /usr/local/cuda)")
    with tempfile.TemporaryDirectory(prefix="tcc-scatter-") as tmp:
        out = Path(tmp) / f"scatter.{kind}"
        cmd = [nvcc, f"-{kind}", f"-arch={arch}", "-O3", "-o", str(out), str(SCATTER_SRC)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:3])} failed: {first_line(proc.stderr or proc.stdout)}")
        return out.read_bytes()


def check_scatter_ptx(arch: str, out: Any = None) -> int:
    """``--check-scatter-ptx``: the scatter kernels compile to PTX (no GPU needed); 0 if they do.

    Prints what it found to ``out`` (default stdout), a failure to stderr.
    """
    out = sys.stdout if out is None else out
    try:
        ptx = nvcc_compile(arch, "ptx").decode()
    except Exception as exc:  # noqa: BLE001
        print(f"scatter kernel: {exc}", file=sys.stderr)
        return 1
    entries = re.findall(r"\.entry\s+(\w+)", ptx)
    atomics = len(re.findall(r"\batom\.", ptx)) + len(re.findall(r"\bred\.", ptx))
    want = {"correlation_dx_scatter_f64", "correlation_dx_scatter_f32"}
    if not want <= set(entries) or atomics == 0:
        print(f"scatter kernel: PTX for {arch} lacks {sorted(want - set(entries)) or 'atomics'}", file=sys.stderr)
        return 1
    version = re.search(r"^\.version\s+(\S+)", ptx, re.M)
    print(f"scatter kernel: {SCATTER_SRC.name} compiles with nvcc {nvcc_version()} to PTX "
          f"{version.group(1) if version else '?'} for {arch}: {len(ptx)} bytes, entries {', '.join(entries)}, "
          f"{atomics} atomic instructions", file=out)
    return 0


@dataclass
class Scatter:
    """The loaded scatter kernels (``functions`` by dtype), or why there are none (``status``)."""

    status: str = "ok"
    how: str = ""
    functions: dict[str, Any] = field(default_factory=dict)
    module: Any = None


def load_scatter(device: Device) -> Scatter:
    """Compile ``scatter_kernels.cu`` with nvcc and load it into tcc's (the primary) context.

    A cubin for the GPU's own arch first (it runs on any driver of the
    toolkit's major version); PTX for the same arch if nvcc cannot make one
    (the driver JIT-compiles it, if it is at least as new as nvcc).
    """
    if device.sim:
        return Scatter(status="ok", how="NumPy stand-in (simulation)")
    drv = device.drv
    errors = []
    for kind in ("cubin", "ptx"):
        try:
            image = nvcc_compile(device.arch, kind)
            module = drv.module_from_buffer(image)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{kind}: {H.short_reason(exc, 120)}")
            continue
        sc = Scatter(how=f"nvcc {nvcc_version()} -{kind} -arch={device.arch} -O3", module=module)
        for dtype, suffix in (("float64", "f64"), ("float32", "f32")):
            fn = module.get_function(f"correlation_dx_scatter_{suffix}")
            fn.prepare("PPPqi")                                 # dy, w, dx, m, K
            sc.functions[dtype] = fn
        return sc
    status = "missing (nvcc not found)" if nvcc_path() is None else "failed: " + "; ".join(errors)
    return Scatter(status=status)


# --------------------------------------------------------------------------
# peers
# --------------------------------------------------------------------------
def load_peers(device: Device) -> Peers:
    """jax and torch on the benchmark's GPU (on the CPU in the simulation); missing or failed ones say why.

    A peer without a CUDA backend is reported as missing on a GPU run:
    timing it on the CPU against tcc on the GPU would measure nothing useful.
    """
    peers = Peers()
    peers.versions["numpy"] = np.__version__

    def setup_jax() -> None:
        jax, jnp, lax = P.import_jax()
        if device.sim:
            peers.jax_device = jax.devices("cpu")[0]
        else:
            gpus = [d for d in jax.devices() if d.platform == "gpu"]
            if not gpus:
                raise LookupError(f"jax has no CUDA backend (devices: {jax.devices()[0].platform}); "
                                  "pip install 'jax[cuda12]'")
            peers.jax_device = gpus[min(device.ordinal, len(gpus) - 1)]
        peers.jax, peers.jnp, peers.lax = jax, jnp, lax
        kind = getattr(peers.jax_device, "device_kind", peers.jax_device.platform)
        peers.versions["jax"] = f"{jax.__version__} ({peers.jax_device.platform}: {kind})"

    def setup_torch() -> None:
        torch = P.import_torch()
        if device.sim:
            peers.torch_device = torch.device("cpu")
        else:
            if not torch.cuda.is_available():
                raise LookupError("torch has no CUDA device (a CPU build?)")
            peers.torch_device = torch.device(device.torch_device)
        peers.torch = torch
        peers.versions["torch"] = (f"{torch.__version__} (CUDA {torch.version.cuda})" if not device.sim
                                   else f"{torch.__version__} (CPU)")

    P.import_peer(peers, "jax", setup_jax, absent="missing (no CUDA backend)")
    P.import_peer(peers, "torch", setup_torch, absent="missing (no CUDA)")
    return peers


# --------------------------------------------------------------------------
# run context
# --------------------------------------------------------------------------
@dataclass
class Ctx(P.RunContext):
    quick: bool
    device: Device
    peers: Peers
    repeat: int
    budget_s: float
    min_time_s: float
    quiet_below: float | None
    primer: bool
    torch_compile: bool
    check_cpu: bool
    rows: list[H.Row] = field(default_factory=list)
    breakdowns: list[tuple[str, list[tuple[str, str, float]]]] = field(default_factory=list)
    compile_times: list[tuple[str, float]] = field(default_factory=list)
    cpu_checks: list[tuple[str, float, float]] = field(default_factory=list)    # (program, error, tolerance)
    scatter_split: list[tuple[str, float, float, float]] = field(default_factory=list)  # dtype, memset, kernel, tcc s
    extra: dict[str, Any] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)                # (case, why it stopped)
    loaded_scatter: Scatter | None = None

    breakdown_backward_only = True

    @property
    def sim(self) -> bool:
        return self.device.sim

    def sizes(self, case: str) -> tuple[int, ...]:
        return SIZES[case]["sim" if self.sim else "quick" if self.quick else "full"]

    # the device hooks of problems.grad_case: every array on the device, results copied back when looked at
    def put(self, value: np.ndarray) -> Any:
        return self.device.put(value)

    def wrap(self, results: Mapping[str, Any]) -> OnHost:
        return OnHost(results)

    def fetch(self, results: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return on_host(results)

    def tcc_compile(self, name: str, program: Any, dtype: str = "float64", **kw: Any) -> Any:
        import tcc

        t0 = time.perf_counter()
        compiled = tcc.compile(program, target=self.device.target, dtype=dtype, **kw)
        self.compile_times.append((name, time.perf_counter() - t0))
        return compiled

    def cpu_check(self, name: str, program: Any, arrays: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray],
                  dtype: str = "float64") -> None:
        """``--check-cpu``: tcc's GPU results against the same program compiled for the CPU."""
        if not self.check_cpu:
            return
        import tcc

        tol = 1e-9 if dtype == "float64" else 1e-5
        want = tcc.compile(program, target="cpu", dtype=dtype)(**arrays)
        err = H.rel_error(got, {k: want[k] for k in got})
        self.cpu_checks.append((name, err, tol))
        self.log(f"  {name}: tcc {self.device.target} against tcc cpu: rel. error {err:.1e}"
                 + ("" if err <= tol else f" > {tol:g}  MISMATCH"))

    def breakdown(self, title: str, compiled: Any, arrays: Mapping[str, Any]) -> None:
        reps = max(3, min(self.repeat, 10))
        times = (sim_kernel_times(compiled, arrays, reps) if self.sim
                 else cuda_kernel_times(compiled, arrays, reps, self.device.drv))
        self.breakdowns.append((title, times))

    def scatter(self) -> Scatter:
        if self.loaded_scatter is None:
            self.loaded_scatter = load_scatter(self.device)
            self.log(f"  scatter kernel: {self.loaded_scatter.how or self.loaded_scatter.status}")
        return self.loaded_scatter


# --------------------------------------------------------------------------
# tcc's kernels one by one
# --------------------------------------------------------------------------
def cuda_kernel_times(compiled: Any, arrays: Mapping[str, Any], repeat: int, drv: Any) -> list[tuple[str, str, float]]:
    """Median device seconds of each kernel of a CUDA program, launched in order as a call launches them.

    ``(name, launch shape, seconds)`` per kernel, from CUDA events around each
    launch: the kernels' own time, without Python, argument checking, result
    allocation or the call's final synchronisation.
    """
    import pycuda.gpuarray as gpuarray
    from tcc.backends.cuda import BLOCK, launch_shape

    sizes, buffers = compiled.bind(dict(arrays))
    keep, ptrs = [], []
    for b in compiled.loops.buffers:
        value = buffers[b.name]
        ptr = getattr(value, "ptr", None)                    # a device array argument
        if ptr is None:                                      # a result or temporary: fresh device memory
            g = gpuarray.empty(value.shape, compiled.dtype)
            keep.append(g)
            ptr = int(g.gpudata) if g.size else 0
        ptrs.append(ptr)
    args = ptrs + [sizes[s] for s in compiled.loops.sizes]
    kernels = compiled.executable.kernels
    shapes = [launch_shape(k.band, sizes, BLOCK, compiled.executable.max_blocks) for k in kernels]
    start, end = drv.Event(), drv.Event()
    samples: list[list[float]] = [[] for _ in kernels]
    for r in range(repeat + 1):                              # the first round is a warm-up
        for i, (k, (blocks, block)) in enumerate(zip(kernels, shapes)):
            start.record()
            if blocks:
                k.function.prepared_call((blocks, 1), (block, 1, 1), *args)
            end.record()
            end.synchronize()
            if r:
                samples[i].append(start.time_till(end) * 1e-3)
    del keep
    return [(k.name, f"{blocks}x{block}", statistics.median(s)) for k, (blocks, block), s in zip(kernels, shapes, samples)]


def sim_kernel_times(compiled: Any, arrays: Mapping[str, Any], repeat: int) -> list[tuple[str, str, float]]:
    """The same for ``cuda-sim`` (CPU seconds of the simulated grid; only a smoke test of the report)."""
    from tcc.backends.cuda import launch_shape
    from tcc.backends.cuda_sim import SIM_BLOCK, SIM_MAX_BLOCKS

    sizes, buffers = compiled.bind(dict(arrays))
    order = compiled.loops.buffers
    ptrs = (ctypes.c_void_p * max(1, len(order)))(*[buffers[b.name].ctypes.data for b in order])
    size_vals = (ctypes.c_int64 * max(1, len(compiled.loops.sizes)))(*[sizes[s] for s in compiled.loops.sizes])
    shapes = [launch_shape(band, sizes, SIM_BLOCK, SIM_MAX_BLOCKS) for band in compiled.executable.bands]
    samples: list[list[float]] = [[] for _ in shapes]
    for r in range(repeat + 1):
        for i, (k, (blocks, block)) in enumerate(zip(compiled.executable.kernels, shapes)):
            t0 = time.perf_counter()
            if blocks:
                k.fn(ptrs, size_vals, blocks, block)
            if r:
                samples[i].append(time.perf_counter() - t0)
    del buffers
    return [(k.name, f"{blocks}x{block}", statistics.median(s))
            for k, (blocks, block), s in zip(compiled.executable.kernels, shapes, samples)]


def event_seconds(device: Device, launch: Callable[[], None], repeat: int) -> float:
    """Median device seconds of ``launch()`` (work queued on the default stream) between two CUDA events."""
    drv = device.drv
    start, end = drv.Event(), drv.Event()
    samples = []
    for r in range(repeat + 1):
        start.record()
        launch()
        end.record()
        end.synchronize()
        if r:
            samples.append(start.time_till(end) * 1e-3)
    return statistics.median(samples)


# --------------------------------------------------------------------------
# cases 1-2: a function and its gradients (problems.py)
# --------------------------------------------------------------------------
def case_urban(ctx: Ctx) -> None:
    grad_case(ctx, P.urban(*ctx.sizes("urban"), ctx.peers, torch_compile=ctx.torch_compile))


def case_conv2d(ctx: Ctx) -> None:
    grad_case(ctx, P.conv2d(*ctx.sizes("conv2d"), ctx.peers))


# --------------------------------------------------------------------------
# case 3: tcc's gather gradient against a hand-written scatter
# --------------------------------------------------------------------------
def case_gather_scatter(ctx: Ctx) -> None:
    """dx of a 1-D correlation: tcc's gather kernel, the CUDA C scatter kernel, jax.jit and torch.

    tcc and the scatter kernel write into a preallocated dx (``dx=`` for
    tcc), so neither pays for an allocation and the scatter pays for zeroing
    dx, which its atomics need; jax.jit and torch allocate their result.
    """
    import tcc

    device, peers = ctx.device, ctx.peers
    n, K = ctx.sizes("gather-vs-scatter")
    m = n - K + 1
    ctx.log(f"[gather-vs-scatter] x[{n}], w[{K}], dy[{m}]")
    program = tcc.parse(P.correlation_src(n, K), "<correlation>")
    grad_program = tcc.grad(program, of="y", wrt=["x"])
    scatter = ctx.scatter()
    f_jax, f_torch = P.correlation_peers(peers)
    for dtype in ("float64", "float32"):
        tol = 1e-9 if dtype == "float64" else 1e-5
        rng = np.random.default_rng(5)
        x = rng.standard_normal(n).astype(dtype)
        w = rng.standard_normal(K).astype(dtype)
        dy = rng.standard_normal(m).astype(dtype)
        g = ctx.tcc_compile(f"correlation: dx, {dtype}", grad_program, dtype=dtype)
        dev = {"x": device.put(x), "w": device.put(w), "dy": device.put(dy)}
        ref = on_host(g(**dev))
        ctx.cpu_check(f"correlation: dx, {dtype}", grad_program, {"x": x, "w": w, "dy": dy}, ref, dtype)
        out_tcc = device.empty((n,), dtype)
        cands = [H.Candidate("tcc", lambda: OnHost(g(**dev, dx=out_tcc)), check=False)]

        out_sc = device.empty((n,), dtype)
        launch_sc = None
        if scatter.status != "ok":
            cands.append(unavailable("scatter", scatter.status))
        elif device.sim:
            def scatter_call() -> dict:                # the same scatter, in NumPy: exercises the row's logic
                out_sc[:] = 0
                for k in range(K):
                    out_sc[k:k + m] += dy * w[k]
                return {"dx": out_sc}
            cands.append(H.Candidate("scatter", scatter_call))
        else:
            drv = device.drv
            fn = scatter.functions[dtype]
            p_dy, p_w, p_dx = device_ptr(dev["dy"]), device_ptr(dev["w"]), device_ptr(out_sc)
            nbytes = n * np.dtype(dtype).itemsize
            blocks = -(-m // SCATTER_BLOCK)

            def zero() -> None:
                drv.memset_d8(p_dx, 0, nbytes)

            def launch_sc() -> None:
                fn.prepared_call((blocks, 1), (SCATTER_BLOCK, 1, 1), p_dy, p_w, p_dx, m, K)

            def scatter_call() -> OnHost:
                zero()
                launch_sc()
                drv.Context.synchronize()
                return OnHost({"dx": out_sc})

            cands.append(H.Candidate("scatter", scatter_call))

        if peers.jax is not None:
            jax = peers.jax
            jx, jw, jdy = peers.jax_put(x), peers.jax_put(w), peers.jax_put(dy)

            def dx_jax(x, w, g):
                return jax.vjp(lambda v: f_jax(v, w), x)[1](g)[0]

            jfn = jax.jit(dx_jax)
            cands.append(H.Candidate("jax.jit", lambda: {"dx": jax_ready(jfn(jx, jw, jdy))}))
        else:
            cands.append(unavailable("jax.jit", peers.jax_status))
        if peers.torch is not None:
            torch = peers.torch
            tx = peers.torch_put(x).requires_grad_()
            tw, tdy = peers.torch_put(w), peers.torch_put(dy)
            kept: dict[str, Any] = {}

            def torch_dx() -> dict:
                if "y" not in kept:                     # the graph once; backward only afterwards
                    kept["y"] = f_torch(tx, tw)
                (gx,) = torch.autograd.grad(kept["y"], (tx,), tdy, retain_graph=True)
                peers.torch_sync()
                return {"dx": gx}

            cands.append(H.Candidate("torch", torch_dx))
        else:
            cands.append(unavailable("torch", peers.torch_status))
        ctx.row("gather-vs-scatter", f"dx, {dtype}", cands, {"dx": ref["dx"]}, tol=tol,
                note="tcc and scatter write into a given dx; the scatter's zeroing is timed")

        ctx.breakdown(f"correlation dx (gather), {dtype}", g, {**dev, "dx": out_tcc})
        if launch_sc is not None:
            reps = max(3, min(ctx.repeat, 10))
            memset_s = event_seconds(device, zero, reps)
            kernel_s = event_seconds(device, launch_sc, reps)
            tcc_s = sum(t for _, _, t in ctx.breakdowns[-1][1])
            ctx.scatter_split.append((dtype, memset_s, kernel_s, tcc_s))
        del cands
        device.release()


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------
def goals(ctx: Ctx) -> list[str]:
    """The goal, per case and row: tcc's gradient kernels at least as fast as jax.jit on the same GPU."""
    lines = ["| goal: tcc's gradient kernels at least as fast as jax.jit on the same GPU | measured | verdict |",
             "|---|---|---|"]
    by = {(r.case, r.what): r for r in ctx.rows}
    wanted = [("urban", FB), ("urban", BO), ("conv2d", FB), ("conv2d", BO),
              ("gather-vs-scatter", "dx, float64"), ("gather-vs-scatter", "dx, float32")]
    for case, what in wanted:
        r = by.get((case, what))
        if r is None:
            continue
        goal = f"{case}: {what.replace('gradients, ', '')}"
        ratio = r.ratio("jax.jit")
        if ratio is None:
            lines.append(f"| {goal} | jax.jit {r.cells.get('jax.jit', H.Cell('n/a')).status} | — |")
            continue
        measured = (f"{ratio:.2f}x ({H.fmt_ms(r.cells['tcc'].median_ms)} vs "
                    f"{H.fmt_ms(r.cells['jax.jit'].median_ms)} ms)")
        if ctx.sim:
            how = "not judged (simulation)"
        elif ratio >= 1:
            how = f"met (tcc {ratio:.2f}x faster)"
        else:
            how = f"**not met**: tcc takes {1 / ratio:.2f}x jax's time"
        lines.append(f"| {goal} | {measured} | {how} |")
    return lines


def gather_scatter_lines(ctx: Ctx) -> list[str]:
    rows = [r for r in ctx.rows if r.case == "gather-vs-scatter"]
    if not rows:
        return []
    out = ["| dtype | tcc gather ms | scatter ms (memset + atomics) | scatter / tcc | "
           "device ms: tcc kernel | memset | scatter kernel |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    split = {d: (ms, ks, ts) for d, ms, ks, ts in ctx.scatter_split}
    for r in rows:
        dtype = r.what.split(", ")[1]
        t, s = r.cells.get("tcc"), r.cells.get("scatter")
        ratio = r.ratio("scatter")
        sc = H.fmt_ms(s.median_ms) if s is not None and s.ok else (s.status if s is not None else "—")
        dev = split.get(dtype)
        devs = (" | ".join(f"{v * 1e3:.3f}" for v in (dev[2], dev[0], dev[1])) if dev else "— | — | —")
        out.append(f"| {dtype} | {H.fmt_ms(t.median_ms if t else None)} | {sc} | "
                   f"{f'{ratio:.2f}x' if ratio is not None else '—'} | {devs} |")
    return out


def report(ctx: Ctx, args: argparse.Namespace, wall_s: float) -> str:
    from tcc.build import DEFAULT_GPU_PIPELINE

    device, peers = ctx.device, ctx.peers
    out: list[str] = []
    when = datetime.date.today().isoformat()
    mode = "simulation on the CPU, tiny sizes" if ctx.sim else "quick (smaller sizes)" if args.quick else "full"
    flags = (" --sim" if ctx.sim else "") + (" --quick" if args.quick else "")
    out.append(f"Run of `python benchmarks/gpu.py{flags}` on {when} ({mode}; at least {args.repeat} timed calls "
               f"and {args.min_time:g} s per framework and row; whole run {wall_s:.0f} s).")
    out.append("")
    if ctx.sim:
        out.append("**SIMULATION -- no timings are claimed.** The numbers below are CPU times of tiny problems "
                   "and only show that the script works.")
        out.append("")
    out += [f"- {fact}" for fact in device.facts]
    load = ctx.extra.get("other_load")
    out.append(f"- host: {H.cpu_model()}, {H.usable_cores()} cores usable, Python {platform.python_version()}, "
               f"{platform.system()} {platform.machine()}"
               + (f" (other processes kept {load:.2f} cores busy on average during this run)" if load is not None else ""))
    out.append("- versions: " + ", ".join(f"{k} {v}" for k, v in peers.versions.items()))
    kind = {"torch": "PyTorch CUDA tensors (results come back as torch tensors)",
            "gpuarray": "PyCUDA GPUArrays (results come back as GPUArrays)",
            "numpy": "NumPy arrays (simulation)"}[device.arrays]
    out.append(f"- tcc: {H.git_state()}; target `{device.target}`, pipeline `{DEFAULT_GPU_PIPELINE}`; "
               f"arguments: {kind}, all on the device before timing")
    scatter = ctx.loaded_scatter
    if scatter is not None:
        out.append(f"- scatter kernel (`benchmarks/{SCATTER_SRC.name}`): {scatter.how or scatter.status}")
    out.append("")
    for case, why in ctx.failures:
        out.append(f"**The `{case}` case stopped**: {why} (its rows below, if any, are those measured before).")
        out.append("")
    if ctx.rows:
        out.append("Median wall time per call in ms, the device synchronised before the call returns (tcc's call "
                   "synchronises; jax: `block_until_ready`; torch: `torch.cuda.synchronize()`); in parentheses "
                   "peer time / tcc time (> 1: tcc is faster). \"busy elsewhere\": host cores kept busy by other "
                   "processes while the row was timed.")
        out.append("")
        out.append(H.table(ctx.rows, FRAMEWORKS))
        out.append("")
        out.append("Goals:")
        out.append("")
        out += goals(ctx)
        out.append("")
    gs = gather_scatter_lines(ctx)
    if gs:
        out.append("Gather (tcc's derivative) against scatter (the hand-written atomicAdd kernel) for dx of the "
                   "correlation; wall times from the table above, device times from CUDA events around each "
                   "launch:")
        out.append("")
        out += gs
        out.append("")
    if ctx.cpu_checks:
        out.append("tcc on the " + ("simulated " if ctx.sim else "") + "GPU against tcc on the CPU (`--check-cpu`):")
        out.append("")
        out.append("| program | rel. error | verdict |")
        out.append("|---|---:|---|")
        for name, err, tol in ctx.cpu_checks:
            out.append(f"| {name} | {err:.1e} | {'ok' if err <= tol else f'**> {tol:g}**'} |")
        out.append("")
    if ctx.rows:
        out.append("Peers' first call in ms (JIT compilation included) and, in parentheses, the norm-wise relative "
                   "error of their results against tcc's, checked before timing; tcc's `tcc.compile` (to PTX, "
                   "loaded by the driver) of each program in the table after:")
        out.append("")
        out.append(H.first_call_table(ctx.rows, [fw for fw in FRAMEWORKS if fw != "tcc"]))
        out.append("")
        out += H.compile_time_table(ctx.compile_times)
        out.append("")
    if ctx.breakdowns:
        how = "CPU ms of the simulated grid" if ctx.sim else "device ms from CUDA events around each launch"
        out.append(f"tcc kernels one by one (median {how}; launch = blocks x threads per block):")
        out.append("")
        out.append("| program | kernel | launch | ms | share |")
        out.append("|---|---|---|---:|---:|")
        for title, times in ctx.breakdowns:
            total = sum(t for _, _, t in times) or 1.0
            for name, launch, t in times:
                out.append(f"| {title} | {name} | {launch} | {t * 1e3:.3f} | {100 * t / total:.0f} % |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tcc on an NVIDIA GPU against jax.jit and PyTorch (see the module docstring).")
    H.add_options(ap, CASES, quick_help="smaller sizes and fewer rounds",
                  repeat_help="at least this many timed calls per framework and row (default 10, --quick 3)",
                  budget_help="seconds of calls per framework and row after which a slow one stops at 3 samples "
                              "(default 10, --quick 1)",
                  quiet_below=1.0,
                  quiet_help="set aside samples taken while other processes kept more than CORES host cores busy "
                             "(default 1; a negative value keeps every sample)")
    ap.add_argument("--arrays", choices=("auto", "torch", "gpuarray"), default="auto",
                    help="what tcc is given: torch CUDA tensors or PyCUDA GPUArrays (default: torch if it has CUDA)")
    ap.add_argument("--no-torch-compile", action="store_true", help="leave torch.compile out of the urban case")
    ap.add_argument("--check-cpu", action="store_true",
                    help="also compare tcc's GPU results with tcc's CPU results (slow at full size; on with --sim)")
    ap.add_argument("--sim", action="store_true",
                    help="no GPU: tcc with target cuda-sim at tiny sizes, peers on the CPU; a smoke test, no timings")
    ap.add_argument("--check-scatter-ptx", nargs="?", const=CHECK_ARCH, default=None, metavar="ARCH",
                    help=f"only compile {SCATTER_SRC.name} to PTX with nvcc (default arch {CHECK_ARCH}) and exit")
    ap.add_argument("--write", action="store_true", help=f"record the results in {DOC.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    if args.check_scatter_ptx:
        return check_scatter_ptx(args.check_scatter_ptx)
    cases = H.chosen_cases(ap, args, CASES)
    if args.write and (args.sim or args.quick or set(cases) != set(CASES)):
        ap.error("--write records only a full GPU run (no --sim, no --quick, all cases)")
    if args.sim:                             # one call each, no minimum time: the logic, not the clock
        args.repeat = 1 if args.repeat is None else args.repeat
        args.min_time = 0.0 if args.min_time is None else args.min_time
        args.budget = 0.1 if args.budget is None else args.budget
    H.timing_defaults(ap, args)

    try:
        device = find_device(args.sim, args.arrays)
    except NoGpu as exc:
        print(f"benchmarks/gpu.py: no CUDA GPU/PyCUDA found: {exc}. Run it on a machine with an NVIDIA GPU "
              "after `pip install pycuda`, or pass --sim for a CPU smoke test.", file=sys.stderr)
        return 2
    ctx = Ctx(quick=args.quick, device=device, peers=load_peers(device), repeat=args.repeat,
              budget_s=args.budget, min_time_s=args.min_time,
              quiet_below=None if args.quiet_below < 0 else args.quiet_below, primer=not args.no_primer,
              torch_compile=not args.no_torch_compile, check_cpu=args.check_cpu or args.sim)
    ctx.log(f"gpu benchmarks on {device.name}{' (SIMULATION)' if device.sim else ''}: {', '.join(cases)}; "
            + ", ".join(f"{k} {v}" for k, v in ctx.peers.versions.items()))
    if args.sim:
        rc = check_scatter_ptx(CHECK_ARCH, out=sys.stderr) if nvcc_path() else None
        device.facts.append("scatter kernel: " + ("nvcc not found, PTX not checked" if rc is None
                                                   else f"`nvcc -ptx -arch={CHECK_ARCH}` "
                                                   + ("ok" if rc == 0 else "**FAILED**")))
    meter = H.LoadMeter()
    meter.start()
    t0 = time.perf_counter()
    for case in cases:
        # a case that raises (tcc or the device failing) is reported and the others still run: GPU time is scarce
        try:
            {"urban": case_urban, "conv2d": case_conv2d, "gather-vs-scatter": case_gather_scatter}[case](ctx)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            ctx.failures.append((case, H.short_reason(exc, 300)))
            ctx.log(f"[{case}] stopped: {H.short_reason(exc, 300)}")
        device.release()
    wall = time.perf_counter() - t0
    ctx.extra["other_load"] = meter.stop()
    text = report(ctx, args, wall)
    print(text)
    if args.write and ctx.failures:
        print(f"not recorded in {DOC.relative_to(ROOT)}: {len(ctx.failures)} case(s) stopped", file=sys.stderr)
    elif args.write:
        doc = DOC.read_text(encoding="utf-8")
        DOC.write_text(H.replace_section(doc, BEGIN, END, text), encoding="utf-8")
        print(f"recorded in {DOC.relative_to(ROOT)}", file=sys.stderr)
    failed = [name for name, err, tol in ctx.cpu_checks if not err <= tol]
    return 1 if failed or ctx.failures else 0


if __name__ == "__main__":
    sys.exit(main())
