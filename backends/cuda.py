"""The CUDA runtime: PTX loaded with PyCUDA, every kernel launched over the grid.

    f = tcc.compile("examples/urban.tcc", target="cuda")
    out = f(a=a, b=b, c=c, d=d)                  # NumPy in, NumPy out (copied)
    out = f(a=a_gpu, b=b_gpu, c=c_gpu, d=d_gpu)  # device arrays in: device arrays out, no copy

PyCUDA is imported only here, and only when a program is compiled for
``cuda``: ``import tcc`` and every CPU path work without it, and its absence
is a :class:`TccError` saying what to install.

**Context.**  tcc uses the device's *primary* context (what the CUDA runtime,
PyTorch, CuPy and JAX use), retained once per process, so device pointers
from those libraries are valid in tcc's kernels and the other way round.  The
device is ``TCC_CUDA_DEVICE`` (default 0).  Loading and every call make it
current for their duration only (:func:`active`): pushed and popped again,
unless it is current already.  tcc so never leaves a context on PyCUDA's
per-thread stack, which PyCUDA needs empty when a thread or the process ends
(it aborts the process otherwise), and calls may come from any thread.

**Arguments.**  Each array may be a NumPy array (copied to the device before
the launches and, for results, back after them), a
``pycuda.gpuarray.GPUArray``, or any object with ``__cuda_array_interface__``
(CuPy, PyTorch, Numba; read in place, no copy).  The checks of the CPU
runtime apply to all of them (names, rank, sizes, dtype, C-contiguity,
writable and non-overlapping outputs), with the same messages.

**Results** come back as the caller's kind: NumPy when every array argument
was NumPy; otherwise the kind of the first device argument -- a PyTorch
tensor on its device, a CuPy array, or a ``GPUArray`` for any other object.
Result arrays passed in are written in place.  Launches go to the legacy
default stream, which orders them after earlier work of PyTorch or CuPy on
their default streams.  A call returns when its kernels have finished (one
context synchronisation, a few microseconds): the temporaries it allocated
are then free to go, and results are ready for any stream.

**Launch shapes** (:func:`launch_shape`): a kernel's band (see
:func:`tcc.backends.llvm.grid_band`) of ``total`` iterations runs on blocks
of :data:`BLOCK` threads (fewer, rounded up to a warp, when ``total`` is
small), at most ``ceil(total / BLOCK)`` blocks and at most
:data:`BLOCKS_PER_SM` per multiprocessor; the kernels' grid-stride loops
cover the rest.  A kernel without a band runs on one thread.  Temporaries
(buffers made by L2 passes) are allocated per call with PyCUDA's allocator.
"""
from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np

from tcc.ir.diagnostics import TccError
from tcc.ir.loops import For

from .llvm.kernels import band_extents, grid_band
from .ptx import PTXModule, device_ordinal
from .target import COMPLEX_HINT, DTYPES, Invocation, CallError, Executable

__all__ = ["BLOCK", "BLOCKS_PER_SM", "CudaExecutable", "launch_shape", "load", "require_pycuda"]

#: threads per block for a band of at least this many iterations
BLOCK = 256
#: blocks per multiprocessor at most; the grid-stride loop covers larger bands
BLOCKS_PER_SM = 32
WARP = 32

_INSTALL = (
    "the CUDA target needs PyCUDA and an NVIDIA GPU with its driver: pip install 'tcc[cuda]' "
    "(which builds PyCUDA against the CUDA toolkit; see docs/cuda.md)"
)


def launch_shape(band: tuple[For, ...], sizes: Mapping[str, int], block: int, max_blocks: int,
                 buffers: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """``(blocks, threads per block)`` for one kernel; ``(0, 0)`` when its band is empty.

    A kernel without a band runs on one thread (its body guards on thread 0).  ``buffers``: the
    call's arrays, read where a band's bounds read an index input.
    """
    if not band:
        return 1, 1
    total = math.prod(band_extents(band, sizes, buffers))
    if total <= 0:
        return 0, 0
    threads = min(block, -(-total // WARP) * WARP) if block >= WARP else block
    return min(-(-total // threads), max_blocks), threads


# ---------------------------------------------------------------------------
# PyCUDA, the context and the device
# ---------------------------------------------------------------------------

_STATE: dict[str, Any] = {}
_STATE_LOCK = threading.Lock()


def require_pycuda():
    """``pycuda.driver``, initialised, with the chosen device's primary context retained (not pushed)."""
    with _STATE_LOCK:
        if "driver" not in _STATE:
            try:
                import pycuda.driver as drv
                import pycuda.gpuarray as gpuarray
            except ImportError as exc:
                raise TccError(f"{_INSTALL} (importing pycuda failed: {exc})") from None
            try:
                drv.init()
                count = drv.Device.count()
            except Exception as exc:  # noqa: BLE001 - pycuda.driver.Error and friends
                raise TccError(f"{_INSTALL} (the CUDA driver did not start: {exc})") from None
            ordinal = device_ordinal()
            if not 0 <= ordinal < count:
                raise TccError(f"no CUDA device {ordinal}: this machine has {count} (TCC_CUDA_DEVICE chooses one)")
            device = drv.Device(ordinal)
            context = device.retain_primary_context()
            sms = device.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
            _STATE.update(driver=drv, gpuarray=gpuarray, device=device, context=context, sms=sms)
        drv = _STATE["driver"]
    return drv


@contextlib.contextmanager
def active() -> Iterator[Any]:
    """``pycuda.driver`` with the primary context current in this thread for the ``with`` block.

    Pushed on entry and popped on exit unless it is current already (the
    caller's ``pycuda.autoprimaryctx``, or PyTorch having made it current):
    tcc never leaves a context on PyCUDA's per-thread stack, which PyCUDA
    requires to be empty when a thread or the process ends (it aborts the
    process otherwise).  A push and a pop cost about a microsecond each.
    """
    drv = require_pycuda()
    context = _STATE["context"]
    current = drv.Context.get_current()
    if current is not None and current == context:
        yield drv
        return
    context.push()
    try:
        yield drv
    finally:
        drv.Context.pop()


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CudaKernel:
    """One loaded kernel: the prepared PyCUDA function and the band it spreads over the grid."""

    name: str
    symbol: str
    function: Any
    band: tuple[For, ...]


def load(ptx: PTXModule) -> CudaExecutable:
    """Load PTX into the primary context (the driver JIT-compiles it for the GPU)."""
    with active() as drv:
        try:
            module = drv.module_from_buffer(ptx.text.encode())
        except Exception as exc:  # noqa: BLE001 - the driver's JIT refusing our PTX is a compiler bug
            raise RuntimeError(f"the CUDA driver rejected tcc's PTX for {ptx.arch} (a compiler bug, or a GPU older than {ptx.arch}): {exc}") from None
        program = ptx.program
        arg_types = "P" * len(program.buffers) + "q" * len(program.sizes)
        kernels = []
        for kernel, symbol in zip(program.kernels, ptx.kernel_symbols):
            fn = module.get_function(symbol)
            fn.prepare(arg_types)
            kernels.append(CudaKernel(kernel.name, symbol, fn, grid_band(kernel)))
    return CudaExecutable(tuple(kernels), ptx, module, BLOCKS_PER_SM * _STATE["sms"])


# ---------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceArray:
    """What the runtime needs of a device array: where it is and how it is laid out.

    ``owner`` is the caller's object (kept alive for the call); ``kind`` is
    ``gpuarray``, ``torch``, ``cupy`` or ``cai`` (another library).
    """

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    c_contiguous: bool
    readonly: bool
    owner: Any
    kind: str
    stream: int | None = None  # the producer's stream (CAI v3): work on it may still be writing the data

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def _library(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]


def as_device_array(obj: Any, name: str = "") -> DeviceArray | None:
    """The device view of a GPUArray or a ``__cuda_array_interface__`` object; None for anything else."""
    gpuarray = _STATE.get("gpuarray")
    if gpuarray is not None and isinstance(obj, gpuarray.GPUArray):
        return DeviceArray(int(obj.gpudata) if obj.size else 0, tuple(obj.shape), np.dtype(obj.dtype),
                           bool(obj.flags.c_contiguous), False, obj, "gpuarray")
    try:
        cai = getattr(obj, "__cuda_array_interface__", None)
    except Exception as exc:  # noqa: BLE001 - e.g. a torch tensor that requires grad refuses to export
        raise CallError(f"'{name}' cannot be read through __cuda_array_interface__: {exc}") from None
    if cai is None:
        return None
    shape = tuple(int(s) for s in cai["shape"])
    dtype = np.dtype(cai["typestr"])
    ptr, readonly = cai["data"]
    strides = cai.get("strides")
    contiguous = strides is None or 0 in shape or (  # as NumPy and PyCUDA: axes of extent 1 may have any stride
        len(strides) == len(shape)
        and all(n == 1 or s == c for n, s, c in zip(shape, strides, _c_strides(shape, dtype.itemsize)))
    )
    library = _library(obj)
    stream = cai.get("stream") if cai.get("version", 0) >= 3 else None
    return DeviceArray(int(ptr or 0), shape, dtype, contiguous, bool(readonly), obj,
                       library if library in ("torch", "cupy") else "cai", stream)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for s in reversed(shape):
        strides.append(step)
        step *= max(s, 1)
    return tuple(reversed(strides))


def _new_result(kind: str, like: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """A result array of the caller's kind (see the module docstring)."""
    if kind == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype.name), device=like.device)
    if kind == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=dtype)
    return _STATE["gpuarray"].empty(shape, dtype)


# ---------------------------------------------------------------------------
# The executable, as the runtime calls it
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CudaExecutable(Executable):
    """A loaded PTX module: its kernels in order (keeps the module, and so the code, alive).

    Called like the CPU's (see the module docstring): it takes device arrays
    as well as NumPy ones, allocates what the call needs on the device, and
    the compiled program gets its ``ptx`` (the PTX it runs).
    """

    kernels: tuple[CudaKernel, ...]
    ptx: PTXModule
    module: Any
    max_blocks: int

    @property
    def program(self):
        return self.ptx.program

    @property
    def llvm_module(self):
        return self.ptx.llvm

    def describe(self) -> str:
        return f"cuda ({self.ptx.arch})"

    def program_attributes(self) -> dict[str, Any]:
        return {"ptx": self.ptx}

    def active(self) -> Any:
        return active()

    # -- argument checking (device arrays as well as NumPy) ----------------
    @staticmethod
    def _device_dtype_hint(dtype: np.dtype, want: np.dtype) -> str:
        """The host hint's rules (``CompiledProgram._dtype_hint``) for a device array, which has no ``.astype`` of NumPy's."""
        if dtype.kind == "c":
            return COMPLEX_HINT
        if dtype.name in DTYPES:
            return f" (compile with dtype='{dtype.name}' or convert it to {want})"
        return f" (convert it to {want})"

    def check_input(self, name: str, value: Any, dtype: np.dtype) -> Any | None:
        dev = as_device_array(value, name)
        if dev is None:
            if isinstance(value, np.ndarray) or isinstance(value, (int, float, complex, np.number, np.bool_)):
                return None
            raise CallError(
                f"input '{name}' must be a NumPy array, a pycuda GPUArray or an object with "
                f"__cuda_array_interface__ of {dtype}, got {type(value).__name__}"
            )
        if dev.dtype != dtype:
            raise CallError(
                f"input '{name}' has dtype {dev.dtype}, but this program was compiled for {dtype}"
                f"{self._device_dtype_hint(np.dtype(dev.dtype), dtype)}"
            )
        if not dev.c_contiguous:
            raise CallError(f"input '{name}' is not C-contiguous; pass a contiguous copy")
        return dev

    def check_output(self, name: str, value: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any | None:
        dev = as_device_array(value, name)
        if dev is None:
            if not isinstance(value, np.ndarray):
                raise CallError(
                    f"output '{name}' must be a NumPy array, a pycuda GPUArray or an object with "
                    f"__cuda_array_interface__, got {type(value).__name__}"
                )
            return None
        if dev.dtype != dtype:
            raise CallError(f"output '{name}' has dtype {dev.dtype}, expected {dtype}")
        if dev.shape != shape:
            raise CallError(f"output '{name}' has shape {dev.shape}, expected {shape} for these inputs")
        if not dev.c_contiguous:
            raise CallError(f"output '{name}' is not C-contiguous")
        if dev.readonly:
            raise CallError(f"output '{name}' is read-only")
        return dev

    def new_buffer(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return _Pending(shape)

    def overlap(self, a: Any, b: Any) -> bool:
        if isinstance(a, DeviceArray) and isinstance(b, DeviceArray):
            return a.nbytes > 0 and b.nbytes > 0 and a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            return np.may_share_memory(a, b)
        return False

    # -- calling -----------------------------------------------------------
    def run(self, call: Invocation) -> dict[str, Any]:
        """Stage NumPy arrays and allocate results on the device, launch every kernel, copy results back."""
        drv = _STATE["driver"]
        buffers = call.buffers
        on_host = dict(buffers)  # index inputs are NumPy here (validated on the host); launches may read them
        keep, pointers, first_device = self._device_buffers(call)
        args = [pointers[b.name] for b in self.program.buffers] + [call.sizes[s] for s in self.program.sizes]
        # The legacy default stream waits for blocking streams, not for a producer's non-blocking
        # one (CAI v3 names it; 1 and 2 are the default streams): wait for all work then.
        if any(isinstance(v, DeviceArray) and v.stream not in (None, 1, 2) for v in buffers.values()):
            drv.Context.synchronize()
        for k in self.kernels:
            blocks, block = launch_shape(k.band, call.sizes, BLOCK, self.max_blocks, on_host)
            if blocks:
                k.function.prepared_call((blocks, 1), (block, 1, 1), *args)
        out: dict[str, Any] = {}
        for name in call.results:
            value = buffers[name]
            if isinstance(value, tuple):  # NumPy: copy back into the caller's (or a new) array
                host, dev = value
                dev.get(ary=host)
                out[name] = host
            elif first_device is None:
                out[name] = value.owner.get()
            else:
                out[name] = value.owner
        drv.Context.synchronize()  # before `keep` (temporaries, staged copies) is freed
        return out

    def _device_buffers(self, call: Invocation) -> tuple[list[Any], dict[str, int], DeviceArray | None]:
        """Every buffer on the device: ``(memory to keep alive, pointers by name, the first device argument)``.

        A NumPy buffer becomes ``(array, device copy)`` in ``call.buffers``
        (copied back after the launches if it is a result), a pending one
        a new device array of the caller's kind.
        """
        gpuarray = _STATE["gpuarray"]
        buffers, arrays = call.buffers, call.arrays
        first_device = next((b for n, b in buffers.items() if isinstance(b, DeviceArray) and n in arrays), None)
        keep: list[Any] = []  # device memory that must live until the launches are done
        pointers: dict[str, int] = {}
        for b in self.program.buffers:
            value = buffers[b.name]
            if isinstance(value, DeviceArray):
                pointers[b.name] = value.ptr
                continue
            if isinstance(value, np.ndarray):  # a NumPy input, or a NumPy result array passed in
                dev = gpuarray.to_gpu(value) if b.role == "input" else gpuarray.empty(value.shape, call.dtype)
            elif b.role != "temp" and first_device is not None and first_device.kind != "cai":
                dev = _new_result(first_device.kind, first_device.owner, value.shape, call.dtype)
            else:
                dev = gpuarray.empty(value.shape, call.dtype)
            keep.append(dev)
            view = as_device_array(dev)
            pointers[b.name] = view.ptr
            buffers[b.name] = (value, dev) if isinstance(value, np.ndarray) else view
        return keep, pointers, first_device


@dataclass(frozen=True)
class _Pending:
    """A result or temporary that the call has not allocated yet (bind only fixes its shape)."""

    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)
