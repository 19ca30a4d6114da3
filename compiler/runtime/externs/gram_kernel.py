"""Running ``extern gram(X, w) -> G``: ``G = X^T diag(w) X`` with BLAS's ``syrk`` where the weights allow.

A Gram matrix is symmetric, and BLAS's ``syrk`` computes ``A^T A`` from one
operand in half the multiply-adds of a GEMM (NumPy's ``matmul`` calls it when
both operands are the same buffer, one of them transposed).  ``X^T diag(w) X``
is ``A^T A`` with ``A = diag(sqrt(w)) X`` exactly when every weight is ``>= 0``
-- which the compiler cannot prove for the weights a second derivative makes
(the logistic loss's ``w = s (1 - s)`` arrives as a sum of quotients of
exponentials), but the kernel can check in one pass over ``m`` numbers.
So the kernel decides per call:

* every ``w[z] >= 0`` (a NaN fails the test): scale the rows of ``X`` by
  ``sqrt(w)`` into scratch space and call ``syrk``: ``m n`` writes and
  ``m n^2`` multiply-adds;
* otherwise: scale the rows by ``w`` and call GEMM against ``X`` itself:
  ``m n`` writes and ``2 m n^2`` multiply-adds.

The two differ from ``sum[z](X[z, a] * w[z] * X[z, b])`` evaluated in the
written order by rounding only (``sqrt(w)^2`` for ``w``, and the order of
the sum): the interpreter's reference is that sum.
"""
from __future__ import annotations

import numpy as np

from tcc.runtime.externs.contraction_kernel import _scratch_array

__all__ = ["run_gram"]

_SLOT = 3  # contraction_kernel uses scratch slots 0..2


def run_gram(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = x.T @ diag(w) @ x`` (``x``: m x n, ``w``: m, ``out``: n x n)."""
    m, n = x.shape
    if m == 0 or n == 0:
        out[...] = 0
        return
    with np.errstate(all="ignore"):  # inf * 0 is NaN here as in the compiled kernels: no warning
        syrk = bool(np.all(w >= 0))
        scale = np.sqrt(w) if syrk else w
        scaled = _scratch_array(_SLOT, (m, n), out.dtype)
        np.multiply(x, scale[:, None], out=scaled)
        np.matmul(scaled.T, scaled if syrk else x, out=out)
