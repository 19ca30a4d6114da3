"""The workload families of issue 13 for ``benchmarks/run.py``, and the machine's matmul peak.

Each family is a :class:`problems.GradCase` (tcc program text, inputs, seed,
the jax / torch / NumPy functions, the useful FLOPs of each row), run by
:func:`problems.grad_case` as the older cases are: forward, forward + all
gradients, backward only, every peer checked against tcc before it is timed.

* :func:`dense`     -- ``Y[a, c] = tanh(sum[k](X[a, k] * W[c, k]) + b[c])``, wrt X, W, b;
* :func:`attention` -- batched scores ``0.125 * Q K^T`` and a row softmax, wrt Q, K;
* ``conv2d-s1``     -- :func:`problems.conv2d` with stride 1 (run.py builds it);
* :func:`contract3` -- ``T[i, j, l] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])``, wrt A, B, C;
* :func:`quadform`  -- ``f = x^T A x``, value and gradient wrt x;
* :func:`layernorm` -- normalisation over the last axis with gain and bias, wrt X, g, b.

tcc has no ``max`` yet, so the softmax is written without subtracting the
row maximum, and the peers compute that same formula (``exp`` of the scaled
scores, divided by their row sum) so that the results agree; the inputs keep
the scores near 1 in magnitude, where the formula is safe.

"Useful FLOPs" (the GFLOP/s column) count the multiply-adds (2 FLOPs each)
of the contractions only, each computed once in its cheapest pairwise order:
what a program that does no redundant work must do.  Element-wise work
(``tanh``, ``exp``, the softmax and layer-norm arithmetic) is not counted;
layer normalisation, which has no contraction, has no GFLOP/s.

The issue's rate goal reads tcc's GFLOP/s against "NumPy's matmul on the
same shapes": :func:`products` lists, per dense family, the matrix products
(batch, M, N, K) of its forward + gradients in that cheapest order, and
:func:`numpy_matmul_round` is ``np.matmul`` on contiguous operands of those
shapes, timed beside tcc in the same row -- nothing else (no element-wise work, no transposing or im2col
copies), so NumPy's figure is the most favourable reading of its own BLAS.
A convolution's products are its im2col GEMMs with the batch folded into
``N`` (one product each for ``y``, the columns of ``dx`` and ``dw``).  The
run also reads the rates against :func:`matmul_peak`, NumPy's float64
product of two square 2048 matrices: a stricter reference than the issue's,
since small shapes never reach it.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable

import numpy as np

from problems import BO, FB, GradCase, Peers

FAMILIES = ("dense", "attention", "conv2d-s1", "contract3", "quadform", "layernorm",
            "attention-causal", "gelu-def", "cosine")
DENSE_FAMILIES = ("dense", "attention", "conv2d-s1", "contract3")   # the ">= 80 % of peak" goal applies to these


def matmul_peak(n: int, repeat: int) -> float:
    """GFLOP/s of NumPy's float64 ``a @ b`` for ``n x n`` matrices: ``2 n^3`` over the median of ``repeat`` calls.

    Measured where the families are timed, on the same (loaded) machine:
    the reference the GFLOP/s column is read against.  One untimed call
    first (page faults of the result, BLAS thread start-up).
    """
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    a @ b
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2.0 * n ** 3 / statistics.median(times) / 1e9


#: one matrix product: (batch, M, N, K), ``batch`` independent ``M x K`` by ``K x N`` products
Product = tuple[int, int, int, int]


def product_flops(prods: list[Product]) -> float:
    """2 FLOPs per multiply-add of every product."""
    return float(sum(2 * h * m * n * k for h, m, n, k in prods))


def products(name: str, sizes: tuple[int, ...]) -> list[Product]:
    """The matrix products of the dense family ``name``'s forward + all gradients, each computed once in
    its cheapest pairwise order (``sizes`` as run.py passes them to the family's constructor)."""
    if name == "dense":                       # Y = X W^T; dX = dZ W; dW = dZ^T X
        A, K, C = sizes
        return [(1, A, C, K), (1, A, K, C), (1, C, K, A)]
    if name == "attention":                   # S = Q K^T; dQ = dS K; dK = dS^T Q
        B, I, J, D = sizes
        return [(B, I, J, D), (B, I, D, J), (B, J, D, I)]
    if name == "conv2d-s1":                   # im2col: y = W Xcol; dXcol = W^T dY; dW = dY Xcol^T
        B, C, O, S, R = sizes
        n, k = B * (S - R + 1) ** 2, C * R * R
        return [(1, O, n, k), (1, k, n, O), (1, O, k, n)]
    if name == "contract3":                   # T_ctr = A C; T = B^T T_ctr[i]; dT_ctr = B dT[i];
        n, = sizes                            # dA = dT_ctr C^T; dB, dC: contracted over two indices
        return [(1, n * n, n, n), (n, n, n, n), (n, n, n, n), (1, n * n, n, n), (1, n, n, n * n),
                (1, n, n, n * n)]
    raise ValueError(f"no products for {name!r}")


def numpy_matmul_round(prods: list[Product]) -> Callable[[], dict]:
    """One round of ``np.matmul`` over every product in ``prods`` (contiguous random float64 operands,
    results into arrays allocated once): "NumPy's matmul on the same shapes".  run.py times it as a
    candidate of the forward + gradients row, in blocks alternating with tcc's (benchmarks/harness.py),
    so that the rate goal's two times come from the same stretch of this machine's drifting speed."""
    rng = np.random.default_rng(1)
    ops = [(rng.standard_normal((h, m, k)), rng.standard_normal((h, k, n)), np.empty((h, m, n)))
           for h, m, n, k in prods]

    def one_round() -> dict:
        for a, b, out in ops:
            np.matmul(a, b, out=out)
        return {}

    return one_round


def three_rows(fwd: float, grads: float) -> dict[str, float]:
    """Useful FLOPs of the three rows, from the forward's and the gradients' (all of them) counts."""
    return {"forward": fwd, FB: fwd + grads, BO: grads}


# --------------------------------------------------------------------------
# the families
# --------------------------------------------------------------------------
def dense(A: int, K: int, C: int, peers: Peers) -> GradCase:
    """A dense layer with a tanh activation, ``X[A, K]``, ``W[C, K]`` (torch's layout), ``b[C]``."""
    rng = np.random.default_rng(11)
    inputs = {"X": rng.standard_normal((A, K)), "W": rng.standard_normal((C, K)) / math.sqrt(K),
              "b": rng.standard_normal(C)}
    src = (f"input X[{A}, {K}], W[{C}, {K}], b[{C}]\n"
           "Y[a, c] = tanh(sum[k](X[a, k] * W[c, k]) + b[c])\n")
    f_jax = f_torch = None
    if peers.jax is not None:
        jnp = peers.jnp

        def f_jax(X, W, b):
            return jnp.tanh(X @ W.T + b)

    if peers.torch is not None:
        torch = peers.torch

        def f_torch(X, W, b):
            return torch.tanh(torch.nn.functional.linear(X, W, b))

    gemm = 2.0 * A * K * C                              # Y, dX = dZ W and dW = dZ^T X: one GEMM each
    return GradCase("dense", src, "Y", inputs, rng.standard_normal((A, C)), f_jax, f_torch,
                    numpy_fwd=lambda X, W, b: np.tanh(X @ W.T + b), flops=three_rows(gemm, 2 * gemm),
                    notes={"forward": "torch: tanh(F.linear); numpy: tanh(X @ W.T + b)"})


def attention(B: int, I: int, J: int, D: int, peers: Peers) -> GradCase:
    """Scaled scores of ``Q[B, I, D]`` against ``K[B, J, D]`` and their softmax over j (no max subtracted)."""
    rng = np.random.default_rng(12)
    inputs = {"Q": rng.standard_normal((B, I, D)), "K": rng.standard_normal((B, J, D))}
    scale = 1.0 / math.sqrt(D)
    # the softmax as exp(s) / sum(exp(s)), as in the family's first recorded runs (before tcc had
    # max reductions; the stable form is examples/stable_softmax.tcc); the scale keeps the scores near 1
    src = (f"input Q[{B}, {I}, {D}], K[{B}, {J}, {D}]\n"
           f"local e[{B}, {I}, {J}], s[{B}, {I}]\n"
           f"output P[{B}, {I}, {J}]\n"
           f"e[b, i, j] = exp({scale!r} * sum[d](Q[b, i, d] * K[b, j, d]))\n"
           "s[b, i] = sum[j](e[b, i, j])\n"
           "P[b, i, j] = e[b, i, j] / s[b, i]\n")
    f_jax = f_torch = None
    if peers.jax is not None:
        jnp = peers.jnp

        def f_jax(Q, K):
            e = jnp.exp(scale * jnp.einsum("bid,bjd->bij", Q, K))
            return e / jnp.sum(e, axis=-1, keepdims=True)

    if peers.torch is not None:
        torch = peers.torch

        def f_torch(Q, K):
            e = torch.exp(scale * (Q @ K.transpose(-1, -2)))
            return e / e.sum(-1, keepdim=True)

    def f_numpy(Q, K):
        e = np.exp(scale * (Q @ K.transpose(0, 2, 1)))
        return e / e.sum(-1, keepdims=True)

    gemm = 2.0 * B * I * J * D                          # scores, dQ = dS K, dK = dS^T Q
    return GradCase("attention", src, "P", inputs, rng.standard_normal((B, I, J)), f_jax, f_torch,
                    numpy_fwd=f_numpy, flops=three_rows(gemm, 2 * gemm),
                    notes={"forward": "all: exp(scores) / row sum, no max subtracted"})


def conv2d_flops(B: int, C: int, O: int, S: int, R: int, stride: int) -> dict[str, float]:
    """Useful FLOPs of a valid convolution's rows: y, dx and dw cost one convolution's multiply-adds each."""
    So = (S - R) // stride + 1
    conv = 2.0 * B * O * So * So * C * R * R
    return three_rows(conv, 2 * conv)


def contract3(n: int, peers: Peers) -> GradCase:
    """``T[i, j, l] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])`` with every extent ``n``."""
    rng = np.random.default_rng(13)
    inputs = {"A": rng.standard_normal((n, n, n)), "B": rng.standard_normal((n, n)),
              "C": rng.standard_normal((n, n))}
    src = (f"input A[{n}, {n}, {n}], B[{n}, {n}], C[{n}, {n}]\n"
           "T[i, j, l] = sum[p, q](A[i, p, q] * B[p, j] * C[q, l])\n")
    spec = "ipq,pj,ql->ijl"
    f_jax = f_torch = None
    if peers.jax is not None:
        jnp = peers.jnp

        def f_jax(A, B, C):
            return jnp.einsum(spec, A, B, C)

    if peers.torch is not None:
        torch = peers.torch

        def f_torch(A, B, C):
            return torch.einsum(spec, A, B, C)

    # cheapest pairwise orders: T = (A C) B, dA = (dT B^T) C^T, dB = T_ctr . dT, dC = A . dT_ctr; the
    # value and the gradients share T_ctr = A C: six n^4 products (products()); the backward alone,
    # which is not given T_ctr, computes it again: five
    step = 2.0 * n ** 4
    return GradCase("contract3", src, "T", inputs, rng.standard_normal((n, n, n)), f_jax, f_torch,
                    numpy_fwd=lambda A, B, C: np.einsum(spec, A, B, C, optimize=True),
                    flops={"forward": 2 * step, FB: 6 * step, BO: 5 * step},
                    notes={"forward": "jax, torch: einsum (pairwise order from opt_einsum); "
                                      "numpy: einsum(optimize=True)"})


def quadform(n: int, peers: Peers) -> GradCase:
    """``f = sum[i](sum[j](x[i] * A[i, j] * x[j]))`` (``examples/quadratic_form.tcc``), value and gradient wrt x."""
    rng = np.random.default_rng(14)
    inputs = {"x": rng.standard_normal(n), "A": rng.standard_normal((n, n))}
    src = f"input x[{n}], A[{n}, {n}]\nf = sum[i](sum[j](x[i] * A[i, j] * x[j]))\n"
    f_jax = f_torch = None
    if peers.jax is not None:
        def f_jax(x, A):
            return x @ (A @ x)

    if peers.torch is not None:
        def f_torch(x, A):
            return x @ (A @ x)

    mv = 2.0 * n * n                                    # f: A x; the gradient (A + A^T) x: A x and A^T x
    return GradCase("quadform", src, "f", inputs, np.array(1.0), f_jax, f_torch,
                    numpy_fwd=lambda x, A: x @ (A @ x), wrt=["x"],
                    flops={"forward": mv, FB: 2 * mv, BO: 2 * mv},
                    notes={"forward": "all: x @ (A @ x); gradient wrt x only (seed df = 1)"})


def layernorm(A: int, C: int, peers: Peers, eps: float = 1e-5) -> GradCase:
    """Layer normalisation of ``X[A, C]`` over its last axis (biased variance, ``eps`` inside the root),
    gain ``g[C]`` and bias ``b[C]``."""
    rng = np.random.default_rng(15)
    inputs = {"X": rng.standard_normal((A, C)) * 2 + 0.5, "g": rng.standard_normal(C), "b": rng.standard_normal(C)}
    src = (f"input X[{A}, {C}], g[{C}], b[{C}]\n"
           f"local mu[{A}], xc[{A}, {C}], r[{A}]\n"
           f"output Y[{A}, {C}]\n"
           f"mu[a] = sum[c](X[a, c]) / {C}\n"
           "xc[a, c] = X[a, c] - mu[a]\n"
           f"r[a] = 1 / sqrt(sum[c](xc[a, c]**2) / {C} + {eps!r})\n"
           "Y[a, c] = xc[a, c] * r[a] * g[c] + b[c]\n")

    def by_hand(xp: Any) -> Any:
        def f(X, g, b):
            xc = X - X.mean(axis=-1, keepdims=True)
            return xc / xp.sqrt((xc ** 2).mean(axis=-1, keepdims=True) + eps) * g + b
        return f

    f_jax = by_hand(peers.jnp) if peers.jax is not None else None
    f_torch = None
    if peers.torch is not None:
        torch = peers.torch

        def f_torch(X, g, b):
            return torch.nn.functional.layer_norm(X, (C,), g, b, eps=eps)

    return GradCase("layernorm", src, "Y", inputs, rng.standard_normal((A, C)), f_jax, f_torch,
                    numpy_fwd=by_hand(np),
                    notes={"forward": "torch: F.layer_norm; jax, numpy: the same formula written out"})


# --------------------------------------------------------------------------
# issue 35 item 1: contractions wherever they stand
# --------------------------------------------------------------------------
def causal_attention(B: int, I: int, D: int, peers: Peers) -> GradCase:
    """Causally masked scores ``where(j <= i, exp(0.125 Q K^T), 0)`` normalised by their row sums, wrt Q, K."""
    rng = np.random.default_rng(21)
    inputs = {"Q": rng.standard_normal((B, I, D)) * 0.5, "K": rng.standard_normal((B, I, D)) * 0.5}
    src = (f"input Q[{B}, {I}, {D}], K[{B}, {I}, {D}]\nlocal S[{B}, {I}, {I}]\noutput P[{B}, {I}, {I}]\n"
           "S[a, i, j] = where(j <= i, exp(0.125 * sum[k](Q[a, i, k] * K[a, j, k])), 0)\n"
           "P[a, i, j] = S[a, i, j] / sum[l](S[a, i, l])\n")

    def by_hand(xp: Any, tril: Any, exp: Any) -> Callable:
        def f(Q, K):
            s = xp.where(tril, exp(0.125 * (Q @ xp.swapaxes(K, -1, -2))), 0.0 * Q[..., :1])
            return s / s.sum(-1, keepdims=True)
        return f

    mask = np.tril(np.ones((I, I), bool))
    f_jax = by_hand(peers.jnp, peers.jnp.asarray(mask), peers.jnp.exp) if peers.jax is not None else None
    f_torch = None
    if peers.torch is not None:
        torch = peers.torch
        f_torch = by_hand(torch, torch.from_numpy(mask), torch.exp)
    gemm = 2.0 * B * I * I * D
    return GradCase("attention-causal", src, "P", inputs, rng.standard_normal((B, I, I)), f_jax, f_torch,
                    numpy_fwd=by_hand(np, mask, np.exp), flops=three_rows(gemm, 2 * gemm),
                    notes={"forward": "all: full Q K^T, masked, divided by the row sum"})


def gelu_def(A: int, K: int, C: int, peers: Peers) -> GradCase:
    """A dense layer whose tanh-GELU activation is a user function (``def gelu(u) = ...``), wrt X, W, b."""
    rng = np.random.default_rng(22)
    inputs = {"X": rng.standard_normal((A, K)), "W": rng.standard_normal((C, K)) / math.sqrt(K),
              "b": rng.standard_normal(C)}
    src = (f"input X[{A}, {K}], W[{C}, {K}], b[{C}]\n"
           "def gelu(u) = 0.5 * u * (1 + tanh(0.7978845608028654 * (u + 0.044715 * u**3)))\n"
           "Y[a, c] = gelu(sum[k](X[a, k] * W[c, k]) + b[c])\n")

    def by_hand(tanh: Any) -> Callable:
        def f(X, W, b):
            u = X @ W.T + b
            return 0.5 * u * (1 + tanh(0.7978845608028654 * (u + 0.044715 * u ** 3)))
        return f

    f_jax = by_hand(peers.jnp.tanh) if peers.jax is not None else None
    f_torch = by_hand(peers.torch.tanh) if peers.torch is not None else None
    gemm = 2.0 * A * K * C
    return GradCase("gelu-def", src, "Y", inputs, rng.standard_normal((A, C)), f_jax, f_torch,
                    numpy_fwd=by_hand(np.tanh), flops=three_rows(gemm, 2 * gemm),
                    notes={"forward": "all: the tanh GELU formula written out"})


def cosine(N: int, M: int, K: int, peers: Peers) -> GradCase:
    """Cosine similarity ``C[i, j] = a_i . b_j / (|a_i| |b_j|)``, wrt a, b."""
    rng = np.random.default_rng(23)
    inputs = {"a": rng.standard_normal((N, K)), "b": rng.standard_normal((M, K))}
    src = (f"input a[{N}, {K}], b[{M}, {K}]\nlocal na[{N}], nb[{M}]\noutput C[{N}, {M}]\n"
           "na[i] = sqrt(sum[k](a[i, k] * a[i, k]))\nnb[j] = sqrt(sum[k](b[j, k] * b[j, k]))\n"
           "C[i, j] = sum[k](a[i, k] * b[j, k]) / (na[i] * nb[j])\n")

    def by_hand(sqrt: Any) -> Callable:
        def f(a, b):
            return (a @ b.T) / (sqrt((a * a).sum(1))[:, None] * sqrt((b * b).sum(1))[None, :])
        return f

    f_jax = by_hand(peers.jnp.sqrt) if peers.jax is not None else None
    f_torch = by_hand(peers.torch.sqrt) if peers.torch is not None else None
    gemm = 2.0 * N * M * K
    return GradCase("cosine", src, "C", inputs, rng.standard_normal((N, M)), f_jax, f_torch,
                    numpy_fwd=by_hand(np.sqrt), flops=three_rows(gemm, 2 * gemm),
                    notes={"forward": "all: a b^T over the outer product of the norms"})
