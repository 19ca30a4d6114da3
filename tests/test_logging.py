"""Diagnostics for pass authors: per-pass loggers, ``tcc -v`` and ``TCC_LOG``.

The passes log at DEBUG why they declined a rewrite; nothing is printed
unless the command line asks (docs/logging.md).
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

import tcc
from tcc.cli.driver import main
from tcc.ir.loops_parser import parse_loop_program
from tcc.passes.pass_base import Level

# f: a matrix product too small for BLAS; g: a sum that is no product; h: a product inside tanh (outlined)
PROGRAM = """input a[4, 5], b[5, 6], c[40, 50], e[50, 60]
f[i, j] = sum[k](a[i, k] * b[k, j])
g[i, j] = sum[k](c[i, k] * e[k, j] + c[i, j])
h[i, j] = tanh(sum[k](c[i, k] * e[k, j]))
"""
# a scalar result: its kernel is not one loop, so parallel leaves it alone
SCALAR = """input x[n]
s = sum[i](x[i] * x[i])
"""

BLAS_TINY = ("tcc.passes.blas: debug: f: not a matrix product as a whole: "
             "tiny: 4 * 6 * 5 = 120 multiply-adds < min-work 32768; looking at its sums")
BLAS_FACTOR = ("tcc.passes.blas: debug: g: not a matrix product as a whole: "
               "the factor c[i, k] * e[k, j] + c[i, j] depends on both i and j; looking at its sums")
BLAS_DONE = "tcc.passes.blas: info: h: h_mm outlined"
FUSE = ("tcc.passes.fuse: debug: kernels f and g not fused: "
        "their outer loops i and i have different ranges (0..3 and 0..39)")
PARALLEL_EXTERN = ("tcc.passes.parallel: debug: kernel h_mm: not marked parallel: "
                   "an external kernel (the runtime splits only a one-loop kernel)")


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.delenv("TCC_LOG", raising=False)
    paths = {}
    for name, text in (("prog", PROGRAM), ("scalar", SCALAR)):
        paths[name] = tmp_path / f"{name}.tcc"
        paths[name].write_text(text)
    return {k: str(v) for k, v in paths.items()}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_tcc_logger_has_a_null_handler_and_no_other():
    handlers = logging.getLogger("tcc").handlers
    assert [type(h) for h in handlers] == [logging.NullHandler]


def test_without_a_flag_nothing_goes_to_stderr(files, capsys):
    rc, out, err = run_cli(capsys, "compile", files["prog"], "--emit", "loops")
    assert rc == 0 and out.startswith("# tcc loops")
    assert err == ""


def test_verbose_shows_why_blas_fuse_and_parallel_declined(files, capsys):
    _, quiet, _ = run_cli(capsys, "compile", files["prog"], "--emit", "loops")
    rc, out, err = run_cli(capsys, "-v", "compile", files["prog"], "--emit", "loops")
    assert rc == 0
    assert out == quiet  # the program printed is the same, byte for byte
    lines = err.splitlines()
    for line in (BLAS_TINY, BLAS_FACTOR, BLAS_DONE, FUSE, PARALLEL_EXTERN):
        assert line in lines
    assert "tcc.pipeline: debug: pass 5 of 19: blas" in lines
    # the sum itself is named, with the reason the first index order failed
    assert ("tcc.passes.blas: debug: f: sum[k: 0..4](a[i, k] * b[k, j]) not a matmul over (i, j): "
            "tiny: 4 * 6 * 5 = 120 multiply-adds < min-work 32768") in lines
    assert all(line.startswith("tcc.") for line in lines)


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_says_why_parallel_left_a_scalar_kernel(files, capsys, where):
    args = ["compile", files["scalar"], "--emit", "loops"]
    rc, _, err = run_cli(capsys, *(["--verbose"] + args if where == "before" else args + ["-v"]))
    assert rc == 0
    assert ("tcc.passes.parallel: debug: kernel s: not marked parallel: "
            "3 statements, not one loop (the runtime splits only a one-loop kernel)") in err.splitlines()


def test_the_handler_lasts_one_command(files, capsys):
    run_cli(capsys, "-v", "compile", files["prog"], "--emit", "loops")
    logger = logging.getLogger("tcc")
    assert [type(h) for h in logger.handlers] == [logging.NullHandler]
    assert logger.level == logging.NOTSET
    _, _, err = run_cli(capsys, "compile", files["prog"], "--emit", "loops")
    assert err == ""


def test_tcc_log_info_shows_rewrites_but_not_reasons(files, capsys, monkeypatch):
    monkeypatch.setenv("TCC_LOG", "INFO")
    rc, _, err = run_cli(capsys, "compile", files["prog"], "--emit", "loops")
    assert rc == 0
    assert err.splitlines() == [BLAS_DONE]


def test_invalid_tcc_log_warns_and_compiles(files, capsys, monkeypatch):
    _, quiet, _ = run_cli(capsys, "compile", files["prog"], "--emit", "loops")
    monkeypatch.setenv("TCC_LOG", "loud")
    rc, out, err = run_cli(capsys, "compile", files["prog"], "--emit", "loops")
    assert rc == 0 and out == quiet
    assert err == "tcc: warning: ignoring TCC_LOG='loud': expected one of debug, info, warning, error\n"


def test_verbose_wins_over_tcc_log(files, capsys, monkeypatch):
    monkeypatch.setenv("TCC_LOG", "loud")
    rc, _, err = run_cli(capsys, "-v", "compile", files["prog"], "--emit", "loops")
    assert rc == 0
    assert "warning" not in err and BLAS_TINY in err.splitlines()


def test_tcc_log_debug_in_a_fresh_process(files):
    env = dict(os.environ, TCC_LOG="debug")
    proc = subprocess.run([sys.executable, "-m", "tcc", "compile", files["prog"], "--emit", "loops"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert BLAS_TINY in lines and PARALLEL_EXTERN in lines


def test_parallel_names_the_buffer_that_races(caplog):
    program = parse_loop_program("""sizes n
input x[n]
output y[n], s
kernel k {
  for i in 1..n - 1 {
    y[i] = y[i - 1] + x[i]
  }
}
kernel t {
  for i in 0..n - 1 {
    s += x[i]
  }
}
""", "race.loops")
    with caplog.at_level(logging.DEBUG, logger="tcc.passes.parallel"):
        out = tcc.run_pipeline(program, "parallel", start=Level.LOOPS)
    assert str(out) == str(program)  # nothing marked
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("tcc.passes")] == [
        ("tcc.passes.parallel", "DEBUG", "kernel k: loop i not marked parallel: y is written but no index position "
         "is i times a constant plus sizes, the same in every access: y[i - 1], y[i]"),
        ("tcc.passes.parallel", "DEBUG", "kernel t: loop i not marked parallel: "
         "s is written and has no index (a scalar result): every iteration touches it"),
    ]


def test_hoist_says_why_a_reduction_stays(files, capsys):
    _, _, err = run_cli(capsys, "-v", "compile", files["prog"], "--emit", "loops")
    assert ("tcc.passes.hoist: debug: kernel f: reduction f_acc not extracted: "
            "it depends on every enclosing loop") in err.splitlines()


def pass_lines(caplog, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def test_fuse_names_the_buffer_shared_across_iterations(caplog):
    program = parse_loop_program("""sizes n
input x[n]
output y[n], z[n]
kernel a {
  for i in 0..n - 1 {
    y[i] = x[i]
  }
}
kernel b {
  for i in 0..n - 1 {
    z[i] = y[n - 1 - i]
  }
}
""", "fuse.loops")
    with caplog.at_level(logging.DEBUG, logger="tcc.passes.fuse"):
        out = tcc.run_pipeline(program, "fuse", start=Level.LOOPS)
    assert len(out.kernels) == 2
    assert pass_lines(caplog, "tcc.passes.fuse") == [
        "kernels a and b not fused: y is written by one and accessed by the other outside the fused iteration over i"]


def test_hoist_says_why_an_invariant_let_stays(caplog):
    program = parse_loop_program("""sizes n, m
input x[n]
output y[n, m]
kernel k {
  for i in 0..n - 1 {
    for j in 0..m - 1 {
      let v = x[5]
      y[i, j] = v
    }
  }
}
""", "hoist.loops")
    with caplog.at_level(logging.DEBUG, logger="tcc.passes.hoist"):
        tcc.run_pipeline(program, "hoist{factor=false}", start=Level.LOOPS)
    assert pass_lines(caplog, "tcc.passes.hoist") == [
        "kernel k: invariant let v stays in loop j: a load is not provably in bounds in front of the loop"]
