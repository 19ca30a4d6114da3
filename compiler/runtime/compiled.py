"""Compiled programs: the object ``tcc.compile`` returns, and how it is called.

    f = tcc.compile("examples/urban.tcc")             # target="cpu", float64
    out = f(a=a, b=b, c=c, d=d)                        # {"f": array}
    f(a=a, b=b, c=c, d=d, f=buffer)                    # write into a given array

The call is where a compiled kernel meets user data, and compiled code has no
bounds checks (``infer-ranges`` proved every access in bounds *for arrays of
the declared shapes*), so everything is checked here before any kernel runs:
missing or unknown names, shapes against the declarations (sizes bind from
them), the dtype (never converted silently: a float32 kernel fed float64 data
would either copy on every call or compute in the wrong precision),
C-contiguity, writeability and aliasing of given output arrays.  Each mistake
raises :class:`CallError` naming the tensor.

Parallel kernels (an outermost ``parallel for``) are split into ``threads``
parts, run by the calling thread and a process-wide pool (:func:`run_parallel`):
ctypes releases the GIL for the duration of a foreign call, so the parts run
truly in parallel.  Kernels run in order; a kernel starts when every part of
the previous one has finished.  An interrupted call (Ctrl-C) cancels the parts
not started and waits for the running ones before it raises: they write into
the call's buffers.

External kernels (``extern inv(A) -> B``: a matrix function;
``extern matmul(A, B) -> C``: a matrix product) have no code;
:func:`tcc.runtime.externs.dispatch.run_extern` computes them with LAPACK or BLAS through NumPy
(:func:`tcc.runtime.externs.matrix_functions.matrix_function`, the code the interpreter uses too, and
``np.matmul(A, B, out=C)``) on the bound arrays, in kernel order, writing the
result into the output array in place.  They run on the calling thread (NumPy's BLAS may use its own
threads), after every part of the previous kernel has finished.

What is specific to a target -- device arrays, where buffers live, how
kernels are launched -- is its executable's (:class:`tcc.backends.target.Executable`,
made by the target's ``load``): this module checks and binds a call's
arguments and hands the executable a :class:`~tcc.backends.target.Invocation`
with what host code borrows from it (external kernels, the thread pool).
This module imports no backend: ``import tcc.runtime.compiled`` loads no llvmlite.
"""
from __future__ import annotations

import functools
import os
import queue
import signal
import threading
from typing import Any, Mapping

import numpy as np

from tcc.backends.target import COMPLEX_HINT, DTYPES, Invocation, CallError, Executable
from tcc.runtime.externs.dispatch import blas_limit, run_extern
from tcc.runtime.foreign_arrays import ARRAY_OBJECTS, OUTPUT_OBJECTS, host_array, host_output, off_host
from tcc.ir.diagnostics import TccError
from tcc.index_inputs import IndexCache
from tcc.runtime.result_pool import ResultPool
from tcc.runtime.scratch_pool import ScratchPool, reuse
from tcc.sizes import bind_sizes, check_allocations, extents_shape, format_decl

__all__ = [
    "CallError", "CompiledProgram", "MAX_THREADS", "check_threads", "default_threads", "pool_size", "run_parallel",
]

#: The most threads a program runs on.  Threads beyond the cores only add
#: switching, but oversubscribing a few times over is legitimate (testing the
#: parallel path on a laptop); starting 10^5 threads takes minutes and then
#: fails in ``threading``, so far larger counts are refused up front.
MAX_THREADS = 1024


def check_threads(value: Any, what: str = "threads") -> int:
    """``value`` when it is a usable thread count; else a ValueError saying why."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    if value > MAX_THREADS:
        raise ValueError(f"{what}={value} is more than tcc runs: at most {MAX_THREADS} threads "
                         f"(this process may use {default_threads()} cores)")
    return int(value)


def default_threads() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


class _Batch:
    """The parts of one parallel kernel call, claimed one at a time by the pool's workers and the caller.

    A part runs only after it has been claimed under ``cond``, and a worker
    counts it finished in a ``finally``, so ``w_claimed - w_done`` is exactly
    the number of parts running on pool threads.  The caller counts nothing
    for its own parts: when it handles an exception it is not running one.
    That is what lets an interrupted call wait for precisely the parts that
    still write into its buffers.
    """

    def __init__(self, fn: Any, args: tuple[Any, ...], nparts: int) -> None:
        self.fn = fn
        self.args = args  # the ctypes pointer and size arrays: alive while a part may read them
        self.nparts = nparts
        self.cond = threading.Condition(threading.Lock())
        self.next = 0
        self.cancelled = False
        self.w_claimed = 0
        self.w_done = 0
        self.error: BaseException | None = None

    def claim(self, worker: bool) -> int | None:
        with self.cond:
            if self.cancelled or self.next >= self.nparts:
                return None
            part = self.next
            self.next += 1
            if worker:
                self.w_claimed += 1
            return part

    def work(self) -> None:
        """A pool worker's share: parts until none is left (or the call was cancelled)."""
        while (part := self.claim(worker=True)) is not None:
            try:
                self.fn(*self.args, part, self.nparts)
            except BaseException as exc:  # reported to the caller, which re-raises it
                with self.cond:
                    if self.error is None:
                        self.error = exc
                    self.cancelled = True
            finally:
                with self.cond:
                    self.w_done += 1
                    if self.w_done == self.w_claimed:
                        self.cond.notify_all()

    def cancel_and_drain(self) -> None:
        """Stop handing out parts and wait until no worker runs one, whatever interrupts the wait.

        A kernel running on a pool thread cannot be stopped, and it writes
        into the call's buffers, so returning (and letting them be freed)
        before it ends would let it write into freed memory.  A second Ctrl-C
        (or any exception a signal handler raises) does not cut the wait
        short: the exception that interrupted the call is re-raised after it.
        """
        while True:
            try:
                with self.cond:
                    self.cancelled = True
                    while self.w_done != self.w_claimed:
                        self.cond.wait()
                return
            except BaseException:  # noqa: BLE001 - see the docstring
                continue


class _Pool:
    """The process-wide worker threads of parallel kernels.

    One set of daemon threads serves every ``threads`` value: it grows to the
    largest ``threads - 1`` any call asks for (the calling thread runs parts
    too) and never shrinks, so trying many thread counts does not pile up
    threads.  Workers take batches from one queue; a batch whose parts are
    all claimed by the time a worker gets to it costs that worker nothing,
    so several calls (from several Python threads) can share the pool and
    each makes progress on its own thread whatever the workers are doing.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: queue.SimpleQueue[_Batch] = queue.SimpleQueue()
        self.workers: list[threading.Thread] = []

    def _worker(self) -> None:
        while True:
            self.queue.get().work()

    def ensure(self, workers: int) -> None:
        with self.lock:
            while len(self.workers) < workers:
                t = threading.Thread(target=self._worker, name=f"tcc-{len(self.workers)}", daemon=True)
                t.start()
                self.workers.append(t)

    def size(self) -> int:
        return len(self.workers)


_POOL = _Pool()


def _reset_pool_after_fork() -> None:
    """A forked child has only the thread that forked: the parent's workers (and any lock
    or queue state they held) do not exist there, so the child starts with an empty pool."""
    global _POOL
    _POOL = _Pool()


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_reset_pool_after_fork)


def pool_size() -> int:
    """How many worker threads the process-wide pool has started (it never stops them)."""
    return _POOL.size()


_ACTIVE = threading.local()  # the deferral of the program call running on this thread, if any


class _DeferredSigint:
    """Hold Ctrl-C back while a parallel call hands out parts and waits for them.

    Python raises KeyboardInterrupt in the main thread at whatever bytecode it
    is running, also inside ``threading.Condition``'s own Python code: a
    Ctrl-C there can leave the batch's lock held (the call then hangs for
    good) or skip the wait for running parts (they then write into freed
    buffers).  So for the length of the call SIGINT only sets :attr:`hit`;
    the call stops handing out parts, waits for the running ones, restores
    the previous handler and raises the signal again (``signal.raise_signal``),
    so whatever handler the program had -- Python's KeyboardInterrupt, its
    own, or SIG_IGN -- sees it exactly once, after the parts have finished.
    Only the main thread receives signals, so other threads defer nothing.

    Swapping the handler costs two system calls, about 15 us: as much as a
    small kernel.  So within a program call (:func:`call_scope`, opened by
    :meth:`CompiledProgram.__call__`) the first parallel kernel's deferral
    stays installed for the rest of the call and later parallel kernels
    *join* it: they install nothing, and on leaving a kernel in which Ctrl-C
    arrived they fire it at once -- the interrupt still takes effect when
    that kernel's parts have ended, not at the end of the program.  A Ctrl-C
    during a sequential kernel after that is raised when the next parallel
    kernel ends, or when the call returns.  A call that splits no kernel
    swaps no handler.
    """

    def __init__(self) -> None:
        self.hit = False
        self.previous: Any = None
        self.joined: "_DeferredSigint | None" = None
        self.scoped = False

    def _record(self, signum: int, frame: Any) -> None:
        self.hit = True

    def __enter__(self) -> "_DeferredSigint":
        active = getattr(_ACTIVE, "deferral", None)
        if active is not None:
            self.joined = active
            return active
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous is not None:  # None: a handler not installed from Python; leave it alone
                self.previous = signal.signal(signal.SIGINT, self._record)
                if getattr(_ACTIVE, "scope", False):
                    self.scoped = True
                    _ACTIVE.deferral = self
        return self

    def __exit__(self, *exc: Any) -> None:
        target = self.joined or self
        if target.hit or not target.scoped:
            target.fire()

    def fire(self) -> None:
        """Restore the previous handler and, if Ctrl-C came meanwhile, raise it again (once)."""
        if self.previous is not None:
            previous, self.previous = self.previous, None
            if getattr(_ACTIVE, "deferral", None) is self:
                _ACTIVE.deferral = None
            signal.signal(signal.SIGINT, previous)
            if self.hit:
                self.hit = False
                signal.raise_signal(signal.SIGINT)


class call_scope:  # noqa: N801 - used as a context manager, like contextlib's
    """The length of one program call: parallel kernels in it share one Ctrl-C deferral.

    Leaving the scope fires the deferral if a kernel installed one (restoring
    the handler, raising a Ctrl-C that came during a later sequential kernel).
    """

    def __enter__(self) -> None:
        self.outer = getattr(_ACTIVE, "scope", False)
        _ACTIVE.scope = True

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.scope = self.outer
        deferral = getattr(_ACTIVE, "deferral", None)
        if deferral is not None and not self.outer:
            deferral.fire()


def run_parallel(fn: Any, ptrs: Any, sizes: Any, nparts: int) -> None:
    """Run ``fn(ptrs, sizes, part, nparts)`` for every part, on the pool and the calling thread.

    Returns when every part has finished.  If anything interrupts the call
    (Ctrl-C, an exception from a part), the parts not yet started are
    cancelled, the call waits for the ones running on pool threads, then
    raises: the buffers behind ``ptrs`` stay valid until no part can write
    into them.  Ctrl-C is deferred for the length of the call
    (:class:`_DeferredSigint`) and takes effect when the calling thread's own
    part ends.
    """
    batch = _Batch(fn, (ptrs, sizes), nparts)
    with _DeferredSigint() as sigint:
        try:
            pool = _POOL
            pool.ensure(nparts - 1)
            for _ in range(nparts - 1):
                pool.queue.put(batch)
            while not sigint.hit and (part := batch.claim(worker=False)) is not None:
                fn(ptrs, sizes, part, nparts)
        finally:
            # every part claimed (or the call interrupted): cancel what is left, wait for the rest
            batch.cancel_and_drain()
    if batch.error is not None:
        raise batch.error


class CompiledProgram:
    """A program compiled for one target and element type; the target's executable runs its kernels.

    ``inputs``: the input names; ``results``: every definition's name (what a
    call returns); ``threads``: how many threads parallel kernels use
    (settable).  ``program`` is the L1 program, ``loops`` the optimised L2
    program and ``llvm`` the optimised LLVM module it came from, for
    inspection.
    """

    def __init__(
        self, program: Any, loops: Any, llvm: Any, executable: Executable, dtype: np.dtype, threads: int | None
    ) -> None:
        self.program = program
        self.loops = loops
        self.llvm = llvm
        self.executable = executable
        self.dtype = np.dtype(dtype)
        self.threads = default_threads() if threads is None else threads
        self._caller_inputs = tuple(program.caller_inputs())
        self.inputs: tuple[str, ...] = tuple(d.name for d in self._caller_inputs)
        self.results: tuple[str, ...] = tuple(b.name for b in loops.buffers if b.role in ("output", "local"))
        self._buffer_index = {b.name: i for i, b in enumerate(loops.buffers)}
        self._bound: dict[tuple, tuple[dict[str, int], dict[str, tuple[int, ...]]]] = {}  # by input shapes
        self._parallel = any(getattr(k, "parallel", False) for k in getattr(executable, "kernels", ()))
        self._index_cache = IndexCache()  # validated and derived index arrays, reused while the inputs are equal
        self._pool = ScratchPool()  # the intermediates' arrays, from one call to the next
        self._results = ResultPool()  # results' arrays, reused once the caller has let go of them
        self._reorder: Any = None  # tcc.runtime.call_orders.CallTimeOrder: other contraction orders, by the call's sizes
        for name, value in executable.program_attributes().items():  # cuda: the PTX it runs
            setattr(self, name, value)

    @property
    def results(self) -> tuple[str, ...]:
        """The definitions a call returns (``tcc.compile(..., results=)`` narrows them after construction)."""
        return self._result_names

    @results.setter
    def results(self, names: tuple[str, ...]) -> None:
        self._result_names = tuple(names)
        self._scratch_names: frozenset[str] | None = None  # what _scratch derives from them, made on next use

    @property
    def threads(self) -> int:
        return self._threads

    @threads.setter
    def threads(self, value: int) -> None:
        self._threads = check_threads(value)

    def __repr__(self) -> str:
        return (
            f"<tcc compiled program: inputs {', '.join(self.inputs) or '-'}; "
            f"results {', '.join(self.results)}; {self.dtype} on {self.executable.describe()}>"
        )

    # -- argument checking ------------------------------------------------
    def _check_input(self, name: str, value: Any, decl: Any) -> Any:
        checked = self.executable.check_input(name, value, self.dtype)  # a device array, say
        if checked is not None:
            return checked
        if isinstance(value, np.ndarray):
            arr = value
        elif not decl.extents and isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
            # a real number converts to the element type as a literal would; complex and
            # bool scalars have no real value to convert to, so they fall to the error below
            try:
                arr = np.asarray(value, dtype=self.dtype)
            except OverflowError:
                raise CallError(f"input '{name}' is an integer too large for {self.dtype}") from None
        else:  # another library's array: a view of its memory (tcc.runtime.foreign_arrays), checked as NumPy's below
            arr = host_array(f"input '{name}'", value)
            if arr is None:
                what = "a real number, a NumPy array" if not decl.extents else "a NumPy array"
                raise CallError(f"input '{name}' must be {what} of {self.dtype} or {ARRAY_OBJECTS}, "
                                f"got {type(value).__name__}")
        if arr.dtype != self.dtype:
            raise CallError(f"input '{name}' has dtype {arr.dtype}, but this program was compiled for {self.dtype}{self._dtype_hint(arr.dtype)}")
        if not arr.flags.c_contiguous:
            raise CallError(
                f"input '{name}' is not C-contiguous (strides {arr.strides}); pass np.ascontiguousarray({name})"
            )
        return arr

    def _dtype_hint(self, dtype: np.dtype) -> str:
        """How to fix an input of the wrong dtype: only what would work.

        Compiling for the input's dtype is offered only where tcc can compile
        for it (float32, float64); ``.astype`` only where the conversion keeps
        the values (not complex: it would drop the imaginary part silently).
        """
        if dtype.kind == "c":
            return COMPLEX_HINT
        if dtype.kind not in "biuf":
            return ""
        hint = f".astype(np.{self.dtype})"
        if dtype.isnative and dtype.name in DTYPES:
            return f" (convert with {hint} or compile with dtype='{dtype.name}')"
        return f" (convert with {hint})"

    def _check_output(self, name: str, value: Any, shape: tuple[int, ...]) -> Any:
        checked = self.executable.check_output(name, value, shape, self.dtype)
        if checked is not None:
            return checked
        if not isinstance(value, np.ndarray):  # written in place: only a view of the object's memory will do
            view = host_output(f"output '{name}'", value)
            if view is None:
                raise CallError(f"output '{name}' must be a NumPy array or {OUTPUT_OBJECTS}, got {type(value).__name__}")
            value = view
        if value.dtype != self.dtype:
            raise CallError(f"output '{name}' has dtype {value.dtype}, expected {self.dtype}")
        if value.shape != shape:
            raise CallError(f"output '{name}' has shape {value.shape}, expected {shape} for these inputs")
        if not value.flags.c_contiguous:
            raise CallError(f"output '{name}' is not C-contiguous (strides {value.strides})")
        if not value.flags.writeable:
            raise CallError(f"output '{name}' is read-only")
        return value

    def bind(
        self, arrays: Mapping[str, Any], kept: dict[str, np.ndarray] | None = None
    ) -> tuple[dict[str, int], dict[str, np.ndarray]]:
        """Check a call's arguments; return the sizes and every buffer's array.

        ``kept``: arrays of an earlier call for the buffers a call does not
        return (:mod:`tcc.runtime.scratch_pool`); used where their shapes fit, and
        updated with what is allocated instead.
        """
        known = set(self.inputs) | set(self.results)
        for name in arrays:
            if name not in known:
                hint = f"inputs: {', '.join(self.inputs) or 'none'}; results: {', '.join(self.results)}"
                raise CallError(f"unknown argument '{name}' ({hint})")
        missing = [n for n in self.inputs if n not in arrays]
        if missing:
            raise CallError(f"missing input{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)}")
        buffers: dict[str, np.ndarray] = {}
        for decl in self._caller_inputs:
            if decl.is_index:  # validated once the sizes are known (tcc.index_inputs)
                buffers[decl.name] = _host_index_array(decl.name, arrays[decl.name])
                continue
            buffers[decl.name] = self._check_input(decl.name, arrays[decl.name], decl)
        sizes, shapes = self._bound_shapes(buffers)
        buffers.update(self._index_cache.check(self.program, buffers, sizes))
        scratch = self._scratch if kept is not None else frozenset()
        zeroed = getattr(self.executable, "zeroed_buffers", ())
        for b in self.loops.buffers:
            if b.role == "input":
                continue
            shape = shapes[b.name]
            if any(s < 0 for s in shape):
                raise CallError(
                    f"{'temporary' if b.role == 'temp' else 'result'} '{b.name}' would have a negative extent "
                    f"({format_decl(b.name, b.shape)} = {shape}) for these sizes"
                )
            if b.name in arrays:
                buffers[b.name] = self._check_output(b.name, arrays[b.name], shape)
            elif b.name in scratch:
                buffers[b.name] = reuse(kept, b.name, shape, self.dtype, lambda: self._new_buffer(b.name, shape))
            elif kept is not None and b.name in self.results and b.name not in zeroed:
                buffers[b.name] = self._results.take(b.name, shape, self.dtype, lambda: self._new_buffer(b.name, shape))
            else:
                buffers[b.name] = self._new_buffer(b.name, shape)
        given = [n for n in self.results if n in arrays]
        for n in given:
            for other, arr in buffers.items():
                if other != n and self._overlap(buffers[n], arr):
                    raise CallError(f"output '{n}' overlaps the memory of '{other}'")
        return sizes, buffers

    def _bound_shapes(self, buffers: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
        """The sizes the inputs' shapes bind, and the shape of every other buffer for them.

        A function of the input shapes alone, so kept per shape tuple: binding
        and evaluating every extent took about 60 us of each call of layer
        normalisation's gradient (1 ms of kernels).  Errors are raised, never
        kept.  The sizes are copied out: a call may not change the next one's.
        """
        key = tuple(getattr(buffers[d.name], "shape", None) for d in self._caller_inputs)
        hit = self._bound.get(key)
        if hit is None:
            try:
                sizes = bind_sizes(self.program, buffers)
            except CallError:
                raise
            except TccError as exc:  # a violated `assume` keeps its line: the CLI shows it
                raise CallError(exc.message, exc.loc, exc.source) from None
            shapes = {b.name: extents_shape(b.shape, sizes) for b in self.loops.buffers if b.role != "input"}
            try:  # before any allocation: a size bound by an empty input can make a buffer that cannot exist
                check_allocations(("temporary" if b.role == "temp" else "result", b.name, shapes[b.name],
                                   8 if b.bound is not None else self.dtype.itemsize)
                                  for b in self.loops.buffers if b.role != "input")
            except TccError as exc:
                raise CallError(exc.message) from None
            if len(self._bound) >= 64:
                self._bound.clear()
            hit = self._bound[key] = (sizes, shapes)
        return dict(hit[0]), hit[1]

    def _new_buffer(self, name: str, shape: tuple[int, ...]) -> Any:
        """Storage for a result or temporary the caller did not pass (where the executable keeps it);
        zeroed memory for a result whose only first writer is a zero fill, which then does not run
        (tcc.backends.zero_fill)."""
        if name in getattr(self.executable, "zeroed_buffers", ()):
            return np.zeros(shape, self.dtype)
        return self.executable.new_buffer(shape, self.dtype)

    def _overlap(self, a: Any, b: Any) -> bool:
        return self.executable.overlap(a, b)

    def variant_for(self, arrays: Mapping[str, Any]) -> "CompiledProgram | None":
        """The program compiled for another contraction order that a call with ``arrays`` runs instead, if any.

        See :mod:`tcc.runtime.call_orders`.  Arguments whose sizes cannot be bound give
        None: the call itself then reports what is wrong with them.
        """
        if self._reorder is None:
            return None
        try:
            sizes = bind_sizes(self.program, {n: arrays[n] for n in self.inputs if n in arrays})
        except Exception:  # noqa: BLE001 - the ordinary checks of the call report it
            return None
        return self._reorder.variant(sizes)

    # -- calling ------------------------------------------------------------
    def __call__(self, /, **arrays: Any) -> dict[str, Any]:
        if self._reorder is not None:
            variant = self.variant_for(arrays)
            if variant is not None:
                variant.threads = self._threads
                return variant(**arrays)
        with self.executable.active():
            kept = self._pool.take()
            sizes, buffers = self.bind(arrays, kept)
            extern = functools.partial(run_extern, threads=self._threads)  # BLAS within the call's threads
            call = Invocation(sizes, buffers, arrays, self.results, self.dtype, self._threads, extern, run_parallel)
            if self._threads > 1 and self._parallel:
                with call_scope():  # the parallel kernels share one Ctrl-C deferral
                    out = self.executable.run(call)
            else:
                out = self.executable.run(call)
            self._pool.give(kept)  # not after an error: a cancelled call's threads may still write them
            return out

    @property
    def _scratch(self) -> frozenset[str]:
        """The buffers a call neither takes nor returns, whose memory the next call may reuse: not the
        zero-filled ones, which must start at zero (tcc.backends.zero_fill).  Derived once per value of
        :attr:`results` (it was 5 us of every call)."""
        if self._scratch_names is None:
            zeroed = getattr(self.executable, "zeroed_buffers", ())
            self._scratch_names = frozenset(b.name for b in self.loops.buffers
                                            if b.role != "input" and b.name not in self.results and b.name not in zeroed)
        return self._scratch_names

    def release_scratch(self) -> None:
        """Free the intermediates' memory kept for the next call (it is allocated again when needed), the
        call-time contraction-order variants' included."""
        self._pool.clear()
        self._results.clear()
        for variant in getattr(self._reorder, "variants", {}).values():
            variant.release_scratch()


def _host_index_array(name: str, value: Any) -> np.ndarray:
    """An index input as a NumPy array: its entries are validated on the host before any kernel runs,
    so a device array is refused rather than copied back."""
    if isinstance(value, np.ndarray):
        return value
    where = off_host(value)  # a device array (DLPack's device, __cuda_array_interface__)
    if where is not None or type(value).__module__.split(".")[0] in ("pycuda", "cupy"):
        on = f" (it is on {where[0]})" if where else ""
        raise CallError(f"index input '{name}' must be a NumPy integer array: index inputs are validated on the host{on}")
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):  # a CPU tensor, say
        arr = host_array(f"index input '{name}'", value)
        if arr is not None:
            return arr  # validated (and copied) like a NumPy array
    try:
        arr = np.asarray(value)
        return arr.astype(np.int64) if arr.size == 0 else arr  # an empty list is not float64 data
    except Exception as exc:  # noqa: BLE001 - ragged lists and the like
        raise CallError(f"index input '{name}' must be a NumPy integer array ({exc})") from None
