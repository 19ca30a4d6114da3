"""tcc shortens the spin of NumPy's OpenBLAS threads once per process (tcc.runtime.externs.blas_spin).

Each case runs in a fresh interpreter: the setting is made once per process,
at the first external kernel, and what OpenBLAS read at load time is part of
what is checked.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np  # noqa: F401 - loads NumPy's BLAS, which threadpool_info looks for
import pytest

from tcc.runtime.externs.blas_spin import _openblas

pytestmark = pytest.mark.skipif(_openblas() is None, reason="NumPy's BLAS is not OpenBLAS here")

_SCRIPT = textwrap.dedent("""
    import ctypes, json, os
    import numpy as np
    import tcc
    import tcc.runtime.externs.blas_spin as blas_spin
    from tcc.runtime.externs.blas_gemm import _numpy_blas_path
    from threadpoolctl import threadpool_info

    lib = ctypes.CDLL(_numpy_blas_path())
    lib.openblas_thread_timeout.restype = ctypes.c_uint
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((300, 200)), rng.standard_normal((200, 260))
    before = a @ b  # threaded by OpenBLAS before tcc changes anything
    threads_before = [i["num_threads"] for i in threadpool_info() if i.get("internal_api") == "openblas"]
    tasks_before = set(os.listdir("/proc/self/task"))  # OpenBLAS's worker threads among them
    if os.environ.get("TEST_OTHER_THREAD"):  # another Python thread, alive while tcc runs (idle: no BLAS)
        import threading
        stop = threading.Event()
        threading.Thread(target=stop.wait, name="user-thread", daemon=True).start()
    f = tcc.compile("input a[300, 200], b[200, 260]\\ny[i, j] = sum[k](a[i, k] * b[k, j])\\n", threads=2)
    out = {"at_load": lib.openblas_thread_timeout()}
    try:
        y = f(a=a, b=b)["y"]
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(out))
        raise SystemExit(0)
    after = a @ b  # threaded again, by threads started anew where tcc stopped them
    out["restarted"] = bool(tasks_before - set(os.listdir("/proc/self/task")))  # the old workers are gone
    out.update(timeout=lib.openblas_thread_timeout(), applied=blas_spin.applied(),
               env=os.environ.get("OPENBLAS_THREAD_TIMEOUT"), same_as_numpy=bool(np.allclose(y, before)),
               numpy_bits_unchanged=bool(np.array_equal(before, after)),
               blas_threads=[i["num_threads"] for i in threadpool_info() if i.get("internal_api") == "openblas"],
               threads_before=threads_before)
    if os.environ.get("TEST_OTHER_THREAD"):
        stop.set()
        for _ in range(3):  # alone again: the next call with an external kernel makes the change
            f(a=a, b=b)
        out["later"] = (lib.openblas_thread_timeout(), blas_spin.applied())
    with blas_spin.openblas_spin() as ok:  # what benchmarks/ measures NumPy under: OpenBLAS's own spin
        out.update(inside=lib.openblas_thread_timeout(), inside_ok=ok, inside_bits=bool(np.array_equal(a @ b, before)))
    out.update(restored=lib.openblas_thread_timeout())
    if os.environ.get("TEST_FORK"):  # a forked child: OpenBLAS restarts its threads there, with the value it holds
        import time
        pid = os.fork()
        if pid == 0:
            ok = np.array_equal(a @ b, before) and np.array_equal(f(a=a, b=b)["y"], y)
            os._exit(0 if ok else 1)
        deadline = time.time() + 60
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                out["child"] = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            out["child"] = "hung"
    print(json.dumps(out))
""")


def _run(**env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "TCC_BLAS_SPIN")}
    environ.update(env)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, env=environ)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_first_external_kernel_shortens_the_spin_and_blas_still_computes_the_same() -> None:
    out = _run()
    assert out["at_load"] == 0  # OpenBLAS's own default (2^28 cycles): nothing read from the environment
    assert out["timeout"] == 20 and out["applied"] == 20
    assert out["restarted"]  # OpenBLAS reads the limit only when it starts its threads
    assert out["env"] is None  # the value was put in the environment only for OpenBLAS to read it
    assert out["same_as_numpy"] and out["numpy_bits_unchanged"]
    assert out["blas_threads"] == out["threads_before"]  # re-reading the environment changed no thread count
    assert (out["inside"], out["inside_ok"], out["inside_bits"], out["restored"]) == (28, True, True, 20)


def test_a_forked_child_computes_the_same() -> None:
    out = _run(TEST_FORK="1")
    assert out["applied"] == 20 and out["child"] == 0


def test_the_spin_can_be_chosen() -> None:
    out = _run(TCC_BLAS_SPIN="16")
    assert (out["timeout"], out["applied"]) == (16, 16)


def test_off_leaves_openblas_alone() -> None:
    out = _run(TCC_BLAS_SPIN="off")
    assert (out["timeout"], out["applied"], out["restarted"]) == (0, None, False)
    assert out["same_as_numpy"]
    assert (out["inside"], out["restored"]) == (28, 28)  # the benchmarks' block sets OpenBLAS's default back


def test_the_users_own_openblas_setting_stands() -> None:
    out = _run(OPENBLAS_THREAD_TIMEOUT="7")
    assert (out["at_load"], out["timeout"], out["applied"]) == (7, 7, None)
    assert out["env"] == "7"
    assert (out["inside"], out["restored"]) == (28, 7)


def test_nothing_changes_while_another_python_thread_lives() -> None:
    # stopping OpenBLAS's threads while another thread is inside a threaded BLAS call hangs both, so the
    # change waits until the calling thread is alone (besides tcc's own workers); then it is made
    out = _run(TEST_OTHER_THREAD="1")
    assert (out["timeout"], out["applied"], out["restarted"]) == (0, None, False)
    assert out["same_as_numpy"] and out["numpy_bits_unchanged"]
    assert out["later"] == [20, 20]  # (a JSON list)


@pytest.mark.parametrize("value, shown", [("banana", "'banana'"), ("3", "3"), ("31", "31")])
def test_a_bad_setting_is_an_error_that_names_it(value: str, shown: str) -> None:
    out = _run(TCC_BLAS_SPIN=value)
    assert out["error"] == ("ValueError: TCC_BLAS_SPIN must be 'off' or an integer from 4 to 30 "
                            f"(log2 of the spin in cycles), not {shown}")
