"""Reads at ``±f + c*z + k``: the index pattern of strided convolutions' gradients.

Shared by the passes that rewrite them (``col2im``, ``im2col``): a *window*
pairs an index ``f`` of a definition (coefficient ±1) with a summed variable
``z`` (any coefficient ``c != 0``) and a constant ``k`` -- the input gradient
of a stride-2 convolution reads ``w[o, c, u - 2*z1, ...]``, its weight
gradient ``x[b, c, p + 2*z1, ...]``.  The forward convolution's
``2*i + p`` is not one: there the result's index carries the stride.
"""
from __future__ import annotations

from dataclasses import dataclass

from .expr import Access, Binary, Expr, Sum
from .index import Affine

__all__ = ["Window", "plain_name", "product_of_two_reads", "window", "windowed_reads"]


@dataclass(frozen=True)
class Window:
    read: int   # which of the two reads (0 or 1)
    axis: int   # the read's axis
    free: str   # f
    var: str    # z
    coef: int   # c


def plain_name(ix: Affine) -> str | None:
    """The variable of an index that is one variable alone, else ``None``."""
    names = ix.names()
    return names[0] if len(names) == 1 and ix == Affine.var(names[0]) else None


def window(ix: Affine, read: int, axis: int, out: set[str], summed: set[str]) -> Window | None:
    """``ix`` as ``±f + c*z + k`` (``f`` in ``out``, ``z`` in ``summed``), or ``None``."""
    if len(ix.terms) != 2 or not all(isinstance(a, str) for a, _ in ix.terms):
        return None
    (a, ca), (b, cb) = ix.terms
    if a in summed and b in out:
        (a, ca), (b, cb) = (b, cb), (a, ca)
    if a not in out or b not in summed or abs(ca) != 1:
        return None
    return Window(read, axis, str(a), str(b), cb)


def product_of_two_reads(body: Expr, out: tuple[str, ...]) -> tuple[list[Sum], list[Access]] | None:
    """``sum[z1](sum[z2](... A[...] * B[...]))``: the sums, outermost first, and the two reads -- or
    ``None`` when ``body`` is not that, or a summed variable repeats or is an index of the result."""
    sums: list[Sum] = []
    while isinstance(body, Sum):
        sums.append(body)
        body = body.body
    if not sums or not (isinstance(body, Binary) and body.op == "*"):
        return None
    reads = [body.lhs, body.rhs]
    if not all(isinstance(f, Access) for f in reads):
        return None
    summed = {s.var for s in sums}
    if len(summed) != len(sums) or summed & set(out):
        return None
    return sums, reads  # type: ignore[return-value]


def windowed_reads(reads: list[Access], out: set[str],
                   summed: set[str]) -> tuple[list[list[str | None]], list[Window]] | None:
    """Each read's indices as plain variable names (``None`` at a window), and the windows -- or ``None``
    when an index is neither, a read repeats a variable, two windows share their ``f`` or their ``z``, a
    window's ``f`` is also read plainly, or a plain index is no variable of the sum (a size: ``w[n, ...]``,
    which cannot index an intermediate)."""
    plain = [[plain_name(ix) for ix in f.indices] for f in reads]
    windows = []
    for r, f in enumerate(reads):
        for k, (ix, x) in enumerate(zip(f.indices, plain[r])):
            if x is None:
                w = window(ix, r, k, out, summed)
                if w is None:
                    return None
                windows.append(w)
    names = [[x for x in p if x is not None] for p in plain]
    frees, zs = [w.free for w in windows], [w.var for w in windows]
    if any(len(set(n)) != len(n) for n in names) or len(set(frees)) != len(frees) or len(set(zs)) != len(zs):
        return None
    everything = set(names[0] + names[1])
    if set(frees) & everything or not everything <= out | summed:
        return None
    return plain, windows
