"""``assume CONSTRAINT``: affine promises about sizes that the prover uses and every call must keep."""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.cli.driver import main
from tcc.ir.diagnostics import TccError
from tcc.runtime.compiled import CallError

SRC = """input x[n], A[m, n]
assume n >= 1 and m <= n
assume m >= 1
y[i] = x[0] * sum[j](A[i, j] * x[j])
"""


def data(n: int, m: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n * 10 + m)
    return {"x": rng.standard_normal(n), "A": rng.standard_normal((m, n))}


def test_prints_and_parses_back() -> None:
    p = tcc.parse(SRC)
    text = str(p)
    assert "assume n >= 1 and m <= n\nassume m >= 1\n" in text
    assert str(tcc.parse(text)) == text
    assert str(tcc.transform(p, "infer-ranges")).count("assume") == 2


def test_the_prover_uses_it() -> None:
    without = "input x[n], A[m, n]\ny[i] = x[0] * sum[j](A[i, j] * x[j])\n"
    with pytest.raises(TccError, match=r"access x\[0\] may be out of bounds.*say so with 'assume n >= 1'"):
        tcc.transform(tcc.parse(without), "infer-ranges")
    tcc.transform(tcc.parse(SRC), "infer-ranges")  # proved with the assumption


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_calls_that_keep_it_agree_with_the_interpreter(target: str) -> None:
    f = tcc.compile(SRC, target)
    for n, m in [(1, 1), (3, 2), (7, 7)]:
        x = data(n, m)
        want = x["x"][0] * (x["A"] @ x["x"])
        np.testing.assert_allclose(f(**x)["y"], want, rtol=1e-12)
        np.testing.assert_allclose(tcc.run(tcc.parse(SRC), x)["y"], want, rtol=1e-12)


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
@pytest.mark.parametrize("n, m, broken, values", [
    (0, 0, "n >= 1 and m <= n", "n = 0, m = 0"),
    (2, 3, "n >= 1 and m <= n", "n = 2, m = 3"),
    (2, 0, "m >= 1", "m = 0"),
])
def test_calls_that_break_it_raise_a_call_error_naming_it(target: str, n: int, m: int, broken: str, values: str) -> None:
    f = tcc.compile(SRC, target)
    with pytest.raises(CallError) as info:
        f(**data(n, m))
    assert info.value.message == f"these sizes violate 'assume {broken}' ({values})"
    with pytest.raises(TccError, match=f"these sizes violate 'assume {broken}'"):
        tcc.run(tcc.parse(SRC), data(n, m))


@pytest.mark.parametrize("reference", [False, True])
def test_cli_run_reports_the_line(tmp_path, capsys, reference: bool) -> None:  # noqa: ANN001
    path = tmp_path / "p.tcc"
    path.write_text(SRC)
    np.savez(tmp_path / "in.npz", **data(2, 3))
    code = main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "o.npz"),
                 *(["--reference"] if reference else [])])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert err == (f"{path}:2:1: error: these sizes violate 'assume n >= 1 and m <= n' (n = 2, m = 3)\n"
                   "assume n >= 1 and m <= n\n^\n")


@pytest.mark.parametrize("text, col, message", [
    ("input x[n]\nassume n >= 1 or n == 0\ny = x[0]\n", 1,
     "'assume' takes comparisons of sizes joined by 'and' (not 'or' or 'not')"),
    ("input x[n]\nassume not n < 1\ny = x[0]\n", 1,
     "'assume' takes comparisons of sizes joined by 'and' (not 'or' or 'not')"),
    ("input x[n]\nassume k >= 1\ny = x[0]\n", 1,
     "'assume' constrains sizes, and 'k' is not a size of this program (sizes: n)"),
    ("input x[n]\nassume n >\ny = x[0]\n", 11, "expected an index expression but found end of line"),
])
def test_bad_assumptions_are_located(text: str, col: int, message: str) -> None:
    with pytest.raises(TccError) as info:
        tcc.parse(text)
    assert info.value.message == message
    assert (info.value.loc.line, info.value.loc.col) == (2, col)


def test_a_tensor_may_still_be_called_assume() -> None:
    p = tcc.parse("input x[n]\nassume[i] = 2 * x[i]\nz = assume[0]\nassume n >= 1\n")
    assert [d.name for d in p.definitions] == ["assume", "z"]
    x = np.arange(3.0)
    assert tcc.compile(p)(x=x)["z"] == 0.0


def test_derivatives_keep_and_check_it() -> None:
    g = tcc.grad(tcc.parse(SRC), of="y", wrt="x,A")
    assert "assume n >= 1 and m <= n" in str(g)
    f = tcc.compile(g)
    x = data(3, 2)
    dy = np.ones(2)
    got = f(**x, dy=dy)
    np.testing.assert_allclose(got["dA"], x["x"][0] * np.outer(dy, x["x"]), rtol=1e-12)
    with pytest.raises(CallError, match="violate 'assume n >= 1 and m <= n'"):
        f(**data(2, 3), dy=np.ones(3))
    results = tcc.check(tcc.parse("input x[n], y[m]\nassume m >= n + 2\nz[i] = x[i] * y[i + 2] * y[i]\noutput z[n]\n"),
                        of="z", wrt="x,y")
    assert all(r.ok for r in results)
