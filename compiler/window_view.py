"""A contraction's windows as plain axes: ``x[b, c, i + p]`` viewed as ``X[b, c, i, p]`` (issue 13 item 3).

A window entry ``u + v`` (or ``u - v``) of ``contract``'s first argument
(:mod:`tcc.ir.contraction`) reads one axis of ``A`` at a position that two
indices make.  Over a copy of ``A`` padded with zeros wherever some read
falls outside it, the window is a strided view with two axes ``u``, ``v``:
nothing is copied but the padding, and the spec becomes a plain one.  The
interpreter contracts that view with ``np.einsum`` (the reference), and the
runtime's general fallback copies it into a matrix stack (``im2col``) for
one GEMM.  Why a view: the reference must not share the runtime's shifted
GEMM plan (``tcc.window_kernel``), or the tests that compare them would
compare the plan with itself.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tcc.ir.contraction import Spec, spec_extents, window
from tcc.ir.window_plan import padding

__all__ = ["window_view"]


def window_view(spec: Spec, a: np.ndarray, b_shape: tuple[int, ...]) -> tuple[Spec, np.ndarray]:
    """The plain spec and the (read-only) view of ``A`` in which every window is two axes ``u``, ``v``."""
    ext, _ = spec_extents(spec, a.shape, b_shape)
    pads = padding(spec, a.shape, b_shape)
    a = np.pad(a, pads) if any(p != (0, 0) for p in pads) else np.ascontiguousarray(a)
    shape: list[int] = []
    strides: list[int] = []
    names: list[str] = []
    offset = 0
    flip: list[int] = []
    for x, n, s, (lo, _) in zip(spec[0], a.shape, a.strides, pads):
        w = window(x)
        if w is None:
            shape.append(n), strides.append(s), names.append(x)
            continue
        u, sign, v = w
        # position u + v (or u - (N - 1) + v' with v' = N - 1 - v, flipped back below) in the padded axis
        start = lo if sign > 0 else lo - (ext[v] - 1)
        offset += start * s
        if sign < 0:
            flip.append(len(shape) + 1)
        shape += [ext[u], ext[v]]
        strides += [s, s]
        names += [u, v]
    if any(n <= 0 for n in shape):
        view = np.zeros([max(n, 0) for n in shape], a.dtype)
    else:
        view = as_strided(a.reshape(-1)[offset // a.itemsize:], shape=shape, strides=strides, writeable=False)
        for axis in flip:
            view = np.flip(view, axis)
    return (tuple(names), spec[1], spec[2]), view
