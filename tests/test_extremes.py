"""Extremes: literals beyond float64 or int64, sizes whose buffers cannot exist, outputs that cannot seek.

Each case was once a raw Python error (OverflowError, NumPy's ValueError,
zipfile's struct.error) or a silent wrong value; each must now be a clear
``error:`` line -- with the position of the literal where there is one --
from the API (:func:`tcc.parse`, :func:`tcc.compile`, :func:`tcc.run`) and
from ``tcc`` (:func:`tcc.cli.driver.main`, exit 1, no traceback).
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import tcc
from tcc.cli.driver import main
from tcc.ir.printer import format_program

HUGE_INT = "1" + "0" * 400  # beyond float64 (about 1.8e308)
PAST_INT64 = str(2**63)  # within float64, beyond int64


def _cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, *args: str,
         **arrays: np.ndarray) -> tuple[int, str]:
    """``tcc run`` on ``source`` with ``arrays``; its exit code and stderr."""
    src = tmp_path / "p.tcc"
    src.write_text(source, encoding="utf-8")
    argv = ["run", str(src), "--output", str(tmp_path / "out.npz"), *args]
    if arrays:
        np.savez(tmp_path / "in.npz", **arrays)
        argv += ["--inputs", str(tmp_path / "in.npz")]
    capsys.readouterr()
    rc = main(argv)
    return rc, capsys.readouterr().err


# -- literals ---------------------------------------------------------------

#: (source, the literal's line and column, the message's start): a literal in every position
BAD_LITERALS = [
    (f"input x[n]\ny[i] = x[i] * {HUGE_INT}\n", 2, 15, "number out of range '1000000000000000...00000000' (401"),
    (f"input x[n]\ny[i] = x[i] ** {HUGE_INT}\n", 2, 16, "number out of range"),
    ("input x[n]\ny[i] = x[i] ** 1e400\n", 2, 16, "number out of range '1e400'"),
    ("input x[n]\ny[i] = x[i] * -1.5e309\n", 2, 16, "number out of range '1.5e309'"),
    (f"input x[n]\ny[i] = x[i + {HUGE_INT}]\n", 2, 14, "number out of range"),
    (f"input x[n]\ny[i] = x[i + {PAST_INT64}]\n", 2, 14, f"index constant '{PAST_INT64}' is out of the 64-bit range"),
    (f"input x[n]\ny[i] = x[i - {PAST_INT64}]\n", 2, 14, "index constant"),
    (f"input x[n]\ny[i] = x[{PAST_INT64} * i]\n", 2, 10, "index constant"),
    (f"input x[{PAST_INT64}]\ny[i] = x[i]\n", 1, 9, "index constant"),
    (f"input x[n]\ny = sum[k: 0..{PAST_INT64}](x[0])\n", 2, 15, "index constant"),
    (f"input x[n]\ny = sum[k: 0..{HUGE_INT}](x[0])\n", 2, 15, "number out of range"),
    (f"input x[n]\nassume n < {PAST_INT64}\ny[i] = x[i]\n", 2, 12, "index constant"),
    # a where condition is read as a comparison of values where the index reading fails:
    # the constant must not slip through as an inexact float
    (f"input x[n]\ny[i] = where(i - {PAST_INT64} < 5, x[i], 0)\n", 2, 18, "index constant"),
    (f"input x[n]\ny[i] = where(x[i] < 0 and i > {PAST_INT64}, x[i], 0)\n", 2, 31, "index constant"),
    (f"input x[n]\ny[i] = where(x[i] < {HUGE_INT}, x[i], 0)\n", 2, 21, "number out of range"),
    (f"input x[n]\ny[i] = x[i] * ((((({HUGE_INT})))))\n", 2, 20, "number out of range"),
]


@pytest.mark.parametrize("source,line,col,start", BAD_LITERALS)
def test_a_literal_out_of_range_is_an_error_at_its_position(source: str, line: int, col: int, start: str) -> None:
    with pytest.raises(tcc.TccError) as info:
        tcc.parse(source)
    err = info.value
    assert err.message.startswith(start)
    assert (err.loc.line, err.loc.col) == (line, col)
    assert err.render().splitlines()[2] == " " * (col - 1) + "^"


@pytest.mark.parametrize("source,line,col,start", BAD_LITERALS[:6])
def test_tcc_run_reports_a_literal_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                source: str, line: int, col: int, start: str) -> None:
    rc, err = _cli(tmp_path, capsys, source, x=np.arange(4.0))
    assert rc == 1
    assert err.startswith(f"{tmp_path / 'p.tcc'}:{line}:{col}: error: {start}")
    assert "Traceback" not in err


@pytest.mark.parametrize("literal", [
    "1" + "0" * 308,  # float64 holds it: 1e308
    str(2**63 - 1),  # the largest index constant (in a value: a float)
    "179769313486231570000" + "0" * 288,  # float64's largest, as an integer
    "1.7976931348623157e308",
    "1e-400",  # underflows to 0, as in C and Python: not an error
    "4.9e-324",
])
def test_the_largest_value_literals_are_accepted_and_round_trip(literal: str) -> None:
    source = f"input x[n]\ny[i] = x[i] * {literal}\n"
    program = tcc.parse(source)
    again = tcc.parse(format_program(program))
    assert format_program(again) == format_program(program)
    x = np.array([1.0, 0.5])
    want = x * float(int(literal) if literal.isdigit() else float(literal))
    np.testing.assert_array_equal(tcc.run(program, {"x": x})["y"], want)
    np.testing.assert_array_equal(tcc.compile(program)(x=x)["y"], want)


def test_the_largest_index_constant_is_accepted_and_round_trips() -> None:
    # i - (2**63 - 1) + (2**63 - 1) would overflow: refused as before, but a constant of int64 parses
    program = tcc.parse(f"input x[n]\nassume n < {2**63 - 1}\ny[i] = x[i]\n")
    assert format_program(tcc.parse(format_program(program))) == format_program(program)
    np.testing.assert_array_equal(tcc.run(program, {"x": np.arange(3.0)})["y"], np.arange(3.0))


def test_folding_constants_keeps_them_within_float64() -> None:
    # the derivative of x**B * B folds B * B = 10**600: kept as a product, it prints as a program
    # that parses, and compiles (the fold once raised OverflowError in the backend)
    big = "1" + "0" * 300
    d = tcc.grad(f"input x[n]\ny = sum[i](x[i]**{big} * {big})\n", of="y", wrt="x")
    assert tcc.parse(format_program(d)) is not None
    out = tcc.compile(d)(x=np.array([1.0, 0.0]), dy=np.array(1.0))["dx"]
    assert np.isposinf(out[0]) and np.isnan(out[1])  # 1e600 is inf in float64; inf * 0 is nan


def test_folding_a_product_past_float64_times_a_float_leaves_it_unfolded() -> None:
    big = "1" + "0" * 300
    f = tcc.compile(tcc.transform(f"input x\ny = x * {big} * {big} * 0.5 * x\n", "simplify"))
    assert np.isposinf(f(x=np.array(1.0))["y"])


def test_folding_a_power_of_huge_exponent_does_not_compute_it() -> None:
    # 3**100000000000 has 4.8e10 digits: simplify once tried to compute it to compare with 2**53
    d = tcc.grad("input x[n]\ny[i] = x[i] * 3**100000000000\n", of="y", wrt="x")
    assert "3**100000000000" in format_program(d)


# -- sizes whose buffers cannot exist ------------------------------------------

N40 = 2**40  # the largest size; an empty array binds it with no memory
OUTER = "input x[n, m]\noutput y[n, n]\ny[i, j] = 1 + sum[k](x[i, k]) + sum[k](x[j, k])\n"
LOCAL = "input x[n, m]\nlocal t[n, n]\nt[i, j] = sum[k](x[i, k] * x[j, k])\ns = sum[i, j](t[i, j])\n"
# two results of 5.2e18 bytes each: each one fits, together they do not
TWO = "input x[n, m]\noutput y[n, n], z[n, n]\ny[i, j] = 1 + sum[k](x[i, k])\nz[i, j] = 2 + sum[k](x[j, k])\n"


@pytest.mark.parametrize("source,n,message", [
    (OUTER, N40, f"result 'y' is too large: its shape ({N40}, {N40}) for these sizes has {N40**2} elements"),
    (LOCAL, N40, f"result 't' is too large: its shape ({N40}, {N40})"),
    (LOCAL, 2**32, f"result 't' is too large: its shape ({2**32}, {2**32}) for these sizes has {2**64} elements"),
    (OUTER, 2**30, "more than can be allocated"),  # 2**60 elements: the count fits int64, the bytes do not
    (TWO, 805306368, "the buffers of this call are too large"),
])
@pytest.mark.parametrize("how", ["interpreter", "cpu", "cuda-sim"])
def test_a_buffer_too_large_to_exist_is_refused_before_allocation(source: str, n: int, message: str, how: str) -> None:
    x = np.empty((n, 0))
    with pytest.raises(tcc.TccError) as info:
        if how == "interpreter":
            tcc.run(source, {"x": x})
        else:
            tcc.compile(source, how)(x=x)
    assert message in info.value.message
    assert "more than can be allocated" in info.value.message


@pytest.mark.parametrize("reference", [False, True])
def test_tcc_run_refuses_a_result_too_large_to_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     reference: bool) -> None:
    rc, err = _cli(tmp_path, capsys, OUTER, *(["--reference"] if reference else []), x=np.empty((N40, 0)))
    assert rc == 1
    assert err.startswith(f"error: result 'y' is too large: its shape ({N40}, {N40})")
    assert "Traceback" not in err


@pytest.mark.parametrize("sizes,message", [
    (f"n={2**32}", f"error: input 'x' is too large: its shape ({2**32}, {2**32})"),
    ("n=-1", "error: size 'n' must be non-negative, got -1"),
    ("n=1e400", "error: --sizes expects name=integer pairs like n=4,m=3, got 'n=1e400'"),
    ("n=4,n=5", "error: --sizes gives size 'n' twice, in 'n=4,n=5'"),
])
def test_tcc_check_refuses_sizes_it_cannot_draw_inputs_for(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           sizes: str, message: str) -> None:
    src = tmp_path / "p.tcc"
    src.write_text("input x[n, n]\ny = sum[i, j](x[i, j] * x[i, j])\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["check", str(src), "--of", "y", "--wrt", "x", "--sizes", sizes]) == 1
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert "Traceback" not in err


# -- outputs that cannot seek ----------------------------------------------------

SCALE = "input x[n]\ny[i] = 2 * x[i]\n"


def _run_to(tmp_path: Path, output: str) -> int:
    src = tmp_path / "p.tcc"
    src.write_text(SCALE, encoding="utf-8")
    np.savez(tmp_path / "in.npz", x=np.arange(4.0))
    return main(["run", str(src), "--inputs", str(tmp_path / "in.npz"), "--output", output])


def test_tcc_run_writes_to_dev_null(tmp_path: Path) -> None:
    # zipfile seeks back to patch each member's header: an internal error (struct.error) on a device
    assert _run_to(tmp_path, os.devnull) == 0


def test_tcc_run_writes_to_a_fifo_read_by_another_thread(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    try:
        rc = _run_to(tmp_path, str(fifo))
    finally:
        if reader.is_alive() and not received:  # unblock the reader if the writer never opened it
            with contextlib.suppress(OSError), open(fifo, "wb", opener=_nonblocking):
                pass
        reader.join()
    assert rc == 0
    assert fifo.exists() and not fifo.is_file()  # written in place, not renamed over
    with np.load(io.BytesIO(received[0])) as data:
        np.testing.assert_array_equal(data["y"], 2 * np.arange(4.0))


def _nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)


def test_tcc_run_writes_to_a_pipe_through_dev_stdout(tmp_path: Path) -> None:
    src = tmp_path / "p.tcc"
    src.write_text(SCALE, encoding="utf-8")
    np.savez(tmp_path / "in.npz", x=np.arange(4.0))
    proc = subprocess.run([sys.executable, "-m", "tcc", "run", str(src), "--inputs", str(tmp_path / "in.npz"),
                           "--output", "/dev/stdout", "--reference"], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    with np.load(io.BytesIO(proc.stdout)) as data:
        np.testing.assert_array_equal(data["y"], 2 * np.arange(4.0))


# ---------------------------------------------------------------------------
# Thread counts: 10^5 threads took two minutes to start and then failed in
# ``threading``; a count above tcc.runtime.compiled.MAX_THREADS is refused up front
# ---------------------------------------------------------------------------

SCALE = "input x[n]\ny[i] = 2 * x[i]\n"


def test_a_thread_count_beyond_the_limit_is_refused_before_compiling() -> None:
    from tcc.runtime.compiled import MAX_THREADS

    with pytest.raises(ValueError, match=rf"^threads=100000 is more than tcc runs: at most {MAX_THREADS} threads"):
        tcc.compile(SCALE, threads=100_000)
    f = tcc.compile(SCALE, threads=MAX_THREADS)  # the limit itself is allowed, and runs
    np.testing.assert_array_equal(f(x=np.arange(5.0))["y"], 2 * np.arange(5.0))
    with pytest.raises(ValueError, match=r"^threads=1025 is more than tcc runs"):
        f.threads = MAX_THREADS + 1
    assert f.threads == MAX_THREADS


def test_tcc_run_refuses_a_thread_count_beyond_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _cli(tmp_path, capsys, SCALE, "--threads", "100000", x=np.ones(3))
    assert rc == 1 and err.startswith("error: --threads=100000 is more than tcc runs: at most 1024 threads"), err
