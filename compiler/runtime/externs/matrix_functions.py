"""Matrix functions (``inv``, ``adj``, ``det``, ``logdet``), products (``matmul``, ``gram``)
and contractions by ``np.einsum``: the NumPy definitions of the L1 operations that have no
element-wise code.

Both sides use them: the reference interpreter evaluates these operations with them, and
the runtime's external kernels compute matrix functions with them, so the two agree by
construction where LAPACK is the only sensible implementation; the runtime's faster product
plans (:mod:`tcc.runtime.externs.contraction_kernel`, ``gram_kernel``, ``window_kernel``) are
checked against :func:`einsum_contract`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tcc.ir.contraction import has_window
from tcc.ir.diagnostics import TccError
from tcc.runtime.externs.window_view import window_contract

__all__ = ["einsum_contract", "einsum_equation", "matrix_function"]


def _adjugate(a: np.ndarray) -> np.ndarray:
    """adj(A), the transposed cofactor matrix, through the SVD: defined for singular A too.

    With ``A = U diag(s) V^T``, ``adj(A) = det(U) det(V) V diag(p) U^T`` where
    ``p_i`` is the product of the singular values other than ``s_i`` (prefix
    and suffix products, no division), because adj is multiplicative in
    reverse order and ``adj(Q) = det(Q) Q^T`` for orthogonal ``Q``.  For
    nonsingular ``A`` this is ``det(A) inv(A)``; for rank n - 1 it is the
    rank-one matrix the cofactors give; for lower rank it is 0.
    """
    n = a.shape[0]
    if n == 0:
        return np.zeros((0, 0), a.dtype)
    u, s, vh = np.linalg.svd(a)
    prefix = np.concatenate(([1], np.cumprod(s[:-1]))).astype(a.dtype)
    suffix = np.concatenate((np.cumprod(s[::-1][:-1])[::-1], [1])).astype(a.dtype)
    sign = np.sign(np.linalg.det(u) * np.linalg.det(vh))
    return (sign * (vh.T * (prefix * suffix))) @ u.T


def einsum_contract(spec: tuple[tuple[str, ...], ...], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``contract(A[...], B[...])`` as ``np.einsum`` with a letter per index name (the reference
    semantics; the runtime's transpose-reshape-matmul plan is checked against it).  A contraction
    with windows is summed term by term instead (:mod:`tcc.runtime.externs.window_view`)."""
    if has_window(spec):
        return window_contract(spec, a, b)
    return np.einsum(einsum_equation(spec), a, b.astype(a.dtype, copy=False))


def einsum_equation(spec: tuple[tuple[str, ...], ...]) -> str:
    """The ``einsum`` equation (NumPy's, torch's) of a contraction without windows: a letter per index
    name, ``a``-``z`` then ``A``-``Z`` in order of first appearance."""
    letters: dict[str, str] = {}
    for ix in spec:
        for x in ix:
            letters.setdefault(x, chr(ord("a") + len(letters)) if len(letters) < 26 else chr(ord("A") + len(letters) - 26))
    sub = [''.join(letters[x] for x in ix) for ix in spec]
    return f"{sub[0]},{sub[1]}->{sub[2]}"


def matrix_function(fn: str, *args: Any, where: str = "") -> np.ndarray:
    """``inv``, ``adj``, ``det`` or ``logdet`` (``log|det|``) of the square matrix ``a``
    (``matrix_function(fn, a)``), or ``matmul`` of ``a`` and ``b``
    (``matrix_function("matmul", a, b)``: ``a @ b``, NumPy's BLAS), or the weighted
    Gram matrix ``gram`` of ``a`` and the weights ``w`` (``a^T diag(w) a``), in ``a``'s dtype.
    ``where`` names the definition in errors (also accepted as the last
    positional argument, as before ``matmul``).

    ``inv`` of an exactly singular matrix (LAPACK finds a zero pivot) is an
    error naming ``where``; a nearly singular one gives LAPACK's large
    values.  ``det`` of a singular matrix is 0 and ``logdet`` is ``-inf``;
    ``adj`` is computed through the SVD (:func:`_adjugate`) and is defined
    for every matrix.  A 0 x 0 matrix has ``det`` 1.  ``matmul`` needs
    matrices with equal inner extents.
    """
    if args and isinstance(args[-1], str):
        where, args = args[-1], args[:-1]
    if not args:
        raise TccError(f"{fn} needs a matrix")
    a, more = args[0], args[1:]
    if fn == "gram":  # the reference: sum[z](X[z, a] * w[z] * X[z, b]), no syrk (tcc.runtime.externs.gram_kernel)
        x, w = np.asarray(a), np.asarray(more[0]).astype(np.asarray(a).dtype, copy=False)
        return np.matmul((x * w[:, None]).T, x)
    if fn == "matmul":
        if len(more) != 1:
            raise TccError(f"matmul takes two matrices, not {1 + len(more)}")
        a, b = np.asarray(a), np.asarray(more[0])
        # batches of matrices (leading extents equal, or one side a matrix for every member) as np.matmul
        batch_ok = a.ndim == 2 or b.ndim == 2 or a.shape[:-2] == b.shape[:-2]
        if a.ndim < 2 or b.ndim < 2 or not batch_ok or a.shape[-1] != b.shape[-2]:
            raise TccError(
                f"matmul needs matrices with equal inner extents{' in ' + where if where else ''}, "
                f"got shapes {a.shape} and {b.shape}"
            )
        return np.matmul(a, b.astype(a.dtype, copy=False))
    if more:
        raise TccError(f"{fn} takes one matrix, not {1 + len(more)}")
    a = np.asarray(a)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise TccError(f"{fn} needs a square matrix{' in ' + where if where else ''}, got shape {a.shape}")
    dtype = a.dtype
    with np.errstate(all="ignore"):
        if fn == "inv":
            try:
                return np.linalg.inv(a).astype(dtype, copy=False)
            except np.linalg.LinAlgError:
                raise TccError(
                    f"inv of a singular matrix{' in ' + where if where else ''} (LAPACK found a zero pivot)"
                ) from None
        if fn == "det":
            return np.asarray(np.linalg.det(a), dtype=dtype)
        if fn == "logdet":
            return np.asarray(np.linalg.slogdet(a)[1], dtype=dtype)
        if fn == "adj":
            return _adjugate(a).astype(dtype, copy=False)
    raise TccError(f"unknown matrix function '{fn}'")
