"""``im2col``: the weight gradient of a strided convolution reads a copy of its input's windows.

The derivative engine writes the weight gradient of a stride-2 convolution
``y[b, o, i, j] = sum[c, p, q](x[b, c, 2*i + p, 2*j + q] * w[o, c, p, q])`` as

    dw[o, c, p, q] = sum[z2: 0..30, z1: 0..30, z0: 0..7](dy[z0, o, z1, z2] * x[z0, c, p + 2*z1, q + 2*z2])

``x`` is read at ``p + 2*z1``: a window of stride 2, which ``blas`` cannot
give BLAS (its windows have stride 1), and ``col2im``'s grid over every
position of ``x`` would be 21 times the work.  The pass copies the windows
once (Caffe's ``im2col``; PyTorch's CPU convolution does the same) and
leaves a plain contraction:

    dw_im2col[c, p, q, z0, z1, z2] = x[z0, c, p + 2*z1, q + 2*z2]
    dw[o, c, p, q] = sum[z2: 0..30, z1: 0..30, z0: 0..7](dy[z0, o, z1, z2] * dw_im2col[c, p, q, z0, z1, z2])

which ``blas`` makes one GEMM (``32 x 7688`` times ``7688 x 144``).
Measured on the conv2d benchmark's shapes: 2.3-2.4 ms against 4.0-4.2 ms
for the loop nest, the copy included.

**What is matched.**  A definition whose body is a chain of sums over the
product of two reads, ``X`` with one or more windows ``±f + c*z + k``
(:mod:`tcc.ir.strided_window`: ``f`` an index of the definition used
nowhere else, ``z`` a summed variable) and otherwise plain variables, and
``O`` with plain variables only, where

* at least one window has ``|c| >= 2`` (stride-1 windows are ``blas``'s
  shifted GEMMs, which need no copy);
* each window's ``z`` is read by ``O`` and not elsewhere by ``X``;
* every summed variable ranges over ``0..N - 1`` with ``N`` over sizes, and
  that range is the extent of ``O``'s axis it indexes (the copy is indexed
  by the range; a sum clipped by its windows, an input gradient's, is
  ``col2im``'s, which runs first).

The copy ``<D>_im2col`` has ``X``'s free indices in ``X``'s order, each
window replaced by its ``f``, then the summed variables in ``O``'s order:
its rows are the GEMM's free group and its columns the contracted group,
so ``blas`` reads it in place.  Its reads are ``X``'s own, at the same
points: all in bounds.

A dilated forward convolution, ``x[b, c, i + 2*p, j + 2*q]``, is matched
too: a copy 4.2 times the size of ``x``, ``w`` and ``y`` together, 16.5-17.5
ms against 25.0-26.8 ms for the loop nest at 8 x 32 x 64 x 64.

**The forward convolution is not matched**: in ``2*i + p`` the result's
index has the stride, which is not a window.  An im2col copy of it measured
no faster than the loop nest (3.1-3.8 ms against 3.1-3.2 ms on the conv2d
benchmark's shapes): the copy costs what the GEMM saves.

**Cost model.**  The copy writes ``size(<D>_im2col)`` elements for
``W`` (the product of all extents) multiply-adds, a share of ``1 / N_O``
with ``N_O`` the product of ``O``'s free extents that ``X`` lacks (an index
in both reads, the channel of a depthwise convolution, is a batch: each
copied element is then used ``N_O`` times).  As ``blas`` weighs its
transposing copies, the pass rewrites when ``N_O >= copy-cost`` (8), when
the GEMM's three dimensions (the copy's free extent without the batch, the
summed extent, ``N_O``) are each at least ``min-dim`` (16), and when the
copy holds at most ``max-growth`` (8) times as many elements as the result
and the two reads together (a dilated 1-D convolution with 64 taps would
copy 1 GB for 19 MB of data).  Size names count as ``symbolic-size``
(1000).  An index that is a size (``X[n, ...]``) is no variable and is
refused; ``O``'s free axes must be the result's (``blas`` contracts only
reads that cover their tensor), and the copy spans what the result reads
of ``X`` (the result's extents), not all of ``X``.  The pass is in the CPU
pipeline after ``col2im`` and before ``blas``; the GPU pipeline keeps the
loop nest.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from tcc.ir.expr import Access, Binary, Expr, Sum
from tcc.ir.fresh_names import fresh_name
from tcc.ir.index import Affine
from tcc.ir.program import Definition, Program
from tcc.ir.strided_window import product_of_two_reads, windowed_reads
from tcc.passes.pass_base import Level, Pass, PassContext

__all__ = ["Im2col", "im2col_program"]

logger = logging.getLogger(__name__)

#: the smallest GEMM dimension worth the rewrite (``blas``'s windows and ``col2im`` use the same)
DEFAULT_MIN_DIM = 16
#: multiply-adds worth one element copied (``blas``'s ``copy-cost``)
DEFAULT_COPY_COST = 8.0
#: the copy's size at most this many times the result's and the reads' together
DEFAULT_MAX_GROWTH = 8.0
#: a size name's stand-in for the cost model (as in ``contract-order`` and ``col2im``)
DEFAULT_SYMBOLIC_SIZE = 1000


def rewrite(d: Definition, program: Program, taken: set[str], min_dim: int, copy_cost: float, max_growth: float,
            symbolic_size: int) -> list[Definition]:
    """``d`` as ``[<d>_im2col, d]`` (see the module docstring), or ``[d]``."""
    found = product_of_two_reads(d.body, d.indices)
    if found is None or d.extents is None:
        return [d]
    sums, reads = found
    out, summed = set(d.indices), {s.var for s in sums}
    found_windows = windowed_reads(reads, out, summed)
    if found_windows is None:
        return [d]
    plain, windows = found_windows
    if len({w.read for w in windows}) != 1 or max(abs(w.coef) for w in windows) < 2:
        return [d]  # windows in one read only, at least one of stride 2 or more (stride 1 is blas's)
    r = windows[0].read
    (x, o), (px, po) = (reads[r], reads[1 - r]), (plain[r], plain[1 - r])
    zs = {w.var for w in windows}
    if zs & set(px) or not zs <= set(po):
        return [d]
    ex, eo = program.extents_of(x.tensor), program.extents_of(o.tensor)
    if ex is None or eo is None:
        return [d]
    out_ext, ext_o = dict(zip(d.indices, d.extents)), dict(zip(po, eo))
    if any(ext_o[n] != out_ext[n] for n in po if n in out):
        return [d]  # blas contracts only reads that cover their whole tensor
    zero = Affine.constant(0)
    for s in sums:
        if s.var not in ext_o or s.lo != (zero,) or s.hi != (ext_o[s.var] - 1,):  # O's whole axis (over sizes)
            return [d]
    by_axis = {w.axis: w.free for w in windows}
    head = [by_axis.get(k, n) for k, n in enumerate(px) if n not in summed]
    head_ext = [out_ext[n] for n in head]  # the copy spans what the result reads of X, not all of X
    tail = [n for n in po if n in summed]
    shared = set(head) & set(po)  # a batch (groups of a grouped convolution): not a GEMM dimension
    sizes = dict.fromkeys(program.sizes(), symbolic_size)

    def num(es: list[Affine]) -> int:
        return math.prod(max(int(e.evaluate(sizes)), 0) for e in es)

    m = num([e for n, e in zip(head, head_ext) if n not in shared])
    k_ = num([ext_o[z] for z in tail])
    n_o = num([e for n, e in zip(po, eo) if n not in summed and n not in shared])
    if min(m, k_, n_o) < min_dim or n_o < copy_cost:
        logger.debug("%s: the GEMM %d x %d x %d is below min-dim %d, or the copy's share 1/%d above 1/copy-cost",
                     d.name, m, k_, n_o, min_dim, n_o)
        return [d]
    copied = num(head_ext) * k_
    data = num(list(d.extents)) + num(list(ex)) + num(list(eo))
    if copied > max_growth * data:
        logger.debug("%s: the copy's %d elements exceed max-growth %g times the %d of the result and the reads",
                     d.name, copied, max_growth, data)
        return [d]
    name = fresh_name(f"{d.name}_im2col", taken)
    taken.add(name)
    col = tuple(head + tail)
    copy = Definition(name, col, x, tuple(head_ext) + tuple(ext_o[z] for z in tail), d.loc)
    summand: Expr = Access(name, tuple(Affine.var(n) for n in col))
    inner = sums[-1].body
    assert isinstance(inner, Binary)
    summand = Binary("*", summand, o) if inner.lhs is x else Binary("*", o, summand)
    for s in reversed(sums):
        summand = Sum(s.var, s.lo, s.hi, summand)
    logger.info("%s: %s copies the windows of %s (%d x %d), then a %d x %d x %d contraction", d.name, name,
                x.tensor, m, k_, n_o, k_, m)
    return [copy, d.with_body(summand)]


def im2col_program(program: Program, min_dim: int = DEFAULT_MIN_DIM, copy_cost: float = DEFAULT_COPY_COST,
                   max_growth: float = DEFAULT_MAX_GROWTH, symbolic_size: int = DEFAULT_SYMBOLIC_SIZE) -> Program:
    taken = program.names_in_use()
    return program.expand_definitions(
        lambda d: rewrite(d, program, taken, min_dim, copy_cost, max_growth, symbolic_size))


@dataclass(frozen=True)
class Im2col(Pass):
    """The weight gradient of a strided convolution reads a copy of its input's windows: a plain contraction."""

    name = "im2col"
    level = Level.INDEX
    summary = ("a sum over O[...] * X[..., f + 2*z, ...] (a strided convolution's weight gradient) reads a copy "
               "<D>_im2col of X's windows instead: a plain contraction, which blas runs as one GEMM")

    # the smallest GEMM dimension (rows, columns, inner) worth the rewrite
    min_dim: int = DEFAULT_MIN_DIM
    # multiply-adds worth one element copied: the other read's free extent must be at least this
    copy_cost: float = DEFAULT_COPY_COST
    # the copy's size at most this many times that of the result and the two reads together
    max_growth: float = DEFAULT_MAX_GROWTH
    # the value assumed for every size name in the cost model
    symbolic_size: int = DEFAULT_SYMBOLIC_SIZE

    def run(self, program: Program, ctx: PassContext) -> Program:
        return im2col_program(program, self.min_dim, self.copy_cost, self.max_growth, self.symbolic_size)
