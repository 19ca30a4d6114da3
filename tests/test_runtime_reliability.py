"""The runtime under stress: Ctrl-C in a parallel call, fork, many thread counts, the compile
cache's bound, native memory per compile, and inputs of the wrong kind.

What could crash or hang (a signal, a fork, a leak measured by RSS) runs in a
fresh interpreter with a time limit, so a regression fails the test instead
of taking pytest down, and counts (threads, memory) start from a clean
process.
"""
from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from typing import Any, Iterator

import numpy as np
import pytest

import tcc
import tcc.build as build
from tcc.reference.interpreter import evaluate
from tcc.runtime.compiled import CallError, run_parallel

CONV = "input x[n], w[m]\ny[i] = sum[k](sin(x[i + k]) * w[k])\n"


def run_script(body: str, timeout: float = 60, team: bool = True) -> str:
    """Run ``body`` in a fresh interpreter; its exit status must be 0; returns its stdout.

    ``team=False`` runs it without the native thread team (``TCC_THREAD_TEAM=0``), so that parallel
    kernels go to the runtime's Python pool, whose cancellation and Ctrl-C deferral some tests are about.
    """
    script = "import json\nimport numpy as np, tcc\n" + textwrap.dedent(body)
    env = {**os.environ, "TCC_THREAD_TEAM": "1" if team else "0"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def reference(program: str, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    inferred = tcc.transform(tcc.parse(program), "infer-ranges")
    return evaluate(inferred, inputs, np.float64)


# ---------------------------------------------------------------------------
# Ctrl-C during a parallel call
# ---------------------------------------------------------------------------
# A watcher thread sends SIGINT once the kernel has written its first element,
# so the signal lands while parts run, however loaded the machine.
SIGINT_WHEN_STARTED = """
import os, signal, threading, time

def interrupt_when_written(y, index):
    def watch():
        while np.isnan(y[index]):
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=watch, daemon=True).start()

def call_interrupted_once_y_is_written(f, y, **inputs):
    interrupt_when_written(y, 0)
    try:
        f(**inputs, y=y)
    except KeyboardInterrupt:
        return
    raise SystemExit("the call finished: the interrupt was lost")
"""


@pytest.mark.parametrize("team", [True, False], ids=["team", "pool"])
def test_interrupted_call_waits_for_running_parts_then_raises(team: bool) -> None:
    """The call returns (raising KeyboardInterrupt) only when no part can write into its buffers.

    Before the fix the caller left the wait at once while the pool kept
    writing: with buffers of its own the process segfaulted; here, with the
    caller's output array, ``y`` kept changing after the call had raised.
    The native team runs every part to the end before the call returns.
    """
    out = run_script(SIGINT_WHEN_STARTED + f"""
f = tcc.compile({CONV!r}, threads=4)
x, w = np.random.default_rng(0).random(100_000), np.random.default_rng(1).random(300)
y = np.full(100_000 - 299, np.nan)
call_interrupted_once_y_is_written(f, y, x=x, w=w)
after_return = y.copy()
time.sleep(0.5)
assert np.array_equal(y, after_return, equal_nan=True), "a part wrote into y after the call raised"
small_x, small_w = x[:1000], w[:30]
print(json.dumps(f(x=small_x, w=small_w)["y"].tolist()))
""", team=team)
    got = np.array(json.loads(out))
    rng0, rng1 = np.random.default_rng(0), np.random.default_rng(1)
    want = reference(CONV, x=rng0.random(100_000)[:1000], w=rng1.random(300)[:30])["y"]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_interrupt_cancels_parts_not_started() -> None:
    """Parts no thread has started when Ctrl-C arrives never run.

    The pool's one worker is kept busy by another thread's long call, so the
    interrupted call's second part is still waiting when its first part (run
    by the caller) ends; it must be dropped, not run later into ``y``.  (The Python pool's
    behaviour: the native team never cancels, it runs a kernel's parts to the end.)
    """
    run_script(SIGINT_WHEN_STARTED + f"""
f = tcc.compile({CONV!r}, threads=2)
rng = np.random.default_rng(0)
w = rng.random(300)
big_x = rng.random(400_000)
big_y = np.full(big_x.size - 299, np.nan)
busy = threading.Thread(target=f, kwargs=dict(x=big_x, w=w, y=big_y))
busy.start()
second_half = big_y[big_y.size // 2 + 2:]  # written only by the second part
while np.isnan(big_y[0]) or np.isnan(second_half).all():  # both parts running
    time.sleep(0.001)
x = rng.random(60_000)
y = np.full(x.size - 299, np.nan)
call_interrupted_once_y_is_written(f, y, x=x, w=w)
assert np.isnan(big_y[-1]), "the busy call ended too soon for this test"
busy.join()
time.sleep(0.5)  # longer than a part: one queued instead of cancelled would have started by now
assert not np.isnan(y[0]) and np.isnan(y[y.size // 2 + 2:]).all(), "the part that had not started ran"
""", team=False)


# A real SIGINT whose Python handler runs inside threading.Condition's own Python code (its
# __exit__, called by the caller's claim of a part): KeyboardInterrupt there left the batch's
# lock held and the call hung for good.  Ctrl-C is deferred for the length of the call.
SIGINT_INSIDE_THE_LOCK = """
import os, signal, sys, threading
f = tcc.compile("input x[n], w[m]\\ny[i] = sum[k](sin(x[i + k]) * w[k])\\n", threads=2)
x, w = np.linspace(0, 1, 200_000), np.linspace(1, 2, 30)
want = f(x=x, w=w)["y"].copy()
def tracer(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "__exit__" and frame.f_code.co_filename.endswith("threading.py"):
        if frame.f_back.f_code.co_name == "claim" and frame.f_back.f_locals.get("worker") is False:
            sys.settrace(None)
            signal.raise_signal(signal.SIGINT)
    return None
threading.Timer(20, lambda: (print("hung", flush=True), os._exit(3))).start()
{handler}
sys.settrace(tracer)
try:
    f(x=x, w=w)
    print("returned")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
print(seen if "seen" in dir() else "-", np.array_equal(f(x=x, w=w)["y"], want), flush=True)
os._exit(0)
"""


def test_ctrl_c_inside_the_pools_lock_neither_hangs_nor_is_lost() -> None:
    out = run_script(SIGINT_INSIDE_THE_LOCK.format(handler=""), timeout=60, team=False)
    assert out.split() == ["KeyboardInterrupt", "-", "True"]


def test_a_deferred_ctrl_c_reaches_the_programs_own_handler_once() -> None:
    """The previous handler is restored and the signal raised again: a program's own SIGINT
    handler runs once, after the parts have finished; SIG_IGN stays ignored."""
    counting = "seen = []\nsignal.signal(signal.SIGINT, lambda s, fr: seen.append(s))"
    out = run_script(SIGINT_INSIDE_THE_LOCK.format(handler=counting), timeout=60, team=False)
    assert out.split() == ["returned", f"[{int(signal.SIGINT)}]", "True"]
    out = run_script(SIGINT_INSIDE_THE_LOCK.format(handler="signal.signal(signal.SIGINT, signal.SIG_IGN)"), timeout=60,
                     team=False)
    assert out.split() == ["returned", "-", "True"]


def test_exception_in_a_part_cancels_the_rest_and_is_raised_after_running_parts() -> None:
    ran: list[int] = []
    lock = threading.Lock()

    def part_fn(ptrs: Any, sizes: Any, part: int, nparts: int) -> None:
        if part == 1:
            raise ArithmeticError("part 1 failed")
        time.sleep(0.05)
        with lock:
            ran.append(part)

    with pytest.raises(ArithmeticError, match="part 1 failed"):
        run_parallel(part_fn, None, None, 64)
    with lock:
        after_return = list(ran)
    time.sleep(0.2)
    assert ran == after_return  # every part that started had ended when the call raised
    assert len(ran) < 63  # the rest were cancelled


# ---------------------------------------------------------------------------
# fork and thread counts
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("team", [True, False], ids=["team", "pool"])
def test_forked_child_runs_parallel_kernels(team: bool) -> None:
    """A child forked after the parent ran a parallel kernel has a pool (or team) of its own (it hung)."""
    run_script(f"""
import os, time
f = tcc.compile({CONV!r}, threads=4)
# parts long enough that the parent's call starts all its workers
x, w = np.random.default_rng(0).random(200_000), np.random.default_rng(1).random(30)
want = f(x=x, w=w)["y"]
pid = os.fork()
if pid == 0:
    os._exit(0 if all(np.array_equal(f(x=x, w=w)["y"], want) for _ in range(3)) else 1)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        raise SystemExit(os.waitstatus_to_exitcode(status))
    time.sleep(0.01)
os.kill(pid, 9)
os.waitpid(pid, 0)
raise SystemExit("the forked child hung")
""", team=team)


@pytest.mark.parametrize("team", [True, False], ids=["team", "pool"])
def test_many_thread_counts_share_one_pool(team: bool) -> None:
    """Trying threads=2..30 leaves at most 29 worker threads (one pool per count left 200+)."""
    out = run_script(f"""
import threading
f = tcc.compile({CONV!r})
x, w = np.random.default_rng(0).random(2_000), np.random.default_rng(1).random(30)
ys = []
for t in range(2, 31):
    f.threads = t
    ys.append(f(x=x, w=w)["y"])
assert all(np.array_equal(y, ys[0]) for y in ys)
from tcc.runtime.compiled import pool_size
from tcc.backends.thread_team import team
print(threading.active_count(), len(team().threads) if team() is not None else pool_size())
print(json.dumps(ys[0].tolist()))
""", team=team)
    counts, values = out.splitlines()
    threads, workers = map(int, counts.split())
    assert workers == 29 and threads <= 1 + 29
    rng0, rng1 = np.random.default_rng(0), np.random.default_rng(1)
    want = reference(CONV, x=rng0.random(2_000), w=rng1.random(30))["y"]
    np.testing.assert_allclose(np.array(json.loads(values)), want, rtol=1e-12)


# ---------------------------------------------------------------------------
# the compile cache
# ---------------------------------------------------------------------------
def scaled(i: int) -> str:
    return f"input x[n]\ny[i] = x[i] * {i + 2}\n"


@pytest.fixture
def small_cache() -> Iterator[None]:
    old_entries = dict(build._CACHE)
    old = build.set_cache_size(3)
    build.clear_cache()
    try:
        yield
    finally:
        build.set_cache_size(old)
        build.clear_cache()
        build._CACHE.update(old_entries)


def test_cache_keeps_the_most_recently_used(small_cache: None) -> None:
    first = tcc.compile(scaled(0))
    evicted = tcc.compile(scaled(1))
    tcc.compile(scaled(2))
    assert tcc.compile(scaled(0)).executable is first.executable  # a hit: now the most recent
    tcc.compile(scaled(3))  # evicts scaled(1), the least recently used
    assert len(build._CACHE) == 3
    assert tcc.compile(scaled(0)).executable is first.executable
    assert tcc.compile(scaled(1)).executable is not evicted.executable


def test_evicted_programs_still_run_and_their_code_is_freed(small_cache: None) -> None:
    x = np.linspace(0.25, 0.75, 7)
    kept = tcc.compile(scaled(0))
    dropped = tcc.compile(scaled(1))
    engine = weakref.ref(dropped.executable.engine)
    del dropped
    for i in range(2, 6):
        tcc.compile(scaled(i))
    assert len(build._CACHE) == 3
    np.testing.assert_allclose(kept(x=x)["y"], reference(scaled(0), x=x)["y"], rtol=1e-15)
    gc.collect()
    assert engine() is None  # no callable, no cache entry: the machine code went with the engine


def test_cache_size_must_be_a_count() -> None:
    with pytest.raises(ValueError, match=r"^the cache size must be a non-negative integer, got -1$"):
        build.set_cache_size(-1)


# ---------------------------------------------------------------------------
# native memory per compile
# ---------------------------------------------------------------------------
def test_compiling_does_not_leak_native_memory() -> None:
    """RSS growth per compile that misses the cache (cache off) stays far below the old leak.

    llvmlite never disposed the O3 ModulePassManager: 70 kB per compile here
    before the fix, 8 kB after (Python-side caches and llvmlite's
    PassInstrumentationCallbacks, which it does not free either).  The
    bound sits between the two with room for allocator noise.
    """
    out = run_script("""
import gc
import tcc.build
tcc.build.set_cache_size(0)
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096
PASSES = "infer-ranges,lower-loops"  # no L2 passes: quicker, and LLVM's O3 runs all the same
def program(i):
    return f"input x[n]\\ny[i] = sin(x[i]) * {i}.5 + x[i]\\n"
for i in range(10):  # the first compiles fill caches that stay
    tcc.compile(program(i), passes=PASSES)
gc.collect()
before = rss()
for i in range(10, 70):
    tcc.compile(program(i), passes=PASSES)
gc.collect()
print((rss() - before) / 60)
""", timeout=120)
    assert float(out) < 30_000


# ---------------------------------------------------------------------------
# inputs of the wrong kind
# ---------------------------------------------------------------------------
SCALED = "input x[n], s\ny[i] = x[i] * s\n"


@pytest.fixture(scope="module")
def scale() -> Any:
    return tcc.compile(SCALED)


def call_error(f: Any, **inputs: Any) -> str:
    with pytest.raises(CallError) as info:
        f(**inputs)
    return info.value.message


@pytest.mark.parametrize("value, kind", [
    (np.complex128(1 + 2j), "complex128"), (1 + 2j, "complex"), (True, "bool"), (np.bool_(True), "bool"),
    (np.datetime64("2020-01-01"), "datetime64"), ("2", "str"),
])
def test_scalar_input_must_be_real(scale: Any, value: Any, kind: str) -> None:
    assert call_error(scale, x=np.ones(3), s=value) == (
        f"input 's' must be a real number, a NumPy array of float64 or an array object "
        f"(__array_interface__, __array__, the buffer protocol or DLPack), got {kind}"
    )


@pytest.mark.parametrize("value", [3, 2.5, np.int32(3), np.float16(0.5), np.float32(0.25)])
def test_real_scalars_convert(scale: Any, value: Any) -> None:
    x = np.linspace(0.25, 0.75, 5)
    np.testing.assert_allclose(
        scale(x=x, s=value)["y"], reference(SCALED, x=x, s=np.float64(value))["y"], rtol=1e-15
    )


def test_scalar_too_large_for_the_dtype(scale: Any) -> None:
    assert call_error(scale, x=np.ones(3), s=10**400) == "input 's' is an integer too large for float64"


@pytest.mark.parametrize("dtype, hint", [
    (np.int64, " (convert with .astype(np.float64))"),
    (np.bool_, " (convert with .astype(np.float64))"),
    (np.float16, " (convert with .astype(np.float64))"),
    (np.float32, " (convert with .astype(np.float64) or compile with dtype='float32')"),
    (np.complex128, " (tcc computes with real numbers: pass the real and imaginary parts as separate inputs)"),
    ("M8[D]", ""),
])
def test_array_dtype_errors_suggest_what_works(scale: Any, dtype: Any, hint: str) -> None:
    x = np.ones(3).astype(dtype)
    assert call_error(scale, x=x, s=1.0) == (
        f"input 'x' has dtype {x.dtype}, but this program was compiled for float64{hint}"
    )


def test_generating_ptx_does_not_leak_native_memory() -> None:
    """The NVPTX optimiser built two pass managers per compile (global DCE, then O3) and freed
    neither: about 180 kB per PTX compile before, about 12 kB after.  No GPU needed: the PTX is
    generated, not loaded."""
    out = run_script("""
import gc
import tcc
from tcc.build import compile_pipeline
from tcc.pipeline import run_pipeline
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096
PIPELINE = compile_pipeline("infer-ranges,lower-loops", "float64", "cuda", "sm_80")
def ptx(i):
    return run_pipeline(tcc.parse(f"input x[n]\\ny[i] = sin(x[i]) * {i}.5 + x[i]\\n"), PIPELINE)
for i in range(10):
    ptx(i)
gc.collect()
before = rss()
for i in range(10, 70):
    ptx(i)
gc.collect()
print((rss() - before) / 60)
""", timeout=120)
    assert float(out) < 60_000


def test_an_input_named_self_is_an_argument_like_any_other() -> None:
    """``__call__(self, **arrays)`` took ``self=`` as its own parameter (TypeError: multiple values)."""
    src = "input self[n]\ny[i] = 2 * self[i]\n"
    x = np.linspace(-1.0, 1.0, 5)
    np.testing.assert_array_equal(tcc.compile(src)(self=x)["y"], reference(src, self=x)["y"])
    np.testing.assert_array_equal(tcc.compile(src, target="cuda-sim")(self=x)["y"], 2 * x)
