"""The indirect-indexing workloads of issue 15 for ``benchmarks/run.py``: reads through index arrays.

Each is a :class:`problems.GradCase` run by :func:`problems.grad_case`
(forward, forward + gradients, backward only; every peer checked against tcc
before it is timed).  The index arrays are inputs of every framework and are
never differentiated.

* :func:`embedding_bag` -- ``y[b, j] = sum[k: off[b]..off[b + 1] - 1](emb[tok[k], j])``:
  bags of token rows summed, gradient wrt ``emb``.  torch:
  ``F.embedding_bag(mode="sum")``; jax: ``segment_sum`` of ``emb[tok]``, whose
  transpose is the scatter ``.at[tok].add``.
* :func:`csr_spmv` -- ``y[i] = sum[k: ptr[i]..ptr[i + 1] - 1](val[k] * x[col[k]])``,
  gradients wrt ``val`` and ``x`` (``wrt_x_only``: wrt ``x``).  jax:
  ``jax.experimental.sparse.BCSR @ x``.  torch: ``torch.sparse.mm`` of a CSR
  tensor where only ``x`` is differentiated; with ``val`` differentiated too,
  torch's sparse backward allocates a dense ``m x n`` gradient (80 GB at
  10**5 x 10**5), so the torch peer is then what users write instead: the
  gather ``val * x[col]`` summed per row by ``index_add`` (its backward: a
  gather and a scatter-add).

tcc's gradients are gathers over inverse indices (a counting sort of ``tok``
or ``col``, the rows of ``ptr``) that each call builds before its kernels: the
rows include that construction.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import harness as H
from problems import GradCase, Peers, unavailable

CASES = ("embedding-bag", "csr-spmv", "csr-spmv-x")


def bags(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    """Offsets ``off[count + 1]`` of ``count`` bags holding ``n`` tokens in all: multinomial lengths, some empty."""
    lengths = rng.multinomial(n, np.ones(count) / count)
    return np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)


def embedding_bag(V: int, N: int, D: int, B: int, peers: Peers, seed: int = 21) -> GradCase:
    """``B`` bags of ``N`` tokens in all over a ``V x D`` table, summed."""
    rng = np.random.default_rng(seed)
    inputs = {"off": bags(rng, N, B), "tok": rng.integers(0, V, N), "emb": rng.standard_normal((V, D))}
    src = ("index off[B + 1] <= N, tok[N] < V\ninput emb[V, D]\n"
           "y[b, j] = sum[k: off[b]..off[b + 1] - 1](emb[tok[k], j])\n")
    f_jax = f_torch = None
    if peers.jax is not None:
        jax, jnp = peers.jax, peers.jnp

        def f_jax(off, tok, emb):
            bag = jnp.searchsorted(off[1:], jnp.arange(tok.shape[0]), side="right")
            return jax.ops.segment_sum(emb[tok], bag, num_segments=off.shape[0] - 1)

    if peers.torch is not None:
        F = peers.torch.nn.functional

        def f_torch(off, tok, emb):
            return F.embedding_bag(tok, emb, off, mode="sum", include_last_offset=True)

    def f_numpy(off, tok, emb):
        return np.add.reduceat(np.concatenate((emb[tok], np.zeros((1, emb.shape[1])))),
                               np.minimum(off[:-1], tok.shape[0]))[: off.shape[0] - 1] * (np.diff(off) > 0)[:, None]

    return GradCase("embedding-bag", src, "y", inputs, rng.standard_normal((B, D)), f_jax, f_torch,
                    numpy_fwd=f_numpy, wrt=["emb"],
                    notes={"forward": "torch: F.embedding_bag(sum); jax: segment_sum(emb[tok]); "
                                      "numpy: add.reduceat"})


def csr_spmv(m: int, n: int, nnz: int, peers: Peers, wrt_x_only: bool = False, seed: int = 22) -> GradCase:
    """A random ``m x n`` CSR matrix with ``nnz`` non-zeros (multinomial row lengths) times a vector."""
    rng = np.random.default_rng(seed)
    ptr = bags(rng, nnz, m)
    inputs = {"ptr": ptr, "col": rng.integers(0, n, nnz), "val": rng.standard_normal(nnz),
              "x": rng.standard_normal(n)}
    src = ("index ptr[m + 1] <= nnz, col[nnz] < n\ninput val[nnz], x[n]\n"
           "y[i] = sum[k: ptr[i]..ptr[i + 1] - 1](val[k] * x[col[k]])\n")
    f_jax = f_torch = None
    if peers.jax is not None:
        from jax.experimental import sparse as jsparse

        def f_jax(ptr, col, val, x):
            return jsparse.BCSR((val, col, ptr), shape=(m, n)) @ x

    if peers.torch is not None:
        torch = peers.torch
        row = torch.from_numpy(np.repeat(np.arange(m), np.diff(ptr)))

        if wrt_x_only:
            def f_torch(ptr, col, val, x):
                return torch.sparse.mm(torch.sparse_csr_tensor(ptr, col, val, size=(m, n)), x[:, None])[:, 0]
        else:
            def f_torch(ptr, col, val, x):
                return torch.zeros(m, dtype=x.dtype).index_add(0, row, val * x[col])

    def f_numpy(ptr, col, val, x):
        import scipy.sparse as sp

        return sp.csr_matrix((val, col, ptr), shape=(m, n)) @ x

    torch_note = "torch.sparse.mm(CSR)" if wrt_x_only else "index_add(val * x[col]) (sparse.mm: dense 80 GB grad)"
    return GradCase("csr-spmv-x" if wrt_x_only else "csr-spmv", src, "y", inputs, rng.standard_normal(m),
                    f_jax, f_torch, numpy_fwd=f_numpy, wrt=["x"] if wrt_x_only else ["val", "x"],
                    notes={"forward": f"jax: BCSR @ x; torch: {torch_note}; numpy: scipy.sparse csr @ x"})


def case_sizes(name: str, quick: bool) -> tuple[Any, ...]:
    """Issue 15's sizes (vocabulary 50 000, 10**6 lookups, width 64; 10**5 x 10**5 with 10**6 non-zeros)."""
    if name == "embedding-bag":
        return (5000, 10 ** 5, 16, 1000) if quick else (50_000, 10 ** 6, 64, 10_000)
    return (10 ** 4, 10 ** 4, 10 ** 5) if quick else (10 ** 5, 10 ** 5, 10 ** 6)


def case(name: str, quick: bool, peers: Peers, seed: int | None = None) -> GradCase:
    sizes = case_sizes(name, quick)
    more = {} if seed is None else {"seed": seed}
    if name == "embedding-bag":
        return embedding_bag(*sizes, peers, **more)
    return csr_spmv(*sizes, peers, wrt_x_only=name == "csr-spmv-x", **more)


def new_index_arrays_row(ctx: Any, name: str) -> None:
    """tcc's gradient call when every call brings other index arrays, so that the compiled program's
    cache of validated and inverse indices (``tcc.index_inputs.IndexCache``) never hits: two
    problems of the same sizes with different index arrays, called in turn.  The peers do the same
    work whatever the index arrays are (their rows above)."""
    import tcc

    one, two = case(name, ctx.quick, ctx.peers), case(name, ctx.quick, ctx.peers, seed=99)
    grad = ctx.tcc_compile(f"{name}: gradients, new index arrays", tcc.grad(one.src, of=one.of, wrt=one.wrt))
    calls = [{**gc.inputs, "d" + gc.of: gc.seed} for gc in (one, two)]
    turn = [0]

    def run() -> Any:
        turn[0] ^= 1
        return grad(**calls[turn[0]])

    ctx.row(name, "gradients, backward only, new index arrays every call",
            [H.Candidate("tcc", run, check=False), unavailable("jax.jit", "n/a: as above"),
             unavailable("torch", "n/a: as above")], {},
            note="tcc: two index structures in turn, each call validates and builds its inverse indices")
