"""``hoist``: loop-invariant code motion on L2, in three steps.

``lower-loops`` writes every definition as it reads: a sum inside an element
is a reduction inside that element's loop nest, a factor of a summand is
multiplied in every iteration.  Derivative programs make this expensive,
because the chain rule copies forward subexpressions (``z = X w`` of a
logistic regression) into every element of the derivative.  This pass moves
work to the outermost place where its value is the same:

1. **factor** (step c): ``acc += X * Y`` inside a loop where ``Y`` is
   invariant accumulates ``X`` and multiplies by ``Y`` once after the loop.
   Gradient kernels have this shape all the time: ``dd_acc += -(df[..] *
   f[..]) * (3 * d[dd_0]**2)`` pays for the power in every iteration of two
   loops.  When ``acc`` was declared ``local acc = 0`` just before the loop,
   the product becomes a ``let`` that later reads use; otherwise a fresh
   partial sum ``local t = 0`` is added and ``acc += t * Y`` follows the loop
   (distributivity needs no zero start; the ``let`` form just reads better).
   The product is formed only where some term was added (:func:`.factor.runs_test`):
   the interpreter's empty sum is +0 for any ``Y``, ``0 * inf`` is NaN.  No
   exact test, no factoring (docs/passes.md, "Factoring and IEEE arithmetic").
2. **licm** (step a): a ``let``, or a *reduction* -- ``local acc = 0`` and
   the statements right after it that write nothing but ``acc`` -- whose value
   does not depend on a loop (it mentions neither the loop variable nor a
   name or buffer written inside the loop) moves in front of the loop,
   innermost loops first, so it travels outwards as far as it can.
3. **extract** (step b): a reduction that depends on an inner loop but not on
   an enclosing one -- ``for i { for j { local s = 0; for k { s += A[j, k] } } }``
   -- cannot move in front of ``i`` without losing ``j``.  It becomes its own
   kernel, run just before, that fills a new ``temp`` buffer over the loops it
   depends on (``t[j]``); the original place reads ``let s = t[j]``.  This is
   what makes the Hessian of a logistic regression O(m n^2) instead of
   O(m n^3).  A reduction that depends on no loop at all, in a kernel that is
   one loop nest, also becomes its own kernel (a scalar temp): moving it in
   front of the loop would keep the runtime from splitting that loop over
   threads (:attr:`Kernel.parallel_loop`).  An *expensive* ``let`` (a libm
   call such as ``exp``, or ``**`` with a non-integer exponent) that skips an
   enclosing loop is extracted the same way (option ``extract-lets``): in the
   logistic-regression Hessian ``exp(-y[i] * (X w)[i])`` then costs m calls,
   not m n^2.  Lets the reduction or let reads are recomputed in the new
   kernel; lets nobody reads any more afterwards are dropped.

Moving code must not make it run where it did not run before *and fail*:
code in front of a loop runs even when the loop runs zero times, and an
extracted reduction runs for every point of the loops it keeps, not only
where the dropped loops and tests let it run.  Scalar arithmetic cannot fail
(an ``inf`` nobody reads is harmless), reads can: every moved read -- a load,
or a read of an index array in an index, a loop bound or a condition -- is
proved in bounds on the whole domain it moves to, with Fourier-Motzkin
(:class:`tcc.ir.polyhedra.Facts` from the enclosing loop ranges and tests,
sizes >= 0; :class:`tcc.ir.loop_analysis.ReadsInBounds`), never from a test
it leaves: ``for k in ptr[r[d]]..ptr[r[d] + 1] - 1`` under ``where(r[d] == i,
...)`` reads ``ptr[n + 1]`` for a non-zero no row holds.  An extracted
kernel carries what it can of the tests it leaves (the parts that need only
kept loops, and the bounds the others imply: ``r[d] <= i`` gives ``r[d] <=
n - 1``).  A load that is in
bounds only because the loop it leaves runs at least once (``x[0, k]`` inside
``for i in 0..n - 1`` needs ``n >= 1``) keeps that as a test: ``let v =
where(n >= 1, ..., 0)``, an ``if`` around a reduction's loops or around the
extracted kernel's nest.  What cannot be proved even so stays where it is.

The steps run as licm, factor, licm again (a factor computed by a ``let``
inside the loop is only invariant once the let has moved out; what
factoring leaves behind may move further), then extract.

The package holds one module per phase (:mod:`.factor`, :mod:`.licm`,
:mod:`.extract`), the units they move (:mod:`.units`) and the bounds proofs
they share (:mod:`.safety`); what statements read and write comes from
:mod:`tcc.ir.loop_analysis`, shared with the other L2 passes.  The pass
leaves external kernels (``extern inv(A) -> B``) alone.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tcc.ir.loop_analysis import program_names
from tcc.ir.loops import Buffer, For, Kernel, LoopProgram
from tcc.ir.polyhedra import program_facts
from tcc.passes.pass_base import Level, Pass, PassContext

from .extract import Extract
from .factor import Factor
from .licm import Licm
from .safety import BoundsChecker
from .units import prune_dead

__all__ = ["Hoist", "hoist_program"]


def hoist_program(
    program: LoopProgram, factor: bool = True, licm: bool = True, extract: bool = True, extract_lets: bool = True
) -> LoopProgram:
    """The phases in their order (licm, factor, licm again, extract), each kernel on its own;
    ``taken`` is shared by all of them so fresh names stay fresh across kernels."""
    checker = BoundsChecker(program)
    taken = program_names(program)
    top = program_facts(program.sizes)
    kernels: list[Kernel] = []
    for k in program.kernels:
        if k.extern is not None:  # an external kernel: no loops, nothing to move
            kernels.append(k)
            continue
        body = k.body
        pinned = len(body) == 1 and isinstance(body[0], For)
        if licm:
            body = Licm(checker, body, k.name).block(body, top, pinned=pinned)
        if factor:
            # after a first licm: a factor computed by a let inside the loop
            # (``let v = s[i]**2`` in a loop over j) is invariant only outside it
            body = Factor(checker, taken).block(body, top, frozenset())
        if licm and factor:
            body = Licm(checker, body, k.name).block(body, top, pinned=pinned)
        kernels.append(replace(k, body=body))
    temps: list[Buffer] = []
    if extract:
        ex = Extract(program, checker, taken, extract_lets)
        out: list[Kernel] = []
        for k in kernels:
            out.extend([k] if k.extern is not None else ex.kernels(k))
        kernels = [replace(k, body=prune_dead(k.body)) for k in out]
        temps = ex.temps
    return replace(program, buffers=program.buffers + tuple(temps), kernels=tuple(kernels))


@dataclass(frozen=True)
class Hoist(Pass):
    """Loop-invariant code motion on L2: factor invariant multipliers out of
    accumulations, move invariant lets and reductions out of loops, and turn
    reductions that skip an enclosing loop into kernels filling temps.

    Each step can be switched off (``hoist{extract=false}``) to see what the
    others do on their own; ``extract-lets=false`` extracts reductions only.
    """

    name = "hoist"
    level = Level.LOOPS
    summary = "loop-invariant code motion: invariant factors, lets and reductions move out; skipped loops become temps"

    factor: bool = True
    licm: bool = True
    extract: bool = True
    extract_lets: bool = True

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return hoist_program(program, self.factor, self.licm, self.extract, self.extract_lets)
