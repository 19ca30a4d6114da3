"""No L2 pass may move a read out of the guard that proves it in bounds.

An index array may hold a value that is a valid entry but not a valid
position everywhere: ``rows(ptr)`` gives ``n`` for a non-zero that no row
holds (those before ``ptr[0]`` or from ``ptr[n]`` on), an index declared
``<= n`` may hold ``n``.  A program reads through such a value only under a
``where`` that rules it out (``where(r[d] == i, ... ptr[r[d] + 1] ...)``), and
the compiled code must keep it so: a pass that moves the read (``hoist``
extracting the inner sum into a kernel over every ``d``) may do so only when
the read is in bounds on the whole domain it moves to, or it must take the
guard along.  Compiled code does not check indices, so the failure is a read
past a buffer: garbage or a segfault.

Each program here is compiled with the default pipeline and run on valid
data that holds such values, two ways:

* by the strict L2 evaluator (``tests/loop_eval.py``), which bounds-checks
  every load and every read of an index array: a read out of bounds is an
  ``IndexError`` whatever lies past the buffer;
* as native code in a subprocess (a segfault is a failed test, not a crashed
  run), compared with the reference interpreter.

The second-derivative CSR case also checks that the fix keeps the hoist
where it is safe: the extracted kernel is still made, under the guard it
needs.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pytest

import tcc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop_eval import run_loops  # noqa: E402

#: The non-zeros of row i weighted by the sum of their row; r = rows(ptr) is n
#: for a non-zero no row holds, where ``ptr[r[d] + 1]`` would be ``ptr[n + 1]``.
ROW_SUMS = """
index ptr[n + 1] <= nnz
index r[nnz] <= n = rows(ptr)
input w[nnz], val[nnz]
output y[n]
y[i] = sum[d: 0..nnz - 1](where({guard}, w[d] * sum[k: ptr[r[d]]..ptr[r[d] + 1] - 1](val[k]), 0))
"""

#: A gather through two index arrays: ``perm[d] == n`` is a valid entry
#: (``<= n``) but ``col[n]`` is past the end of ``col``.
NESTED_GATHER = """
index perm[m] <= n
index col[n] < p
input u[p, q], w[m]
output y[n]
y[i] = sum[d: 0..m - 1](where({guard}, w[d] * sum[k: 0..q - 1](exp(u[col[perm[d]], k])), 0))
"""

#: An SpMV-like program whose row sum is inside the loss: its second
#: derivative with respect to ``val`` sums, for each non-zero, the row sum of
#: the row holding it, under ``ptr_row[d] <= m - 1``.
CSR_LOSS = """
index ptr[m + 1] <= nnz, col[nnz] < n
input val[nnz], x[n]
f = sum[i](exp(sum[k: ptr[i]..ptr[i + 1] - 1](val[k] * x[col[k]])))
"""


def csr_second_derivative() -> tcc.Program:
    """``tcc grad`` twice: d/dval of d f/dval, a Hessian-vector product."""
    first = tcc.grad(tcc.parse(CSR_LOSS), of="f", wrt=["val"])
    return tcc.grad(tcc.parse(str(first)), of="dval", wrt=["val"])


def row_inputs(n: int, nnz: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Valid CSR data where the first half of the non-zeros lie before ``ptr[0]``
    (no row holds them: ``rows(ptr)`` is ``n`` there) and every row but the
    first is empty."""
    rng = np.random.default_rng(seed)
    ptr = np.full(n + 1, nnz, dtype=np.int64)
    ptr[0] = nnz // 2
    return {"ptr": ptr, "w": rng.random(nnz), "val": rng.random(nnz)}


def gather_inputs(m: int, n: int, p: int, q: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``perm`` holds ``n`` (the valid value that is no position of ``col``) at every other entry."""
    rng = np.random.default_rng(seed)
    perm = rng.integers(0, n, size=m)
    perm[::2] = n
    return {"perm": perm, "col": rng.integers(0, p, size=n), "u": rng.random((p, q)), "w": rng.random(m)}


def csr_inputs(m: int, n: int, nnz: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Valid CSR data where half the non-zeros lie before ``ptr[0]`` and two after
    ``ptr[m]``: no row holds those (``rows(ptr)`` is ``m`` there)."""
    rng = np.random.default_rng(seed)
    inner = np.sort(rng.integers(nnz // 2, nnz - 2, size=m - 1))
    ptr = np.concatenate([[nnz // 2], inner, [nnz - 2]]).astype(np.int64)
    return {"ptr": ptr, "col": rng.integers(0, n, size=nnz), "val": rng.random(nnz) * 0.3,
            "x": rng.random(n) * 0.3, "df": np.array(1.0), "ddval": rng.random(nnz)}


def assert_strictly_in_bounds(program: tcc.Program, inputs: Mapping[str, np.ndarray]) -> None:
    """The compiled L2 program, run by the bounds-checking evaluator, reads
    nothing out of bounds and agrees with the interpreter."""
    loops = tcc.compile(program).loops
    got = run_loops(loops, inputs)  # IndexError on any read past a buffer
    want = tcc.run(program, dict(inputs))
    for name, value in got.items():
        np.testing.assert_allclose(value, want[name], rtol=1e-12, atol=1e-12, err_msg=name)


_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import tcc
    program = tcc.parse(open(sys.argv[1]).read())
    f = tcc.compile(program)
    for path in sys.argv[2:]:
        with np.load(path) as data:
            inputs = {k: data[k] for k in data.files}
        got = f(**inputs)
        want = tcc.run(program, inputs)
        for name, value in want.items():
            if not np.allclose(got[name], value, rtol=1e-10, atol=1e-12):
                print(f"{path}: {name}: compiled {got[name]} vs interpreter {value}")
                sys.exit(3)
""")


def assert_native_run_agrees(source: str, data_sets: Sequence[Mapping[str, np.ndarray]], tmp_path: Path) -> None:
    """Native code, in a subprocess so that a segfault fails the test, agrees with the
    interpreter on each data set.  What a read past a buffer finds there depends on
    the heap, so several sizes are tried: one of them meets an unmapped page."""
    src = tmp_path / "p.tcc"
    src.write_text(source)
    paths = []
    for k, inputs in enumerate(data_sets):
        paths.append(str(tmp_path / f"in{k}.npz"))
        np.savez(paths[-1], **inputs)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(src), *paths], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (
        f"compiled code exited {done.returncode} (-11/139: a segfault, a read out of bounds)\n"
        f"{done.stdout}{done.stderr[-2000:]}"
    )


# ---------------------------------------------------------------------------
# The guard pins the dropped loop (r[d] == i): the read stays under it
# ---------------------------------------------------------------------------


def test_row_sum_under_row_guard_reads_in_bounds() -> None:
    program = tcc.parse(ROW_SUMS.format(guard="r[d] == i"))
    assert_strictly_in_bounds(program, row_inputs(3, 8))


def test_row_sum_under_row_guard_runs_natively(tmp_path: Path) -> None:
    # 15 rows, 3000 non-zeros of which 1500 lie before ptr[0]: the unguarded
    # kernel read ptr[16] and looped to whatever it found there (a segfault)
    data = [row_inputs(n, nnz) for n, nnz in ((15, 3000), (7, 3000), (31, 1500), (3, 4000))]
    assert_native_run_agrees(ROW_SUMS.format(guard="r[d] == i"), data, tmp_path)


def test_row_sum_under_row_guard_is_not_computed_for_every_nonzero() -> None:
    text = str(tcc.compile(tcc.parse(ROW_SUMS.format(guard="r[d] == i"))).loops)
    for kernel in text.split("kernel ")[1:]:
        if "ptr[r[d] + 1]" in kernel:  # the row sum: wherever it is, it is under a test that r[d] is a row
            head = kernel.split("ptr[r[d] + 1]")[0]
            assert "if " in head, kernel


# ---------------------------------------------------------------------------
# The guard does not pin it (r[d] <= i): the hoist keeps a guard it implies
# ---------------------------------------------------------------------------


def test_row_sum_under_inequality_guard_reads_in_bounds() -> None:
    program = tcc.parse(ROW_SUMS.format(guard="r[d] <= i"))
    assert_strictly_in_bounds(program, row_inputs(3, 8))


# ---------------------------------------------------------------------------
# A nested gather: the guard keeps perm[d] a position of col
# ---------------------------------------------------------------------------


def test_nested_gather_under_index_guard_reads_in_bounds() -> None:
    program = tcc.parse(NESTED_GATHER.format(guard="perm[d] == i"))
    assert_strictly_in_bounds(program, gather_inputs(m=9, n=4, p=3, q=2))


def test_nested_gather_under_index_guard_with_a_second_test() -> None:
    # the guard that protects col[perm[d]] is one conjunct of a test whose other part needs i
    program = tcc.parse(NESTED_GATHER.format(guard="perm[d] <= n - 1 and i <= perm[d]"))
    assert_strictly_in_bounds(program, gather_inputs(m=9, n=4, p=3, q=2))


# ---------------------------------------------------------------------------
# The second derivative of a CSR program
# ---------------------------------------------------------------------------


def test_csr_second_derivative_reads_in_bounds() -> None:
    """Every kernel, the hoisted ones included, reads nothing out of bounds.

    The kernel computing ``dval2`` tests ``ptr_row[d] <= m - 1 and
    ptr[ptr_row[d]] <= .. and .. <= ptr[ptr_row[d] + 1] - 1``, nested guards
    that ``lower-loops`` merges into one condition: its later parts are in
    bounds only where the first holds, so they are evaluated only there (the
    strict evaluator and the LLVM lowering both short-circuit)."""
    loops = tcc.compile(csr_second_derivative()).loops
    assert any(b.role == "temp" for b in loops.buffers), str(loops)
    assert "ptr_row[dval_0] <= m - 1 and ptr[ptr_row[dval_0]] <= dval2_0" in str(loops)
    assert_strictly_in_bounds(csr_second_derivative(), csr_inputs(m=3, n=4, nnz=12))


#: Runs a program with the validated copy of ``ptr`` (index inputs are copied
#: before the call: tcc.compiler.index_inputs) placed so that its last entry
#: ends a page and the next page is inaccessible: any read past it segfaults.
_GUARD_PAGE_CHILD = textwrap.dedent("""
    import ctypes, mmap, sys
    import numpy as np
    import tcc
    import tcc.index_inputs as ii

    def before_guard_page(arr):
        page = mmap.PAGESIZE
        size = -(-arr.nbytes // page) * page
        area = mmap.mmap(-1, size + page)
        base = ctypes.addressof(ctypes.c_char.from_buffer(area))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        assert libc.mprotect(base + size, page, 0) == 0  # PROT_NONE
        out = np.frombuffer(area, dtype=arr.dtype, count=arr.size, offset=size - arr.nbytes).reshape(arr.shape)
        out[...] = arr
        return out

    checked = ii.check_index_input
    ii.check_index_input = lambda decl, *a, **k: (before_guard_page if decl.name == "ptr" else np.asarray)(
        checked(decl, *a, **k))
    program = tcc.parse(open(sys.argv[1]).read())
    with np.load(sys.argv[2]) as data:
        inputs = {k: data[k] for k in data.files}
    got = tcc.compile(program)(**inputs)
    want = tcc.run(program, inputs)
    for name, value in want.items():
        assert np.array_equal(got[name], value), name
""")


def test_merged_guard_is_evaluated_left_to_right_in_native_code(tmp_path: Path) -> None:
    """Nested guards, merged into one condition whose second part reads an index
    array at a position only the first part keeps in bounds: ``r[d] == n`` holds
    for non-zeros no row holds, and ``ptr[r[d] + 1]`` is then ``ptr[n + 1]``,
    one past the end, here on an inaccessible page."""
    source = """
index ptr[n + 1] <= nnz
index r[nnz] <= n = rows(ptr)
input w[nnz]
output y[nnz]
y[d] = where(r[d] <= n - 1, where(ptr[r[d] + 1] - ptr[r[d]] >= 2, w[d], 0), 0)
"""
    inputs = row_inputs(511, 64)
    inputs.pop("val")
    assert " and ptr[r[d] + 1]" in str(tcc.compile(tcc.parse(source)).loops)
    assert_strictly_in_bounds(tcc.parse(source), inputs)
    (tmp_path / "p.tcc").write_text(source)
    np.savez(tmp_path / "in.npz", **inputs)
    done = subprocess.run([sys.executable, "-c", _GUARD_PAGE_CHILD, str(tmp_path / "p.tcc"), str(tmp_path / "in.npz")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode} (-11: a read past ptr)\n{done.stdout}{done.stderr[-2000:]}"


def test_csr_second_derivative_runs_natively(tmp_path: Path) -> None:
    data = [csr_inputs(m, 7, nnz) for m, nnz in ((15, 300), (7, 400), (31, 300), (63, 250))]
    assert_native_run_agrees(str(csr_second_derivative()), data, tmp_path)


def test_csr_second_derivative_keeps_its_hoist_under_the_row_test() -> None:
    """The row sum of each non-zero's row is still computed once per non-zero
    (a kernel filling a temp), not once per pair of non-zeros: the guard
    ``ptr_row[d] <= m - 1`` goes with it."""
    loops = tcc.compile(csr_second_derivative()).loops
    temps = [b.name for b in loops.buffers if b.role == "temp"]
    assert temps, str(loops)
    text = str(loops)
    first = text.index(f"kernel {temps[0]}")
    kernel = text[first:text.index("\n}", first)]
    assert "if ptr_row[dval_0] <= m - 1" in kernel, kernel
