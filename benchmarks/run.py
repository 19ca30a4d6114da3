"""tcc's compiled kernels against JAX, PyTorch and NumPy, side by side.

    python benchmarks/run.py [--quick] [--repeat N] [--case NAME[,NAME]] [--write]

Cases (``--case``; default all):

* ``urban``       -- the Urban paper's sec. 6 function scaled up,
                     ``f[i, j] = exp(-sum[k]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))``,
                     i, j = 512, k = 64: forward, all four gradients
                     (forward+backward), and backward only.
* ``correlation`` -- ``y[i] = sum[k](x[i + k] * w[k])``, n = 10**6, k = 31
                     (valid): forward (also ``np.correlate``) and gradients for x, w.
* ``conv2d``      -- NCHW convolution with stride 2, batch 8, 16 -> 32 channels,
                     64x64 images, 3x3 kernels: forward and gradients for x, w.
* ``logistic``    -- ``y[i] = 1/(1 + exp(-x[i]))`` on 10**7 elements, float64
                     and float32, with a new output array and with a given one.
* ``compile``     -- parse + grad + compile of ``examples/urban.tcc`` with all
                     four gradients from cold caches (median, per-stage split).

The workload families of issue 13 (``--case families`` runs all six), each
forward, forward + all gradients and backward only, with NumPy's forward
where it has one (``benchmarks/families.py``):

* ``dense``       -- ``Y[a, c] = tanh(sum[k](X[a, k] * W[c, k]) + b[c])``,
                     512x1024x1024, gradients for X, W, b.
* ``attention``   -- batched scores ``0.125 * Q K^T`` and their softmax over
                     the last axis, 8x256x256x64, gradients for Q, K.
* ``conv2d-s1``   -- NCHW convolution with stride 1, batch 8, 32 -> 32
                     channels, 34x34 images, 3x3 kernels: gradients for x, w.
* ``contract3``   -- ``T[i, j, l] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])``,
                     every extent 48, gradients for A, B, C.
* ``quadform``    -- ``f = x^T A x``, n = 2000, value and gradient for x.
* ``layernorm``   -- layer normalisation of 512x1024 over the last axis with
                     gain and bias, gradients for X, g, b.

The indirect-indexing workloads of issue 15 (``--case sparse`` runs all
three; ``benchmarks/sparse.py``), the index arrays inputs of every framework:

* ``embedding-bag`` -- 10 000 bags of 10**6 tokens in all over a 50 000 x 64
                     table, summed; gradient for the table.
* ``csr-spmv``    -- a 10**5 x 10**5 CSR matrix with 10**6 non-zeros times a
                     vector; gradients for the values and the vector.
* ``csr-spmv-x``  -- the same, gradient for the vector only (so that
                     ``torch.sparse.mm`` can be differentiated).

Before the first family the run measures the machine's matmul peak (NumPy,
float64, 2048x2048, median of 7); the table gets a column with tcc's GFLOP/s
on each contraction row (useful FLOPs, see ``families.py``, over its median)
and its fraction of that peak.  Before each dense family it also times
``np.matmul`` on that family's own product shapes (``families.products``):
the issue's 80 % goal is read against that rate.

Everything is float64 unless said otherwise (JAX runs with
``jax_enable_x64``).  Every peer's results are compared with tcc's before it
is timed (norm-wise relative error <= 1e-9 in float64, 1e-5 in float32): a
peer that disagrees is reported as ``wrong``, one that raises as ``failed``,
one that is not installed as ``missing``.  Every framework uses all cores.
Timing: see ``benchmarks/harness.py`` (first call and one warm-up excluded,
round-robin rounds, medians); the problems of cases 1-3 and their rows are in
``benchmarks/problems.py``, shared with ``gpu.py``.  ``--write`` records a full
run in ``docs/benchmarks.md`` (between the ``results`` markers).
"""
from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import families as FAM  # noqa: E402
import harness as H  # noqa: E402
import problems as P  # noqa: E402
import sparse as SP  # noqa: E402
from problems import Peers, grad_case, jax_ready, unavailable  # noqa: E402
from tcc.runtime.externs.blas_spin import openblas_spin  # noqa: E402

CASES = ("urban", "correlation", "conv2d", "logistic", "compile") + FAM.FAMILIES + SP.CASES
GROUPS = {"families": FAM.FAMILIES, "sparse": SP.CASES}     # --case names that stand for several cases
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- results:begin (benchmarks/run.py --write) -->", "<!-- results:end -->"

GOAL_LOGISTIC = 1.5         # tcc at least this many times faster than NumPy
GOAL_COMPILE_S = 1.0        # parse + grad + compile of the seed example
GOAL_PEAK = 0.8             # dense contractions: tcc's GFLOP/s at least this fraction of NumPy's matmul peak


# --------------------------------------------------------------------------
# peers
# --------------------------------------------------------------------------
def load_peers(cores: int) -> Peers:
    peers = Peers()
    peers.versions["numpy"] = np.__version__
    peers.threads["numpy"] = "1 (ufuncs and np.correlate are single-threaded)"

    def setup_jax() -> None:
        jax, jnp, lax = P.import_jax()
        peers.jax, peers.jnp, peers.lax = jax, jnp, lax
        peers.versions["jax"] = jax.__version__
        devices = jax.devices()
        peers.threads["jax.jit"] = f"{cores} (XLA's CPU client uses every core; device {devices[0].platform})"

    def setup_torch() -> None:
        torch = P.import_torch()
        torch.set_num_threads(cores)
        peers.torch = torch
        peers.versions["torch"] = torch.__version__
        peers.threads["torch"] = f"{torch.get_num_threads()} (torch.set_num_threads({cores}))"

    P.import_peer(peers, "jax", setup_jax)
    P.import_peer(peers, "torch", setup_torch)
    return peers


# --------------------------------------------------------------------------
# run context
# --------------------------------------------------------------------------
@dataclass
class Ctx(P.RunContext):
    quick: bool
    passes: str | None
    quiet_below: float | None
    primer: bool
    repeat: int
    budget_s: float
    min_time_s: float
    peers: Peers
    rows: list[H.Row] = field(default_factory=list)
    breakdowns: list[tuple[str, Any, list]] = field(default_factory=list)   # (title, compiled, kernel times)
    compile_times: list[tuple[str, float]] = field(default_factory=list)    # (program, seconds)
    extra: dict[str, Any] = field(default_factory=dict)

    def tcc_compile(self, name: str, program: Any, **kw: Any) -> Any:
        import tcc

        t0 = time.perf_counter()
        compiled = tcc.compile(program, passes=self.passes, **kw)
        self.compile_times.append((name, time.perf_counter() - t0))
        return compiled

    def breakdown(self, title: str, compiled: Any, arrays: dict) -> None:
        times = H.kernel_times(compiled, arrays, max(3, min(self.repeat, 10)))
        self.breakdowns.append((title, compiled, times))


# --------------------------------------------------------------------------
# cases 1-3: a function and its gradients (problems.py)
# --------------------------------------------------------------------------
def case_urban(ctx: Ctx) -> None:
    I, J, K = (128, 128, 32) if ctx.quick else (512, 512, 64)
    grad_case(ctx, P.urban(I, J, K, ctx.peers, torch_compile=True))


def case_correlation(ctx: Ctx) -> None:
    n, k = (10 ** 5, 31) if ctx.quick else (10 ** 6, 31)
    grad_case(ctx, P.correlation(n, k, ctx.peers, numpy_fwd=lambda x, w: np.correlate(x, w, "valid"),
                                 notes={"forward": "numpy: np.correlate"}))


def case_conv2d(ctx: Ctx) -> None:
    B, C, O, S, R = (2, 16, 32, 64, 3) if ctx.quick else (8, 16, 32, 64, 3)
    grad_case(ctx, P.conv2d(B, C, O, S, R, ctx.peers))


# --------------------------------------------------------------------------
# the workload families of issue 13 (families.py)
# --------------------------------------------------------------------------
def family_case(name: str) -> Any:
    """The case function of the family ``name``: measures the matmul peak first if no case has yet."""
    def run(ctx: Ctx) -> None:
        if "peak" not in ctx.extra:
            n, repeat = (1024, 3) if ctx.quick else (2048, 7)
            with openblas_spin():  # NumPy as it runs without tcc (tcc shortens OpenBLAS's spin: tcc.runtime.externs.blas_spin)
                ctx.extra["peak"] = (n, repeat, FAM.matmul_peak(n, repeat))
            ctx.log(f"  matmul peak: numpy float64 {n}x{n}, median of {repeat}: {ctx.extra['peak'][2]:.1f} GFLOP/s")
        quick, peers = ctx.quick, ctx.peers
        if name == "dense":
            sizes: tuple[int, ...] = (128, 256, 256) if quick else (512, 1024, 1024)
            gc = FAM.dense(*sizes, peers)
        elif name == "attention":
            sizes = (2, 64, 64, 32) if quick else (8, 256, 256, 64)
            gc = FAM.attention(*sizes, peers)
        elif name == "conv2d-s1":
            sizes = (2, 8, 8, 18, 3) if quick else (8, 32, 32, 34, 3)
            gc = P.conv2d(*sizes, peers, stride=1, case=name, flops=FAM.conv2d_flops(*sizes, stride=1))
        elif name == "contract3":
            sizes = (24,) if quick else (48,)
            gc = FAM.contract3(*sizes, peers)
        elif name == "quadform":
            gc = FAM.quadform(500 if quick else 2000, peers)
        elif name == "attention-causal":
            gc = FAM.causal_attention(*((2, 64, 32) if quick else (8, 256, 64)), peers)
        elif name == "gelu-def":
            gc = FAM.gelu_def(*((128, 256, 256) if quick else (512, 1024, 1024)), peers)
        elif name == "cosine":
            gc = FAM.cosine(*((128, 128, 64) if quick else (256, 256, 128)), peers)
        else:
            gc = FAM.layernorm(*((128, 256) if quick else (512, 1024)), peers)
        if name in FAM.DENSE_FAMILIES:
            prods = FAM.products(name, sizes)
            assert FAM.product_flops(prods) == gc.flops[P.FB], name   # the same work as the row's FLOPs
            gc.same_shapes = FAM.numpy_matmul_round(prods)   # timed in the row, beside tcc
        grad_case(ctx, gc)
    return run


# --------------------------------------------------------------------------
# case 4: fused logistic
# --------------------------------------------------------------------------
def case_logistic(ctx: Ctx) -> None:
    n = 10 ** 6 if ctx.quick else 10 ** 7
    peers = ctx.peers
    src = f"input x[{n}]\ny[i] = 1 / (1 + exp(-x[i]))\n"
    for dtype in ("float64", "float32"):
        tol = 1e-9 if dtype == "float64" else 1e-5
        rng = np.random.default_rng(4)
        x = rng.uniform(-8, 8, n).astype(dtype)
        f = ctx.tcc_compile(f"logistic: {dtype}", src, dtype=dtype)
        ref = f(x=x)
        y_tcc = np.empty_like(x)
        y_np = np.empty_like(x)

        def np_out():
            np.negative(x, out=y_np)
            np.exp(y_np, out=y_np)
            np.add(y_np, 1, out=y_np)
            np.divide(1, y_np, out=y_np)
            return {"y": y_np}

        new = [H.Candidate("tcc", lambda: f(x=x), check=False)]
        given = [H.Candidate("tcc", lambda: f(x=x, y=y_tcc), check=False)]
        if peers.jax is not None:
            jnp = peers.jnp
            jx = jnp.asarray(x)
            jf = peers.jax.jit(lambda v: 1 / (1 + jnp.exp(-v)))
            new.append(H.Candidate("jax.jit", lambda: {"y": jax_ready(jf(jx))}))
        else:
            new.append(unavailable("jax.jit", peers.jax_status))
        if peers.torch is not None:
            torch = peers.torch
            tx = torch.from_numpy(x)
            ty = torch.from_numpy(np.empty_like(x))
            new.append(H.Candidate("torch", lambda: {"y": torch.sigmoid(tx)}))
            given.append(H.Candidate("torch", lambda: {"y": torch.sigmoid(tx, out=ty)}))
        else:
            new.append(unavailable("torch", peers.torch_status))
            given.append(unavailable("torch", peers.torch_status))
        new.append(H.Candidate("numpy", lambda: {"y": 1 / (1 + np.exp(-x))}))
        given.append(H.Candidate("numpy", np_out))
        ctx.row("logistic", f"{dtype}, new output array", new, {"y": ref["y"]}, tol=tol,
                note="torch: torch.sigmoid; numpy: 1/(1+np.exp(-x))")
        ctx.row("logistic", f"{dtype}, output array given", given, {"y": ref["y"]}, tol=tol,
                note="tcc: f(x=x, y=out); torch: sigmoid(out=); numpy: four ufuncs with out=")
    ctx.breakdown("logistic: float32", f, {"x": x})


# --------------------------------------------------------------------------
# case 5: compile time of the seed example
# --------------------------------------------------------------------------
COLD_PROCESS = r"""
import time
t0 = time.perf_counter()
import tcc
t1 = time.perf_counter()
p = tcc.parse({path!r})
g = tcc.grad(p, of="f", wrt="a,b,c,d")
c = tcc.compile(g, passes={passes!r})
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def case_compile(ctx: Ctx) -> None:
    import tcc
    from tcc.build import clear_cache as clear_compiled
    from tcc.instruments import TimePasses
    from tcc.ir.polyhedra import clear_cache as clear_proofs

    path = ROOT / "examples" / "urban.tcc"
    text = path.read_text(encoding="utf-8")
    runs = 3 if ctx.quick else max(5, min(ctx.repeat, 15))
    # an untimed run first: imports, LLVM initialisation, lazy pass loading
    clear_compiled()
    tcc.compile(tcc.grad(tcc.parse(text, str(path)), of="f", wrt="a,b,c,d"), passes=ctx.passes)
    totals, stages = [], {"parse": [], "grad (L1 passes)": [], "compile": []}
    for _ in range(runs):
        clear_compiled()
        clear_proofs()
        t0 = time.perf_counter()
        p = tcc.parse(text, str(path))
        t1 = time.perf_counter()
        g = tcc.grad(p, of="f", wrt="a,b,c,d")
        t2 = time.perf_counter()
        c = tcc.compile(g, passes=ctx.passes)
        t3 = time.perf_counter()
        totals.append(t3 - t0)
        stages["parse"].append(t1 - t0)
        stages["grad (L1 passes)"].append(t2 - t1)
        stages["compile"].append(t3 - t2)
    assert c.results, c
    # the split of compile, from instrumented runs (instruments bypass the cache)
    per_pass: dict[str, list[float]] = {}
    codegen: list[float] = []
    for _ in range(runs):
        clear_proofs()
        g = tcc.grad(tcc.parse(text, str(path)), of="f", wrt="a,b,c,d")
        timer = TimePasses()
        t0 = time.perf_counter()
        tcc.compile(g, passes=ctx.passes, instruments=[timer])
        total = time.perf_counter() - t0
        for spec, s in timer.timings:
            per_pass.setdefault(spec.split("{")[0], []).append(s)
        codegen.append(total - timer.total)
    split = [(f"compile: {name}", statistics.median(v)) for name, v in per_pass.items()]
    split.append(("compile: machine code (MCJIT) and the rest", statistics.median(codegen)))
    cold = None
    try:
        out = subprocess.run([sys.executable, "-c", COLD_PROCESS.format(path=str(path), passes=ctx.passes)], capture_output=True,
                             text=True, timeout=120, check=True)
        imp, work = (float(v) for v in out.stdout.split())
        cold = (imp, work)
    except Exception as exc:  # noqa: BLE001
        ctx.log(f"  compile: cold-process run failed: {H.short_reason(exc)}")
    ctx.extra["compile"] = {
        "runs": runs,
        "median": statistics.median(totals),
        "min": min(totals),
        "stages": [(k, statistics.median(v)) for k, v in stages.items()],
        "split": split,
        "cold": cold,
    }
    ctx.log(f"  compile: parse + grad + compile of examples/urban.tcc, 4 gradients: "
            f"median {statistics.median(totals) * 1e3:.0f} ms of {runs}")


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------
def goals(ctx: Ctx) -> list[str]:
    lines = ["| goal | measured | verdict |", "|---|---|---|"]
    by = {(r.case, r.what): r for r in ctx.rows}
    for dtype in ("float64", "float32"):
        for kind in ("new output array", "output array given"):
            r = by.get(("logistic", f"{dtype}, {kind}"))
            if r is None:
                continue
            ratio = r.ratio("numpy")
            if ratio is None:
                lines.append(f"| logistic {dtype}, {kind}: tcc >= {GOAL_LOGISTIC}x NumPy | no measurement | — |")
                continue
            met = ratio >= GOAL_LOGISTIC
            how = (f"met ({ratio / GOAL_LOGISTIC:.2f}x the goal)" if met
                   else f"**not met**: {ratio:.2f}x, needs {GOAL_LOGISTIC / ratio:.2f}x more")
            lines.append(f"| logistic {dtype}, {kind}: tcc >= {GOAL_LOGISTIC}x NumPy | {ratio:.2f}x "
                         f"({H.fmt_ms(r.cells['tcc'].median_ms)} vs {H.fmt_ms(r.cells['numpy'].median_ms)} ms) | {how} |")
    for case in ("urban", "correlation", "conv2d"):
        for what in ("gradients, forward+backward", "gradients, backward only"):
            r = by.get((case, what))
            if r is None:
                continue
            ratio = r.ratio("jax.jit")
            goal = f"{case} {what.split(', ')[1]}: tcc at least as fast as jax.jit"
            if ratio is None:
                lines.append(f"| {goal} | jax.jit {r.cells.get('jax.jit', H.Cell('n/a')).status} | — |")
                continue
            how = (f"met (tcc {ratio:.2f}x faster)" if ratio >= 1
                   else f"**not met**: tcc takes {1 / ratio:.2f}x jax's time")
            lines.append(f"| {goal} | {ratio:.2f}x ({H.fmt_ms(r.cells['tcc'].median_ms)} vs "
                         f"{H.fmt_ms(r.cells['jax.jit'].median_ms)} ms) | {how} |")
    lines += family_goals(ctx, by)
    lines += sparse_goals(by)
    comp = ctx.extra.get("compile")
    if comp:
        m = comp["median"]
        how = (f"met ({GOAL_COMPILE_S / m:.1f}x under)" if m < GOAL_COMPILE_S
               else f"**not met**: {m / GOAL_COMPILE_S:.2f}x over")
        lines.append(f"| seed example parse + grad + compile (4 gradients) < {GOAL_COMPILE_S:g} s | "
                     f"{m * 1e3:.0f} ms | {how} |")
    return lines


def family_goals(ctx: Ctx, by: dict[tuple[str, str], H.Row]) -> list[str]:
    """Issue 13's verdicts: each family's forward+gradients at least as fast as the faster of jax.jit and
    torch; the dense contractions' forward+gradients at >= GOAL_PEAK of the measured matmul peak."""
    lines = []
    peak = ctx.extra.get("peak")
    for case in FAM.FAMILIES:
        r = by.get((case, P.FB))
        if r is None:
            continue
        peers = [(fw, r.cells[fw].median_ms) for fw in ("jax.jit", "torch")
                 if fw in r.cells and r.cells[fw].median_ms is not None]
        goal = f"{case} forward+gradients: tcc at least as fast as the faster of jax.jit and torch"
        if not peers or r.cells["tcc"].median_ms is None:
            lines.append(f"| {goal} | no measurement | — |")
        else:
            fw, ms = min(peers, key=lambda p: p[1])
            ratio = ms / r.cells["tcc"].median_ms
            how = (f"met (tcc {ratio:.2f}x faster)" if ratio >= 1
                   else f"**not met**: tcc takes {1 / ratio:.2f}x {fw}'s time")
            lines.append(f"| {goal} | tcc {H.fmt_ms(r.cells['tcc'].median_ms)} ms, {fw} {H.fmt_ms(ms)} ms | {how} |")
        rate = r.gflops("tcc")
        same = r.gflops(H.SAME_SHAPES)
        if case in FAM.DENSE_FAMILIES and rate is not None and same:
            frac = rate / same
            how = "met" if frac >= GOAL_PEAK else f"**not met**: needs {GOAL_PEAK / frac:.2f}x more"
            lines.append(f"| {case} forward+gradients: tcc >= {GOAL_PEAK:.0%} of NumPy's matmul rate on the "
                         f"same shapes, timed in the same row | {rate:.1f} GFLOP/s, {frac:.0%} of {same:.1f} "
                         f"({H.fmt_ms(r.cells[H.SAME_SHAPES].median_ms)} ms) | {how} |")
        if case in FAM.DENSE_FAMILIES and rate is not None and peak:
            frac = rate / peak[2]
            how = "met" if frac >= GOAL_PEAK else f"not met: needs {GOAL_PEAK / frac:.1f}x more"
            lines.append(f"| {case} forward+gradients: tcc >= {GOAL_PEAK:.0%} of the square matmul peak "
                         f"(stricter than the issue's) | {rate:.1f} GFLOP/s, {frac:.0%} of {peak[2]:.0f} | {how} |")
    return lines


def sparse_goals(by: dict[tuple[str, str], H.Row]) -> list[str]:
    """Issue 15's verdict: on the gradients (backward only, and forward + backward), tcc faster than
    both jax.jit and torch."""
    lines = []
    for case in SP.CASES:
        for what in (P.BO, P.FB):
            r = by.get((case, what))
            if r is None:
                continue
            goal = f"{case} {what}: tcc faster than jax.jit and torch"
            peers = [(fw, r.cells[fw].median_ms) for fw in ("jax.jit", "torch")
                     if fw in r.cells and r.cells[fw].median_ms is not None]
            if not peers or r.cells["tcc"].median_ms is None:
                lines.append(f"| {goal} | no measurement | — |")
                continue
            fw, ms = min(peers, key=lambda p: p[1])
            ratio = ms / r.cells["tcc"].median_ms
            how = (f"met (tcc {ratio:.2f}x faster than {fw})" if ratio > 1 and len(peers) == 2
                   else f"**not met**: tcc takes {1 / ratio:.2f}x {fw}'s time" if ratio <= 1
                   else "**not met**: a peer has no measurement")
            lines.append(f"| {goal} | tcc {H.fmt_ms(r.cells['tcc'].median_ms)} ms, {fw} {H.fmt_ms(ms)} ms | {how} |")
    return lines


def report(ctx: Ctx, args: argparse.Namespace, wall_s: float) -> str:
    from tcc.build import DEFAULT_LOOP_PIPELINE

    peers = ctx.peers
    out: list[str] = []
    when = datetime.date.today().isoformat()
    mode = "quick (smaller sizes)" if args.quick else "full"
    flags = (" --quick" if args.quick else "") + (f" --passes {args.passes}" if args.passes else "")
    out.append(f"Run of `python benchmarks/run.py{flags}` on {when} ({mode}; "
               f"at least {args.repeat} timed calls and {args.min_time:g} s per framework and row; "
               f"whole run {wall_s:.0f} s).")
    out.append("")
    out.append(f"- machine: {H.cpu_model()} ({H.cpu_flags()}), {H.usable_cores()} cores usable, "
               f"Python {platform.python_version()}, {platform.system()} {platform.machine()}; shared and noisy"
               + (f" (other processes kept {ctx.extra['other_load']:.2f} cores busy on average during this run)"
                  if ctx.extra.get("other_load") is not None else ""))
    vers = ", ".join(f"{k} {v}" for k, v in peers.versions.items())
    out.append(f"- versions: {vers}")
    tcc_threads = H.usable_cores()
    threads = [f"tcc {tcc_threads} (default: all cores; it splits only loops the pipeline marks `parallel`)"]
    threads += [f"{k} {v}" for k, v in peers.threads.items()]
    out.append("- threads: " + "; ".join(threads))
    out.append(f"- tcc: {H.git_state()}")
    if args.passes:
        out.append(f"- tcc pipeline: `{args.passes}` (--passes), then lower-llvm, llvm-opt at O3")
    else:
        out.append(f"- tcc pipeline: the default (`{DEFAULT_LOOP_PIPELINE}`, then lower-llvm, llvm-opt at O3)")
    peak = ctx.extra.get("peak")
    if peak:
        out.append(f"- matmul peak: NumPy float64 {peak[0]}x{peak[0]} @ {peak[0]}x{peak[0]}, median of {peak[1]}: "
                   f"**{peak[2]:.1f} GFLOP/s** (measured before the first workload family)")
    out.append("")
    if ctx.rows:
        out.append("Median wall time in ms; in parentheses peer time / tcc time (> 1: tcc is faster). "
                   "\"busy elsewhere\": cores kept busy by other processes while the row was timed "
                   "(machine-wide CPU time minus this process's, per second of wall time)."
                   + (" \"tcc GFLOP/s\": the row's useful FLOPs (its contractions, each once, in the cheapest "
                      "pairwise order; element-wise work not counted) over tcc's median, and in parentheses "
                      "the fraction of the matmul peak." if peak else ""))
        out.append("")
        out.append(H.table(ctx.rows, peak_gflops=peak[2] if peak else None))
        out.append("")
    comp = ctx.extra.get("compile")
    if comp:
        out.append(f"Compile time of `examples/urban.tcc` with all four gradients (parse + grad + "
                   f"`tcc.compile`, caches cleared before each run; median of {comp['runs']}): "
                   f"**{comp['median'] * 1e3:.0f} ms** (min {comp['min'] * 1e3:.0f} ms).")
        out.append("")
        out.append("| stage | median ms |")
        out.append("|---|---:|")
        for name, s in comp["stages"] + comp["split"]:
            out.append(f"| {name} | {s * 1e3:.1f} |")
        if comp["cold"]:
            imp, work = comp["cold"]
            out.append(f"| the same, first time in a fresh process (lazy imports and LLVM initialisation "
                       f"included; `import tcc` itself {imp * 1e3:.0f} ms more) | {work * 1e3:.0f} |")
        out.append("")
    if ctx.rows or comp:
        out.append("Goals:")
        out.append("")
        out += goals(ctx)
        out.append("")
    if ctx.rows:
        out.append("Peers' first call in ms (JIT compilation included) and, in parentheses, the norm-wise "
                   "relative error of their results against tcc's, checked before timing; for tcc, "
                   "`tcc.compile` of each program (which happens before its first call) is in the table after:")
        out.append("")
        out.append(H.first_call_table(ctx.rows, [fw for fw in H.FRAMEWORKS if fw != "tcc"]))
        out.append("")
        out += H.compile_time_table(ctx.compile_times)
        out.append("")
    if ctx.breakdowns:
        par = sum(1 for _, _, times in ctx.breakdowns for t in times if t[1])
        allk = sum(len(times) for _, _, times in ctx.breakdowns)
        out.append(f"{par} of the {allk} tcc kernels below have a `parallel` loop"
                   + (" (so tcc ran on one core in every case)." if par == 0 else "."))
        out.append("")
        out.append("tcc kernels one by one (median ms, run in order on the row's inputs; "
                   "`par` = split over the threads):")
        out.append("")
        out += H.kernel_table(ctx.breakdowns)
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tcc against JAX, PyTorch and NumPy (see the module docstring).")
    H.add_options(ap, CASES, quick_help="smaller sizes and fewer rounds, every sample kept: a smoke run (about a minute for all cases)",
                  repeat_help="at least this many timed calls per framework and row (default 10, --quick 3); "
                              "fast calls are repeated for at least --min-time",
                  budget_help="seconds of calls (timed and untimed) per framework and row after which a slow one "
                              "stops at 3 samples (default 10, --quick 1)",
                  quiet_below=None,
                  quiet_help="set aside samples taken while other processes kept more than CORES cores busy, "
                             "and run more rounds instead (default 0.25; --quick: -1; a negative value keeps "
                             "every sample)", groups=GROUPS)
    ap.add_argument("--passes", default=None,
                    help="the L1/L2 pipeline tcc.compile runs for every tcc program (default: tcc's default)")
    ap.add_argument("--loops", action="store_true", help="also print the L2 loop nests of every tcc program")
    ap.add_argument("--write", action="store_true", help=f"record the results in {DOC.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    named = [c.strip() for c in args.case.split(",") if c.strip()]
    args.case = ",".join(dict.fromkeys(n for c in named for n in GROUPS.get(c, (c,))))
    cases = H.chosen_cases(ap, args, CASES)
    H.timing_defaults(ap, args)
    if args.quiet_below is None:        # a quick run is a smoke test: no extra rounds on a busy machine
        args.quiet_below = -1.0 if args.quick else 0.25
    if args.write and (args.quick or args.passes or set(cases) != set(CASES)):
        ap.error("--write records only a full run (no --quick, no --passes, all cases)")

    cores = H.usable_cores()
    ctx = Ctx(quick=args.quick, passes=args.passes,
              quiet_below=None if args.quiet_below < 0 else args.quiet_below, primer=not args.no_primer, min_time_s=args.min_time, repeat=args.repeat, budget_s=args.budget, peers=load_peers(cores))
    ctx.log(f"benchmarks: {', '.join(cases)}; at least {args.repeat} calls and {args.min_time:g} s per row and framework; {cores} cores; "
            + ", ".join(f"{k} {v}" for k, v in ctx.peers.versions.items()))
    meter = H.LoadMeter()
    meter.start()
    t0 = time.perf_counter()
    for case in cases:
        runners = {"urban": case_urban, "correlation": case_correlation, "conv2d": case_conv2d,
                   "logistic": case_logistic, "compile": case_compile}
        if case in SP.CASES:
            grad_case(ctx, SP.case(case, ctx.quick, ctx.peers))
            SP.new_index_arrays_row(ctx, case)
        else:
            runners.get(case, family_case(case))(ctx)
    wall = time.perf_counter() - t0
    ctx.extra["other_load"] = meter.stop()
    text = report(ctx, args, wall)
    print(text)
    if args.loops:
        for title, compiled, _ in ctx.breakdowns:
            print(f"## L2 loops of {title}\n\n```\n{compiled.loops}```\n")
    if args.write:
        doc = DOC.read_text(encoding="utf-8")
        DOC.write_text(H.replace_section(doc, BEGIN, END, text), encoding="utf-8")
        print(f"recorded in {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
