"""Hessians and gradients of the three problems of Laue, Mitterreiter and Giesen (sec. 4):
tcc against JAX, PyTorch, HIPS autograd and NumPy closed forms.

    python benchmarks/hessians.py [--quick] [--repeat N] [--case NAME[,NAME]] [--sizes N[,N]] [--write] [--loops]

Cases (``--case``; default all), float64, the tcc programs are the examples
as they are:

* ``quadratic`` -- ``examples/quadratic_form.tcc``, ``f = x^T A x``, wrt x;
                   n = 10, 30, 100, 300, 1000, 2000.
* ``logistic``  -- ``examples/logistic_regression.tcc``,
                   ``f = sum_i log(1 + exp(-y_i (X w)_i))``, m = 2n examples,
                   wrt w; n = 10, 30, 100, 300, 1000.
* ``mf``        -- ``examples/matrix_factorization.tcc``,
                   ``f = sum_ij (M_ij (T_ij - (U V^T)_ij))^2`` with a 0/1 mask
                   M, m = n, rank r = 5, wrt U (the Hessian is the 4-D tensor
                   ``H[i, k, i2, k2]``); n = 10, 30, 100, 300, 1000.

Two rows per case and size: **hessian** (tcc: ``tcc.hessian``; ``jax.jit(
jax.hessian(f))``; ``torch.func.hessian(f)``; ``autograd.hessian(f)``; NumPy:
the closed form written by hand) and **value+gradient** (tcc: the compiled
``tcc.grad`` program that also returns f; ``jax.jit(jax.value_and_grad(f))``;
``torch.func.grad_and_value(f)``; ``autograd.value_and_grad(f)``; NumPy: the
closed form).  tcc compiles each program once: its sizes are symbolic and
bound from the arrays' shapes at every call.  Every peer is checked against
tcc before it is timed and timed with ``harness.py`` (first call and one
warm-up excluded, round-robin rounds, medians), as in ``run.py``.

Peers that cannot keep up are not run at the larger sizes: a peer whose one
call is expected to take more than ``--peer-limit`` seconds (its time at the
previous size scaled by ``(n / n_prev)**3`` for a Hessian, ``**2`` for a
gradient), or whose calls would run past ``--max-minutes`` from the start, is
``n/a: too slow``, and one whose vectorised Hessian (jax and torch push one
tangent per element of wrt through the function, batched) is expected to
need more than ``--mem-limit`` GB is ``n/a: needs ~X GB``.

Goals at n = 1000: (G1) the quadratic-form Hessian and (G2) the
matrix-factorization Hessian at least 10x faster than the fastest of
jax.jit, torch and autograd; (G3) the logistic-regression Hessian at least as
fast as the fastest of them; (G4) every Hessian within 1.5x of the NumPy
closed form.  ``--write`` records a full run in ``docs/benchmarks.md``
(between the ``hessians`` markers).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import math
import platform
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import harness as H  # noqa: E402
import problems as P  # noqa: E402
import run as R  # noqa: E402
from problems import jax_ready, unavailable  # noqa: E402

CASES = ("quadratic", "logistic", "mf")
FRAMEWORKS = ("tcc", "jax.jit", "torch", "autograd", "numpy")
AD_PEERS = ("jax.jit", "torch", "autograd")          # the frameworks the goals compare tcc with
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- hessians:begin (benchmarks/hessians.py --write) -->", "<!-- hessians:end -->"
HESS, VG = "hessian", "value+gradient"

RANK = 5                    # r of the matrix factorization
GOAL_N = 1000               # the size the goals are judged at
GOAL_AD = {"quadratic": 10.0, "mf": 10.0, "logistic": 1.0}   # tcc at least this many times the fastest AD peer
GOAL_NUMPY = 1.5            # tcc's Hessian at most this many times NumPy's closed form
QUICK_MAX_N = 100
# Peak memory of jax.hessian / torch.func.hessian over (tangents x per-tangent intermediate x 8 bytes),
# measured for the matrix factorization at n = 300 (jax 2.35 GB, torch 5.6 GB), with a margin.
VMAP_FACTOR = {"jax.jit": 2.5, "torch": 6.0}


# --------------------------------------------------------------------------
# peers
# --------------------------------------------------------------------------
@dataclass
class Peers(P.Peers):
    """``run.py``'s peers (jax, torch) and HIPS autograd (``None`` where it cannot run: ``autograd_status``)."""

    autograd: Any = None
    anp: Any = None
    autograd_status: str = "ok"


def load_peers(cores: int) -> Peers:
    base = R.load_peers(cores)
    peers = Peers(**{f.name: getattr(base, f.name) for f in fields(base)})
    peers.threads["numpy"] = "ufuncs 1; matrix products OpenBLAS (all cores by default)"

    def setup_autograd() -> None:
        import autograd
        import autograd.numpy as anp

        peers.autograd, peers.anp = autograd, anp
        peers.versions["autograd"] = importlib.metadata.version("autograd")
        peers.threads["autograd"] = "Python over NumPy (ufuncs 1, matrix products OpenBLAS)"

    P.import_peer(peers, "autograd", setup_autograd)
    return peers


def mem_available() -> float | None:
    """Bytes of memory available (``MemAvailable`` of ``/proc/meminfo``), ``None`` where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# --------------------------------------------------------------------------
# the problems
# --------------------------------------------------------------------------
@dataclass
class Problem:
    """One of the three functions: its tcc example, its inputs and its closed forms.

    ``f(xp, wrt, *rest)`` is the function written once for ``jax.numpy``,
    ``torch`` and ``autograd.numpy`` alike (``args`` names its arguments, wrt
    first); ``hessian`` and ``value_grad`` are the NumPy closed forms, called
    with the inputs by name.
    """

    case: str
    example: str
    wrt: str
    args: tuple[str, ...]
    sizes: tuple[int, ...]
    inputs: Callable[[int], dict[str, np.ndarray]]
    f: Callable[..., Any]
    hessian: Callable[..., np.ndarray]
    value_grad: Callable[..., tuple[Any, np.ndarray]]
    standin: str                       # a hand-written tcc Hessian program, used only where tcc.hessian is missing
    tangents: Callable[[int], int]     # elements of wrt: the Hessian's columns
    intermediate: Callable[[int], int]  # elements of the largest array f makes

    @property
    def path(self) -> Path:
        return ROOT / "examples" / self.example


def quadratic() -> Problem:
    def inputs(n: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(40)
        return {"x": rng.standard_normal(n), "A": rng.standard_normal((n, n))}

    def value_grad(x, A):
        Ax = A @ x
        return x @ Ax, Ax + x @ A                      # two matrix-vector products, no n x n temporary

    return Problem(
        "quadratic", "quadratic_form.tcc", "x", ("x", "A"), (10, 30, 100, 300, 1000, 2000), inputs,
        f=lambda xp, x, A: x @ (A @ x),
        hessian=lambda x, A: A + A.T,
        value_grad=value_grad,
        standin="input x[n], A[n, n]\noutput H[n, n]\nH[i, j] = A[i, j] + A[j, i]\n",
        tangents=lambda n: n, intermediate=lambda n: n)


def logistic() -> Problem:
    def inputs(n: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(41)
        m = 2 * n
        return {"X": rng.standard_normal((m, n)) / np.sqrt(n), "w": 0.1 * rng.standard_normal(n),
                "y": rng.choice([-1.0, 1.0], m)}

    def f(xp, w, X, y):
        return xp.sum(xp.log(1 + xp.exp(-(y * (X @ w)))))

    def hessian(X, w, y):
        s = 1 / (1 + np.exp(-(y * (X @ w))))
        Xs = X * np.sqrt(s * (1 - s))[:, None]         # X^T diag(s(1-s)) X as Xs^T Xs: one syrk
        return Xs.T @ Xs

    def value_grad(X, w, y):
        z = y * (X @ w)
        e = np.exp(-z)
        return np.sum(np.log1p(e)), X.T @ (-y * (e / (1 + e)))

    return Problem(
        "logistic", "logistic_regression.tcc", "w", ("w", "X", "y"), (10, 30, 100, 300, 1000), inputs, f,
        hessian, value_grad,
        standin=("input X[m, n], w[n], y[m]\noutput H[n, n]\nlocal z[m], d[m]\n"
                 "z[i] = y[i] * sum[j](X[i, j] * w[j])\nd[i] = exp(-z[i]) / (1 + exp(-z[i]))**2\n"
                 "H[j, k] = sum[i](d[i] * X[i, j] * X[i, k])\n"),
        tangents=lambda n: n, intermediate=lambda n: 2 * n)


def mf() -> Problem:
    r = RANK

    def inputs(n: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(42)
        m = n
        return {"T": rng.standard_normal((m, n)), "M": (rng.random((m, n)) < 0.5).astype(np.float64),
                "U": rng.standard_normal((m, r)), "V": rng.standard_normal((n, r))}

    def f(xp, U, T, M, V):
        return xp.sum((M * (T - U @ V.T)) ** 2)

    def hessian(T, M, U, V):
        m, n = M.shape
        G = ((M * M) @ (V[:, :, None] * V[:, None, :]).reshape(n, r * r)).reshape(m, r, r)   # one GEMM
        Hs = np.zeros((m, r, m, r))
        i = np.arange(m)
        Hs[i, :, i, :] = 2 * G                         # the Gram blocks on the i == i2 diagonal
        return Hs

    def value_grad(T, M, U, V):
        Rm = M * (T - U @ V.T)
        return np.vdot(Rm, Rm), -2 * ((Rm * M) @ V)

    return Problem(
        "mf", "matrix_factorization.tcc", "U", ("U", "T", "M", "V"), (10, 30, 100, 300, 1000), inputs, f,
        hessian, value_grad,
        standin=("input T[m, n], M[m, n], U[m, r], V[n, r]\noutput H[m, r, m, r]\nlocal G[m, r, r]\n"
                 "G[i, k, l] = sum[j](M[i, j]**2 * V[j, k] * V[j, l])\n"
                 "H[i, k, i2, l] = where(i == i2, 2 * G[i, k, l], 0)\n"),
        tangents=lambda n: n * r, intermediate=lambda n: n * n)


PROBLEMS = {"quadratic": quadratic, "logistic": logistic, "mf": mf}


# --------------------------------------------------------------------------
# run context
# --------------------------------------------------------------------------
@dataclass
class Ctx(R.Ctx):
    peer_limit_s: float = 60.0
    deadline: float | None = None                      # time.perf_counter() by which the run should be over
    mem_limit: float | None = None                     # bytes
    standin: bool = False                              # tcc.hessian is missing: hand-written Hessian programs
    last: dict[tuple[str, str, str], tuple[int, H.Cell]] = field(default_factory=dict)   # (fw, case, what): n, cell
    loops: list[tuple[str, Any]] = field(default_factory=list)                          # (title, compiled)

    def budget_check(self, fw: str, case: str, what: str, n: int, bytes_needed: float | None = None,
                     why_bytes: str = "") -> str | None:
        """Why ``fw`` is not run at size ``n`` (``None``: run it): expected too slow, or too much memory.

        The run's deadline only stops AD peers whose calls take more than a second.
        """
        if bytes_needed is not None and self.mem_limit is not None and bytes_needed > self.mem_limit:
            return (f"n/a: needs ~{bytes_needed / 1e9:.0f} GB ({why_bytes}), "
                    f"limit {self.mem_limit / 1e9:.0f} GB")
        prev = self.last.get((fw, case, what))
        if prev is None:
            return None
        n0, cell = prev
        if cell.status.startswith("failed"):
            return f"n/a: failed at n={n0}"
        if cell.first_s is None:
            return None
        t0 = cell.median_ms / 1e3 if cell.median_ms is not None else cell.first_s
        expected = t0 * (n / n0) ** (3 if what == HESS else 2)
        took = f"first call {seconds(cell.first_s)}" + (f", median {seconds(t0)}" if cell.median_ms else "")
        if max(expected, cell.first_s) > self.peer_limit_s:
            return f"n/a: too slow (at n={n0}: {took}; ~{seconds(expected)} a call expected at n={n})"
        calls = 8 if self.primer else 5                 # first, warm-up, 3 timed (each after an untimed primer)
        if (fw in AD_PEERS and expected > 1.0 and self.deadline is not None
                and time.perf_counter() + calls * expected > self.deadline):   # slow peers only, never tcc
            return (f"n/a: too slow for the run's time budget (at n={n0}: {took}; ~{seconds(expected)} a call "
                    f"expected at n={n}, {calls} calls at least)")
        return None


def seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.2g} s" if s >= 0.1 else f"{s * 1e3:.2g} ms"


def tcc_hessian(ctx: Ctx, prob: Problem) -> Any:
    """tcc's Hessian of ``prob``: ``tcc.hessian``, or the stand-in program where it is missing.

    Returns ``fn(**inputs) -> array`` and its :class:`tcc.runtime.compiled.CompiledProgram` (for the memory it
    needs and the kernel breakdown).
    """
    import tcc

    name = f"{prob.case}: hessian" + (" (stand-in)" if ctx.standin else "")
    if ctx.standin:
        compiled = ctx.tcc_compile(name, prob.standin, dtype="float64")
        fn = lambda **inputs: compiled(**inputs)["H"]  # noqa: E731
    else:
        t0 = time.perf_counter()
        fn = tcc.hessian(str(prob.path), of="f", wrt=prob.wrt, dtype="float64")
        ctx.compile_times.append((name, time.perf_counter() - t0))
        compiled = fn.compiled
    ctx.loops.append((name, compiled))
    return fn, compiled


def tcc_value_grad(ctx: Ctx, prob: Problem) -> Any:
    """The compiled ``tcc.grad`` program of ``f`` wrt ``prob.wrt`` that also returns ``f`` (seed ``df``)."""
    import tcc

    program = tcc.parse(str(prob.path))
    g = tcc.grad(program, of="f", wrt=prob.wrt)
    have = {d.name for d in g.definitions}
    if "f" not in have:                                # the gradient does not need f: add its definition
        g = g.with_definitions(g.definitions + tuple(d for d in program.definitions if d.name not in have))
    g = g.replace(outputs=("f",) + tuple(g.outputs))
    compiled = ctx.tcc_compile(f"{prob.case}: value+gradient", g, dtype="float64")
    ctx.loops.append((f"{prob.case}: value+gradient", compiled))
    return compiled


def tcc_bytes(compiled: Any, arrays: dict[str, np.ndarray]) -> float | None:
    """Bytes of the results and temporaries a call of ``compiled`` allocates for ``arrays`` (``None``: unknown)."""
    from tcc.sizes import bind_sizes, extents_shape

    try:
        sizes = bind_sizes(compiled.program, arrays)
        return float(sum(np.dtype(compiled.dtype).itemsize * math.prod(extents_shape(b.shape, sizes))
                         for b in compiled.loops.buffers if b.role != "input"))
    except Exception:  # noqa: BLE001 - the estimate is advisory; the call itself reports real errors
        return None


# --------------------------------------------------------------------------
# a case: two rows per size
# --------------------------------------------------------------------------
def run_case(ctx: Ctx, prob: Problem, sizes: list[int]) -> None:
    hess, hess_compiled = tcc_hessian(ctx, prob)
    vg = tcc_value_grad(ctx, prob)
    dwrt = "d" + prob.wrt
    one = np.ones(())
    for n in sizes:
        arrays = prob.inputs(n)
        given = dict(arrays, df=one)
        ctx.log(f"[{prob.case}] n={n}: " + ", ".join(f"{k}{list(v.shape)}" for k, v in arrays.items()))
        args = [arrays[a] for a in prob.args]
        for what, compiled in ((HESS, hess_compiled), (VG, vg)):
            call_args = arrays if what == HESS else given
            if what == HESS:
                def closed() -> dict:
                    return {"H": prob.hessian(**arrays)}

                def tcc_call() -> dict:
                    return {"H": hess(**arrays)}
            else:
                def closed() -> dict:
                    return dict(zip(("f", dwrt), prob.value_grad(**arrays)))

                def tcc_call() -> dict:
                    return vg(**given)
            skip = ctx.budget_check("tcc", prob.case, what, n, tcc_bytes(compiled, call_args), "its arrays")
            note = ""
            if skip is None:
                out = tcc_call()
                reference = {"H": out["H"]} if what == HESS else {"f": out["f"], dwrt: out[dwrt]}
                del out
                cands = [H.Candidate("tcc", tcc_call, check=False)]
            else:                                       # tcc cannot run: the peers are checked against NumPy
                reference = closed()
                cands = [unavailable("tcc", skip)]
                note = "checked against numpy"
            cands += peer_candidates(ctx, prob, what, n, args, dwrt)
            cands.append(H.Candidate("numpy", closed, check=skip is None))
            row = ctx.row(prob.case, f"n={n}: {what}", cands, reference, note=note)
            for fw, cell in row.cells.items():            # the last size a framework ran at (not skipped)
                if not cell.status.startswith(("n/a", "missing")):
                    ctx.last[(fw, prob.case, what)] = (n, cell)
            tcc_ran = row.cells["tcc"].ok
            del cands, row, reference
            if n == sizes[-1] and tcc_ran:              # tcc's kernels one by one at the largest size
                title = f"{prob.case}: {what}" + (" (stand-in)" if ctx.standin and what == HESS else "")
                try:
                    ctx.breakdown(f"{title}, n={n}", compiled, call_args)
                except Exception as exc:  # noqa: BLE001 - the breakdown is a by-product
                    ctx.log(f"  {title}: no kernel breakdown ({H.short_reason(exc)})")
        del arrays, given, args


def peer_candidates(ctx: Ctx, prob: Problem, what: str, n: int, args: list[np.ndarray],
                    dwrt: str) -> list[H.Candidate]:
    """jax.jit, torch and autograd for one row (``n/a``, ``missing`` or ``failed`` where they cannot run)."""
    peers = ctx.peers
    out: list[H.Candidate] = []
    vmap_bytes = 8.0 * prob.tangents(n) * prob.intermediate(n)
    why = (f"{prob.tangents(n)} tangents, each through a {prob.intermediate(n)}-element intermediate")

    def skip(fw: str) -> str | None:
        if what == HESS and fw in VMAP_FACTOR:
            return ctx.budget_check(fw, prob.case, what, n, VMAP_FACTOR[fw] * vmap_bytes, why)
        return ctx.budget_check(fw, prob.case, what, n)

    # -- jax ----------------------------------------------------------------
    if peers.jax is None:
        out.append(unavailable("jax.jit", peers.jax_status))
    elif (reason := skip("jax.jit")) is not None:
        out.append(unavailable("jax.jit", reason))
    else:
        jax, jnp = peers.jax, peers.jnp
        jargs = [peers.jax_put(a) for a in args]
        fj = lambda *a: prob.f(jnp, *a)  # noqa: E731
        if what == HESS:
            jh = jax.jit(jax.hessian(fj))
            out.append(H.Candidate("jax.jit", lambda: {"H": jax_ready(jh(*jargs))}))
        else:
            jvg = jax.jit(jax.value_and_grad(fj))

            def jax_vg() -> dict:
                v, g = jax_ready(jvg(*jargs))
                return {"f": v, dwrt: g}
            out.append(H.Candidate("jax.jit", jax_vg))
    # -- torch --------------------------------------------------------------
    if peers.torch is None:
        out.append(unavailable("torch", peers.torch_status))
    elif (reason := skip("torch")) is not None:
        out.append(unavailable("torch", reason))
    else:
        torch = peers.torch
        targs = [peers.torch_put(a) for a in args]
        ft = lambda *a: prob.f(torch, *a)  # noqa: E731
        if what == HESS:
            th = torch.func.hessian(ft)
            out.append(H.Candidate("torch", lambda: {"H": th(*targs)}))
        else:
            tvg = torch.func.grad_and_value(ft)

            def torch_vg() -> dict:
                g, v = tvg(*targs)
                return {"f": v, dwrt: g}
            out.append(H.Candidate("torch", torch_vg))
    # -- HIPS autograd ------------------------------------------------------
    if peers.autograd is None:
        out.append(unavailable("autograd", peers.autograd_status))
    elif (reason := skip("autograd")) is not None:
        out.append(unavailable("autograd", reason))
    else:
        ag, anp = peers.autograd, peers.anp
        fa = lambda *a: prob.f(anp, *a)  # noqa: E731
        if what == HESS:
            ah = ag.hessian(fa)
            out.append(H.Candidate("autograd", lambda: {"H": ah(*args)}))
        else:
            avg = ag.value_and_grad(fa)

            def autograd_vg() -> dict:
                v, g = avg(*args)
                return {"f": v, dwrt: g}
            out.append(H.Candidate("autograd", autograd_vg))
    return out


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------
def fastest_ad(row: H.Row) -> tuple[str, H.Cell] | None:
    timed = [(fw, row.cells[fw]) for fw in AD_PEERS if fw in row.cells and row.cells[fw].median_ms is not None]
    return min(timed, key=lambda fc: fc[1].median_ms) if timed else None


def goals(ctx: Ctx) -> list[str]:
    lines = ["| goal | measured | verdict |", "|---|---|---|"]
    by = {(r.case, r.what): r for r in ctx.rows}
    label = {"quadratic": "G1 quadratic", "mf": "G2 matrix factorization", "logistic": "G3 logistic"}
    for case in ("quadratic", "mf", "logistic"):
        goal = GOAL_AD[case]
        text = f"{label[case]} Hessian, n={GOAL_N}: tcc " + (
            f">= {goal:g}x faster than the fastest of jax.jit/torch/autograd" if goal != 1
            else "at least as fast as the fastest of jax.jit/torch/autograd")
        r = by.get((case, f"n={GOAL_N}: {HESS}"))
        if r is None:
            lines.append(f"| {text} | not run | — |")
            continue
        best, tcc = fastest_ad(r), r.cells.get("tcc")
        if tcc is None or tcc.median_ms is None:
            lines.append(f"| {text} | tcc {tcc.status if tcc else 'missing'} | **NOT met** |")
            continue
        if best is None:
            why = "; ".join(f"{fw} {r.cells[fw].status.split(' (')[0]}" for fw in AD_PEERS if fw in r.cells)
            lines.append(f"| {text} | no peer ran ({why}) | not measured |")
            continue
        fw, cell = best
        ratio = cell.median_ms / tcc.median_ms
        verdict = "met" if ratio >= goal else f"**NOT met** (needs {goal / ratio:.2f}x more)"
        lines.append(f"| {text} | {ratio:.1f}x: tcc {H.fmt_ms(tcc.median_ms)} ms, fastest {fw} "
                     f"{H.fmt_ms(cell.median_ms)} ms | {verdict} |")
    all_met: list[bool] = []
    for case in ("quadratic", "logistic", "mf"):
        r = by.get((case, f"n={GOAL_N}: {HESS}"))
        text = f"G4 {case} Hessian, n={GOAL_N}: tcc within {GOAL_NUMPY:g}x of the NumPy closed form"
        if r is None:
            lines.append(f"| {text} | not run | — |")
            continue
        tcc, npc = r.cells.get("tcc"), r.cells.get("numpy")
        if tcc is None or tcc.median_ms is None or npc is None or npc.median_ms is None:
            lines.append(f"| {text} | no measurement | — |")
            all_met.append(False)
            continue
        slow = tcc.median_ms / npc.median_ms
        met = slow <= GOAL_NUMPY
        all_met.append(met)
        lines.append(f"| {text} | tcc {H.fmt_ms(tcc.median_ms)} ms, numpy {H.fmt_ms(npc.median_ms)} ms: "
                     + (f"tcc {1 / slow:.2f}x faster" if slow < 1 else f"tcc takes {slow:.2f}x numpy's time")
                     + f" | {'met' if met else '**NOT met**'} |")
    if len(all_met) == 3:
        lines.append(f"| G4 all three | | {'met' if all(all_met) else '**NOT met**'} |")
    return lines


def report(ctx: Ctx, args: argparse.Namespace, sizes: dict[str, list[int]], wall_s: float) -> str:
    peers = ctx.peers
    out: list[str] = []
    flags = (" --quick" if args.quick else "") + (f" --sizes {args.sizes}" if args.sizes else "")
    mode = "quick (n <= 100)" if args.quick else "full"
    out.append(f"Run of `python benchmarks/hessians.py{flags}` on {datetime.date.today().isoformat()} ({mode}; "
               f"at least {args.repeat} timed calls and {args.min_time:g} s per framework and row; "
               f"whole run {wall_s:.0f} s).")
    out.append("")
    out.append(f"- machine: {H.cpu_model()} ({H.cpu_flags()}), {H.usable_cores()} cores usable, "
               f"Python {platform.python_version()}, {platform.system()} {platform.machine()}; shared and noisy"
               + (f" (other processes kept {ctx.extra['other_load']:.2f} cores busy on average during this run)"
                  if ctx.extra.get("other_load") is not None else ""))
    out.append("- versions: " + ", ".join(f"{k} {v}" for k, v in peers.versions.items()))
    threads = [f"tcc {H.usable_cores()} (default: all cores; it splits only loops the pipeline marks `parallel`)"]
    out.append("- threads: " + "; ".join(threads + [f"{k} {v}" for k, v in peers.threads.items()]))
    out.append(f"- tcc: {H.git_state()}; Hessians from "
               + ("**stand-in** programs (hand-written Hessians compiled with `tcc.compile`: `tcc.hessian` is "
                  "not available in this checkout)" if ctx.standin else "`tcc.hessian`"))
    out.append("- sizes: " + "; ".join(f"{c} n = {', '.join(map(str, s))}" for c, s in sizes.items())
               + f"; logistic m = 2n, mf m = n, r = {RANK}")
    out.append(f"- peers skipped where one call is expected to take more than {ctx.peer_limit_s:g} s, "
               f"to run past {args.max_minutes:g} minutes from the start"
               + (f" or to need more than {ctx.mem_limit / 1e9:.0f} GB" if ctx.mem_limit else ""))
    out.append("")
    out.append("Median wall time in ms; in parentheses peer time / tcc time (> 1: tcc is faster). "
               "\"busy elsewhere\": cores kept busy by other processes while the row was timed.")
    out.append("")
    for case in sizes:
        rows = [r for r in ctx.rows if r.case == case]
        if rows:
            out.append(H.table(rows, FRAMEWORKS))
            out.append("")
    if any(r.what.startswith(f"n={GOAL_N}:") for r in ctx.rows):
        out.append("Goals:")
        out.append("")
        out += goals(ctx)
        out.append("")
    if ctx.rows:
        out.append("Peers' first call in ms (JIT compilation included) and, in parentheses, the norm-wise "
                   "relative error of their results against tcc's, checked before timing; tcc compiles each "
                   "program once for all sizes (table after):")
        out.append("")
        out.append(H.first_call_table(ctx.rows, [fw for fw in FRAMEWORKS if fw != "tcc"]))
        out.append("")
        out += H.compile_time_table(ctx.compile_times)
        out.append("")
    if ctx.breakdowns:
        out.append("tcc kernels one by one at the largest size (median ms, run in order on the row's inputs; "
                   "`par` = split over the threads):")
        out.append("")
        out += H.kernel_table(ctx.breakdowns)
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Hessians and gradients: tcc against JAX, PyTorch, HIPS autograd "
                                             "and NumPy closed forms (see the module docstring).")
    H.add_options(ap, CASES, quick_help=f"sizes n <= {QUICK_MAX_N} and fewer rounds: a smoke run",
                  repeat_help="at least this many timed calls per framework and row (default 10, --quick 3); "
                              "fast calls are repeated for at least --min-time",
                  budget_help="seconds of calls (timed and untimed) per framework and row after which a slow one "
                              "stops at 3 samples (default 10, --quick 1)",
                  quiet_below=0.25,
                  quiet_help="set aside samples taken while other processes kept more than CORES cores busy, "
                             "and run more rounds instead (default 0.25; a negative value keeps every sample)")
    ap.add_argument("--sizes", default=None, metavar="N[,N]",
                    help="comma-separated sizes n for every case (default: the case's own list)")
    ap.add_argument("--peer-limit", type=float, default=60.0, metavar="S",
                    help="skip a peer at a size where one call is expected to take more than S seconds "
                         "(its time at the previous size scaled by (n/n_prev)**3 for a Hessian, **2 for a "
                         "gradient; default 60)")
    ap.add_argument("--max-minutes", type=float, default=25.0, metavar="M",
                    help="skip a slow peer at a size where its calls (first, warm-up, three timed ones and "
                         "their primers) would run past M minutes from the start (default 25)")
    ap.add_argument("--mem-limit", type=float, default=None, metavar="GB",
                    help="skip jax/torch Hessians expected to need more than GB gigabytes "
                         "(default: 60%% of the memory available at the start)")
    ap.add_argument("--standin", action="store_true",
                    help="use the hand-written tcc Hessian programs even where tcc.hessian exists")
    ap.add_argument("--loops", action="store_true", help="also print the L2 loop nests of every tcc program")
    ap.add_argument("--write", action="store_true", help=f"record the results in {DOC.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    cases = H.chosen_cases(ap, args, CASES)
    H.timing_defaults(ap, args)
    if args.write and (args.quick or args.sizes or args.standin or set(cases) != set(CASES)):
        ap.error("--write records only a full run (no --quick, --sizes or --standin, all cases)")
    given: list[int] | None = None
    if args.sizes:
        try:
            given = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
        except ValueError:
            ap.error(f"--sizes: not a list of integers: {args.sizes}")
        if not given or given[0] < 1:
            ap.error("--sizes: give positive sizes")

    import tcc

    cores = H.usable_cores()
    avail = mem_available()
    mem_limit = args.mem_limit * 1e9 if args.mem_limit is not None else (0.6 * avail if avail else None)
    ctx = Ctx(quick=args.quick, passes=None, quiet_below=None if args.quiet_below < 0 else args.quiet_below,
              primer=not args.no_primer, min_time_s=args.min_time, repeat=args.repeat, budget_s=args.budget,
              peers=load_peers(cores), peer_limit_s=args.peer_limit, mem_limit=mem_limit,
              deadline=time.perf_counter() + 60 * args.max_minutes,
              standin=args.standin or not hasattr(tcc, "hessian"))
    if ctx.standin:
        ctx.log("tcc: Hessians from STAND-IN programs (hand-written, tcc.compile)"
                + ("" if args.standin else ": tcc.hessian is not available"))
    sizes: dict[str, list[int]] = {}
    for case in cases:
        own = list(PROBLEMS[case]().sizes)
        sizes[case] = given if given else [n for n in own if not args.quick or n <= QUICK_MAX_N]
    ctx.log(f"hessians: {', '.join(cases)}; at least {args.repeat} calls and {args.min_time:g} s per row and "
            f"framework; {cores} cores; " + ", ".join(f"{k} {v}" for k, v in ctx.peers.versions.items()))
    meter = H.LoadMeter()
    meter.start()
    t0 = time.perf_counter()
    for case in cases:
        run_case(ctx, PROBLEMS[case](), sizes[case])
    wall = time.perf_counter() - t0
    ctx.extra["other_load"] = meter.stop()
    text = report(ctx, args, sizes, wall)
    print(text)
    if args.loops:
        for title, compiled in ctx.loops:
            print(f"## L2 loops of {title}\n\n```\n{compiled.loops}```\n")
    if args.write:
        doc = DOC.read_text(encoding="utf-8")
        DOC.write_text(H.replace_section(doc, BEGIN, END, text), encoding="utf-8")
        print(f"recorded in {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
