"""``col2im``: a strided convolution's input gradient as one contraction and a gather.

Every compiled result is checked against the reference interpreter on the *source* program (the
derivative's sums), so the rewrite is checked with it; the derivatives themselves against finite
differences.  The pass's own text is checked on the conv2d benchmark's shapes.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tcc
from tcc.build import DEFAULT_GPU_PIPELINE, DEFAULT_LOOP_PIPELINE
from tcc.passes.col2im import Col2im
from tcc.passes.infer_ranges import InferRanges

from strided_conv import args_for, assert_agrees, conv

# the loop pipeline with the pass's and blas's thresholds off: small shapes take the same paths
SMALL = DEFAULT_LOOP_PIPELINE.replace("col2im", "col2im{min-dim=1}").replace("blas", "blas{min-work=1}")


def gradient(src: str) -> object:
    return tcc.grad(src, of="y", wrt="x")


def after(program, **options) -> str:  # noqa: ANN001
    return str(tcc.transform(program, [InferRanges(), Col2im(**options)]))


def test_the_benchmark_shapes_give_one_contraction_and_a_gather():
    g = gradient(conv(B=8, C=16, O=32, S=64, T=64))
    text = after(g)
    assert "local dx_col[16, 3, 3, 8, 31, 31]" in text
    assert ("dx_col[dx_1, dx_k, dx_k2, dx_0, dx_z1, dx_z2] = sum[dx_z0: 0..31](dy[dx_0, dx_z0, dx_z1, dx_z2]"
            " * w[dx_z0, dx_1, dx_k, dx_k2])") in text
    assert ("dx[dx_0, dx_1, dx_2, dx_3] = sum[dx_z2: max(0, (dx_3 - 1) // 2)..min(30, dx_3 // 2), "
            "dx_z1: max(0, (dx_2 - 1) // 2)..min(30, dx_2 // 2)](dx_col[dx_1, dx_2 - 2*dx_z1, dx_3 - 2*dx_z2, "
            "dx_0, dx_z1, dx_z2])") in text
    f = tcc.compile(g)
    assert "extern contract(dy[dx_0, dx_z0, dx_z1, dx_z2], w[dx_z0, dx_1, dx_k, dx_k2]) -> dx_col[" in str(f.loops)
    args = args_for(g)
    assert_agrees(f, g, args, "dx")


def test_the_rewritten_program_prints_parses_back_and_runs_in_the_interpreter():
    g = gradient(conv())
    text = after(g, min_dim=1)
    assert "dx_col" in text
    back = tcc.parse(text)
    assert str(back) == text
    args = args_for(g)
    np.testing.assert_allclose(tcc.run(back, args)["dx"], tcc.run(g, args)["dx"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-11), (np.float32, 2e-4)])
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_gradients_agree_with_the_sums(dtype, tol, threads):
    src = conv(B=3, C=16, O=24, S=20, T=17)
    g = tcc.grad(src, of="y", wrt="x,w")
    f = tcc.compile(g, dtype=dtype, threads=threads, passes=SMALL)
    assert "dx_col" in str(f.loops)
    args = args_for(g, dtype=dtype)
    ref = tcc.run(g, {k: v.astype(np.float64) for k, v in args.items()})
    got = f(**args)
    for name in ("dx", "dw"):
        assert got[name].dtype == dtype
        np.testing.assert_allclose(got[name], ref[name], rtol=tol, atol=tol)


def test_given_output_arrays_are_filled():
    g = gradient(conv())
    f = tcc.compile(g, passes=SMALL)
    args = args_for(g)
    out = np.full((2, 16, 12, 13), np.nan)
    assert f(**args, dx=out)["dx"] is out
    np.testing.assert_allclose(out, tcc.run(g, args)["dx"], rtol=1e-12, atol=1e-11)


def test_the_compiled_gradient_agrees_with_finite_differences():
    """<dx, v> against the central difference of <dy, y(x + h v)>, both programs compiled."""
    src = conv(B=2, C=3, O=4, S=9, T=8, s=2, t=2)
    f, g = tcc.compile(src), tcc.compile(gradient(src), passes=SMALL)
    assert "dx_col" in str(g.loops)
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((4, 3, 3, 3))
    dy = rng.standard_normal(f(x=x, w=w)["y"].shape)
    dx = g(x=x, w=w, dy=dy)["dx"]
    h = 1e-6
    for _ in range(3):
        v = rng.standard_normal(x.shape)
        fd = (np.vdot(dy, f(x=x + h * v, w=w)["y"]) - np.vdot(dy, f(x=x - h * v, w=w)["y"])) / (2 * h)
        assert abs(fd - np.vdot(dx, v)) <= 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize("s, t, pad, R, Q", [
    (2, 2, "", 3, 3),
    (3, 3, "", 5, 4),    # one or two taps per output and axis
    (2, 1, "", 3, 2),    # stride 1 on one axis: that window is in dy, w - z with |c| = 1
    (2, 2, "", 4, 4),    # an even kernel
    (2, 2, " + 1", 3, 3),  # an offset: the window is u - 2*z - 1
])
def test_strides_offsets_and_kernel_shapes(s, t, pad, R, Q):
    src = conv(B=2, C=5, O=7, S=13, T=11, R=R, Q=Q, s=s, t=t, pad=pad)
    g = gradient(src)
    f = tcc.compile(g, passes=SMALL)
    assert "dx_col" in str(f.loops)
    args = args_for(g, seed=s * 10 + t)
    assert_agrees(f, g, args, "dx")


def test_symbolic_batch_including_an_empty_one():
    src = conv(B="n", C=16, O=16, S=12, T=12)
    g = gradient(src)
    f = tcc.compile(g)  # the default thresholds: the symbolic batch counts as large
    assert "extern contract(" in str(f.loops) and "dx_col" in str(f.loops)
    for n in (0, 1, 3):
        args = args_for(g, sizes={"n": n})
        got = f(**args)["dx"]
        assert got.shape == (n, 16, 12, 12)
        np.testing.assert_allclose(got, tcc.run(g, args)["dx"], rtol=1e-12, atol=1e-11)


def test_edge_data_agrees_with_the_sums():
    """inf, NaN and -0 reach dx through the GEMM and the gather as through the sums."""
    g = gradient(conv(S=9, T=9))
    f = tcc.compile(g, passes=SMALL)
    args = args_for(g)
    args["dy"][:] = 0.0
    args["dy"][0, :, 0, 0] = [np.inf, -np.inf, np.nan, -0.0] * 4
    args["dy"][1, :, 1, 1] = -0.0
    args["w"][:] = 0.0
    args["w"][0, :, 0, 0] = 1.0
    args["w"][1, :, 2, 2] = -0.0
    got, ref = f(**args)["dx"], tcc.run(g, args)["dx"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    finite = ~np.isnan(ref)
    np.testing.assert_array_equal(got[finite], ref[finite])
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(ref[finite]))


@pytest.mark.parametrize("src, why", [
    (conv(s=1, t=1), "stride 1: blas's windows"),
    ("input x[64, 200], w[16]\ny[i] = sum[k](x[i, 2*i + k] * w[k])\n", "not a gradient shape"),
    (conv(R=1, Q=1), "a 1x1 kernel: one term (a where), no sum over taps"),
    (conv(s=3, t=3), "stride 3, 3 taps: one term per element"),
    (conv(O=4), "an inner dimension of 4 < min-dim"),
])
def test_what_stays(src, why):
    g = gradient(src) if "y[b" in src else tcc.parse(src)
    assert "_col" not in after(g), why


def test_the_forward_strided_convolution_is_not_taken():
    """``x[b, c, 2*i + p, ...]``: the free index has the stride; a grid over x's positions is 4x the work."""
    assert "_col" not in after(tcc.parse(conv(B=8, C=32, O=32, S=64, T=64)), min_dim=1)


def test_the_weight_gradient_fails_the_cost_model():
    """``x[b, c, p + 2*z1, ...]`` has the pattern, but its grid is 64 x 31 per axis for 3 x 31 terms read:
    21 times the work per axis (``im2col`` takes it instead)."""
    g = tcc.grad(conv(B=8, C=16, O=32, S=64, T=64), of="y", wrt="w")
    assert "_col" not in after(g)
    forced = after(g, max_waste=1e6, min_dim=1)  # (its GEMM's inner dimension is the batch, 8)
    assert "local dw_col[16, 64, 64, 32, 31, 31]" in forced  # 2e9 elements: not compiled here


def test_too_much_waste_is_refused():
    """A gradient cropped to a small output: most of the grid's taps would be read by no element."""
    src = ("input dy[4, 32, 40], w[32, 16, 3]\noutput dx[4, 16, 9]\n"
           "dx[b, c, u] = sum[z: max(0, (u - 1) // 2)..min(39, u // 2), o: 0..31](dy[b, o, z] * w[o, c, u - 2*z])\n")
    assert "_col" not in after(tcc.parse(src), min_dim=1)
    assert "_col" in after(tcc.parse(src), min_dim=1, max_waste=100)


def test_a_sum_capped_by_a_constant_bound_counts_as_waste():
    """z: ..min(9, u // 2) reads 10 of dy's 2000 positions: the grid over all 2000 would be 200x the work
    (the review's case: 0.98 ms rewritten against 0.12 ms as loops)."""
    src = ("input dy[64, 2000], w[64, 32, 3]\noutput dx[32, 4000]\n"
           "dx[c, u] = sum[z: max(0, (u - 1) // 2)..min(9, u // 2), o: 0..63](dy[o, z] * w[o, c, u - 2*z])\n")
    assert "_col" not in after(tcc.parse(src), min_dim=1)


def test_no_contracted_index_stays():
    """Without a summed index in both reads the grid is an outer product: nothing for a GEMM to do."""
    src = ("input dy[10], w[3]\noutput dx[21]\n"
           "dx[u] = sum[z: max(0, (u - 1) // 2)..min(9, u // 2)](dy[z] * w[u - 2*z])\n")
    assert "_col" not in after(tcc.parse(src), min_dim=1, max_waste=100)


def test_a_dilated_forward_convolution_stays():
    """x[b, c, i + 2*p, ...] has the pattern and little waste, but a grid of 75 MB for a 7.4 MB result
    (measured no faster): the grid's size is held to max-waste times the result's and the reads'."""
    src = ("input x[8, 32, 64, 64], w[32, 32, 3, 3]\n"
           "y[b, o, i, j] = sum[c, p, q](x[b, c, i + 2*p, j + 2*q] * w[o, c, p, q])\n")
    assert "_col" not in after(tcc.parse(src))
    assert "local y_col[8, 64, 64, 32, 3, 3]" in after(tcc.parse(src), max_waste=20)


def test_a_size_read_as_an_index_stays():
    src = ("input dy[4, 32, 20], w[n + 1, 32, 16, 3]\noutput dx[4, 16, 40]\n"
           "dx[b, c, u] = sum[z: max(0, (u - 1) // 2)..min(19, u // 2), o: 0..31](dy[b, o, z] * w[n, o, c, u - 2*z])\n")
    assert "_col" not in after(tcc.parse(src), min_dim=1)


def test_a_batch_index_in_both_reads_stays():
    src = ("input dy[4, 32, 20], w[4, 32, 16, 3]\noutput dx[4, 16, 40]\n"
           "dx[b, c, u] = sum[z: max(0, (u - 1) // 2)..min(19, u // 2), o: 0..31](dy[b, o, z] * w[b, o, c, u - 2*z])\n")
    assert "_col" not in after(tcc.parse(src), min_dim=1)


def test_the_gpu_pipeline_keeps_the_loop_nest():
    assert "col2im" not in DEFAULT_GPU_PIPELINE
    g = gradient(conv())
    f = tcc.compile(g, target="cuda-sim")
    args = args_for(g)
    assert_agrees(f, g, args, "dx")


def test_cuda_sim_runs_the_rewritten_program_as_loops():
    """A user pipeline with the pass on the GPU: without blas, dx_col is a loop nest there."""
    g = gradient(conv())
    f = tcc.compile(g, target="cuda-sim", passes=DEFAULT_GPU_PIPELINE.replace("contract-order,",
                                                                              "contract-order,col2im{min-dim=1},"))
    args = args_for(g)
    assert_agrees(f, g, args, "dx")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.sampled_from([0, 1, 2, 3]), C=st.integers(1, 5), O=st.integers(1, 5), S=st.integers(1, 11),
       T=st.integers(1, 11), R=st.integers(1, 4), Q=st.integers(1, 4), s=st.integers(1, 3), t=st.integers(2, 3),
       seed=st.integers(0, 9))
def test_random_strided_gradients_against_the_sums(B, C, O, S, T, R, Q, s, t, seed):  # noqa: N803
    if S < R or T < Q:
        return
    g = gradient(conv(B=B, C=C, O=O, S=S, T=T, R=R, Q=Q, s=s, t=t))
    f = tcc.compile(g, passes=SMALL)
    args = args_for(g, seed=seed)
    assert_agrees(f, g, args, "dx")
