"""A test double of the part of PyCUDA that ``tcc.backends.cuda`` uses, running on the CPU.

    fake = FakeCUDA(sms=2)
    fake.install(monkeypatch)            # pycuda, pycuda.driver, pycuda.gpuarray in sys.modules
    f = fake.compile(program, dtype="float64")   # tcc.compile(program, target="cuda", ...)
    out = f(x=fake.gpuarray.to_gpu(x))

What it models (names, signatures and error behaviour follow PyCUDA's
``driver.py``, ``gpuarray.py`` and ``src/cpp/cuda.hpp``):

* **Device memory is host memory.**  ``mem_alloc`` returns a
  ``DeviceAllocation`` that owns a NumPy byte buffer; ``int()`` of it is the
  buffer's (256-byte aligned, like ``cuMemAlloc``) address.  The fake keeps a
  registry of live allocations: every pointer a kernel gets, and every
  ``memcpy``, must lie inside one (a host pointer, a freed allocation or an
  out-of-range size is an error, as it would fault on a GPU).
  ``cuMemAlloc(0)`` is refused, as by the driver.
* **The context stack of PyCUDA**, per thread: ``Context.get_current()`` is the
  top of *PyCUDA's* stack of the calling thread (None when empty), ``push``
  and ``Context.pop`` change it, and everything that needs a context
  (allocations, copies, module loads, launches, ``synchronize``, creating a
  ``GPUArray``) fails without one.  PyCUDA aborts the process when a thread,
  or the process, ends with a context still on that thread's stack
  (``context_stack::~context_stack``): :meth:`FakeCUDA.check_thread_exits`
  records such threads in :attr:`FakeCUDA.aborts`, and :meth:`FakeCUDA.exit_check`
  (for an ``atexit`` handler in a subprocess) prints PyCUDA's message and aborts.
* **PTX loading**: ``module_from_buffer`` wants bytes holding PTX (``.version``,
  ``.target sm_XY`` not newer than the fake device, ``.address_size 64``) and
  parses its ``.entry`` declarations and their parameters; ``get_function``
  of a symbol without an ``.entry`` fails like ``cuModuleGetFunction``.
* **Launches** (``Function.prepare`` / ``prepared_call(grid, block, *args)``):
  the arguments are packed with ``struct.pack(arg_format, ...)`` as PyCUDA
  does (wrong count or kind raises ``struct.error``); grid and block are
  checked against the driver's limits (positive, block product <= 1024,
  ...); the packed size must match the PTX entry's parameters.  Launches are
  *asynchronous*: they are queued and run at the next ``Context.synchronize``
  or blocking copy, in order, and freeing memory a queued launch still uses
  is recorded in :attr:`FakeCUDA.violations` (nothing says ``cuMemFree``
  waits for it).  Each launch is recorded in :attr:`FakeCUDA.launches`.

How a kernel runs: the fake cannot execute PTX, so the program is announced
before it is compiled: :meth:`FakeCUDA.compile` is ``tcc.compile(program,
target="cuda", ...)`` with the program, dtype and passes remembered while it
runs.  ``module_from_buffer`` compiles the *same* program for ``cuda-sim``
(the same grid kernels and kernel symbols ``tcc_<i>_<name>``, compiled for
the host; cached per program) and checks that the PTX has exactly those
entries, each with one ``.u64 .ptr`` parameter per buffer and one ``.u64``
per size of the L2 program.  A launch of ``symbol`` with ``(blocks, 1)`` x
``(threads, 1, 1)`` then calls that cuda-sim kernel's entry
``fn(bufs, sizes, blocks, threads)`` with the launch's pointers and sizes,
which runs every thread of the launch; before that the fake checks each
buffer's whole extent (computed from the sizes) lies in live device memory
and that no written buffer overlaps another.  :meth:`FakeCUDA.compile` also
checks that the compiled program's L2 program is the cuda-sim one (same
buffers in the same order, so the pointers mean the same).

Other libraries' device arrays: :class:`CAIArray` exposes only a version-3
``__cuda_array_interface__`` (tcc's "any other library" kind); ``fake.torch``
and ``fake.cupy`` (install with :meth:`FakeCUDA.install_torch` /
:meth:`FakeCUDA.install_cupy`) are minimal stand-ins of the two libraries
tcc knows by name, enough for ``torch.empty`` / ``cupy.empty`` of results.

What it cannot model: the real driver, the PTX JIT and the code it makes
(the PTX is only parsed; the arithmetic is the cuda-sim twin's), GPU memory
semantics (coalescing, caches, races between real threads: the simulated
threads run one after another), streams other than the legacy default one,
and several contexts or devices.
"""
from __future__ import annotations

import builtins
import ctypes
import math
import os
import re
import struct
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

import tcc
from tcc.sizes import extents_shape


class FakeCheckError(AssertionError):
    """Something a real GPU would not survive (or tcc's grid ABI forbids), caught by the fake."""


# PyCUDA's exception hierarchy (pycuda._driver)
class Error(Exception):
    pass


class LogicError(Error):
    pass


class LaunchError(Error):
    pass


class CudaRuntimeError(Error):
    pass


class CudaMemoryError(Error, builtins.MemoryError):
    pass


@dataclass(frozen=True)
class Launch:
    """One ``prepared_call``: the kernel symbol and the launch shape as passed."""

    symbol: str
    grid: tuple
    block: tuple


@dataclass(frozen=True)
class Entry:
    """One PTX ``.entry``: its name and parameter kinds ('P' for ``.u64 .ptr``, 'q' for ``.u64``)."""

    name: str
    params: tuple[str, ...]


_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(r"\.param\s+(\.[a-z0-9]+)((?:\s+\.ptr)?)")
_TARGET = re.compile(r"^\s*\.target\s+sm_(\d+)(\w*)", re.M)
_VERSION = re.compile(r"^\s*\.version\s+(\d+)\.(\d+)", re.M)

#: cuda-sim twins, compiled once per (program, dtype, passes) for the whole test session
_SIMS: dict[tuple, Any] = {}

_PYCUDA_ABORT = (
    "-------------------------------------------------------------------\n"
    "PyCUDA ERROR: The context stack was not empty upon module cleanup.\n"
    "-------------------------------------------------------------------\n"
    "A context was still active when the context stack was being\n"
    "cleaned up. At this point in our execution, CUDA may already\n"
    "have been deinitialized, so there is no way we can finish\n"
    "cleanly. The program will be aborted now.\n"
    "Use Context.pop() to avoid this problem.\n"
    "-------------------------------------------------------------------\n"
)


def _sim_key(program: Any, dtype: str, passes: Any) -> tuple:
    return (program if isinstance(program, str) else str(program), str(np.dtype(dtype)), str(passes))


def sim_program(program: Any, dtype: str = "float64", passes: Any = None) -> Any:
    """The cuda-sim compilation of ``program`` (the fake's stand-in for the PTX), cached."""
    key = _sim_key(program, dtype, passes)
    sim = _SIMS.get(key)
    if sim is None:
        sim = _SIMS[key] = tcc.compile(program, target="cuda-sim", dtype=dtype, passes=passes)
    return sim


def _c_strides(itemsize: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], itemsize
    for s in reversed(shape):
        strides.append(step)
        step *= max(1, s)
    return tuple(reversed(strides))


def _f_strides(itemsize: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], itemsize
    for s in shape:
        strides.append(step)
        step *= max(1, s)
    return tuple(strides)


def _equal_strides(a: tuple, b: tuple, shape: tuple) -> bool:
    """PyCUDA's compyte ``equal_strides``: axes of extent 1 do not count."""
    if a == b:
        return True
    if len(a) != len(b) or len(b) != len(shape):
        return False
    return all(s == 1 or x == y for s, x, y in zip(shape, a, b))


class _ThreadStack:
    """PyCUDA's context stack of one thread (``context_stack`` in a boost thread_specific_ptr)."""

    def __init__(self) -> None:
        self.thread = threading.current_thread()
        self.contexts: list[Any] = []


class FakeCUDA:
    """One fake driver, device and PyCUDA installation (see the module docstring).

    ``sms``: the multiprocessor count the device reports; ``compute_capability``:
    what PTX ``.target`` it accepts (newer is refused like the JIT does);
    ``max_ptx``: the newest PTX ISA version its "driver" JIT knows (times ten).
    """

    def __init__(self, *, sms: int = 4, compute_capability: tuple[int, int] = (8, 0), devices: int = 1,
                 max_ptx: int = 85) -> None:
        self.sms = sms
        self.compute_capability = compute_capability
        self.device_count = devices
        self.max_ptx = max_ptx
        self.initialized = False
        self.launches: list[Launch] = []
        self.transfers: list[tuple[str, int]] = []  # ("htod" | "dtoh" | "dtod", bytes), by PyCUDA copies only
        self.violations: list[str] = []
        self.aborts: list[str] = []
        self.pending: list[Any] = []
        self.modules_loaded = 0
        self.primary_handle = 0x7C0_0000 + id(self) % 0x1000
        self._stacks: dict[int, _ThreadStack] = {}
        self._allocs: dict[int, Any] = {}  # base address -> _Memory
        self._graveyard: list[Any] = []  # memory freed while a queued launch still used it
        self._announced: tuple | None = None
        self._lock = threading.RLock()
        self.driver, self.gpuarray, self.package = _build_pycuda(self)
        self.torch = _build_torch(self)
        self.cupy = _build_cupy(self)

    # -- installation -------------------------------------------------------
    def install(self, monkeypatch: Any = None) -> "FakeCUDA":
        """Put the fake in ``sys.modules`` as ``pycuda``, ``pycuda.driver`` and ``pycuda.gpuarray``
        and reset the CUDA runtime's cached driver state (``tcc.backends.cuda._STATE``) and the
        compiled ``cuda`` programs of tcc's cache (they hold another fake's modules).

        With a pytest ``monkeypatch`` everything is undone after the test; without one (a
        subprocess script) it stays.
        """
        import tcc.backends.cuda as cuda
        import tcc.build as build
        from tcc.backends.ptx import default_arch

        default_arch()  # cached before the fake is importable: the fake device must not choose tcc's arch
        cache = {k: v for k, v in build._CACHE.items() if k[3] != "cuda"}
        items = [("pycuda", self.package), ("pycuda.driver", self.driver), ("pycuda.gpuarray", self.gpuarray)]
        if monkeypatch is None:
            sys.modules.update(items)
            cuda._STATE.clear()
            build._CACHE.clear()
            build._CACHE.update(cache)
        else:
            for name, module in items:
                monkeypatch.setitem(sys.modules, name, module)
            monkeypatch.setattr(cuda, "_STATE", {})
            monkeypatch.setattr(build, "_CACHE", cache)
        return self

    def install_torch(self, monkeypatch: Any) -> Any:
        """``sys.modules["torch"]`` = :attr:`torch` for the test (a real torch is put back after)."""
        monkeypatch.setitem(sys.modules, "torch", self.torch)
        return self.torch

    def install_cupy(self, monkeypatch: Any) -> Any:
        monkeypatch.setitem(sys.modules, "cupy", self.cupy)
        return self.cupy

    # -- compiling ----------------------------------------------------------
    def compile(self, program: Any, dtype: str = "float64", **options: Any) -> Any:
        """``tcc.compile(program, target="cuda", dtype=dtype, **options)`` with the program announced,
        so that the PTX module it loads runs as the program's cuda-sim twin."""
        passes = options.get("passes")
        self._announced = (program, dtype, passes)
        try:
            compiled = tcc.compile(program, target="cuda", dtype=dtype, **options)
        finally:
            self._announced = None
        sim = sim_program(program, dtype, passes)
        if str(compiled.loops) != str(sim.loops):
            raise FakeCheckError("the cuda and cuda-sim compilations have different L2 programs")
        return compiled

    # -- threads and contexts -----------------------------------------------
    def _stack(self) -> list[Any]:
        with self._lock:
            ident = threading.get_ident()
            entry = self._stacks.get(ident)
            if entry is not None and entry.thread is not threading.main_thread() and not entry.thread.is_alive():
                self._finish_thread(ident, entry)  # the ident was reused by a new thread
                entry = None
            if entry is None:
                entry = self._stacks[ident] = _ThreadStack()
            return entry.contexts

    def _finish_thread(self, ident: int, entry: _ThreadStack) -> None:
        del self._stacks[ident]
        if entry.contexts:
            self.aborts.append(entry.thread.name)

    def check_thread_exits(self) -> list[str]:
        """Finish the stacks of threads that have ended: PyCUDA aborts for each non-empty one."""
        with self._lock:
            for ident, entry in list(self._stacks.items()):
                if entry.thread is not threading.main_thread() and not entry.thread.is_alive():
                    self._finish_thread(ident, entry)
        return self.aborts

    def stack_depth(self) -> int:
        """How many contexts are on the calling thread's PyCUDA stack."""
        return len(self._stack())

    def exit_check(self) -> None:
        """What PyCUDA does when the process ends (register with ``atexit`` *before* tcc first
        runs, so that it runs after tcc's own handlers): abort if the main thread's stack is
        not empty."""
        if self._stack():
            sys.stderr.write(_PYCUDA_ABORT)
            sys.stderr.flush()
            os.abort()

    def _require_init(self, routine: str) -> None:
        if not self.initialized:
            raise LogicError(f"{routine} failed: initialization error")

    def _current(self, routine: str) -> Any:
        self._require_init(routine)
        stack = self._stack()
        if not stack:
            raise LogicError(f"{routine} failed: invalid device context")
        return stack[-1]

    # -- memory ---------------------------------------------------------------
    def _allocate(self, nbytes: int) -> "_Memory":
        memory = _Memory(self, nbytes)
        with self._lock:
            self._allocs[memory.address] = memory
        return memory

    def _release(self, memory: "_Memory") -> None:
        with self._lock:
            self._allocs.pop(memory.address, None)
            users = [launch for launch in self.pending if launch.uses(memory)]
            if users:
                self.violations.append(
                    f"device memory at {memory.address:#x} ({memory.nbytes} bytes) was freed while queued "
                    f"launches of {', '.join(sorted({u.symbol for u in users}))} still use it"
                )
                self._graveyard.append(memory.buffer)  # keep the host memory so the simulation cannot crash

    def find(self, ptr: int, nbytes: int) -> "_Memory | None":
        """The live allocation holding ``[ptr, ptr + nbytes)``, or None."""
        with self._lock:
            for memory in self._allocs.values():
                if memory.address <= ptr and ptr + nbytes <= memory.address + memory.nbytes:
                    return memory
        return None

    def host_view(self, ptr: int, shape: tuple[int, ...], dtype: Any, strides: tuple[int, ...] | None = None) -> np.ndarray:
        """A NumPy view of fake device memory (for the fake's own copies and for tests)."""
        dtype = np.dtype(dtype)
        strides = _c_strides(dtype.itemsize, shape) if strides is None else tuple(strides)
        if 0 in shape:
            return np.empty(shape, dtype)
        lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
        hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + dtype.itemsize
        memory = self.find(ptr + lo, hi - lo)
        if memory is None:
            raise FakeCheckError(f"no live device memory holds {hi - lo} bytes at {ptr + lo:#x}")
        base = memory.buffer[ptr + lo - memory.address: ptr + hi - memory.address]
        return np.ndarray(shape, dtype, buffer=base, offset=-lo, strides=strides)

    def _check_range(self, routine: str, ptr: int, nbytes: int) -> None:
        if nbytes and self.find(ptr, nbytes) is None:
            raise LogicError(f"{routine} failed: invalid argument")

    # -- the stream -----------------------------------------------------------
    def flush(self) -> None:
        """Run every queued launch, in order (what the legacy default stream does)."""
        while True:
            with self._lock:
                if not self.pending:
                    self._graveyard.clear()
                    return
                launch = self.pending.pop(0)
            launch.run()

    def wait_idle(self) -> None:
        self.flush()
        if self.violations:
            raise FakeCheckError("; ".join(self.violations))


class _Memory:
    """One device allocation's storage: a NumPy byte buffer, 256-byte aligned like cuMemAlloc."""

    def __init__(self, fake: FakeCUDA, nbytes: int) -> None:
        raw = np.zeros(nbytes + 256, np.uint8)
        start = -raw.ctypes.data % 256
        self.raw = raw
        self.buffer = raw[start:start + nbytes]
        self.address = self.buffer.ctypes.data
        self.nbytes = nbytes
        self.fake = fake
        self.live = True

    def free(self) -> None:
        if self.live:
            self.live = False
            self.fake._release(self)


class _QueuedLaunch:
    def __init__(self, fake: FakeCUDA, symbol: str, entry: Any, blocks: int, threads: int,
                 pointers: list[int], sizes: list[int], regions: list[tuple[str, int, int]]) -> None:
        self.fake, self.symbol, self.entry = fake, symbol, entry
        self.blocks, self.threads = blocks, threads
        self.pointers, self.sizes, self.regions = pointers, sizes, regions

    def uses(self, memory: _Memory) -> bool:
        return any(n and memory.address <= p < memory.address + memory.nbytes for _, p, n in self.regions)

    def run(self) -> None:
        for name, ptr, nbytes in self.regions:
            if nbytes and self.fake.find(ptr, nbytes) is None:
                self.fake.violations.append(f"{self.symbol} ran after buffer '{name}' was freed")
                return
        bufs = (ctypes.c_void_p * max(1, len(self.pointers)))(*self.pointers)
        sizes = (ctypes.c_int64 * max(1, len(self.sizes)))(*self.sizes)
        self.entry.fn(bufs, sizes, self.blocks, self.threads)


# ---------------------------------------------------------------------------
# pycuda.driver and pycuda.gpuarray
# ---------------------------------------------------------------------------


def _build_pycuda(fake: FakeCUDA) -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    drv = types.ModuleType("pycuda.driver")
    drv.__file__ = __file__
    drv.Error, drv.LogicError, drv.LaunchError = Error, LogicError, LaunchError
    drv.RuntimeError, drv.MemoryError = CudaRuntimeError, CudaMemoryError

    def init(flags: int = 0) -> None:
        fake.initialized = True

    class device_attribute:  # noqa: N801 - PyCUDA's name
        MAX_THREADS_PER_BLOCK = 1
        MAX_BLOCK_DIM_X = 2
        MAX_BLOCK_DIM_Y = 3
        MAX_BLOCK_DIM_Z = 4
        MAX_GRID_DIM_X = 5
        MAX_GRID_DIM_Y = 6
        MAX_GRID_DIM_Z = 7
        WARP_SIZE = 10
        MULTIPROCESSOR_COUNT = 16
        COMPUTE_CAPABILITY_MAJOR = 75
        COMPUTE_CAPABILITY_MINOR = 76

    attributes = {
        device_attribute.MAX_THREADS_PER_BLOCK: 1024,
        device_attribute.MAX_BLOCK_DIM_X: 1024,
        device_attribute.MAX_BLOCK_DIM_Y: 1024,
        device_attribute.MAX_BLOCK_DIM_Z: 64,
        device_attribute.MAX_GRID_DIM_X: 2**31 - 1,
        device_attribute.MAX_GRID_DIM_Y: 65535,
        device_attribute.MAX_GRID_DIM_Z: 65535,
        device_attribute.WARP_SIZE: 32,
        device_attribute.MULTIPROCESSOR_COUNT: fake.sms,
        device_attribute.COMPUTE_CAPABILITY_MAJOR: fake.compute_capability[0],
        device_attribute.COMPUTE_CAPABILITY_MINOR: fake.compute_capability[1],
    }

    class Context:
        """``pycuda.driver.Context``: compared by the CUDA context handle, like PyCUDA's."""

        def __init__(self, handle: int) -> None:
            self.handle = handle

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Context) and other.handle == self.handle

        def __ne__(self, other: object) -> bool:
            return not self == other

        def __hash__(self) -> int:  # PyCUDA: handle ^ this (so equal contexts may hash differently)
            return hash(self.handle) ^ id(self)

        def push(self) -> None:
            fake._require_init("cuCtxPushCurrent")
            fake._stack().append(self)

        @staticmethod
        def pop() -> None:
            stack = fake._stack()
            if not stack:
                raise LogicError("context::pop failed: invalid device context - cannot pop non-current context")
            stack.pop()

        @staticmethod
        def get_current() -> "Context | None":
            stack = fake._stack()
            return stack[-1] if stack else None

        @staticmethod
        def synchronize() -> None:
            fake._current("cuCtxSynchronize")
            fake.flush()

        @staticmethod
        def get_device() -> "Device":
            fake._current("cuCtxGetDevice")
            return Device(0)

        def detach(self) -> None:
            pass

    class Device:
        def __init__(self, ordinal: int) -> None:
            fake._require_init("cuDeviceGet")
            if not 0 <= ordinal < fake.device_count:
                raise LogicError("cuDeviceGet failed: invalid device ordinal")
            self.ordinal = ordinal

        @staticmethod
        def count() -> int:
            fake._require_init("cuDeviceGetCount")
            return fake.device_count

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Device) and other.ordinal == self.ordinal

        def __hash__(self) -> int:
            return self.ordinal

        def name(self) -> str:
            return "Fake CUDA device (host memory)"

        def compute_capability(self) -> tuple[int, int]:
            return fake.compute_capability

        def total_memory(self) -> int:
            return 1 << 30

        def get_attribute(self, attr: int) -> int:
            if attr not in attributes:
                raise LogicError("cuDeviceGetAttribute failed: invalid argument")
            return attributes[attr]

        def retain_primary_context(self) -> Context:
            return Context(fake.primary_handle + self.ordinal)

    class DeviceAllocation:
        """``pycuda.driver.DeviceAllocation``: ``int()`` is the device address; freed when collected."""

        def __init__(self, memory: _Memory) -> None:
            self._memory = memory

        def __int__(self) -> int:
            return self._memory.address

        __index__ = __int__

        def free(self) -> None:
            if not self._memory.live:
                raise LogicError("device_allocation::free failed: invalid resource handle")
            self._memory.free()

        def __del__(self) -> None:
            memory = getattr(self, "_memory", None)
            if memory is not None and memory.live:
                memory.free()

    def mem_alloc(nbytes: int) -> DeviceAllocation:
        if not fake._stack():
            raise LogicError("explicit_context_dependent failed: invalid device context - no currently active context?")
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise LogicError("cuMemAlloc failed: invalid argument")
        return DeviceAllocation(fake._allocate(nbytes))

    def _host_bytes(obj: Any, writable: bool) -> np.ndarray:
        """The host buffer of a copy as bytes (PyObject_AsReadBuffer / AsWriteBuffer: contiguous only)."""
        arr = np.asarray(obj)
        if not arr.flags.c_contiguous:
            raise ValueError("ndarray is not contiguous")
        if writable and not arr.flags.writeable:
            raise TypeError("buffer is not writable")
        return arr.reshape(-1).view(np.uint8)

    def memcpy_htod(dest: Any, src: Any) -> None:
        fake._current("cuMemcpyHtoD")
        data = _host_bytes(src, writable=False)
        fake._check_range("cuMemcpyHtoD", int(dest), data.size)
        fake.flush()  # a pageable copy on the legacy default stream waits for the work before it
        if data.size:
            fake.host_view(int(dest), (data.size,), np.uint8)[...] = data
        fake.transfers.append(("htod", data.size))

    def memcpy_dtoh(dest: Any, src: Any) -> None:
        fake._current("cuMemcpyDtoH")
        data = _host_bytes(dest, writable=True)
        fake._check_range("cuMemcpyDtoH", int(src), data.size)
        fake.flush()
        if data.size:
            data[...] = fake.host_view(int(src), (data.size,), np.uint8)
        fake.transfers.append(("dtoh", data.size))

    def memcpy_dtod(dest: Any, src: Any, size: int) -> None:
        fake._current("cuMemcpyDtoD")
        fake._check_range("cuMemcpyDtoD", int(src), size)
        fake._check_range("cuMemcpyDtoD", int(dest), size)
        fake.flush()
        if size:
            fake.host_view(int(dest), (size,), np.uint8)[...] = fake.host_view(int(src), (size,), np.uint8)
        fake.transfers.append(("dtod", size))

    class Function:
        """``pycuda.driver.Function`` of a loaded module."""

        def __init__(self, module: "Module", entry: Entry) -> None:
            self.module, self.entry = module, entry
            self.arg_format = None
            self.texrefs: list[Any] = []

        def prepare(self, arg_types: Any, texrefs: Any = None) -> "Function":
            self.texrefs = [] if texrefs is None else texrefs
            self.arg_format = ""
            for arg_type in arg_types:  # as pycuda.driver.function_prepare
                if isinstance(arg_type, type) and np.number in arg_type.__mro__:
                    self.arg_format += np.dtype(arg_type).char
                elif isinstance(arg_type, np.dtype):
                    self.arg_format += arg_type.char
                elif isinstance(arg_type, str):
                    self.arg_format += arg_type
                else:
                    self.arg_format += np.dtype(np.uintp).char
            return self

        def prepared_call(self, grid: Any, block: Any, *args: Any, **kwargs: Any) -> None:
            if not isinstance(block, tuple):
                raise FakeCheckError("prepared_call without a block tuple is deprecated PyCUDA usage")
            if not isinstance(grid, tuple):  # launch_kernel takes a py::tuple
                raise TypeError(f"the grid must be a tuple, got {type(grid).__name__}")
            shared_size = kwargs.pop("shared_size", 0)
            if kwargs:
                raise TypeError("unknown keyword arguments: " + ", ".join(kwargs.keys()))
            if self.arg_format is None:
                raise AttributeError("'Function' object has no attribute 'arg_format' (call prepare first)")
            arg_buf = struct.pack(self.arg_format, *args)  # PyCUDA's _pvt_struct.pack: same rules
            self._launch_kernel(grid, block, arg_buf, shared_size)

        def _launch_kernel(self, grid: tuple, block: tuple, arg_buf: bytes, shared_size: int) -> None:
            symbol = self.entry.name
            for what, dims in (("grid", grid), ("block", block)):
                if len(dims) > 3:
                    raise LogicError(f"function::launch_kernel failed: invalid resource handle - too many {what} dimensions in kernel launch")
                for d in dims:
                    if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
                        raise TypeError(f"{what} dimensions must be integers, got {d!r}")
                    if not 0 <= int(d) < 2**32:
                        raise OverflowError(f"{what} dimension {d} does not fit an unsigned int")
            g = tuple(int(d) for d in grid) + (1,) * (3 - len(grid))
            b = tuple(int(d) for d in block) + (1,) * (3 - len(block))
            current = fake._current("cuLaunchKernel")
            if current != self.module.context:
                raise LogicError("cuLaunchKernel failed: invalid resource handle")
            limits_ok = (
                all(d >= 1 for d in g + b)
                and g[0] <= 2**31 - 1 and g[1] <= 65535 and g[2] <= 65535
                and b[0] <= 1024 and b[1] <= 1024 and b[2] <= 64 and math.prod(b) <= 1024
            )
            if not limits_ok:
                raise LogicError("cuLaunchKernel failed: invalid argument")
            if len(arg_buf) != 8 * len(self.entry.params):
                raise LogicError(
                    f"cuLaunchKernel failed: invalid argument (fake: {len(arg_buf)} bytes of parameters for "
                    f"{symbol}, whose PTX entry takes {len(self.entry.params)} of 8 bytes)"
                )
            kinds = "".join(self.arg_format.lstrip("@=<>!"))
            if kinds != "".join(self.entry.params):
                raise FakeCheckError(f"{symbol} prepared as '{self.arg_format}' but its PTX parameters are '{''.join(self.entry.params)}'")
            if g[1:] != (1, 1) or b[1:] != (1, 1):
                raise FakeCheckError(f"{symbol}: tcc's grid kernels index only x, launched with grid {g} block {b}")
            values = struct.unpack(self.arg_format, arg_buf)
            self.module.enqueue(symbol, values, g[0], b[0])
            fake.launches.append(Launch(symbol, grid, block))

    class Module:
        """A loaded PTX module, running as its cuda-sim twin."""

        def __init__(self, entries: dict[str, Entry], sim: Any, context: Context) -> None:
            self.entries, self.sim, self.context = entries, sim, context
            self.kernels = {k.symbol: k for k in sim.executable.kernels}

        def get_function(self, name: str) -> Function:
            fake._current("cuModuleGetFunction")
            if name not in self.entries:
                raise LogicError("cuModuleGetFunction failed: named symbol not found")
            return Function(self, self.entries[name])

        def enqueue(self, symbol: str, values: tuple, blocks: int, threads: int) -> None:
            loops = self.sim.loops
            nbuf = len(loops.buffers)
            pointers, sizes = [int(v) for v in values[:nbuf]], [int(v) for v in values[nbuf:]]
            size_of = dict(zip(loops.sizes, sizes))
            itemsize = np.dtype(self.sim.dtype).itemsize
            regions = []
            for b, ptr in zip(loops.buffers, pointers):
                shape = extents_shape(b.shape, size_of)
                if any(s < 0 for s in shape):
                    raise FakeCheckError(f"{symbol}: buffer '{b.name}' has a negative extent {shape} for sizes {size_of}")
                nbytes = math.prod(shape) * itemsize
                if nbytes and fake.find(ptr, nbytes) is None:
                    raise FakeCheckError(
                        f"{symbol}: buffer '{b.name}' ({nbytes} bytes at {ptr:#x}) is not inside live device memory"
                    )
                regions.append((b.name, ptr, nbytes))
            for b, (name, ptr, nbytes) in zip(loops.buffers, regions):
                if b.role == "input" or not nbytes:
                    continue
                for other, optr, onbytes in regions:
                    if other != name and onbytes and ptr < optr + onbytes and optr < ptr + nbytes:
                        raise FakeCheckError(f"{symbol}: written buffer '{name}' overlaps buffer '{other}'")
            with fake._lock:
                fake.pending.append(_QueuedLaunch(fake, symbol, self.kernels[symbol], blocks, threads,
                                                  pointers, sizes, regions))

    def module_from_buffer(buffer: Any, options: Any = (), message_handler: Any = None) -> Module:
        context = fake._current("cuModuleLoadDataEx")
        data = bytes(memoryview(buffer))  # PyObject_AsCharBuffer: a str is refused
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise LogicError("cuModuleLoadDataEx failed: device kernel image is invalid") from None
        version, target = _VERSION.search(text), _TARGET.search(text)
        if version is None or target is None or ".address_size 64" not in text:
            raise LogicError("cuModuleLoadDataEx failed: device kernel image is invalid")
        ptx_version = int(version.group(1)) * 10 + int(version.group(2))
        if ptx_version > fake.max_ptx:
            raise LogicError(
                "cuModuleLoadDataEx failed: the provided PTX was compiled with an unsupported toolchain. - "
                f"ptxas application ptx input: fatal : Unsupported .version {version.group(1)}.{version.group(2)}"
            )
        arch = int(target.group(1))
        if arch > fake.compute_capability[0] * 10 + fake.compute_capability[1]:
            raise LogicError(
                f"cuModuleLoadDataEx failed: a PTX JIT compilation failed - ptxas application ptx input: "
                f"fatal : Unsupported .target 'sm_{target.group(1)}{target.group(2)}'"
            )
        entries: dict[str, Entry] = {}
        for m in _ENTRY.finditer(text):
            params = []
            for kind, ptr in _PARAM.findall(m.group(2)):
                params.append("P" if kind == ".u64" and ptr.strip() == ".ptr" else "q" if kind in (".u64", ".s64") else kind)
            entries[m.group(1)] = Entry(m.group(1), tuple(params))
        if fake._announced is None:
            raise FakeCheckError("fake_pycuda: a PTX module was loaded for no announced program; compile with fake.compile(...)")
        program, dtype, passes = fake._announced
        sim = sim_program(program, dtype, passes)
        symbols = tuple(sim.llvm.kernel_symbols)
        if sorted(entries) != sorted(symbols):
            raise FakeCheckError(f"the PTX has entries {sorted(entries)}, the program's kernels are {sorted(symbols)}")
        want = ("P",) * len(sim.loops.buffers) + ("q",) * len(sim.loops.sizes)
        for entry in entries.values():
            if entry.params != want:
                raise FakeCheckError(f"PTX entry {entry.name} takes {entry.params}, the grid ABI says {want}")
        fake.modules_loaded += 1
        return Module(entries, sim, context)

    for value in (init, device_attribute, Context, Device, DeviceAllocation, mem_alloc, memcpy_htod, memcpy_dtoh,
                  memcpy_dtod, Function, Module, module_from_buffer):
        setattr(drv, value.__name__, value)

    # -- pycuda.gpuarray --------------------------------------------------------
    ga = types.ModuleType("pycuda.gpuarray")
    ga.__file__ = __file__

    class ArrayFlags:
        def __init__(self, ary: Any) -> None:
            size = math.prod(ary.shape)
            self.f_contiguous = _equal_strides(ary.strides, _f_strides(ary.dtype.itemsize, ary.shape), ary.shape) or size == 0
            self.c_contiguous = _equal_strides(ary.strides, _c_strides(ary.dtype.itemsize, ary.shape), ary.shape) or size == 0
            self.forc = self.f_contiguous or self.c_contiguous

    class GPUArray:
        """``pycuda.gpuarray.GPUArray`` (the constructor, views, copies and the CUDA array interface)."""

        __array_priority__ = 100

        def __init__(self, shape: Any, dtype: Any, allocator: Any = None, base: Any = None, gpudata: Any = None,
                     strides: Any = None, order: str = "C") -> None:
            dtype = np.dtype(dtype)
            try:
                s = 1
                for dim in shape:
                    s *= dim
            except TypeError:
                if isinstance(shape, np.ndarray):
                    shape = shape.item()
                assert isinstance(shape, (int, np.integer))
                s = shape
                shape = (shape,)
            else:
                shape = tuple(shape)
            shape = tuple(int(v) for v in shape)
            if strides is None:
                strides = _f_strides(dtype.itemsize, shape) if order == "F" else _c_strides(dtype.itemsize, shape)
            strides = tuple(int(v) for v in strides)
            self.shape, self.dtype, self.strides = shape, dtype, strides
            self.mem_size = self.size = int(s)
            self.nbytes = dtype.itemsize * self.size
            self.itemsize = dtype.itemsize
            self.allocator = mem_alloc if allocator is None else allocator
            if gpudata is None:
                self.gpudata = self.allocator(self.size * dtype.itemsize) if self.size else None
                assert base is None
            else:
                self.gpudata = gpudata
            self.base = base
            Context.get_device()  # PyCUDA's splay() asks the current context's device

        @property
        def __cuda_array_interface__(self) -> dict:
            ptr = int(self.gpudata) if self.gpudata is not None else 0
            return {"shape": self.shape, "strides": self.strides, "data": (ptr, False), "typestr": self.dtype.str,
                    "stream": None, "version": 3}

        @property
        def ndim(self) -> int:
            return len(self.shape)

        @property
        def flags(self) -> ArrayFlags:
            return ArrayFlags(self)

        @property
        def ptr(self) -> int:
            return int(self.gpudata)

        def __len__(self) -> int:
            if not self.shape:
                raise TypeError("len() of unsized object")
            return self.shape[0]

        def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
            raise FakeCheckError("a GPUArray is device memory: NumPy cannot read it (use .get())")

        def __bool__(self) -> bool:
            raise FakeCheckError("the truth value of a GPUArray needs a device-to-host copy")

        def set(self, ary: np.ndarray) -> None:
            if ary.size != self.size:
                raise ValueError("ary and self must be the same size")
            if ary.shape != self.shape:
                ary = ary.reshape(self.shape)
            if ary.dtype != self.dtype:
                raise ValueError("ary and self must have the same dtype")
            if self.size:
                _copy(self, ary)

        def get(self, ary: Any = None, pagelocked: bool = False, async_: bool = False, stream: Any = None) -> np.ndarray:
            if ary is None:
                ary = np.empty(self.shape, self.dtype)
            else:
                if self.size != ary.size:
                    raise ValueError("self and ary must be the same size")
                if self.shape != ary.shape:
                    ary = ary.reshape(self.shape)
                if self.dtype != ary.dtype:
                    raise TypeError("self and ary must have the same dtype")
            if self.size:
                _copy(ary, self)
            return ary

        def transpose(self, axes: Any = None) -> "GPUArray":
            axes = range(self.ndim - 1, -1, -1) if axes is None else axes
            axes = list(axes)
            return GPUArray(tuple(self.shape[a] for a in axes), self.dtype, self.allocator,
                            base=self if self.base is None else self.base, gpudata=self.gpudata,
                            strides=tuple(self.strides[a] for a in axes))

        @property
        def T(self) -> "GPUArray":  # noqa: N802 - PyCUDA's name
            return self.transpose()

        def __getitem__(self, index: Any) -> "GPUArray":
            if not isinstance(index, tuple):
                index = (index,)
            new_shape, new_strides, offset, axis = [], [], 0, 0
            for entry in index:
                if isinstance(entry, slice):
                    start, stop, step = entry.indices(self.shape[axis])
                    new_shape.append(max(0, (abs(stop - start) - 1) // abs(step) + 1) if (stop - start) * step > 0 else 0)
                    new_strides.append(step * self.strides[axis])
                    offset += self.strides[axis] * start
                    axis += 1
                elif isinstance(entry, (int, np.integer)):
                    i = int(entry) + (self.shape[axis] if entry < 0 else 0)
                    if not 0 <= i < self.shape[axis]:
                        raise IndexError(f"subindex in axis {axis} out of range")
                    offset += self.strides[axis] * i
                    axis += 1
                elif entry is None:
                    new_shape.append(1)
                    new_strides.append(0)
                else:
                    raise IndexError(f"invalid subindex in axis {axis}")
            new_shape += self.shape[axis:]
            new_strides += self.strides[axis:]
            return GPUArray(tuple(new_shape), self.dtype, self.allocator, base=self,
                            gpudata=int(self.gpudata) + offset, strides=tuple(new_strides))

    def _copy(dst: Any, src: Any) -> None:
        """``_memcpy_discontig`` for what tcc needs: contiguous copies are one memcpy, others go element-wise."""
        if src.flags.forc and dst.flags.forc and src.strides == dst.strides or src.size <= 1:
            if isinstance(src, GPUArray) and isinstance(dst, GPUArray):
                memcpy_dtod(dst.gpudata, src.gpudata, src.nbytes)
            elif isinstance(src, GPUArray):
                memcpy_dtoh(np.lib.stride_tricks.as_strided(dst, (dst.size,), (dst.dtype.itemsize,)), src.gpudata)
            else:
                memcpy_htod(dst.gpudata, np.lib.stride_tricks.as_strided(src, (src.size,), (src.dtype.itemsize,)))
            return
        fake._current("cuMemcpy2D")
        fake.flush()
        s = fake.host_view(int(src.gpudata), src.shape, src.dtype, src.strides) if isinstance(src, GPUArray) else src
        d = fake.host_view(int(dst.gpudata), dst.shape, dst.dtype, dst.strides) if isinstance(dst, GPUArray) else dst
        d[...] = s
        fake.transfers.append(("dtoh" if isinstance(src, GPUArray) else "htod", src.nbytes))

    def to_gpu(ary: np.ndarray, allocator: Any = None) -> GPUArray:
        info = sorted((ary.strides[a], ary.shape[a], a) for a in range(ary.ndim))  # _compact_strides
        strides, stride = [0] * ary.ndim, ary.dtype.itemsize
        for _, dim, a in info:
            strides[a] = stride
            stride *= dim
        result = GPUArray(ary.shape, ary.dtype, allocator, strides=strides)
        result.set(ary)
        return result

    def zeros(shape: Any, dtype: Any = np.float64, allocator: Any = None, order: str = "C") -> GPUArray:
        result = GPUArray(shape, dtype, allocator, order=order)
        if result.size:
            fake.flush()
            fake.host_view(int(result.gpudata), (result.nbytes,), np.uint8)[...] = 0
        return result

    ga.GPUArray, ga.empty, ga.to_gpu, ga.zeros = GPUArray, GPUArray, to_gpu, zeros

    package = types.ModuleType("pycuda")
    package.__path__ = []  # a package
    package.__file__ = __file__
    package.driver, package.gpuarray = drv, ga
    return drv, ga, package


# ---------------------------------------------------------------------------
# Other libraries' device arrays
# ---------------------------------------------------------------------------


class CAIArray:
    """A device array of some other library: nothing but ``__cuda_array_interface__`` (version 3).

    Its memory is fake device memory (allocated without PyCUDA, as another
    library would).  ``strides`` (bytes) default to None, which the interface
    defines as C-contiguous; ``readonly`` is the flag of ``data``.
    """

    def __init__(self, fake: FakeCUDA, host: np.ndarray, *, strides: Any = None, readonly: bool = False,
                 shape: Any = None, offset: int = 0, nbytes: int | None = None) -> None:
        host = np.asarray(host)
        self.fake = fake
        self.dtype = host.dtype
        self.shape = tuple(host.shape) if shape is None else tuple(shape)
        self.strides = None if strides is None else tuple(strides)
        self.readonly = readonly
        self._memory = fake._allocate(max(1, host.nbytes if nbytes is None else nbytes))
        if host.nbytes:
            self._memory.buffer[:host.nbytes] = np.ascontiguousarray(host).view(np.uint8).reshape(-1)
        self.ptr = self._memory.address + offset if math.prod(self.shape) else 0

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, self.readonly),
                "strides": self.strides, "version": 3, "stream": None}

    def copy_to_host(self) -> np.ndarray:
        """The library's own device-to-host copy (not one of tcc's)."""
        self.fake.flush()
        return self.fake.host_view(self.ptr, self.shape, self.dtype, self.strides).copy()

    def __del__(self) -> None:
        memory = getattr(self, "_memory", None)
        if memory is not None:
            memory.free()


class _FakeDevice:
    def __init__(self, index: int) -> None:
        self.index = self.id = index
        self.type = "cuda"


def _build_torch(fake: FakeCUDA) -> types.ModuleType:
    """A stand-in for ``torch``: a CUDA ``Tensor`` with ``__cuda_array_interface__`` and ``torch.empty``."""
    torch = types.ModuleType("torch")
    torch.float64, torch.float32 = np.dtype("float64"), np.dtype("float32")

    class Tensor(CAIArray):
        def __init__(self, host: np.ndarray, device: Any = None, **kwargs: Any) -> None:
            super().__init__(fake, host, **kwargs)
            self.device = device or _FakeDevice(0)

        @property
        def __cuda_array_interface__(self) -> dict:  # PyTorch: version 2, strides None when contiguous
            return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                    "strides": self.strides, "version": 2}

    Tensor.__module__ = "torch"
    Tensor.__qualname__ = Tensor.__name__ = "Tensor"

    def empty(shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
        assert device is not None and device.type == "cuda", "tcc must ask for the tensor on the argument's device"
        return Tensor(np.zeros(shape, np.dtype(dtype or "float32")), device=device)

    def tensor(data: Any, device: Any = None) -> Tensor:
        return Tensor(np.asarray(data), device=device)

    torch.Tensor, torch.empty, torch.tensor = Tensor, empty, tensor
    torch.device = _FakeDevice
    return torch


def _build_cupy(fake: FakeCUDA) -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace()
    current = threading.local()

    class ndarray(CAIArray):  # noqa: N801 - CuPy's name
        def __init__(self, host: np.ndarray, **kwargs: Any) -> None:
            super().__init__(fake, host, **kwargs)
            self.device = _FakeDevice(getattr(current, "device", 0))

    ndarray.__module__ = "cupy"

    class Device:
        def __init__(self, index: int = 0) -> None:
            self.id = index

        def __enter__(self) -> "Device":
            self.previous = getattr(current, "device", 0)
            current.device = self.id
            return self

        def __exit__(self, *exc: Any) -> None:
            current.device = self.previous

    def empty(shape: Any, dtype: Any = float) -> ndarray:
        return ndarray(np.zeros(shape, dtype))

    def asarray(data: Any) -> ndarray:
        return ndarray(np.asarray(data))

    cupy.ndarray, cupy.empty, cupy.asarray = ndarray, empty, asarray
    cupy.cuda.Device = Device
    return cupy
