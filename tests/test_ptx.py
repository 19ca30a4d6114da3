"""The GPU backend without a GPU: PTX for every example, checked by ptxas, and the grid mapping run in cuda-sim.

PTX generation needs only llvmlite (and libdevice for math functions);
``ptxas`` from the CUDA toolkit assembles what tcc generates, for sm_80 and
sm_90, wherever the toolkit is found.  Where it is not, the tests that need
it skip and say so.  ``cuda-sim`` compiles the very grid kernels for the host
and runs every simulated thread, with tiny blocks so the grid-stride loop
runs, and must match the reference interpreter.
"""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import tcc
from compare import assert_matches_interpreter, random_inputs
from tcc.backends import ptx as ptx_backend
from tcc.build import DEFAULT_GPU_PIPELINE, compile_pipeline
from tcc.cli.driver import main
from tcc.ir.diagnostics import TccError
from tcc.ir.loops_verifier import verify_loops
from tcc.pipeline import run_pipeline

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted(ROOT.joinpath("examples").glob("*.tcc"))
ARCHS = ("sm_80", "sm_90")

PTXAS = ptx_backend.find_ptxas()
try:
    LIBDEVICE = ptx_backend.find_libdevice()
except TccError:
    LIBDEVICE = None

needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="the CUDA toolkit's ptxas was not found (set CUDA_HOME); PTX is generated but not assembled")
needs_libdevice = pytest.mark.skipif(LIBDEVICE is None, reason="the CUDA toolkit's libdevice was not found (set CUDA_HOME); math functions cannot be linked")


def generate_ptx(program, arch: str = "sm_80", dtype: str = "float64", ptx: int = 0):
    return run_pipeline(program, compile_pipeline(None, dtype, "cuda", arch, ptx))


def gradients(path: pathlib.Path):
    p = tcc.transform(tcc.parse(path), "infer-ranges")
    return [tcc.grad(p, of=of, wrt=[d.name for d in p.inputs if not d.is_index]) for of in p.results()]


# ---------------------------------------------------------------------------
# PTX for the examples and their gradients, assembled by ptxas
# ---------------------------------------------------------------------------


@needs_libdevice
@needs_ptxas
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_and_gradient_gives_ptx_that_ptxas_accepts(path, dtype, arch):
    for program in [tcc.parse(path), *gradients(path)]:
        module = generate_ptx(program, arch, dtype)
        text = str(module)
        assert f".target {arch}" in text and ".address_size 64" in text
        assert len(re.findall(r"^\.visible \.entry ", text, re.M)) == len(module.program.kernels)
        assert "__nv_" not in text and ".extern" not in text  # libdevice linked and inlined
        ptx_backend.ptxas(text, arch)
        if arch == "sm_80":
            ptx_backend.ptxas(text, "sm_90")  # sm_80 PTX also assembles for Hopper


@needs_libdevice
def test_ptx_is_deterministic_and_uses_the_grid():
    program = gradients(ROOT / "examples" / "urban.tcc")[0]
    first, second = str(generate_ptx(program)), str(generate_ptx(program))
    assert first == second
    for reg in ("%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x"):
        assert reg in first
    assert "ld.global.nc" in first  # inputs are read through the read-only cache
    assert "atom." not in first  # gathers: no atomics


@needs_libdevice
def test_float32_math_stays_single_precision():
    text = str(generate_ptx(tcc.parse(ROOT / "examples" / "urban.tcc"), dtype="float32"))
    assert ".f32" in text and ".f64" not in text


@needs_libdevice
def test_ptx_version_and_arch_options():
    program = tcc.parse(ROOT / "examples" / "urban.tcc")
    assert ".version 7.0" in str(generate_ptx(program, "sm_80"))
    assert ".version 7.8" in str(generate_ptx(program, "sm_90"))
    assert ".version 8.0" in str(generate_ptx(program, "sm_90", ptx=80))
    with pytest.raises(TccError, match=r"invalid GPU architecture 'gfx90a' \(expected sm_XY, e\.g\. sm_80 or sm_90\)"):
        generate_ptx(program, "gfx90a")
    with pytest.raises(TccError, match="arch and ptx are options of target cuda, not of cpu"):
        compile_pipeline(None, "float64", "cpu", "sm_80")


def test_a_program_without_math_needs_no_libdevice(monkeypatch):
    monkeypatch.setattr(ptx_backend, "cuda_home_candidates", lambda: [])
    monkeypatch.setattr(ptx_backend, "_libdevice_bitcode", lambda: ptx_backend.find_libdevice().read_bytes())
    text = str(generate_ptx(tcc.parse("input x[n], w[3]\noutput y[n - 2]\ny[i] = sum[k](x[i + k] * w[k])\n")))
    assert ".visible .entry tcc_0_y(" in text
    with pytest.raises(TccError) as info:
        generate_ptx(tcc.parse("input x[n]\noutput y[n]\ny[i] = exp(x[i])\n"))
    assert info.value.message == (
        "the CUDA backend needs libdevice (nvvm/libdevice/libdevice.10.bc of the CUDA toolkit) for math "
        "functions, and none was found (looked in: no CUDA toolkit directory exists); set CUDA_HOME to the "
        "toolkit's directory"
    )


@needs_ptxas
def test_ptxas_errors_are_reported():
    with pytest.raises(TccError, match=r"ptxas rejected the PTX for sm_80: .*"):
        ptx_backend.ptxas(".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k() { bogus; }\n", "sm_80")


# ---------------------------------------------------------------------------
# The GPU pipeline's L2: one thread per output element
# ---------------------------------------------------------------------------


def test_gpu_pipeline_marks_the_whole_band_and_keeps_kernels_apart():
    grad = gradients(ROOT / "examples" / "urban.tcc")[0]
    loops = run_pipeline(grad, DEFAULT_GPU_PIPELINE)
    verify_loops(loops)  # nested parallel loops pass the race check
    from tcc.backends.llvm import grid_band

    bands = {k.name: [loop.var for loop in grid_band(k)] for k in loops.kernels}
    assert bands["f"] == ["i", "j"]  # f is not fused with da over i alone: that would lose j from the grid
    assert all(len(b) >= 1 for b in bands.values())
    cpu = run_pipeline(grad, "infer-ranges,lower-loops,hoist,fuse,parallel")
    assert any(k.name.startswith("f_") for k in cpu.kernels)  # the CPU's fuse does fuse them


def test_parallel_depth_option():
    p = tcc.parse("input a[n, m]\noutput b[n, m]\nb[i, j] = a[i, j] * 2\n")
    one = str(run_pipeline(p, "infer-ranges,lower-loops,parallel"))
    deep = str(run_pipeline(p, "infer-ranges,lower-loops,parallel{depth=2}"))
    assert one.count("parallel for") == 1 and deep.count("parallel for") == 2
    with pytest.raises(TccError, match="depth must be a positive integer, not 0"):
        run_pipeline(p, "infer-ranges,lower-loops,parallel{depth=0}")


# ---------------------------------------------------------------------------
# cuda-sim: the grid kernels run on the host
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_and_gradient_runs_in_the_simulator(path):
    for program in [tcc.parse(path), *gradients(path)]:
        assert_matches_interpreter(program, target="cuda-sim")
    assert_matches_interpreter(tcc.parse(path), dtype="float32", target="cuda-sim")


@pytest.mark.parametrize("n", [0, 1, 23, 24, 25, 200])
def test_simulator_grid_stride_loop_covers_every_element(n):
    # 24 simulated threads (3 blocks of 8): n = 200 needs the grid-stride loop, n = 24 exactly fills the grid
    src = "input x[n], w[5], v[3]\noutput y[n, 3]\ny[i, j] = sum[k](x[i] * w[k]) + v[j]\n"
    assert_matches_interpreter(tcc.parse(src), sizes={"n": n}, target="cuda-sim")


def test_simulator_scalar_reduction_runs_on_one_thread():
    src = "input x[n]\noutput s\ns = sum[i](x[i] * x[i])\n"
    assert_matches_interpreter(tcc.parse(src), sizes={"n": 100}, target="cuda-sim")


def test_simulator_windowed_gradients_with_symbolic_sizes():
    src = "input x[n], w[k]\noutput y[n - k + 1]\ny[i] = sum[j](x[i + j] * w[j])\n"
    g = tcc.grad(tcc.parse(src), of="y", wrt=["x", "w"])
    for n, k in [(50, 7), (7, 7), (30, 1)]:
        assert_matches_interpreter(g, sizes={"n": n, "k": k}, target="cuda-sim")


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


@needs_libdevice
def test_cli_emit_ptx_and_dump_dir(tmp_path, capsys):
    src = str(ROOT / "examples" / "urban.tcc")
    assert main(["compile", src, "--emit", "ptx", "--arch", "sm_90", "--dump-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert ".target sm_90" in out
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert dumps[-1].endswith("-emit-ptx.ptx") and dumps[-2].endswith("-llvm-opt.ll")
    text = (tmp_path / dumps[-1]).read_text()
    assert text.startswith("// -----// IR after emit-ptx //----- //\n")
    assert text.split("\n", 1)[1] == out


@needs_libdevice
def test_cli_emit_llvm_for_cuda_is_the_linked_nvptx_module(capsys):
    assert main(["compile", str(ROOT / "examples" / "urban.tcc"), "--emit", "llvm", "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert 'target triple = "nvptx64-nvidia-cuda"' in out
    assert "ptx_kernel" in out and "declare double @__nv_exp" not in out


def test_cli_emit_ptx_refuses_another_target(capsys):
    assert main(["compile", str(ROOT / "examples" / "urban.tcc"), "--emit", "ptx", "--target", "cpu"]) == 1
    assert "error: --emit ptx generates code for target cuda, not 'cpu'" in capsys.readouterr().err


def test_cli_run_cuda_sim_matches_reference(tmp_path):
    src = str(ROOT / "examples" / "urban.tcc")
    program = tcc.transform(tcc.parse(ROOT / "examples" / "urban.tcc"), "infer-ranges")
    np.savez(tmp_path / "in.npz", **random_inputs(program))
    for target, out in (("cuda-sim", "sim.npz"), ("cpu", "cpu.npz")):
        assert main(["run", src, "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / out), "--target", target]) == 0
    assert main(["run", src, "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "ref.npz"), "--reference"]) == 0
    sim, ref = np.load(tmp_path / "sim.npz"), np.load(tmp_path / "ref.npz")
    np.testing.assert_allclose(sim["f"], ref["f"], rtol=1e-12)


def test_cli_check_with_the_simulator(capsys):
    assert main(["check", str(ROOT / "examples" / "urban.tcc"), "--of", "f", "--wrt", "a,d", "--target", "cuda-sim"]) == 0
    assert "ok" in capsys.readouterr().out


def test_full_fusion_leaves_loopless_kernels_alone():
    # two scalar results: kernels without loops have no spine to fuse over
    p = tcc.parse("input x[n]\noutput s, t\ns = sum[i](x[i])\nt = s * 2\n")
    loops = run_pipeline(p, "infer-ranges,lower-loops,fuse{full=true}")
    assert len(loops.kernels) == 2
    assert_matches_interpreter(p, sizes={"n": 30}, target="cuda-sim")


# ---------------------------------------------------------------------------
# split-reduction: partial sums for long reductions over small bands
# ---------------------------------------------------------------------------

ROW_SUMS = "input x[8, m]\noutput s[8]\ns[i] = sum[j](x[i, j] * x[i, j]) * 2\n"
SPLIT = "infer-ranges,lower-loops,parallel{depth=8},split-reduction{threads=32 min-work=4}"


def test_split_reduction_makes_a_partial_sum_kernel():
    loops = run_pipeline(tcc.parse(ROW_SUMS), SPLIT)
    verify_loops(loops)
    assert [k.name for k in loops.kernels] == ["s_part", "s"]
    text = str(loops)
    # 8 rows x 4 parts = the 32 threads asked for
    assert "temp s_part[8, 4]" in text
    assert "parallel for p in 0..3" in text
    assert "for j_t in (3 - p) // 4..(m - p - 1) // 4" in text  # ceil((0 - p)/4) .. floor((m - 1 - p)/4)


@pytest.mark.parametrize("m", [100, 0, 1, 63, 64, 65])
def test_split_reduction_matches_the_interpreter(m):
    assert_matches_interpreter(tcc.parse(ROW_SUMS), sizes={"m": m}, passes=SPLIT, target="cuda-sim")
    assert_matches_interpreter(tcc.parse(ROW_SUMS), sizes={"m": m}, passes=SPLIT)  # the CPU runs it too


def test_split_reduction_leaves_a_row_sum_of_unknown_shape_alone():
    # n x m may be tall and narrow: partial sums per row would only cost memory
    row_sums = tcc.parse("input x[n, m]\noutput s[n]\ns[i] = sum[j](x[i, j])\n")
    assert [k.name for k in run_pipeline(row_sums, DEFAULT_GPU_PIPELINE).kernels] == ["s"]
    # a reduction with more symbolic dimensions than the band is split
    window = tcc.parse("input x[n, m]\noutput s[n]\ns[i] = sum[j](sum[k](x[j, k] * x[i, k]))\n")
    assert [k.name for k in run_pipeline(window, DEFAULT_GPU_PIPELINE).kernels] == ["s_part", "s"]


def test_split_reduction_of_a_scalar_and_of_a_short_outer_loop():
    scalar = tcc.parse("input x[n]\noutput s\ns = sum[i](x[i])\n")
    loops = run_pipeline(scalar, "infer-ranges,lower-loops,parallel,split-reduction")
    assert [k.name for k in loops.kernels] == ["s_part", "s"]
    assert_matches_interpreter(scalar, sizes={"n": 5000}, target="cuda-sim")
    # the Urban gradient scaled up: dd sums 64 x 512 terms per element; the split takes the
    # longer, inner loop (512), not the outer window (64), and leaves da (long band) alone
    big = tcc.parse(
        "input a[512, 64], b[512, 64], c[512, 512], d[576]\noutput f[512, 512]\n"
        "f[i, j] = exp(-sum[k: 0..63]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))\n"
    )
    g = tcc.grad(big, of="f", wrt=["a", "b", "c", "d"])
    loops = run_pipeline(g, DEFAULT_GPU_PIPELINE)
    names = [k.name for k in loops.kernels]
    assert "dd_part" in names and "da_part" not in names
    assert "for dd_z0_t in (127 - p" in str(loops)


def test_split_reduction_options_are_checked():
    with pytest.raises(TccError, match="min-work must be a positive integer, not 0"):
        run_pipeline(tcc.parse(ROW_SUMS), "infer-ranges,lower-loops,split-reduction{min-work=0}")
