"""CPU backend: LLVM's new pass manager at O3 with loop and SLP vectorization, then MCJIT.

The code is compiled for the host CPU (its name and feature flags), so it
uses whatever vector width the machine has, and is not portable to another
machine -- it leaves the process only as object code in the on-disk compile
cache (:mod:`tcc.build.disk_cache`: :func:`jit_with_object` hands MCJIT's object
file over, :func:`load_object` links it into a fresh engine), whose key
includes the host CPU's name and features.  Math functions that are not LLVM
intrinsics (``tan``, ``asinf``, ...) are resolved by MCJIT from the process,
which has libm loaded; :func:`_ensure_libm` loads it explicitly where it is
not.

The compiled kernels are pure functions of their arguments (no globals, no
allocation), so they may be called from several threads at once; ctypes
releases the GIL for the call.  Calls that write the same buffer elements
concurrently are the caller's business: only the chunks of a kernel's
parallel loop are guaranteed disjoint.

Errors from LLVM here (a module that fails to verify, a symbol that cannot be
resolved) are compiler bugs, so they are ``RuntimeError``, not ``TccError``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import llvmlite.binding as llvm

from tcc.ir.loops import For, Kernel, LoopProgram, children
from tcc.ir.index import lookups

from . import thread_team
from .array_address import data_addresses
from .target import Invocation, Executable
from .zero_fill import zero_fills

from .llvm.machines import host_data_layout, host_target_machine, host_triple, initialize_host, new_host_target_machine
from .llvm.module import LLVMModule, run_default_pipeline

#: the host target machine (defined with the other target machines in :mod:`tcc.backends.llvm.machines`)
target_machine = host_target_machine

__all__ = [
    "CpuExecutable",
    "KernelEntry",
    "split_kernel",
    "KERNEL_SIGNATURE",
    "emit_assembly",
    "host_data_layout",
    "host_triple",
    "jit",
    "jit_with_object",
    "load_object",
    "optimize",
    "target_machine",
]

#: ``void (ptr bufs, ptr sizes, i64 part, i64 nparts)`` as ctypes sees it.
KERNEL_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

#: Parallel kernels with fewer loop iterations than this (an estimate, see
#: :func:`iterations`) run on the calling thread alone: handing parts to the
#: pool and waiting for them costs some 15-40 us on this class of machine,
#: as much as ~30 000 simple iterations.  The environment variable
#: ``TCC_PARALLEL_GRAIN`` sets it at import (0: split every parallel kernel,
#: as the test suite does so that small test programs exercise the pool);
#: the module attribute may be changed at run time.
PARALLEL_GRAIN = int(os.environ.get("TCC_PARALLEL_GRAIN", "32768"))


def iterations(body: tuple[Any, ...], env: dict[str, int]) -> int:
    """How many innermost iterations ``body`` runs, estimated from its loop bounds at these sizes.

    A loop whose bounds read an index input (``for k in ptr[i]..ptr[i + 1] - 1``) is
    counted as one trip: its length is data, unknown here.

    A loop's trip count is evaluated with the loops around it at their
    first iteration (exact for rectangular nests, an estimate for
    triangular ones); a statement that is not a loop counts one.  It is the
    runtime's measure of whether a parallel kernel is worth splitting.
    """
    total = 0
    for s in body:
        if isinstance(s, For) and any(lookups(a) for a in s.lo + s.hi):  # data-dependent (a CSR row): its body once
            total += max(1, iterations(s.body, {**env, s.var: 0}))
        elif isinstance(s, For):
            lo = max(int(a.evaluate(env)) for a in s.lo)
            n = min(int(a.evaluate(env)) for a in s.hi) - lo + 1
            if n > 0:
                total += n * max(1, iterations(s.body, {**env, s.var: lo}))
        else:
            total += max(1, iterations(children(s), env))
    return total


# LLVM's pass builder and target machine are not documented as thread-safe;
# compiling is rare and short next to running, so one lock serialises it.
_LOCK = threading.RLock()


def _parse(llvm_module: LLVMModule) -> llvm.ModuleRef:
    initialize_host()
    return llvm_module.parse()


def optimize(llvm_module: LLVMModule, level: int = 3) -> LLVMModule:
    """LLVM's standard ``O<level>`` pipeline with loop and SLP vectorization; returns the optimized IR text."""
    if not 0 <= level <= 3:
        raise ValueError(f"LLVM optimisation level must be 0..3, not {level}")
    with _LOCK:
        mod = _parse(llvm_module)
        run_default_pipeline(mod, target_machine(), level, vectorize=level >= 2)
        try:
            mod.verify()
        except RuntimeError as exc:  # pragma: no cover - LLVM's own bug
            raise RuntimeError(f"LLVM's optimizer produced invalid IR: {exc}") from None
        text = str(mod)
    return replace(llvm_module, module=text)


def emit_assembly(llvm_module: LLVMModule) -> str:
    """Host assembly of the module as it is (optimize it first for the real thing)."""
    with _LOCK:
        return target_machine().emit_assembly(_parse(llvm_module))


@functools.lru_cache(maxsize=None)
def _ensure_libm() -> None:
    if llvm.address_of_symbol("tan") and llvm.address_of_symbol("tanf"):
        return
    path = ctypes.util.find_library("m")
    if path is None:  # pragma: no cover - every supported platform has libm
        raise RuntimeError("cannot find libm for the math functions of compiled kernels")
    llvm.load_library_permanently(path)


#: parts per thread of a parallel kernel on the thread team (the Python pool gets one per thread)
TEAM_PARTS_PER_THREAD = 4


def split_kernel(entry: "KernelEntry", ptrs: Any, sizes: Any, threads: int, fallback: Any) -> None:
    """Run a parallel kernel on ``threads`` threads: on the native thread team where there is one and no
    other thread's kernel holds it (:mod:`tcc.backends.thread_team`), else with ``fallback``, the
    runtime's Python pool (:func:`tcc.runtime.compiled.run_parallel`).  Either way every part has finished on return.

    On the team the loop is cut into :data:`TEAM_PARTS_PER_THREAD` parts per thread, claimed one at a
    time: a worker that wakes late (a halted vCPU takes up to a millisecond here) then leaves its
    share to the threads already running instead of doubling the kernel's time, which one part per
    thread did in whole runs of the benchmark (attention's softmax 0.6 or 1.3 ms by run).  The parts
    are contiguous chunks of the parallel loop and compute the same bits however many there are."""
    team = thread_team.team()
    if team is None or not entry.address or not team.run(entry.address, ctypes.addressof(ptrs),
                                                         ctypes.addressof(sizes), TEAM_PARTS_PER_THREAD * threads,
                                                         threads):
        fallback(entry.fn, ptrs, sizes, threads)


@dataclass(frozen=True)
class KernelEntry:
    """One compiled kernel: ``fn(bufs, sizes, part, nparts)``; ``parallel`` if it may be split.

    An external kernel (``extern inv(A) -> B``) has no code: ``fn`` is None,
    ``symbol`` empty and ``extern`` the statement the runtime runs itself.
    """

    name: str
    symbol: str
    fn: Any
    parallel: bool
    extern: Any = None
    kernel: Kernel | None = None
    #: the code's address, for the native thread team (:mod:`tcc.backends.thread_team`); 0 for an extern
    address: int = 0
    _iterations: dict[tuple[int, ...], int] = field(default_factory=dict, compare=False, repr=False)

    def worth_splitting(self, sizes: tuple[int, ...], names: tuple[str, ...]) -> bool:
        """Whether this call's sizes give the kernel at least :data:`PARALLEL_GRAIN` iterations (counted once per sizes)."""
        if PARALLEL_GRAIN <= 0 or self.kernel is None:
            return True
        count = self._iterations.get(sizes)
        if count is None:
            count = iterations(self.kernel.body, dict(zip(names, sizes)))
            if len(self._iterations) < 64:  # a program called with ever new sizes must not grow without bound
                self._iterations[sizes] = count
        return count >= PARALLEL_GRAIN


@dataclass(frozen=True, eq=False)
class CpuExecutable(Executable):
    """Native kernels in kernel order.  Keeps the MCJIT engine (and so the code) alive.

    Called with NumPy arrays (:class:`~tcc.backends.target.Executable`'s
    defaults): every kernel gets the array of buffer pointers and the array
    of sizes; a parallel kernel is split into ``threads`` parts on the
    runtime's pool, any other one runs as part 0 of 1.
    """

    kernels: tuple[KernelEntry, ...]
    program: LoopProgram
    dtype: str
    engine: Any
    llvm_module: LLVMModule
    #: kernel -> the result it only sets to zero (tcc.backends.zero_fill): skipped when the runtime
    #: allocated that result itself, zeroed (:attr:`zeroed_buffers`)
    zero_fills: dict[str, str] = field(default_factory=dict)

    @functools.cached_property  # read for every buffer of every call: made once
    def zeroed_buffers(self) -> frozenset[str]:
        """Results the runtime allocates with ``np.zeros`` when the caller does not pass them."""
        return frozenset(self.zero_fills.values())

    def arguments(self, call: Invocation) -> tuple[Any, Any]:
        """The ctypes arrays of buffer pointers and sizes every kernel takes (in the program's order)."""
        order = self.program.buffers
        ptrs = (ctypes.c_void_p * max(1, len(order)))(*data_addresses(call.buffers[b.name] for b in order))
        sizes = (ctypes.c_int64 * max(1, len(self.program.sizes)))(*[call.sizes[s] for s in self.program.sizes])
        return ptrs, sizes

    def run(self, call: Invocation) -> dict[str, Any]:
        ptrs, size_vals = self.arguments(call)
        threads = call.threads
        names = self.program.sizes
        sizes = tuple(call.sizes[n] for n in names)
        for k in self.kernels:
            fill = self.zero_fills.get(k.name)
            if fill is not None and fill not in call.arrays:  # allocated zeroed: nothing to do
                continue
            if k.extern is not None:
                thread_team.park()  # BLAS's threads get the cores the team's idle workers spin on
                call.run_extern(k.extern, call.buffers)
            elif k.parallel and threads > 1 and k.worth_splitting(sizes, names):
                split_kernel(k, ptrs, size_vals, threads, call.run_parallel)
            else:
                k.fn(ptrs, size_vals, 0, 1)
        # the arrays stay referenced by `call.buffers` until every kernel has run
        return {n: call.buffers[n] for n in call.results}


def jit(llvm_module: LLVMModule) -> CpuExecutable:
    """Compile the module to host code with MCJIT (optimize it first: this only runs codegen)."""
    return _jit(llvm_module, capture=False)[0]


def jit_with_object(llvm_module: LLVMModule) -> tuple[CpuExecutable, bytes]:
    """:func:`jit`, and the object code MCJIT produced (what :func:`load_object` loads in another process).

    The bytes are MCJIT's own, taken from its object-cache notification, so
    a process that loads them runs exactly the code this one runs.
    """
    executable, code = _jit(llvm_module, capture=True)
    if not code:  # pragma: no cover - MCJIT always notifies the object of a module it compiles
        raise RuntimeError("MCJIT reported no object code for the module (a compiler bug)")
    return executable, code


def load_object(llvm_module: LLVMModule, object_code: bytes) -> CpuExecutable:
    """Host code from :func:`jit_with_object`'s object code: no LLVM optimisation or codegen, only linking.

    ``llvm_module`` is the optimised module the code was compiled from (its
    L2 program and kernel symbols); it is not parsed.  A symbol the object
    lacks raises ``RuntimeError`` (a cache entry that does not match).  The
    bytes are validated first (:func:`tcc.backends.objcheck.check_object`,
    ``ObjectFileError``, a ``ValueError``): LLVM's object parser and
    RuntimeDyld crash the process on a malformed file instead of raising.
    """
    from tcc.backends.objcheck import check_object

    _check_host_module(llvm_module)
    check_object(object_code)
    _ensure_libm()
    with _LOCK:
        initialize_host()
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_host_target_machine())
        engine.add_object_file(llvm.ObjectFileRef.from_data(bytes(object_code)))
        engine.finalize_object()
        engine.run_static_constructors()
        return _executable(llvm_module, engine)


def _check_host_module(llvm_module: LLVMModule) -> None:
    if llvm_module.target not in ("cpu", "cuda-sim"):
        raise ValueError(f"the CPU backend cannot run a module for target '{llvm_module.target}'")


def _jit(llvm_module: LLVMModule, capture: bool) -> tuple[CpuExecutable, bytes]:
    """MCJIT's code for the module; with ``capture``, the object file too (else ``b""``)."""
    _check_host_module(llvm_module)
    _ensure_libm()
    objects: list[bytes] = []
    with _LOCK:
        mod = _parse(llvm_module)
        engine = llvm.create_mcjit_compiler(mod, new_host_target_machine())
        if capture:
            engine.set_object_cache(lambda _module, buffer: objects.append(bytes(buffer)), lambda _module: None)
        engine.finalize_object()
        engine.run_static_constructors()
        code = b"".join(objects)
        objects.clear()  # the engine keeps the callback (and so the list) alive: not the bytes as well
        return _executable(llvm_module, engine), code


def _executable(llvm_module: LLVMModule, engine: Any) -> CpuExecutable:
    """The kernels of a finalized engine, by the module's kernel symbols (``_LOCK`` held)."""
    entries = []
    for kernel, symbol in zip(llvm_module.program.kernels, llvm_module.kernel_symbols):
        if kernel.extern is not None:
            entries.append(KernelEntry(kernel.name, "", None, False, kernel.extern))
            continue
        address = engine.get_function_address(symbol)
        if not address:
            raise RuntimeError(f"MCJIT has no code for kernel symbol '{symbol}' (a compiler bug)")
        entries.append(KernelEntry(kernel.name, symbol, KERNEL_SIGNATURE(address), kernel.parallel_loop is not None,
                                   kernel=kernel, address=address))
    return CpuExecutable(tuple(entries), llvm_module.program, llvm_module.dtype, engine, llvm_module,
                         zero_fills(llvm_module.program))
