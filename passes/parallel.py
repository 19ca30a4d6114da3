"""``parallel``: mark the outer loop of a kernel ``parallel`` when no two
iterations can touch the same element that one of them writes.

The runtime splits a kernel's loop over threads (CPU) or GPU threads only
when the kernel is exactly one ``for`` (:attr:`Kernel.parallel_loop`): then
every part runs the same code on its own iterations and nothing outside the
loop would run once per thread.  So only such kernels are considered, and
only their outermost loop; the runtime chooses how many threads to use.

Iterations of ``for v`` are independent when, for every buffer written
anywhere inside the loop, there is an index position whose expression is the
same in *every* access to that buffer inside the loop (writes and reads) and
has the form ``c*v + r`` with ``c != 0``, ``v`` not inside ``//`` or ``%``,
and ``r`` made of sizes only (no variable of a loop inside).  That
expression is one to one in ``v``, so iteration ``v`` only touches elements
whose coordinate there is its own (the expressions may also differ by
constants spanning less than ``|c|``, as strip-mined code's ``y[4*s]`` ..
``y[4*s + 3]`` do).  A 0-d buffer written inside (a scalar
result), two different writes ``y[i]`` and ``y[i + 1]``, or a read of a
written buffer at another index (``y[i - 1]``) fail the test.  This is
exactly the rule :func:`tcc.ir.loops_verifier.verify_loops` checks, so
``--verify-each`` accepts what this pass marks.

Derivative kernels pass by construction: tcc's derivatives are gathers (seed
000, sec. 7), one output element per iteration, reading inputs only.  A
``local`` is per iteration (declared inside the loop), so it never races.
The pass only adds marks; it never clears one.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tcc.ir.index import Affine
from tcc.ir.loops import For, Kernel, LoopProgram, strides_with
from tcc.pass_base import Level, Pass, PassContext
from tcc.passes.fuse import buffer_accesses


def separates(ix: Affine, var: str, sizes: set[str]) -> bool:
    """``ix`` is ``c*var + r`` with ``c != 0``, var outside ``//``/``%``, and ``r`` over sizes only."""
    return strides_with(ix, var) and set(ix.names()) - {var} <= sizes


def race_free(loop: For, buffers: set[str], sizes: set[str]) -> bool:
    """Whether the iterations of ``loop`` (at the top of a kernel) may run in any order, at once."""
    accesses = buffer_accesses(loop.body, buffers)
    written = {name for name, _, w in accesses if w}
    for name in written:
        of_name = [ix for n, ix, _ in accesses if n == name]
        first = of_name[0]
        if not any(
            separates(e, loop.var, sizes) and all(len(ix) == len(first) for ix in of_name) and _strip(of_name, p, e, loop.var)
            for p, e in enumerate(first)
        ):
            return False
    return True


def _strip(of_name: list, p: int, e: Affine, var: str) -> bool:
    """Every access has ``e + d`` at ``p`` for constants ``d`` spanning less than ``|coeff of var|``
    (``y[4*s]`` .. ``y[4*s + 3]`` never meet across iterations; ``y[i]``, ``y[i + 1]`` do)."""
    offsets = []
    for ix in of_name:
        d = ix[p] - e
        if not d.is_constant:
            return False
        offsets.append(d.const)
    return max(offsets) - min(offsets) < abs(e.coeff(var))


def parallelize(program: LoopProgram) -> LoopProgram:
    buffers = {b.name for b in program.buffers}
    sizes = set(program.sizes)
    kernels: list[Kernel] = []
    for k in program.kernels:
        if len(k.body) == 1 and isinstance(k.body[0], For) and not k.body[0].parallel:
            loop = k.body[0]
            if race_free(loop, buffers, sizes):
                k = replace(k, body=(replace(loop, parallel=True),))
        kernels.append(k)
    return replace(program, kernels=tuple(kernels))


@dataclass(frozen=True)
class Parallel(Pass):
    """Mark the outer loop of each one-loop kernel parallel when its iterations are independent."""

    name = "parallel"
    level = Level.LOOPS
    summary = "the outer loop of a one-loop kernel becomes parallel when every written buffer is indexed one to one by it"

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return parallelize(program)
