"""Generate chained-definition programs for scaling measurements of ``tcc grad``.

    python benchmarks/chain.py matvec N > chain.tcc   # h_k[i] = sum[j](A[i, j] * tanh(h_{k-1}[j]))
    python benchmarks/chain.py elem N > chain.tcc     # h_k[i] = sin(h_{k-1}[i]) * h_{k-1}[i]
    python benchmarks/chain.py product N > p.tcc      # y[i] = x[i] * x[i] * ... (N factors)
    python benchmarks/chain.py product-const N > p.tcc  # y[i] = x[i] * 2 * x[i] * x[i] * 2 * ...

Every program ends in the scalar ``f = sum[i](hN[i])``; differentiate it with
``tcc grad chain.tcc --of f --wrt x`` (``--wrt x,A`` for ``matvec``).

    python benchmarks/chain.py --time matvec 25,50,100,200,400 [--wrt x]

derives each program in-process and prints a markdown table of the CPU time
(``time.process_time``: other processes on a shared machine do not inflate it)
of parsing and of each pass of the default grad pipeline, seconds.

    python benchmarks/chain.py --compile matvec 25,50,100,200 [--wrt x]

compiles each gradient with ``tcc.compile`` (CPU target, float64) and prints
the CPU seconds of the whole compile, of ``lower-llvm`` and ``llvm-opt``, and
the number of kernels and of kernel bodies LLVM keeps apart (shared ones).
"""
from __future__ import annotations

import sys
import time


def matvec(n: int) -> str:
    lines = ["input x[n], A[n, n]", "h1[i] = sum[j](A[i, j] * x[j])"]
    for k in range(2, n + 1):
        lines.append(f"h{k}[i] = sum[j](A[i, j] * tanh(h{k - 1}[j]))")
    lines.append(f"f = sum[i](h{n}[i])")
    return "\n".join(lines) + "\n"


def elem(n: int) -> str:
    lines = ["input x[n]", "h1[i] = sin(x[i])"]
    for k in range(2, n + 1):
        lines.append(f"h{k}[i] = sin(h{k - 1}[i]) * h{k - 1}[i]")
    lines.append(f"f = sum[i](h{n}[i])")
    return "\n".join(lines) + "\n"


def product(n: int) -> str:
    """One definition, a product of n factors: ``y[i] = x[i] * x[i] * ...`` (not a chain of definitions)."""
    return "input x[n]\ny[i] = " + " * ".join(["x[i]"] * n) + "\nf = sum[i](y[i])\n"


def product_const(n: int) -> str:
    """As ``product``, with every third factor the constant 2: ``x[i] * 2 * x[i] * x[i] * 2 * ...``."""
    factors = ["2" if k % 3 == 1 else "x[i]" for k in range(n)]
    return "input x[n]\ny[i] = " + " * ".join(factors) + "\nf = sum[i](y[i])\n"


KINDS = {"matvec": matvec, "elem": elem, "product": product, "product-const": product_const}


def time_grad(kind: str, sizes: list[int], wrt: str) -> None:
    from tcc.instruments import TimePasses
    from tcc.ir.parser import parse_program
    from tcc.ir.polyhedra import clear_cache
    from tcc.pipeline import grad_pipeline, run_pipeline

    # as the ``tcc`` command does (compiler/cli/driver.py): some passes still recurse per nesting level
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    print(f"tcc grad --of f --wrt {wrt}, {kind} chain, CPU seconds\n")
    for row, n in enumerate(sizes):
        clear_cache()
        t = time.process_time()
        program = parse_program(KINDS[kind](n), f"{kind}{n}.tcc")
        parse_s = time.process_time() - t
        timer = TimePasses(clock=time.process_time)
        run_pipeline(program, grad_pipeline("f", wrt.split(",")), instruments=[timer])
        timings = [(spec.split("{")[0], s) for spec, s in timer.timings]
        if row == 0:
            print("| N | total | parse | " + " | ".join(name for name, _ in timings) + " |")
            print("|---:|---:|---:|" + "---:|" * len(timings))
        total = parse_s + sum(s for _, s in timings)
        cells = " | ".join(f"{s:.2f}" for _, s in timings)
        print(f"| {n} | **{total:.2f}** | {parse_s:.2f} | {cells} |", flush=True)


def time_compile(kind: str, sizes: list[int], wrt: str) -> None:
    import re

    import tcc
    from tcc.instruments import TimePasses

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    print(f"tcc.compile(tcc.grad(..., of='f', wrt='{wrt}')), {kind} chain, CPU seconds\n")
    print("| N | kernels | shared bodies | compile | lower-llvm | llvm-opt |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        grad = tcc.grad(tcc.parse(KINDS[kind](n)), of="f", wrt=wrt)
        timer = TimePasses(clock=time.process_time)
        t = time.process_time()
        compiled = tcc.compile(grad, instruments=[timer])
        total = time.process_time() - t
        passes = {spec.split("{")[0]: s for spec, s in timer.timings}
        text = str(compiled.llvm)
        kernels = len(re.findall(r"^define void @", text, re.M))
        bodies = len(re.findall(r"^define internal .*\.body", text, re.M))
        print(f"| {n} | {kernels} | {bodies} | **{total:.2f}** | {passes['lower-llvm']:.2f} | {passes['llvm-opt']:.2f} |",
              flush=True)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--time":
        wrt = argv[argv.index("--wrt") + 1] if "--wrt" in argv else "x"
        time_grad(argv[1], [int(n) for n in argv[2].split(",")], wrt)
        return 0
    if argv and argv[0] == "--compile":
        wrt = argv[argv.index("--wrt") + 1] if "--wrt" in argv else "x"
        time_compile(argv[1], [int(n) for n in argv[2].split(",")], wrt)
        return 0
    if len(argv) != 2 or argv[0] not in KINDS or not argv[1].isdigit():
        sys.stderr.write(__doc__)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    kind, n = argv[0], int(argv[1])
    sys.stdout.write(KINDS[kind](n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
