"""Time the derivation of the seed example's four gradients.

    python benchmarks/bench_grad.py [--repeat 50] [--file examples/urban.tcc --of f --wrt a,b,c,d]

One timed repetition = parse the source text + run the full default grad
pipeline (infer-ranges, autodiff, sum-liberation, index-solve, range-bound,
simplify, cse) for ``--of f --wrt a,b,c,d``, in-process.  One warm-up run
(imports, lazy pass loading) is not timed.  Prints a markdown table with the
median and the minimum in milliseconds, and the per-pass median.  The
prover's memo of decided conditions is cleared before every repetition, so a
repetition does not profit from proofs found by the previous one.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_MS = 50.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=str(ROOT / "examples" / "urban.tcc"))
    ap.add_argument("--of", default="f")
    ap.add_argument("--wrt", default="a,b,c,d")
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args(argv)

    import tcc
    from tcc.instruments import TimePasses
    from tcc.ir.polyhedra import clear_cache
    from tcc.ir.parser import parse_program
    from tcc.pipeline import grad_pipeline, run_pipeline

    text = Path(args.file).read_text(encoding="utf-8")
    name = os.path.relpath(args.file, ROOT)
    wrt = [w for w in args.wrt.split(",") if w]

    parse_ms: list[float] = []

    def once(instruments=()):
        clear_cache()
        t = time.perf_counter()
        program = parse_program(text, name)
        parse_ms.append((time.perf_counter() - t) * 1e3)
        return run_pipeline(program, grad_pipeline(args.of, wrt), instruments=instruments)

    t0 = time.perf_counter()
    reference = str(once())                      # warm-up (not in the statistics)
    cold_ms = (time.perf_counter() - t0) * 1e3

    parse_ms.clear()
    totals: list[float] = []
    per_pass: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        timer = TimePasses()
        t0 = time.perf_counter()
        result = once([timer])
        totals.append((time.perf_counter() - t0) * 1e3)
        for spec, seconds in timer.timings:
            per_pass.setdefault(spec.split("{")[0], []).append(seconds * 1e3)
        assert str(result) == reference, "the derivative program changed between runs"

    median, best = statistics.median(totals), min(totals)
    print(f"tcc grad {name} --of {args.of} --wrt {args.wrt}: parse + grad pipeline, "
          f"{args.repeat} runs after 1 warm-up ({cold_ms:.1f} ms cold)")
    print(f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs\n")
    print("| what | median ms | min ms |")
    print("|---|---:|---:|")
    print(f"| **parse + grad ({len(wrt)} gradients)** | **{median:.2f}** | **{best:.2f}** |")
    print(f"| parse | {statistics.median(parse_ms):.2f} | {min(parse_ms):.2f} |")
    for pname, ts in per_pass.items():
        print(f"| {pname} | {statistics.median(ts):.2f} | {min(ts):.2f} |")
    verdict = "meets" if median < GOAL_MS else "MISSES"
    print(f"\ngoal: < {GOAL_MS:g} ms median — {verdict} it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
