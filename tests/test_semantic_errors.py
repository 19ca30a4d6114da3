"""Bad input through the command line: ``FILE:LINE:COL: error: message``, the line, a caret.

Every case runs ``tcc grad`` (and some ``tcc check``) through
:func:`tcc.cli.driver.main`, expects exit code 1, no traceback, and the exact
diagnostic: the message as the verifier / infer-ranges / autodiff / parser
words it and a caret under the exact column of the offending construct.
"""
from __future__ import annotations

import pytest

import tcc
from tcc.ir.diagnostics import TccError
from tcc.cli.driver import main


def run_cli(capsys, tmp_path, text, *flags, command="grad", name="prog.tcc"):
    path = tmp_path / name
    path.write_text(text)
    code = main([command, str(path), *flags])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    return code, out, err, str(path)


def expected(path: str, text: str, line: int, col: int, message: str) -> str:
    src_line = text.splitlines()[line - 1]
    return f"{path}:{line}:{col}: error: {message}\n{src_line}\n{' ' * (col - 1)}^\n"


# (name, program, flags, line, col, message); columns are 1-based, counted by hand
LOCATED = [
    (
        "undeclared",
        "input a[3, 5]\noutput f[3]\nf[i] = a[i, 0] + q[i]\n",
        ("--of", "f", "--wrt", "a"),
        3, 18,
        "undeclared tensor 'q'",
    ),
    (
        "arity-too-few",
        "input a[3, 5]\nf[i] = a[i]\n",
        ("--of", "f", "--wrt", "a"),
        2, 8,
        "'a' has 2 dimensions but a[i] gives 1 index",
    ),
    (
        "arity-too-many",
        "input a[3]\nf[i] = exp(a[i, i])\n",
        ("--of", "f", "--wrt", "a"),
        2, 12,
        "'a' has 1 dimension but a[i, i] gives 2 indices",
    ),
    (
        "implicit-sum-shadows",
        "input x[4]\nf[i] = x[l] + sum[l](x[l])\n",
        ("--of", "f", "--wrt", "x"),
        2, 1,
        "index 'l' of 'f' is summed implicitly (it is not on the left-hand side) and also names a sum inside it: "
        "rename one of them",
    ),
    (
        "non-affine",
        "input x[4]\noutput f[2, 2]\nf[i, j] = x[i*j]\n",
        ("--of", "f", "--wrt", "x"),
        3, 13,
        "index expression is not affine: i*j",
    ),
    (
        "out-of-bounds",
        "input d[5]\noutput f[3]\nf[i] = sum[k: 0..4](d[i + k])\n",
        ("--of", "f", "--wrt", "d"),
        3, 21,
        "access d[i + k] is out of bounds: i + k ranges over 0..6, but 'd' has extent 5",
    ),
    (
        "out-of-bounds-second-dim",
        "input a[3, 3]\noutput f[3]\nf[i] = sin(a[i, i + 1])\n",
        ("--of", "f", "--wrt", "a"),
        3, 12,
        "access a[i, i + 1] is out of bounds: i + 1 ranges over 1..3, but dimension 2 of 'a' has extent 3",
    ),
    (
        "syntax",
        "input x[4]\nf[i] = x[i] +* 2\n",
        ("--of", "f", "--wrt", "x"),
        2, 14,
        "expected an expression but found '*'",
    ),
    (
        "syntax-eol",
        "input x[4]\nf[i] = x[i] +\n",
        ("--of", "f", "--wrt", "x"),
        2, 14,
        "expected an expression but found end of line",
    ),
    (
        "redefined",
        "input a[3]\nf[i] = a[i]\nf[i] = a[i]\n",
        ("--of", "f", "--wrt", "a"),
        3, 1,
        "'f' is already defined",
    ),
    (
        "own-definition",
        "input a[3]\nf[i] = a[i] + f[i]\n",
        ("--of", "f", "--wrt", "a"),
        2, 15,
        "'f' is used in its own definition",
    ),
    (
        "used-before-definition",
        "input a[3]\nf[i] = a[i] + g[i]\ng[i] = a[i]\n",
        ("--of", "f", "--wrt", "a"),
        2, 15,
        "'g' is used before its definition",
    ),
    (
        "shadowing-sum",
        "input a[3]\nf[i] = sum[i](a[i])\n",
        ("--of", "f", "--wrt", "a"),
        2, 12,
        "sum index 'i' shadows an enclosing index",
    ),
    (
        "repeated-lhs-index",
        "input x[4]\nf[i, i] = x[i]\n",
        ("--of", "f", "--wrt", "x"),
        2, 6,
        "index 'i' appears twice on the left-hand side",
    ),
    (
        "output-without-definition",
        "input a[3]\noutput g[3]\nf[i] = a[i]\n",
        ("--of", "f", "--wrt", "a"),
        2, 8,
        "output 'g' has no definition",
    ),
    (
        "uninferable-extent",
        "input x[4]\nf[i, j] = sin(x[i])\n",
        ("--of", "f", "--wrt", "x"),
        2, 1,
        "cannot infer the extent of 'f' along index 'j': no access bounds it; declare it with 'output f[...]'",
    ),
    (
        "error-in-second-definition",
        "# comment line\ninput x[4]\n\ng[i] = x[i]**2\nf[i] = g[i] * x[i, 0]\n",
        ("--of", "f", "--wrt", "x"),
        5, 15,
        "'x' has 1 dimension but x[i, 0] gives 2 indices",
    ),
]


@pytest.mark.parametrize("name,text,flags,line,col,message", LOCATED, ids=[c[0] for c in LOCATED])
def test_located_errors(capsys, tmp_path, name, text, flags, line, col, message):
    code, out, err, path = run_cli(capsys, tmp_path, text, *flags)
    assert code == 1
    assert out == ""
    assert err == expected(path, text, line, col, message)


@pytest.mark.parametrize(
    "name,text,flags,line,col,message",
    [c for c in LOCATED if c[0] in ("undeclared", "out-of-bounds", "non-affine", "syntax")],
    ids=["undeclared", "non-affine", "out-of-bounds", "syntax"],
)
def test_check_reports_the_same(capsys, tmp_path, name, text, flags, line, col, message):
    code, out, err, path = run_cli(capsys, tmp_path, text, *flags, command="check")
    assert code == 1
    assert err == expected(path, text, line, col, message)


def test_out_of_bounds_symbolic(capsys, tmp_path):
    text = "input a[n]\nf[i] = a[n - i]\n"
    code, _, err, path = run_cli(capsys, tmp_path, text, "--of", "f", "--wrt", "a")
    assert code == 1
    assert err == expected(
        path, text, 2, 8, "access a[n - i] may be out of bounds: n - i ranges over 0..n, but 'a' has extent n"
    )


def test_api_raises_tcc_error_with_location():
    text = "input d[5]\noutput f[3]\nf[i] = sum[k: 0..4](d[i + k])\n"
    with pytest.raises(TccError) as info:
        tcc.grad(text, of="f", wrt=["d"])
    err = info.value
    assert (err.loc.line, err.loc.col) == (3, 21)
    assert err.message == "access d[i + k] is out of bounds: i + k ranges over 0..6, but 'd' has extent 5"
    assert str(err).startswith("<string>:3:21: error: access d[i + k]")


# ---------------------------------------------------------------------------
# command-line mistakes about --of / --wrt (no source location applies)

GOOD = "input x[4], y[3]\nf[i] = exp(x[i])\ng[i] = f[i] * 2\n"


@pytest.mark.parametrize(
    "flags,message",
    [
        (("--of", "x", "--wrt", "x"), "'x' is an input; --of must name a definition"),
        (("--of", "h", "--wrt", "x"), "no definition named 'h'"),
        (("--of", "f", "--wrt", "q"), "no input named 'q'"),
        (("--of", "f", "--wrt", "x,q"), "no input named 'q'"),
        (("--of", "g", "--wrt", "f"), "'f' is a definition; --wrt takes inputs of the program"),
        (("--of", "f", "--wrt", "x,x"), "--wrt names an input twice"),
        (("--of", "f", "--wrt", "x,"), "--wrt expects comma-separated names, got 'x,'"),
        (("--of", "f"), "tcc grad needs --of and --wrt (or a --passes pipeline that names them)"),
        (("--wrt", "x"), "tcc grad needs --of and --wrt (or a --passes pipeline that names them)"),
    ],
    ids=["of-input", "of-unknown", "wrt-unknown", "wrt-unknown-second", "wrt-definition", "wrt-twice",
         "wrt-empty-name", "no-wrt", "no-of"],
)
def test_flag_errors(capsys, tmp_path, flags, message):
    code, out, err, path = run_cli(capsys, tmp_path, GOOD, *flags)
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    # no location: the message stands alone (optionally prefixed by the file name)
    assert lines[0] in (f"error: {message}", f"{path}: error: {message}")


@pytest.mark.parametrize(
    "flags,message",
    [
        (("--of", "x", "--wrt", "x"), "'x' is not a definition of the program"),
        (("--of", "f", "--wrt", "q"), "'q' is not an input of the program"),
    ],
)
def test_check_flag_errors(capsys, tmp_path, flags, message):
    code, out, err, path = run_cli(capsys, tmp_path, GOOD, *flags, command="check")
    assert code == 1
    assert err.splitlines()[0] in (f"error: {message}", f"{path}: error: {message}")


def test_missing_file(capsys, tmp_path):
    path = tmp_path / "nope.tcc"
    code = main(["grad", str(path), "--of", "f", "--wrt", "x"])
    _, err = capsys.readouterr()
    assert code == 1
    assert "Traceback" not in err
    assert err.startswith(f"error: cannot read '{path}': ")


def test_good_program_still_works(capsys, tmp_path):
    # the same file with correct flags succeeds: the errors above are about the flags
    code, out, err, _ = run_cli(capsys, tmp_path, GOOD, "--of", "g", "--wrt", "x")
    assert code == 0, err
    assert out.splitlines()[1] == "output dx[4]"


def test_unknown_function(capsys, tmp_path):
    text = "input x[4]\nf[i] = foo(x[i])\n"
    code, out, err, path = run_cli(capsys, tmp_path, text, "--of", "f", "--wrt", "x")
    assert code == 1
    assert err == expected(
        path, text, 2, 8,
        "unknown function 'foo' (functions: exp, log, sqrt, sin, cos, tan, asin, acos, atan, sinh, cosh, tanh, "
        "abs, sign, relu, sigmoid)",
    )


def test_identical_accesses_are_located_at_the_offending_occurrence() -> None:
    """Hash-consing makes the two ``x[i]`` one node; the error points at the one in the 0..5 sum."""
    src = "input x[5]\nf = sum[i: 0..4](x[i]) + sum[i: 0..5](x[i])\n"
    with pytest.raises(TccError) as info:
        tcc.transform(tcc.parse(src), "infer-ranges")
    assert (info.value.loc.line, info.value.loc.col) == (2, 39)
    assert "i ranges over 0..5" in info.value.message
