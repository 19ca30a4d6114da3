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
layer normalisation, which has no contraction, has no GFLOP/s.  Rates are
compared with :func:`matmul_peak`, NumPy's float64 product of two square
matrices on all cores.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Any

import numpy as np

from problems import BO, FB, GradCase, Peers

FAMILIES = ("dense", "attention", "conv2d-s1", "contract3", "quadform", "layernorm")
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

    # cheapest pairwise orders: T = (A C) B, dA = (dT C^T) B^T, dB and dC: two n^4 products each
    step = 2.0 * n ** 4
    return GradCase("contract3", src, "T", inputs, rng.standard_normal((n, n, n)), f_jax, f_torch,
                    numpy_fwd=lambda A, B, C: np.einsum(spec, A, B, C, optimize=True),
                    flops=three_rows(2 * step, 6 * step),
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
