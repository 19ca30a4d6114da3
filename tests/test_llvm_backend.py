"""The L2 -> LLVM lowering and the CPU backend, on hand-built loop programs.

Loop programs are written out here (not produced by ``lower-loops``) so that
each lowering rule is exercised in isolation; kernels are called through
ctypes with the ``(bufs, sizes, part, nparts)`` ABI and compared with NumPy.
"""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from tcc.backends import cpu
from tcc.backends.llvm import LLVMModule, codegen_target, kernel_symbol, lower_to_llvm
from tcc.ir.diagnostics import TccError
from tcc.reference.interpreter import _UNARY
from tcc.ir.expr import UNARY_FUNCTIONS, Access, Binary, Const, Sum, Unary, Where
from tcc.ir.index import Affine, And, Compare, Not, Or
from tcc.ir.loops import Accumulate, Buffer, For, If, Kernel, Let, Local, LoopProgram, Store
from tcc.passes.pass_base import Level
from tcc.pipeline import run_pipeline

A = Affine
i, j, k, n, m = (A.var(v) for v in "ijknm")
ZERO, ONE = A.constant(0), A.constant(1)


def c(v: int) -> Affine:
    return A.constant(v)


def x_(name: str, *idx: Affine) -> Access:
    return Access(name, tuple(idx))


def loop(var: str, lo, hi, *body, parallel: bool = False) -> For:
    lo = lo if isinstance(lo, tuple) else (lo,)
    hi = hi if isinstance(hi, tuple) else (hi,)
    return For(var, lo, hi, tuple(body), parallel)


def program(sizes, buffers, *kernels) -> LoopProgram:
    return LoopProgram(tuple(sizes), tuple(buffers), tuple(kernels))


def build(prog: LoopProgram, dtype: str = "float64", **kw) -> cpu.CpuExecutable:
    return cpu.jit(cpu.optimize(lower_to_llvm(prog, dtype, **kw)))


def call(ex: cpu.CpuExecutable, arrays: dict, sizes: dict, kernels=None, part: int = 0, nparts: int = 1) -> None:
    """Run kernels (all, in order, by default) on ``arrays`` in place."""
    prog = ex.program
    for b in prog.buffers:
        a = arrays[b.name]
        assert a.flags.c_contiguous and a.dtype == np.dtype(ex.dtype)
    ptrs = (ctypes.c_void_p * max(1, len(prog.buffers)))(*[arrays[b.name].ctypes.data for b in prog.buffers])
    vals = (ctypes.c_int64 * max(1, len(prog.sizes)))(*[sizes[s] for s in prog.sizes])
    for index, entry in enumerate(ex.kernels):
        if kernels is None or index in kernels:
            entry.fn(ctypes.addressof(ptrs), ctypes.addressof(vals), part, nparts)


# ---------------------------------------------------------------------------
# Element-wise math
# ---------------------------------------------------------------------------

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -3.25, 30.0, -30.0, 800.0, -800.0, np.nan, 1e-300]


def unary_program() -> LoopProgram:
    ops = ("neg",) + UNARY_FUNCTIONS
    bufs = [Buffer("x", (n,), "input")] + [Buffer(f"y_{op}", (n,), "output") for op in ops]
    body = [Store(f"y_{op}", (i,), Unary(op, x_("x", i))) for op in ops]
    return program(["n"], bufs, Kernel("unary", (loop("i", ZERO, n - 1, *body),)))


@pytest.fixture(scope="module", params=["float64", "float32"])
def unary_case(request):
    return request.param, build(unary_program(), request.param)


def test_every_unary_function_matches_the_interpreter(unary_case):
    dtype, ex = unary_case
    x = np.concatenate([SPECIAL, np.linspace(-0.99, 0.99, 41), np.linspace(-7, 7, 29)]).astype(dtype)
    arrays = {"x": x}
    for b in ex.program.buffers[1:]:
        arrays[b.name] = np.full(x.shape, 123.0, dtype)
    call(ex, arrays, {"n": x.size})
    rtol = 1e-12 if dtype == "float64" else 2e-6
    with np.errstate(all="ignore"):
        for op in ("neg",) + UNARY_FUNCTIONS:
            want = np.asarray(_UNARY[op](x), dtype=dtype)
            np.testing.assert_allclose(arrays[f"y_{op}"], want, rtol=rtol, atol=0, equal_nan=True, err_msg=op)
    # sign and relu keep NaN and sign(0) is 0, as NumPy's
    assert arrays["y_sign"][0] == 0 and np.isnan(arrays["y_sign"][12]) and np.isnan(arrays["y_relu"][12])
    assert arrays["y_sigmoid"][10] == 1.0 and arrays["y_sigmoid"][11] == 0.0


EXPONENTS = [0, 1, 2, 3, 5, 16, -1, -2, -3, -16, 2.0, -4.0, 17, -17, 0.5, 1.5, -0.5, 2.25]


def test_powers_match_numpy():
    bufs = [Buffer("x", (n,), "input"), Buffer("e", (n,), "input")]
    body = []
    for q, p in enumerate(EXPONENTS):
        bufs.append(Buffer(f"y{q}", (n,), "output"))
        body.append(Store(f"y{q}", (i,), Binary("**", x_("x", i), Const(p))))
    bufs.append(Buffer("z", (n,), "output"))
    body.append(Store("z", (i,), Binary("**", x_("x", i), x_("e", i))))
    # a constant base and an integer-constant power of a compound expression
    bufs.append(Buffer("w", (n,), "output"))
    body.append(Store("w", (i,), Binary("+", Binary("**", Const(2), x_("e", i)),
                                        Binary("**", Binary("+", x_("x", i), Const(1)), Const(3)))))
    prog = program(["n"], bufs, Kernel("pow", (loop("i", ZERO, n - 1, *body),)))
    llvm_module = lower_to_llvm(prog)
    text = str(llvm_module)
    assert text.count("llvm.pow.f64") >= 2 and "fdiv" in text
    ex = cpu.jit(cpu.optimize(llvm_module))
    x = np.array([0.0, 1.0, -1.0, 0.5, -0.5, 1.1, -1.3, 2.0, -2.0, 3.7, 1e-3, 0.9])
    e = np.linspace(-3, 3, x.size)
    arrays = {"x": x, "e": e}
    for b in bufs[2:]:
        arrays[b.name] = np.zeros_like(x)
    call(ex, arrays, {"n": x.size})
    with np.errstate(all="ignore"):
        for q, p in enumerate(EXPONENTS):
            np.testing.assert_allclose(arrays[f"y{q}"], np.power(x, float(p)), rtol=1e-14, equal_nan=True,
                                       err_msg=f"x ** {p}")
        np.testing.assert_allclose(arrays["z"], np.power(x, e), rtol=1e-14, equal_nan=True)
        np.testing.assert_allclose(arrays["w"], 2.0 ** e + (x + 1) ** 3, rtol=1e-14)


def test_integer_powers_are_multiplications():
    prog = program(["n"], [Buffer("x", (n,), "input"), Buffer("y", (n,), "output")],
                   Kernel("p", (loop("i", ZERO, n - 1, Store("y", (i,), Binary("**", x_("x", i), Const(-16)))),)))
    text = str(lower_to_llvm(prog))
    assert "pow" not in text
    assert text.count("fmul") == 4 and text.count("fdiv") == 1  # x^2, x^4, x^8, x^16, then 1/x^16


# ---------------------------------------------------------------------------
# Loops, bounds and index arithmetic
# ---------------------------------------------------------------------------


def reduction_program() -> LoopProgram:
    # y[i] = sum[k: max(0, (i - 5) // 2, (i - 7) // 3) .. min(m - 1, (2*i + 1) // 3, i - 2)]
    #            x[k] * w[(i - 11) % 5] + w[(k - i) % 4]
    lo = (ZERO, (i - 5).floordiv(2), (i - 7).floordiv(3))
    hi = (m - 1, (2 * i + 1).floordiv(3), i - 2)
    value = Binary("+", Binary("*", x_("x", k), x_("w", (i - 11).mod(5))), x_("w", (k - i).mod(4)))
    body = (
        Local("s", Const(0)),
        loop("k", lo, hi, Accumulate("s", (), value)),
        Store("y", (i,), x_("s")),
    )
    bufs = [Buffer("x", (m,), "input"), Buffer("w", (c(5),), "input"), Buffer("y", (n,), "output")]
    return program(["n", "m"], bufs, Kernel("red", (loop("i", ZERO, n - 1, *body),)))


def reduction_reference(x: np.ndarray, w: np.ndarray, nn: int) -> np.ndarray:
    mm = x.size
    y = np.zeros(nn)
    for ii in range(nn):
        lo = max(0, (ii - 5) // 2, (ii - 7) // 3)
        hi = min(mm - 1, (2 * ii + 1) // 3, ii - 2)
        s = 0.0
        for kk in range(lo, hi + 1):
            s += x[kk] * w[(ii - 11) % 5] + w[(kk - ii) % 4]
        y[ii] = s
    return y


@pytest.fixture(scope="module")
def reduction_exe():
    return build(reduction_program())


@pytest.mark.parametrize("nn,mm", [(20, 9), (7, 30), (1, 4), (0, 5), (25, 0), (3, 3)])
def test_reduction_with_max_min_floor_bounds_and_empty_ranges(reduction_exe, nn, mm):
    """One compiled kernel for every size: empty outer ranges, empty inner ranges, negative numerators."""
    rng = np.random.default_rng(nn * 100 + mm)
    x, w = rng.standard_normal(mm), rng.standard_normal(5)
    y = np.full(nn, np.nan)
    call(reduction_exe, {"x": x, "w": w, "y": y}, {"n": nn, "m": mm})
    np.testing.assert_allclose(y, reduction_reference(x, w, nn), rtol=1e-13, atol=1e-13)


def test_floor_division_and_modulo_of_negative_numbers():
    """Store index arithmetic as values: y[t] = (t - 20) // d  and  (t - 20) % d for several d."""
    dens = [1, 2, 3, 4, 7, 8]
    bufs, body = [], []
    for d in dens:
        for kind in ("div", "mod"):
            bufs.append(Buffer(f"{kind}{d}", (n,), "output"))
            atom = (i - 20).floordiv(d) if kind == "div" else (i - 20).mod(d)
            # the value is read back through an index: e[atom + 20] holds atom's value
            body.append(Store(f"{kind}{d}", (i,), x_("e", atom + 20)))
    bufs.append(Buffer("e", (c(60),), "input"))
    ex = build(program(["n"], bufs, Kernel("k", (loop("i", ZERO, n - 1, *body),))))
    t = np.arange(41)
    arrays = {"e": np.arange(60, dtype=float) - 20}
    for b in bufs[:-1]:
        arrays[b.name] = np.zeros(t.size)
    call(ex, arrays, {"n": t.size})
    for d in dens:
        np.testing.assert_array_equal(arrays[f"div{d}"], (t - 20) // d)
        np.testing.assert_array_equal(arrays[f"mod{d}"], (t - 20) % d)


def test_if_else_with_compound_conditions():
    cond = Or((And((Compare("==", (i).mod(3), ZERO), Compare("<", i, n - 2))), Not(Compare("!=", i, c(4)))))
    body = (
        If(cond, (Store("y", (i,), x_("x", i)),), (Store("y", (i,), Unary("neg", x_("x", i))),)),
        If(Compare(">=", 2 * i, n), (Store("z", (i,), Const(1)),)),
    )
    bufs = [Buffer("x", (n,), "input"), Buffer("y", (n,), "output"), Buffer("z", (n,), "output")]
    ex = build(program(["n"], bufs, Kernel("cond", (loop("i", ZERO, n - 1, *body),))))
    nn = 14
    x = np.arange(1.0, nn + 1)
    y, z = np.zeros(nn), np.zeros(nn)
    call(ex, {"x": x, "y": y, "z": z}, {"n": nn})
    t = np.arange(nn)
    sel = ((t % 3 == 0) & (t < nn - 2)) | (t == 4)
    np.testing.assert_array_equal(y, np.where(sel, x, -x))
    np.testing.assert_array_equal(z, (2 * t >= nn).astype(float))


# ---------------------------------------------------------------------------
# Lazy where
# ---------------------------------------------------------------------------

FAR = 1 << 40  # elements: an address no process has mapped


def test_where_is_lazy():
    """The untaken branch reads far out of bounds: evaluating it would crash."""
    shifted = Binary(
        "+",
        Where(Compare(">", i, ZERO), x_("x", i - 1), Const(0)),
        Where(Compare("<", i, n - 1), Binary("*", x_("x", i + 1), Unary("exp", x_("x", i))), Const(0.5)),
    )
    # p is bound to n: LLVM cannot prove the far branch dead and delete it
    guarded = Where(Compare(">=", i, A.var("p")), x_("x", i + FAR), x_("x", i))
    body = (Store("y", (i,), shifted), Store("z", (i,), guarded))
    bufs = [Buffer("x", (n,), "input"), Buffer("y", (n,), "output"), Buffer("z", (n,), "output")]
    llvm_module = lower_to_llvm(program(["n", "p"], bufs, Kernel("shift", (loop("i", ZERO, n - 1, *body),))))
    assert "where.then" in str(llvm_module)
    ex = cpu.jit(cpu.optimize(llvm_module))
    for nn in (1, 2, 9):
        x = np.linspace(-1, 1, nn)
        y, z = np.zeros(nn), np.zeros(nn)
        call(ex, {"x": x, "y": y, "z": z}, {"n": nn, "p": nn})
        left = np.concatenate([[0.0], x[:-1]])
        right = np.concatenate([x[1:] * np.exp(x[:-1]), [0.5]])
        np.testing.assert_allclose(y, left + right, rtol=1e-15)
        np.testing.assert_array_equal(z, x)


def test_load_free_where_is_a_select():
    body = (Store("y", (i,), Binary("*", x_("x", i), Where(Compare("<", i, c(3)), Const(2), Unary("neg", Const(1))))),)
    bufs = [Buffer("x", (n,), "input"), Buffer("y", (n,), "output")]
    prog = program(["n"], bufs, Kernel("sel", (loop("i", ZERO, n - 1, *body),)))
    text = str(lower_to_llvm(prog))
    assert "select" in text and "where.then" not in text
    ex = build(prog)
    x, y = np.arange(6.0), np.zeros(6)
    call(ex, {"x": x, "y": y}, {"n": 6})
    np.testing.assert_array_equal(y, x * np.where(np.arange(6) < 3, 2, -1))


# ---------------------------------------------------------------------------
# Scalars, accumulation, 0-d buffers
# ---------------------------------------------------------------------------


def test_let_local_and_accumulate_into_scalars_and_buffers():
    body = (
        Let("t", Binary("*", x_("x", i), Const(2))),
        Local("s", x_("t")),
        loop("k", ZERO, c(3), Accumulate("s", (), Binary("*", x_("t"), Const(0.5)))),
        Store("y", (i,), Binary("+", x_("s"), x_("a"))),  # a: a 0-d input
        Accumulate("h", ((i).mod(3),), x_("t")),  # a buffer element
        Accumulate("total", (), x_("x", i)),  # a 0-d output
    )
    zero_fill = (Store("total", (), Const(0)), loop("j", ZERO, c(2), Store("h", (j,), Const(0))))
    bufs = [
        Buffer("x", (n,), "input"),
        Buffer("a", (), "input"),
        Buffer("y", (n,), "output"),
        Buffer("total", (), "output"),
        Buffer("h", (c(3),), "local"),
    ]
    ex = build(program(["n"], bufs, Kernel("zero", zero_fill), Kernel("main", (loop("i", ZERO, n - 1, *body),))))
    assert [e.name for e in ex.kernels] == ["zero", "main"]
    x = np.array([1.0, 2.0, -3.0, 0.25, 5.0, 7.0, -1.0])
    arrays = {"x": x, "a": np.array(10.0), "y": np.zeros(7), "total": np.array(99.0), "h": np.full(3, 99.0)}
    call(ex, arrays, {"n": 7})
    t = 2 * x
    np.testing.assert_allclose(arrays["y"], t + 4 * (t * 0.5) + 10.0)
    np.testing.assert_allclose(arrays["total"], x.sum())
    np.testing.assert_allclose(arrays["h"], [t[0::3].sum(), t[1::3].sum(), t[2::3].sum()])


def test_two_dimensional_row_major_and_extent_zero():
    # y[i, j] = x[i, j] * 10 + b[j], with shapes (n, m + 1)
    body = Store("y", (i, j), Binary("+", Binary("*", x_("x", i, j), Const(10)), x_("b", j)))
    nest = loop("i", ZERO, n - 1, loop("j", ZERO, m, body))
    bufs = [Buffer("x", (n, m + 1), "input"), Buffer("b", (m + 1,), "input"), Buffer("y", (n, m + 1), "output")]
    ex = build(program(["n", "m"], bufs, Kernel("k", (nest,))))
    rng = np.random.default_rng(1)
    for nn, mm in [(3, 4), (5, 0), (0, 3), (1, 1)]:
        x, b = rng.standard_normal((nn, mm + 1)), rng.standard_normal(mm + 1)
        y = np.full((nn, mm + 1), np.nan)
        call(ex, {"x": x, "b": b, "y": y}, {"n": nn, "m": mm})
        np.testing.assert_allclose(y, x * 10 + b, rtol=1e-15)
    # extent 0: nothing is written, even through pointers to empty arrays
    call(ex, {"x": np.zeros((0, 1)), "b": np.zeros(1), "y": np.zeros((0, 1))}, {"n": 0, "m": 0})


def test_float32():
    body = (
        Local("s", Const(0)),
        loop("k", ZERO, m - 1, Accumulate("s", (), Binary("*", x_("x", i, k), Unary("sigmoid", x_("w", k))))),
        Store("y", (i,), Binary("**", x_("s"), Const(2))),
    )
    bufs = [Buffer("x", (n, m), "input"), Buffer("w", (m,), "input"), Buffer("y", (n,), "output")]
    llvm_module = lower_to_llvm(program(["n", "m"], bufs, Kernel("k", (loop("i", ZERO, n - 1, *body),))), "float32")
    assert "double" not in str(llvm_module) and "@expf" not in str(llvm_module)  # llvm.exp.f32 intrinsic
    ex = cpu.jit(cpu.optimize(llvm_module))
    assert ex.dtype == "float32"
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((6, 11)).astype(np.float32), rng.standard_normal(11).astype(np.float32)
    y = np.zeros(6, np.float32)
    call(ex, {"x": x, "w": w, "y": y}, {"n": 6, "m": 11})
    want = (x.astype(np.float64) @ (1 / (1 + np.exp(-w.astype(np.float64))))) ** 2
    np.testing.assert_allclose(y, want, rtol=1e-5)


def test_float32_calls_the_f_suffixed_libm_functions():
    bufs = [Buffer("x", (n,), "input"), Buffer("y", (n,), "output")]
    prog = program(["n"], bufs, Kernel("k", (loop("i", ZERO, n - 1, Store("y", (i,), Unary("tan", x_("x", i)))),)))
    assert "@\"tanf\"" in str(lower_to_llvm(prog, "float32"))
    assert "@\"tan\"" in str(lower_to_llvm(prog, "float64"))


# ---------------------------------------------------------------------------
# Parallel kernels
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parallel_exe():
    # count[i] += 1 and y[i] = x[i]**2 over i in max(1, 2)..min(n - 2, 100)
    inner = loop("j", ZERO, c(1), Accumulate("count", (i,), Const(0.5)))
    body = (inner, Store("y", (i,), Binary("*", x_("x", i), x_("x", i))))
    par = loop("i", (ONE, c(2)), (n - 2, c(100)), *body, parallel=True)
    bufs = [Buffer("x", (n,), "input"), Buffer("y", (n,), "output"), Buffer("count", (n,), "output")]
    return build(program(["n"], bufs, Kernel("par", (par,))))


@pytest.mark.parametrize("nn", [0, 3, 4, 5, 6, 10, 11, 12, 13, 200])
def test_parallel_parts_cover_the_range_exactly_once(parallel_exe, nn):
    assert parallel_exe.kernels[0].parallel
    x = np.arange(float(nn))
    whole = {"x": x, "y": np.zeros(nn), "count": np.zeros(nn)}
    call(parallel_exe, whole, {"n": nn})
    split = {"x": x, "y": np.zeros(nn), "count": np.zeros(nn)}
    for part in (2, 0, 1):
        call(parallel_exe, split, {"n": nn}, part=part, nparts=3)
    inside = (np.arange(nn) >= 2) & (np.arange(nn) <= min(nn - 2, 100))
    np.testing.assert_array_equal(whole["count"], inside.astype(float))
    np.testing.assert_array_equal(split["count"], whole["count"])
    np.testing.assert_array_equal(split["y"], whole["y"])
    # parts run concurrently from threads (ctypes releases the GIL)
    from concurrent.futures import ThreadPoolExecutor

    threaded = {"x": x, "y": np.zeros(nn), "count": np.zeros(nn)}
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda part: call(parallel_exe, threaded, {"n": nn}, part=part, nparts=4), range(4)))
    np.testing.assert_array_equal(threaded["count"], whole["count"])
    # nparts < 1 is treated as one part, not a division by zero
    clamped = {"x": x, "y": np.zeros(nn), "count": np.zeros(nn)}
    call(parallel_exe, clamped, {"n": nn}, part=0, nparts=0)
    np.testing.assert_array_equal(clamped["count"], whole["count"])
    # more parts than iterations: the surplus parts do nothing
    many = {"x": x, "y": np.zeros(nn), "count": np.zeros(nn)}
    for part in range(7):
        call(parallel_exe, many, {"n": nn}, part=part, nparts=7)
    np.testing.assert_array_equal(many["count"], whole["count"])


def test_names_that_clash_with_the_abi_are_renamed():
    part, nparts = A.var("part"), A.var("nparts")
    bufs = [Buffer("bufs", (part,), "input"), Buffer("sizes", (), "input"), Buffer("part", (part, nparts), "output")]
    body = Let("part", Binary("*", x_("bufs", i), x_("sizes")))
    nest = loop("i", ZERO, part - 1, body, loop("j", ZERO, nparts - 1, Store("part", (i, j), x_("part"))), parallel=True)
    ex = build(program(["part", "nparts"], bufs, Kernel("part", (nest,))))
    out = np.zeros((3, 2))
    call(ex, {"bufs": np.arange(3.0), "sizes": np.array(2.0), "part": out}, {"part": 3, "nparts": 2}, part=0, nparts=1)
    np.testing.assert_array_equal(out, np.repeat(np.arange(3.0)[:, None] * 2, 2, axis=1))


def test_a_kernel_that_is_not_one_parallel_loop_ignores_part():
    par = loop("i", ZERO, n - 1, Accumulate("y", (i,), Const(1)), parallel=True)
    bufs = [Buffer("y", (n,), "output")]
    ex = build(program(["n"], bufs, Kernel("two", (par, Store("y", (ZERO,), Const(7))))))
    assert not ex.kernels[0].parallel
    y = np.zeros(5)
    call(ex, {"y": y}, {"n": 5}, part=1, nparts=3)  # runs everything
    np.testing.assert_array_equal(y, [7, 1, 1, 1, 1])


# ---------------------------------------------------------------------------
# Vectorization, determinism, the module object
# ---------------------------------------------------------------------------

VECTOR = re.compile(r"<\d+ x double>")


def elementwise_program() -> LoopProgram:
    body = Store("y", (i, j), Binary("+", Binary("*", x_("a", i, j), x_("b", i, j)), x_("y", i, j)))
    bufs = [Buffer("a", (n, m), "input"), Buffer("b", (n, m), "input"), Buffer("y", (n, m), "output")]
    return program(["n", "m"], bufs, Kernel("fma", (loop("i", ZERO, n - 1, loop("j", ZERO, m - 1, body)),)))


def test_elementwise_kernel_is_vectorized():
    """Distinct buffers are noalias, so LLVM vectorizes without runtime overlap checks."""
    opt = cpu.optimize(lower_to_llvm(elementwise_program()))
    assert isinstance(opt, LLVMModule) and isinstance(opt.module, str)
    assert VECTOR.search(str(opt)), str(opt)
    assert "vector.memcheck" not in str(opt)


def test_reassociated_reductions_vectorize_a_dot_product():
    body = (Local("s", Const(0)), loop("k", ZERO, n - 1, Accumulate("s", (), Binary("*", x_("a", k), x_("b", k)))),
            Store("y", (), x_("s")))
    bufs = [Buffer("a", (n,), "input"), Buffer("b", (n,), "input"), Buffer("y", (), "output")]
    prog = program(["n"], bufs, Kernel("dot", body))
    exact = lower_to_llvm(prog, reassociate="never")
    fast = lower_to_llvm(prog)  # contiguous: a and b have unit stride in k
    assert str(fast) == str(lower_to_llvm(prog, reassociate="always"))
    assert "reassoc" not in str(exact) and "fadd reassoc" in str(fast)
    assert VECTOR.search(str(cpu.optimize(fast)))
    a, b = np.linspace(0, 1, 1001), np.linspace(1, 2, 1001)
    for module in (exact, fast):
        ex = cpu.jit(cpu.optimize(module))
        y = np.zeros(())
        call(ex, {"a": a, "b": b, "y": y}, {"n": a.size})
        np.testing.assert_allclose(y, a @ b, rtol=1e-13)


def test_lowering_is_deterministic():
    for make in (elementwise_program, reduction_program, unary_program):
        first, second = lower_to_llvm(make()), lower_to_llvm(make())
        assert str(first) == str(second)
        assert str(cpu.optimize(first)) == str(cpu.optimize(second))


def test_module_object_and_symbols():
    prog = program(["n"], [Buffer("y", (n,), "output")],
                   Kernel("init", (loop("i", ZERO, n - 1, Store("y", (i,), Const(1))),)),
                   Kernel("f.x-2", (loop("i", ZERO, n - 1, Accumulate("y", (i,), Const(1))),)))
    mod = lower_to_llvm(prog)
    assert mod.kernel_symbols == ("tcc_0_init", "tcc_1_f_x_2") == tuple(
        kernel_symbol(q, kern) for q, kern in enumerate(prog.kernels))
    assert mod.program is prog and mod.dtype == "float64" and mod.target == "cpu"
    text = str(mod)
    mod.verify()
    assert codegen_target("cpu").triple in text
    assert 'define void @"tcc_1_f_x_2"(ptr %"bufs", ptr %"sizes", i64 %"part", i64 %"nparts")' in text
    asm = cpu.emit_assembly(cpu.optimize(mod))
    assert "tcc_1_f_x_2" in asm
    ex = cpu.jit(mod)  # unoptimized code runs too
    y = np.zeros(4)
    call(ex, {"y": y}, {"n": 4})
    np.testing.assert_array_equal(y, 2.0)


def test_passes_lower_and_optimize():
    prog = elementwise_program()
    llvm_module = run_pipeline(prog, "lower-llvm{dtype=float32},llvm-opt{opt-level=2}", start=Level.LOOPS)
    assert llvm_module.dtype == "float32" and isinstance(llvm_module.module, str)
    assert re.search(r"<\d+ x float>", str(llvm_module))
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.ones((3, 4), np.float32)
    call(cpu.jit(llvm_module), {"a": a, "b": a, "y": y}, {"n": 3, "m": 4})
    np.testing.assert_array_equal(y, a * a + 1)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def _one_store(value, indices=(i,), name="y") -> LoopProgram:
    bufs = [Buffer("x", (n,), "input"), Buffer("y", (n,), "output")]
    return program(["n"], bufs, Kernel("bad", (loop("i", ZERO, n - 1, Store(name, indices, value)),)))


@pytest.mark.parametrize(
    "prog,message",
    [
        (_one_store(x_("x", j)), "index name 'j' is not bound"),
        (_one_store(x_("x", i, i)), "with 2 indices but it has 1"),
        (_one_store(x_("q", i)), "'q' is not a buffer"),
        (_one_store(Const(1), name="nope"), "'nope' is not a buffer"),
        (_one_store(Unary("erf", x_("x", i))), "unknown function 'erf'"),
        (_one_store(Sum("k", (ZERO,), (n,), x_("x", k))), "still holds a sum"),
    ],
)
def test_ill_formed_loop_programs_are_user_errors(prog, message):
    with pytest.raises(TccError, match=message):
        lower_to_llvm(prog)


def test_bad_options():
    prog = _one_store(Const(1))
    with pytest.raises(TccError, match="element type"):
        lower_to_llvm(prog, "float16")
    with pytest.raises(TccError, match="arch and ptx are options of target cuda, not of 'cpu'"):
        lower_to_llvm(prog, arch="sm_80")
    with pytest.raises(TccError, match="unknown target"):
        lower_to_llvm(prog, target="tpu")
    with pytest.raises(TccError, match="loop program"):
        lower_to_llvm("not a program")  # type: ignore[arg-type]


def test_invalid_llvm_is_a_compiler_bug():
    mod = lower_to_llvm(_one_store(Const(1)))
    broken = LLVMModule(str(mod).replace("ret void", "", 1), mod.program, mod.dtype, mod.target, mod.kernel_symbols)
    with pytest.raises(RuntimeError, match="invalid LLVM IR"):
        broken.verify()
    with pytest.raises(RuntimeError, match="invalid LLVM IR"):
        cpu.optimize(broken)
    with pytest.raises(RuntimeError, match="invalid LLVM IR"):
        cpu.jit(broken)


def test_contract_option_allows_fused_multiply_add():
    body = (Local("s", Const(0)), loop("k", ZERO, n - 1, Accumulate("s", (), Binary("*", x_("a", k), x_("b", k)))),
            Store("y", (), x_("s")))
    bufs = [Buffer("a", (n,), "input"), Buffer("b", (n,), "input"), Buffer("y", (), "output")]
    prog = program(["n"], bufs, Kernel("dot", body))
    assert "contract" not in str(lower_to_llvm(prog))
    fused = lower_to_llvm(prog, contract=True)
    assert "fmul contract" in str(fused) and "fadd reassoc contract" in str(fused)
    a, b = np.linspace(0, 1, 101), np.linspace(1, 2, 101)
    y = np.zeros(())
    call(cpu.jit(cpu.optimize(fused)), {"a": a, "b": b, "y": y}, {"n": a.size})
    assert abs(float(y) - float(a @ b)) <= 1e-12 * abs(float(a @ b))


# ---------------------------------------------------------------------------
# Kernel bodies: only their own buffers, shared between kernels equal up to names
# ---------------------------------------------------------------------------


def _chain_program(steps: int, scale: tuple[float, ...] | None = None) -> LoopProgram:
    """``h1 = tanh(x)``, ``h(k+1)[v] = s_k * tanh(h(k)[v])``: the same kernel on other buffers and loop names."""
    scale = scale or (2.0,) * steps
    bufs = [Buffer("x", (n,), "input")] + [Buffer(f"h{q}", (n,), "output") for q in range(1, steps + 1)]
    kernels = []
    for q in range(1, steps + 1):
        src = "x" if q == 1 else f"h{q - 1}"
        v = f"v{q}"  # a different loop variable in every kernel
        value = Binary("*", Const(scale[q - 1]), Unary("tanh", x_(src, A.var(v))))
        kernels.append(Kernel(f"h{q}", (loop(v, ZERO, n - 1, Store(f"h{q}", (A.var(v),), value), parallel=True),)))
    return program(["n"], bufs, *kernels)


def _bodies(text: str) -> dict[str, str]:
    """Body function name -> its ``define`` line."""
    return {m.group(1): m.group(0) for m in re.finditer(r'define internal void @"([^"]+\.body)"\(.*', text)}


def test_kernel_body_takes_only_the_buffers_it_uses():
    prog = _chain_program(6, scale=tuple(float(q) for q in range(1, 7)))  # all different: no sharing
    bodies = _bodies(str(lower_to_llvm(prog)))
    assert len(bodies) == 6
    # h3 reads h2 and writes h3: two buffers, the size n, part and nparts
    assert bodies["tcc_2_h3.body"].count("ptr noalias") == 2
    assert '%"h2"' in bodies["tcc_2_h3.body"] and '%"h3"' in bodies["tcc_2_h3.body"]
    assert all("alwaysinline" in line for line in bodies.values())


def test_kernels_equal_up_to_names_share_one_noinline_body():
    prog = _chain_program(5)
    text = str(lower_to_llvm(prog))
    bodies = _bodies(text)
    # h1 reads the input x: its shape is that of the others, so it is shared too
    assert list(bodies) == ["tcc_0_h1.body"]
    assert "noinline" in bodies["tcc_0_h1.body"] and "alwaysinline" not in bodies["tcc_0_h1.body"]
    assert text.count('call void @"tcc_0_h1.body"') == 5
    assert text == str(lower_to_llvm(prog))  # deterministic

    nn = 37
    x = np.linspace(-2, 2, nn)
    arrays = {"x": x, **{f"h{q}": np.zeros(nn) for q in range(1, 6)}}
    call(build(prog), arrays, {"n": nn})
    expect = x
    for q in range(1, 6):
        expect = 2.0 * np.tanh(expect)
        np.testing.assert_allclose(arrays[f"h{q}"], expect, rtol=1e-14)  # libm's tanh, not NumPy's


def test_kernels_that_differ_in_a_constant_do_not_share():
    prog = _chain_program(3, scale=(2.0, 3.0, 2.0))
    bodies = _bodies(str(lower_to_llvm(prog)))
    assert sorted(bodies) == ["tcc_0_h1.body", "tcc_1_h2.body"]
    assert "noinline" in bodies["tcc_0_h1.body"] and "alwaysinline" in bodies["tcc_1_h2.body"]

    nn = 9
    x = np.linspace(-1, 1, nn)
    arrays = {"x": x, "h1": np.zeros(nn), "h2": np.zeros(nn), "h3": np.zeros(nn)}
    call(build(prog), arrays, {"n": nn})
    np.testing.assert_allclose(arrays["h3"], 2.0 * np.tanh(3.0 * np.tanh(2.0 * np.tanh(x))), rtol=1e-14)
