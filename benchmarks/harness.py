"""Timing, checking and reporting for ``benchmarks/run.py`` and ``benchmarks/gpu.py``.

A *row* is one measured operation (say "urban: gradients, forward+backward")
done by several *candidates*, one per framework.  For each row the harness

1. calls every candidate once (the first call: it compiles whatever the
   framework compiles lazily, and is timed separately as "first call"),
2. checks the candidate's results against tcc's (a wrong peer is reported as
   ``wrong: ...`` and never timed; an exception as ``failed: ...``),
3. calls it once more untimed (warm-up),
4. times the remaining candidates one after another, each in a block of its
   own calls (``interleave=False``, the default) -- in ``BLOCK_ROUNDS``
   rounds, a third of each candidate's calls per round (tcc, jax, torch,
   tcc, jax, torch, ...), because this machine's speed drifts over seconds:
   two identical processes timing contract3's gradients one after the other
   measured 1.76 and 2.65 ms, and so did single-threaded runs (3.0-3.8 ms;
   no steal time reported), so one block per candidate let the drift decide
   close verdicts -- each block after a pause of
   ``SETTLE_S``: worker threads of the framework that ran before spin after
   its last call -- OpenMP (torch) and Eigen (XLA) for milliseconds,
   OpenBLAS's (NumPy's BLAS, which tcc's external kernels call) for about
   2^28 cycles, 0.1 s -- and on a 2-core machine they take the cores from
   whichever framework runs next: torch's dense layer forward+backward took
   19.6-24.4 ms alone and 42-44 ms right after a tcc call that ran BLAS, even
   after one untimed torch call.  With ``interleave=True`` (``--interleave``,
   the method of the runs before 2026-11-25) the candidates are timed
   round-robin, one call of each per round, so that a burst of noise hits
   every framework alike; the load meter (6.) guards the blocks against such
   bursts instead.  A candidate is done when it has ``repeat`` samples *and*
   has spent ``min_time_s`` in calls (fast calls get more samples, at most
   ``max_samples``), or -- slow calls -- when it has three samples and has
   spent ``budget_s``.
5. precedes the timed calls by an untimed call of the same candidate
   (``primer``; it counts towards the time spent) -- every timed call when
   interleaving, the first of each block otherwise: a core that idled
   through a single-threaded NumPy call wakes up slowly, and threads of the
   framework before may still spin (measured: tcc's logistic 3.6 ms alone,
   5.5 ms right after ``torch.sigmoid``).
6. meanwhile measures how many cores *other processes* keep busy
   (:class:`LoadMeter`), over windows of consecutive rounds at least
   ``WINDOW_S`` long.  Samples from a window in which others kept more than
   ``quiet_below`` cores busy are set aside (they do not count above) and
   more rounds are run; a candidate gives up after ``give_up * budget_s``
   seconds, and one left with fewer than three quiet samples uses all its
   samples.  A row where that happened, or where fewer than half of the
   windows were quiet, is marked noisy.

The cell of a row is the median of the samples.  Ratios are
``peer median / tcc median``: above 1 means tcc is faster.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import math
import os
import platform
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("tcc", "jax.jit", "torch", "torch.compile", "numpy")
SETTLE_S = 0.3      # pause before each candidate's block: other frameworks' worker threads stop spinning
INTERLEAVE = False  # round-robin timing instead of blocks (--interleave; see the module doc)
BLOCK_ROUNDS = 3    # each candidate's calls in this many blocks, the candidates' blocks alternating
WINDOW_S = 0.25     # calls are grouped into windows of at least this long to measure other processes' load


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------
@dataclass
class Cell:
    """One framework's result in one row: a median, or why there is none."""

    status: str = "ok"                      # ok | missing | failed: .. | wrong: .. | n/a: ..
    samples: list[float] = field(default_factory=list)   # seconds
    first_s: float | None = None            # the first (compiling) call
    err: float | None = None                # relative error against tcc
    noisy: list[float] = field(default_factory=list)     # samples from windows when others were busy (unused)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.samples) * 1e3 if self.ok and self.samples else None

    @property
    def min_ms(self) -> float | None:
        return min(self.samples) * 1e3 if self.ok and self.samples else None


@dataclass
class Row:
    case: str
    what: str
    cells: dict[str, Cell] = field(default_factory=dict)
    note: str = ""
    other_load: float | None = None         # cores kept busy by other processes while the row was timed
    windows: tuple[int, int] = (0, 0)       # quiet windows, all windows
    noisy: bool = False                     # some cell had to use samples from busy windows
    flops: float | None = None              # useful floating-point operations of one call (contraction rows)

    def gflops(self, fw: str = "tcc") -> float | None:
        """``fw``'s rate on this row's useful FLOPs (GFLOP/s), where the row has a FLOP count."""
        cell = self.cells.get(fw)
        if self.flops is None or cell is None or not cell.median_ms:
            return None
        return self.flops / (cell.median_ms * 1e-3) / 1e9

    def ratio(self, fw: str) -> float | None:
        t, p = self.cells.get("tcc"), self.cells.get(fw)
        if t is None or p is None or t.median_ms is None or p.median_ms is None:
            return None
        return p.median_ms / t.median_ms


@dataclass
class Candidate:
    """``fn()`` does the work once and returns its results (a dict of arrays, for checking)."""

    framework: str
    fn: Callable[[], Any] | None = None
    status: str = "ok"                      # set to missing/failed before timing when it cannot run
    check: bool = True                      # compare the results with tcc's
    # a context entered around each of this candidate's blocks of calls (around each call when
    # interleaving), its first call and warm-up included: the conditions it is measured under
    around: Callable[[], ContextManager[Any]] | None = None


#: the key of the cell that times NumPy's matmul on a row's products (not a column of the tables: the
#: reference of the rate goal, benchmarks/families.py)
SAME_SHAPES = "numpy matmul, same shapes"


def _around(cands: Sequence[Candidate]) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    for c in cands:
        if c.around is not None:
            stack.enter_context(c.around())
    return stack


def short_reason(exc: BaseException, width: int = 90) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    text = text.splitlines()[0] if text else type(exc).__name__
    text = text.replace("|", "/")
    return text if len(text) <= width else text[: width - 3] + "..."


def to_numpy(value: Any) -> np.ndarray:
    """A peer's result as a NumPy array (torch tensors and jax arrays alike)."""
    if hasattr(value, "detach"):            # torch
        return value.detach().cpu().numpy()
    return np.asarray(value)


def rel_error(got: Mapping[str, Any], want: Mapping[str, np.ndarray]) -> float:
    """Worst norm-wise relative error ``max|got - want| / max|want|`` over ``want``'s arrays."""
    worst = 0.0
    for name, ref in want.items():
        if name not in got:
            raise KeyError(f"result '{name}' is missing")
        g = to_numpy(got[name]).astype(np.float64, copy=False)
        r = np.asarray(ref, dtype=np.float64)
        if g.shape != r.shape:
            raise ValueError(f"result '{name}' has shape {g.shape}, expected {r.shape}")
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        diff = float(np.max(np.abs(g - r))) if r.size else 0.0
        if not math.isfinite(diff):
            return math.inf
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def run_row(
    row: Row,
    candidates: Sequence[Candidate],
    reference: Mapping[str, np.ndarray] | None,
    *,
    repeat: int,
    budget_s: float,
    tol: float,
    min_time_s: float = 1.0,
    max_samples: int = 100,
    quiet_below: float | None = 0.25,
    give_up: float = 3.0,
    primer: bool = True,
    log: Callable[[str], None] = print,
) -> Row:
    """First call, check, warm-up and round-robin timing of ``candidates`` (see the module doc)."""
    live: list[tuple[Candidate, Cell]] = []
    for cand in candidates:
        cell = Cell(status=cand.status)
        row.cells[cand.framework] = cell
        if not cell.ok or cand.fn is None:
            if cell.ok:
                cell.status = "n/a"
            continue
        try:
            with _around([cand]):
                t0 = time.perf_counter()
                result = cand.fn()
                cell.first_s = time.perf_counter() - t0
                if cand.check and reference is not None:
                    cell.err = rel_error(result, reference)
                    if not cell.err <= tol:
                        cell.status = f"wrong: rel. error {cell.err:.1e} > {tol:g}"
                        log(f"    {cand.framework}: {cell.status} (not timed)")
                        continue
                del result
                cand.fn()                               # warm-up
        except Exception as exc:                        # noqa: BLE001 - any peer failure is a result
            cell.status = f"failed: {short_reason(exc)}"
            log(f"    {cand.framework}: {cell.status}")
            continue
        live.append((cand, cell))
    spent = {id(c): 0.0 for c, _ in live}

    pending: dict[int, int] = {}                        # samples in the open window, per cell

    def done(cand: Candidate, cell: Cell, share: float = 1.0) -> bool:
        """Whether ``cand`` has its samples -- ``share`` of them: the blocks up to this round's."""
        n, t = len(cell.samples) + pending.get(id(cell), 0), spent[id(cand)]
        return (
            (n >= math.ceil(share * repeat) and t >= share * min_time_s)
            or n >= math.ceil(share * max_samples)
            or (n >= math.ceil(share * 3) and t >= share * budget_s)
            or t >= share * give_up * budget_s          # only when the machine stays busy
        )

    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()
    meter, window_meter = LoadMeter(), LoadMeter()
    window: list[tuple[Cell, float]] = []
    windows = [0, 0]                                    # quiet, all

    def close_window() -> None:
        load = window_meter.stop()
        quiet = quiet_below is None or load is None or load <= quiet_below
        for cell, dt in window:
            (cell.samples if quiet else cell.noisy).append(dt)
        windows[0] += quiet
        windows[1] += 1
        window.clear()
        pending.clear()
        window_meter.start()

    meter.start()
    window_meter.start()

    def timed(cand: Candidate, cell: Cell, prime: bool) -> None:
        with _around([cand]) if INTERLEAVE else contextlib.nullcontext():
            if prime:                                   # untimed: absorbs the switch from the previous framework
                t0 = time.perf_counter()
                cand.fn()
                spent[id(cand)] += time.perf_counter() - t0
            t0 = time.perf_counter()
            cand.fn()
            dt = time.perf_counter() - t0
        window.append((cell, dt))
        pending[id(cell)] = pending.get(id(cell), 0) + 1
        spent[id(cand)] += dt

    try:
        # BLOCK_ROUNDS rounds of one block per candidate, each after a pause, or (interleaving) every
        # candidate in each round
        plan = ([(live, 1.0)] if INTERLEAVE else
                [([c], (r + 1) / BLOCK_ROUNDS) for r in range(BLOCK_ROUNDS) for c in live])
        for group, share in plan:
            if not INTERLEAVE:
                if all(done(c, cell, share) for c, cell in group):
                    continue
                time.sleep(SETTLE_S)
            first = True
            with contextlib.nullcontext() if INTERLEAVE else _around([c for c, _ in group]):
                while True:
                    if all(done(c, cell, share) for c, cell in group):
                        if window:                      # classify the open window, then look again
                            close_window()
                            continue
                        break
                    for cand, cell in group:
                        if not done(cand, cell, share):
                            timed(cand, cell, primer and (first or INTERLEAVE))
                    first = False
                    if window_meter.elapsed() >= WINDOW_S:
                        close_window()
        if window:
            close_window()
    finally:
        row.other_load = meter.stop()
        row.windows = (windows[0], windows[1])
        if gc_was:
            gc.enable()
    if row.windows[1] and 2 * row.windows[0] < row.windows[1]:
        row.noisy = True                                # most of the row ran while others were busy
    for _cand, cell in live:
        if len(cell.samples) < 3:                      # too few quiet samples: use them all, and say so
            cell.samples += cell.noisy
            cell.noisy = []
            row.noisy = True
    parts = []
    for fw, cell in row.cells.items():
        if cell.median_ms is not None:
            r = row.ratio(fw)
            parts.append(f"{fw} {cell.median_ms:.2f} ms" + (f" ({r:.2f}x)" if r is not None and fw != "tcc" else "")
                         + f" n={len(cell.samples)}")
        elif cell.status != "n/a":
            parts.append(f"{fw} {cell.status}")
    if row.other_load is not None:
        parts.append(f"other processes busy {row.other_load:.2f} cores, {row.windows[0]}/{row.windows[1]} windows quiet"
                     + (" (NOISY)" if row.noisy else ""))
    log(f"  {row.case}: {row.what}: " + "; ".join(parts))
    return row


# --------------------------------------------------------------------------
# load from other processes
# --------------------------------------------------------------------------
class LoadMeter:
    """How many cores other processes kept busy between :meth:`start` and :meth:`stop`.

    The machine-wide busy time (``/proc/stat``) minus this process's own CPU
    time (all its threads), divided by the wall time.  ``None`` where
    ``/proc/stat`` cannot be read.
    """

    def __init__(self) -> None:
        self._t0 = self._busy0 = self._own0 = None
        try:
            self._hz = os.sysconf("SC_CLK_TCK")
        except (ValueError, OSError, AttributeError):  # pragma: no cover
            self._hz = 100

    @staticmethod
    def _busy() -> float | None:
        try:
            with open("/proc/stat", encoding="ascii") as fh:
                fields = fh.readline().split()[1:]
        except OSError:
            return None
        v = [int(x) for x in fields]
        # user nice system idle iowait irq softirq steal ...
        return float(v[0] + v[1] + v[2] + v[5] + v[6])

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def start(self) -> None:
        self._t0, self._busy0, self._own0 = time.perf_counter(), self._busy(), self._own()

    def elapsed(self) -> float:
        return 0.0 if self._t0 is None else time.perf_counter() - self._t0

    def stop(self) -> float | None:
        busy = self._busy()
        if busy is None or self._busy0 is None or self._t0 is None:
            return None
        wall = time.perf_counter() - self._t0
        if wall <= 0:
            return None
        other = (busy - self._busy0) / self._hz - (self._own() - self._own0)
        return max(0.0, other / wall)


# --------------------------------------------------------------------------
# tcc kernels one by one
# --------------------------------------------------------------------------
def torch_twin(stmt: Any, buffers: Mapping[str, np.ndarray]) -> Callable[[], Any] | None:
    """The same product as the external kernel ``stmt`` in torch (MKL on its CPU builds), on the same
    operand arrays, or None: no torch, or not a plain product (a windowed ``contract`` is a convolution,
    whose torch counterpart is not one product; ``gram`` and matrix functions are not products).

    Timed beside tcc's kernel in the same rounds, it shows how much of a gap is BLAS's: tcc calls the
    OpenBLAS NumPy links, torch MKL, and the two differ most on small products (48^3)."""
    from tcc.runtime.externs.matrix_functions import einsum_equation
    from tcc.ir.contraction import has_window

    try:
        import torch
    except ImportError:
        return None
    spec = getattr(stmt, "spec", ())
    if spec and not has_window(spec):
        if len({x for ix in spec for x in ix}) > 52:  # einsum's letters
            return None
        eq = einsum_equation(spec)
        ta, tb = (torch.from_numpy(buffers[n]) for n in stmt.args)
        return lambda: torch.einsum(eq, ta, tb)
    if stmt.fn == "matmul" and not spec:
        flags = getattr(stmt, "transposed", ()) or (False, False)
        ta, tb = (torch.from_numpy(np.swapaxes(buffers[n], -1, -2) if t else buffers[n])
                  for n, t in zip(stmt.args, flags))
        out = torch.empty(buffers[stmt.out].shape, dtype=ta.dtype)
        return lambda: torch.matmul(ta, tb, out=out)
    return None


def kernel_times(compiled: Any, arrays: Mapping[str, Any], repeat: int) -> list[tuple[str, bool, float, float | None]]:
    """Median seconds of each kernel of a compiled tcc program, run in order as a call runs them.

    ``(name, parallel, seconds, torch seconds)`` per kernel.  Parallel kernels are split over
    the program's threads exactly as :class:`tcc.runtime.compiled.CompiledProgram` does;
    a zero fill that a call skips (tcc.backends.zero_fill: the result is
    allocated zeroed) is not listed.  Where an external product has a torch
    counterpart (:func:`torch_twin`; None otherwise), the twins are timed in
    blocks of their own that alternate with tcc's, each block after a pause
    (``BLOCK_ROUNDS``, ``SETTLE_S``, as the rows are timed): run right after
    each other, each library's spinning threads took the cores from the
    other's (OpenBLAS's GEMMs took 20x their time after torch's).
    """
    from tcc.backends.cpu import split_kernel
    from tcc.backends.thread_team import park
    from tcc.runtime.compiled import run_parallel
    from tcc.runtime.externs.dispatch import run_extern

    sizes, buffers = compiled.bind(dict(arrays))
    order = compiled.loops.buffers
    ptrs = (ctypes.c_void_p * max(1, len(order)))(*[buffers[b.name].ctypes.data for b in order])
    size_vals = (ctypes.c_int64 * max(1, len(compiled.loops.sizes)))(*[sizes[s] for s in compiled.loops.sizes])
    threads = compiled.threads
    skipped = getattr(compiled.executable, "zero_fills", {})
    kernels = [k for k in compiled.executable.kernels if k.name not in skipped]
    twins = [None if k.extern is None else torch_twin(k.extern, buffers) for k in kernels]
    samples: list[list[float]] = [[] for _ in kernels]
    twin_samples: list[list[float]] = [[] for _ in kernels]

    def tcc_round(keep: bool) -> None:
        for i, k in enumerate(kernels):
            t0 = time.perf_counter()
            if k.extern is not None:                    # matmul / LAPACK through NumPy
                park()
                run_extern(k.extern, buffers, threads)
            elif k.parallel and threads > 1:
                split_kernel(k, ptrs, size_vals, threads, run_parallel)
            else:
                k.fn(ptrs, size_vals, 0, 1)
            if keep:
                samples[i].append(time.perf_counter() - t0)

    def twin_round(keep: bool) -> None:
        for i, twin in enumerate(twins):
            if twin is not None:
                t0 = time.perf_counter()
                twin()
                if keep:
                    twin_samples[i].append(time.perf_counter() - t0)

    blocks = BLOCK_ROUNDS if any(t is not None for t in twins) else 1
    for block in range(blocks):
        for one_round in (tcc_round, twin_round) if blocks > 1 else (tcc_round,):
            if blocks > 1:
                time.sleep(SETTLE_S)
            share = repeat * (block + 1) // blocks - repeat * block // blocks
            for r in range(share + 1):                  # each block's first round is a warm-up
                one_round(r > 0)
    return [(k.name, bool(k.parallel), statistics.median(s), statistics.median(ts) if ts else None)
            for k, s, ts in zip(kernels, samples, twin_samples)]


def kernel_table(breakdowns: Sequence[tuple[str, Any, Sequence[tuple]]]) -> list[str]:
    """Markdown rows of :func:`kernel_times` results: ``(title, compiled, times)`` per program; a
    ``torch`` column where any kernel had a torch twin."""
    twins = any(len(t) > 3 and t[3] is not None for _, _, times in breakdowns for t in times)
    out = (["| program | kernel | ms | share | torch, same product (ms) |", "|---|---|---:|---:|---:|"] if twins
           else ["| program | kernel | ms | share |", "|---|---|---:|---:|"])
    for title, _compiled, times in breakdowns:
        total = sum(t[2] for t in times) or 1.0
        for name, par, t, *rest in times:
            row = f"| {title} | {name}{' (par)' if par else ''} | {t * 1e3:.2f} | {100 * t / total:.0f} % |"
            if twins:
                row += f" {rest[0] * 1e3:.2f} |" if rest and rest[0] is not None else " — |"
            out.append(row)
    return out


# --------------------------------------------------------------------------
# the machine
# --------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> str:
    """The widest SIMD the CPU reports (what LLVM, XLA and ATen may use)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    for f in ("avx512f", "avx2", "avx", "sse4_2"):
                        if f in flags:
                            return f + (" fma" if "fma" in flags else "")
    except OSError:
        pass
    return "?"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover
        return os.cpu_count() or 1


def git_state() -> str:
    """The commit the compiler came from, and whether its sources had local changes."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %cs"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "compiler", "passes", "ir",
                                "backends"], capture_output=True, text=True, timeout=10, check=True).stdout
    except Exception:  # noqa: BLE001
        return "not a git checkout"
    changed = [line[3:] for line in dirty.splitlines() if line.strip()]
    return f"commit {head}" + (f", with local changes in {', '.join(changed)}" if changed else "")


# --------------------------------------------------------------------------
# markdown
# --------------------------------------------------------------------------
def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def fmt_cell(row: Row, fw: str) -> str:
    cell = row.cells.get(fw)
    if cell is None or cell.status == "n/a":
        return "—"
    if not cell.ok:
        return cell.status
    text = fmt_ms(cell.median_ms)
    if fw == "tcc":
        return f"**{text}**"
    r = row.ratio(fw)
    return text + (f" ({r:.2f}x)" if r is not None else "")


def fmt_gflops(row: Row, peak_gflops: float | None) -> str:
    """tcc's GFLOP/s on ``row`` and, in parentheses, its fraction of ``peak_gflops``; "—" without a FLOP count."""
    rate = row.gflops("tcc")
    if rate is None:
        return "—"
    return f"{rate:.1f}" + (f" ({100 * rate / peak_gflops:.0f} %)" if peak_gflops else "")


def table(rows: Sequence[Row], frameworks: Sequence[str] = FRAMEWORKS, peak_gflops: float | None = None) -> str:
    """The markdown table of ``rows``; a "tcc GFLOP/s" column (with the fraction of ``peak_gflops``) when
    some row has a FLOP count."""
    used = [fw for fw in frameworks if any(fw in r.cells and r.cells[fw].status != "n/a" for r in rows)]
    rate = any(r.flops is not None for r in rows)
    head = " | tcc GFLOP/s (of peak)" if rate else ""
    out = ["| case | measurement | " + " | ".join(used) + head + " | busy elsewhere |",
           "|---|---|" + "---:|" * (len(used) + rate) + "---:|"]
    for r in rows:
        what = r.what + (f" ({r.note})" if r.note else "")
        load = "?" if r.other_load is None else f"{r.other_load:.2f}"
        if r.windows[1]:
            load += f" ({r.windows[0]}/{r.windows[1]} quiet)"
        if r.noisy:
            load += " **noisy**"
        cells = [fmt_cell(r, fw) for fw in used] + ([fmt_gflops(r, peak_gflops)] if rate else [])
        out.append(f"| {r.case} | {what} | " + " | ".join(cells) + f" | {load} |")
    return "\n".join(out)


def first_call_table(rows: Sequence[Row], frameworks: Sequence[str] = FRAMEWORKS) -> str:
    used = [fw for fw in frameworks if any(fw in r.cells and r.cells[fw].first_s is not None for r in rows)]
    out = ["| case | measurement | " + " | ".join(used) + " |", "|---|---|" + "---:|" * len(used)]
    for r in rows:
        cells = []
        for fw in used:
            c = r.cells.get(fw)
            if c is None or c.first_s is None:
                cells.append("—")
            else:
                cells.append(fmt_ms(c.first_s * 1e3) + (f" (err {c.err:.0e})" if c.err is not None else ""))
        out.append(f"| {r.case} | {r.what} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def replace_section(text: str, begin: str, end: str, body: str) -> str:
    """Replace what lies between the ``begin`` and ``end`` marker lines (append both if absent)."""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if pattern.search(text):
        return pattern.sub(lambda _m: block, text, count=1)
    return text.rstrip() + "\n\n" + block + "\n"


def compile_time_table(compile_times: Sequence[tuple[str, float]]) -> list[str]:
    """``tcc.compile`` seconds of each tcc program, as markdown lines."""
    out = ["| tcc program | tcc.compile ms |", "|---|---:|"]
    out += [f"| {name} | {s * 1e3:.0f} |" for name, s in compile_times]
    return out


# --------------------------------------------------------------------------
# the command line of run.py and gpu.py
# --------------------------------------------------------------------------
def add_options(ap: argparse.ArgumentParser, cases: Sequence[str], *, quick_help: str, repeat_help: str,
                budget_help: str, quiet_below: float | None, quiet_help: str,
                groups: Mapping[str, Sequence[str]] | None = None) -> None:
    """The options both scripts take, in this order: --quick, --repeat, --min-time, --budget, --quiet-below,
    --no-primer, --case (the help texts that differ between them are arguments)."""
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--repeat", type=int, default=None, help=repeat_help)
    ap.add_argument("--min-time", type=float, default=None, metavar="S",
                    help="seconds of calls per framework and row, at least (default 1, --quick 0.1)")
    ap.add_argument("--budget", type=float, default=None, metavar="S", help=budget_help)
    ap.add_argument("--quiet-below", type=float, default=quiet_below, metavar="CORES", help=quiet_help)
    ap.add_argument("--no-primer", action="store_true",
                    help="do not precede the timed calls by an untimed call of the same candidate")
    ap.add_argument("--interleave", action="store_true",
                    help="time the frameworks round-robin, one call each per round, instead of one block each "
                         "after a pause (the method of the runs before 2026-11-25; see benchmarks/harness.py)")
    names = "".join(f"; {g} = {', '.join(members)}" for g, members in (groups or {}).items())
    ap.add_argument("--case", default=",".join(cases), help=f"comma-separated subset of {', '.join(cases)}{names}")


def chosen_cases(ap: argparse.ArgumentParser, args: argparse.Namespace, cases: Sequence[str]) -> list[str]:
    """``--case``, checked against ``cases``."""
    chosen = [c.strip() for c in args.case.split(",") if c.strip()]
    bad = [c for c in chosen if c not in cases]
    if bad:
        ap.error(f"unknown case {', '.join(bad)} (choose from {', '.join(cases)})")
    return chosen


def timing_defaults(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--repeat``, ``--budget`` and ``--min-time`` where not given: their defaults, smaller with ``--quick``;
    ``--interleave`` sets :data:`INTERLEAVE`."""
    global INTERLEAVE
    INTERLEAVE = bool(getattr(args, "interleave", False))
    if args.repeat is None:
        args.repeat = 3 if args.quick else 10
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.budget is None:
        args.budget = 1.0 if args.quick else 10.0
    if args.min_time is None:
        args.min_time = 0.1 if args.quick else 1.0
