"""Index inputs and indirect reads: ``index tok[n] < v``, ``emb[tok[i], j]``, CSR sums.

End to end through the public API: parsing and printing, the prover, the
interpreter, compiled code (CPU, cuda-sim, PTX), run-time validation of the
index arrays, and derivatives -- reverse mode through the inverse index the
``inverse-index`` pass declares, forward mode, second order -- against NumPy
(``np.add.at``) and finite differences.
"""
from __future__ import annotations

from dataclasses import replace

import re

import numpy as np
import pytest

import tcc
from compare import assert_matches_interpreter, random_inputs
from loop_eval import run_loops
from tcc.backends import ptx as ptx_backend
from tcc.build import DEFAULT_GPU_PIPELINE, DEFAULT_LOOP_PIPELINE, compile_pipeline
from tcc.cli.driver import main
from tcc.instruments import BaseInstrument
from tcc.reference.interpreter import evaluate
from tcc.ir.diagnostics import TccError
from tcc.ir.loops_parser import parse_loop_program
from tcc.ir.loops_verifier import verify_loops
from tcc.pipeline import grad_pipeline, run_pipeline
from tcc.runtime.compiled import CallError

EMB = "index tok[n] < v\ninput emb[v, d]\ny[i, j] = emb[tok[i], j]\n"
CSR = ("index ptr[m + 1] <= nnz, col[nnz] < n\ninput val[nnz], x[n]\n"
       "y[i] = sum[k: ptr[i]..ptr[i + 1] - 1](val[k] * x[col[k]])\n")
TARGETS = ["cpu", "cuda-sim"]


def csr_dense(ptr: np.ndarray, col: np.ndarray, val: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The dense matrix of CSR arrays, built with np.add.at (duplicate columns in a row add up, as in
    scipy.sparse), so that the tests need no SciPy."""
    out = np.zeros(shape)
    np.add.at(out, (np.repeat(np.arange(shape[0]), np.diff(ptr)), col), val)
    return out


def error_of(fn, *args, **kw) -> TccError:
    with pytest.raises(TccError) as info:
        fn(*args, **kw)
    return info.value


def csr(m: int, n: int, nnz_rows: list[int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row pointers with the given row lengths (0: an empty row), random columns and values."""
    ptr = np.concatenate(([0], np.cumsum(nnz_rows))).astype(np.int64)
    nnz = int(ptr[-1])
    return ptr, rng.integers(0, n, nnz), rng.standard_normal(nnz)


# ---------------------------------------------------------------------------
# Language: parse, print, prove
# ---------------------------------------------------------------------------


def test_declarations_print_and_parse_back() -> None:
    for src in (EMB, CSR, "input emb[v, d]\nindex tok[n] < v, t2[n, 2] <= v\ny[i, j] = emb[tok[i] + 0, j] + emb[t2[i, 1], j]\n"):
        p = tcc.parse(src)
        assert tcc.parse(str(p)) == p and str(tcc.parse(str(p))) == str(p)
    p = tcc.parse(CSR)
    assert [(d.name, d.bound) for d in p.inputs if d.is_index] == [
        ("ptr", ("<=", tcc.parse("input a[nnz]\n").inputs[0].extents[0])),
        ("col", ("<", tcc.parse("input a[n]\n").inputs[0].extents[0])),
    ]
    assert str(p).splitlines()[0] == "index ptr[m + 1] <= nnz, col[nnz] < n"
    # `index` stays a usable tensor name
    assert tcc.parse("input x[n]\nindex[i] = x[i]\n").definitions[0].name == "index"


def test_language_errors_are_located() -> None:
    e = error_of(tcc.parse, "input t[n], e[v]\ny[i] = e[t[i]]\n")
    assert (e.loc.line, e.loc.col) == (2, 10) and "must be declared with 'index' before it is read" in e.message
    e = error_of(tcc.parse, "index tok[n] < w\ninput e[v]\ny[i] = e[tok[i]]\n")
    assert (e.loc.line, e.loc.col) == (1, 16)
    assert e.message == "the bound w of index array 'tok' uses 'w', which is not a size of any input (sizes: n, v)"
    e = error_of(tcc.transform, "index tok[n] < v\ninput e[v]\ny[i] = e[tok[i, i]]\n")
    assert e.message == "index array 'tok' has 1 dimension but tok[i, i] gives 2"
    e = error_of(tcc.parse, "index tok[n] v\n")
    assert e.message == "expected '<' or '<=' and the bound of index array 'tok' but found 'v'"


def test_the_prover_uses_declared_ranges() -> None:
    e = error_of(tcc.transform, "index perm[n] < n\ninput x[n]\ny[i] = x[perm[i] + 1]\n")
    assert e.message == "access x[perm[i] + 1] may be out of bounds: perm[i] + 1 ranges over 1..n, but 'x' has extent n"
    assert (e.loc.line, e.loc.col) == (3, 8)
    tcc.transform("index perm[n] < n\ninput x[n + 1]\ny[i] = x[perm[i] + 1]\n")  # proved
    # a read of the index array itself is proved too, with its own location
    e = error_of(tcc.transform, "index tok[n] < v\ninput e[v]\noutput y[n]\ny[i] = e[tok[i + 1]]\n")
    assert e.message == "access tok[i + 1] may be out of bounds: i + 1 ranges over 1..n, but 'tok' has extent n"
    assert (e.loc.line, e.loc.col) == (4, 10)
    # a CSR row sum is in bounds by the pointers' range; `<= nnz` on the upper end is not
    e = error_of(tcc.transform, CSR.replace("ptr[i + 1] - 1]", "ptr[i + 1]]"))
    assert e.message == "access val[k] may be out of bounds: k ranges over 0..nnz, but 'val' has extent nnz"
    # extents are inferred through index arrays
    p = tcc.transform("index tok[n] < v\ninput e[v]\ny[i] = e[tok[i + 1]]\n")
    assert str(p.definition("y").extents[0]) == "n - 1"


# ---------------------------------------------------------------------------
# Values: interpreter, compiled code
# ---------------------------------------------------------------------------


def test_interpreter_against_numpy() -> None:
    rng = np.random.default_rng(0)
    tok = np.array([3, 0, 3, 1, 3])  # repeated tokens, unused rows 2 and 4
    emb = rng.standard_normal((5, 2))
    np.testing.assert_array_equal(tcc.run(EMB, {"tok": tok, "emb": emb})["y"], emb[tok])
    ptr, col, val = csr(4, 5, [2, 0, 3, 1], rng)  # an empty row
    x = rng.standard_normal(5)
    got = tcc.run(CSR, {"ptr": ptr, "col": col, "val": val, "x": x})["y"]
    np.testing.assert_allclose(got, csr_dense(ptr, col, val, (4, 5)) @ x, rtol=1e-14)
    assert got[1] == 0.0
    empty_max = "index ptr[m + 1] <= nnz\ninput val[nnz]\ny[i] = max[k: ptr[i]..ptr[i + 1] - 1](val[k])\n"
    out = tcc.run(empty_max, {"ptr": ptr, "val": val})["y"]
    assert out[1] == -np.inf and out[0] == val[:2].max()


PROGRAMS = {
    "embedding": EMB,
    "csr": CSR,
    "spmm": ("index ptr[m + 1] <= nnz, col[nnz] < n\ninput val[nnz], X[n, c]\n"
             "y[i, j] = sum[k: ptr[i]..ptr[i + 1] - 1](val[k] * X[col[k], j])\n"),
    "gather_matmul": "index tok[n] < v\ninput emb[v, d], W[d, k]\ny[i, c] = sum[j](emb[tok[i], j] * W[j, c])\n",
    "shifted": "index perm[n] < n\ninput x[n + 1]\ny[i] = x[perm[i] + 1]\n",
    "two_dim": "index t[a, b] < v\ninput e[v, d]\ny[i, j, c] = e[t[i, j], c] * 2\n",
    "nested": "index perm[nnz] < nnz, col[nnz] < n\ninput x[n]\ny[k] = x[col[perm[k]]]\n",
    "condition": "input x[n], s[v]\nindex tok[n] < v\ny[i] = where(tok[i] == 0, x[i], -x[i]) + s[tok[i]]\n",
    "unranged": "index col[nnz] < n\ninput x[n]\ns = sum[k](x[col[k]])\n",
    "bag": ("index ptr[b + 1] <= n, tok[n] < v\ninput emb[v, d]\n"
            "y[r, j] = sum[p: ptr[r]..ptr[r + 1] - 1](emb[tok[p], j])\n"),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_compiled_code_matches_the_interpreter(name: str, dtype: str, target: str) -> None:
    assert_matches_interpreter(PROGRAMS[name], dtype=dtype, target=target, threads=2)


@pytest.mark.parametrize("sizes", [{"n": 0}, {"v": 1, "n": 1, "d": 1}, {"n": 7, "v": 3, "d": 0}])
def test_compiled_embedding_at_edge_sizes(sizes: dict) -> None:
    assert_matches_interpreter(EMB, sizes={**{"n": 4, "v": 3, "d": 2}, **sizes}, threads=2)


def test_int32_index_arrays_are_accepted() -> None:
    rng = np.random.default_rng(1)
    ptr, col, val = csr(3, 4, [1, 0, 2], rng)
    x = rng.standard_normal(4)
    f = tcc.compile(CSR)
    want = f(ptr=ptr, col=col, val=val, x=x)["y"]
    np.testing.assert_array_equal(f(ptr=ptr.astype(np.int32), col=col.astype(np.uint32), val=val, x=x)["y"], want)


LOOP_PIPELINES = [
    "lower-loops,interchange", "lower-loops,hoist,fuse", "lower-loops,parallel", "lower-loops,peel,reduce-in-place",
    "lower-loops,fuse-rows,tile", "lower-loops,unroll-jam", "lower-loops,hoist,fuse,reuse-buffers,parallel",
    DEFAULT_LOOP_PIPELINE.removeprefix("infer-ranges,"), DEFAULT_GPU_PIPELINE.removeprefix("infer-ranges,"),
]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_loop_pass_on_programs_and_gradients(name: str) -> None:
    """Each L2 pass keeps the values, and no parallel loop races (the L2 evaluator checks every run)."""
    p = tcc.transform(PROGRAMS[name])
    wrt = [d.name for d in p.inputs if not d.is_index]
    programs = [p, tcc.grad(p, of=p.results()[0], wrt=wrt)]
    for program in programs:
        program = tcc.transform(program)
        sizes = {s: 3 for s in program.sizes()}
        inputs = random_inputs(program, sizes, seed=2)
        want = evaluate(program, inputs)
        for passes in LOOP_PIPELINES:
            loops = run_pipeline(program, passes)
            verify_loops(loops)
            assert parse_loop_program(str(loops)) == loops
            got = run_loops(loops, inputs)
            assert set(want) <= set(got)  # and the sides that blas outlines
            for k, v in want.items():
                np.testing.assert_allclose(got[k], v, rtol=1e-12, atol=1e-12, err_msg=f"{k} after {passes}")


def test_loops_print_parse_back_and_refuse_indirect_writes() -> None:
    loops = run_pipeline(tcc.parse(CSR), "infer-ranges,lower-loops,parallel")
    text = str(loops)
    assert "index ptr[m + 1] <= nnz, col[nnz] < n\n" in text and "for k in ptr[i]..ptr[i + 1] - 1 {" in text
    assert "parallel for i in 0..m - 1" in text
    assert parse_loop_program(text) == loops
    bad = text.replace("y[i] = y_acc", "y[col[i]] = y_acc")
    with pytest.raises(TccError, match=r"cannot write through an index array: y\[col\[i\]\] = \.\.\. \(only reads are indirect\)"):
        verify_loops(parse_loop_program(bad))
    # an index buffer's entry read as a value parses as an integer index value (what derivatives print) ...
    as_value = parse_loop_program(text.replace("val[k] * x[col[k]]", "val[k] * ptr[i]"))
    verify_loops(as_value)
    assert parse_loop_program(str(as_value)) == as_value and "val[k] * (ptr[i])" in str(as_value)
    # ... while a pass that builds a plain float read of one is refused
    from tcc.ir.expr import Access, Binary
    from tcc.ir.index import Affine
    from tcc.ir.loops import Accumulate
    from tcc.ir.loop_analysis import map_stmts

    def times_ptr(s):  # noqa: ANN001, ANN202
        return (Accumulate(s.target, s.indices, Binary("*", s.value, Access("ptr", (Affine.var("i"),)))),) \
            if isinstance(s, Accumulate) else (s,)
    plain = replace(loops, kernels=tuple(replace(k, body=map_stmts(k.body, times_ptr)) for k in loops.kernels))
    with pytest.raises(TccError, match="index buffer 'ptr' holds integers"):
        verify_loops(plain)


@pytest.mark.parametrize("passes", [None, "infer-ranges,blas,lower-loops,parallel"])
def test_blas_does_not_outline_an_indirect_read_as_a_matrix(passes: str | None) -> None:
    f = tcc.compile(PROGRAMS["gather_matmul"], passes=passes)
    text = str(f.loops)
    # the gathered rows are copied out by compiled code; only then a matmul reads them
    assert "y_lhs[i, j] = emb[tok[i], j]" in text and "extern matmul(y_lhs, W) -> y" in text
    assert_matches_interpreter(PROGRAMS["gather_matmul"], passes=passes)


# ---------------------------------------------------------------------------
# Run-time validation
# ---------------------------------------------------------------------------


BAD = [
    ({"tok": np.array([3, 0, 5, 1])}, "index input 'tok' has tok[2] = 5, outside its declared range 0..4 (tok < v = 5)"),
    ({"tok": np.array([3, -1, 0, 1])}, "index input 'tok' has tok[1] = -1, outside its declared range 0..4 (tok < v = 5)"),
    ({"tok": np.array([3.0, 0, 1, 1])}, "index input 'tok' must be an integer array (int64 or int32), got dtype float64"),
    ({"tok": np.array([True, False, True, True])}, "index input 'tok' must be an integer array (int64 or int32), got dtype bool"),
]


@pytest.mark.parametrize("target", ["reference", *TARGETS])
@pytest.mark.parametrize("bad, message", BAD)
def test_bad_index_values_are_refused(bad: dict, message: str, target: str) -> None:
    args = {"tok": np.array([3, 0, 2, 1]), "emb": np.ones((5, 2)), **bad}
    run = (lambda: tcc.run(EMB, args)) if target == "reference" else (lambda: tcc.compile(EMB, target)(**args))
    with pytest.raises(CallError) as info:
        run()
    assert info.value.message == message


def test_sum_bounds_must_be_nondecreasing() -> None:
    args = {"ptr": np.array([0, 3, 2, 4]), "col": np.zeros(4, np.int64), "val": np.ones(4), "x": np.ones(2)}
    message = ("index input 'ptr' bounds a sum, so it must be nondecreasing along its last axis, "
               "but ptr[1] = 3 > ptr[2] = 2")
    for run in (lambda: tcc.run(CSR, args), lambda: tcc.compile(CSR)(**args)):
        with pytest.raises(CallError) as info:
            run()
        assert info.value.message == message


def test_tcc_run_reports_bad_indices_without_a_traceback(tmp_path, capsys) -> None:
    src = tmp_path / "emb.tcc"
    src.write_text(EMB)
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, tok=np.array([3, 0, 2], np.int32), emb=np.arange(10.0).reshape(5, 2))
    np.savez(bad, tok=np.array([3, 0, 9]), emb=np.arange(10.0).reshape(5, 2))
    for extra in ([], ["--reference"], ["--target", "cuda-sim"]):
        out = tmp_path / "out.npz"
        assert main(["run", str(src), "--inputs", str(good), "--output", str(out), *extra]) == 0
        np.testing.assert_array_equal(np.load(out)["y"], np.arange(10.0).reshape(5, 2)[[3, 0, 2]])
        capsys.readouterr()
        assert main(["run", str(src), "--inputs", str(bad), "--output", str(out), *extra]) == 1
        err = capsys.readouterr().err
        assert err == "error: index input 'tok' has tok[2] = 9, outside its declared range 0..4 (tok < v = 5)\n"


# ---------------------------------------------------------------------------
# Derivatives
# ---------------------------------------------------------------------------


def test_gradient_of_an_embedding_is_a_gather_over_the_inverse_index() -> None:
    g = tcc.grad(EMB, of="y", wrt="emb")
    text = str(g)
    assert "index tok_perm[n] < n = inverse_perm(tok)\nindex tok_ptr[v + 1] <= n = inverse_ptr(tok)\n" in text
    assert text.endswith("demb[demb_0, demb_1] = sum[demb_z0_p: tok_ptr[demb_0]..tok_ptr[demb_0 + 1] - 1]"
                         "(dy[tok_perm[demb_z0_p], demb_1])\n")
    assert tcc.parse(text) == tcc.parse(str(tcc.parse(text)))
    f = tcc.compile(g)
    assert f.inputs == ("tok", "emb", "dy")  # the inverse index is the call's, not the caller's
    with pytest.raises(CallError, match="unknown argument 'tok_ptr'"):
        f(tok=np.zeros(2, np.int64), emb=np.ones((1, 1)), dy=np.ones((2, 1)), tok_ptr=np.zeros(2, np.int64))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tok, v", [([3, 0, 3, 1, 3], 6), ([], 3), ([], 0), ([0], 1), ([2, 2, 2], 4), ([69999, 3, 69999, 0], 70000)])
def test_embedding_gradient_against_add_at(tok: list, v: int, target: str) -> None:
    tok = np.array(tok, dtype=np.int64)
    rng = np.random.default_rng(len(tok))
    emb, dy = rng.standard_normal((v, 3)), rng.standard_normal((len(tok), 3))
    want = np.zeros((v, 3))
    np.add.at(want, tok, dy)
    g = tcc.grad(EMB, of="y", wrt="emb")
    np.testing.assert_allclose(tcc.compile(g, target)(tok=tok, emb=emb, dy=dy)["demb"], want, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(tcc.run(g, {"tok": tok, "emb": emb, "dy": dy})["demb"], want, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("rows", [[2, 0, 3, 1], [0, 0], [], [1], [0, 4]])
def test_csr_gradients_against_add_at(rows: list, target: str) -> None:
    rng = np.random.default_rng(sum(rows) + len(rows))
    n = 5
    ptr, col, val = csr(len(rows), n, rows, rng)
    x, dy = rng.standard_normal(n), rng.standard_normal(len(rows))
    g = tcc.grad(CSR, of="y", wrt="val,x")
    assert "= rows(ptr)" in str(g) and "= inverse_perm(col)" in str(g)
    row_of = np.repeat(np.arange(len(rows)), rows)
    dval = dy[row_of] * x[col]
    dx = np.zeros(n)
    np.add.at(dx, col, dy[row_of] * val)
    got = tcc.compile(g, target)(ptr=ptr, col=col, val=val, x=x, dy=dy)
    np.testing.assert_allclose(got["dval"], dval, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(got["dx"], dx, rtol=1e-13, atol=1e-14)


def test_csr_gradient_with_uncovered_non_zeros() -> None:
    """Row pointers that leave non-zeros outside every row (ptr[0] > 0): those get no gradient."""
    ptr, col = np.array([1, 2, 2]), np.array([0, 1, 1, 0])
    val, x, dy = np.array([1.0, 2.0, 3.0, 4.0]), np.array([5.0, 7.0]), np.array([10.0, 20.0])
    out = tcc.compile(tcc.grad(CSR, of="y", wrt="val,x"))(ptr=ptr, col=col, val=val, x=x, dy=dy)
    np.testing.assert_array_equal(out["dval"], [0.0, 70.0, 0.0, 0.0])
    np.testing.assert_array_equal(out["dx"], [0.0, 20.0])


@pytest.mark.parametrize("target", ["reference", *TARGETS])
def test_finite_differences_first_and_second_order(target: str) -> None:
    square = "index tok[n] < v\ninput emb[v, d]\ny[i, j] = emb[tok[i], j] ** 2 * emb[tok[i], 0]\n"
    positions = (None, {"n": 1}, {"n": 0})  # no tokens, one token
    rows = (None, {"m": 0}, {"m": 1}, {"nnz": 0}, {"nnz": 1, "n": 1})  # no rows, one row, no non-zeros
    cases = ((EMB, "emb", positions), (CSR, "val,x", rows), (square, "emb", positions),
             (PROGRAMS["bag"], "emb", positions), (PROGRAMS["spmm"], "val,X", rows))
    for src, wrt, edge_sizes in cases:
        for sizes in edge_sizes:
            for r in tcc.check(src, "y", wrt, target=target, sizes=sizes):
                assert r.ok, str(r)
    g = tcc.grad(square, of="y", wrt="emb")
    for r in tcc.check(g, "demb", "emb,dy", target=target):
        assert r.ok, str(r)
    gc = tcc.grad(CSR, of="y", wrt="val")
    for r in tcc.check(gc, "dval", "x,dy", target=target):
        assert r.ok, str(r)


def test_second_derivatives_stay_gathers() -> None:
    square = "index tok[n] < v\ninput emb[v, d]\ny[i, j] = emb[tok[i], j] ** 2\n"
    h = tcc.grad(tcc.grad(square, of="y", wrt="emb"), of="demb", wrt="emb")
    text = str(h)
    assert "= rows(tok_ptr)" in text and "sum[demb_z0_p: tok_ptr[demb2_0]..tok_ptr[demb2_0 + 1] - 1]" in text
    assert not re.search(r"sum\[[a-z_0-9]+: 0\.\.n - 1\]", text)  # no scan over all positions
    h2 = tcc.grad(tcc.grad(CSR, of="y", wrt="val"), of="dval", wrt="x")
    assert "sum[dval_0_p: col_ptr[dx_0]..col_ptr[dx_0 + 1] - 1]" in str(h2)


class _Collect(BaseInstrument):
    def __init__(self) -> None:
        self.states: list = []

    def after_pass(self, pass_, index, program) -> None:  # noqa: ANN001
        self.states.append((pass_.name, program))


@pytest.mark.parametrize("src, wrt", [(EMB, ["emb"]), (CSR, ["val", "x"]), (PROGRAMS["bag"], ["emb"])])
def test_every_pass_of_the_gradient_preserves_its_values(src: str, wrt: list) -> None:
    """Each intermediate program (and its printed, re-parsed text) computes the same gradient."""
    collect = _Collect()
    run_pipeline(tcc.parse(src), grad_pipeline("y", wrt), instruments=[collect])
    assert [n for n, _ in collect.states][-2:] == ["inverse-index", "cse"]
    deriv0 = collect.states[2][1]
    inputs = random_inputs(deriv0, {s: 4 for s in deriv0.sizes()}, seed=5)
    reference = None
    for name, state in collect.states[2:]:
        for prog in (state, run_pipeline(tcc.parse(str(state)), "infer-ranges")):
            values = evaluate(prog, inputs)
            got = {"d" + x: values["d" + x] for x in wrt}
            if reference is None:
                reference = got
                assert all(np.any(v != 0) for v in got.values())
            for g, v in got.items():
                np.testing.assert_allclose(v, reference[g], rtol=1e-13, atol=1e-13, err_msg=f"{g} after {name}")


def test_one_inverse_index_serves_every_derivative() -> None:
    both = "index tok[n] < v\ninput emb[v, d], w[v]\ny[i, j] = emb[tok[i], j] * w[tok[i]]\n"
    g = tcc.grad(both, of="y", wrt="emb,w")
    text = str(g)
    assert text.count("= inverse_ptr(tok)") == 1 and text.count("= inverse_perm(tok)") == 1
    for r in tcc.check(both, "y", "emb,w"):
        assert r.ok, str(r)


def test_forward_mode_reads_tangents_through_the_index() -> None:
    jvp = tcc.jvp(CSR, of="y", wrt="val,x")
    assert str(jvp.program).endswith(
        "dy[i] = sum[k: ptr[i]..ptr[i + 1] - 1](dval[k] * x[col[k]] + dx[col[k]] * val[k])\n")
    rng = np.random.default_rng(3)
    ptr, col, val = csr(3, 4, [2, 0, 2], rng)
    x, dval, dx = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal(4)
    a = csr_dense(ptr, col, val, (3, 4))
    da = csr_dense(ptr, col, dval, (3, 4))
    np.testing.assert_allclose(jvp(ptr=ptr, col=col, val=val, x=x, dval=dval, dx=dx), da @ x + a @ dx, rtol=1e-13)


def test_jacobian_and_hessian() -> None:
    rng = np.random.default_rng(4)
    ptr, col, val = csr(3, 4, [2, 0, 3], rng)
    x = rng.standard_normal(4)
    jac = tcc.jacobian(CSR, of="y", wrt="x")
    np.testing.assert_allclose(jac(ptr=ptr, col=col, val=val, x=x), csr_dense(ptr, col, val, (3, 4)),
                               rtol=1e-14, atol=1e-14)
    cube = "index tok[n] < v\ninput emb[v]\ny = sum[i](emb[tok[i]] ** 3)\n"
    tok, emb = np.array([2, 0, 2, 1, 2]), rng.standard_normal(5)  # token 3 and 4 unused, 2 repeated
    want = np.zeros((5, 5))
    np.add.at(want, (tok, tok), 6 * emb[tok])
    hess = tcc.hessian(cube, of="y", wrt="emb")
    assert "= inverse_perm(tok)" in str(hess.program)
    np.testing.assert_allclose(hess(tok=tok, emb=emb), want, rtol=1e-14)


def test_check_refuses_sizes_with_no_valid_index_values() -> None:
    e = error_of(tcc.check, CSR, "y", "x", sizes={"n": 0})
    assert e.message == "no valid entries for index input 'col' at these sizes: it has 4 entries, which must lie in 0..-1"


def test_index_inputs_are_not_differentiable() -> None:
    e = error_of(tcc.grad, EMB, of="y", wrt="tok")
    assert e.message == "'tok' is an index input: its entries are integers, and nothing is differentiated with respect to them"


# ---------------------------------------------------------------------------
# The GPU: PTX accepted by ptxas, no atomics in any derivative
# ---------------------------------------------------------------------------


@pytest.mark.skipif(ptx_backend.find_ptxas() is None, reason="the CUDA toolkit's ptxas was not found")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_derivative_ptx_has_no_atomics_and_assembles(dtype: str) -> None:
    programs = [tcc.grad(EMB, of="y", wrt="emb"), tcc.grad(CSR, of="y", wrt="val,x"),
                tcc.grad(tcc.grad(CSR, of="y", wrt="val"), of="dval", wrt="x")]
    for program in programs:
        text = str(run_pipeline(program, compile_pipeline(None, dtype, "cuda", "sm_80", 0)))
        assert "atom." not in text and "red." not in text
        assert re.search(r"ld\.global(\.nc)?\.[ub]64", text)  # the index arrays' i64 loads
        ptx_backend.ptxas(text, "sm_80")


@pytest.mark.parametrize("n, h", [(0, 0), (0, 4), (1, 0), (7, 2), (3000, 70000), (50000, 300)])
def test_inverse_index_is_the_stable_order_for_every_key_width(n: int, h: int) -> None:
    """The native counting sort against NumPy's stable argsort and bincount, keys above 16 bits included."""
    from tcc.index_inputs import inverse_index

    src = np.random.default_rng(n + h).integers(0, h + 1, n)
    ptr, perm = inverse_index(src, h)
    np.testing.assert_array_equal(perm, np.argsort(src, kind="stable"))
    np.testing.assert_array_equal(ptr, np.concatenate(([0], np.cumsum(np.bincount(src, minlength=h + 1)))))
    assert perm.dtype == ptr.dtype == np.int64


@pytest.mark.parametrize("ptr, h, want", [([2, 2, 5, 5, 9], 11, [4, 4, 1, 1, 1, 3, 3, 3, 3, 4, 4]),
                                          ([0], 3, [0, 0, 0]), ([0, 0], 0, []), ([0, 3], 3, [0, 0, 0])])
def test_rows_of_row_pointers_marks_entries_outside_every_row(ptr: list, h: int, want: list) -> None:
    from tcc.index_inputs import rows_of

    np.testing.assert_array_equal(rows_of(np.array(ptr, dtype=np.int64), h), want)


def test_equal_index_inputs_reuse_the_inverse_index_and_changed_ones_rebuild_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled program reuses the last call's validated and derived index arrays only while the
    index inputs are equal: an array changed in place, a different one, or other sizes rebuild them."""
    import tcc.index_inputs as ii

    built = []
    real = ii.check_index_inputs
    monkeypatch.setattr(ii, "check_index_inputs", lambda *a: built.append(1) or real(*a))
    g = tcc.compile(tcc.grad(EMB, of="y", wrt="emb"))
    rng = np.random.default_rng(9)
    tok = rng.integers(0, 50, 20000)          # above the sampling stride: a change between samples is found
    emb, dy = rng.standard_normal((50, 3)), rng.standard_normal((20000, 3))

    def want(t: np.ndarray) -> np.ndarray:
        out = np.zeros_like(emb)
        np.add.at(out, t, dy[: len(t)])
        return out

    for t, builds in [(tok, 1), (tok.copy(), 1), (tok.astype(np.int32), 1)]:
        np.testing.assert_allclose(g(tok=t, emb=emb, dy=dy)["demb"], want(t), rtol=1e-13)
        assert len(built) == builds
    tok[1] = (tok[1] + 1) % 50                # in place, off the sampled positions
    np.testing.assert_allclose(g(tok=tok, emb=emb, dy=dy)["demb"], want(tok), rtol=1e-13)
    assert len(built) == 2
    tok[1] = 50                                # now out of range: refused, never served from the cache
    with pytest.raises(CallError, match=r"tok\[1\] = 50, outside its declared range 0..49"):
        g(tok=tok, emb=emb, dy=dy)
    short = tok[:7] % 50
    np.testing.assert_allclose(g(tok=short, emb=emb, dy=dy[:7])["demb"], want(short), rtol=1e-13)
    assert len(built) == 4


def test_validation_reads_the_raw_data_of_a_private_copy() -> None:
    """A masked array's masked entries are entries (checked, not skipped); the call validates and uses
    its own copy, so an array changed after a call -- in place, even to an invalid value -- is
    validated again rather than served from the cache."""
    f = tcc.compile(EMB)
    emb = np.arange(6.0).reshape(3, 2)
    e = error_of(f, tok=np.ma.array([1, 10**9], mask=[False, True]), emb=emb)
    assert e.message == "index input 'tok' has tok[1] = 1000000000, outside its declared range 0..2 (tok < v = 3)"
    tok = np.array([2, 0, 1])
    np.testing.assert_array_equal(f(tok=tok, emb=emb)["y"], emb[tok])
    tok[1] = 3
    assert error_of(f, tok=tok, emb=emb).message.startswith("index input 'tok' has tok[1] = 3, outside")
    assert f(tok=[], emb=emb)["y"].shape == (0, 2)  # an empty list is an empty integer array


def test_a_scalar_index_declaration_is_refused() -> None:
    """Inside brackets a bare name is an index variable, so a scalar index input could never be read."""
    e = error_of(tcc.parse, "index s < v\ninput e[v]\ny = e[s]\n")
    assert (e.loc.line, e.loc.col) == (1, 9)
    assert e.message == "expected the extents of index array 's' ('s[1] < ...' for one integer, read as s[0]) but found '<'"
    f = tcc.compile("index s[1] < v\ninput e[v]\ny = e[s[0]]\n")
    assert f(s=np.array([1]), e=np.array([10.0, 20.0, 30.0]))["y"] == 20.0


def test_row_pointers_are_checked_along_the_axis_they_step_along() -> None:
    """``ptr[i, j]..ptr[i + 1, j] - 1`` steps along axis 0: that one must be nondecreasing, not the last;
    separate start and stop arrays need no order (an empty range sums to 0)."""
    cols = "index ptr[m + 1, b] <= nnz\ninput val[nnz]\ny[i, j] = sum[k: ptr[i, j]..ptr[i + 1, j] - 1](val[k])\n"
    val = np.array([1.0, 2.0, 4.0, 8.0])
    for target in ("reference", "cpu"):
        run = (lambda a: tcc.run(cols, a)) if target == "reference" else (lambda a: tcc.compile(cols)(**a))
        ptr = np.array([[0, 0], [2, 1], [4, 3]])   # decreasing along the last axis: fine
        np.testing.assert_array_equal(run({"ptr": ptr, "val": val})["y"], [[3.0, 1.0], [12.0, 6.0]])
        e = error_of(run, {"ptr": np.array([[0, 1], [2, 3], [1, 4]]), "val": val})
        assert e.message == ("index input 'ptr' bounds a sum, so it must be nondecreasing along axis 0, "
                             "but ptr[1, 0] = 2 > ptr[2, 0] = 1")
    segs = "index lo[m] <= nnz, hi[m] <= nnz\ninput val[nnz]\ny[i] = sum[k: lo[i]..hi[i] - 1](val[k])\n"
    args = {"lo": np.array([2, 0, 3]), "hi": np.array([4, 2, 1]), "val": val}
    np.testing.assert_array_equal(tcc.compile(segs)(**args)["y"], [12.0, 3.0, 0.0])
    np.testing.assert_array_equal(tcc.run(segs, args)["y"], [12.0, 3.0, 0.0])


@pytest.mark.parametrize("target", TARGETS)
def test_gradient_of_a_nonlinear_function_of_a_csr_row_sum(target: str) -> None:
    """``(row sum)**2`` differentiated inline: the inverse index's guard ``ptr_row[k] <= m - 1`` must
    enclose the comparisons that read ``ptr[ptr_row[k] + 1]`` (nested wheres, not one conjunction), and
    ``dval`` and ``dx`` read their own row's sum (the row of an element, and of a bucket's element,
    before rows are flattened) instead of scanning every non-zero."""
    src = CSR.replace("(val[k] * x[col[k]])\n", "(val[k] * x[col[k]])**2\n")
    g = tcc.grad(src, of="y", wrt="val,x")
    assert "0..nnz - 1" not in str(g)              # no scan over every non-zero, in dval or dx
    rng = np.random.default_rng(6)
    ptr, col, val = csr(4, 5, [2, 0, 3, 1], rng)
    col[1] = col[0]                                  # a repeated column in a row
    x, dy = rng.standard_normal(5), rng.standard_normal(4)
    rows = np.repeat(np.arange(4), np.diff(ptr))
    s = np.bincount(rows, val * x[col], minlength=4)
    want_dval = 2 * dy[rows] * s[rows] * x[col]
    want_dx = np.zeros(5)
    np.add.at(want_dx, col, 2 * dy[rows] * s[rows] * val)
    got = tcc.compile(g, target)(ptr=ptr, col=col, val=val, x=x, dy=dy)
    np.testing.assert_allclose(got["dval"], want_dval, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got["dx"], want_dx, rtol=1e-13, atol=1e-13)
    for r in tcc.check(src, "y", "val,x", target=target, sizes={"m": 3, "n": 4, "nnz": 6}):
        assert r.ok, str(r)


def test_check_leaves_out_elements_that_are_not_finite() -> None:
    """A max over an empty CSR row is -inf: its difference quotient is nan, so tcc.check leaves it
    out; the other rows are still checked (and an error in them still fails)."""
    src = CSR.replace("sum[k:", "max[k:")
    for seed in range(4):  # 2 non-zeros in 3 rows: every draw has an empty row
        for r in tcc.check(src, of="y", wrt="val,x", sizes={"m": 3, "n": 3, "nnz": 2}, seed=seed):
            assert r.ok and np.isfinite(r.max_rel_error), str(r)


@pytest.mark.parametrize("target", TARGETS)
def test_every_second_derivative_of_the_csr_product_compiles_and_checks(target: str) -> None:
    """The gradient program differentiated again w.r.t. everything, seed included (what
    gradgradcheck asks): a sorted entry read inside a guard and inside the read it protects is
    rewritten alike, and the rows of an inverse_ptr are bounded by its source's bound."""
    g = tcc.grad(CSR, of="y", wrt="val,x")
    assert "= rows(col_ptr)" not in str(g) or "<= n - 1 = rows(col_ptr)" in str(g)
    for of in ("dval", "dx"):
        for r in tcc.check(g, of, "val,x,dy", target=target, sizes={"m": 4, "n": 3, "nnz": 7}):
            assert r.ok, str(r)
    h = tcc.grad(g, of="dx", wrt="val")
    assert "index col_perm_ptr_row[nnz] <= nnz - 1 = rows(col_perm_ptr)" in str(h)
