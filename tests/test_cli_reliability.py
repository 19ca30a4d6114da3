"""The command line and the API entry points: no crash, wrong value or lost file.

Each test goes through ``tcc.cli.driver.main`` (what the ``tcc`` script runs) or
the public API, and checks the exact message and exit code of a refusal.
"""
from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tcc
from tcc.cli.driver import main

SCALE = """input x[n]
y[i] = 2 * x[i]
"""

# definition names that np.savez(fh, **arrays) takes as its own keywords
KEYWORD_NAMES = """input x[n]
file[i] = x[i] + 1
allow_pickle[i] = 2 * x[i]
"""


def _source(tmp_path: Path, text: str, name: str = "p.tcc") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _inputs(tmp_path: Path, **arrays: np.ndarray) -> str:
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    return str(path)


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# ---------------------------------------------------------------------------
# item 3: lowering options that contradict the compile call
# ---------------------------------------------------------------------------

DTYPE_CLASH = (
    "error: the pipeline's 'lower-llvm' has dtype=float64, but the program is compiled for dtype float32: "
    "give both the same dtype, or leave 'lower-llvm' out of the pipeline (it is appended with the compile options)"
)


def test_run_refuses_a_lower_llvm_dtype_other_than_dtype(tmp_path, capsys):
    src = _source(tmp_path, SCALE)
    inp = _inputs(tmp_path, x=np.arange(4.0))
    out = tmp_path / "o.npz"
    code = main(["run", src, "--inputs", inp, "--output", str(out), "--dtype", "float32",
                 "--passes", "infer-ranges,lower-loops,lower-llvm{dtype=float64}"])
    assert code == 1
    assert _err(capsys).strip() == DTYPE_CLASH
    assert not out.exists()


def test_compile_refuses_a_lower_llvm_dtype_other_than_dtype(tmp_path, capsys):
    src = _source(tmp_path, SCALE)
    code = main(["compile", src, "--emit", "llvm", "--dtype", "float32",
                 "--passes", "infer-ranges,lower-loops,lower-llvm{dtype=float64}"])
    assert code == 1
    assert _err(capsys).strip() == DTYPE_CLASH


def test_api_refuses_lowering_options_that_contradict_the_call():
    with pytest.raises(tcc.TccError) as info:
        tcc.compile(SCALE, dtype=np.float32, passes="infer-ranges,lower-loops,lower-llvm{dtype=float64}")
    assert info.value.message == DTYPE_CLASH.removeprefix("error: ")
    with pytest.raises(tcc.TccError) as info:
        tcc.compile(SCALE, target="cuda-sim", passes="infer-ranges,lower-loops,lower-llvm")
    assert info.value.message == (
        "the pipeline's 'lower-llvm' has target=cpu, but the program is compiled for target cuda-sim: "
        "give both the same target, or leave 'lower-llvm' out of the pipeline (it is appended with the compile options)"
    )


def test_agreeing_lowering_options_compile_and_run():
    f = tcc.compile(SCALE, dtype="float32", passes="infer-ranges,lower-loops,lower-llvm{dtype=float32}")
    y = f(x=np.arange(4, dtype=np.float32))["y"]
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [0, 2, 4, 6])


def test_emit_ptx_refuses_an_arch_other_than_arch(tmp_path, capsys):
    src = _source(tmp_path, SCALE)
    code = main(["compile", src, "--emit", "ptx", "--arch", "sm_80",
                 "--passes", "infer-ranges,lower-loops,lower-llvm{target=cuda arch=sm_90}"])
    assert code == 1
    assert _err(capsys).strip() == (
        "error: the pipeline's 'lower-llvm' has arch=sm_90, but the program is compiled for arch sm_80: "
        "give both the same arch, or leave 'lower-llvm' out of the pipeline (it is appended with the compile options)"
    )


# ---------------------------------------------------------------------------
# item 7: outputs are replaced whole or not at all
# ---------------------------------------------------------------------------


def _limit_file_size() -> None:
    # a write past 4 KiB fails with EFBIG (Python ignores SIGXFSZ)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def _tcc_with_small_file_limit(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tcc", *argv], preexec_fn=_limit_file_size, capture_output=True, text=True,
        timeout=120,
    )


def test_run_failing_to_write_keeps_the_previous_output(tmp_path):
    src = _source(tmp_path, SCALE)
    inp = _inputs(tmp_path, x=np.arange(10_000.0))  # an 80 KB result
    out = tmp_path / "o.npz"
    out.write_bytes(b"the previous, good output")
    r = _tcc_with_small_file_limit("run", src, "--inputs", inp, "--output", str(out))
    assert r.returncode == 1
    assert r.stderr == f"error: cannot write '{out}': File too large\n"
    assert out.read_bytes() == b"the previous, good output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npz", "o.npz", "p.tcc"]


def test_grad_failing_to_write_keeps_the_previous_output(tmp_path):
    # a gradient for each of 200 inputs: a derivative program well past the 4 KiB limit
    names = [f"x{k}" for k in range(200)]
    src = _source(tmp_path, "input " + ", ".join(f"{x}[n]" for x in names) + "\n"
                  + "f[i] = " + " + ".join(f"{x}[i]**2" for x in names) + "\n")
    out = tmp_path / "g.tcc"
    out.write_text("previous\n")
    r = _tcc_with_small_file_limit("grad", src, "--of", "f", "--wrt", ",".join(names), "-o", str(out))
    assert r.returncode == 1, r.stderr
    assert r.stderr == f"error: cannot write '{out}': File too large\n"
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.tcc", "p.tcc"]


def test_run_writes_definitions_named_like_savez_keywords(tmp_path, capsys):
    src = _source(tmp_path, KEYWORD_NAMES)
    inp = _inputs(tmp_path, x=np.arange(3.0))
    out = tmp_path / "o.npz"
    out.write_bytes(b"previous")
    assert main(["run", src, "--inputs", inp, "--output", str(out)]) == 0
    with np.load(out, allow_pickle=False) as data:
        assert sorted(data.files) == ["allow_pickle", "file"]
        np.testing.assert_array_equal(data["file"], [1, 2, 3])
        np.testing.assert_array_equal(data["allow_pickle"], [0, 2, 4])


def test_run_reference_writes_definitions_named_like_savez_keywords(tmp_path, capsys):
    src = _source(tmp_path, KEYWORD_NAMES)
    inp = _inputs(tmp_path, x=np.arange(3.0))
    out = tmp_path / "o.npz"
    assert main(["run", src, "--inputs", inp, "--output", str(out), "--reference"]) == 0
    with np.load(out, allow_pickle=False) as data:
        assert sorted(data.files) == ["allow_pickle", "file"]


def test_output_keeps_its_mode_and_its_symlink(tmp_path, capsys):
    src = _source(tmp_path, SCALE)
    real = tmp_path / "real.tcc"
    real.write_text("previous\n")
    real.chmod(0o640)
    link = tmp_path / "link.tcc"
    link.symlink_to(real.name)
    assert main(["grad", src, "--of", "y", "--wrt", "x", "-o", str(link)]) == 0
    assert link.is_symlink()
    assert "dx[" in real.read_text()
    assert real.stat().st_mode & 0o777 == 0o640


def test_new_output_gets_the_umask_mode(tmp_path, capsys):
    src = _source(tmp_path, SCALE)
    out = tmp_path / "new.tcc"
    old = os.umask(0o027)
    try:
        assert main(["compile", src, "-o", str(out)]) == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o640


def test_output_to_a_fifo_is_written_in_place(tmp_path, capsys):
    # renaming a temporary file over a FIFO (or /dev/null) would replace it
    src = _source(tmp_path, SCALE)
    assert main(["compile", src]) == 0
    expected = capsys.readouterr().out.encode()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so that opening to write does not block
    try:
        assert main(["compile", src, "-o", str(fifo)]) == 0
        received = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert received == expected


def test_output_into_a_missing_directory(tmp_path, capsys):
    src = _source(tmp_path, SCALE)
    out = tmp_path / "nodir" / "g.tcc"
    assert main(["grad", src, "--of", "y", "--wrt", "x", "-o", str(out)]) == 1
    assert _err(capsys) == f"error: cannot write '{out}': No such file or directory\n"


# ---------------------------------------------------------------------------
# item 8: bad .npz inputs are error lines, exit 1
# ---------------------------------------------------------------------------


def _run_with(tmp_path: Path, inp: str, *extra: str) -> int:
    return main(["run", _source(tmp_path, SCALE), "--inputs", inp, "--output", str(tmp_path / "o.npz"), *extra])


def test_truncated_npz(tmp_path, capsys):
    good = _inputs(tmp_path, x=np.arange(4.0))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(Path(good).read_bytes()[:100])
    assert _run_with(tmp_path, str(bad)) == 1
    assert _err(capsys) == f"error: cannot read '{bad}' as .npz: File is not a zip file\n"


def test_empty_npz(tmp_path, capsys):
    bad = tmp_path / "empty.npz"
    bad.write_bytes(b"")
    assert _run_with(tmp_path, str(bad)) == 1
    assert _err(capsys) == f"error: cannot read '{bad}' as .npz: No data left in file\n"


def test_damaged_member(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("x.npy", b"\x93NUMPY junk")
    assert _run_with(tmp_path, str(bad)) == 1
    assert _err(capsys).startswith(f"error: cannot read '{bad}' as .npz: member 'x': ")


def test_member_that_is_not_an_array(tmp_path, capsys):
    bad = tmp_path / "raw.npz"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("x", b"hello")
    assert _run_with(tmp_path, str(bad)) == 1
    assert _err(capsys) == f"error: input 'x' in '{bad}' is not a .npy array\n"


def test_pickled_inputs_are_not_loaded(tmp_path, capsys):
    objects = _inputs(tmp_path, x=np.array([None, 1.0, "a"], dtype=object))
    assert _run_with(tmp_path, objects) == 1
    assert _err(capsys) == f"error: input 'x' in '{objects}' is an array of Python objects, which tcc does not load\n"
    pickled = tmp_path / "pickled.npz"
    pickled.write_bytes(b"\x80\x04\x95" + b"\x00" * 20)
    assert _run_with(tmp_path, str(pickled)) == 1
    assert _err(capsys) == (
        f"error: cannot read '{pickled}' as .npz: it holds pickled Python objects, which tcc does not load\n"
    )


@pytest.mark.parametrize(
    "array",
    [
        np.array(["1", "2"]),
        np.array([1 + 2j, 3]),
        np.array([True, False]),
        np.array([1.5, 2.5], dtype=np.float16),
        np.array(["2024-01-01"], dtype="datetime64[D]"),
        np.zeros(2, dtype=[("a", "f8")]),
    ],
    ids=["str", "complex", "bool", "float16", "datetime", "record"],
)
def test_non_float_inputs_are_refused(tmp_path, capsys, array):
    inp = _inputs(tmp_path, x=array)
    assert _run_with(tmp_path, inp) == 1
    assert _err(capsys) == (
        f"error: input 'x' in '{inp}' has dtype {array.dtype}: tcc run takes float64, float32 or integer arrays, "
        f"converted to float64 (--dtype)\n"
    )


def test_float_and_integer_inputs_convert(tmp_path, capsys):
    out = tmp_path / "o.npz"
    for array, dtype in [
        (np.arange(3, dtype=np.float32), "float64"),
        (np.arange(3.0), "float32"),
        (np.arange(3, dtype=np.int64), "float64"),
        (np.arange(3, dtype=np.uint8), "float32"),
        (np.asfortranarray(np.arange(3.0)), "float64"),
    ]:
        assert _run_with(tmp_path, _inputs(tmp_path, x=array), "--dtype", dtype) == 0
        with np.load(out) as data:
            assert data["y"].dtype == np.dtype(dtype)
            np.testing.assert_array_equal(data["y"], [0, 2, 4])


def test_integers_past_the_exact_range_are_refused(tmp_path, capsys):
    inp = _inputs(tmp_path, x=np.array([1, 2**24 + 1], dtype=np.int32))
    assert _run_with(tmp_path, inp, "--dtype", "float32") == 1
    assert _err(capsys) == (
        f"error: input 'x' in '{inp}' holds the integer 16777217, beyond the float32 range of exact integers "
        f"(up to 16777216 in magnitude); convert it to floating point yourself\n"
    )
    assert _run_with(tmp_path, inp, "--dtype", "float64") == 0


def test_float64_past_float32_range_is_refused(tmp_path, capsys):
    inp = _inputs(tmp_path, x=np.array([1.0, 1e300]))
    assert _run_with(tmp_path, inp, "--dtype", "float32") == 1
    assert _err(capsys) == f"error: input 'x' in '{inp}' holds 1e+300, out of the range of float32\n"


# ---------------------------------------------------------------------------
# item 12: argument checks, byte-order mark, tabs under the caret
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, 3, b"input x[n]\ny[i] = x[i]\n", ["input x[n]"]],
                         ids=["None", "int", "bytes", "list"])
def test_api_refuses_what_is_not_a_program(value):
    for call, name in [(tcc.compile, "compile"), (tcc.transform, "transform")]:
        with pytest.raises(TypeError) as info:
            call(value)
        assert str(info.value) == (
            f"{name} expects program text, a path or a tcc Program, got {type(value).__name__}"
        )
    with pytest.raises(TypeError, match="^grad expects program text, a path or a tcc Program"):
        tcc.grad(value, of="y", wrt="x")
    with pytest.raises(TypeError, match="^run expects program text, a path or a tcc Program"):
        tcc.run(value, {})
    with pytest.raises(TypeError, match="^check expects program text, a path or a tcc Program"):
        tcc.check(value, "y", "x")
    for derivative in (tcc.jacobian, tcc.hessian, tcc.jvp):
        with pytest.raises(TypeError, match="^a derivative expects program text, a path or a tcc Program"):
            derivative(value, of="y", wrt="x")


@pytest.mark.parametrize("option, value, message", [
    ("eps", float("nan"), "the finite-difference step must be a finite number above 0, got nan"),
    ("eps", float("inf"), "the finite-difference step must be a finite number above 0, got inf"),
    ("eps", 0.0, "the finite-difference step must be a finite number above 0, got 0.0"),
    ("tol", -1.0, "the tolerance must be a finite number above 0, got -1.0"),
    ("tol", float("nan"), "the tolerance must be a finite number above 0, got nan"),
])
def test_api_check_refuses_out_of_range_numbers(option, value, message):
    """NaN passes `eps <= 0`: the API checks what the CLI's flags check."""
    with pytest.raises(tcc.TccError) as info:
        tcc.check(SCALE, "y", "x", **{option: value})
    assert info.value.message == message


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--eps", "nan", "must be a finite number above 0, got 'nan'"),
        ("--eps", "inf", "must be a finite number above 0, got 'inf'"),
        ("--eps", "0", "must be a finite number above 0, got '0'"),
        ("--tol", "-1", "must be a finite number above 0, got '-1'"),
        ("--tol", "nan", "must be a finite number above 0, got 'nan'"),
        ("--seed", "-1", "must be a non-negative integer, got '-1'"),
        ("--seed", "1.5", "invalid int value: '1.5'"),
    ],
)
def test_check_refuses_out_of_range_numbers(tmp_path, capsys, flag, value, message):
    src = _source(tmp_path, SCALE)
    assert main(["check", src, "--of", "y", "--wrt", "x", f"{flag}={value}"]) == 1
    err = _err(capsys)
    assert err.startswith("usage: tcc check")
    assert err.endswith(f"tcc check: error: argument {flag}: {message}\n")


def test_check_out_of_memory_is_an_error_line(tmp_path, capsys):
    src = _source(tmp_path, SCALE)
    assert main(["check", src, "--of", "y", "--wrt", "x", "--sizes", f"n={10**15}", "--target", "reference"]) == 1
    assert _err(capsys).startswith("error: out of memory: ")


def test_byte_order_mark_is_skipped(tmp_path, capsys):
    path = tmp_path / "bom.tcc"
    path.write_bytes(b"\xef\xbb\xbf" + SCALE.replace("2 * x[i]", "2 * q[i]").encode())
    assert main(["compile", str(path)]) == 1
    # columns count from after the mark, and the echoed line does not carry it
    assert _err(capsys) == f"{path}:2:12: error: undeclared tensor 'q'\ny[i] = 2 * q[i]\n           ^\n"
    assert str(tcc.parse("\ufeff" + SCALE)) == str(tcc.parse(SCALE))
    plain = _source(tmp_path, SCALE)
    assert main(["compile", plain]) == 0
    expected = capsys.readouterr().out
    path.write_bytes(b"\xef\xbb\xbf" + SCALE.encode())
    assert main(["compile", str(path)]) == 0
    assert capsys.readouterr().out == expected


def test_byte_order_mark_on_stdin(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tcc", "grad", "-", "--of", "y", "--wrt", "x"],
                       input=("\ufeff" + SCALE).encode(), capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert b"dx[" in r.stdout


def test_caret_under_a_tabbed_line_repeats_the_tabs(tmp_path, capsys):
    src = _source(tmp_path, "input x[n]\ny[i] =\t\tx[i] +\tq[i]\n")
    assert main(["compile", src]) == 1
    assert _err(capsys) == f"{src}:2:16: error: undeclared tensor 'q'\ny[i] =\t\tx[i] +\tq[i]\n      \t\t      \t^\n"
