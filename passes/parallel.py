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
``y[4*s + 3]`` do).  One more form is one to one: ``c*v + P*t + r`` where
``t`` is a loop inside and every such term's coefficient is a multiple of
some ``m >= |c|`` times ``v``'s constant trip count -- ``privatize``'s rows
``P*t + p`` of part ``p``.  A 0-d buffer written inside (a scalar
result), two different writes ``y[i]`` and ``y[i + 1]``, or a read of a
written buffer at another index (``y[i - 1]``) fail the test.  This is
exactly the rule :func:`tcc.ir.loops_verifier.verify_loops` checks, so
``--verify-each`` accepts what this pass marks.

Derivative kernels pass by construction: tcc's derivatives are gathers (seed
000, sec. 7), one output element per iteration, reading inputs only.  A
``local`` is per iteration (declared inside the loop), so it never races.
The pass only adds marks; it never clears one.

``depth`` > 1 also marks loops nested directly inside a marked one (the
loop is the only statement of its parent's body), each by the same test with
the enclosing marked variables counted as fixed, up to ``depth`` loops in
all.  Iterations of such a band are pairwise independent: two iterations
that differ in an outer variable are separated by that loop's test (which
covered the whole body), two that agree on the outer ones by the inner
loop's.  The CPU runtime splits only the outermost loop, so its pipeline
keeps ``depth=1``; the GPU backend maps the whole band to the grid (one
thread per output element, not per row), so its pipeline asks for more.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tcc.ir.index import Affine
from tcc.ir.loop_analysis import buffer_accesses, constant_trips, owns, residue_separates
from tcc.ir.loops import For, Kernel, LoopProgram
from tcc.passes.pass_base import Level, Pass, PassContext

#: at DEBUG, why a loop was not marked (``tcc -v``, ``TCC_LOG=debug``; docs/logging.md)
logger = logging.getLogger(__name__)


def race_free(loop: For, buffers: set[str], sizes: set[str]) -> bool:
    """Whether the iterations of ``loop`` (at the top of a kernel) may run in any order, at once."""
    return race(loop, buffers, sizes, explain=False) is None


def race(loop: For, buffers: set[str], sizes: set[str], explain: bool = True) -> str | None:
    """Why iterations of ``loop`` may touch one element that one of them writes, or ``None``.

    Buffers are checked in name order, so the reason given is deterministic;
    without ``explain`` it is just the buffer's name (nothing printed: cheap).
    """
    accesses = buffer_accesses(loop.body, buffers)
    written = sorted({name for name, _, w in accesses if w})
    for name in written:
        of_name = [ix for n, ix, _ in accesses if n == name]
        first = of_name[0]
        if not any(
            _one_to_one(e, loop, sizes) and all(len(ix) == len(first) for ix in of_name) and _strip(of_name, p, e, loop.var)
            for p, e in enumerate(first)
        ):
            if not explain:
                return name
            if not first:
                return f"{name} is written and has no index (a scalar result): every iteration touches it"
            seen = sorted({f"{name}[{', '.join(str(e) for e in ix)}]" for ix in of_name})
            more = f" (and {len(seen) - 3} more)" if len(seen) > 3 else ""
            return (f"{name} is written but no index position is {loop.var} times a constant plus sizes, "
                    f"the same in every access: {', '.join(seen[:3])}{more}")
    return None


def _one_to_one(e: Affine, loop: For, sizes: set[str]) -> bool:
    """``e`` is ``c*v + r`` with ``r`` of sizes, or ``v``'s residue form (``P*t + p``,
    :func:`tcc.ir.loop_analysis.residue_separates`): distinct ``v`` touch distinct elements."""
    if owns(e, loop.var, sizes):
        return True
    return residue_separates(e, loop.var, constant_trips(loop), set(e.names()) - sizes - {loop.var})


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


def _mark(loop: For, buffers: set[str], fixed: set[str], depth: int, kernel: str) -> For:
    """``loop`` and up to ``depth - 1`` loops directly inside it, marked where race-free."""
    if not loop.parallel:
        why = race(loop, buffers, fixed, logger.isEnabledFor(logging.DEBUG))
        if why is not None:
            logger.debug("kernel %s: loop %s not marked parallel: %s", kernel, loop.var, why)
            return loop
        loop = replace(loop, parallel=True)
    if depth > 1 and len(loop.body) == 1 and isinstance(loop.body[0], For):
        inner = _mark(loop.body[0], buffers, fixed | {loop.var}, depth - 1, kernel)
        if inner is not loop.body[0]:
            loop = replace(loop, body=(inner,))
    return loop


def parallelize(program: LoopProgram, depth: int = 1) -> LoopProgram:
    buffers = {b.name for b in program.buffers}
    sizes = set(program.sizes)
    kernels: list[Kernel] = []
    for k in program.kernels:
        if len(k.body) == 1 and isinstance(k.body[0], For):  # never an external kernel
            loop = _mark(k.body[0], buffers, sizes, depth, k.name)
            if loop is not k.body[0]:
                k = replace(k, body=(loop,))
        elif logger.isEnabledFor(logging.DEBUG):
            what = ("an external kernel" if k.extern is not None else "its statement is not a loop"
                    if len(k.body) == 1 else f"{len(k.body)} statements, not one loop")
            logger.debug("kernel %s: not marked parallel: %s (the runtime splits only a one-loop kernel)",
                         k.name, what)
        kernels.append(k)
    return replace(program, kernels=tuple(kernels))


@dataclass(frozen=True)
class Parallel(Pass):
    """Mark the outer loop of each one-loop kernel parallel when its iterations are independent."""

    name = "parallel"
    level = Level.LOOPS
    summary = "the outer loop of a one-loop kernel becomes parallel when every written buffer is indexed one to one by it"

    # how many perfectly nested loops, from the outermost, may be marked
    depth: int = 1

    def __post_init__(self) -> None:
        self.check_ints("depth")

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return parallelize(program, self.depth)
