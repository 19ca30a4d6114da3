"""``unroll-jam``: unroll a short constant loop around a reduction and jam the copies.

The weight gradient of a 3x3 convolution computes each of the 9 kernel
positions as its own reduction over the whole batch and image:

    for dw_2 in 0..2 { for dw_3 in 0..2 {
      local dw_acc = 0
      for z0, z1, z2 { dw_acc += dy[z0, o, z1, z2] * x[z0, c, dw_2 + 2*z1, dw_3 + 2*z2] }
      dw[o, c, dw_2, dw_3] = dw_acc } }

so ``dy`` is streamed from memory 9 times.  Unrolling the two short loops and
fusing ("jamming") the 9 identical reduction nests gives one nest with 9
accumulators: each ``dy`` element is loaded once and used 9 times, and the
``x`` reads of neighbouring positions hit the same cache lines.

A loop is unrolled when its bounds are constants with at most ``max_trip``
iterations, it is not parallel, and every copy of its body has the shape
*declarations, one reduction band, statements after it*, where the bands of
all copies have the same loops (same variables and bounds -- so they do not
depend on the unrolled variable) and only accumulate into scalars.  The
copies' ``local``/``let`` names get a suffix.  Jamming reorders the copies'
reductions relative to the statements after each band, which is legal
because a band only reads buffers that no statement after a band writes
(checked).  Anything else is left as it was.

The same jam serves a kernel that is one loop with a longer (or symbolic) trip
count around a reduction -- the weight gradient of a correlation, ``dw[v] =
sum[z](dy[z] * x[v + z])``, streams ``dy`` once per ``v``: the loop is
strip-mined by ``strip`` (default 4), each full strip's copies are jammed (one
``dy`` load, ``strip`` accumulators, ``x`` reads in the same cache lines), and
the at most ``strip - 1`` remaining iterations run as a second kernel.

Unrolling composes: the loops of a nest are unrolled innermost first, and an
outer loop's copies are jammed through the loops between them, so a nest of
short loops jams into one band with the *product* of their trip counts as
copies (a rank-10 reduction over extents 2, 3, 4, ... became 41472
accumulators and 41k lines that LLVM needed minutes for).  Two budgets bound
this, and past them the pass unrolls less instead of failing:

* ``max_product`` (default 16): the copies of one original band jammed
  together -- the product of the unroll and strip factors over the loops
  around it: each copy is an accumulator live in the innermost loop, and
  past the registers they spill.  The weight gradient of a 3x3 convolution
  needs 9, ``examples/urban.tcc`` 12.
* ``max_stmts`` (default 512): the statements one input kernel may become,
  all its output kernels together.  An unroll that would pass it is skipped
  (the kernel stays at its input size if that is already larger).
* ``max_nodes`` (default 4096): the expression nodes one unroll or strip may
  add.  Statements do not measure a body that is one long expression: the
  four copies of a 100,000-term sum's statement (``y[i]`` over ``x[4]``)
  took 4.5 s to build and their 400,000 nodes 2.3 s more to lower to LLVM,
  to save a loop of four iterations.  The copies of the bodies this pass is
  for (a convolution's 9, ``urban``'s 12) add a few hundred nodes.

Loops whose range is provably empty (constant bounds, ``for a in 512..511``)
are dropped, and so is a kernel left without statements: strip-mining a
constant trip count that the factor divides leaves no remainder kernel, and
a kernel over a zero extent is no call at all.

Loops are decided innermost first, each unrolled if its copies still fit
both budgets, so the loops nearest the reduction -- whose copies share loads
-- are unrolled first.  A loop that does not fit stays a loop; a shorter loop
outside it may still fit and is jammed through it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from tcc.ir.expr import Access, FreshNames, fresh_name, postorder
from tcc.ir.index import Affine
from tcc.ir.loop_analysis import bound_inside, declared_scalars, fold_bounds, loads, reduction_band, substitute_stmts, walk_exprs, walk_stmts
from tcc.ir.loops import Accumulate, For, If, Kernel, Let, Local, LoopProgram, Stmt, Store
from tcc.passes.pass_base import Level, Pass, PassContext

#: at DEBUG, a loop the budgets (max-product, max-stmts) kept from being unrolled or strip-mined
logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# Rewriting statements
# ---------------------------------------------------------------------------


def _rewrite(body: tuple[Stmt, ...], var: str, value: Affine, names: dict[str, str]) -> tuple[Stmt, ...]:
    """``body`` with ``var`` := ``value`` and scalar names renamed by ``names``."""
    return substitute_stmts(body, {var: value}, names)


# ---------------------------------------------------------------------------
# Bands
# ---------------------------------------------------------------------------


def _band(s: Stmt) -> list[For] | None:
    return reduction_band(s) if isinstance(s, For) else None


def _shape(band: list[For]) -> tuple:
    return tuple((l.var, l.lo, l.hi) for l in band)


def _loads(stmts: tuple[Stmt, ...], buffers: set[str]) -> set[str]:
    """The buffers among ``buffers`` that ``stmts`` load."""
    return {a.tensor for e in walk_exprs(stmts) for a in loads(e) if a.tensor in buffers}


def _written(stmts: tuple[Stmt, ...]) -> set[str]:
    out: set[str] = set()
    for s in walk_stmts(stmts):
        if isinstance(s, Store):
            out.add(s.buffer)
        elif isinstance(s, Accumulate) and s.indices:
            out.add(s.target)
    return out


def _jam(copies: list[tuple[Stmt, ...]], buffers: set[str]) -> tuple[Stmt, ...] | None:
    """One band for all copies, or None when the copies do not have the jammable shape.

    Copies that are each one identical loop (an output loop between the
    unrolled one and the reduction) are jammed inside that loop.
    """
    firsts = [c[0] for c in copies if len(c) == 1 and isinstance(c[0], For)]
    if len(firsts) == len(copies) and _band(firsts[0]) is None:
        if len({(f.var, f.lo, f.hi) for f in firsts}) != 1:
            return None
        inner = _jam([f.body for f in firsts], buffers)
        return None if inner is None else (replace(firsts[0], body=inner),)
    heads: list[Stmt] = []
    tails: list[Stmt] = []
    bands: list[list[For]] = []
    for body in copies:
        pos = [i for i, s in enumerate(body) if isinstance(s, For)]
        if len(pos) != 1:
            return None
        band = _band(body[pos[0]])
        if band is None:
            return None
        head, tail = body[: pos[0]], body[pos[0] + 1 :]
        if not all(isinstance(s, (Local, Let)) for s in head):
            return None
        if any(isinstance(s, For) for s in walk_stmts(tail)):
            return None
        heads.extend(head)
        tails.extend(tail)
        bands.append(band)
    if len({_shape(b) for b in bands}) != 1:
        return None
    band_bodies = [b[-1].body for b in bands]
    reads = set().union(*(_loads(bb, buffers) for bb in band_bodies)) | _loads(tuple(heads), buffers)
    if reads & _written(tuple(tails)):
        return None
    # a scalar a tail accumulates into must not feed a band or head either
    tail_scalars = {t.target for t in walk_stmts(tuple(tails)) if isinstance(t, Accumulate) and not t.indices}
    scalar_reads = {
        a.tensor for e in walk_exprs(tuple(heads) + tuple(s for bb in band_bodies for s in bb)) for a in loads(e) if not a.indices
    }
    if tail_scalars & scalar_reads:
        return None
    inner: tuple[Stmt, ...] = tuple(s for bb in band_bodies for s in bb)
    for l in reversed(bands[0]):
        inner = (replace(l, body=inner),)
    return tuple(heads) + inner + tuple(tails)


# ---------------------------------------------------------------------------
# The pass
# ---------------------------------------------------------------------------


def _count(stmts: tuple[Stmt, ...]) -> int:
    """Statements, nested ones included: the code-size measure of ``max_stmts``."""
    return sum(1 for _ in walk_stmts(stmts))


def _nodes(stmts: tuple[Stmt, ...], limit: int) -> int:
    """The expression nodes of ``stmts`` (the measure of ``max_nodes``), counted up to ``limit + 1``:
    past the budget the exact size does not matter, and a body can be 10^5 nodes deep."""
    count = 0
    for e in walk_exprs(stmts):
        for _ in postorder(e):
            count += 1
            if count > limit:
                return count
    return count


# a ``block`` result: the new statements and the largest product of unroll
# factors jammed into one band among them (1: nothing unrolled)
_Block = tuple[tuple[Stmt, ...], int]


class _UnrollJam(FreshNames):
    def __init__(self, program: LoopProgram, max_trip: int, factor: int = 4,
                 max_product: int = 16, max_stmts: int = 512, max_nodes: int = 4096) -> None:
        self.factor = factor
        self.buffers = {b.name for b in program.buffers}
        self.sizes = set(program.sizes)
        self.max_trip = max_trip
        self.max_product = max_product
        self.max_stmts = max_stmts
        self.max_nodes = max_nodes
        self.taken: set[str] = set()
        self.kernel_names = {k.name for k in program.kernels}
        self.stmts = 0  # statements the current kernel has become so far

    def start_kernel(self, kernel: Kernel) -> None:
        """New names must avoid buffers, sizes and every name the kernel binds."""
        self.stmts = _count(kernel.body)
        self.taken = self.buffers | self.sizes | bound_inside(kernel.body)

    def strip_mine(self, loop: For, factor: int) -> tuple[For, For] | None:
        """``loop`` as full strips of ``factor`` jammed copies, then the remainder loop; None if the
        copies do not jam.  The remainder starts at ``max(lo, lo + factor*strips)``: a symbolic
        trip count may be negative, and then there are no strips at all."""
        lo, hi = loop.lo[0], loop.hi[0]
        strip_var = self.fresh(loop.var + "_s")
        start = lo + Affine.var(strip_var, factor)
        declared = declared_scalars(loop.body)
        copies = [_rewrite(loop.body, loop.var, start + u, self.copy_names(declared, u)) for u in range(factor)]
        jammed = _jam(copies, self.buffers)
        if jammed is None:
            return None
        strips = (hi - lo + 1).floordiv(factor)
        return (
            For(strip_var, (Affine.constant(0),), (strips - 1,), jammed),
            replace(loop, lo=fold_bounds((lo, lo + strips * factor), True)),
        )

    def strip_inner_stmts(self, loop: For, inner: int = 1) -> tuple[Stmt, ...] | None:
        """:meth:`strip_inner`'s two loops, the remainder left out when its range is provably empty."""
        mined = self.strip_inner(loop, inner)
        if mined is None:
            return None
        return mined[:1] if empty_range(mined[1]) else mined

    def copy_names(self, declared: list[str], copy: int) -> dict[str, str]:
        return {n: self.fresh(f"{n}_u{copy}") for n in declared}

    def affordable(self, product: int, added: int, loop: For, copies: int) -> bool:
        """A transformation whose jammed bands hold ``product`` copies, that adds at most
        ``added`` statements to the current kernel and ``copies`` copies of ``loop``'s body, fits
        the three budgets.

        Callers bound ``added`` from above before building anything (``t`` copies
        of a body jam into at most ``t`` times its statements: jamming only
        merges the copies' band loops), so a nest the budget refuses is never
        built.
        """
        if product <= self.max_product and self.stmts + added <= self.max_stmts:
            nodes = _nodes(loop.body, self.max_nodes // max(1, copies))
            if nodes * copies <= self.max_nodes:
                return True
            logger.debug("loop %s not unrolled: over budget: %d copies of a body of at least %d expression "
                         "nodes (max-nodes %d)", loop.var, copies, nodes, self.max_nodes)
            return False
        logger.debug("loop %s not unrolled: over budget: %d copies in a band (max-product %d), "
                     "%d + %d statements (max-stmts %d)", loop.var, product, self.max_product,
                     self.stmts, added, self.max_stmts)
        return False

    def accept(self, old: tuple[Stmt, ...], new: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        """Record that ``old`` became ``new`` in the current kernel."""
        self.stmts += _count(new) - _count(old)
        return new

    def block(self, body: tuple[Stmt, ...], top: bool = False) -> _Block:
        out: list[Stmt] = []
        product = 1
        for s in body:
            if isinstance(s, For):
                inner_body, inner = self.block(s.body)
                s = replace(s, body=inner_body)
                jammed, factor = self.unroll(s, inner), 1
                if jammed is not None:
                    factor = s.hi[0].const - s.lo[0].const + 1
                elif not top:
                    jammed = self.strip_inner_stmts(s, inner)
                    factor = self.factor
                if jammed is not None:
                    out.extend(self.accept((s,), jammed))
                    product = max(product, factor * inner)
                    continue
                product = max(product, inner)
            elif isinstance(s, If):
                then, p_then = self.block(s.then)
                orelse, p_else = self.block(s.orelse)
                s = replace(s, then=then, orelse=orelse)
                product = max(product, p_then, p_else)
            out.append(s)
        return tuple(out), product

    def unroll(self, s: For, inner: int = 1) -> tuple[Stmt, ...] | None:
        """``s`` fully unrolled and jammed, or None; ``inner``: the copies its body's bands already hold."""
        if s.parallel or len(s.lo) != 1 or len(s.hi) != 1:
            return None
        lo, hi = s.lo[0], s.hi[0]
        if not (lo.is_constant and hi.is_constant):
            return None
        first, last = lo.const, hi.const
        if not 2 <= last - first + 1 <= self.max_trip:
            return None
        if _band(s) is not None:
            return None  # s is itself part of a reduction band: interchange's business, not ours
        trips = last - first + 1
        if not self.affordable(trips * max(inner, _accumulators(s.body)), (trips - 1) * _count(s.body), s, trips - 1):
            return None
        declared = declared_scalars(s.body)
        copies = []
        for value in range(first, last + 1):
            names = self.copy_names(declared, value - first)
            copies.append(_rewrite(s.body, s.var, Affine.constant(value), names))
        return _jam(copies, self.buffers)


    def strip_inner(self, loop: For, inner: int = 1) -> tuple[Stmt, ...] | None:
        """An output loop inside a kernel, strip-mined by ``self.factor`` when the
        reductions below it share loads across its iterations (register reuse:
        a convolution's input element serves ``factor`` output channels).
        With the remainder loop, the body is there ``factor + 1`` times."""
        factor = self.factor
        if factor < 2 or loop.parallel or len(loop.lo) != 1 or len(loop.hi) != 1 or _band(loop) is not None:
            return None
        if not self.affordable(factor * inner, factor * _count(loop.body), loop, factor):
            return None
        lo, hi = loop.lo[0], loop.hi[0]
        if lo.is_constant and hi.is_constant and hi.const - lo.const + 1 < 2 * factor:
            return None
        bands = [b for st in walk_stmts(loop.body) if isinstance(st, For) for b in [_band(st)] if b is not None]
        shared = [
            n for b in bands for st in b[-1].body for n in postorder(st.value)
            if isinstance(n, Access) and n.indices and n.tensor in self.buffers
            and not any(loop.var in ix.names() for ix in n.indices)
        ]
        accumulators = sum(1 for b in bands for st in b[-1].body if isinstance(st, Accumulate))
        if not bands or not shared or accumulators * factor > MAX_ACCUMULATORS:
            return None
        return self.strip_mine(loop, factor)

    def strip(self, kernel: Kernel, product: int = 1) -> tuple[Kernel, ...]:
        """A kernel that is one loop (at least ``factor`` iterations or symbolic) around a reduction,
        strip-mined by ``factor``: full strips jammed, the remainder as its own kernel.

        ``for v in lo..hi { acc = 0; for z {..}; out[v] = acc }`` becomes
        ``for b in 0..(hi - lo + 1) // factor - 1 { <factor jammed copies, v := lo + factor*b + u> }``
        then ``for v in lo + factor*((hi - lo + 1) // factor)..hi { <original body> }``.
        Each strip writes its own ``factor`` elements, so both loops stay race-free
        (and the ``parallel`` pass can prove it: the index is ``factor*b + u``).
        ``product``: the copies the kernel's bands already hold (see :meth:`affordable`).
        """
        if len(kernel.body) != 1 or not isinstance(kernel.body[0], For):
            return (kernel,)
        loop = kernel.body[0]
        factor = self.factor
        if loop.parallel or len(loop.lo) != 1 or len(loop.hi) != 1 or factor < 2:
            return (kernel,)
        lo, hi = loop.lo[0], loop.hi[0]
        if lo.is_constant and hi.is_constant and hi.const - lo.const + 1 < factor:
            return (kernel,)
        if _band(loop) is not None:
            return (kernel,)
        if _short_band(loop.body):
            return (kernel,)
        # the band's own accumulators count as copies too: a kernel ``tile`` made has 16 already
        if not self.affordable(factor * max(product, _accumulators(loop.body)), factor * _count(loop.body), loop,
                               factor):
            return (kernel,)
        mined = self.strip_mine(loop, factor)
        if mined is None:
            return (kernel,)
        self.accept(kernel.body, mined)
        if empty_range(mined[1]):  # the strips cover every iteration: no kernel of nothing (~50 us a call)
            return (Kernel(kernel.name, (mined[0],)),)
        rest = fresh_name(kernel.name + "_rest", self.kernel_names)
        self.kernel_names.add(rest)
        return (Kernel(kernel.name, (mined[0],)), Kernel(rest, (mined[1],)))


def _accumulators(body: tuple[Stmt, ...]) -> int:
    """The scalar accumulations in ``body``: a band ``tile`` made holds 16 already, and
    they count against ``max_product`` like jammed copies (each is a live register)."""
    return sum(1 for st in walk_stmts(body) if isinstance(st, Accumulate) and not st.indices)


SHORT_BAND = 1024
# Strip-mining an inner output loop multiplies the accumulators live in the
# innermost loop; beyond what the registers hold it spills (the weight gradient
# of a 3x3 convolution already has 9).
MAX_ACCUMULATORS = 16


def _short_band(body: tuple[Stmt, ...]) -> bool:
    """The reduction in ``body`` has a constant trip count below :data:`SHORT_BAND`.

    Strip-mining pays for long reductions, which stream their operands from
    memory once per copy; a short one (the 31 taps of a correlation's forward
    pass) is already cheap per element, and LLVM vectorises the outer loop of
    the original form better than the jammed one (measured 1.37 vs 1.51 ms).
    """
    trips = 1
    for s in body:
        band = _band(s)
        if band is None:
            continue
        for l in band:
            if len(l.lo) != 1 or len(l.hi) != 1 or not (l.lo[0].is_constant and l.hi[0].is_constant):
                return False
            trips *= max(0, l.hi[0].const - l.lo[0].const + 1)
    return trips < SHORT_BAND


def empty_range(loop: For) -> bool:
    """The loop provably runs no iteration: a constant lower bound exceeds a constant upper bound."""
    los = [b.const for b in loop.lo if b.is_constant]
    his = [b.const for b in loop.hi if b.is_constant]
    return bool(los and his and max(los) > min(his))


def drop_empty(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """``body`` without the loops that provably run no iteration (at any depth).

    Such a loop does nothing, whatever its body; a kernel of them would still
    cost a call (about 50 us for a parallel one) and split the kernels
    around it for ``fuse``.
    """
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, For):
            if empty_range(s):
                continue
            s = replace(s, body=drop_empty(s.body))
        elif isinstance(s, If):
            s = replace(s, then=drop_empty(s.then), orelse=drop_empty(s.orelse))
        out.append(s)
    return tuple(out)


def unroll_jam_program(program: LoopProgram, max_trip: int = 4, strip: int = 4,
                       max_product: int = 16, max_stmts: int = 512, max_nodes: int = 4096) -> LoopProgram:
    u = _UnrollJam(program, max_trip, strip, max_product, max_stmts, max_nodes)
    kernels: list[Kernel] = []
    for k in program.kernels:
        if k.extern is not None:  # an external kernel: no loops
            kernels.append(k)
            continue
        u.start_kernel(k)
        body, product = u.block(drop_empty(k.body), top=True)
        kernels.extend(u.strip(Kernel(k.name, body), product))
    # a kernel left with nothing to do (all its loops empty) is no kernel
    return program.with_kernels(tuple(k for k in kernels if k.body))


@dataclass(frozen=True)
class UnrollJam(Pass):
    """Unroll short constant loops around reductions and fuse the copies' reductions."""

    name = "unroll-jam"
    level = Level.LOOPS
    summary = "unroll short constant loops around a reduction and jam the copies into one nest"

    max_trip: int = 4
    strip: int = 4
    # budgets that keep nested unrolling from multiplying code (module docstring)
    max_product: int = 16
    max_stmts: int = 512
    max_nodes: int = 4096

    def run(self, program: LoopProgram, ctx: PassContext) -> LoopProgram:
        return unroll_jam_program(program, self.max_trip, self.strip, self.max_product, self.max_stmts,
                                  self.max_nodes)
