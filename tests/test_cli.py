"""The command line: each subcommand's happy path and its error paths."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

from tcc.reference import fdcheck
from tcc.cli.driver import main

URBAN = """# urban.tcc — the example of section 6 of the Urban paper
input  a[3, 5], b[4, 5], c[3, 3], d[8]
output f[3, 4]
f[i, j] = exp(-sum[k: 0..4]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))
"""

SQUARE = """input a[n], s
output f[n]
f[i] = s * a[i]**2
"""

# hand-written derivative programs of SQUARE (for the checker, independent of autodiff)
SQUARE_GRAD = """input a[n], s, df[n]
output da[n], ds
da[i] = df[i] * s * 2 * a[i]
ds = sum[i](df[i] * a[i]**2)
"""
SQUARE_GRAD_WRONG = SQUARE_GRAD.replace("s * 2", "s * 3")


@pytest.fixture
def urban(tmp_path):
    path = tmp_path / "urban.tcc"
    path.write_text(URBAN)
    return str(path)


@pytest.fixture
def square(tmp_path):
    path = tmp_path / "square.tcc"
    path.write_text(SQUARE)
    return str(path)


def _parse(text, name="<out>"):
    from tcc.ir.parser import parse_program

    return parse_program(text, name)


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err


# ---------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------


def test_compile_default_pipeline(urban, capsys):
    assert main(["compile", urban]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert str(_parse(out)) == out
    assert "f[i, j] = exp(" in out


def test_compile_flags(urban, capsys):
    rc = main([
        "compile", urban, "--emit", "index", "--passes", "infer-ranges", "--print-pipeline",
        "--time-passes", "--verify-each", "--dump-before", "infer-ranges", "--dump-after", "all",
    ])
    assert rc == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines[0] == "infer-ranges"
    assert "# -----// IR before infer-ranges //----- #" in lines
    assert "# -----// IR after infer-ranges //----- #" in lines
    assert any(line.split()[:1] == ["total"] for line in lines)
    assert any(line.split()[:1] == ["infer-ranges"] and line.endswith("%") for line in lines)


def test_compile_output_file_and_dump_dir(urban, tmp_path, capsys):
    out_path = tmp_path / "out.tcc"
    dump = tmp_path / "dumps"
    assert main(["compile", urban, "-o", str(out_path), "--dump-dir", str(dump)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""
    assert sorted(os.listdir(dump)) == ["00-input.tcc", "01-infer-ranges.tcc"]
    for f in os.listdir(dump):
        _parse((dump / f).read_text(), f)
    assert (dump / "01-infer-ranges.tcc").read_text().split("\n", 1)[1] == out_path.read_text()


def test_compile_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(SQUARE))
    assert main(["compile", "-"]) == 0
    out, _ = capsys.readouterr()
    assert "f[i] = s * a[i]**2" in out


def test_compile_unknown_emit(urban, capsys):
    assert main(["compile", urban, "--emit", "bogus"]) == 1
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus'" in err
    _no_traceback(err)


# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------


def test_run_writes_every_definition(tmp_path, capsys):
    prog = tmp_path / "p.tcc"
    prog.write_text("input a[n], s\ng[i] = a[i] * s\nh = sum[i](g[i])\n")
    a = np.arange(4.0)
    np.savez(tmp_path / "in.npz", a=a, s=np.array(2.0), unused=np.zeros(3))
    out = tmp_path / "out.npz"
    assert main(["run", str(prog), "--inputs", str(tmp_path / "in.npz"), "--output", str(out), "--target", "cpu"]) == 0
    with np.load(out) as data:
        assert sorted(data.files) == ["g", "h"]
        np.testing.assert_allclose(data["g"], 2 * a)
        np.testing.assert_allclose(data["h"], 12.0)
    assert capsys.readouterr().err == ""


def test_run_urban_matches_numpy(urban, tmp_path):
    rng = np.random.default_rng(1)
    a, b, c, d = (rng.uniform(0.25, 0.75, s) for s in [(3, 5), (4, 5), (3, 3), (8,)])
    np.savez(tmp_path / "in.npz", a=a, b=b, c=c, d=d)
    assert main(["run", urban, "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "o.npz")]) == 0
    ref = np.empty((3, 4))
    for i in range(3):
        for j in range(4):
            ref[i, j] = np.exp(-sum((a[i, k] + b[j, k]) ** 2 * c[i, i] + d[i + k] ** 3 for k in range(5)))
    with np.load(tmp_path / "o.npz") as data:
        np.testing.assert_allclose(data["f"], ref, rtol=1e-12)


def test_run_missing_input(square, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", a=np.ones(3))
    assert main(["run", square, "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "o.npz")]) == 1
    err = capsys.readouterr().err
    assert "missing input 's'" in err
    _no_traceback(err)


def test_run_missing_npz_and_bad_target(square, tmp_path, capsys):
    assert main(["run", square, "--inputs", str(tmp_path / "none.npz"), "--output", str(tmp_path / "o.npz")]) == 1
    err = capsys.readouterr().err
    assert f"error: cannot read '{tmp_path / 'none.npz'}': No such file or directory" in err
    assert main(["run", square, "--output", "o.npz", "--target", "tpu"]) == 1
    err = capsys.readouterr().err
    assert "invalid choice: 'tpu'" in err
    _no_traceback(err)


# ---------------------------------------------------------------------------
# check (with hand-written derivatives: independent of the autodiff passes)
# ---------------------------------------------------------------------------


def _fake_derivative(monkeypatch, text):
    from tcc.passes.infer_ranges import InferRanges
    from tcc.pipeline import run_pipeline

    def derivative_program(program, of, wrt, passes=None, instruments=()):
        return run_pipeline(program, [InferRanges()]), _parse(text, "<grad>")

    monkeypatch.setattr(fdcheck, "derivative_program", derivative_program)


def test_check_gradients_ok_and_wrong(monkeypatch):
    src = _parse(SQUARE)
    _fake_derivative(monkeypatch, SQUARE_GRAD)
    res = fdcheck.check_gradients(src, "f", ["a", "s"])
    assert [(r.wrt, r.gradient, r.elements, r.directions, r.ok) for r in res] == [
        ("a", "da", 5, 0, True), ("s", "ds", 1, 0, True),
    ]
    assert all(r.max_rel_error < 1e-8 for r in res)
    _fake_derivative(monkeypatch, SQUARE_GRAD_WRONG)
    res = fdcheck.check_gradients(src, "f", ["a", "s"])
    assert [r.ok for r in res] == [False, True]
    assert res[0].max_rel_error == pytest.approx(0.5, rel=1e-6)  # 3/2 of the right value: |an - fd| / |fd|
    assert str(res[0]).startswith("da: max relative error 5.0e-01 (5 elements checked) FAILED")


def test_check_gradients_sampled_for_large_tensors(monkeypatch):
    _fake_derivative(monkeypatch, "input a[n], s, df[n]\noutput da[n]\nda[i] = df[i] * s * 2 * a[i]\n")
    (r,) = fdcheck.check_gradients(_parse(SQUARE), "f", ["a"], sizes={"n": 600})
    assert (r.elements, r.directions, r.ok) == (64, 16, True)
    assert "(64 elements and 16 directions checked) ok" in str(r)


def test_check_gradients_errors(monkeypatch):
    from tcc.ir.diagnostics import TccError

    _fake_derivative(monkeypatch, SQUARE_GRAD)
    src = _parse(SQUARE)
    with pytest.raises(TccError, match="unknown size 'm' \\(program sizes: n\\)"):
        fdcheck.check_gradients(src, "f", ["a"], sizes={"m": 3})
    with pytest.raises(TccError, match="'g' is not a definition"):
        fdcheck.check_gradients(src, "g", ["a"])
    with pytest.raises(TccError, match="'q' is not an input"):
        fdcheck.check_gradients(src, "f", ["q"])


def test_default_sizes():
    assert fdcheck.default_sizes(["n", "m", "p", "q", "r", "t"]) == {"n": 5, "m": 4, "p": 6, "q": 3, "r": 7, "t": 5}


def test_check_command_with_fake_derivative(square, monkeypatch, capsys):
    _fake_derivative(monkeypatch, SQUARE_GRAD)
    assert main(["check", square, "--of", "f", "--wrt", "a,s", "--sizes", "n=3", "--seed", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("da: max relative error ") and lines[0].endswith("(3 elements checked) ok")
    assert lines[1].endswith("(1 element checked) ok")
    assert lines[2].startswith("worst relative error ") and lines[2].endswith(" ok")
    _fake_derivative(monkeypatch, SQUARE_GRAD_WRONG)
    assert main(["check", square, "--of", "f", "--wrt", "a,s"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("FAILED") and "FAILED (da)" in lines[2]


def test_check_bad_cli_values(square, capsys):
    assert main(["check", square, "--of", "f", "--wrt", "a", "--sizes", "n4"]) == 1
    err = capsys.readouterr().err
    assert "error: --sizes expects name=integer pairs like n=4,m=3, got 'n4'" in err
    assert main(["check", square, "--of", "f", "--wrt", "a", "--tol", "big"]) == 1
    err = capsys.readouterr().err
    assert "argument --tol: invalid float value: 'big'" in err
    assert main(["check", square, "--of", "f", "--wrt", "a,,s"]) == 1
    assert "--wrt expects comma-separated names" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# grad and check through the real pipeline (need every pass of the grad pipeline)
# ---------------------------------------------------------------------------


def test_grad_prints_derivative_program(urban, capsys):
    assert main(["grad", urban, "--of", "f", "--wrt", "a,d"]) == 0
    out, err = capsys.readouterr()
    prog = _parse(out)
    assert prog.outputs == ("da", "dd")
    assert prog.input("df") is not None
    assert str(prog) == out


def test_grad_output_file_dumps_and_second_order(urban, tmp_path, capsys):
    first = tmp_path / "g.tcc"
    dump = tmp_path / "d"
    rc = main(["grad", urban, "--of", "f", "--wrt", "a", "-o", str(first), "--dump-dir", str(dump),
               "--verify-each", "--print-pipeline"])
    assert rc == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (
        "infer-ranges,contract-order,autodiff{of=f wrt=a},sum-liberation,index-solve,range-bound,simplify,factor-linear,inverse-index,cse"
    )
    assert sorted(os.listdir(dump))[:4] == ["00-input.tcc", "01-infer-ranges.tcc", "02-contract-order.tcc", "03-autodiff.tcc"]
    assert len(os.listdir(dump)) == 11
    # closed under derivation: grad of the grad
    assert main(["grad", str(first), "--of", "da", "--wrt", "a"]) == 0
    second = _parse(capsys.readouterr().out)
    assert second.outputs == ("da2",)
    assert second.input("dda") is not None


def test_grad_custom_passes_fill_of_wrt(urban, capsys):
    assert main(["grad", urban, "--of", "f", "--wrt", "d", "--passes", "infer-ranges,autodiff", "--dump-after",
                 "autodiff"]) == 0
    out, err = capsys.readouterr()
    assert "# -----// IR after autodiff{of=f wrt=d} //----- #" in err
    assert _parse(out).outputs == ("dd",)


def test_check_command_real_pipeline(urban, capsys):
    assert main(["check", urban, "--of", "f", "--wrt", "a,d"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("da: max relative error ") and lines[0].endswith("(15 elements checked) ok")
    assert lines[1].startswith("dd: ") and lines[1].endswith("(8 elements checked) ok")
    assert lines[2].startswith("worst relative error ")


def test_api_grad_and_check():
    import tcc

    p = tcc.parse(URBAN)
    dp = tcc.grad(p, "f", "a,d")
    assert dp.outputs == ("da", "dd")
    assert all(r.ok for r in tcc.check(p, "f", ["a", "d"]))


# ---------------------------------------------------------------------------
# error paths: exit 1, FILE:LINE:COL, a caret, never a traceback
# ---------------------------------------------------------------------------


def test_missing_file(capsys):
    for cmd in (["compile", "nope.tcc"], ["grad", "nope.tcc", "--of", "f", "--wrt", "a"],
                ["check", "nope.tcc", "--of", "f", "--wrt", "a"], ["run", "nope.tcc", "--output", "o.npz"]):
        assert main(cmd) == 1
        err = capsys.readouterr().err
        assert err == "error: cannot read 'nope.tcc': No such file or directory\n"


def test_syntax_error_location_and_caret(tmp_path, capsys):
    bad = tmp_path / "bad.tcc"
    bad.write_text("input a[3]\nf[i] = a[i] +* 2\n")
    assert main(["compile", str(bad)]) == 1
    err = capsys.readouterr().err
    first, line, caret = err.splitlines()[:3]
    assert first.startswith(f"{bad}:2:") and ": error: " in first
    assert line == "f[i] = a[i] +* 2"
    assert caret.strip() == "^"
    _no_traceback(err)


def test_bad_passes(urban, capsys):
    assert main(["compile", urban, "--passes", "infer-ranges,nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unknown pass 'nope' (known passes: ")
    assert main(["compile", urban, "--passes", "infer-ranges{"]) == 1
    assert "malformed pass pipeline" in capsys.readouterr().err
    assert main(["compile", urban, "--dump-after", "nope"]) == 1
    assert "unknown pass 'nope' in --dump-after" in capsys.readouterr().err


def test_pass_error_shows_source_line(tmp_path, capsys):
    bad = tmp_path / "oob.tcc"
    bad.write_text("input a[3]\noutput f[5]\nf[i] = a[i + 1]\n")
    assert main(["compile", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}:3:")
    assert "f[i] = a[i + 1]" in err.splitlines()
    _no_traceback(err)


def test_grad_needs_of_and_wrt(urban, capsys):
    assert main(["grad", urban, "--of", "f"]) == 1
    assert "needs --of and --wrt" in capsys.readouterr().err


def test_internal_error_exit_2(urban, monkeypatch, capsys):
    from tcc.cli import driver

    def boom(session, args):
        raise RuntimeError("kaboom")

    monkeypatch.setitem(driver.COMMANDS, "compile", boom)
    assert main(["compile", urban]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcc: internal error: RuntimeError: kaboom")
    assert "Traceback" in err


def test_usage_errors_exit_1(capsys):
    assert main([]) == 1
    assert main(["frobnicate"]) == 1
    assert main(["--help"]) == 0
    assert "usage: tcc" in capsys.readouterr().out


def test_python_dash_m(tmp_path):
    bad = tmp_path / "bad.tcc"
    bad.write_text("input a[3]\nf[i] = a[i] +* 2\n")
    proc = subprocess.run([sys.executable, "-m", "tcc", "compile", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"{bad}:2:")
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


# ---------------------------------------------------------------------------
# passes
# ---------------------------------------------------------------------------


def _listing(capsys) -> dict[str, list[str]]:
    """``tcc passes`` output by pass: the header line's words, then the option lines."""
    assert main(["passes"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    blocks: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith(" "):
            blocks[last].append(line.strip())
        else:
            last = line.split()[0]
            blocks[last] = [line]
    return blocks


def test_passes_lists_every_builtin_with_level_options_and_summary(capsys):
    import dataclasses

    from tcc.passes import BUILTIN_PASSES
    from tcc.registry import get_pass_class

    blocks = _listing(capsys)
    assert list(blocks) == sorted(blocks)
    for name in BUILTIN_PASSES:
        cls = get_pass_class(name)
        header, *options = blocks[name]
        level = f"{cls.level} -> {cls.produces}" if cls.produces else str(cls.level)
        assert cls.summary, f"pass {name} has no summary"
        assert header.split(None, 1)[1].split() == level.split() + cls.summary.split(), header
        assert [o.split("=", 1)[0] for o in options] == [f.name.replace("_", "-") for f in dataclasses.fields(cls)]


def test_passes_shows_option_defaults_and_values(capsys):
    blocks = _listing(capsys)
    assert blocks["llvm-opt"][0].split()[:2] == ["llvm-opt", "llvm"]
    assert blocks["llvm-opt"][1].split() == ["opt-level=3", "int"]
    assert blocks["lower-llvm"][0].split()[1:4] == ["loops", "->", "llvm"]
    assert ["dtype=float64", "float64|float32"] in [o.split() for o in blocks["lower-llvm"][1:]]
    assert ["contract=false", "true|false"] in [o.split() for o in blocks["lower-llvm"][1:]]
    assert blocks["fuse"][1].split() == ["full=false", "true|false"]
    assert blocks["parallel"][1].split() == ["depth=1", "int"]
    assert blocks["autodiff"][2].split() == ["wrt=", "str,..."]


def test_passes_reports_an_unloadable_external_pass(monkeypatch, capsys):
    import importlib.metadata

    class BrokenEP:
        name, value, group = "t-broken", "missing_pkg.mod:Broken", "tcc.passes"

        def load(self):
            raise ModuleNotFoundError("No module named 'missing_pkg'")

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [BrokenEP()])
    assert main(["passes"]) == 1
    out, err = capsys.readouterr()
    _no_traceback(err)
    broken = [line.split(None, 2) for line in out.splitlines() if line.startswith("t-broken")]
    assert broken == [["t-broken", "?", "error: ModuleNotFoundError: No module named 'missing_pkg'"]]
    assert any(line.startswith("llvm-opt ") for line in out.splitlines())  # the others are still listed


def test_passes_subprocess():
    proc = subprocess.run([sys.executable, "-m", "tcc", "passes"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "    opt-level=3  int" in proc.stdout.splitlines()


def test_passes_lists_a_registered_pass(capsys):
    import dataclasses
    from typing import Literal

    from tcc.passes.pass_base import Level, Pass
    from tcc.registry import register_pass, unregister_pass

    probe = dataclasses.make_dataclass(
        "Probe",
        [("limit", int | None, dataclasses.field(default=None)),
         ("names", tuple[str, ...], dataclasses.field(default=("a", "b"))),
         ("mode", Literal["x", "y"], dataclasses.field(default="y"))],
        bases=(Pass,), frozen=True, namespace={"name": "t-probe", "level": Level.LOOPS},
    )

    @dataclasses.dataclass(frozen=True)
    class Unresolved(Pass):  # annotations naming this function's locals: shown as written
        name = "t-unresolved"
        level = Level.INDEX
        summary = "a plug-in whose annotations get_type_hints cannot resolve"

        mode: Literal["x", "y"] = "x"

    register_pass(probe)
    register_pass(Unresolved)
    try:
        blocks = _listing(capsys)
    finally:
        unregister_pass("t-probe")
        unregister_pass("t-unresolved")
    assert [line.split() for line in blocks["t-probe"]] == [
        ["t-probe", "loops", "(no", "summary)"], ["limit=None", "int", "|", "None"], ["names=a,b", "str,..."], ["mode=y", "x|y"],
    ]
    assert blocks["t-unresolved"][1].split() == ["mode=x", "Literal['x',", "'y']"]
