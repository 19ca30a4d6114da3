"""Stride-1 convolutions as windowed contractions.

``blas`` turns a convolution and both of its gradients into ``contract(A[..., u + v, ...], B[...])``;
the runtime runs that as shifted GEMMs (tcc.runtime.externs.window_kernel).  Everything is checked against the
reference interpreter on the *source* program (the sums), so the rewrite is checked too.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcc
from tcc.ir.diagnostics import TccError
from tcc.ir.loops_parser import parse_loop_program
from tcc.runtime.externs.window_kernel import run_window
from tcc.runtime.externs.window_view import window_contract

CONV = ("input x[{B}, {C}, {S}, {T}], w[{O}, {C}, {R}, {Q}]\n"
        "y[b, o, i, j] = sum[c, p, q](x[b, c, i + p, j + q] * w[o, c, p, q])\n")


def conv(B=2, C=16, O=16, S=10, T=11, R=3, Q=2) -> str:  # noqa: N803 - the shapes' usual names
    return CONV.format(B=B, C=C, O=O, S=S, T=T, R=R, Q=Q)


def inputs(src: str, seed: int = 0, dtype=np.float64) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = tcc.parse(src)
    shapes = {t.name: tuple(int(e.const) for e in t.extents) for t in p.inputs}
    return {n: rng.standard_normal(s).astype(dtype) for n, s in shapes.items()}


def externs(f) -> list[str]:  # noqa: ANN001
    return [line.strip() for line in str(f.loops).splitlines() if "extern contract" in line]


def test_convolution_and_its_gradients_become_windowed_contractions():
    src = conv()
    grad = tcc.grad(src, of="y", wrt="x,w")
    f, g = tcc.compile(src), tcc.compile(grad)
    assert externs(f) == ["extern contract(x[b, c, i + p, j + q], w[o, c, p, q]) -> y[b, o, i, j]"]
    assert [e.split("->")[1].strip()[:2] for e in externs(g)] == ["dx", "dw"]
    assert "dy[dx_0, dx_z0, dx_2 - dx_z1, dx_3 - dx_z2]" in externs(g)[0]  # the input gradient: u - v windows
    args = inputs(src)
    args["dy"] = np.random.default_rng(1).standard_normal((2, 16, 8, 10))
    ref = tcc.run(grad, args)
    np.testing.assert_allclose(f(x=args["x"], w=args["w"])["y"], tcc.run(src, args)["y"], rtol=1e-12, atol=1e-12)
    got = g(**args)
    for name in ("dx", "dw"):
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-12, atol=1e-11)


def test_windowed_extern_prints_and_parses_back():
    f = tcc.compile(tcc.grad(conv(), of="y", wrt="x,w"))
    text = str(f.loops)
    assert str(parse_loop_program(text)) == text


def test_float32(monkeypatch):
    """float32 runs the native BLAS loop too: NumPy's type character ``f`` is BLAS's ``s`` (it looked
    for ``f``, found no entry point, and ran every product as ``np.matmul`` plus an addition)."""
    import tcc.runtime.externs.window_kernel as wk

    calls = []
    real = wk.gemm_loop
    monkeypatch.setattr(wk, "gemm_loop", lambda ch, *rest: (calls.append(ch), real(ch, *rest)))
    src = conv()
    args = inputs(src, dtype=np.float32)
    f = tcc.compile(src, dtype=np.float32)
    ref = tcc.run(src, {k: v.astype(np.float64) for k, v in args.items()})["y"]
    np.testing.assert_allclose(f(**args)["y"], ref, rtol=1e-4, atol=1e-4)
    assert calls and set(calls) == {"f"}


def test_symbolic_batch_including_an_empty_one():
    src = conv(B="n", S=10, T=10, Q=3)
    f = tcc.compile(src)
    assert externs(f)
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 16, 3, 3))
    for n in (0, 1, 3):
        x = rng.standard_normal((n, 16, 10, 10))
        got = f(x=x, w=w)["y"]
        assert got.shape == (n, 16, 8, 8)
        np.testing.assert_allclose(got, tcc.run(src, {"x": x, "w": w})["y"], rtol=1e-12, atol=1e-12)


def test_edge_data_agrees_with_the_sums():
    """An inf in the kernel meets the input gradient's padding, a NaN in x the weight gradient's widened
    dy: the sums leave those terms out, so the runtime must not make 0 * inf = NaN of them."""
    src = conv(S=9, T=9, R=3, Q=3)
    grad = tcc.grad(src, of="y", wrt="x,w")
    g = tcc.compile(grad)
    args = inputs(src, seed=3)
    args["dy"] = np.random.default_rng(4).standard_normal((2, 16, 7, 7))
    args["w"][0, 0, 2, 2] = np.inf
    args["w"][1, 3, 0, 1] = -0.0
    args["x"][1, 2, 8, 8] = np.nan
    args["x"][0, 5, 3, 8] = -np.inf
    args["dy"][0, 1, 0, 0] = 0.0
    ref, got = tcc.run(grad, args), g(**args)
    for name in ("dx", "dw"):
        assert np.array_equal(np.isnan(got[name]), np.isnan(ref[name])), name
        assert np.array_equal(np.isinf(got[name]), np.isinf(ref[name])), name
        ok = np.isfinite(ref[name])
        assert ok.any()
        np.testing.assert_allclose(got[name][ok], ref[name][ok], rtol=1e-12, atol=1e-11)


def test_scratch_space_left_dirty_by_earlier_calls_does_not_leak():
    """The widened layouts' zero margins are written on every call (not the whole scratch array):
    scratch space kept between calls and filled with NaN must not reach a result."""
    from tcc.runtime.externs.contraction_kernel import _scratch_array

    src = conv(S=9, T=11, R=3, Q=3)
    grad = tcc.grad(src, of="y", wrt="x,w")
    g = tcc.compile(grad)
    args = inputs(src, seed=5)
    args["dy"] = np.random.default_rng(6).standard_normal((2, 16, 7, 9))
    ref = tcc.run(grad, args)
    for _ in range(2):
        for slot in range(20, 24):  # the slots of tcc.runtime.externs.window_kernel
            _scratch_array(slot, (1 << 16,), np.dtype(np.float64)).fill(np.nan)
        got = g(**args)
        for name in ("dx", "dw"):
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-12, atol=1e-11)


def test_small_channel_counts_and_one_dimensional_correlations_stay_loops():
    """The cost model: a GEMM dimension below 16 (3 input channels) or a correlation of one signal
    (GEMMs of width 1) is better served by the loop nests."""
    assert not externs(tcc.compile(conv(C=3)))
    assert not externs(tcc.compile("input x[1000], w[9]\ny[i] = sum[k](x[i + k] * w[k])\n"))


def test_a_sum_clipped_otherwise_stays_a_sum():
    """p runs over 0..1 of w's 0..2: not the contraction's range, so no rewrite -- and still right."""
    src = ("input x[2, 16, 10, 10], w[16, 16, 3, 3]\n"
           "y[b, o, i, j] = sum[c, p: 0..1, q](x[b, c, i + p, j + q] * w[o, c, p, q])\n")
    f = tcc.compile(src)
    assert not externs(f)
    args = inputs(src)
    np.testing.assert_allclose(f(**args)["y"], tcc.run(src, args)["y"], rtol=1e-12, atol=1e-12)


def test_a_user_written_windowed_contract_runs_and_differentiates():
    src = ("input dy[2, 16, 8, 9], w[16, 16, 3, 2]\n"
           "g[b, c, h, v] = contract(dy[b, o, h - p, v - q], w[o, c, p, q])[b, c, h, v]\n")
    summed = ("input dy[2, 16, 8, 9], w[16, 16, 3, 2]\noutput g[2, 16, 10, 10]\n"
              "g[b, c, h, v] = sum[o, p: max(0, h - 7)..min(2, h), q: max(0, v - 8)..min(1, v)]"
              "(dy[b, o, h - p, v - q] * w[o, c, p, q])\n")
    p = tcc.parse(src)
    assert str(p).splitlines()[1] == src.splitlines()[1]
    args = inputs(src, seed=5)
    ref = tcc.run(summed, args)["g"]
    assert ref.shape == (2, 16, 10, 10)
    np.testing.assert_allclose(tcc.run(src, args)["g"], ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tcc.compile(src)(**args)["g"], ref, rtol=1e-12, atol=1e-12)
    seed = np.random.default_rng(6).standard_normal(ref.shape)
    d1 = tcc.run(tcc.grad(src, of="g", wrt="dy,w"), {**args, "dg": seed})
    d2 = tcc.run(tcc.grad(summed, of="g", wrt="dy,w"), {**args, "dg": seed})
    for name in ("ddy", "dw"):
        np.testing.assert_allclose(d1[name], d2[name], rtol=1e-12, atol=1e-11)


BAD_INPUTS = "input x[4, 9], w[3, 4], dy[2, 9], v[9], u[3]\n"


@pytest.mark.parametrize("text, why", [
    ("g[b, c] = contract(w[o, c], dy[b, o + c])[b, c]",
     r"only the first argument may read a window \(u \+ v, u - v\)"),
    ("g[i, p] = contract(v[i + p], u[p])[i, p]",
     r"the window i \+ p needs exactly one summed index \(one of i, p not in the result\)"),
    ("g[o] = contract(v[i + p], w[o, p])[o]",
     r"the window i \+ p needs exactly one summed index \(one of i, p not in the result\)"),
    ("g[b] = contract(x[b, i + i], u[i])[b]", r"the first argument repeats an index \(b, i, i\)"),
])
def test_bad_windows_are_refused(text, why):
    with pytest.raises(TccError, match="is not a contraction with result g.*: " + why):
        tcc.run(BAD_INPUTS + text + "\n", inputs(BAD_INPUTS))


SPECS = [
    ((("b", "i + p", "j + q", "c"), ("p", "q", "c", "o"), ("b", "i", "j", "o")), (2, 9, 8, 5), (3, 2, 5, 4)),
    ((("b", "c", "i + p", "j + q", "l + r"), ("o", "c", "p", "q", "r")), (2, 3, 6, 7, 5), (4, 3, 3, 2, 2)),
    ((("c", "i + p", "b", "j + q"), ("o", "c", "p", "q"), ("j", "o", "b", "i")), (3, 6, 2, 7), (4, 3, 3, 2)),
    ((("i + k",), ("k",), ("i",)), (20,), (5,)),
    ((("i - k",), ("k",), ("i",)), (20,), (5,)),
    ((("b", "c", "p + i", "q + j"), ("b", "o", "i", "j"), ("o", "c", "p", "q")), (2, 3, 6, 7), (2, 4, 4, 6)),
    ((("b", "o", "h - p", "v - q"), ("o", "c", "p", "q"), ("b", "c", "h", "v")), (2, 4, 4, 6), (4, 3, 3, 2)),
    ((("b", "c", "p + i", "q + j"), ("b", "o", "i", "j"), ("c", "o", "p", "q")), (2, 3, 6, 7), (2, 4, 4, 6)),
    ((("b", "p + i", "q + j"), ("b", "o", "i", "j"), ("o", "p", "q")), (2, 6, 7), (2, 4, 4, 6)),  # no M: review
]


def _spec(entry):  # noqa: ANN001
    spec = entry[0]
    if len(spec) == 2:  # the 3-D convolution's result
        spec = (*spec, ("b", "o", "i", "j", "l"))
    return spec


@pytest.mark.parametrize("entry", SPECS, ids=lambda e: ",".join(_spec(e)[0]))
@pytest.mark.parametrize("native", [True, False], ids=["blas", "numpy"])
def test_runtime_against_the_reference(entry, native, monkeypatch):
    """Layouts (channels last, 3-D, interleaved), 1-D windows both ways, the two gradients' shapes (the
    weight gradient's with its innermost offset folded, both result orders); with the native BLAS loop
    and with NumPy's matmul (what runs where no BLAS symbol is found)."""
    import tcc.runtime.externs.blas_gemm as bg
    import tcc.runtime.externs.window_kernel as wk

    if not native:
        monkeypatch.setattr(bg, "_fns", {})
        monkeypatch.setattr(wk, "_CALLS", {})
    spec, ash, bsh = _spec(entry), entry[1], entry[2]
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(ash), rng.standard_normal(bsh)
    ref = window_contract(spec, a, b)
    for a_in in (a, np.asfortranarray(a)):  # a non-C-ordered operand is copied first
        out = np.full(ref.shape, np.nan)
        run_window(spec, a_in, b, out)
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    if not native:
        assert not wk._CALLS
    if spec[1] == ("b", "o", "i", "j"):
        from tcc.ir.window_plan import window_plan

        assert window_plan(spec, ash, bsh).fold == "q"


MORE = [
    ((("i + k",), ("k", "i"), ("i",)), (10,), (4, 9)),                                       # padding at the end
    ((("b", "i + k"), ("k", "o"), ("b", "o", "i")), (3, 10), (4, 5)),                        # one window, a batch
    ((("c", "i - k", "j + q"), ("k", "q", "c", "o"), ("o", "i", "j")), (3, 6, 7), (2, 3, 3, 4)),  # both signs
    ((("c", "k + i"), ("c", "i", "o"), ("o", "k")), (3, 9), (3, 5, 4)),                      # a free offset
]


def _naive(spec, a, b):  # noqa: ANN001, ANN202 - every term of the sum, one at a time
    from itertools import product as cartesian

    from tcc.ir.contraction import spec_extents, window

    ext, _ = spec_extents(spec, a.shape, b.shape)
    names = sorted(ext)
    out = np.zeros([ext[x] for x in spec[2]])
    for values in cartesian(*(range(ext[x]) for x in names)):
        at = dict(zip(names, values))
        idx = []
        for x, e in zip(spec[0], a.shape):
            w = window(x)
            pos = at[x] if w is None else at[w[0]] + w[1] * at[w[2]]
            if not 0 <= pos < e:
                break
            idx.append(pos)
        else:
            out[tuple(at[x] for x in spec[2])] += a[tuple(idx)] * b[tuple(at[x] for x in spec[1])]
    return out


@pytest.mark.parametrize("spec, ash, bsh", MORE + [(_spec(e), e[1], e[2]) for e in SPECS if len(e[1]) <= 4])
def test_reference_and_runtime_against_every_term(spec, ash, bsh):
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal(ash), rng.standard_normal(bsh)
    want = _naive(spec, a, b)
    np.testing.assert_allclose(window_contract(spec, a, b), want, rtol=1e-12, atol=1e-12)
    out = np.full(want.shape, np.nan)
    run_window(spec, a, b, out)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


def test_concurrent_calls_and_given_outputs():
    """Scratch space is per calling thread and the plans are shared: four threads calling one compiled
    gradient at once each get their own right answer, into fresh arrays and into arrays they pass."""
    from concurrent.futures import ThreadPoolExecutor

    src = conv()
    grad = tcc.grad(src, of="y", wrt="x,w")
    g = tcc.compile(grad, threads=1)
    cases = []
    for seed in range(4):
        args = inputs(src, seed=seed)
        args["dy"] = np.random.default_rng(seed + 10).standard_normal((2, 16, 8, 10))
        cases.append((args, tcc.run(grad, args)))

    def call(k: int) -> float:
        args, ref = cases[k % 4]
        given = {"dx": np.full_like(ref["dx"], np.nan)} if k % 2 else {}
        got = g(**args, **given)
        if given:
            assert got["dx"] is given["dx"]
        return max(float(np.max(np.abs(got[n] - ref[n]))) for n in ("dx", "dw"))

    with ThreadPoolExecutor(4) as pool:
        assert max(pool.map(call, range(16))) < 1e-10


def test_size_one_axes_with_odd_strides_are_copied_first():
    """NumPy calls ``x[..., None]`` C-contiguous although its last stride is 0, and the merged positions
    took their stride from that axis: the kernel read the wrong memory, past ``x`` with a huge stride
    (found in review).  Such an operand is now copied to the strides C order gives."""
    src = conv(S=40, T=1, Q=1)
    f = tcc.compile(src)
    assert externs(f)
    rng = np.random.default_rng(9)
    w = rng.standard_normal((16, 16, 3, 1))
    base = rng.standard_normal((2, 16, 40))
    for x in (base[:, :, :, None], np.ascontiguousarray(base)[:, :, :, None][..., ::10 ** 9]):
        assert x.flags.c_contiguous and x.strides[-1] != 8
        np.testing.assert_allclose(f(x=x, w=w)["y"], tcc.run(src, {"x": x, "w": w})["y"], rtol=1e-12, atol=1e-12)


def test_a_window_whose_summed_index_comes_first():
    """``x[b, c, k - i]`` with ``k`` summed ranges over ``i..min(23, 59 + i)``: rewritten (the bounds the
    matcher expected for this form were those of ``k + i`` before review) and right."""
    src = ("input x[16, 16, 60], w[16, 16, 24, 20]\n"
           "y[b, o, i] = sum[c, k: i..min(23, 59 + i)](x[b, c, k - i] * w[o, c, k, i])\n")
    f = tcc.compile(src)
    assert externs(f) == ["extern contract(x[b, c, k - i], w[o, c, k, i]) -> y[b, o, i]"]
    args = inputs(src, seed=10)
    np.testing.assert_allclose(f(**args)["y"], tcc.run(src, args)["y"], rtol=1e-12, atol=1e-11)
