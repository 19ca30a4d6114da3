"""A correlation and its gradients on Dask, over arrays larger than one worker's memory limit.

    python benchmarks/dask_correlation.py                  # defaults: x of 10^8 float64 (800 MB), 384 MiB per worker
    python benchmarks/dask_correlation.py --n 2e8 --chunk 4e6 --workers 1 2

For each worker count: a LocalCluster of worker processes (one thread each,
``--memory-limit`` each), ``x`` and the seed ``dy`` generated lazily by
``dask.array.random`` (never whole anywhere), and the graph of ``y`` (reduced
to its sum), ``dx`` (reduced to its sum) and ``dw`` (a tree of partial sums)
computed once to warm up (each worker compiles the block kernels), then timed.
Reported per worker count: the time, the peak RSS of each worker process
(``ru_maxrss``, which includes the Python, Dask and LLVM baseline) and the
speedup over the first count.  A small instance is checked against
``tcc.compile`` first.

On a shared machine (other jobs on the same cores) the scaling is only
indicative.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

# benchmarks/sparse.py would shadow the `sparse` package Dask probes for: drop this directory from the path
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import numpy as np  # noqa: E402

import tcc  # noqa: E402

SOURCE = "input x[n], w[m]\ny[i] = sum[k](x[i + k] * w[k])\n"


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _graphs(n: int, m: int, chunk: int) -> dict:
    """The lazy results: sum of y, sum of dx, and dw (x and dy generated chunk by chunk)."""
    import dask.array as da

    rng = da.random.default_rng(0)
    x = rng.standard_normal(n, chunks=chunk)
    dy = rng.standard_normal(n - m + 1, chunks=chunk)
    w = np.linspace(-1.0, 1.0, m)
    f = tcc.dask.compile(SOURCE)
    g = tcc.dask.compile(tcc.grad(tcc.parse(SOURCE), of="y", wrt=["x", "w"]))
    y = f(x=x, w=w)["y"]
    grads = g(x=x, w=w, dy=dy)
    return {"y_sum": y.sum(), "dx_sum": grads["dx"].sum(), "dw": grads["dw"]}


def check_small() -> None:
    """The same graphs on a small instance against tcc.compile (synchronous scheduler)."""
    import dask
    import dask.array as da

    rng = np.random.default_rng(1)
    x, w, dy = rng.standard_normal(1000), rng.standard_normal(9), rng.standard_normal(992)
    ref = tcc.compile(tcc.grad(tcc.parse(SOURCE), of="y", wrt=["x", "w"]))(x=x, w=w, dy=dy)
    g = tcc.dask.compile(tcc.grad(tcc.parse(SOURCE), of="y", wrt=["x", "w"]))
    out = g(x=da.from_array(x, chunks=97), w=w, dy=da.from_array(dy, chunks=101))
    with dask.config.set(scheduler="sync"):
        got = dask.compute(out)[0]
    for k in ref:
        assert np.allclose(got[k], ref[k], rtol=1e-12, atol=1e-12), k
    print("small instance equals tcc.compile: ok")


def run(workers: int, n: int, m: int, chunk: int, memory_limit: str) -> float:
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.compute(_graphs(10 * chunk, m, chunk), sync=True)  # warm-up: kernels compiled on each worker
        graphs = _graphs(n, m, chunk)
        t0 = time.perf_counter()
        got = client.compute(graphs, sync=True)
        elapsed = time.perf_counter() - t0
        peaks = client.run(_peak_rss_mib)
        print(f"workers={workers} n={n:.3g} ({8 * n / 2**20:.0f} MiB per input) chunk={chunk:.3g} "
              f"memory_limit={memory_limit}: {elapsed:.2f} s; peak RSS per worker "
              + ", ".join(f"{v:.0f} MiB" for v in peaks.values())
              + f"; y.sum={float(got['y_sum']):.6g} dw[0]={float(got['dw'][0]):.6g}")
        return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, default=1e8)
    ap.add_argument("--m", type=int, default=9)
    ap.add_argument("--chunk", type=float, default=2e6)
    ap.add_argument("--memory-limit", default="384MiB")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    check_small()
    times = [run(w, int(args.n), args.m, int(args.chunk), args.memory_limit) for w in args.workers]
    for w, t in zip(args.workers, times):
        print(f"workers={w}: {t:.2f} s, speedup {times[0] / t:.2f}x over {args.workers[0]} worker(s)")


if __name__ == "__main__":
    main()
