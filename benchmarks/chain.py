"""Generate chained-definition programs for scaling measurements of ``tcc grad``.

    python benchmarks/chain.py matvec N > chain.tcc   # h_k[i] = sum[j](A[i, j] * tanh(h_{k-1}[j]))
    python benchmarks/chain.py elem N > chain.tcc     # h_k[i] = sin(h_{k-1}[i]) * h_{k-1}[i]

Every program ends in the scalar ``f = sum[i](hN[i])``; differentiate it with
``tcc grad chain.tcc --of f --wrt x`` (``--wrt x,A`` for ``matvec``).
"""
from __future__ import annotations

import sys


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


def main(argv: list[str]) -> int:
    kind, n = argv[0], int(argv[1])
    sys.stdout.write({"matvec": matvec, "elem": elem}[kind](n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
