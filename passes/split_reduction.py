"""``split-reduction``: a long reduction over few outputs becomes partial sums in parallel, then their sum.

The gather form gives one thread per output element.  That is ideal when
there are many outputs and short reductions (Urban's ``da[i, k]``), and poor
when the band is small and the reduction long: the gradient of ``d[i + k]``
in the scaled Urban example has 576 outputs, each a sum over 512 x 64 terms.
A GPU then runs a few hundred threads, each doing a long dependent loop,
on a machine that wants a hundred thousand.  A scalar result
(``s = sum[i](...)``) is worse: one thread.

This pass is TVM's ``rfactor`` in tcc's terms, without atomics or shuffles.
A kernel that is a band of parallel loops (possibly none) around

    local acc = 0
    for r1 in ... { for r in lo..hi { ... acc += ... } }   # perfectly nested down to r
    <epilogue: lets and stores that read acc>

(the loop adds to ``acc`` and never reads it: ``acc += acc * c + ...`` is a
recurrence, which partial sums would get wrong) becomes two kernels:

    kernel K_part {                       # band x P threads
      parallel for <band> { parallel for p in 0..P-1 {
        local acc = 0
        for r1 in ... { for t in max(ceil((lo - p) / P))..min(floor((hi - p) / P)) { ...[r := P*t + p] } }
        K_part[<band - lo>, p] = acc
      } }
    }
    kernel K {                            # band threads, P terms each
      parallel for <band> {
        local acc = 0
        for p in 0..P-1 { acc += K_part[<band - lo>, p] }
        <epilogue>
      }
    }

The loop split is the longest of the perfectly nested reduction loops (the
innermost of equals).  Part ``p`` takes its iterations ``r = p, p + P,
p + 2P, ...`` (a cyclic split): neighbouring threads of the first kernel
read neighbouring ``r``, so on a GPU their loads coalesce, and the bounds
stay affine (ceil/floor by the constant ``P``).  ``P`` never exceeds that
loop's estimated trip count, so no part is left without work.  The sum is reassociated --
``P`` partial sums, then their sum -- so the rounding differs from the
sequential order in the last bits, as any parallel reduction's does.

**When.** Sizes are symbolic, so the decision is made on estimates: a
constant extent counts as itself, anything else as
:data:`SYMBOLIC_EXTENT`.  A kernel is split when its band has fewer than
``threads`` iterations and its reduction at least ``2 * min_work``, and --
if the band has symbolic extents -- when the reduction nest has more
symbolic dimensions than the band (a row sum of unknown shape may be tall
and narrow, where partial sums would only cost memory); ``P``
is the power of two that brings the band to about ``threads`` threads,
keeps at least ``min_work`` terms per part and is at most ``max_parts``.
The GPU pipeline runs it after ``parallel{depth=...}`` (it needs the band
marked); the CPU pipeline does not (its runtime splits only the outermost
loop, and the cyclic split would defeat vectorisation there).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

from tcc.ir.expr import Access, Const, FreshNames
from tcc.ir.index import Affine, Compare
from tcc.ir.loop_analysis import declared_scalars, perfect_nest, program_names, read_names, substitute_stmts, walk_stmts
from tcc.ir.loops import Accumulate, Buffer, For, Kernel, Local, LoopProgram, Stmt, Store
from tcc.ir.polyhedra import program_facts
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)

#: what an extent that is not a constant counts as when estimating work
SYMBOLIC_EXTENT = 1024


def _extent(lo: tuple[Affine, ...], hi: tuple[Affine, ...]) -> int:
    """An estimate of a loop's trip count: the smallest constant ``hi - lo + 1``, else SYMBOLIC_EXTENT."""
    best = None
    for a in lo:
        for b in hi:
            d = b - a
            if d.is_constant:
                n = max(0, d.const + 1)
                best = n if best is None else min(best, n)
    return SYMBOLIC_EXTENT if best is None else best


def _reduction_work(loop: For) -> int:
    """Estimated number of innermost iterations of a reduction nest."""
    inner = [s for s in loop.body if isinstance(s, For)]
    deepest = max((_reduction_work(s) for s in inner), default=1)
    return _extent(loop.lo, loop.hi) * deepest


def _symbolic_depth(loop: For) -> int:
    """How many loops of the deepest path through a nest have no constant trip count."""
    inner = [s for s in loop.body if isinstance(s, For)]
    deepest = max((_symbolic_depth(s) for s in inner), default=0)
    return deepest + (not _constant_extent(loop))


def _constant_extent(loop: For) -> bool:
    return any((b - a).is_constant for a in loop.lo for b in loop.hi)


def _accumulates_only(body: tuple[Stmt, ...], acc: str) -> bool:
    """The reduction loop writes nothing but ``acc`` (and scalars declared inside it),
    and never reads ``acc``: a partial sum would read only its own part's terms
    (``acc += acc * 0.5 + x[k]`` is a recurrence, not a sum)."""
    if acc in read_names(body):
        return False
    declared = set(declared_scalars(body))
    for s in walk_stmts(body):
        if isinstance(s, Store):
            return False
        if isinstance(s, Accumulate) and (s.indices or (s.target != acc and s.target not in declared)):
            return False
    return True


def _split_at(chain: list[For]) -> int:
    """The loop to split: the longest of the chain (the innermost of equals: its loads are the
    likeliest to be contiguous, so neighbouring parts read neighbouring elements)."""
    extents = [_extent(l.lo, l.hi) for l in chain]
    return max(range(len(chain)), key=lambda k: (extents[k], k))


def _largest_power_of_two(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


@dataclass(frozen=True)
class _Shape:
    band: tuple[For, ...]
    local: Local
    loop: For
    epilogue: tuple[Stmt, ...]


def _match(kernel: Kernel) -> _Shape | None:
    band: list[For] = []
    body = kernel.body
    while len(body) == 1 and isinstance(body[0], For) and body[0].parallel:
        band.append(body[0])
        body = body[0].body
    if len(body) < 2 or not isinstance(body[0], Local) or not isinstance(body[1], For):
        return None
    local, loop, epilogue = body[0], body[1], tuple(body[2:])
    if not (isinstance(local.init, Const) and local.init.value == 0) or loop.parallel:
        return None
    if not _accumulates_only(loop.body, local.name):
        return None
    band_vars = {b.var for b in band}
    for b in band:  # rectangular, single bounds: the partial-sum buffer is indexed by v - lo
        if len(b.lo) != 1 or len(b.hi) != 1 or set(b.lo[0].names() + b.hi[0].names()) & band_vars:
            return None
    for s in walk_stmts(epilogue):  # the epilogue must not accumulate into acc again
        if isinstance(s, Accumulate) and s.target == local.name:
            return None
    return _Shape(tuple(band), local, loop, epilogue)


class _Splitter(FreshNames):
    def __init__(self, program: LoopProgram, threads: int, min_work: int, max_parts: int) -> None:
        self.program = program
        self.threads = threads
        self.min_work = min_work
        self.max_parts = max_parts
        self.taken = program_names(program)
        self.facts = program_facts(program.sizes)
        self.temps: list[Buffer] = []

    def parts(self, shape: _Shape) -> int:
        band = math.prod(_extent(b.lo, b.hi) for b in shape.band)
        work = _reduction_work(shape.loop)
        if band >= self.threads or work < 2 * self.min_work:
            return 1
        # With symbolic extents the estimates decide nothing by themselves: split only when the
        # reduction has more symbolic dimensions than the band (Urban's dd: 1 vs 2; a conv's dw:
        # 2 vs 3), never a row sum s[i] = sum[j](...) of unknown shape, which may be tall and
        # narrow (a temp of 32 partial sums per row, most of them empty)
        band_symbolic = sum(not _constant_extent(b) for b in shape.band)
        if band_symbolic and _symbolic_depth(shape.loop) <= band_symbolic:
            return 1
        parts = 1
        while parts * 2 <= self.max_parts and band * parts * 2 <= self.threads and work // (parts * 2) >= self.min_work:
            parts *= 2
        return parts

    def split(self, kernel: Kernel) -> tuple[Kernel, ...]:
        shape = _match(kernel)
        if shape is None:
            return (kernel,)
        chain = perfect_nest(shape.loop)  # the reduction loop and the loops perfectly nested inside it
        m = _split_at(chain)
        loop = chain[m]
        P = min(self.parts(shape), _largest_power_of_two(_extent(loop.lo, loop.hi)))  # no part left empty
        if P < 2:
            return (kernel,)
        extents = [b.hi[0] - b.lo[0] + 1 for b in shape.band]
        if any(not e.is_constant and not self.facts.implies(Compare(">=", e, Affine.constant(0))) for e in extents):
            return (kernel,)  # the partial-sum buffer could get a negative extent
        if any(e.is_constant and e.const < 0 for e in extents):
            return (kernel,)
        name = self.fresh(f"{kernel.name}_part")
        self.temps.append(Buffer(name, tuple(extents) + (Affine.constant(P),), "temp"))
        p = self.fresh("p")
        t = self.fresh(f"{loop.var}_t")
        index = tuple(Affine.var(b.var) - b.lo[0] for b in shape.band)
        acc = shape.local.name
        pv = Affine.var(p)
        # r = P*t + p with lo <= r <= hi  <=>  ceil((lo - p)/P) <= t <= floor((hi - p)/P)
        t_lo = tuple((a - pv).ceildiv(P) for a in loop.lo)
        t_hi = tuple((a - pv).floordiv(P) for a in loop.hi)
        part_loop: Stmt = For(t, t_lo, t_hi, substitute_stmts(loop.body, {loop.var: Affine.var(t) * P + pv}))
        for outer in reversed(chain[:m]):
            part_loop = replace(outer, body=(part_loop,))
        first: tuple[Stmt, ...] = (
            For(p, (Affine.constant(0),), (Affine.constant(P - 1),),
                (Local(acc, Const(0)), part_loop, Store(name, index + (pv,), Access(acc, ()))), parallel=True),
        )
        q = self.fresh("p")
        second: tuple[Stmt, ...] = (
            Local(acc, Const(0)),
            For(q, (Affine.constant(0),), (Affine.constant(P - 1),),
                (Accumulate(acc, (), Access(name, index + (Affine.var(q),))),)),
        ) + shape.epilogue
        for b in reversed(shape.band):
            first = (replace(b, body=first),)
            second = (replace(b, body=second),)
        return Kernel(name, first), Kernel(kernel.name, second)


def split_reductions(program: LoopProgram, threads: int, min_work: int, max_parts: int) -> LoopProgram:
    splitter = _Splitter(program, threads, min_work, max_parts)
    kernels: list[Kernel] = []
    for k in program.kernels:
        kernels.extend([k] if k.extern is not None else splitter.split(k))
    if not splitter.temps:
        return program
    return replace(program, buffers=program.buffers + tuple(splitter.temps), kernels=tuple(kernels))


@dataclass(frozen=True)
class SplitReduction(Pass):
    """Split long reductions over small bands into parallel partial sums and a second kernel that adds them."""

    name = "split-reduction"
    level = Level.LOOPS
    summary = "a long reduction over few outputs becomes P parallel partial sums plus a kernel adding them (rfactor)"

    # aim for about this many threads in the partial-sum kernel
    threads: int = 1 << 17
    # at least this many reduction terms per part
    min_work: int = 32
    max_parts: int = 1024

    def __post_init__(self) -> None:
        self.check_ints("threads", "min_work", "max_parts")

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return split_reductions(program, self.threads, self.min_work, self.max_parts)
