"""``peel``: split a kernel's loop so the interior has plain inner bounds.

A derivative's windowed sums have bounds like
``for dx_z0 in max(dx_0 + m - n, 0)..min(dx_0, m - 1)`` (the input gradient
of a correlation).  Only near the edges does the ``dx_0`` term win; in the
interior the range is just ``0..m - 1``.  The ``max``/``min`` that depend on
the outer variable keep LLVM from vectorising across outputs: the input
gradient ran 4x slower than the forward pass doing the same arithmetic.

The pass splits the kernel's outer loop ``v`` into head, interior and tail
kernels.  For each inner bound ``max(f, d(v))`` (or ``min``) with exactly one
term ``f`` free of ``v`` and terms ``d`` that are ``c*v + r`` over sizes, the
interior is where every ``d`` loses to ``f`` (``d(v) <= f`` for a lower bound,
``d(v) >= f`` for an upper one): that gives ``v >= L`` or ``v <= U``.  With at
most one ``L`` and one ``U`` (so head and tail are single ranges) the kernel
becomes

    for v in lo..min(hi, L - 1)              { original body }
    for v in max(lo, L)..min(hi, U)           { body, inner bounds just f }
    for v in max(lo, L, U + 1)..hi            { original body }

which cover ``lo..hi`` exactly once, in order.  Each is a kernel of its own,
so each is split over threads.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tcc.ir.index import Affine
from tcc.ir.loop_analysis import fold_bounds, strides_with
from tcc.ir.loops import For, If, Kernel, LoopProgram, Stmt
from tcc.passes.pass_base import Level, Pass, PassContext

#: at DEBUG, a kernel loop whose inner bounds depend on it but that was not peeled, and why
logger = logging.getLogger(__name__)


def _interior(bounds: tuple[Affine, ...], var: str, lower: bool, sizes: set[str]) -> tuple[list[Affine], list[Affine], tuple[Affine, ...]] | None:
    """``(L terms, U terms, simplified bounds)`` for one bound tuple, or None if it does not qualify."""
    free = [b for b in bounds if var not in b.names()]
    dep = [b for b in bounds if var in b.names()]
    if not dep:
        return [], [], bounds
    if len(free) != 1:
        return None
    f = free[0]
    los: list[Affine] = []
    his: list[Affine] = []
    for d in dep:
        if not strides_with(d, var) or not set(d.names()) - {var} <= sizes or not set(f.names()) <= sizes:
            return None
        c = d.coeff(var)
        r = d - Affine.var(var, c)
        # lower bound max(f, c*v + r): need c*v + r <= f;  upper min(f, c*v + r): need c*v + r >= f
        rhs = f - r
        if lower:
            (his if c > 0 else los).append(rhs.floordiv(c) if c > 0 else (-rhs).ceildiv(-c))
        else:
            (los if c > 0 else his).append(rhs.ceildiv(c) if c > 0 else (-rhs).floordiv(-c))
    return los, his, (f,)


def _simplify(body: tuple[Stmt, ...], var: str, sizes: set[str], found: list[tuple[list[Affine], list[Affine]]]) -> tuple[Stmt, ...] | None:
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, For):
            lo = _interior(s.lo, var, True, sizes)
            hi = _interior(s.hi, var, False, sizes)
            if lo is None or hi is None:
                return None
            found.append((lo[0] + hi[0], lo[1] + hi[1]))
            inner = _simplify(s.body, var, sizes, found)
            if inner is None:
                return None
            out.append(replace(s, lo=lo[2], hi=hi[2], body=inner))
        elif isinstance(s, If):
            then = _simplify(s.then, var, sizes, found)
            orelse = _simplify(s.orelse, var, sizes, found)
            if then is None or orelse is None:
                return None
            out.append(If(s.cond, then, orelse))
        else:
            out.append(s)
    return tuple(out)


def _loop(loop: For, lo: tuple[Affine, ...], hi: tuple[Affine, ...], body: tuple[Stmt, ...] | None = None) -> For:
    return replace(loop, lo=fold_bounds(lo, True), hi=fold_bounds(hi, False), body=loop.body if body is None else body)


def peel_kernel(kernel: Kernel, sizes: set[str]) -> tuple[Kernel, ...]:
    if len(kernel.body) != 1 or not isinstance(kernel.body[0], For):  # also an external kernel
        return (kernel,)
    loop = kernel.body[0]
    found: list[tuple[list[Affine], list[Affine]]] = []
    interior = _simplify(loop.body, loop.var, sizes, found)
    if interior is None:
        logger.debug("kernel %s: loop %s not peeled: an inner bound on it is not max/min of one bound "
                     "over sizes and one of stride 1 in %s", kernel.name, loop.var, loop.var)
        return (kernel,)
    ls = [a for los, _ in found for a in los]
    us = [a for _, his in found for a in his]
    if len(ls) > 1 or len(us) > 1:
        logger.debug("kernel %s: loop %s not peeled: %d lower and %d upper edges (one of each at most)",
                     kernel.name, loop.var, len(ls), len(us))
        return (kernel,)
    if not ls and not us:
        return (kernel,)
    kernels: list[Kernel] = []
    mid_lo = loop.lo + tuple(ls)
    mid_hi = loop.hi + tuple(us)
    if ls:
        kernels.append(Kernel(kernel.name + "_head", (_loop(loop, loop.lo, loop.hi + (ls[0] - 1,)),)))
    kernels.append(Kernel(kernel.name, (_loop(loop, mid_lo, mid_hi, interior),)))
    if us:
        kernels.append(Kernel(kernel.name + "_tail", (_loop(loop, loop.lo + tuple(ls) + (us[0] + 1,), loop.hi),)))
    return tuple(kernels)


def peel_program(program: LoopProgram) -> LoopProgram:
    sizes = set(program.sizes)
    kernels: list[Kernel] = []
    for k in program.kernels:
        kernels.extend(peel_kernel(k, sizes))
    return program.with_kernels(tuple(kernels))


@dataclass(frozen=True)
class Peel(Pass):
    """Split a kernel's loop into edges and an interior with plain inner bounds."""

    name = "peel"
    level = Level.LOOPS
    summary = "split a kernel's loop so the interior's inner loops have bounds free of it"

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return peel_program(program)
