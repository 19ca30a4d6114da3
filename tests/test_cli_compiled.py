"""The command line's compiled paths: ``tcc run`` (native code), ``tcc compile
--emit loops|llvm|asm``, and dumps and timing that cover L2 passes and LLVM."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from tcc.cli.driver import main

ROOT = pathlib.Path(__file__).resolve().parent.parent
URBAN = str(ROOT / "examples" / "urban.tcc")

INLINE_LOGISTIC = """input X[m, n], w[n], y[m]
f = sum[i](log(1 + exp(-y[i] * sum[j](X[i, j] * w[j]))))
"""


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def hessian(tmp_path, capsys):
    """The Hessian-vector product of the inline logistic loss, by ``tcc grad`` twice."""
    src = tmp_path / "logistic.tcc"
    src.write_text(INLINE_LOGISTIC)
    g, h = tmp_path / "g.tcc", tmp_path / "h.tcc"
    assert main(["grad", str(src), "--of", "f", "--wrt", "w", "-o", str(g)]) == 0
    assert main(["grad", str(g), "--of", "dw", "--wrt", "w", "-o", str(h)]) == 0
    capsys.readouterr()
    return h


def _depth(text: str, kernel: str) -> int:
    body = text[text.index(f"kernel {kernel} {{"):]
    body = body[: body.index("\n}\n")]
    return max(len(re.match(r" *", line).group()) // 2 for line in body.splitlines() if "for " in line)


def test_emit_loops_shows_hoist_making_the_hessian_cheaper(hessian, capsys, tmp_path):
    code, plain, _ = _run(capsys, "compile", str(hessian), "--emit", "loops", "--passes", "infer-ranges,lower-loops")
    assert code == 0
    code, fast, _ = _run(capsys, "compile", str(hessian), "--emit", "loops")
    assert code == 0
    # before: one kernel, loops four deep (O(m n^3)); the sum over j inside every element
    assert plain.count("kernel ") == 1 and _depth(plain, "dw2") == 4
    # after: X w is computed in its own nest (O(m n)), fused per row (fuse-rows) with the
    # exp(-y X w) that fills a temporary; the main nest is three deep (O(m n^2))
    assert "temp dw2_t2[m]" in fast and "kernel dw2_t_dw2_t2 {" in fast
    assert "dw2_acc2 += X[dw2_z0, j] * w[j]" in fast
    main_kernel = fast[fast.index("kernel dw2 {"):]
    assert "X[dw2_z0, j] * w[j]" not in main_kernel and "exp(" not in main_kernel
    assert _depth(fast, "dw2") == 3
    # and by result: the compiled run equals the reference interpreter
    rng = np.random.default_rng(0)
    m, n = 7, 5
    arrays = dict(X=rng.random((m, n)), w=rng.random(n), y=rng.choice([-1.0, 1.0], m), df=np.array(0.7), ddw=rng.random(n))
    np.savez(tmp_path / "in.npz", **arrays)
    assert main(["run", str(hessian), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "c.npz")]) == 0
    assert main(["run", str(hessian), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "r.npz"),
                 "--reference"]) == 0
    with np.load(tmp_path / "c.npz") as c, np.load(tmp_path / "r.npz") as r:
        assert sorted(c.files) == sorted(r.files)
        for name in r.files:
            np.testing.assert_allclose(c[name], r[name], rtol=1e-12, atol=1e-300)


def test_emit_llvm_and_asm(capsys):
    code, llvm, _ = _run(capsys, "compile", URBAN, "--emit", "llvm")
    assert code == 0 and "define void @tcc_0_f" in llvm and "x double>" in llvm
    code, f32, _ = _run(capsys, "compile", URBAN, "--emit", "llvm", "--dtype", "float32")
    assert code == 0 and "float" in f32 and "double" not in f32
    code, asm, _ = _run(capsys, "compile", URBAN, "--emit", "asm")
    assert code == 0 and "tcc_0_f:" in asm
    # unoptimised: a pipeline that ends in lower-llvm prints before llvm-opt
    code, raw, _ = _run(capsys, "compile", URBAN, "--emit", "llvm", "--passes", "infer-ranges,lower-loops,lower-llvm")
    assert code == 0 and "x double>" not in raw and "alloca" in raw


def test_emit_is_deterministic(capsys):
    outs = [_run(capsys, "compile", URBAN, "--emit", e)[1] for e in ("loops", "llvm", "loops", "llvm")]
    assert outs[0] == outs[2] and outs[1] == outs[3]


def test_dumps_and_timing_cover_l2_and_llvm(capsys, tmp_path):
    code, _, err = _run(capsys, "compile", URBAN, "--emit", "llvm", "--time-passes",
                        "--dump-after", "hoist,llvm-opt", "--verify-each")
    assert code == 0
    assert "# -----// IR after hoist //----- #\n# tcc loops" in err
    assert "; -----// IR after llvm-opt //----- ;\n; ModuleID" in err
    for name in ("lower-loops", "interchange", "hoist", "peel", "unroll-jam", "parallel", "lower-llvm", "llvm-opt"):
        assert re.search(rf"^{re.escape(name)}\S*\s+\d+\.\d+", err, re.M), name
    code, _, _ = _run(capsys, "compile", URBAN, "--emit", "asm", "--dump-dir", str(tmp_path / "d"))
    assert code == 0
    files = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert files[0] == "00-input.tcc" and any(f.endswith("-lower-loops.loops") for f in files)
    assert any(f.endswith("-llvm-opt.ll") for f in files)


def test_run_float32_threads_and_bad_flags(capsys, tmp_path):
    rng = np.random.default_rng(1)
    arrays = dict(a=rng.random((3, 5)), b=rng.random((4, 5)), c=rng.random((3, 3)), d=rng.random(8))
    np.savez(tmp_path / "in.npz", **arrays)
    out = tmp_path / "o.npz"
    assert main(["run", URBAN, "--inputs", str(tmp_path / "in.npz"), "--output", str(out),
                 "--dtype", "float32", "--threads", "1"]) == 0
    with np.load(out) as data:
        assert data["f"].dtype == np.float32
        ref = np.exp(-sum((arrays["a"][:, None, k] + arrays["b"][None, :, k]) ** 2 * np.diag(arrays["c"])[:, None]
                          + arrays["d"][np.arange(3) + k][:, None] ** 3 for k in range(5)))
        np.testing.assert_allclose(data["f"], ref, rtol=1e-5)
    code, _, err = _run(capsys, "run", URBAN, "--inputs", str(tmp_path / "in.npz"), "--output", str(out),
                        "--target", "opencl")
    assert code == 1 and "invalid choice: 'opencl'" in err
    code, _, err = _run(capsys, "run", URBAN, "--inputs", str(tmp_path / "in.npz"), "--output", str(out),
                        "--threads", "0")
    assert code == 1 and err.strip() == "error: --threads must be a positive integer, got 0"
