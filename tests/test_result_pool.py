"""Result arrays are reused once the caller has let go of them, and never while anything refers to them.

A reused array would be silent data corruption if the pool got this wrong,
so every way a caller can keep a result alive is tried: the dict, the array,
a view, a memoryview, an array made from its buffer, another thread's call.
"""
from __future__ import annotations

import threading

import numpy as np

import tcc
from tcc.runtime.result_pool import KEPT_PER_RESULT, ResultPool

SRC = "input x[n, m]\noutput y[n, m], s[n]\ny[i, j] = 2 * x[i, j] + 1\ns[i] = sum[j](x[i, j])\n"


def _f():
    return tcc.compile(SRC, results=["y", "s"])


def _x(v: float, shape=(64, 48)) -> np.ndarray:
    return np.full(shape, v)


def test_a_dropped_result_is_reused() -> None:
    f = _f()
    first = f(x=_x(1.0))
    where = first["y"].ctypes.data
    del first
    second = f(x=_x(2.0))
    assert second["y"].ctypes.data == where          # no fresh pages to fault in
    np.testing.assert_array_equal(second["y"], 5.0)


def test_a_held_result_is_never_reused() -> None:
    f = _f()
    first = f(x=_x(1.0))
    y1 = first["y"]
    del first                                         # the array itself is still held
    kept_view = f(x=_x(2.0))["y"][3:, ::2]            # a view holds its base
    view_base = kept_view.base
    mv = memoryview(f(x=_x(3.0))["y"])                # a buffer export holds the array
    from_buffer = np.frombuffer(f(x=_x(4.0))["s"], dtype=np.float64)
    for v in (5.0, 6.0, 7.0, 8.0):
        out = f(x=_x(v))
        np.testing.assert_array_equal(out["y"], 2 * v + 1)
        del out
    np.testing.assert_array_equal(y1, 3.0)
    np.testing.assert_array_equal(kept_view, 5.0)
    assert view_base is not None
    np.testing.assert_array_equal(np.asarray(mv), 7.0)
    np.testing.assert_array_equal(from_buffer, 4.0 * 48)


def test_a_new_shape_gets_new_memory_and_old_arrays_are_let_go() -> None:
    f = _f()
    for n in (8, 16, 8, 32, 16):
        out = f(x=_x(1.0, (n, 5)))
        assert out["y"].shape == (n, 5)
        np.testing.assert_array_equal(out["y"], 3.0)
        del out
    assert len(f._results) <= 2 * KEPT_PER_RESULT    # y and s, each at most KEPT_PER_RESULT
    f.release_scratch()
    assert len(f._results) == 0


def test_concurrent_calls_never_share_a_result() -> None:
    f = _f()
    errors: list[str] = []

    def work(v: float) -> None:
        for _ in range(40):
            out = f(x=_x(v))
            if not (out["y"] == 2 * v + 1).all():
                errors.append(f"thread {v}: got another call's values")
            del out

    threads = [threading.Thread(target=work, args=(float(v),)) for v in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_given_outputs_are_written_and_not_pooled() -> None:
    f = _f()
    y = np.empty((64, 48))
    out = f(x=_x(1.0), y=y)
    assert out["y"] is y
    del out
    again = f(x=_x(2.0))
    assert again["y"] is not y and not np.shares_memory(again["y"], y)
    np.testing.assert_array_equal(y, 3.0)


def test_the_pool_on_its_own() -> None:
    pool = ResultPool()
    made: list[np.ndarray] = []

    def new() -> np.ndarray:
        made.append(np.empty(4))
        return made[-1]

    a = pool.take("y", (4,), np.dtype(np.float64), new)
    b = pool.take("y", (4,), np.dtype(np.float64), new)
    assert a is not b and len(made) == 2             # a is held: b is new
    made.clear()
    del a
    c = pool.take("y", (4,), np.dtype(np.float64), new)
    assert not made                                   # a's array came back
    d = pool.take("y", (4,), np.dtype(np.float32), new)
    assert d.dtype == np.float64 and len(made) == 1   # another dtype is another array (allocate decides it)
    assert c is not b
