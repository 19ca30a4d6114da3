"""``col2im``: the input gradient of a strided convolution becomes one contraction and a short gather.

The derivative engine writes the input gradient of a stride-2 convolution
``y[b, o, i, j] = sum[c, p, q](x[b, c, 2*i + p, 2*j + q] * w[o, c, p, q])`` as

    dx[b, c, u, v] = sum[z2: max(0, (v - 1) // 2)..min(30, v // 2),
                         z1: max(0, (u - 1) // 2)..min(30, u // 2),
                         z0: 0..31](dy[b, z0, z1, z2] * w[z0, c, u - 2*z1, v - 2*z2])

``w`` is read at ``u - 2*z1``: a window of stride 2, which ``blas`` (stride-1
windows only) cannot give BLAS, so the loops run it -- scalar code whose
bounds change with the parity of ``u`` (8.7 ms of the conv2d benchmark's
backward 14.4 ms, slower than ``jax.jit``).  The pass sums the contracted
index first, for every kernel tap, and gathers the taps afterwards (Caffe's
``col2im``; PyTorch's transposed convolution does the same):

    dx_col[c, k, k2, b, z1, z2] = sum[z0: 0..31](dy[b, z0, z1, z2] * w[z0, c, k, k2])
    dx[b, c, u, v] = sum[z2: max(0, (v - 1) // 2)..min(30, v // 2),
                         z1: max(0, (u - 1) // 2)..min(30, u // 2)](dx_col[c, u - 2*z1, v - 2*z2, b, z1, z2])

The first line is a plain contraction -- ``blas`` makes it one GEMM
(``144 x 32`` times ``32 x 7688``) -- and the second adds at most
``ceil(3 / 2)**2 = 4`` terms per element.

**What is matched.**  A definition whose body is a chain of sums over the
product of two reads where

* every index of a read is a plain variable or a *window* ``±f + c*z + k``:
  ``f`` an index of the definition used nowhere else in either read, ``z`` a
  summed variable read plainly by the *other* read and in no other window,
  ``c != 0``, ``k`` a constant; at least one window has ``|c| >= 2``
  (stride-1 windows alone are ``blas``'s, as shifted GEMMs without an
  intermediate);
* the variables plain in both reads are the *contracted* ones, at least one,
  all summed, each over the whole extent both reads give it, ``0..N - 1``;
  the windows' sums do not depend on them; a variable in both reads that is
  not summed (a batch) is not planned for, nor a read at a size
  (``w[n, ...]``: no variable, it cannot index ``dx_col``).

``dx_col``'s indices are the two reads' without the contracted ones, each
window replaced by a fresh index over its read's extent on that axis; the
read whose plain indices hold the windows' ``z`` comes last (the gather's
innermost loop then reads ``dx_col`` with unit stride) -- the GEMM's result
as laid out, so the result needs no copy.  Every read of the gather is in
bounds because the original read was: ``dx_col`` spans both reads' whole
axes.

**Cost model.**  Each element of ``dx_col`` is a term of the original sum
exactly once -- ``(f, z) -> (±f + c*z + k, z)`` is one to one -- or a tap no
output reads.  Per window, with ``P`` the extent of the windowed axis, ``Z``
that of ``z`` and ``U`` that of ``f``, the grid holds ``P * Z`` taps; the
outputs read about ``min(Z' * min(P, U), U * P / |c|)`` of them, ``Z'`` being
``Z`` cut by the bounds of ``z``'s sum that are over sizes only
(``..min(9, u // 2)`` reads 10 positions whatever ``Z``).  The pass
rewrites when

* the product over the windows of the grid over the taps read is at most
  ``max-waste`` (2; 1.0 per axis above);
* ``dx_col`` holds at most ``max-waste`` times as many elements as the
  result and the two reads together (a dilated forward convolution,
  ``x[b, c, i + 2*p, ...]``, wastes little work but its grid is 75 MB for
  a 7.4 MB result, and measured no faster);
* the GEMM's dimensions (each read's non-contracted extent, the contracted
  extent) are each at least ``min-dim`` (16, as for ``blas``'s windows:
  below it BLAS runs at a fraction of its speed).

Size names count as ``symbolic-size`` (1000, as in ``contract-order``):
large.  The forward strided convolution, ``x[b, c, 2*i + p, ...]``, is not
matched: the free index has the stride there, and a grid over every
position of ``x`` would be ``stride**2`` times the work; the weight
gradient, ``x[b, c, p + 2*z1, ...]``, has the pattern but a grid 21 times
its work on the conv2d benchmark's shapes, and is ``im2col``'s.

The pass is in the CPU pipeline before ``im2col`` and ``blas``, which makes
``dx_col``'s contraction a BLAS call; the GPU pipeline keeps the one loop
nest (a thread per element of ``dx``).  The result is again a program of the
language: it prints, parses back and runs in the interpreter.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from tcc.ir.expr import Access, Binary, Expr, Sum
from tcc.ir.fresh_names import fresh_name
from tcc.ir.index import Affine
from tcc.ir.program import Definition, Program
from tcc.ir.strided_window import Window, product_of_two_reads, windowed_reads
from tcc.passes.pass_base import Level, Pass, PassContext

__all__ = ["Col2im", "col2im_program"]

logger = logging.getLogger(__name__)

#: the smallest GEMM dimension worth the rewrite (``blas``'s windows use the same)
DEFAULT_MIN_DIM = 16
#: how many times the original multiply-adds the intermediate may cost
DEFAULT_MAX_WASTE = 2.0
#: a size name's stand-in for the cost model (``contract-order``'s default too)
DEFAULT_SYMBOLIC_SIZE = 1000


def _match(d: Definition) -> tuple[list[Sum], list[Access], list[list[str | None]], list[Window]] | None:
    """The sums, the two reads, their plain index names (``None`` at a window) and the windows."""
    found = product_of_two_reads(d.body, d.indices)
    if found is None:
        return None
    sums, reads = found
    out, summed = set(d.indices), {s.var for s in sums}
    found_windows = windowed_reads(reads, out, summed)
    if found_windows is None:
        return None
    plain, windows = found_windows
    if not windows or max(abs(w.coef) for w in windows) < 2:
        return None  # stride-1 windows alone are blas's (shifted GEMMs, no intermediate)
    names = [[x for x in p if x is not None] for p in plain]
    zs = [w.var for w in windows]
    contracted = set(names[0]) & set(names[1])
    if not contracted or not contracted <= summed or summed != contracted | set(zs):
        return None  # a shared index that is not summed is a batch: not planned for
    if any(w.var not in names[1 - w.read] or w.var in names[w.read] for w in windows):
        return None
    return sums, reads, plain, windows


def _span(s: Sum, extent: int, sizes: dict[str, int]) -> int:
    """How many values ``s``'s variable can take at most: ``extent``, cut by the bounds that are over
    sizes only (``min(9, u // 2)`` caps it at 10 whatever ``u``)."""
    lo = [b.evaluate(sizes) for b in s.lo if not b.names() or set(b.names()) <= set(sizes)]
    hi = [b.evaluate(sizes) for b in s.hi if not b.names() or set(b.names()) <= set(sizes)]
    return max(min([extent - 1, *hi]) - max([0, *lo]) + 1, 0)


def rewrite(d: Definition, program: Program, taken: set[str], min_dim: int, max_waste: float,
            symbolic_size: int) -> list[Definition]:
    """``d`` as ``[<d>_col, d]`` (see the module docstring), or ``[d]``."""
    found = _match(d)
    if found is None:
        return [d]
    sums, reads, plain, windows = found
    ext = [program.extents_of(f.tensor) for f in reads]
    if ext[0] is None or ext[1] is None or d.extents is None:
        return [d]
    ext_of = [{x: n for x, n in zip(plain[r], ext[r]) if x is not None} for r in (0, 1)]
    contracted = set(ext_of[0]) & set(ext_of[1])
    zero = Affine.constant(0)
    for s in sums:
        if s.var in contracted:
            n = ext_of[0][s.var]
            if n != ext_of[1][s.var] or s.lo != (zero,) or s.hi != (n - 1,):
                return [d]
        elif any(set(b.names()) & contracted for b in s.lo + s.hi):
            return [d]
    sizes = dict.fromkeys(program.sizes(), symbolic_size)

    def num(e: Affine) -> int:
        return max(int(e.evaluate(sizes)), 0)

    k_ext = math.prod(num(ext_of[0][x]) for x in contracted)
    side = [math.prod(num(n) for x, n in zip(plain[r], ext[r]) if x not in contracted) for r in (0, 1)]
    if min(side[0], side[1], k_ext) < min_dim:
        logger.debug("%s: the GEMM %d x %d x %d has a dimension below min-dim %d", d.name, side[0], k_ext, side[1],
                     min_dim)
        return [d]
    out_ext = dict(zip(d.indices, d.extents))
    bounds = {s.var: s for s in sums}
    waste = 1.0
    for w in windows:  # the grid's taps over those the outputs read (the module docstring)
        grid, z, u = num(ext[w.read][w.axis]), num(ext_of[1 - w.read][w.var]), num(out_ext[w.free])
        read = min(_span(bounds[w.var], z, sizes) * min(grid, u), u * grid / abs(w.coef))
        waste *= grid * z / max(read, 1)
    col_size = side[0] * side[1]
    data = math.prod(num(e) for e in d.extents) + sum(math.prod(num(e) for e in es) for es in ext)
    if waste > max_waste or col_size > max_waste * data:
        logger.debug("%s: the intermediate would cost %.3g times the sum's multiply-adds, or hold %d elements "
                     "against %d of the result and the reads (max-waste %g)", d.name, waste, col_size, data,
                     max_waste)
        return [d]
    taps: dict[tuple[int, int], str] = {}
    for w in windows:
        taps[w.read, w.axis] = fresh_name(f"{d.name}_k", taken)
        taken.add(taps[w.read, w.axis])
    cols = [[taps[r, k] if x is None else x for k, x in enumerate(plain[r])] for r in (0, 1)]
    zs = {w.var for w in windows}
    order = sorted((0, 1), key=lambda r: sum(x in zs for x in cols[r]))  # the windows' z innermost: the gather's reads
    col = tuple(x for r in order for x in cols[r] if x not in contracted)
    col_ext = tuple(n for r in order for x, n in zip(cols[r], ext[r]) if x not in contracted)
    name = fresh_name(f"{d.name}_col", taken)
    taken.add(name)
    inner: Expr = Binary("*", *(Access(f.tensor, tuple(Affine.var(x) for x in c)) for f, c in zip(reads, cols)))
    for s in reversed([s for s in sums if s.var in contracted]):
        inner = Sum(s.var, s.lo, s.hi, inner)
    at = {taps[r, k]: reads[r].indices[k] for r, k in taps}
    gather: Expr = Access(name, tuple(at.get(x, Affine.var(x)) for x in col))
    for s in reversed([s for s in sums if s.var not in contracted]):
        gather = Sum(s.var, s.lo, s.hi, gather)
    logger.info("%s: %s = a %d x %d x %d contraction, then a gather of its windows", d.name, name, side[order[0]],
                k_ext, side[order[1]])
    return [Definition(name, col, inner, col_ext, d.loc), d.with_body(gather)]


def col2im_program(program: Program, min_dim: int = DEFAULT_MIN_DIM, max_waste: float = DEFAULT_MAX_WASTE,
                   symbolic_size: int = DEFAULT_SYMBOLIC_SIZE) -> Program:
    taken = program.names_in_use()
    return program.expand_definitions(lambda d: rewrite(d, program, taken, min_dim, max_waste, symbolic_size))


@dataclass(frozen=True)
class Col2im(Pass):
    """The input gradient of a strided convolution becomes a contraction per kernel tap and a gather."""

    name = "col2im"
    level = Level.INDEX
    summary = ("a sum over A[...] * G[..., f - 2*z, ...] (a strided convolution's input gradient) becomes a "
               "contraction <D>_col over every tap, which blas runs as one GEMM, and a gather of the taps")

    # the smallest GEMM dimension (rows, columns, inner) worth the rewrite
    min_dim: int = DEFAULT_MIN_DIM
    # how many times the original sum's multiply-adds the contraction may cost
    max_waste: float = DEFAULT_MAX_WASTE
    # the value assumed for every size name in the cost model
    symbolic_size: int = DEFAULT_SYMBOLIC_SIZE

    def run(self, program: Program, ctx: PassContext) -> Program:
        return col2im_program(program, self.min_dim, self.max_waste, self.symbolic_size)
