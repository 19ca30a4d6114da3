"""``reduce-in-place``: accumulate a row of results in its buffer, output loop innermost.

A gather-form gradient computes each element with its own reduction.  For
``db[j, k] = 2 * sum[i](-(df[i, j] * f[i, j] * c[i, i] * (a[i, k] + b[j, k])))``
the reduction runs down the columns of ``df``, ``f`` and ``a`` (a 4 KiB stride
for 512 columns), and recomputes ``df * f * c`` for each of the 64 values of
``k``.  Accumulating the whole row ``db[j, :]`` in place turns it around::

    for j {                                for j {
      for k {                                for k { db[j, k] = 0 }
        local acc = 0                        for i {
        for i { acc += E(i, j, k) }   ==>      for k { db[j, k] += E(i, j, k) }
        let s = acc * 2                      }
        db[j, k] = s                         for k { let s = db[j, k] * 2; db[j, k] = s }
      }                                    }
    }

Now the innermost loop walks ``a[i, :]``, ``b[j, :]`` and ``db[j, :]``
contiguously (and vectorises), and LLVM hoists ``df * f * c`` out of it.
The row stays in L1 cache while the reduction sweeps over it.

When: an output loop ``o`` (not the kernel's outermost loop, which stays the
parallel one) whose body is ``local acc = 0``, one reduction band whose
bounds do not mention ``o``, then ``let``s and exactly one store of the row's
element ``out[..., o]`` with the loop's own indices; the band must not read
``out``; and the stride model must favour it: the loads of the reduction
body are charged, per variable, how far its last index position is from the
contiguous one, and ``o`` must be cheaper than the band's innermost variable.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tcc.ir.expr import Access, Const, Expr, transform
from tcc.ir.index import Affine
from tcc.ir.loop_analysis import loads, reduction_band, stride_cost
from tcc.ir.loops import Accumulate, For, If, Kernel, Let, Local, LoopProgram, Stmt, Store
from tcc.passes.pass_base import Level, Pass, PassContext

#: at DEBUG, a row reduction of the right shape that stays as it is, and why
logger = logging.getLogger(__name__)


class _ReduceInPlace:
    def __init__(self, program: LoopProgram) -> None:
        self.buffers = {b.name for b in program.buffers}

    def block(self, body: tuple[Stmt, ...], outer: list[str]) -> tuple[Stmt, ...]:
        out: list[Stmt] = []
        for s in body:
            if isinstance(s, For):
                done = self.rewrite(s, outer) if outer else None
                if done is not None:
                    out.extend(done)
                    continue
                s = replace(s, body=self.block(s.body, outer + [s.var]))
            elif isinstance(s, If):
                s = replace(s, then=self.block(s.then, outer), orelse=self.block(s.orelse, outer))
            out.append(s)
        return tuple(out)

    def rewrite(self, loop: For, outer: list[str]) -> tuple[Stmt, ...] | None:
        body = loop.body
        if len(body) < 3 or not isinstance(body[0], Local) or not isinstance(body[1], For):
            return None
        acc = body[0].name
        if body[0].init != Const(0):
            return None
        band = reduction_band(body[1])
        if band is None or any(loop.var in b.names() for l in band for b in l.lo + l.hi):
            return None
        inner = band[-1].body
        if not all(isinstance(s, Let) or s.target == acc for s in inner):  # type: ignore[union-attr]
            return None
        tail = body[2:]
        stores = [s for s in tail if isinstance(s, Store)]
        if len(stores) != 1 or not all(isinstance(s, (Let, Store)) for s in tail) or tail[-1] is not stores[0]:
            return None
        store = stores[0]
        own = tuple(Affine.var(v) for v in outer + [loop.var])
        if store.indices != own:
            return None
        values = [s.value for s in inner]
        reads = {a.tensor for v in values for a in loads(v)}
        if store.buffer in reads:
            logger.debug("loop %s (accumulator %s): not reduced in place: the reduction reads %s, its result",
                         loop.var, acc, store.buffer)
            return None
        if stride_cost(loop.var, values, self.buffers) >= stride_cost(band[-1].var, values, self.buffers):
            logger.debug("loop %s (accumulator %s): not reduced in place: %s is not a smaller stride than %s",
                         loop.var, acc, loop.var, band[-1].var)
            return None
        element = Access(store.buffer, own)

        def into_buffer(s: Stmt) -> Stmt:
            if isinstance(s, Accumulate) and s.target == acc:
                return Accumulate(store.buffer, own, s.value)
            return s

        def read_acc(e: Expr) -> Expr:
            return transform(e, lambda n: element if isinstance(n, Access) and n.tensor == acc and not n.indices else n)

        new_inner = tuple(into_buffer(s) for s in inner)
        sweep: tuple[Stmt, ...] = (replace(loop, body=new_inner),)
        for l in reversed(band):
            sweep = (replace(l, body=sweep),)
        finish = tuple(
            Let(s.name, read_acc(s.value)) if isinstance(s, Let) else Store(s.buffer, s.indices, read_acc(s.value))
            for s in tail
        )
        return (
            replace(loop, body=(Store(store.buffer, own, Const(0)),)),
            sweep[0],
            replace(loop, body=finish),
        )


def reduce_in_place_program(program: LoopProgram) -> LoopProgram:
    r = _ReduceInPlace(program)
    return program.with_kernels(
        tuple(k if k.extern is not None else Kernel(k.name, r.block(k.body, [])) for k in program.kernels)
    )


@dataclass(frozen=True)
class ReduceInPlace(Pass):
    """Accumulate rows of results in place so the output loop runs innermost."""

    name = "reduce-in-place"
    level = Level.LOOPS
    summary = "accumulate a row of results in its buffer so the contiguous output loop runs innermost"

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return reduce_in_place_program(program)
