"""``interchange``: reorder the loops of a reduction so the innermost one walks memory.

``range-bound`` orders a derivative's sums by the algebra (the kernel
variable of the Smith form's last column innermost), not by the memory
layout.  For the weight gradient of a strided convolution that puts the
batch index innermost: every step of the inner loop jumps a whole image.
Reordering the loops of a reduction is legal whenever the loops form a
*band* -- perfectly nested, the innermost body only accumulating into scalar
locals (and ``let``s feeding them), no loop's bounds mentioning another
loop of the band -- because addition is commutative; only the rounding of
the sum changes (the results stay within the usual 1e-12 relative).

The order is chosen by a stride model: for each loop variable, each load of
the innermost body costs how far from the last (contiguous) dimension the
variable appears, so the variable that indexes the last dimensions most
goes innermost.  A loop whose bounds depend on an enclosing loop outside
the band is a window (a delta's ``max(...)..min(...)`` range, a few
iterations) and stays outside the full-range loops: a two-trip inner loop
neither vectorises nor amortises its setup.  Ties keep the original order,
so the pass is deterministic and a no-op on a band already in order.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tcc.ir.loop_analysis import reduction_band, stride_cost
from tcc.ir.loops import For, If, Kernel, LoopProgram, Stmt
from tcc.passes.pass_base import Level, Pass, PassContext

#: at INFO, each reduction band reordered; at DEBUG, a band left in its order
logger = logging.getLogger(__name__)


def _band(loop: For) -> list[For] | None:
    """The perfectly nested loops from ``loop`` down, if they form a reduction band of length >= 2."""
    band = reduction_band(loop)
    if band is None or len(band) < 2:
        return None
    names = {l.var for l in band}
    for l in band:
        for b in l.lo + l.hi:
            if names & set(b.names()):
                return None
    return band


def _reorder(band: list[For], buffers: dict[str, int], outer_loops: set[str]) -> list[For]:
    """The band's loops, outermost first: windows (bounds on enclosing loops), then by decreasing cost."""
    inner = band[-1].body

    def key(item: tuple[int, For]) -> tuple:
        pos, l = item
        window = any(set(b.names()) & outer_loops for b in l.lo + l.hi)
        return (0 if window else 1, -stride_cost(l.var, [st.value for st in inner], buffers), pos)

    return [l for _, l in sorted(enumerate(band), key=key)]


def _rebuild(order: list[For], inner: tuple[Stmt, ...]) -> For:
    body: tuple[Stmt, ...] = inner
    for l in reversed(order):
        body = (replace(l, body=body, parallel=False),)
    first = body[0]
    assert isinstance(first, For)
    return first


class _Interchange:
    def __init__(self, program: LoopProgram) -> None:
        self.buffers = {b.name: b.rank for b in program.buffers}
        self.sizes = set(program.sizes)

    def stmts(self, body: tuple[Stmt, ...], loop_vars: set[str]) -> tuple[Stmt, ...]:
        return tuple(self.stmt(s, loop_vars) for s in body)

    def stmt(self, s: Stmt, loop_vars: set[str]) -> Stmt:
        if isinstance(s, For):
            band = _band(s)
            if band is not None:
                order = _reorder(band, self.buffers, loop_vars)
                if [l.var for l in order] != [l.var for l in band]:
                    logger.info("loops %s reordered to %s", ", ".join(l.var for l in band), ", ".join(l.var for l in order))
                    new = _rebuild(order, band[-1].body)
                    return replace(new, parallel=s.parallel)
                logger.debug("loops %s kept in their order: the innermost has the smallest stride already",
                             ", ".join(l.var for l in band))
                return s
            return replace(s, body=self.stmts(s.body, loop_vars | {s.var}))
        if isinstance(s, If):
            return replace(s, then=self.stmts(s.then, loop_vars), orelse=self.stmts(s.orelse, loop_vars))
        return s


def interchange_program(program: LoopProgram) -> LoopProgram:
    it = _Interchange(program)
    return program.with_kernels(
        tuple(k if k.extern is not None else Kernel(k.name, it.stmts(k.body, set())) for k in program.kernels)
    )


@dataclass(frozen=True)
class Interchange(Pass):
    """Reorder reduction bands so the innermost loop has the smallest stride."""

    name = "interchange"
    level = Level.LOOPS
    summary = "reorder perfectly nested reduction loops by a stride model (innermost = contiguous)"

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return interchange_program(program)
