"""A windowed contraction computed term by term, as its sum says: the reference.

``contract(A[..., u + v, ...], B[...])`` (:mod:`tcc.ir.contraction`) is
the sum over the terms whose read of ``A`` is in range; terms that would read
outside ``A`` are left out, not multiplied by a zero -- on an ``inf`` in
``B`` the two differ (``0 * inf`` is NaN).  For each value of each window's
smaller index (the *offset*), the other index runs over an interval, so the
terms of that offset are a plain contraction of slices of ``A``, ``B`` and
the result, done with ``np.einsum``.

The interpreter computes windowed contractions this way, and the runtime
does whenever an operand that its shifted GEMMs would multiply by padding
or by the zeros of a widened layout is not all finite
(``tcc.runtime.externs.window_kernel``).  It shares nothing with the GEMM plan but the
extents, so tests that compare the two compare two methods.
"""
from __future__ import annotations

from itertools import product

import numpy as np

from tcc.ir.contraction import Spec, spec_extents, window

__all__ = ["window_contract"]


def _letters(spec: Spec) -> dict[str, str]:
    out: dict[str, str] = {}
    for ix in spec:
        for x in ix:
            w = window(x)
            for n in ((w[0], w[2]) if w else (x,)):
                if n not in out:
                    k = len(out)
                    out[n] = chr(ord("a") + k) if k < 26 else chr(ord("A") + k - 26)
    return out


def window_contract(spec: Spec, a: np.ndarray, b: np.ndarray, dtype: np.dtype | None = None) -> np.ndarray:
    """``contract(A[...], B[...])`` for a spec whose first argument reads windows, in ``dtype`` (``a``'s)."""
    ia, ib, io = spec
    dtype = np.dtype(dtype or a.dtype)
    ext, bad = spec_extents(spec, a.shape, b.shape)
    assert bad is None, bad
    out = np.zeros([max(ext[x], 0) for x in io], dtype)
    wins = []
    for k, x in enumerate(ia):
        w = window(x)
        if w is not None:
            u, sign, v = w
            off, pos = (v, u) if sign < 0 or ext[v] <= ext[u] else (u, v)
            wins.append((k, off, pos, sign if off == v else 1))
    if out.size == 0 or any(ext[x] <= 0 for x in ext):
        return out
    letters = _letters(spec)
    a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
    for values in product(*(range(ext[off]) for _, off, _, _ in wins)):
        at = {off: t for (_, off, _, _), t in zip(wins, values)}
        span: dict[str, slice] = {}
        a_index: list[object] = [slice(None)] * a.ndim
        for (k, off, pos, coef), t in zip(wins, values):
            lo, hi = max(0, -coef * t), min(ext[pos] - 1, a.shape[k] - 1 - coef * t)  # 0 <= pos + coef*t <= E-1
            if lo > hi:
                break
            span[pos] = slice(lo, hi + 1)
            a_index[k] = slice(lo + coef * t, hi + coef * t + 1)
        else:
            a_names = [n for x in ia for n in ([next(p for k, _, p, _ in wins if ia[k] == x)] if window(x) else [x])]
            b_index = tuple(at[x] if x in at else span.get(x, slice(None)) for x in ib)
            o_index = tuple(at[x] if x in at else span.get(x, slice(None)) for x in io)
            sub = (''.join(letters[n] for n in a_names), ''.join(letters[x] for x in ib if x not in at),
                   ''.join(letters[x] for x in io if x not in at))
            out[o_index] += np.einsum(f"{sub[0]},{sub[1]}->{sub[2]}", a[tuple(a_index)], b[b_index])
    return out
