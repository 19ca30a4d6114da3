"""``fuse-inner``: neighbouring loops inside a kernel's body become one loop.

``fuse`` and ``fuse-rows`` join whole kernels; inside the row body they make,
each definition of the chain is still a loop of its own over the row::

    for j { e[b, i, j] = exp(0.125 * e_mm[b, i, j]) }       for j {
    local s_acc = 0                                            let e_v = exp(0.125 * e_mm[b, i, j])
    for j { s_acc += e[b, i, j] }                   ==>        e[b, i, j] = e_v
                                                               s_acc += e_v
                                                             }

Each loop re-reads the row from L1 (or, when the row body's arrays outgrow
it -- layer normalisation's gradient touches seven 8 KB rows -- from L2),
and pays its own loop overhead and vector prologue.  Two loops that are
neighbours in a body (``local`` declarations with constant or independent
initial values between them are moved before the first), have the same
range, and depend on each other only within one iteration, are fused with
``fuse``'s own machinery (:class:`tcc.passes.fuse.Fuser`: the same
ownership test, a value stored by the first loop and read by the second at
the same index forwarded through a ``let``).  Scalars add one rule: the
second loop may not read a scalar the first one assigns (``s_acc`` is only
complete after its loop: ``P = e / s_acc`` must wait), nor assign one the
first reads, and the two may not accumulate into the same scalar (that
would interleave two sums' rounding).  Loops nested inside are fused the
same way, innermost first.

The attention gradient's row body goes from six loops over the row to
three (``e`` with its sum, ``P`` with ``ds``'s sum, ``de`` with ``dQ_lhs``),
layer normalisation's from seven to five.  Runs in the CPU pipeline after
``privatize`` (whose partial rows join the last loop of the row body) and
before ``tile``.  Parallel loops are never fused (a kernel's parallel loop
is its top, which ``fuse`` handles).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tcc.ir.loop_analysis import all_writes, declared_scalars, read_names
from tcc.ir.loops import For, If, Kernel, Local, LoopProgram, Stmt
from tcc.passes.fuse import Fuser
from tcc.passes.pass_base import Level, Pass, PassContext

#: at DEBUG, which loops were fused (docs/logging.md)
logger = logging.getLogger(__name__)


class _InnerFuser:
    def __init__(self, program: LoopProgram) -> None:
        self.fuser = Fuser(program)
        self.buffers = {b.name for b in program.buffers}
        self.sizes = set(program.sizes)
        self.fused = 0

    def scalars(self, names: set[str]) -> set[str]:
        return names - self.buffers

    def pair(self, l1: For, l2: For, outer: set[str]) -> For | None:
        """``l1`` and ``l2`` as one loop, or ``None``."""
        if l1.parallel or l2.parallel:
            return None
        w1, w2 = self.scalars(all_writes((l1,))), self.scalars(all_writes((l2,)))
        r1, r2 = self.scalars(read_names((l1,))), self.scalars(read_names((l2,)))
        declared = set(declared_scalars((l1, l2)))  # scoped to the loops
        if (w1 - declared) & r2 or (w2 - declared) & r1 or (w1 - declared) & (w2 - declared):
            return None
        self.fuser.sizes = self.sizes | outer  # the enclosing loops' variables are fixed in the body
        fused = self.fuser.fuse(Kernel("_l1", (l1,)), Kernel("_l2", (l2,)))
        if fused is None or len(fused.body) != 1 or not isinstance(fused.body[0], For):
            return None
        self.fused += 1
        return fused.body[0]

    def block(self, body: tuple[Stmt, ...], outer: set[str]) -> tuple[Stmt, ...]:
        out: list[Stmt] = []
        for s in body:
            if isinstance(s, For):
                s = replace(s, body=self.block(s.body, outer | {s.var}))
                k = len(out)
                while k > 0 and isinstance(out[k - 1], Local):
                    k -= 1
                between = out[k:]
                if k > 0 and isinstance(out[k - 1], For) and self.movable(between, out[k - 1]):
                    fused = self.pair(out[k - 1], s, outer)
                    if fused is not None:
                        out[k - 1:] = between + [fused]
                        continue
            elif isinstance(s, If):
                s = replace(s, then=self.block(s.then, outer), orelse=self.block(s.orelse, outer))
            out.append(s)
        return tuple(out)

    def movable(self, locals_: list[Stmt], loop: For) -> bool:
        """Whether ``local`` declarations after ``loop`` may move before it: their initial values read
        nothing it writes (and it cannot touch them: they are declared after it)."""
        return not read_names(tuple(locals_)) & all_writes((loop,))


def fuse_inner(program: LoopProgram) -> LoopProgram:
    inner = _InnerFuser(program)
    kernels = []
    for k in program.kernels:
        if k.extern is not None:
            kernels.append(k)
            continue
        before = inner.fused
        body = inner.block(k.body, set())
        if inner.fused != before:
            logger.debug("kernel %s: %d pairs of inner loops fused", k.name, inner.fused - before)
            k = replace(k, body=body)
        kernels.append(k)
    if all(a is b for a, b in zip(kernels, program.kernels)):
        return program
    return replace(program, kernels=tuple(kernels))


@dataclass(frozen=True)
class FuseInner(Pass):
    """Neighbouring loops of one body with equal ranges fuse where their dependences stay in one iteration."""

    name = "fuse-inner"
    level = Level.LOOPS
    summary = "neighbouring loops in a kernel's body (the row loops of a fused chain) become one loop where legal"

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return fuse_inner(program)
